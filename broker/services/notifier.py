"""The services' wake-ups in the broker process: one eventfd every service writes when it moved
something the broker may wait on (flushed, acked, dispatched, a deletion, a flag), watched by the
event loop. Each wake-up runs every listener once, then re-checks the conditions awaited with
`wait_for`; a listener reads the offset table itself, so wake-ups that pile up cost one pass."""
from __future__ import annotations

import asyncio
import os
from typing import Callable


class Notifier:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        loop.add_reader(self.fd, self._on_readable)
        self.listeners: list[Callable[[], None]] = []
        self._conditions: list[tuple[Callable[[], bool], asyncio.Future]] = []

    def poke(self) -> None:
        """Run the listeners soon, as if a service had written (a value may have moved between a
        load and the registration of a waiter)."""
        os.eventfd_write(self.fd, 1)

    def _on_readable(self) -> None:
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            return
        for listener in self.listeners:
            listener()
        for pred, fut in self._conditions:
            if not fut.done() and pred():
                fut.set_result(None)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Until `predicate()` holds, re-checked at each wake-up."""
        if predicate():
            return
        entry = (predicate, self._loop.create_future())
        self._conditions.append(entry)
        try:
            await asyncio.wait_for(entry[1], timeout)
        finally:
            self._conditions.remove(entry)

    def close(self) -> None:
        if self.fd >= 0:
            self._loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
