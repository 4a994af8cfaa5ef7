"""The idempotent consumer's batches (issue 19): one transaction per batch with a savepoint per
handler, the Redis guard in one round trip per batch, and the message log's cleaning on a schedule.

Same real servers and helpers as tests/test_reliable.py (name server and broker processes, a real
Redis and PostgreSQL, SQLite files). A one-queue topic puts every message produced before the
consumer starts into one pull, hence one batch; handlers of one batch share one session, which the
tests check so that "in the same batch" is a fact, not an assumption.
"""
from __future__ import annotations

import asyncio

import pytest

from broker.client.admin import Admin
from broker.client.message import Message
from broker.client.producer import Producer
from broker.reliable import CONFIRMED, CleanMessageLogService, IdempotentConsumer, OutboxProducer, open_store
from broker.reliable.dedup import RedisGuard
from broker.reliable.stores import MessageInfo
from broker.reliable.stub import now_ms
from tests.test_reliable import (BACKENDS, REDIS_BACKENDS, backend, child_wait, cluster, create_topic,  # noqa: F401
                                 effects, make_effects_table, pg_server, push_consumer, redis_server, start_child,
                                 until)

HOUR_MS = 3_600_000


async def send_all(cluster, store_url: str, group: str, topic: str, n: int) -> list[str]:
    """n messages through the outbox, returned once the broker's queues hold them all: a SEND_OK is
    in the commit log, the queue entry comes with the reput a moment later, and the batch tests
    count on a consumer started now getting all n in its first pull (one batch)."""
    async with OutboxProducer(Producer(group, cluster.namesrv), store_url, resend=False) as outbox:
        ids = [(await outbox.send(Message(topic, f"m{i}".encode()))).id for i in range(n)]
    async with Admin(cluster.namesrv) as admin:
        deadline = asyncio.get_running_loop().time() + 30
        while sum(q.max_offset for q in await admin.consumer_offsets("send-all", topic)) < n:
            assert asyncio.get_running_loop().time() < deadline, f"{topic}: {n} messages not all dispatched"
            await asyncio.sleep(0.01)  # another process's reput: nothing to wait on but asking again
    return ids


async def send_copies(cluster, store_url: str, group: str, ids: list[str]) -> None:
    """The same messages again (a producer's retry, a resend): same RELIABLE_ID, new msgId."""
    async with OutboxProducer(Producer(group, cluster.namesrv), store_url, resend=False) as outbox:
        for rid in ids:
            await outbox.producer.send((await outbox.stub(rid)).message())


async def redis_values(url: str, group: str, ids: list[str]) -> list:
    guard = RedisGuard(url)
    await guard.open()
    try:
        return [await guard._r.get(guard.key(group, rid)) for rid in ids]
    finally:
        await guard.close()


