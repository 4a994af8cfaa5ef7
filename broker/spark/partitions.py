"""What one Spark task reads: a range of one queue. Partitions are pickled to the workers, so they
are small dataclasses holding names and numbers only (no client, no socket); the worker resolves
the broker's address through the name server itself, so a task follows a broker that moved."""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from broker.client.route import MessageQueue
from broker.spark.offsets import queue_key


@dataclass
class QueueRange(InputPartition):
    topic: str
    broker_name: str
    queue_id: int
    start: int  # first queue offset to read
    end: int  # one past the last

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    @property
    def key(self) -> str:
        return f"{self.broker_name}:{self.queue_id}"


def plan(queues: list[MessageQueue], starts: dict[str, int], ends: dict[str, int],
         max_records: int) -> list[QueueRange]:
    """One partition per queue with something to read, ranges above `max_records` split into
    equal parts (so a big queue is read by several tasks at once)."""
    out = []
    for mq in sorted(queues):
        k = queue_key(mq)
        start, end = starts.get(k, 0), ends.get(k, 0)
        if end <= start:
            continue
        parts = -(-(end - start) // max_records)
        step = -(-(end - start) // parts)
        for lo in range(start, end, step):
            out.append(QueueRange(mq.topic, mq.broker_name, mq.queue_id, lo, min(lo + step, end)))
    return out
