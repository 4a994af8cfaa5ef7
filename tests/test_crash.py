"""kill -9 of a broker and its services, for real, then recovery: nothing acknowledged is lost.

A child process (tests/helpers/crash_writer.py, in its own process group) runs a MessageStore with
16 concurrent writers and prints every acknowledged put. The test SIGKILLs the whole group (the
broker and its flush and reput processes) after a random number of acknowledgements, waits until no
process of the group is left, opens the store itself and checks every acknowledged message of every
round, the density of every queue, every consume-queue entry against the commit log and a CRC scan
of the whole log. Rounds alternate between verifying (and cleanly closing) the real store and
verifying a copy, so that the next child itself recovers the crashed state.

Set CRASH_SEED to replay a run (the seed is printed and shown on failure).
"""
from __future__ import annotations

import asyncio
import os
import random
import shutil
import sys
from dataclasses import dataclass

import numpy as np
from broker.kernels.codec import SCAN_BLANK, SCAN_END, Scanner

from broker.services.message_store import GetStatus, MessageStore, PutStatus
from broker.store.config import MessageStoreConfig
from broker.store.consume_queue import CQ_DTYPE
from broker.store.message import decode_message
from tests.helpers.crash_writer import (
    CQ_FILE,
    QUEUES,
    SEGMENT,
    TOPICS,
    body_hash,
    check_body,
    keys_of,
    make_body,
    tags_of,
)
from tests.helpers.procs import Child


@dataclass(frozen=True)
class Ack:
    topic: str
    qid: int
    qo: int
    phys: int
    size: int
    hash: str
    round: int


def _config(root, flush: str) -> MessageStoreConfig:
    return MessageStoreConfig(storePathRootDir=str(root), mappedFileSizeCommitLog=SEGMENT,
                              mappedFileSizeConsumeQueue=CQ_FILE, flushDiskType=flush)


def _seed() -> str:
    seed = os.environ.get("CRASH_SEED") or str(random.randrange(1 << 30))
    print(f"CRASH_SEED={seed}")
    return seed


def _start_writer(tmp_path, root, round_: int, flush: str, seed: str) -> Child:
    argv = [sys.executable, "-m", "tests.helpers.crash_writer", "--root", str(root), "--round", str(round_),
            "--flush", flush, "--writers", "16", "--seed", seed]
    env = dict(os.environ, BROKER_LOG_LEVEL="WARNING")
    return Child(argv, tmp_path / f"writer{round_}.stderr", env)


def _acks(lines: list[str], round_: int) -> list[Ack]:
    out = []
    for line in lines:
        if line.startswith("ACK "):
            _, topic, qid, qo, phys, size, h = line.split()
            out.append(Ack(topic, int(qid), int(qo), int(phys), int(size), h, round_))
    return out


def _run_until_killed(tmp_path, root, round_: int, flush: str, seed: str, kill_after: int) -> tuple[list[str], Child]:
    """Start a writer, SIGKILL its whole process group after `kill_after` acknowledgements, and
    return (its OPEN line's fields, the child) once every process of the group is gone."""
    child = _start_writer(tmp_path, root, round_, flush, seed)
    try:
        child.wait_lines(lambda ls: ls and ls[0].startswith("OPEN"), 60, "the child's store to open")
        child.wait_lines(lambda ls: sum(1 for x in ls if x.startswith("ACK ")) >= kill_after, 60,
                         f"{kill_after} acknowledged puts")
    finally:
        child.kill_group()
    assert child.partial == b"", f"torn stdout line {child.partial!r}"  # every ack line is whole
    assert child.proc.returncode == -9
    assert "TIMEOUT" not in child.lines
    return child.lines[0].split()[1:], child


# -- verification ---------------------------------------------------------------------------------
def _check_props(m) -> tuple[int, int, int]:
    r, w, s = check_body(m.body)  # whole, self-consistent body: no half-written record is visible
    assert m.keys == keys_of(r, w, s) and m.tags == tags_of(w), (m.keys, m.tags, r, w, s)
    return r, w, s


