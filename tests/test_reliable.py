"""broker.reliable (issue 9): outbox producer, resend worker and idempotent consumer against a real
name server and broker (processes), a real Redis and a real PostgreSQL (started here), and SQLite.

The end-to-end tests run per backend: PostgreSQL + Redis, SQLite + Redis, and SQLite alone (no
Redis: the database decides by itself) — the Redis flush only where there is a Redis. The side
effects that must happen exactly once are rows a handler inserts into `effects` (no unique key
there: a second run would show as a second row), checked in the database. Two store-level tests
pin what exactly-once rests on: the log row's claim (done after a commit, free after a rollback,
busy or waited for while another transaction holds it) and a cancelled transaction leaving nothing.
"""
from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import sys
from pathlib import Path

import pytest

from broker.client import api
from broker.client.admin import Admin
from broker.client.errors import ClientError
from broker.client.message import Message
from broker.client.producer import Producer
from broker.client.push_consumer import PushConsumer
from broker.client.route import MessageQueue
from broker.reliable import (CONFIRMED, MANUAL, UNCONFIRMED, VOIDED, IdempotentConsumer, IllegalTransition,
                             OutboxProducer, open_store)
from broker.reliable.dedup import RedisGuard
from broker.reliable.stores import BUSY, CLAIMED, DONE, MessageInfo
from broker.reliable.stub import now_ms
from tests.helpers.procs import Child, async_wait_until
from tests.helpers.real_clients import Cluster
from tools.servers import PostgresServer, RedisServer

BACKENDS = ["postgres+redis", "sqlite+redis", "sqlite"]
REDIS_BACKENDS = ["postgres+redis", "sqlite+redis"]
SUSPEND_MS = 15000  # long polls as Java's; wake-ups come from the broker's hold service


@pytest.fixture(scope="module")
def redis_server():
    server = RedisServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def pg_server():
    server = PostgresServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("reliable-cluster")) as c:
        yield c


class Backend:
    def __init__(self, name: str, store_url: str, redis: RedisServer | None, tag: str):
        self.name = name
        self.store_url = store_url
        self.redis = redis
        self.redis_url = redis.url if redis else None
        self.tag = tag  # unique per test: topic and group names

    def names(self, what: str) -> str:
        return f"{what}_{self.tag}"


@pytest.fixture
def backend(request, tmp_path, redis_server, pg_server):
    name = request.param
    if name.startswith("postgres"):
        url = pg_server.new_database()
    else:
        url = f"sqlite:///{tmp_path / 'reliable.db'}"
    words = request.node.originalname.split("_")[1:4]  # test_<a>_<b>_<c>_...: short unique names
    tag = "_".join(words + [name.replace("+", "_")])
    return Backend(name, url, redis_server if "redis" in name else None, tag)


# -- helpers ---------------------------------------------------------------------------------------
async def create_topic(cluster: Cluster, topic: str, queues: int = 4) -> None:
    async with Admin(cluster.namesrv) as admin:
        await admin.create_topic(topic, queues)
        deadline = asyncio.get_running_loop().time() + 30
        while True:  # the route follows once the broker re-registers
            try:
                route = await admin.route(topic)
                if len(route.read_queues(topic)) == queues:
                    return
            except ClientError:
                pass
            assert asyncio.get_running_loop().time() < deadline, f"no route of {topic}"
            await asyncio.sleep(0.05)


async def make_effects_table(store_url: str) -> None:
    store = open_store(store_url)
    async with store:
        async with store.transaction() as s:
            await s.execute("CREATE TABLE IF NOT EXISTS effects (rid TEXT NOT NULL, worker TEXT)")


async def effects(store_url: str) -> dict[str, int]:
    """rid -> how many times its side effect was committed."""
    store = open_store(store_url)
    async with store:
        async with store.transaction() as s:
            rows = await s.fetchall("SELECT rid, COUNT(*) FROM effects GROUP BY rid")
    return {rid: n for rid, n in rows}


def effect_handler(worker: str, calls: list | None = None, before=None):
    async def handler(msg, session):
        rid = msg.properties["RELIABLE_ID"]
        if calls is not None:
            calls.append(rid)
        if before is not None:
            await before(msg)
        await session.execute("INSERT INTO effects (rid, worker) VALUES (?, ?)", (rid, worker))
    return handler


