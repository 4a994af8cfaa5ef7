"""A write task: Arrow batches of rows → messages → SEND_BATCH_MESSAGE through the project's
Producer, several batches in flight.

Runs in a Spark Python worker; like the reader it opens everything itself, on a private event
loop driven from this thread, and closes it before returning. The task's rows are read inside
the coroutine: while Spark hands over the next Arrow batch the loop stands still, and the
sends in flight are answered meanwhile (their answers wait in the socket). One thread does it
all, so building messages never waits for a GIL switch to let a send go out.

Rows with a queueId go to that queue; the others fill batches that go round-robin over the
topic's write queues (each task starts on a random one). A batch closes at `batchSize`
messages or `batchBytes` of bodies. A send that fails (after the producer's own retries) or is
answered with any status but SEND_OK fails the task with an error naming the topic, the queue
and the cause; what was acknowledged before stays written (a message system's sink is at least
once: Spark may run a failed task again)."""
from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from broker.client.errors import ClientError
from broker.client.message import Message
from broker.client.producer import SEND_OK, Producer
from broker.client.route import MessageQueue
from broker.spark.errors import RocketMQSinkError
from broker.spark.options import WriteOptions


@dataclass
class WriteSummary(WriterCommitMessage):
    rows: int = 0
    per_queue: dict[str, int] = field(default_factory=dict)  # "brokerName:queueId" → messages


def _column(batch: pa.RecordBatch, name: str) -> list | None:
    i = batch.schema.get_field_index(name)
    if i < 0:
        return None
    col = batch.column(i)
    if name == "body" and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        col = col.cast(pa.binary())  # a string body is sent as its UTF-8 bytes
    return col.to_pylist()


def messages_of(topic: str, batch: pa.RecordBatch) -> Iterator[tuple[Message, int | None]]:
    """(message, pinned queue id or None) per row."""
    n = batch.num_rows
    bodies = _column(batch, "body")
    keys = _column(batch, "keys") or itertools.repeat(None, n)
    tags = _column(batch, "tags") or itertools.repeat(None, n)
    props = _column(batch, "properties") or itertools.repeat(None, n)
    qids = _column(batch, "queueId") or itertools.repeat(None, n)
    for body, k, t, p, q in zip(bodies, keys, tags, props, qids):
        if body is None:
            raise RocketMQSinkError(f"a row for topic {topic} has a null body")
        yield Message(topic, body, t, k, dict(p) if p else {}), q


class _Sender:
    """Batches in flight; at most `sendsInFlight`. The first failure is raised by the next send()
    or by drain()."""

    def __init__(self, producer: Producer, opts: WriteOptions, summary: WriteSummary):
        self.producer, self.opts, self.summary = producer, opts, summary
        self.slots = asyncio.Semaphore(opts.sends_in_flight)
        self.tasks: set[asyncio.Task] = set()
        self.error: RocketMQSinkError | None = None

    async def send(self, mq: MessageQueue, msgs: list[Message]) -> None:
        await self.slots.acquire()
        if self.error is not None:
            self.slots.release()
            raise self.error
        task = asyncio.ensure_future(self._one(mq, msgs))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _one(self, mq: MessageQueue, msgs: list[Message]) -> None:
        where = f"{len(msgs)} message(s) to topic {mq.topic} queue {mq.broker_name}:{mq.queue_id}"
        try:
            r = await self.producer.send_batch(msgs, self.opts.send_timeout_ms / 1000, queue=mq)
            if r.status != SEND_OK:
                raise RocketMQSinkError(f"send of {where} answered {r.status}")
            key = f"{mq.broker_name}:{mq.queue_id}"
            self.summary.per_queue[key] = self.summary.per_queue.get(key, 0) + len(msgs)
            self.summary.rows += len(msgs)
        except ClientError as e:
            self.error = self.error or RocketMQSinkError(f"send of {where} failed: {e}")
        except RocketMQSinkError as e:
            self.error = self.error or e
        finally:
            self.slots.release()

    async def drain(self) -> None:
        await asyncio.gather(*list(self.tasks), return_exceptions=True)
        if self.error is not None:
            raise self.error


async def _produce(opts: WriteOptions, batches: Iterator[pa.RecordBatch], summary: WriteSummary) -> None:
    producer = Producer(opts.producer_group, opts.namesrv_addr)
    await producer.start()
    sender = _Sender(producer, opts, summary)
    try:
        try:
            queues = (await producer.client.routes.get(opts.topic)).write_queues(opts.topic)
        except ClientError as e:
            raise RocketMQSinkError(f"no route to write topic {opts.topic} (name server {opts.namesrv_addr}): "
                                    f"{e}") from None
        if not queues:
            raise RocketMQSinkError(f"topic {opts.topic} has no writable queue")
        # queueId names a queue only on a one-broker topic (queue ids repeat across brokers)
        by_id = {mq.queue_id: mq for mq in queues} if len({mq.broker_name for mq in queues}) == 1 else {}
        rr = itertools.count(random.randrange(len(queues)))

        def target(qid: int | None) -> MessageQueue:
            return by_id[qid] if qid is not None else queues[next(rr) % len(queues)]

        # one open batch per pinned queue, and one for the round-robin rows (key None)
        open_: dict[int | None, tuple[list[Message], int]] = {}
        for batch in batches:  # Spark's rows arrive here (the loop waits meanwhile)
            for msg, qid in messages_of(opts.topic, batch):
                if qid is not None and qid not in by_id:
                    raise RocketMQSinkError(
                        f"queueId {qid} is not a write queue of topic {opts.topic} (write queues: "
                        f"{', '.join(str(q) for q in queues)}; queueId needs a topic on one broker)")
                msgs, size = open_.get(qid, ([], 0))
                if msgs and (len(msgs) >= opts.batch_size or size + len(msg.body) > opts.batch_bytes):
                    await sender.send(target(qid), msgs)
                    msgs, size = [], 0
                msgs.append(msg)
                open_[qid] = (msgs, size + len(msg.body))
        for qid, (msgs, _) in open_.items():
            if msgs:
                await sender.send(target(qid), msgs)
        await sender.drain()
    finally:
        for t in list(sender.tasks):  # a failure left sends in flight: they end before the producer
            t.cancel()
        await asyncio.gather(*list(sender.tasks), return_exceptions=True)
        await producer.shutdown()


def produce(opts: WriteOptions, batches: Iterator[pa.RecordBatch]) -> WriteSummary:
    summary = WriteSummary()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_produce(opts, batches, summary))
    finally:
        loop.close()
    return summary
