"""CommittedIndex: a member's committed index as something to wait on.

The store keeps the committed index (DLedgerEntryStore.update_committed_index, never backwards);
this mirrors it for whoever waits for an index to be committed (the broker's reput, tests), with
one future per waiter resolved by the update that reaches its index: no polling, and an update
costs nothing when nobody waits.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools


class CommittedIndex:
    def __init__(self, value: int = -1):
        self._value = value
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()
        # called with the new value after every advance (the broker publishes the committed
        # position to its reput from here, on the leader and on followers alike)
        self.listeners: list = []

    @property
    def value(self) -> int:
        return self._value

    def advance(self, index: int) -> None:
        """Raise the committed index to `index` (a lower value is ignored: it never goes back)."""
        if index <= self._value:
            return
        self._value = index
        w = self._waiters
        while w and w[0][0] <= index:
            fut = heapq.heappop(w)[2]
            if not fut.done():
                fut.set_result(index)
        for fn in self.listeners:
            fn(index)

    async def wait_for(self, index: int, timeout: float | None = None) -> int:
        """Return the committed index once it is at least `index`; asyncio.TimeoutError after
        `timeout` seconds."""
        if self._value >= index:
            return self._value
        fut = asyncio.get_running_loop().create_future()
        item = (index, next(self._seq), fut)
        heapq.heappush(self._waiters, item)
        try:
            async with asyncio.timeout(timeout):
                return await fut
        finally:
            if fut.cancelled() or not fut.done():  # timed out or cancelled: a waiter that gave up holds nothing
                fut.cancel()
                try:
                    self._waiters.remove(item)
                    heapq.heapify(self._waiters)
                except ValueError:
                    pass