def push_consumer(cluster: Cluster, group: str, topic: str, **kw) -> PushConsumer:
    kw.setdefault("persist_interval", 0.2)
    pc = PushConsumer(group, cluster.namesrv, consume_from_first=True, suspend_ms=SUSPEND_MS, **kw)
    pc.subscribe(topic)
    return pc


def dup_acks(ic: IdempotentConsumer) -> int:
    m = ic.metrics
    return m["duplicates_redis"] + m["duplicates_db"] + m["in_progress_elsewhere"]


async def until(predicate, timeout: float = 30.0, what: str = "condition"):
    """async_wait_until for predicates that are coroutines (database reads)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.02)


async def child_wait(child: Child, predicate, timeout: float, what: str):
    return await asyncio.get_running_loop().run_in_executor(None, child.wait_lines, predicate, timeout, what)


def start_child(cmd: str, opt: dict, tmp_path: Path) -> Child:
    return Child([sys.executable, "-m", "tests.helpers.reliable_child", cmd, json.dumps(opt)],
                 tmp_path / f"{cmd}.err")


# -- the database's claim: the part exactly-once rests on -------------------------------------------
@pytest.mark.parametrize("backend", ["postgres+redis", "sqlite"], indirect=True)
def test_claim_is_done_after_commit_free_after_rollback_and_busy_while_held(backend):
    async def go():
        info = MessageInfo("T", "broker-a", 0, 0, "m", 0)
        url = backend.store_url + ("&" if "?" in backend.store_url else "?") + (
            "lock_wait_ms=200" if backend.name.startswith("postgres") else "busy_timeout_ms=200")
        a, b = open_store(url), open_store(url)  # two stores: two processes' worth of connections
        async with a, b:
            async with a.transaction() as s:  # rolled back: the claim is free again
                assert await a.claim_message(s, "g", "r1", info, 1) == CLAIMED
                s.set_rollback_only()
            async with a.transaction() as s:
                assert await a.claim_message(s, "g", "r1", info, 1) == CLAIMED
            async with b.transaction() as s:
                assert await b.claim_message(s, "g", "r1", info, 2) == DONE
                assert await b.claim_message(s, "other-group", "r1", info, 2) == CLAIMED  # per group
            assert await a.processed("g", "r1") and not await a.processed("g", "r2")
            held = asyncio.Event()
            release = asyncio.Event()

            async def holder():
                async with a.transaction() as s:
                    assert await a.claim_message(s, "g", "r2", info, 3) == CLAIMED
                    held.set()
                    await release.wait()
            task = asyncio.ensure_future(holder())
            await held.wait()
            if backend.name.startswith("postgres"):
                # a live transaction holds r2: in progress elsewhere, after the lock wait
                async with b.transaction() as s:
                    assert await b.claim_message(s, "g", "r2", info, 4) == BUSY
            else:
                # SQLite's one writer: the other store cannot even begin while r2 is held
                with pytest.raises(Exception, match="locked"):
                    async with b.transaction() as s:
                        await b.claim_message(s, "g", "r2", info, 4)
            release.set()
            await task
            async with b.transaction() as s:
                assert await b.claim_message(s, "g", "r2", info, 5) == DONE
            if backend.name.startswith("postgres"):
                await _waiter_follows_the_holder(a, backend.store_url, info)
    asyncio.run(go())


async def _waiter_follows_the_holder(holder_store, url: str, info: MessageInfo) -> None:
    """PostgreSQL: a claim that finds another transaction's claim waits for its outcome: the
    holder's rollback frees the claim for the waiter, its commit makes the waiter's answer DONE."""
    waiter_store = open_store(url + "?lock_wait_ms=30000")
    async with waiter_store:
        for outcome, expected in (("rollback", CLAIMED), ("commit", DONE)):
            rid = f"r3-{outcome}"
            held, release = asyncio.Event(), asyncio.Event()

            async def holder(rid=rid, outcome=outcome, held=held, release=release):
                async with holder_store.transaction() as s:
                    assert await holder_store.claim_message(s, "g", rid, info, 6) == CLAIMED
                    held.set()
                    await release.wait()
                    if outcome == "rollback":
                        s.set_rollback_only()

            async def waiter(rid=rid):
                async with waiter_store.transaction() as s:
                    return await waiter_store.claim_message(s, "g", rid, info, 7)
            h = asyncio.ensure_future(holder())
            await held.wait()
            w = asyncio.ensure_future(waiter())

            async def waiting():
                async with holder_store.transaction() as s:
                    row = await s.fetchone("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
                return row[0] == 1
            await until(waiting, 10, "the waiter blocked on the holder's row")
            release.set()
            await h
            assert await w == expected, outcome


@pytest.mark.parametrize("backend", ["postgres+redis", "sqlite"], indirect=True)
def test_a_transaction_cancelled_mid_statement_leaves_nothing_behind(backend):
    """A rebalance cancels a handler wherever it is, a statement on its way included: what that
    transaction wrote must be rolled back and the store must go on working."""
    async def go():
        store = open_store(backend.store_url)
        async with store:
            async with store.transaction() as s:
                await s.execute("CREATE TABLE cancelled (v INTEGER)")
            started = asyncio.Event()

            async def victim():
                async with store.transaction() as s:
                    if backend.name.startswith("postgres"):
                        await s.execute("INSERT INTO cancelled (v) VALUES (1)")
                        started.set()
                        await s.execute("SELECT pg_sleep(30)")  # cancelled while the server runs it
                    else:
                        # the first statement's BEGIN waits in the database thread for another
                        # process's write lock; cancelled there, it still begins (and inserts) later
                        started.set()
                        await s.execute("INSERT INTO cancelled (v) VALUES (1)")
            other = None
            if not backend.name.startswith("postgres"):
                other = sqlite3.connect(store.path, isolation_level=None)
                other.execute("BEGIN IMMEDIATE")
            task = asyncio.ensure_future(victim())
            await started.wait()
            await asyncio.sleep(0.1)
            task.cancel()
            if other is not None:  # the other process lets go: the cancelled BEGIN goes ahead
                other.execute("ROLLBACK")
                other.close()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(3):  # the connection (or its replacement) is usable, nothing committed
                async with store.transaction() as s:
                    assert await s.fetchall("SELECT v FROM cancelled") == []
    asyncio.run(go())


# -- producer killed between the database write and the send ---------------------------------------
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_producer_killed_before_send_resend_worker_delivers_and_handler_runs_once(backend, cluster, tmp_path):
    topic, group, cgroup = backend.names("KILLP"), backend.names("pg"), backend.names("cg")
    n = 5

    async def go():
        await create_topic(cluster, topic)
        await make_effects_table(backend.store_url)
        child = start_child("producer", {"namesrv": cluster.namesrv, "store": backend.store_url, "topic": topic,
                                         "group": group, "count": n, "prefix": backend.tag, "resend_after": 0.3},
                            tmp_path)
        try:
            await child_wait(child, lambda ls: any(line.startswith("blocked ") for line in ls), 60,
                             "the producer to commit and block in its send")
        finally:
            child.kill_group()
        ids = [f"{backend.tag}-{i}" for i in range(n)]
        store = open_store(backend.store_url)
        async with store:
            async with store.transaction() as s:  # the business rows committed with the stubs
                assert sorted(r[0] for r in await s.fetchall("SELECT id FROM orders")) == ids
            stubs = {s.id: s for s in await store.list_stubs(group)}
            assert sorted(stubs) == ids
            assert all(s.status == UNCONFIRMED and s.count == 0 and s.queue_offset is None for s in stubs.values())
        async with Admin(cluster.namesrv) as admin:  # nothing reached the broker
            assert sum(q.max_offset for q in await admin.consumer_offsets(cgroup, topic)) == 0

        calls: list = []
        ic = IdempotentConsumer(push_consumer(cluster, cgroup, topic), effect_handler("c", calls),
                                backend.store_url, backend.redis_url)
        outbox = OutboxProducer(Producer(group, cluster.namesrv), backend.store_url, consumer_group=cgroup,
                                resend_after=0.3, scan_interval=0.05)
        async with ic, outbox:  # the outbox's resend worker takes the orphaned stubs over
            await until(lambda: ic.metrics["processed"] == n, what="every orphaned stub delivered and handled")

            async def all_confirmed():
                return all(s.status == CONFIRMED for s in await outbox.stubs())
            await until(all_confirmed, what="every stub confirmed")
            # confirmed stubs are not resent, however many scans pass
            for _ in range(3):
                assert (await outbox.worker.run_once())["resent"] == 0
        assert sorted(calls) == ids  # the handler ran once per message
        assert await effects(backend.store_url) == {rid: 1 for rid in ids}
        store = open_store(backend.store_url)
        async with store:
            for s in await store.list_stubs(group):
                assert s.count == 1 and s.queue_offset is not None and s.confirmed_at is not None
        assert outbox.metrics["resent"] == n and ic.metrics["confirmed_stubs"] == n
    asyncio.run(go())


# -- resends respect the consumer's backlog ---------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_resend_waits_while_the_consumer_has_not_reached_the_message(backend, cluster):
    topic, group, cgroup = backend.names("LAG"), backend.names("pg"), backend.names("cg")

    async def go():
        await create_topic(cluster, topic)
        await make_effects_table(backend.store_url)
        outbox = OutboxProducer(Producer(group, cluster.namesrv), backend.store_url, consumer_group=cgroup,
                                resend_after=0.2, resend=False)
        async with outbox:
            sent = await outbox.send(Message(topic, b"waiting in the queue"))
            first = await outbox.stub(sent.id)
            assert first.count == 1 and first.queue_offset == sent.result.queue_offset

            async def due():
                return (await outbox.stub(sent.id)).next_resend_at <= now_ms()
            await until(due, what="the stub due")
            # no consumer has got there (nothing committed): resending would only queue a copy
            report = await outbox.worker.run_once()
            assert report["postponed"] == 1 and report["resent"] == 0
            stub = await outbox.stub(sent.id)
            assert stub.count == 1 and stub.status == UNCONFIRMED and stub.next_resend_at > first.next_resend_at
            ic = IdempotentConsumer(push_consumer(cluster, cgroup, topic), effect_handler("c"), backend.store_url,
                                    backend.redis_url)
            async with ic:
                await until(lambda: ic.metrics["processed"] == 1, what="the consumer to catch up")
            assert (await outbox.stub(sent.id)).status == CONFIRMED
            await until(due, what="the stub's next look")
            assert (await outbox.worker.run_once())["looked_at"] == 0  # confirmed: not due any more
            assert outbox.metrics["resent"] == 0 and outbox.metrics["postponed_backlog"] == 1
        assert await effects(backend.store_url) == {sent.id: 1}
    asyncio.run(go())


# -- a voided stub's message is skipped; requeued, it is sent and processed ---------------------------
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_voided_message_is_skipped_and_processed_once_requeued(backend, cluster):
    topic, group, cgroup = backend.names("VOID"), backend.names("pg"), backend.names("cg")

    async def go():
        await create_topic(cluster, topic)
        await make_effects_table(backend.store_url)
        calls: list = []
        outbox = OutboxProducer(Producer(group, cluster.namesrv), backend.store_url, resend=False)
        ic = IdempotentConsumer(push_consumer(cluster, cgroup, topic), effect_handler("c", calls),
                                backend.store_url, backend.redis_url)
        async with outbox:
            sent = await outbox.send(Message(topic, b"cancel me"))
            await outbox.void(sent.id)  # an operator gives it up before anyone consumed it
            async with ic:
                await until(lambda: ic.metrics["skipped_voided"] == 1, what="the voided copy skipped")
                assert calls == [] and await effects(backend.store_url) == {}
                await outbox.requeue(sent.id)  # changed their mind: unconfirmed, due now
                assert (await outbox.worker.run_once())["resent"] == 1
                await until(lambda: ic.metrics["processed"] == 1, what="the requeued copy processed")
            stub = await outbox.stub(sent.id)
            assert stub.status == CONFIRMED and stub.count == 1  # the requeue restarted the count
        assert calls == [sent.id] and await effects(backend.store_url) == {sent.id: 1}
    asyncio.run(go())


# -- duplicates: the same message three times, and a rebalance during processing --------------------
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_three_copies_and_a_rebalance_mid_handler_process_each_message_once(backend, cluster):
    topic, group, cgroup = backend.names("DUP"), backend.names("pg"), backend.names("cg")
    n = 20

    async def go():
        await create_topic(cluster, topic)
        await make_effects_table(backend.store_url)
        async with OutboxProducer(Producer(group, cluster.namesrv), backend.store_url, resend=False) as outbox:
            ids = [(await outbox.send(Message(topic, b"x" * 1024))).id for _ in range(n)]
            for rid in ids:  # the same message twice more: a producer retry, a resend
                stub = await outbox.stub(rid)
                await outbox.producer.send(stub.message())
                await outbox.producer.send(stub.message())

        # A (batches of 4) lets handlers through until it has committed 8 messages, then blocks
        # every later one (mid-batch: the batch's earlier handlers ran) until it is cancelled
        cancelled = [0]
        blocked = asyncio.Event()

        async def gate(msg):
            if a.metrics["processed"] < 8:
                return
            blocked.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled[0] += 1
                raise

        a = IdempotentConsumer(push_consumer(cluster, cgroup, topic, persist_interval=3600),
                               effect_handler("a", before=gate), backend.store_url, backend.redis_url, batch_size=4)
        b = IdempotentConsumer(push_consumer(cluster, cgroup, topic), effect_handler("b"), backend.store_url,
                               backend.redis_url)
        await a.start()
        try:
            await until(lambda: blocked.is_set() and a.metrics["processed"] >= 8,
                        what="A blocked in a handler after its first commits")
            await b.start()  # rebalance: half of A's queues move to B while A is mid-handler
            t = {MessageQueue(topic, "broker-a", i) for i in range(4)}
            await async_wait_until(lambda: len(a.consumer.assigned_queues & t) == 2
                                   and len(b.consumer.assigned_queues & t) == 2, 20, "the queues shared out")
        finally:
            await a.shutdown()  # another rebalance: A's blocked handlers are cancelled, B takes all
        try:
            await until(lambda: a.metrics["processed"] + b.metrics["processed"] == n
                        and a.metrics["processed"] + b.metrics["processed"] + dup_acks(a) + dup_acks(b) >= 3 * n,
                        what="every copy acknowledged")
        finally:
            await b.shutdown()
        assert cancelled[0] >= 1  # the rebalance did interrupt a handler mid-transaction
        assert await effects(backend.store_url) == {rid: 1 for rid in ids}
        assert a.metrics["processed"] >= 1 and b.metrics["processed"] >= 1
        if backend.redis is not None:
            assert a.metrics["duplicates_redis"] + b.metrics["duplicates_redis"] >= 1
    asyncio.run(go())


# -- a consumer killed after its handler committed and before the ack -------------------------------
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_consumer_killed_after_commit_before_ack_redelivery_is_not_reprocessed(backend, cluster, tmp_path):
    topic, group, cgroup = backend.names("KILLC"), backend.names("pg"), backend.names("cg")
    n = 10

    async def go():
        await create_topic(cluster, topic)
        await make_effects_table(backend.store_url)
        async with OutboxProducer(Producer(group, cluster.namesrv), backend.store_url, resend=False) as outbox:
            ids = [(await outbox.send(Message(topic, f"m{i}".encode()))).id for i in range(n)]
        child = start_child("consumer", {"namesrv": cluster.namesrv, "store": backend.store_url,
                                         "redis": backend.redis_url, "topic": topic, "group": cgroup,
                                         "block_after": n}, tmp_path)
        try:
            lines = await child_wait(child, lambda ls: [x for x in ls if x.startswith("done ")]
                                     if sum(x.startswith("done ") for x in ls) == n else None, 60,
                                     "the child to commit every handler")
        finally:
            child.kill_group()  # SIGKILL: the last message committed and not acknowledged, no offsets
        assert sorted(x.split()[1] for x in lines) == sorted(ids)
        async with Admin(cluster.namesrv) as admin:
            assert all(q.committed <= 0 for q in await admin.consumer_offsets(cgroup, topic))

        calls: list = []
        ic = IdempotentConsumer(push_consumer(cluster, cgroup, topic), effect_handler("after", calls),
                                backend.store_url, backend.redis_url)
        async with ic:  # everything comes again from offset 0
            await until(lambda: dup_acks(ic) == n, what="every redelivered copy acknowledged as a duplicate")
        assert calls == [] and ic.metrics["processed"] == 0
        if backend.redis is not None:
            assert ic.metrics["duplicates_redis"] == n  # Redis knew; the database was not asked
        else:
            assert ic.metrics["duplicates_db"] == n
        assert await effects(backend.store_url) == {rid: 1 for rid in ids}
    asyncio.run(go())


# -- Redis flushed mid-run ---------------------------------------------------------------------------
@pytest.mark.parametrize("backend", REDIS_BACKENDS, indirect=True)
def test_redis_flushed_mid_run_the_database_still_prevents_double_processing(backend, cluster):
    topic, group, cgroup = backend.names("FLUSH"), backend.names("pg"), backend.names("cg")
    n = 10

    async def go():
        await create_topic(cluster, topic)
        await make_effects_table(backend.store_url)
        calls: list = []
        ic = IdempotentConsumer(push_consumer(cluster, cgroup, topic), effect_handler("c", calls),
                                backend.store_url, backend.redis_url)
        async with OutboxProducer(Producer(group, cluster.namesrv), backend.store_url, resend=False) as outbox, ic:
            first = [(await outbox.send(Message(topic, f"a{i}".encode()))).id for i in range(n)]
            await until(lambda: ic.metrics["processed"] == n, what="the first messages handled")
            guard = RedisGuard(backend.redis_url)
            await guard.open()
            try:
                assert await guard._r.get(guard.key(cgroup, first[0])) == b"D"
                backend.redis.flushall()  # every key gone, the consumer still running
                assert await guard._r.dbsize() == 0
            finally:
                await guard.close()
            for rid in first:  # the same messages again, and new ones between them
                await outbox.producer.send((await outbox.stub(rid)).message())
                await outbox.send(Message(topic, b"new"))
            await until(lambda: ic.metrics["processed"] == 2 * n and ic.metrics["duplicates_db"] == n,
                        what="new ones handled, old ones refused by the database")
        assert ic.metrics["duplicates_redis"] == 0  # Redis had forgotten: the database decided
        counts = await effects(backend.store_url)
        assert len(counts) == 2 * n and set(counts.values()) == {1} and set(first) <= set(counts)
        assert len(calls) == 2 * n
    asyncio.run(go())


# -- a handler that always fails: DLQ, then manual handling after maxResend -------------------------
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_always_failing_handler_ends_in_dlq_and_stub_in_manual_handling(backend, cluster, caplog):
    topic, group, cgroup = backend.names("FAIL"), backend.names("pg"), backend.names("cg")

    async def go():
        await create_topic(cluster, topic)
        await make_effects_table(backend.store_url)
        attempts: list = []
        manual: list = []
        dead: list = []

        async def handler(msg, session):
            attempts.append(msg.reconsume_times)
            await session.execute("INSERT INTO effects (rid, worker) VALUES (?, ?)",
                                  (msg.properties["RELIABLE_ID"], "doomed"))  # rolled back each time
            raise RuntimeError("the payment service says no")

        ic = IdempotentConsumer(push_consumer(cluster, cgroup, topic, max_reconsume_times=1), handler,
                                backend.store_url, backend.redis_url, on_dead_letter=lambda *a: dead.append(a))
        outbox = OutboxProducer(Producer(group, cluster.namesrv), backend.store_url, consumer_group=cgroup,
                                resend_after=0.3, backoff=1.0, max_resend=1, scan_interval=0.05,
                                on_manual=manual.append)
        async with outbox, ic:
            sent = await outbox.send(Message(topic, b"pay 10"))
            await until(lambda: manual, what="the stub handed to manual handling")
            stub = await outbox.stub(sent.id)
            assert stub.status == MANUAL and stub.count == 2  # the first send and max_resend = 1 resend
            assert [s.id for s in manual] == [sent.id] and outbox.metrics["manual"] == 1
            assert [s.id for s in await outbox.stubs(MANUAL)] == [sent.id]
            dlq = MessageQueue(f"%DLQ%{cgroup}", "broker-a", 0)
            # each send was tried 1 + max_reconsume_times times, then went to the DLQ
            await async_wait_until(lambda: len(dead) == 2, 10, "both copies dead-lettered")
            assert sorted(attempts) == [0, 0, 1, 1]
            assert await api.queue_offset(outbox.producer.client, cluster.addr, dlq) == 2
            assert ic.metrics["failures"] == 4 and ic.metrics["dead_lettered"] == 2 and ic.metrics["processed"] == 0
            # operators: void it, bring it back, and a confirmed stub cannot be voided
            await outbox.void(sent.id)
            assert (await outbox.stub(sent.id)).status == VOIDED
            await outbox.requeue(sent.id)
            stub = await outbox.stub(sent.id)
            assert stub.status == UNCONFIRMED and stub.count == 0
            await outbox.confirm(sent.id)
            with pytest.raises(IllegalTransition):
                await outbox.void(sent.id)
        assert await effects(backend.store_url) == {}  # every failed attempt rolled back
        if backend.redis is not None:  # failures delete their key: nothing says "done"
            guard = RedisGuard(backend.redis_url)
            await guard.open()
            try:
                assert await guard._r.get(guard.key(cgroup, sent.id)) is None
            finally:
                await guard.close()
        assert any("manual handling" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    asyncio.run(go())
