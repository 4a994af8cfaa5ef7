"""A task's read of one queue range: pulls through the project's client, several in flight,
records turned into Arrow batches as they arrive (the pulled bodies handed to the column
kernel as they came, not joined).

Runs in a Spark Python worker, on a private event loop driven from this thread: between two
chunks the loop stands still while the previous records become Arrow and go to Spark, but the
pulls already sent are answered meanwhile (the broker's answers wait in the socket), so the
pipeline does not drain. (A loop thread would overlap nothing: the conversion holds the GIL
most of the time, and the thread would get it back only every switch interval, 5 ms, per
answer.) Everything is opened inside read() and closed when its generator ends or is dropped:
a reader keeps no connection.

Pipelining: the broker answers a pull with at most 256 KiB, so a range takes many pulls. The
first pull tells how many messages one answer holds (W); the range is then cut into windows of
W offsets, `pullsInFlight` windows pulled at once, each window re-pulled from where its answer
ended until it is complete, and the windows handed on in offset order.
"""
from __future__ import annotations

import asyncio
import collections
import gc
from collections.abc import Iterator

import pyarrow as pa

from broker.client.api import FOUND, NO_MATCHED_MSG, NO_NEW_MSG, OFFSET_ILLEGAL, PullResult, parse_tags
from broker.client.errors import ClientError
from broker.client.pull_consumer import PullConsumer
from broker.spark.arrow import ColumnBuffers, records_to_batch
from broker.spark.errors import RocketMQSourceError
from broker.spark.options import ReadOptions
from broker.spark.partitions import QueueRange

MAX_PULL_BYTES = 256 * 1024  # the broker's cap on one answer (maxTransferBytesOnMessageInMemory)


class RangePuller:
    """Async side: the bodies of [start, end) of one queue, window by window, in order."""

    def __init__(self, consumer: PullConsumer, opts: ReadOptions, part: QueueRange):
        self.consumer = consumer
        self.opts = opts
        self.part = part
        self.mq = part.queue
        self.next_window = part.start
        self.window = opts.pull_batch_size
        self.tasks: collections.deque[asyncio.Task] = collections.deque()
        self.first = True

    async def _pull(self, offset: int, n: int) -> PullResult:
        try:
            return await self.consumer.pull(self.mq, offset, n, self.opts.tags, decode=False,
                                            timeout=self.opts.pull_timeout_ms / 1000)
        except ClientError as e:
            raise RocketMQSourceError(f"pull of {self.mq} at offset {offset}: {e}") from None

    async def _fill(self, lo: int, hi: int, first: PullResult | None = None) -> list[bytes]:
        """The bodies covering offsets [lo, hi), pulled until the broker's answers reach hi."""
        bodies, offset = [], lo
        while offset < hi:
            r = first if first is not None else await self._pull(offset, min(hi - offset, self.opts.pull_batch_size))
            first = None
            if r.status == FOUND:
                bodies.append(r.body)
            elif r.status == OFFSET_ILLEGAL:  # the broker deleted what we asked for
                if self.opts.fail_on_data_loss:
                    raise RocketMQSourceError(f"{self.mq}: offset {offset} is gone (the queue now starts at "
                                              f"{r.min_offset}); set failOnDataLoss=false to skip lost messages")
            elif r.status == NO_NEW_MSG:
                raise RocketMQSourceError(f"{self.mq}: the queue ends at {r.max_offset}, before offset {hi} the "
                                          f"read was planned to reach (was the broker's store replaced?)")
            elif r.status != NO_MATCHED_MSG:
                raise RocketMQSourceError(f"{self.mq}: unexpected pull status {r.status} at offset {offset}")
            if r.next_begin_offset <= offset:
                raise RocketMQSourceError(f"{self.mq}: the broker answered offset {offset} without moving on")
            offset = r.next_begin_offset
        return bodies

    async def next_chunk(self) -> list[bytes] | None:
        """The bodies of the next window; None once the range is done."""
        if self.first:
            self.first = False
            end = self.part.end
            n = min(end - self.next_window, self.opts.pull_batch_size)
            r = await self._pull(self.next_window, n)
            covered = r.next_begin_offset - self.next_window
            if r.status == FOUND and 0 < covered < n:  # the answer was cut by its byte cap: W = what fits
                self.window = covered
            lo, hi = self.next_window, min(end, self.next_window + max(covered, 1))
            self.next_window = hi
            bodies = await self._fill(lo, hi, r)
            self._launch()
            return bodies
        if not self.tasks:
            return None
        bodies = await self.tasks.popleft()
        self._launch()
        return bodies

    def _launch(self) -> None:
        while len(self.tasks) < self.opts.pulls_in_flight and self.next_window < self.part.end:
            lo, hi = self.next_window, min(self.part.end, self.next_window + self.window)
            self.tasks.append(asyncio.ensure_future(self._fill(lo, hi)))
            self.next_window = hi

    def cancel(self) -> None:
        for t in self.tasks:
            t.cancel()


_frozen = False


def _freeze_process_objects() -> None:
    """A Spark Python worker runs gc.collect() after every task (pyspark/daemon.py). With pyspark,
    pyarrow, pandas and this package imported that is a scan of ~10^5 objects that live as long as
    the process, ~0.1 s a task in a forked worker (each scanned page is copied on write): a
    quarter of a 1M-row read's Python time. They are moved out of the collector's reach once, at
    the process's first read (gc.freeze); each collect then scans what the tasks made."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()


def read_range(opts: ReadOptions, part: QueueRange) -> Iterator[pa.RecordBatch]:
    """The rows of `part` as RecordBatches of about `rowsPerBatch` rows."""
    _freeze_process_objects()
    tags = parse_tags(opts.tags)
    tags = frozenset(tags) if tags is not None else None
    loop = asyncio.new_event_loop()
    consumer = PullConsumer(opts.pull_group, opts.namesrv_addr)
    puller = RangePuller(consumer, opts, part)
    # about rowsPerBatch messages' worth of records before a conversion (record sizes are learnt
    # from the first pull: its bytes over the offsets it covered)
    target = None
    pending: list[bytes] = []
    pending_bytes = 0
    buffers = ColumnBuffers()
    try:
        while True:
            bodies = loop.run_until_complete(puller.next_chunk())
            if bodies is None:
                break
            pending.extend(bodies)
            pending_bytes += sum(len(b) for b in bodies)
            if target is None and pending_bytes:
                target = max(MAX_PULL_BYTES, pending_bytes // max(1, puller.window) * opts.rows_per_batch)
            if target is not None and pending_bytes >= target:
                batch = records_to_batch(pending, part.broker_name, part.start, part.end, tags, buffers)
                pending, pending_bytes = [], 0
                if batch is not None:
                    yield batch
        if pending:
            batch = records_to_batch(pending, part.broker_name, part.start, part.end, tags, buffers)
            if batch is not None:
                yield batch
    finally:
        try:
            loop.run_until_complete(_close(puller, consumer))
        finally:
            loop.close()


async def _close(puller: RangePuller, consumer: PullConsumer) -> None:
    puller.cancel()
    await asyncio.gather(*puller.tasks, return_exceptions=True)
    await consumer.shutdown()