# -- a failing handler in the middle of a batch ------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_failing_handler_mid_batch_rolls_back_alone_and_only_its_message_is_retried(backend, cluster):
    topic, group, cgroup = backend.names("MIDF"), backend.names("pg"), backend.names("cg")
    n = 10

    async def go():
        await create_topic(cluster, topic, 1)
        await make_effects_table(backend.store_url)
        ids = await send_all(cluster, backend.store_url, group, topic, n)
        bad = ids[n // 2]
        calls: list[tuple[str, int]] = []
        sessions: dict[str, list] = {}

        async def handler(msg, session):
            rid = msg.properties["RELIABLE_ID"]
            calls.append((rid, msg.reconsume_times))
            sessions.setdefault(rid, []).append(session)
            await session.execute("INSERT INTO effects (rid, worker) VALUES (?, ?)", (rid, "c"))
            if rid == bad and msg.reconsume_times == 0:
                raise RuntimeError("the first attempt at this one fails, after its insert")

        ic = IdempotentConsumer(push_consumer(cluster, cgroup, topic), handler, backend.store_url, backend.redis_url)
        async with ic:
            await until(lambda: ic.metrics["processed"] == n, 60, "every message processed, the bad one on retry")
        # the first n handlers ran in one transaction: one batch
        first = [sessions[rid][0] for rid in ids]
        assert all(s is first[0] for s in first)
        assert sorted(calls) == sorted([(rid, 0) for rid in ids] + [(bad, 1)])  # only the bad one again
        assert len(sessions[bad]) == 2 and sessions[bad][1] is not first[0]
        assert ic.metrics["failures"] == 1 and ic.metrics["batches"] >= 1
        # its first insert was rolled back to its savepoint; everyone's effect committed once
        assert await effects(backend.store_url) == {rid: 1 for rid in ids}
        store = open_store(backend.store_url)
        async with store:
            assert all(s.status == CONFIRMED for s in await store.list_stubs(group))
        if backend.redis is not None:  # the failure released its key; the retry's commit marked it
            assert await redis_values(backend.redis_url, cgroup, ids) == [b"D"] * n
    asyncio.run(go())


@pytest.mark.parametrize("backend", ["postgres+redis", "sqlite"], indirect=True)
def test_handler_returning_false_or_swallowing_a_failed_statement_fails_alone(backend, cluster):
    """False, and a handler that catches its own statement's error (PostgreSQL: the transaction is
    aborted from there on) count as failures of that message alone."""
    topic, group, cgroup = backend.names("SWAL"), backend.names("pg"), backend.names("cg")
    n = 6

    async def go():
        await create_topic(cluster, topic, 1)
        await make_effects_table(backend.store_url)
        ids = await send_all(cluster, backend.store_url, group, topic, n)
        calls: list[str] = []

        async def handler(msg, session):
            rid = msg.properties["RELIABLE_ID"]
            calls.append(rid)
            await session.execute("INSERT INTO effects (rid, worker) VALUES (?, ?)", (rid, "c"))
            if msg.reconsume_times == 0 and rid == ids[1]:
                return False
            if msg.reconsume_times == 0 and rid == ids[3]:
                try:
                    await session.execute("INSERT INTO no_such_table VALUES (1)")
                except Exception:
                    pass  # swallowed: its work is not whole all the same

        ic = IdempotentConsumer(push_consumer(cluster, cgroup, topic), handler, backend.store_url, None)
        async with ic:
            await until(lambda: ic.metrics["processed"] == n, 60, "every message processed")
        assert ic.metrics["failures"] == (2 if backend.name.startswith("postgres") else 1)
        assert sorted(calls) == sorted(ids + [ids[1]] + ([ids[3]] if backend.name.startswith("postgres") else []))
        assert await effects(backend.store_url) == {rid: 1 for rid in ids}
    asyncio.run(go())


# -- kill -9 mid-batch --------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_consumer_killed_mid_batch_nothing_of_the_batch_commits_and_each_message_runs_once(backend, cluster,
                                                                                         tmp_path):
    topic, group, cgroup = backend.names("KILLB"), backend.names("pg"), backend.names("cg")
    n, block_at = 12, 7

    async def go():
        await create_topic(cluster, topic, 1)
        await make_effects_table(backend.store_url)
        ids = await send_all(cluster, backend.store_url, group, topic, n)
        child = start_child("consumer", {"namesrv": cluster.namesrv, "store": backend.store_url,
                                         "redis": backend.redis_url, "topic": topic, "group": cgroup,
                                         "block_after": 0, "block_in_handler": block_at, "batch_size": 32},
                            tmp_path)
        try:
            lines = await child_wait(child, lambda ls: [x for x in ls if x.startswith("handled ")]
                                     if sum(x.startswith("handled ") for x in ls) == block_at else None, 60,
                                     f"the child's batch to reach handler {block_at}")
        finally:
            child.kill_group()  # SIGKILL mid-batch: 7 handlers ran in an open transaction
        assert [x.split()[1] for x in lines] == ids[:block_at]
        assert not any(x.startswith("done ") for x in child.lines)
        assert await effects(backend.store_url) == {}  # the batch's transaction died with the process

        calls: list[str] = []

        async def handler(msg, session):
            calls.append(msg.properties["RELIABLE_ID"])
            await session.execute("INSERT INTO effects (rid, worker) VALUES (?, ?)",
                                  (msg.properties["RELIABLE_ID"], "after"))
        ic = IdempotentConsumer(push_consumer(cluster, cgroup, topic), handler, backend.store_url, backend.redis_url)
        async with ic:
            await until(lambda: ic.metrics["processed"] == n, 60, "the batch processed again, every message")
        assert sorted(calls) == sorted(ids)
        assert await effects(backend.store_url) == {rid: 1 for rid in ids}
        # and again: every copy is a duplicate now, nothing runs
        calls.clear()
        await send_copies(cluster, backend.store_url, group, ids)
        ic = IdempotentConsumer(push_consumer(cluster, cgroup, topic), handler, backend.store_url, backend.redis_url)
        async with ic:
            await until(lambda: ic.metrics["duplicates_redis"] + ic.metrics["duplicates_db"] == n, 60,
                        "the copies refused")
        assert calls == [] and await effects(backend.store_url) == {rid: 1 for rid in ids}
    asyncio.run(go())


