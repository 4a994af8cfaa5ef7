"""ResendWorker: timed resends of unconfirmed stubs, a maximum, then manual handling (seed §6.5).

Every `scan_interval` it takes the outbox's unconfirmed stubs whose `next_resend_at` has come and,
for each:

1. backlog (seed §6.5.1: the stub's offset against how far the consumer got): if the outbox
   names a consumer group and the stub reached the broker, the group's committed offset on the
   stub's queue (Admin.consumer_offsets) must be past the stub's queue offset. If it is not, the
   message is still waiting in the queue: resending would only add a copy behind it, so the stub
   is postponed (next look after `resend_after`) without counting a send;
2. sends used up (count >= 1 + max_resend): the stub goes to manual handling (seed §6.5.3);
3. otherwise it is claimed (compare-and-set on its next_resend_at, so two workers never both
   send it) and sent again: count + 1, the new queue offset, next look after the backoff.

A stub never sent (count 0: the producer died between its commit and its send, or the broker was
down) has no offset to compare and is sent when due.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any, Protocol

from broker.client.admin import Admin
from broker.client.errors import ClientError
from broker.client.producer import SendResult
from broker.reliable.metrics import Counters
from broker.reliable.stores import Store
from broker.reliable.stub import MANUAL, UNCONFIRMED, Stub, now_ms

log = logging.getLogger("reliable.resend")


class Outbox(Protocol):
    """What the worker uses of the outbox that owns it (broker.reliable.outbox.OutboxProducer):
    its stubs, its knobs, its counters and its send. The outbox imports the worker, never the
    other way round."""

    group: str
    store: Store
    admin: Admin | None
    consumer_group: str | None
    resend_after: float
    max_resend: int
    metrics: Counters
    on_manual: Callable[[Stub], Any] | None

    def delay(self, count: int) -> float: ...

    async def deliver(self, stub: Stub) -> SendResult | None: ...


class ResendWorker:
    def __init__(self, outbox: Outbox, scan_interval: float = 1.0, scan_batch: int = 200):
        self.outbox = outbox
        self.scan_interval = scan_interval
        self.scan_batch = scan_batch
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            try:
                report = await self.run_once()
                busy = report["looked_at"] >= self.scan_batch
            except asyncio.CancelledError:
                raise
            except Exception:  # the database or the name server away: try again next round
                log.exception("%s: resend scan failed", self.outbox.group)
                busy = False
            if not busy:
                await asyncio.sleep(self.scan_interval)

    async def _committed_offsets(self, topic: str, cache: dict) -> dict | None:
        """{(broker name, queue id): committed offset} of the outbox's consumer group, per topic
        per scan; None when it cannot be had (then time alone decides)."""
        if topic not in cache:
            try:
                lags = await self.outbox.admin.consumer_offsets(self.outbox.consumer_group, topic)
                cache[topic] = {(q.queue.broker_name, q.queue.queue_id): q.committed for q in lags}
            except ClientError as e:
                log.warning("%s: consumer offsets of %s on %s unavailable (%s): resending by time alone",
                            self.outbox.group, self.outbox.consumer_group, topic, e)
                cache[topic] = None
        return cache[topic]

    async def _consumer_behind(self, stub: Stub, cache: dict) -> bool:
        if self.outbox.consumer_group is None or stub.queue_offset is None or stub.queue_offset < 0:
            return False
        offsets = await self._committed_offsets(stub.topic, cache)
        if offsets is None:
            return False
        committed = offsets.get((stub.broker_name, stub.queue_id), -1)
        return committed <= stub.queue_offset  # committed is the next offset the group will consume

    async def run_once(self) -> dict[str, int]:
        """One scan; how many stubs it looked at, resent, postponed and moved to manual handling."""
        ob = self.outbox
        ob.metrics.inc("resend_scans")
        report = dict.fromkeys(("looked_at", "resent", "postponed", "manual", "claims_lost"), 0)
        now = now_ms()
        due = await ob.store.due_stubs(ob.group, now, self.scan_batch)
        cache: dict = {}
        for stub in due:
            report["looked_at"] += 1
            if await self._consumer_behind(stub, cache):
                if await ob.store.move_due(stub.id, stub.next_resend_at, now + int(ob.resend_after * 1000), now):
                    report["postponed"] += 1
                    ob.metrics.inc("postponed_backlog")
                continue
            if stub.count >= 1 + ob.max_resend:
                if await ob.store.move_due(stub.id, stub.next_resend_at, stub.next_resend_at, now, MANUAL):
                    stub.status = MANUAL
                    report["manual"] += 1
                    await self._manual(stub)
                else:
                    report["claims_lost"] += 1
                    ob.metrics.inc("claims_lost")
                continue
            # claimed until a backoff from now: if this send fails or the process dies, the stub
            # comes back then (the send's own bookkeeping moves it on when it succeeds)
            lease = now + int(ob.delay(max(stub.count, 1)) * 1000)
            if not await ob.store.move_due(stub.id, stub.next_resend_at, lease, now, UNCONFIRMED):
                report["claims_lost"] += 1
                ob.metrics.inc("claims_lost")
                continue
            if await ob.deliver(stub) is not None:
                report["resent"] += 1
                ob.metrics.inc("resent")
                log.info("%s: resent stub %s (send %d of at most %d)", ob.group, stub.id, stub.count,
                         1 + ob.max_resend)
        return report

    async def _manual(self, stub: Stub) -> None:
        ob = self.outbox
        ob.metrics.inc("manual")
        log.error("%s: stub %s (topic %s) still unconfirmed after %d sends: handed to manual handling",
                  ob.group, stub.id, stub.topic, stub.count)
        if ob.on_manual is not None:
            try:
                r = ob.on_manual(stub)
                if inspect.isawaitable(r):
                    await r
            except Exception:
                log.exception("%s: on_manual hook failed for %s", ob.group, stub.id)
