"""Readers waiting for the reput service to build consume queues up to an offset (read-your-
writes pulls, tests, shutdown). While any waits, WANT_DISPATCH asks the reput to write our
eventfd after each dispatch; otherwise it does not, since no put waits for it."""
from __future__ import annotations

import asyncio

from broker.store.offset_table import Slot


class DispatchWaiters:
    def __init__(self, table, loop: asyncio.AbstractEventLoop, poke):
        self.table = table
        self._loop = loop
        self._poke = poke
        self._waiters: list[tuple[int, asyncio.Future]] = []

    async def wait(self, offset: int, timeout: float | None = None) -> int:
        d = self.table.load(Slot.DISPATCHED)
        if d >= offset:
            return d
        fut = self._loop.create_future()
        self._waiters.append((offset, fut))
        self.table.store(Slot.WANT_DISPATCH, 1)
        self._poke()  # the reput may have moved between our load and WANT_DISPATCH: look once more
        return await asyncio.wait_for(fut, timeout)

    def on_wake(self) -> None:
        if not self._waiters:
            return
        d = self.table.load(Slot.DISPATCHED)
        keep = []
        for off, fut in self._waiters:
            if off <= d:
                if not fut.done():
                    fut.set_result(d)
            else:
                keep.append((off, fut))
        self._waiters = keep
        if not keep:
            self.table.store(Slot.WANT_DISPATCH, 0)
