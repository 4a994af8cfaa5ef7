"""OffsetWaiters: puts waiting for a shared offset (flushed, acked) to reach their end.

The commit log has one writer and puts are queued as they are written, so ends arrive in
increasing order, and so do deadlines: completing every entry up to a new offset works from the
left in O(completed), and one timer on the oldest entry enforces the timeout for all of them.

An entry is (end, deadline, resolve, arg), and `resolve(arg, status)` is called exactly once with
the put's final status. A future's setter is one resolver; a whole read's worth of pre-rendered
SYNC_FLUSH replies is another, so a batch of sends costs one entry, not a future each.
"""
from __future__ import annotations

import asyncio
import collections
import time
from typing import Any, Callable

from broker.store.results import PutStatus

# resolve(arg, status), or resolve(arg, status, why) where a failure has a reason to tell (DLedger's)
Resolve = Callable[..., None]


def resolve_future(fut: asyncio.Future, status: PutStatus, why: str | None = None) -> None:
    if not fut.done():
        fut.set_result(status)


class OffsetWaiters:
    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float, timeout_status: PutStatus):
        self._loop = loop
        self.timeout = max(timeout_s, 0.0)
        self.timeout_status = timeout_status
        self._q: collections.deque = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._q)

    def add(self, end: int, resolve: Resolve, arg: Any) -> None:
        self._q.append((end, time.monotonic() + self.timeout, resolve, arg))
        if self._timer is None:
            self._timer = self._loop.call_later(self.timeout, self.expire)

    def future(self, end: int) -> asyncio.Future:
        fut = self._loop.create_future()
        self.add(end, resolve_future, fut)
        return fut

    def complete(self, reached: int) -> None:
        """Every entry whose end is at or below `reached`: PUT_OK."""
        q = self._q
        while q and q[0][0] <= reached:
            _, _, resolve, arg = q.popleft()
            resolve(arg, PutStatus.PUT_OK)

    def expire(self, force: bool = False) -> None:
        """Entries past their deadline (all of them with force): the timeout status."""
        self._timer = None
        q = self._q
        now = time.monotonic()
        while q and (force or q[0][1] <= now):
            _, _, resolve, arg = q.popleft()
            resolve(arg, self.timeout_status)
        if q:
            self._timer = self._loop.call_later(max(q[0][1] - now, 0.0), self.expire)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
