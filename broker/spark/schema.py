"""The rows the source yields, as a Spark schema and as the Arrow schema Spark expects of the
RecordBatches read() yields: a batch must equal it exactly (types, time zone, nullability, the
map's field names) or Spark fails the task with DATA_SOURCE_RETURN_SCHEMA_MISMATCH, so it is
derived from the Spark schema by Spark's own converter rather than written by hand."""
from __future__ import annotations

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
                               BinaryType,
                               IntegerType,
                               LongType,
                               MapType,
                               StringType,
                               StructField,
                               StructType,
                               TimestampType,
)

SCHEMA = StructType([
    StructField("topic", StringType(), False),
    StructField("brokerName", StringType(), False),
    StructField("queueId", IntegerType(), False),
    StructField("queueOffset", LongType(), False),
    StructField("msgId", StringType(), False),  # the broker's offsetMsgId (store host + commit-log offset)
    StructField("keys", StringType(), True),  # KEYS property, space-separated as sent; null when none
    StructField("tags", StringType(), True),  # TAGS property; null when none
    StructField("properties", MapType(StringType(), StringType(), True), False),  # all of them, TAGS/KEYS too
    StructField("body", BinaryType(), False),  # inflated when the producer compressed it
    StructField("bornTimestamp", TimestampType(), False),
    StructField("storeTimestamp", TimestampType(), False),
])

# UTC: Spark reads timestamp[us, tz=UTC] as instants whatever the session time zone is
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")

# The columns a sink accepts; only `body` is required.
SINK_COLUMNS = ("body", "keys", "tags", "properties", "queueId")