def _read_queue(store: MessageStore, topic: str, qid: int) -> list[tuple[int, int, int, str, tuple]]:
    """Every record of a queue through store.get from offset 0: (queue offset, phys, size, hash, id)."""
    mx = store.max_offset(topic, qid)
    out = []
    off = 0
    while off < mx:
        g = store.get(topic, qid, off, max_msgs=256, max_bytes=4 << 20)
        assert g.status is GetStatus.FOUND, (topic, qid, off, mx, g.status)
        assert g.max_offset == mx and g.min_offset == 0
        for view, qo in zip(g.messages, g.queue_offsets):
            m = decode_message(view)
            # the consume-queue entry's size is the size of the record found at its offset
            assert m.size == len(view), (topic, qid, qo, m.size, len(view))
            assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, qo)
            out.append((qo, m.physical_offset, m.size, body_hash(m.body), _check_props(m)))
        g.release()
        assert g.next_offset > off
        off = g.next_offset
    assert off == mx
    tail = store.get(topic, qid, mx)
    assert tail.status in ((GetStatus.OFFSET_OVERFLOW_ONE,) if mx else
                           (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE)), tail.status
    return out


def _cq_on_disk(root: str, topic: str, qid: int) -> np.ndarray:
    d = os.path.join(root, "consumequeue", topic, str(qid))
    if not os.path.isdir(d):
        return np.empty(0, CQ_DTYPE)
    names = sorted(n for n in os.listdir(d) if n.isdigit())
    assert [int(n) for n in names] == [i * CQ_FILE for i in range(len(names))], names
    return np.concatenate([np.fromfile(os.path.join(d, n), dtype=CQ_DTYPE) for n in names])


def _scan_commit_log(store: MessageStore) -> int:
    """CRC-check every record of the commit log up to `wrote`; the scan must end exactly there."""
    wrote = store.offsets()["wrote"]
    sc = Scanner(8192)
    records = 0
    reached = 0
    for mf in store.commit_log.queue.files:
        if mf.base >= wrote:
            break
        assert mf.base == reached, (mf.base, reached)
        lim = min(mf.size, wrote - mf.base)
        pos = 0
        while True:
            count, pos, status = sc.scan(mf.buf, pos, lim, mf.base, True)
            records += count
            if status == SCAN_END and pos < lim:
                continue
            break
        if status == SCAN_BLANK:
            reached = mf.end
            continue
        assert status == SCAN_END, (mf.path, mf.base + pos, status, sc.reason)
        reached = mf.base + pos
        break
    assert reached == wrote, (reached, wrote)
    return records


def _verify(store: MessageStore, acks: dict[tuple[str, int, int], Ack]) -> int:
    """Everything the brief promises after a crash; returns the number of records in the store."""
    root = store.config.storePathRootDir
    # 1. every acknowledged message by its physical offset
    for (topic, qid, qo), a in acks.items():
        m = store.lookup(a.phys)
        assert (m.topic, m.queue_id, m.queue_offset, m.physical_offset, m.size) == (topic, qid, qo, a.phys, a.size), a
        assert body_hash(m.body) == a.hash, a
        _check_props(m)
    # 2. every queue, read from 0: dense, decodable, and agreeing with the consume queue on disk
    total = 0
    ids = set()
    for topic in TOPICS:
        for qid in range(QUEUES):
            recs = _read_queue(store, topic, qid)
            mx = len(recs)
            assert [r[0] for r in recs] == list(range(mx))
            ents = _cq_on_disk(root, topic, qid)
            assert len(ents) >= mx
            assert ents["offset"][:mx].tolist() == [r[1] for r in recs]
            assert ents["size"][:mx].tolist() == [r[2] for r in recs]
            # nothing past the end: entries of truncated records were dropped
            assert not ents["size"][mx:].any() and not ents["offset"][mx:].any(), (topic, qid, mx)
            for r in recs:
                a = acks.get((topic, qid, r[0]))
                if a is not None:
                    assert (r[1], r[3]) == (a.phys, a.hash), (a, r)
                ids.add(r[4])
            total += mx
    assert len(ids) == total, "a message is stored twice"
    # 3. the whole log verifies and holds exactly the records the queues index
    assert _scan_commit_log(store) == total
    return total


async def _open_and_verify(root, flush: str, acks, *, expect_clean: bool) -> tuple[int, int | None, int]:
    store = MessageStore(_config(root, flush))
    await store.start()
    try:
        rec = store.recovery
        assert rec.clean is expect_clean
        assert store.offsets()["wrote"] == rec.max_offset
        n = _verify(store, acks)
        return rec.max_offset, rec.truncated_at, n
    finally:
        await store.close()


