"""GroupTransferService (SYNC_MASTER): a put is answered once a slave has acknowledged it.

The HA service (its own process) publishes the highest offset any slave confirmed in `acked`
and writes our eventfd. With no slave linked, or the best one haSlaveFallbehindMax or more
behind, the put is answered SLAVE_NOT_AVAILABLE at once, as RocketMQ's handleHA does; otherwise
FLUSH_SLAVE_TIMEOUT after syncFlushTimeout."""
from __future__ import annotations

import asyncio

from broker.services.offset_waiters import OffsetWaiters, Resolve
from broker.store.offset_table import Slot
from broker.store.results import PutStatus


class GroupTransferService:
    def __init__(self, table, loop: asyncio.AbstractEventLoop, timeout_ms: int, fall_behind_max: int):
        self.table = table
        self.fall_behind_max = fall_behind_max
        self.waiters = OffsetWaiters(loop, timeout_ms / 1000, PutStatus.FLUSH_SLAVE_TIMEOUT)

    def wait(self, end: int, resolve: Resolve, arg) -> None:
        t = self.table
        acked = t.load(Slot.ACKED)
        if acked >= end:
            resolve(arg, PutStatus.PUT_OK)
        elif not t.load(Slot.HA_SLAVES) or end - acked >= self.fall_behind_max:
            # no slave, or the best one too far behind to catch up within the timeout: say so now
            resolve(arg, PutStatus.SLAVE_NOT_AVAILABLE)
        else:
            self.waiters.add(end, resolve, arg)

    def on_wake(self) -> None:
        if self.waiters:
            self.waiters.complete(self.table.load(Slot.ACKED))

    def close(self) -> None:
        self.waiters.complete(self.table.load(Slot.ACKED))
        self.waiters.expire(force=True)
        self.waiters.close()
