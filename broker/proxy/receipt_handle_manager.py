"""ReceiptHandleManager: the invisible time of a PushConsumer's messages, renewed by the front while
the client's listener works on them (RocketMQ 5's DefaultReceiptHandleManager).

A 5.x PushConsumer receives with auto_renew and no invisible duration: the front pops with
defaultInvisibleTimeMills and, renewAheadTimeMillis before a handle's invisible time ends, changes
it by renewSliceTimeMillis (ProxyConfig's keys and defaults: 60 s, 10 s, 60 s), until the client acks, nacks or forwards the message, the renewals reach the
group's consume timeout (CONSUME_TIMEOUT_MS), or the client goes away. Each change makes the
broker issue a new handle; the client keeps the first one, so every ack, change and forward the
client sends is first mapped to the handle now in force (`take`). A listener slower than the
invisible time is then not given its message a second time while it still works on it.

Renewals wait on one timer set at the earliest due handle, not on a fixed-interval scan.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

log = logging.getLogger("proxy")

CONSUME_TIMEOUT_MS = 15 * 60_000  # a SubscriptionGroupConfig's consumeTimeoutMinute (15)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class MessageReceiptHandle:
    client_id: str
    group: str
    topic: str
    original: str  # the handle the client holds
    current: str  # the handle in force at the broker
    expires_ms: int
    received_ms: int = field(default_factory=_now_ms)
    renewing: asyncio.Future | None = None  # a change of its invisible time in flight


class ReceiptHandleManager:
    def __init__(self, renew, ahead_ms: int, slice_ms: int):
        """`renew(handle: MessageReceiptHandle, invisible_ms) -> awaitable of the new handle`."""
        self._renew = renew
        self.ahead_ms, self.slice_ms = ahead_ms, slice_ms
        self.handles: dict[tuple[str, str], MessageReceiptHandle] = {}  # (group, original) ->
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due_ms = 0  # when the timer fires (ms since the epoch)
        self._tasks: set[asyncio.Task] = set()

    def add(self, client_id: str, group: str, topic: str, handle: str, invisible_ms: int) -> None:
        h = self.handles[(group, handle)] = MessageReceiptHandle(client_id, group, topic, handle, handle,
                                                                 _now_ms() + invisible_ms)
        self._arm_at(h.expires_ms - self.ahead_ms)  # O(1) per message: handles come due in the order added

    async def take(self, group: str, handle: str) -> str:
        """The handle in force for the client's `handle`, which is renewed no more (the client acks,
        nacks or forwards it now); `handle` itself when the front does not renew it."""
        h = self.handles.pop((group, handle), None)
        if h is None:
            return handle
        if h.renewing is not None:  # the broker answers the change with the handle that counts
            try:
                await asyncio.shield(h.renewing)
            except Exception:  # noqa: BLE001 - the renewal's failure is logged there; the old handle stays
                pass
        return h.current

    def drop_client(self, client_id: str) -> None:
        """The client went away: its messages come back when their invisible time ends."""
        for key in [k for k, h in self.handles.items() if h.client_id == client_id]:
            del self.handles[key]

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for t in self._tasks:
            t.cancel()
        self.handles.clear()

    # -- renewing ----------------------------------------------------------------------------------
    def _arm(self) -> None:
        """The timer at the earliest due handle not being renewed (after a round of renewals)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        due = min((h.expires_ms - self.ahead_ms for h in self.handles.values() if h.renewing is None), default=None)
        if due is not None:
            self._arm_at(due)

    def _arm_at(self, due_ms: int) -> None:
        """The timer at `due_ms`, unless it is set to fire earlier already."""
        if self._timer is not None:
            if self._timer_due_ms <= due_ms:
                return
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_due_ms = due_ms
        self._timer = loop.call_at(loop.time() + max(0, due_ms - _now_ms()) / 1000, self._renew_due)

    def _renew_due(self) -> None:
        self._timer = None
        now = _now_ms()
        for key, h in list(self.handles.items()):
            if h.renewing is not None or h.expires_ms - self.ahead_ms > now:
                continue
            if now - h.received_ms >= CONSUME_TIMEOUT_MS:
                log.info("%s: stopped renewing a message of %s after the consume timeout (%d min)", h.group,
                         h.topic, CONSUME_TIMEOUT_MS // 60_000)
                del self.handles[key]
                continue
            task = asyncio.ensure_future(self._renew_one(key, h))
            h.renewing = task
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._arm()

    async def _renew_one(self, key, h: MessageReceiptHandle) -> None:
        try:
            h.current = await self._renew(h, self.slice_ms)
            h.expires_ms = _now_ms() + self.slice_ms
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - acked meanwhile, or the broker is gone: it comes back
            log.info("%s: renewing a message of %s failed (%s); it is redelivered when its invisible time ends",
                     h.group, h.topic, e)
            if self.handles.get(key) is h:
                del self.handles[key]
        finally:
            h.renewing = None
            if self.handles.get(key) is h:  # still held: its next renewal comes due
                self._arm_at(h.expires_ms - self.ahead_ms)
