"""IdempotentConsumer: a PushConsumer listener that runs a handler exactly once per business
message id and consumer group (seed §6.3-6.4).

For each delivery:

1. the Redis guard (optional) — SET idem:<group>:<id> NX: a key saying "done" acknowledges the
   copy at once; any other answer (acquired, taken by another delivery, Redis down) goes on to
2. the database, in one transaction: claim the (group, id) row of the message log
   (INSERT ... ON CONFLICT DO NOTHING). A committed row: processed before, acknowledge. A row
   another live transaction holds past the store's lock wait: in progress elsewhere, acknowledge
   (that delivery is not acknowledged until it ends, so if it fails or its process dies the broker
   brings its copy back). Otherwise this delivery owns it:
3. the handler runs with the same transaction (`session`), so its own writes, the log row and
   the stub's confirmation commit together or not at all. Success: commit, Redis key -> "done",
   acknowledge. Failure (an exception, or False returned): roll back, delete our Redis key,
   RECONSUME_LATER, so the broker's %RETRY% path (and the DLQ after maxReconsumeTimes) applies.

The guarantee is on committed database effects: exactly once per (group, id). The handler's code
can run more than once for a message (a failed attempt, a process killed mid-handler, a rebalance
cancelling it), each earlier run rolled back; effects outside the transaction (an e-mail, an HTTP
call) are at-least-once and need their own key.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from broker.client.message import MessageExt
from broker.client.push_consumer import PushConsumer
from broker.reliable import dedup
from broker.reliable.dedup import RedisGuard
from broker.reliable.errors import HandlerFailed
from broker.reliable.ids import reliable_id
from broker.reliable.metrics import Counters
from broker.reliable.stores import BUSY, DONE, MessageInfo, Session, Store, open_store
from broker.reliable.stub import MANUAL, UNCONFIRMED, VOIDED, now_ms

log = logging.getLogger("reliable.consumer")

Handler = Callable[[MessageExt, Session], "Any | Awaitable[Any]"]

PROCESSED, DUPLICATE, IN_PROGRESS, SKIPPED_VOIDED = "processed", "duplicate", "in_progress", "voided"
COUNTERS = ("received", "processed", "duplicates_redis", "duplicates_db", "in_progress_elsewhere", "skipped_voided",
            "failures", "dead_lettered", "confirmed_stubs", "without_reliable_id", "redis_errors")


class IdempotentConsumer:
    """Wraps `consumer` (a PushConsumer, subscribed, not started): registers itself as its listener.

    handler(msg, session): a coroutine function (or plain function) doing the business work with
      `session` (the transaction the message log is written in). Raise, or return False, to fail.
    store: a Store or URL (sqlite:///..., postgresql://...); share the outbox's to confirm stubs.
    redis: a redis:// URL or a RedisGuard; None: the database alone decides.
    confirm: mark the stub confirmed in the same transaction. With the outbox in another database
      the UPDATE finds nothing; give `on_confirmed` a way to reach it (OutboxProducer.confirm).
    id_of: the business id of a message; default its RELIABLE_ID property, else its UNIQ_KEY
      (stable across the broker's redeliveries, not across a producer's own resends).
    on_confirmed(rid, msg): after the commit of a handler's success.
    on_dead_letter(rid, msg, error): the handler failed a delivery the broker will move to the DLQ.
    """

    def __init__(self, consumer: PushConsumer, handler: Handler, store: Store | str | None = None,
                 redis: str | RedisGuard | None = None, *, confirm: bool = True,
                 id_of: Callable[[MessageExt], str | None] | None = None,
                 on_confirmed: Callable[[str, MessageExt], Any] | None = None,
                 on_dead_letter: Callable[[str, MessageExt, BaseException], Any] | None = None,
                 metrics_registry=None):
        self.consumer = consumer
        self.group = consumer.group
        self.handler = handler
        self.store = open_store(store)
        self.guard = RedisGuard(redis) if isinstance(redis, str) else redis
        self.confirm = confirm
        self.id_of = id_of or reliable_id
        self.on_confirmed = on_confirmed
        self.on_dead_letter = on_dead_letter
        self.metrics = Counters(COUNTERS, "reliable_consumer", self.group, metrics_registry)
        self._tasks: set[asyncio.Future] = set()
        consumer.register(self)

    async def start(self) -> None:
        await self.store.open()
        try:
            if self.guard is not None:
                await self.guard.open()
            await self.consumer.start()
        except BaseException:
            if self.guard is not None:
                await self.guard.close()
            await self.store.close()
            raise

    async def shutdown(self) -> None:
        try:
            await self.consumer.shutdown()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            if self.guard is not None:
                await self.guard.close()
            await self.store.close()

    async def __aenter__(self) -> IdempotentConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.shutdown()

    # -- the listener ------------------------------------------------------------------------------
    async def __call__(self, msgs: list[MessageExt]) -> bool:
        for msg in msgs:
            if not await self.consume(msg):
                return False
        return True

    def _rid(self, msg: MessageExt) -> str:
        rid = self.id_of(msg)
        if rid:
            return rid
        self.metrics.inc("without_reliable_id")
        return msg.uniq_key or msg.msg_id

    async def consume(self, msg: MessageExt) -> bool:
        """One delivery: True to acknowledge it, False for RECONSUME_LATER."""
        self.metrics.inc("received")
        rid = self._rid(msg)
        key = token = None
        held = False
        guard = self.guard
        if guard is not None:
            key, token = guard.key(self.group, rid), uuid.uuid4().hex
            errors = guard.errors
            state = await guard.acquire(key, token)
            if guard.errors != errors:
                self.metrics.inc("redis_errors")
            if state == dedup.DONE:
                self.metrics.inc("duplicates_redis")
                return True
            held = state == dedup.ACQUIRED
        try:
            outcome = await self._transaction(msg, rid)
        except asyncio.CancelledError:  # a rebalance took the queue: the next owner redelivers
            if held:
                self._background(guard.release(key, token))
            raise
        except Exception as e:
            if held:
                await guard.release(key, token)
            await self._failed(rid, msg, e)
            return False
        if guard is not None:
            if outcome in (PROCESSED, DUPLICATE):
                await guard.mark_done(key)
            elif held:
                # in progress elsewhere: Redis had lost the holder's key, ours is not the holder's;
                # voided: not "done" (a requeued stub's next copy must be processed)
                await guard.release(key, token)
        if outcome == PROCESSED and self.on_confirmed is not None:
            await _call_hook(self.on_confirmed, rid, msg)
        return True

    async def _transaction(self, msg: MessageExt, rid: str) -> str:
        now = now_ms()
        info = MessageInfo(msg.topic, msg.broker_name, msg.queue_id, msg.queue_offset, msg.uniq_key or msg.msg_id,
                           msg.reconsume_times)
        async with self.store.transaction() as s:
            claim, status = await self.store.begin_message(s, self.group, rid, info, now, self.confirm)
            if claim == DONE:
                s.set_rollback_only()
                self.metrics.inc("duplicates_db")
                return DUPLICATE
            if claim == BUSY:
                self.metrics.inc("in_progress_elsewhere")
                return IN_PROGRESS
            if status == VOIDED:
                s.set_rollback_only()  # voided by an operator: not to be processed
                self.metrics.inc("skipped_voided")
                return SKIPPED_VOIDED
            result = self.handler(msg, s)
            if inspect.isawaitable(result):
                result = await result
            if result is False:
                raise HandlerFailed(f"handler returned False for {rid}")
        if status in (UNCONFIRMED, MANUAL):  # confirmed by begin_message, now committed
            self.metrics.inc("confirmed_stubs")
        self.metrics.inc("processed")
        return PROCESSED

    def _background(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _failed(self, rid: str, msg: MessageExt, e: Exception) -> None:
        self.metrics.inc("failures")
        last = msg.reconsume_times >= self.consumer.max_reconsume_times
        if not last:
            log.info("%s: handler failed on %s (attempt %d): %s; consumed again later", self.group, rid,
                     msg.reconsume_times + 1, e)
            return
        self.metrics.inc("dead_lettered")
        log.error("%s: handler failed on %s for the last time (%d attempts): %s; it goes to %%DLQ%%%s",
                  self.group, rid, msg.reconsume_times + 1, e, self.group)
        if self.on_dead_letter is not None:
            await _call_hook(self.on_dead_letter, rid, msg, e)


async def _call_hook(fn, *args) -> None:
    try:
        r = fn(*args)
        if inspect.isawaitable(r):
            await r
    except Exception:
        log.exception("hook %r failed", fn)
