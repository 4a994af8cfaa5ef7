"""CleanMessageLogService: the message log's retention (the seed's 消息日志 would otherwise grow by one
row per message forever).

Every `interval_ms` (RocketMQ's cleanResourceInterval, 10 s) it deletes a consumer group's log rows
older than `retention_ms`, `batch` rows per transaction, oldest first, until none is left: each
transaction is short (it locks only the rows it deletes; SQLite's one writer is let go between
them), so consumption goes on between two of them. The default retention is RocketMQ's
fileReservedTime, 72 h: the broker deletes a commit log file past it, so no redelivery of a copy
can come later; a producer's resends must stay within it too (see OutboxProducer's schedule). A
duplicate arriving after its row is gone would be processed again: never make the retention
shorter than that.
"""
from __future__ import annotations

import asyncio
import logging

from broker.reliable.errors import ReliableError
from broker.reliable.stores import Store
from broker.reliable.stub import now_ms

log = logging.getLogger("reliable.log_cleaner")

DEFAULT_RETENTION_MS = 72 * 3600 * 1000  # fileReservedTime = 72 (hours)
DEFAULT_INTERVAL_MS = 10_000  # cleanResourceInterval
DEFAULT_BATCH = 1000


class CleanMessageLogService:
    def __init__(self, store: Store, group: str, retention_ms: int = DEFAULT_RETENTION_MS,
                 interval_ms: int = DEFAULT_INTERVAL_MS, batch: int = DEFAULT_BATCH, on_deleted=None):
        for name, value in (("retention_ms", retention_ms), ("interval_ms", interval_ms), ("batch", batch)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"message log cleaning: {name} {value!r} must be a positive integer")
        self.store = store
        self.group = group
        self.retention_ms = retention_ms
        self.interval_ms = interval_ms
        self.batch = batch
        self.on_deleted = on_deleted  # n -> None: the consumer counts them
        self._task: asyncio.Task | None = None

    async def run_once(self) -> int:
        """Delete every row of the group older than the retention, in batches; how many went."""
        cutoff = now_ms() - self.retention_ms
        total = 0
        while True:
            n = await self.store.purge_log(cutoff, self.batch, self.group)
            total += n
            if self.on_deleted is not None and n:
                self.on_deleted(n)
            if n < self.batch:
                return total
            await asyncio.sleep(0)  # the consumer's transactions come in between

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            try:
                n = await self.run_once()
                if n:
                    log.info("%s: deleted %d message log rows older than %d ms", self.group, n, self.retention_ms)
            except ReliableError as e:  # the database away for a while: the next round tries again
                log.warning("%s: message log cleaning failed: %s", self.group, e)
