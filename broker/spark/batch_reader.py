"""spark.read.format("rocketmq"): the offsets are fixed when the query is planned (on the
driver), one partition per queue range; read() runs in the workers."""
from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader

from broker.spark import offsets as off
from broker.spark.errors import RocketMQSourceError
from broker.spark.meta import TopicMeta
from broker.spark.options import ReadOptions
from broker.spark.partitions import QueueRange, plan
from broker.spark.pull import read_range


class RocketMQBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions):
        self.opts = opts  # all the state there is: it is pickled into every task

    def partitions(self) -> list[QueueRange]:
        o = self.opts
        start_spec = off.parse_spec("startingOffsets", o.starting_offsets, o.topic, off.EARLIEST)
        end_spec = off.parse_spec("endingOffsets", o.ending_offsets, o.topic, off.LATEST)
        if end_spec == off.EARLIEST:
            raise RocketMQSourceError("rocketmq option 'endingOffsets': earliest is not an end (use latest or JSON)")
        with TopicMeta(o.namesrv_addr, o.topic, o.pull_group) as meta:
            queues = meta.queues()
            mins, maxs = meta.min_offsets(queues), meta.max_offsets(queues)
            if o.starting_timestamp is not None:
                starts = meta.offsets_at(queues, o.starting_timestamp)
            else:
                starts = off.resolve("startingOffsets", start_spec, queues, mins, maxs, off.EARLIEST)
        starts = off.clamp("startingOffsets", starts, mins, maxs, o.fail_on_data_loss)
        ends = off.clamp("endingOffsets", off.resolve("endingOffsets", end_spec, queues, mins, maxs, off.LATEST),
                         mins, maxs, o.fail_on_data_loss)
        for k in starts:
            if starts[k] > ends[k]:
                raise RocketMQSourceError(f"queue {k} of {o.topic}: starting offset {starts[k]} is past the ending "
                                          f"offset {ends[k]}")
        return plan(queues, starts, ends, o.max_records_per_partition)

    def read(self, partition: QueueRange) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts, partition)
