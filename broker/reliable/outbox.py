"""OutboxProducer: write the message stub, then send (seed §6.2.1.1).

    async with OutboxProducer(Producer("orders-pg", namesrv), "postgresql://...",
                              consumer_group="billing") as outbox:
        async with outbox.transaction() as tx:          # the caller's business transaction
            await tx.execute("INSERT INTO orders (id, total) VALUES (?, ?)", (42, 9.5))
            sent = await outbox.send(Message("orders", body), tx=tx)
        # committed: the order and its stub together; the message is sent right after the commit
        await sent.wait()

Sending only after the commit is the point: a message never leaves for a transaction that rolled
back, and a stub committed but never sent (the process died in between, the broker was down) is
sent by the resend worker (broker.reliable.resend) once `resend_after` has passed. Without `tx`
the stub gets a transaction of its own and `send` returns after the send.

The id that keys idempotency end to end travels as the RELIABLE_ID property (and among KEYS); it
is the stub's primary key, the same on every resend, and the consumer's message-log key.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.client.admin import Admin
from broker.client.errors import ClientError
from broker.client.message import Message
from broker.client.producer import Producer, SendResult
from broker.reliable.errors import IllegalTransition, StubNotFound
from broker.reliable.ids import PROPERTY_RELIABLE_ID, new_id, stamp
from broker.reliable.metrics import Counters
from broker.reliable.resend import ResendWorker
from broker.reliable.stores import Session, Store, open_store
from broker.reliable.stub import CONFIRMED, TRANSITIONS, UNCONFIRMED, VOIDED, Stub, now_ms

log = logging.getLogger("reliable.outbox")

COUNTERS = ("stubs_written", "sent", "send_failures", "resent", "postponed_backlog", "manual", "claims_lost",
            "resend_scans")


@dataclass
class Sent:
    """What `send` returns: the stub id at once; the send's outcome when it happened."""
    id: str
    _done: asyncio.Future = field(repr=False)

    @property
    def result(self) -> SendResult | None:
        """The SendResult, or None: not sent yet, the send failed (the resend worker takes it
        over) or the transaction rolled back (no stub, nothing sent)."""
        if self._done.done() and not self._done.cancelled():
            return self._done.result()
        return None

    async def wait(self) -> SendResult | None:
        return await asyncio.shield(self._done)


