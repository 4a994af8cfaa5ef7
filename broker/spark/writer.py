"""df.write.format("rocketmq") and writeStream.format("rocketmq"): Arrow writers (Spark hands each
task its rows as pyarrow RecordBatches, no Row objects), producing through produce.py.

The input's columns are checked on the driver before any task starts: `body` (binary or
string) is required; `keys` (string, or array of strings), `tags` (string), `properties`
(map<string,string>) and `queueId` (integer) are optional; any other column is refused, since
a misspelt one (tag, key) would otherwise be dropped without a word."""
from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from broker.spark.errors import RocketMQSinkError
from broker.spark.options import WriteOptions
from broker.spark.produce import WriteSummary, produce
from broker.spark.schema import SINK_COLUMNS

_ACCEPTED = {
    "body": ((BinaryType, StringType), "binary or string"),
    "keys": ((StringType, ArrayType), "string or array<string>"),
    "tags": ((StringType,), "string"),
    "properties": ((MapType,), "map<string,string>"),
    "queueId": ((IntegerType, LongType, ShortType, ByteType), "an integer"),
}


def check_input(schema: StructType, topic: str) -> None:
    names = {f.name: f.dataType for f in schema.fields}
    if "body" not in names:
        raise RocketMQSinkError(f"writing to topic {topic} needs a 'body' column (binary or string); the rows have "
                                f"{sorted(names)}")
    for name, typ in names.items():
        if name not in _ACCEPTED:
            raise RocketMQSinkError(f"column {name!r} is not one the rocketmq sink writes "
                                    f"({', '.join(SINK_COLUMNS)}); select or rename it first")
        classes, what = _ACCEPTED[name]
        ok = isinstance(typ, classes)
        if isinstance(typ, ArrayType):
            ok = ok and isinstance(typ.elementType, StringType)
        if isinstance(typ, MapType):
            ok = isinstance(typ.keyType, StringType) and isinstance(typ.valueType, StringType)
        if not ok:
            raise RocketMQSinkError(f"column {name!r} must be {what}, not {typ.simpleString()}")


class RocketMQWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions):
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        return produce(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # every message was stored when its send was acknowledged: nothing to publish

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # acknowledged messages cannot be taken back (at least once)


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions):
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteSummary:
        return produce(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
