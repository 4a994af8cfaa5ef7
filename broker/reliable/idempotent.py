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

Batches (`batch_size`, default 64: the PushConsumer's consumeMessageBatchMaxSize is set to it and
a pull's messages come in lists of that many): one Redis round trip for the batch's SET NXs, one
transaction for the batch with one statement claiming every message, then each handler after a
savepoint of its own (sent with the handler's first statement: a handler writing nothing costs no
round trip). A failed handler is rolled back to its savepoint and its claim withdrawn, the rest of
the batch commits; the failed message alone goes back to the broker. One commit and one Redis
round trip for the "done" marks end the batch. If a handler's failure cannot be isolated (it wrote
through `session.raw` before any statement), the batch is rolled back and its messages are
consumed one transaction each.

The guarantee is on committed database effects: exactly once per (group, id). The handler's code
can run more than once for a message (a failed attempt, a process killed mid-handler, a rebalance
cancelling it), each earlier run rolled back; effects outside the transaction (an e-mail, an HTTP
call) are at-least-once and need their own key.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from broker.client.message import MessageExt
from broker.client.push_consumer import MAX_CONSUME_BATCH, PushConsumer
from broker.reliable import dedup, log_cleaner
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
            "failures", "dead_lettered", "confirmed_stubs", "without_reliable_id", "redis_errors", "batches",
            "batches_split", "log_rows_cleaned")
# Messages per transaction. Past 64, a batch whose handlers all write would overflow PostgreSQL's
# cache of a transaction's subtransactions (PGPROC_MAX_CACHED_SUBXIDS = 64: one per savepoint),
# which slows every other session's snapshots; up to it, the batch's commit and round trips are
# shared by 64 messages.
DEFAULT_BATCH_SIZE = 64