class OutboxProducer:
    """A Producer whose every send is recorded first. See the module doc; the knobs:

    consumer_group: the group whose backlog a resend respects (no resend of a stub the group has
      not yet consumed past; seed §6.5.1); None: time alone decides.
    resend_after, backoff, max_resend_delay: seconds until the stub's first look by the worker,
      and after each send: resend_after * backoff**(count-1), at most max_resend_delay. Set
      resend_after above the consumer's normal latency (and its retry schedule) or healthy
      messages get resent (harmless to an idempotent consumer, but traffic).
    max_resend: resends after the first send; once used up, a stub still unconfirmed when due (and
      consumed past) goes to manual handling: logged, counted and passed to `on_manual(stub)`.
    resend: run the resend worker in this process (several processes may: they never send one
      stub twice in one round, a compare-and-set on the stub claims it).
    """

    def __init__(self, producer: Producer, store: Store | str | None = None, *, consumer_group: str | None = None,
                 resend_after: float = 30.0, backoff: float = 2.0, max_resend_delay: float = 600.0,
                 max_resend: int = 3, send_timeout: float = 3.0, resend: bool = True, scan_interval: float = 1.0,
                 scan_batch: int = 200, on_manual: Callable[[Stub], Any] | None = None, metrics_registry=None):
        self.producer = producer
        self.group = producer.group
        self.store = open_store(store)
        self.consumer_group = consumer_group
        self.resend_after = resend_after
        self.backoff = backoff
        self.max_resend_delay = max_resend_delay
        self.max_resend = max_resend
        self.send_timeout = send_timeout
        self.on_manual = on_manual
        self.metrics = Counters(COUNTERS, "reliable_outbox", self.group, metrics_registry)
        self.admin: Admin | None = None
        self.worker = ResendWorker(self, scan_interval, scan_batch)
        self._run_worker = resend

    async def start(self) -> None:
        await self.store.open()
        try:
            await self.producer.start()
            self.admin = Admin(client=self.producer.client)  # the producer's connections, shared
            await self.admin.start()
        except BaseException:
            await self.store.close()
            raise
        if self._run_worker:
            self.worker.start()

    async def shutdown(self) -> None:
        try:
            await self.worker.stop()
            if self.admin is not None:
                await self.admin.shutdown()
            await self.producer.shutdown()
        finally:
            await self.store.close()

    async def __aenter__(self) -> OutboxProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.shutdown()

    def transaction(self):
        """A transaction of the outbox's store, for the caller's business writes and `send(tx=)`."""
        return self.store.transaction()

    def delay(self, count: int) -> float:
        """Seconds to wait for a confirmation after the `count`-th send."""
        return min(self.resend_after * self.backoff ** max(count - 1, 0), self.max_resend_delay)

    # -- sending -----------------------------------------------------------------------------------
    async def send(self, msg: Message, *, tx: Session | None = None, id: str | None = None) -> Sent:
        """Record the stub (in `tx` when given, else in a transaction of its own), then send.
        With `tx` the send waits for its commit; without, this returns after the send. A failed
        send raises nothing: the stub is committed and the resend worker delivers it later."""
        rid = id or msg.properties.get(PROPERTY_RELIABLE_ID) or new_id()
        out = stamp(msg, rid)
        stub = Stub.from_message(rid, self.group, out, now_ms() + int(self.resend_after * 1000))
        done = asyncio.get_running_loop().create_future()
        if tx is not None:
            await self.store.insert_stub(tx, stub)
            tx.after_commit(lambda: self._send_after_commit(stub, done))
            tx.after_rollback(lambda: done.done() or done.set_result(None))
        else:
            async with self.store.transaction() as s:
                await self.store.insert_stub(s, stub)
            self.metrics.inc("stubs_written")
            done.set_result(await self.deliver(stub))
        return Sent(rid, done)

    async def _send_after_commit(self, stub: Stub, done: asyncio.Future) -> None:
        self.metrics.inc("stubs_written")
        try:
            result = await self.deliver(stub)
        except BaseException:
            if not done.done():
                done.set_result(None)
            raise
        if not done.done():
            done.set_result(result)

    async def deliver(self, stub: Stub) -> SendResult | None:
        """Send a stub's message once; record the send (count + 1, queue, offset, next look) or,
        when it failed, the error (the stub stays due for the worker)."""
        try:
            r = await self.producer.send(stub.message(), self.send_timeout)
        except ClientError as e:
            self.metrics.inc("send_failures")
            log.warning("%s: send of stub %s failed (%s); the resend worker will retry", self.group, stub.id, e)
            try:
                await self.store.note_error(stub.id, str(e), now_ms())
            except Exception:
                log.exception("%s: could not record the send error of %s", self.group, stub.id)
            return None
        self.metrics.inc("sent")
        t = now_ms()
        stub.count += 1
        await self.store.mark_sent(stub.id, r.queue.broker_name, r.queue.queue_id, r.queue_offset,
                                   t + int(self.delay(stub.count) * 1000), t)
        return r

    # -- operators ---------------------------------------------------------------------------------
    async def stub(self, rid: str) -> Stub:
        stub = await self.store.get_stub(rid)
        if stub is None:
            raise StubNotFound(rid)
        return stub

    async def stubs(self, status: str | None = None, limit: int = 1000) -> list[Stub]:
        """This outbox's stubs (of one status: e.g. "manual", the ones waiting for a person)."""
        return await self.store.list_stubs(self.group, status, limit)

    async def _transition(self, rid: str, to: str, reset_count: bool = False) -> None:
        if not await self.store.transition(rid, to, TRANSITIONS[to], now_ms(), reset_count):
            raise IllegalTransition(rid, (await self.stub(rid)).status, to)

    async def confirm(self, rid: str) -> None:
        """Mark processed: for a consumer whose database is not this one (its on_confirmed hook
        calls this, through whatever reaches the producer side), or by hand."""
        await self._transition(rid, CONFIRMED)

    async def void(self, rid: str) -> None:
        """Give the message up: no more resends; a consumer sharing the database skips it."""
        await self._transition(rid, VOIDED)

    async def requeue(self, rid: str) -> None:
        """Back from manual handling (or voided): unconfirmed, count 0, due now."""
        await self._transition(rid, UNCONFIRMED, reset_count=True)
