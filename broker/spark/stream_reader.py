"""spark.readStream.format("rocketmq"): a DataSourceStreamReader over every queue of the topic.

An offset is {"brokerName:queueId": next offset to read} (plain JSON, which Spark writes to its
checkpoint: the checkpoint is the source of truth, a restart resumes exactly after the last
committed batch). Planning (initialOffset, latestOffset, partitions, commit) runs in one
long-lived Python process on the driver, so its client is kept between calls; read() runs on
copies of this reader in the workers, which is why __getstate__ leaves the client out.
"""
from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from broker.client.route import MessageQueue
from broker.spark import offsets as off
from broker.spark.meta import TopicMeta
from broker.spark.options import ReadOptions
from broker.spark.partitions import QueueRange, plan
from broker.spark.pull import read_range


def admit(start: dict[str, int], latest: dict[str, int], max_rows: int) -> dict[str, int]:
    """At most `max_rows` more rows over all queues, shared in proportion to each queue's backlog
    (as Kafka's maxOffsetsPerTrigger); every queue with a backlog moves on by at least one row
    unless the budget is spent, so no queue starves."""
    backlog = {k: latest[k] - start.get(k, 0) for k in latest if latest[k] > start.get(k, 0)}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    end = {k: start.get(k, latest[k]) for k in latest}
    left = max_rows
    for k in sorted(backlog, key=lambda k: -backlog[k]):
        take = min(backlog[k], max(1, backlog[k] * max_rows // total), left)
        end[k] += take
        left -= take
    for k in sorted(backlog):  # what flooring left over, to the first queues with room
        if left <= 0:
            break
        take = min(latest[k] - end[k], left)
        end[k] += take
        left -= take
    return end


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions):
        self.opts = opts
        self._meta: TopicMeta | None = None
        self._target: dict[str, int] | None = None  # frozen latest offsets of an availableNow run

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_meta"] = None  # a loop and sockets: each process opens its own
        return state

    @property
    def meta(self) -> TopicMeta:
        if self._meta is None:
            self._meta = TopicMeta(self.opts.namesrv_addr, self.opts.topic, self.opts.pull_group)
        return self._meta

    def _latest(self) -> tuple[dict[str, int], dict[str, int]]:
        """(min, max) offsets of every queue the topic has now (new queues show up here)."""
        queues = self.meta.queues(refresh=True)
        return self.meta.min_offsets(queues), self.meta.max_offsets(queues)

    def initialOffset(self) -> dict:
        o = self.opts
        queues = self.meta.queues(refresh=True)
        mins, maxs = self.meta.min_offsets(queues), self.meta.max_offsets(queues)
        if o.starting_timestamp is not None:
            starts = self.meta.offsets_at(queues, o.starting_timestamp)
        else:
            spec = off.parse_spec("startingOffsets", o.starting_offsets, o.topic, off.LATEST)
            starts = off.resolve("startingOffsets", spec, queues, mins, maxs, off.EARLIEST)
        return off.clamp("startingOffsets", starts, mins, maxs, o.fail_on_data_loss)

    def prepareForTriggerAvailableNow(self) -> None:
        # what exists now is the target; later sends wait for the next run
        self._target = self._latest()[1]

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_rows_per_trigger is not None:
            return ReadMaxRows(self.opts.max_rows_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        start = off.decode_stream_offset(start)
        mins, maxs = self._latest()
        if self._target is not None:
            maxs = {k: min(v, self._target.get(k, mins[k])) for k, v in maxs.items()}
        # a queue new since `start` is read from its earliest offset (it is all new)
        latest = {k: max(v, start.get(k, mins[k])) for k, v in maxs.items()}
        begin = {k: start.get(k, mins[k]) for k in latest}
        if isinstance(limit, ReadMaxRows):
            return admit(begin, latest, limit.max_rows)
        return latest

    def partitions(self, start: dict, end: dict) -> list[QueueRange]:
        start, end = off.decode_stream_offset(start), off.decode_stream_offset(end)
        queues = [MessageQueue(self.opts.topic, *off.parse_queue_key(k)) for k in end]
        new = [mq for mq in queues if off.queue_key(mq) not in start]
        mins = self.meta.min_offsets(new) if new else {}  # a queue new since `start`: from its earliest
        begin = {k: start[k] if k in start else mins[k] for k in end}
        return plan(queues, begin, end, self.opts.max_records_per_partition)

    def read(self, partition: QueueRange) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Spark has processed everything before `end`: with consumerGroup (and commitOffsets, on
        by default with it) the group's offsets on the broker follow, so lag tools see the query.
        Spark calls this when it plans the next batch, so the broker's view lags one batch."""
        if self.opts.commit_offsets:
            self.meta.commit(off.decode_stream_offset(end))

    def stop(self) -> None:
        if self._meta is not None:
            self._meta.close()
            self._meta = None
