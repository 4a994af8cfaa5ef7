"""A PySpark data source and sink for the broker's topics (Spark's Python Data Source API).

    from broker.spark import register
    register(spark)                       # spark.dataSource.register(RocketMQDataSource)
    df = (spark.read.format("rocketmq").option("namesrvAddr", "127.0.0.1:9876")
          .option("topic", "Orders").load())

Reading pulls through the remoting protocol and writing goes through the project's Producer,
so Spark's workers need only network access to the name server and brokers. See docs/spark.md.

Modules, one concern each (imports go one way: broker.spark uses broker.client, nothing in the
broker uses broker.spark): source (the DataSource), batch_reader, stream_reader, writer (Spark's
classes); options, offsets (startingOffsets/endingOffsets), partitions (what one task reads),
meta (driver-side lookups), pull (a task's pulls), arrow (records to RecordBatches), produce (a
task's sends), schema, errors.
"""
from __future__ import annotations

from broker.spark.errors import RocketMQOptionError, RocketMQSinkError, RocketMQSourceError, RocketMQSparkError
from broker.spark.schema import SCHEMA
from broker.spark.source import RocketMQDataSource

__all__ = [
    "SCHEMA",
    "RocketMQDataSource",
    "RocketMQOptionError",
    "RocketMQSinkError",
    "RocketMQSourceError",
    "RocketMQSparkError",
    "register",
]


def register(spark) -> None:
    """Make format("rocketmq") known to this SparkSession."""
    spark.dataSource.register(RocketMQDataSource)