class _Unisolated(Exception):
    """A handler failed in a batch and its work cannot be undone alone: give up the batch."""


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
    batch_size: messages per transaction (sets the consumer's consume_message_batch_max_size, and
      raises its pull_batch_size to it); 1: one transaction per message.
    log_retention_ms, log_clean_interval_ms, log_clean_batch: this group's message log rows older
      than the retention are deleted every interval, that many per transaction (log_cleaner.py);
      log_retention_ms=None keeps them forever.
    """

    def __init__(self, consumer: PushConsumer, handler: Handler, store: Store | str | None = None,
                 redis: str | RedisGuard | None = None, *, confirm: bool = True,
                 id_of: Callable[[MessageExt], str | None] | None = None,
                 on_confirmed: Callable[[str, MessageExt], Any] | None = None,
                 on_dead_letter: Callable[[str, MessageExt, BaseException], Any] | None = None,
                 metrics_registry=None, batch_size: int = DEFAULT_BATCH_SIZE,
                 log_retention_ms: int | None = log_cleaner.DEFAULT_RETENTION_MS,
                 log_clean_interval_ms: int = log_cleaner.DEFAULT_INTERVAL_MS,
                 log_clean_batch: int = log_cleaner.DEFAULT_BATCH):
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
        consumer.consume_message_batch_max_size = _batch_size(batch_size)
        # a batch is cut from one pull's messages: pull at least that many
        consumer.pull_batch_size = max(consumer.pull_batch_size, batch_size)
        self.log_cleaner = None if log_retention_ms is None else log_cleaner.CleanMessageLogService(
            self.store, self.group, log_retention_ms, log_clean_interval_ms, log_clean_batch,
            on_deleted=lambda n: self.metrics.inc("log_rows_cleaned", n))
        consumer.register(self)

    async def start(self) -> None:
        await self.store.open()
        try:
            if self.guard is not None:
                await self.guard.open()
            await self.consumer.start()
            if self.log_cleaner is not None:
                self.log_cleaner.start()
        except BaseException:
            if self.guard is not None:
                await self.guard.close()
            await self.store.close()
            raise

    async def shutdown(self) -> None:
        try:
            if self.log_cleaner is not None:
                await self.log_cleaner.stop()
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
    async def __call__(self, msgs: list[MessageExt]) -> list[bool]:
        self.metrics.inc("batches")  # a list from the consumer, one message or more
        if len(msgs) == 1:
            return [await self.consume(msgs[0])]
        return await self.consume_batch(msgs)

    def _rid(self, msg: MessageExt) -> str:
        rid = self.id_of(msg)
        if rid:
            return rid
        self.metrics.inc("without_reliable_id")
        return msg.uniq_key or msg.msg_id

    async def consume(self, msg: MessageExt) -> bool:
        """One delivery: True to acknowledge it, False for RECONSUME_LATER."""
        self.metrics.inc("received")
        return await self._consume_one(msg, self._rid(msg))

    async def _consume_one(self, msg: MessageExt, rid: str) -> bool:
        key = token = None
        held = False
        guard = self.guard
        if guard is not None:
            key, token = guard.key(self.group, rid), guard.new_tokens(1)[0]
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
        async with self.store.transaction(begin_with_first_statement=True) as s:
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

    async def consume_batch(self, msgs: list[MessageExt]) -> list[bool]:
        """Deliveries of one pull, in one transaction: for each, True to acknowledge it, False for
        RECONSUME_LATER."""
        self.metrics.inc("received", len(msgs))
        return await self._consume_rounds(msgs, [self._rid(m) for m in msgs])

    async def _consume_rounds(self, msgs: list[MessageExt], rids: list[str]) -> list[bool]:
        seen: set[str] = set()
        first, again = [], []
        for i, rid in enumerate(rids):
            (again if rid in seen else first).append(i)
            seen.add(rid)
        acks = await self._consume_distinct(msgs, rids, first)
        if again:
            # another copy of a message of this batch: consumed after it, as if it had come in the
            # next (then refused as any duplicate, or processed if the first copy failed)
            acks.update(zip(again, await self._consume_rounds([msgs[i] for i in again], [rids[i] for i in again])))
        return [acks[i] for i in range(len(msgs))]

    async def _consume_distinct(self, msgs: list[MessageExt], rids: list[str], todo: list[int]) -> dict[int, bool]:
        """consume_batch of msgs[i] for i in todo, whose ids are distinct."""
        acks: dict[int, bool] = {}
        guard = self.guard
        keys: dict[int, str] = {}
        tokens: dict[int, str] = {}
        held: set[int] = set()
        if guard is not None:
            for i, token in zip(todo, guard.new_tokens(len(todo))):
                keys[i], tokens[i] = guard.key(self.group, rids[i]), token
            errors = guard.errors
            states = await guard.acquire_many([keys[i] for i in todo], [tokens[i] for i in todo])
            if guard.errors != errors:
                self.metrics.inc("redis_errors")
            for i, state in zip(todo, states):
                if state == dedup.DONE:
                    self.metrics.inc("duplicates_redis")
                    acks[i] = True
                elif state == dedup.ACQUIRED:
                    held.add(i)
            todo = [i for i in todo if i not in acks]
        outcomes: dict[int, str | Exception] = {}
        if todo:
            try:
                outcomes = await self._batch_transaction([(i, msgs[i], rids[i]) for i in todo])
            except asyncio.CancelledError:  # a rebalance took the queue: the next owner redelivers
                if held:
                    self._background(guard.finish_many([], [(keys[i], tokens[i]) for i in held]))
                raise
            except _Unisolated:
                self.metrics.inc("batches_split")
                if held:
                    await guard.finish_many([], [(keys[i], tokens[i]) for i in held])
                for i in todo:
                    acks[i] = await self._consume_one(msgs[i], rids[i])
                todo = []
            except Exception as e:  # the transaction itself failed: nothing of it committed
                outcomes = {i: e for i in todo}
        if guard is not None and todo:
            done = [keys[i] for i in todo if outcomes[i] in (PROCESSED, DUPLICATE)]
            # in progress elsewhere: Redis had lost the holder's key, ours is not the holder's;
            # voided: not "done" (a requeued stub's next copy must be processed); failed: retried
            release = [(keys[i], tokens[i]) for i in todo if i in held and outcomes[i] not in (PROCESSED, DUPLICATE)]
            await guard.finish_many(done, release)
        for i in todo:
            outcome = outcomes[i]
            if isinstance(outcome, Exception):
                await self._failed(rids[i], msgs[i], outcome)
                acks[i] = False
            else:
                acks[i] = True
                if outcome == PROCESSED and self.on_confirmed is not None:
                    await _call_hook(self.on_confirmed, rids[i], msgs[i])
        return acks

    async def _batch_transaction(self, items: list[tuple[int, MessageExt, str]]) -> dict[int, str | Exception]:
        now = now_ms()
        outcomes: dict[int, str | Exception] = {}
        confirmed = 0
        async with self.store.transaction(begin_with_first_statement=True) as s:
            claims = await self.store.begin_messages(
                s, self.group, [(rid, MessageInfo(msg.topic, msg.broker_name, msg.queue_id, msg.queue_offset,
                                                  msg.uniq_key or msg.msg_id, msg.reconsume_times))
                                for _, msg, rid in items], now, self.confirm)
            for (i, msg, rid), (claim, status) in zip(items, claims):
                if claim == DONE:
                    self.metrics.inc("duplicates_db")
                    outcomes[i] = DUPLICATE
                elif claim == BUSY:
                    self.metrics.inc("in_progress_elsewhere")
                    outcomes[i] = IN_PROGRESS
                elif status == VOIDED:  # voided by an operator: not to be processed
                    await self.store.withdraw_message(s, self.group, rid, None)
                    self.metrics.inc("skipped_voided")
                    outcomes[i] = SKIPPED_VOIDED
                else:
                    outcomes[i] = await self._handle_in_batch(s, i, msg, rid, status)
                    if outcomes[i] == PROCESSED and status in (UNCONFIRMED, MANUAL):
                        confirmed += 1
        processed = sum(o == PROCESSED for o in outcomes.values())
        self.metrics.inc("processed", processed)
        self.metrics.inc("confirmed_stubs", confirmed)
        return outcomes

    async def _handle_in_batch(self, s: Session, i: int, msg: MessageExt, rid: str, status: str | None) -> str | Exception:
        s.savepoint(f"m{i}")
        try:
            result = self.handler(msg, s)
            if inspect.isawaitable(result):
                result = await result
            if result is False:
                raise HandlerFailed(f"handler returned False for {rid}")
            if s.in_error:  # it caught a failed statement's error itself: its work is not whole
                raise HandlerFailed(f"handler for {rid} left its transaction aborted")
            s.end_savepoint()
        except Exception as e:
            if not await s.rollback_to_savepoint():
                raise _Unisolated() from e
            await self.store.withdraw_message(s, self.group, rid, status if self.confirm else None)
            return e
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


def _batch_size(n: int) -> int:
    if not isinstance(n, int) or not 1 <= n <= MAX_CONSUME_BATCH:
        raise ValueError(f"batch_size {n!r}: 1 to {MAX_CONSUME_BATCH} messages (consumeMessageBatchMaxSize's range)")
    return n