# -- the Redis guard: one round trip per batch ----------------------------------------------------------
@pytest.mark.parametrize("backend", REDIS_BACKENDS, indirect=True)
def test_redis_guard_takes_one_round_trip_per_batch_each_way(backend, cluster):
    topic, group, cgroup = backend.names("RTT"), backend.names("pg"), backend.names("cg")
    n = 20

    async def go():
        await create_topic(cluster, topic, 1)
        await make_effects_table(backend.store_url)
        ids = await send_all(cluster, backend.store_url, group, topic, n)
        calls: list[str] = []

        async def handler(msg, session):
            calls.append(msg.properties["RELIABLE_ID"])
            await session.execute("INSERT INTO effects (rid, worker) VALUES (?, ?)",
                                  (msg.properties["RELIABLE_ID"], "c"))
        ic = IdempotentConsumer(push_consumer(cluster, cgroup, topic), handler, backend.store_url, backend.redis_url)
        async with ic:
            await until(lambda: ic.metrics["processed"] == n, 60, "the batch processed")
            assert ic.metrics["batches"] == 1
            assert ic.guard.round_trips == 2  # the batch's SET NXs, then its "done" marks
            assert await redis_values(backend.redis_url, cgroup, ids) == [b"D"] * n
            await send_copies(cluster, backend.store_url, group, ids)
            await until(lambda: ic.metrics["duplicates_redis"] == n, 60, "the copies refused by Redis")
            # the copies cost one round trip per batch that carried them, and no transaction
            assert ic.guard.round_trips == 2 + ic.metrics["batches"] - 1
            assert ic.metrics["duplicates_db"] == 0
        assert sorted(calls) == sorted(ids) and await effects(backend.store_url) == {rid: 1 for rid in ids}
    asyncio.run(go())


@pytest.mark.parametrize("backend", ["sqlite+redis"], indirect=True)
def test_redis_guard_batch_answers_per_key_and_releases_only_its_own_tokens(backend):
    async def go():
        guard = RedisGuard(backend.redis_url)
        await guard.open()
        try:
            keys = [guard.key("g", f"{backend.tag}-{i}") for i in range(4)]
            await guard._r.set(keys[1], b"D")  # committed before
            await guard._r.set(keys[2], b"P:someone-else")  # another delivery holds it
            tokens = guard.new_tokens(4)
            assert await guard.acquire_many(keys, tokens) == ["acquired", "done", "taken", "acquired"]
            assert guard.round_trips == 1
            await guard._r.set(keys[3], b"P:a-later-holder")  # ours expired, another took it
            await guard.finish_many([keys[0]], [(keys[3], tokens[3]), (keys[2], tokens[2])])
            assert guard.round_trips == 2
            assert [await guard._r.get(k) for k in keys] == [b"D", b"D", b"P:someone-else", b"P:a-later-holder"]
            assert await guard.acquire_many(keys[:1], guard.new_tokens(1)) == ["done"]
        finally:
            await guard.close()
    asyncio.run(go())


