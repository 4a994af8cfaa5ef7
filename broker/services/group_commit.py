"""GroupCommitService (SYNC_FLUSH): a put is answered once the flush service has made it durable.

The flush service is its own process: one fdatasync covers everything written so far, then it
publishes `flushed` and writes our eventfd; `on_wake` then answers every put up to it at once. A
put not covered within syncFlushTimeout is answered FLUSH_DISK_TIMEOUT (stored, not confirmed
durable), as RocketMQ's GroupCommitRequest times out; so is every put waiting when an fdatasync
fails, at once."""
from __future__ import annotations

import asyncio

from broker.services.offset_waiters import OffsetWaiters, Resolve
from broker.store.offset_table import Slot
from broker.store.results import PutStatus


class GroupCommitService:
    def __init__(self, table, loop: asyncio.AbstractEventLoop, timeout_ms: int):
        self.table = table
        self.waiters = OffsetWaiters(loop, timeout_ms / 1000, PutStatus.FLUSH_DISK_TIMEOUT)

    def wait(self, end: int, resolve: Resolve, arg) -> None:
        if self.table.load(Slot.FLUSHED) >= end:
            resolve(arg, PutStatus.PUT_OK)
        elif self.table.load(Slot.FLUSH_ERRORS):
            resolve(arg, PutStatus.FLUSH_DISK_TIMEOUT)  # `flushed` will not move again (flush_service)
        else:
            self.waiters.add(end, resolve, arg)

    def on_wake(self) -> None:
        if self.waiters:
            self.waiters.complete(self.table.load(Slot.FLUSHED))
            if self.waiters and self.table.load(Slot.FLUSH_ERRORS):
                # a failed fdatasync: what it covered is not known to be durable, and `flushed`
                # never moves again; the producers are told now, not after syncFlushTimeout
                self.waiters.expire(force=True)

    def close(self) -> None:
        """At shutdown, after the flush service's final flush: the rest times out."""
        self.waiters.complete(self.table.load(Slot.FLUSHED))
        self.waiters.expire(force=True)
        self.waiters.close()
