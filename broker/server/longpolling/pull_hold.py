"""PullRequestHoldService: long polling. A pull that finds nothing new is held, and answered the
moment a message is appended to its queue and dispatched (or when its suspend time is up).

The wake-up is the send path itself: the broker is the commit log's only writer, so it knows
which queue just got a message without polling the consume queues (RocketMQ checks held
requests every 5 s as well as on every dispatch; here nothing polls).
"""
from __future__ import annotations

import asyncio


class PullHoldService:
    def __init__(self):
        self._held: dict[tuple[str, int], list[asyncio.Future]] = {}
        self.waiting = 0  # pulls held now (the send kernel reports the queues it appends to only then)

    def hold(self, topic: str, queue_id: int) -> asyncio.Future:
        """A future resolved with the end offset of the next message appended to the queue."""
        fut = asyncio.get_running_loop().create_future()
        self._held.setdefault((topic, queue_id), []).append(fut)
        self.waiting += 1
        return fut

    def release(self, topic: str, queue_id: int, fut: asyncio.Future) -> None:
        waiters = self._held.get((topic, queue_id))
        if waiters is not None:
            try:
                waiters.remove(fut)
                self.waiting -= 1
            except ValueError:
                pass
            if not waiters:
                del self._held[(topic, queue_id)]

    def notify(self, topic: str, queue_id: int, end_offset: int) -> None:
        waiters = self._held.pop((topic, queue_id), None)
        if waiters:
            self.waiting -= len(waiters)
            for fut in waiters:
                if not fut.done():
                    fut.set_result(end_offset)

    def notify_all(self) -> None:
        """Every held pull looks at its queue again now (controller mode: before a role switch)."""
        for key in list(self._held):
            self.notify(key[0], key[1], -1)

    def held(self) -> int:
        return self.waiting

    def cancel_all(self) -> None:
        for waiters in self._held.values():
            for fut in waiters:
                if not fut.done():
                    fut.cancel()
        self._held.clear()
        self.waiting = 0