# -- the message log's cleaning ---------------------------------------------------------------------------
async def _old_rows(store_url: str, group: str, count: int, age_ms: int) -> list[str]:
    info = MessageInfo("T", "broker-a", 0, 0, "m", 0)
    ids = [f"old-{group}-{i}" for i in range(count)]
    store = open_store(store_url)
    async with store:
        async with store.transaction() as s:
            await store.begin_messages(s, group, [(rid, info) for rid in ids], now_ms() - age_ms, False)
    return ids


async def _log_ids(store_url: str) -> dict[str, set[str]]:
    store = open_store(store_url)
    async with store:
        async with store.transaction() as s:
            rows = await s.fetchall(f"SELECT grp, id FROM {store.log_table}")
    out: dict[str, set[str]] = {}
    for grp, rid in rows:
        out.setdefault(grp, set()).add(rid)
    return out


@pytest.mark.parametrize("backend", ["postgres+redis", "sqlite"], indirect=True)
def test_clean_message_log_service_deletes_old_rows_in_small_batches(backend):
    async def go():
        old = await _old_rows(backend.store_url, "g", 2500, 2 * HOUR_MS)
        recent = await _old_rows(backend.store_url, "g-recent", 3, 0)
        other = await _old_rows(backend.store_url, "other", 5, 2 * HOUR_MS)
        chunks: list[int] = []
        store = open_store(backend.store_url)
        async with store:
            svc = CleanMessageLogService(store, "g", retention_ms=HOUR_MS, batch=1000, on_deleted=chunks.append)
            assert await svc.run_once() == 2500
            assert chunks == [1000, 1000, 500]  # three short transactions, not one long one
            assert await svc.run_once() == 0
            with pytest.raises(ValueError, match="retention_ms"):
                CleanMessageLogService(store, "g", retention_ms=0)
        left = await _log_ids(backend.store_url)
        assert "g" not in left and left["g-recent"] == set(recent) and left["other"] == set(other)  # its group only
        assert old
    asyncio.run(go())


@pytest.mark.parametrize("backend", ["postgres+redis", "sqlite"], indirect=True)
def test_consumer_cleans_its_log_on_schedule_and_still_refuses_a_duplicate_within_retention(backend, cluster):
    topic, group, cgroup = backend.names("CLEAN"), backend.names("pg"), backend.names("cg")
    n = 6

    async def go():
        await create_topic(cluster, topic, 1)
        await make_effects_table(backend.store_url)
        old = await _old_rows(backend.store_url, cgroup, 1500, 2 * HOUR_MS)
        ids = await send_all(cluster, backend.store_url, group, topic, n)
        calls: list[str] = []

        async def handler(msg, session):
            calls.append(msg.properties["RELIABLE_ID"])
            await session.execute("INSERT INTO effects (rid, worker) VALUES (?, ?)",
                                  (msg.properties["RELIABLE_ID"], "c"))
        # no Redis: the database alone decides, so the log row is what refuses the duplicate
        ic = IdempotentConsumer(push_consumer(cluster, cgroup, topic), handler, backend.store_url, None,
                                log_retention_ms=HOUR_MS, log_clean_interval_ms=50, log_clean_batch=400)
        async with ic:
            await until(lambda: ic.metrics["processed"] == n and ic.metrics["log_rows_cleaned"] == len(old), 60,
                        "the messages processed and the old rows cleaned")
            assert (await _log_ids(backend.store_url))[cgroup] == set(ids)  # the recent rows stay
            await send_copies(cluster, backend.store_url, group, ids)
            await until(lambda: ic.metrics["duplicates_db"] == n, 60, "the copies refused by the log")
            assert ic.metrics["log_rows_cleaned"] == len(old)  # nothing recent went, round after round
        assert sorted(calls) == sorted(ids) and await effects(backend.store_url) == {rid: 1 for rid in ids}
    asyncio.run(go())


def test_batch_size_out_of_range_is_refused_naming_it(cluster):
    pc = push_consumer(cluster, "cg_bad_batch", "T")
    for bad in (0, 1025):
        with pytest.raises(ValueError, match="batch_size"):
            IdempotentConsumer(pc, lambda m, s: None, "sqlite://", batch_size=bad)
