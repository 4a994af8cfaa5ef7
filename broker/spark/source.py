"""The Python data source Spark registers under the name "rocketmq"."""
from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from broker.spark.batch_reader import RocketMQBatchReader
from broker.spark.errors import RocketMQOptionError, RocketMQSinkError
from broker.spark.options import ReadOptions, WriteOptions
from broker.spark.schema import SCHEMA
from broker.spark.stream_reader import RocketMQStreamReader
from broker.spark.writer import RocketMQStreamWriter, RocketMQWriter, check_input


class RocketMQDataSource(DataSource):
    """spark.read / readStream / write / writeStream .format("rocketmq"); options in docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        return SCHEMA

    def _check_read_schema(self, schema: StructType) -> None:
        # the rows are what a message is; a user-given schema cannot change that
        if schema is not None and schema != SCHEMA:
            raise RocketMQOptionError("schema", f"the rocketmq source has a fixed schema: {SCHEMA.simpleString()}")

    def reader(self, schema: StructType) -> RocketMQBatchReader:
        self._check_read_schema(schema)
        return RocketMQBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> RocketMQStreamReader:
        self._check_read_schema(schema)
        return RocketMQStreamReader(ReadOptions.parse(self.options, streaming=True))

    def _write_options(self, schema: StructType, overwrite: bool) -> WriteOptions:
        opts = WriteOptions.parse(self.options)
        if overwrite:
            raise RocketMQSinkError(f"topic {opts.topic} can only be appended to (use mode 'append')")
        check_input(schema, opts.topic)
        return opts

    def writer(self, schema: StructType, overwrite: bool) -> RocketMQWriter:
        return RocketMQWriter(self._write_options(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> RocketMQStreamWriter:
        return RocketMQStreamWriter(self._write_options(schema, overwrite))