def _merge(acks: dict, new: list[Ack]) -> None:
    phys = {a.phys for a in acks.values()}
    for a in new:
        key = (a.topic, a.qid, a.qo)
        # a lost record would let a later round hand its queue offset or position to another message
        assert key not in acks, f"queue offset acknowledged twice: {acks[key]} and {a}"
        assert a.phys not in phys, f"physical offset acknowledged twice: {a}"
        acks[key] = a
        phys.add(a.phys)


# -- tests ----------------------------------------------------------------------------------------
def test_sync_flush_every_acknowledged_message_survives_kill9(tmp_path):
    seed = _seed()
    rng = random.Random(seed)
    root = tmp_path / "store"
    acks: dict[tuple[str, int, int], Ack] = {}
    # After verifying a crash: close the real store cleanly, or verify a copy and leave the crashed
    # state for the next child to recover by itself.
    plan = ["close", "crashed", "crashed", "close"]
    expect_open = ("1", "0")  # (clean, recovered end) the next child must report
    for round_, after in enumerate(plan):
        kill_after = rng.randint(50, 800)
        opened, child = _run_until_killed(tmp_path, root, round_, "SYNC_FLUSH", seed, kill_after)
        assert tuple(opened[:2]) == expect_open, (round_, opened, expect_open)
        new = _acks(child.lines, round_)
        assert len(new) >= kill_after
        _merge(acks, new)
        if after == "close":
            end, truncated, n = asyncio.run(_open_and_verify(root, "SYNC_FLUSH", acks, expect_clean=False))
            assert not (root / "abort").exists()  # the verification store stopped cleanly
            expect_open = ("1", str(end))
        else:
            copy = tmp_path / f"copy{round_}"
            shutil.copytree(root, copy)
            end, truncated, n = asyncio.run(_open_and_verify(copy, "SYNC_FLUSH", acks, expect_clean=False))
            shutil.rmtree(copy)
            assert (root / "abort").exists()
            expect_open = ("0", str(end))  # the child's own recovery must find the same end
        assert n >= len(acks)
        print(f"round {round_}: killed after {len(new)} acks ({kill_after} asked), {n} records, end {end}, "
              f"torn tail at {truncated}, then {after}")
    assert {a.round for a in acks.values()} == set(range(len(plan)))  # every round added acknowledged messages


def test_async_flush_crash_recovers_consistent_store_and_continues(tmp_path):
    seed = _seed()
    rng = random.Random(seed)
    root = tmp_path / "store"
    kill_after = rng.randint(500, 5000)
    _, child = _run_until_killed(tmp_path, root, 0, "ASYNC_FLUSH", seed, kill_after)
    acks: dict[tuple[str, int, int], Ack] = {}
    # under ASYNC_FLUSH a put is acknowledged once in the page cache, which a kill -9 does not lose
    _merge(acks, _acks(child.lines, 0))

    async def go():
        cfg = _config(root, "ASYNC_FLUSH")
        async with MessageStore(cfg) as s:
            rec = s.recovery
            assert not rec.clean
            n = _verify(s, acks)
            end = rec.max_offset
            before = {(t, q): s.max_offset(t, q) for t in TOPICS for q in range(QUEUES)}
            assert sum(before.values()) == n
            rnd = random.Random(seed + "/after")
            prev = None
            new = []
            for i, (topic, qid) in enumerate(before):
                body = make_body(rnd, 99, i, 0)
                r = await s.put(topic, qid, body, {"TAGS": tags_of(i), "KEYS": keys_of(99, i, 0)})
                assert r.status is PutStatus.PUT_OK
                assert r.queue_offset == before[(topic, qid)]  # no gap, no reuse
                # continues at the recovered end, then after each put (or at the next segment
                # whenever a put does not fit in the current one: CRASH_SEED=359462957 rolled over)
                at = end if prev is None else prev.end_offset
                room = SEGMENT - at % SEGMENT
                assert r.physical_offset == (at if r.size + 8 <= room else at + room), (r, at)
                prev = r
                new.append(Ack(topic, qid, r.queue_offset, r.physical_offset, r.size, body_hash(body), 99))
            await s.wait_dispatched(prev.end_offset, 10)
            for a in new:
                g = s.get(a.topic, a.qid, a.qo)
                assert g.status is GetStatus.FOUND and g.queue_offsets == [a.qo] and g.max_offset == a.qo + 1
                assert body_hash(decode_message(g.messages[0]).body) == a.hash
                g.release()
            _merge(acks, new)
        async with MessageStore(cfg) as s:  # a clean stop after the recovery: everything still there
            assert s.recovery.clean
            assert _verify(s, acks) == n + len(new)

    asyncio.run(go())
