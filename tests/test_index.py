"""The message index (IndexFile / IndexService, QUERY_MESSAGE, VIEW_MESSAGE_BY_ID): files read back
by an independent reader of RocketMQ's format agree with what the store answers; real processes
(ali-ons and the project's client, `broker admin query`) find messages by key and by both kinds
of id; bad queries get clear errors; a crash that cuts an index file short loses nothing; the
cleaner deletes index files with their segments."""
from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import sys

import pytest

from broker.client.admin import Admin, decode_offset_msg_id
from broker.client.errors import ClientError, ResponseError
from broker.client.message import Message
from broker.client.producer import Producer
from broker.remoting import codes
from broker.services.message_store import MessageStore
from broker.store.config import MessageStoreConfig
from broker.store.errors import StoreConfigError
from broker.store.offset_table import Slot
from tests.conftest import small_config, wait_for
from tests.helpers.procs import REPO
from tests.helpers.real_clients import Cluster, produce
from tests.test_clean import _service

LONG_MAX = 2**63 - 1
SMALL_INDEX = dict(maxHashSlotNum=8, maxIndexNum=40)  # collisions in every slot, a new file every 39 keys


# -- an independent reader of the format (RocketMQ IndexFile / IndexHeader), struct only -------------
def java_hash(text: str) -> int:
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def read_index_file(path: str, slots: int, num: int) -> dict:
    data = open(path, "rb").read()
    assert len(data) == 40 + slots * 4 + num * 20, path
    bt, et, bp, ep, slot_count, count = struct.unpack_from(">qqqqii", data, 0)
    return {"begin_ts": bt, "end_ts": et, "begin_phy": bp, "end_phy": ep, "slot_count": slot_count,
            "count": count, "data": data, "slots": slots}


def lookup(f: dict, topic: str, key: str) -> list[int]:
    """header -> slot -> chain of prevIndex, keeping entries with the key's hash."""
    h = abs(java_hash(f"{topic}#{key}"))
    h = 0 if h >= 1 << 31 else h
    data, slots = f["data"], f["slots"]
    n = struct.unpack_from(">i", data, 40 + (h % slots) * 4)[0]
    out, seen = [], set()
    while 0 < n < f["count"] and n not in seen:
        seen.add(n)
        kh, phys, diff, prev = struct.unpack_from(">iqii", data, 40 + slots * 4 + n * 20)
        if kh == h:
            out.append(phys)
        n = prev
    return out


def read_index(root: str, slots: int, num: int) -> list[dict]:
    d = os.path.join(root, "index")
    names = sorted(os.listdir(d))
    assert all(len(n) == 17 and n.isdigit() for n in names), names  # yyyyMMddHHmmssSSS
    return [read_index_file(os.path.join(d, n), slots, num) for n in names]


# -- the store in-process -------------------------------------------------------------------------
def _keyed_puts(s: MessageStore, n: int, topics=("TopicA", "TopicB")):
    """n messages with a UNIQ_KEY each and KEYS of two tokens (one shared by many), transaction
    types among them that must not be indexed."""
    async def go():
        out = []
        for i in range(n):
            topic = topics[i % len(topics)]
            sys_flag = {7: 0x4, 11: 0xC, 13: 0x8}.get(i % 17, 0)  # prepared, rollback, commit
            props = {"UNIQ_KEY": f"U{i:05d}", "KEYS": f"order-{i % 10}  k{i}"}
            r = await s.put(topic, i % 3, b"body-%d" % i, props, sys_flag=sys_flag)
            out.append((topic, i, sys_flag, r))
        await s.wait_dispatched(out[-1][3].end_offset, 10)
        return out
    return go()


def test_files_read_independently_agree_with_query_message(tmp_path):
    cfg = small_config(tmp_path / "store", **SMALL_INDEX)

    async def main():
        async with MessageStore(cfg) as s:
            puts = await _keyed_puts(s, 300)
            files = read_index(cfg.storePathRootDir, 8, 40)
            indexed = [(t, i, r) for t, i, sf, r in puts if sf not in (0x4, 0xC)]
            # every key of every indexed message went in: UNIQ_KEY + 2 KEYS tokens (the double space is no key)
            assert sum(f["count"] - 1 for f in files) == 3 * len(indexed)
            assert len(files) == -(-3 * len(indexed) // 39)
            for a, b in zip(files, files[1:]):  # each file starts where the one before ended
                assert a["count"] == 40 and b["begin_phy"] >= a["end_phy"] and b["begin_ts"] >= a["begin_ts"]
            assert files[-1]["end_phy"] == indexed[-1][2].physical_offset
            for topic, key in [("TopicA", "order-0"), ("TopicB", "order-3"), ("TopicA", "k150"), ("TopicB", "U00041"),
                               ("TopicA", "U00007"), ("TopicA", "nothing")]:
                by_reader = sorted({p for f in files for p in lookup(f, topic, key)})
                res = s.query_message(topic, key, 64, 0, LONG_MAX)
                got = [int.from_bytes(v[28:36], "big") for v in res.messages]  # PHYSICALOFFSET of each record
                expect = [r.physical_offset for t, i, r in indexed if t == topic and (
                    key == f"U{i:05d}" or key == f"order-{i % 10}" or key == f"k{i}")]
                # the slot chains hold other keys of the same hash too: the reader and the store agree on
                # those; every message of the key is among them
                assert got == by_reader[:64] and set(expect) <= set(got), (topic, key)
                assert res.index_last_update_phyoffset == files[-1]["end_phy"]
                assert res.index_last_update_timestamp == files[-1]["end_ts"]
            # a prepared (i=7) and a rolled-back (i=11) message are not indexed, a committed one (i=13) is
            for i, indexed_ in ((7, False), (11, False), (13, True)):
                topic = ("TopicA", "TopicB")[i % 2]
                phys = puts[i][3].physical_offset
                assert (phys in {p for f in files for p in lookup(f, topic, f"U{i:05d}")}) is indexed_
            # the time range: nothing stored before it begins or after it ends
            first, last = indexed[0][2].store_timestamp, indexed[-1][2].store_timestamp
            assert s.query_message("TopicA", "order-0", 64, 0, first - 1).messages == []
            assert s.query_message("TopicA", "order-0", 64, last + 1, LONG_MAX).messages == []
            assert len(s.query_message("TopicA", "order-0", 64, first, last).messages) >= 15
    asyncio.run(main())


def test_index_can_be_switched_off_and_bad_sizes_are_refused(tmp_path):
    for key, value in (("maxIndexNum", 1), ("maxHashSlotNum", 0), ("maxIndexNum", 200_000_000),
                       ("maxMsgsNumBatch", 0)):
        with pytest.raises(StoreConfigError) as e:
            small_config(tmp_path / "s", **{key: value})
        assert e.value.key == key
    cfg, unknown = MessageStoreConfig.from_properties({"storePathRootDir": str(tmp_path / "s2"),
                                                       "messageIndexEnable": "false", "messageIndexSafe": "true"})
    assert not unknown and cfg.messageIndexEnable is False

    async def main():
        async with MessageStore(cfg) as s:
            r = await s.put("T", 0, b"x", {"KEYS": "k"})
            await s.wait_dispatched(r.end_offset, 10)
            assert not os.path.exists(os.path.join(cfg.storePathRootDir, "index"))
    asyncio.run(main())


def test_cleaner_deletes_index_files_with_their_segments(tmp_path):
    seg = 1 << 20
    cfg = MessageStoreConfig(storePathRootDir=str(tmp_path / "s"), mappedFileSizeCommitLog=seg,
                             mappedFileSizeConsumeQueue=20 * 100, fileReservedTime=0, deleteCommitLogFilesInterval=0,
                             deleteConsumeQueueFilesInterval=0, maxHashSlotNum=64, maxIndexNum=500)

    async def fill():
        async with MessageStore(cfg) as s:
            for i in range(int(3.5 * seg / 1100)):
                r = await s.put("T", i % 2, b"x" * 1000, {"KEYS": f"k{i}"})
            await s.wait_dispatched(r.end_offset, 10)
            return r.end_offset
    end = asyncio.run(fill())
    before = read_index(cfg.storePathRootDir, 64, 500)
    assert len(before) >= 6
    svc, t = _service(cfg, end, usage=0.5)
    t.add(Slot.MANUAL_CLEAN, 1)
    assert svc.pass_once() == [0, seg, 2 * seg]
    after = read_index(cfg.storePathRootDir, 64, 500)
    # gone: exactly the files whose every entry points below the new minimum (never the last)
    assert [f for f in before if f["end_phy"] >= 3 * seg] == after
    assert len(after) < len(before) and after[-1] == before[-1]


def test_an_index_file_that_cannot_be_made_holds_dispatch_and_resumes(small_fs):
    """The disk fills (under diskSpaceWarningLevelRatio) before the next index file is needed: its
    slots (6 MB here) cannot be reserved. The reput holds, as for a consume-queue file, rather
    than die (or take a SIGBUS later writing into a file with no blocks); the broker refuses
    writes; once space is back the index goes on and every key is found."""
    import errno as _errno
    from broker.services.message_store import PutStatus
    from broker.store.errors import ServiceUnavailable

    async def main():
        cfg = MessageStoreConfig(storePathRootDir=str(small_fs / "s"), mappedFileSizeCommitLog=1 << 20,
                                 cleanResourceInterval=100, cleanFileForciblyEnable=False,
                                 maxHashSlotNum=1_500_000, maxIndexNum=10)
        async with MessageStore(cfg) as s:
            first = await s.put("A", 0, b"a", {"KEYS": "key-0"})
            await s.wait_dispatched(first.end_offset, 10)
            ahead = s.commit_log.queue._ahead
            if ahead is not None:
                ahead.join()
            st = os.statvfs(small_fs)
            with open(small_fs / "ballast", "wb") as f:  # leave 5 MiB: less than one file's slots
                f.write(b"\0" * (st.f_bavail * st.f_frsize - (5 << 20)))
            for i in range(1, 12):  # the first file holds 9 keys: the 10th needs the next file
                r = await s.put("A", 0, b"m%d" % i, {"KEYS": f"key-{i}"})
                assert r.status is PutStatus.PUT_OK
            await s.wait_condition(lambda: s.flags.dispatch_blocked == _errno.ENOSPC, 10)
            assert not s.flags.disk_full
            with pytest.raises(ServiceUnavailable, match="No space left"):
                await s.put("A", 0, b"refused")
            assert not [n for n in os.listdir(cfg.index_dir) if n.endswith(".tmp")]
            os.unlink(small_fs / "ballast")
            await s.wait_condition(lambda: not s.flags.dispatch_blocked, 10)
            after = await s.put("A", 0, b"after", {"KEYS": "key-after"})
            await s.wait_dispatched(after.end_offset, 10)
            for i in range(12):
                assert len(s.query_message("A", f"key-{i}", 32, 0, LONG_MAX).messages) == 1, i
            assert len(s.query_message("A", "key-after", 32, 0, LONG_MAX).messages) == 1
            assert s.services["reput"].restarts == 0
    asyncio.run(main())


# -- real processes ---------------------------------------------------------------------------------
def _cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", "admin", "query", "--namesrv", cluster.namesrv, *args],
                          capture_output=True, text=True, timeout=60, cwd=str(REPO))


INDEX_CONF = "maxHashSlotNum=64\nmaxIndexNum=100\nflushIntervalConsumeQueue=100\n"


@pytest.fixture
def cluster(tmp_path):
    with Cluster(tmp_path / "c", INDEX_CONF) as c:
        yield c


def test_real_clients_query_by_key_and_by_both_ids(cluster, tmp_path):
    topic = "IndexTopic"
    cluster.create_topic(topic, 4)
    # both real clients set KEYS (space-joined); ali-ons's msgId is the broker's offsetMsgId (it sets
    # no UNIQ_KEY), the C++ client's is its UNIQ_KEY
    ons = produce("ons", cluster, topic, [{"keys": [f"ons-{i}", "ons-all"], "body": f"ons body {i}"}
                                          for i in range(30)], tmp_path)
    cpp = produce("cpp", cluster, topic, [{"keys": [f"cpp-{i}"], "body": f"cpp body {i}"} for i in range(10)],
                  tmp_path)

    async def ours():
        async with Producer("index-pg", cluster.namesrv) as p:
            return [await p.send(Message(topic, b"our body %d" % i, keys=[f"our-{i}", "our-all"]))
                    for i in range(30)]
    sent = asyncio.run(ours())
    wait_for(cluster.dispatched_all, 30, "the reput to index everything")

    async def admin_checks():
        async with Admin(cluster.namesrv) as a:
            got = await a.query_message(topic, "ons-7")
            assert [bytes(m.body) for m in got] == [b"ons body 7"] and got[0].msg_id == ons[7]["msgId"]
            got = await a.query_message(topic, "cpp-2")
            assert [bytes(m.body) for m in got] == [b"cpp body 2"] and got[0].uniq_key == cpp[2]["msgId"]
            assert sorted(bytes(m.body) for m in await a.query_message(topic, "our-all", max_num=64)) == \
                sorted(b"our body %d" % i for i in range(30))
            assert len(await a.query_message(topic, "ons-all", max_num=10)) == 10
            # by client msgId (UNIQ_KEY) and by offsetMsgId
            [m] = await a.message_by_id(ons[3]["msgId"])
            assert bytes(m.body) == b"ons body 3"
            [m] = await a.message_by_id(cpp[4]["msgId"], topic)
            assert bytes(m.body) == b"cpp body 4"
            [m] = await a.message_by_id(sent[5].offset_msg_id)
            assert bytes(m.body) == b"our body 5" and m.uniq_key == sent[5].msg_id
            [m] = await a.message_by_id(sent[6].msg_id, topic)
            assert m.msg_id == sent[6].offset_msg_id
            assert decode_offset_msg_id(sent[6].offset_msg_id) == (cluster.addr, m.commit_log_offset)
            assert await a.query_message(topic, "no-such-key") == []
            # a time range that ends before anything was stored finds nothing
            assert await a.query_message(topic, "our-1", end=1) == []
    asyncio.run(admin_checks())

    r = _cli(cluster, "--key", "our-4", "--topic", topic)
    assert r.returncode == 0, r.stderr
    [line] = r.stdout.splitlines()
    assert json.loads(line)["body"] == "our body 4" and json.loads(line)["msgId"] == sent[4].msg_id
    for msg_id, body in ((sent[9].offset_msg_id, "our body 9"), (ons[9]["msgId"], "ons body 9"),
                         (cpp[7]["msgId"], "cpp body 7"), (sent[8].msg_id, "our body 8")):
        r = _cli(cluster, "--id", msg_id, "--topic", topic)
        assert r.returncode == 0 and json.loads(r.stdout.splitlines()[0])["body"] == body, r.stderr
    r = _cli(cluster, "--key", "no-such-key", "--topic", topic)
    assert r.returncode == 1 and "no message with key no-such-key" in r.stderr


def test_malformed_queries_get_clear_errors(cluster):
    q = {"topic": "T", "key": "k", "maxNum": 32, "beginTimestamp": 0, "endTimestamp": LONG_MAX}
    for drop in ("topic", "key", "maxNum"):
        r = cluster.call(codes.QUERY_MESSAGE, {k: v for k, v in q.items() if k != drop})
        assert r.code == codes.SYSTEM_ERROR and drop in r.remark, (drop, r.remark)
    for field, value, says in (("maxNum", 0, "maxNum is 0"), ("maxNum", -3, "maxNum is -3"), ("key", "", "empty key"),
                               ("maxNum", "many", "not an integer"), ("endTimestamp", -1, "after endTimestamp")):
        r = cluster.call(codes.QUERY_MESSAGE, {**q, field: value})
        assert r.code == codes.SYSTEM_ERROR and says in r.remark, (field, value, r.remark)
    r = cluster.call(codes.QUERY_MESSAGE, q)
    assert r.code == codes.QUERY_NOT_FOUND and "indexLastUpdateTimestamp" in r.ext
    r = cluster.call(codes.VIEW_MESSAGE_BY_ID, {"offset": 123456789})
    assert r.code == codes.SYSTEM_ERROR and "123456789" in r.remark
    r = cluster.call(codes.VIEW_MESSAGE_BY_ID, {"offset": "x"})
    assert r.code == codes.SYSTEM_ERROR and "offset" in r.remark
    # the client and the command line say what is wrong with an id
    with pytest.raises(ClientError, match="not an offsetMsgId"):
        decode_offset_msg_id("G" * 32)
    r = _cli(cluster, "--id", "nothex")
    assert r.returncode == 2 and "give its topic" in r.stderr and "Traceback" not in r.stderr
    r = _cli(cluster, "--key", "k")
    assert r.returncode == 2 and "--key needs --topic" in r.stderr

    async def bad_max():
        async with Admin(cluster.namesrv) as a:
            with pytest.raises(ClientError):
                await a.query_message("TBW102", "k", max_num=0)
            with pytest.raises(ResponseError):  # a broker that holds no such offset
                await a.view_message(("7F000001" + f"{cluster.port:08X}" + f"{999_999_999:016X}"))
    asyncio.run(bad_max())


def test_index_file_cut_short_by_a_crash_is_named_and_rebuilt(tmp_path):
    """kill -9 of the broker's whole process group, an index file truncated as a crash can leave
    it, and a restart: the broker names the file, deletes it and re-indexes, losing no key."""
    c = Cluster(tmp_path / "c", "maxHashSlotNum=16\nmaxIndexNum=30\nflushIntervalConsumeQueue=100\n")
    with c:
        topic = "CrashIndex"
        c.create_topic(topic, 2)

        async def send():
            async with Producer("crash-pg", c.namesrv) as p:
                return [await p.send(Message(topic, b"b%d" % i, keys=[f"c{i}"])) for i in range(100)]
        sent = asyncio.run(send())
        wait_for(c.dispatched_all, 30, "the reput to index everything")
        d = c.root / "store" / "index"
        last_end_ts = read_index(str(c.root / "store"), 16, 30)[-1]["end_ts"]

        def index_flushed() -> bool:  # the checkpoint's indexMsgTimestamp (offset 16) covers every file
            return struct.unpack_from(">q", (c.root / "store" / "checkpoint").read_bytes(), 16)[0] >= last_end_ts
        # so that what the restart finds wrong is the cut file, not entries the crash left unflushed
        wait_for(index_flushed, 30, "the index flush")
        c.procs[1].kill_group()
        names = sorted(os.listdir(d))
        assert len(names) >= 6  # 200 keys, 29 a file
        victim = d / names[2]
        with open(victim, "r+b") as f:
            f.truncate(os.path.getsize(victim) // 3)
        c.restart_broker()
        wait_for(c.dispatched_all, 30, "the restarted reput")
        c.wait_route(topic)  # the name server dropped the killed broker's routes with its connection
        log_text = (c.root / "broker2.err").read_text()
        assert str(victim) in log_text and "index file is" in log_text, log_text[-3000:]
        for f in read_index(str(c.root / "store"), 16, 30):
            assert f["count"] <= 30

        async def check():
            async with Admin(c.namesrv) as a:
                for i, s in enumerate(sent):
                    [m] = await a.query_message(topic, f"c{i}")
                    assert m.msg_id == s.offset_msg_id
                    [m] = await a.message_by_id(s.msg_id, topic)
                    assert bytes(m.body) == b"b%d" % i
        asyncio.run(check())


def test_dledger_mode_indexes_committed_messages_on_every_member(tmp_path):
    """DLedger mode's own reput builds the index too (records at entry pos + 48), on the leader and
    the followers alike; a query through the name server's route finds them by key and by id."""
    from tests.helpers.dledger_checks import TOPIC, wait_caught_up
    from tests.helpers.dledger_cluster import DLedgerGroup

    g = DLedgerGroup(tmp_path, extra="maxHashSlotNum=16\nmaxIndexNum=50\n")
    try:
        g.start()
        leader = g.leader()
        g.wait_master(TOPIC)

        async def send():
            async with Producer("dl-pg", g.namesrv.addr) as p:
                return [await p.send(Message(TOPIC, b"dl %d" % i, keys=[f"dl-{i}", "dl-all"])) for i in range(60)]
        sent = asyncio.run(send())
        wait_caught_up(g.brokers.values(), leader)

        async def check():
            async with Admin(g.namesrv.addr) as a:
                for i in (0, 31, 59):
                    [m] = await a.query_message(TOPIC, f"dl-{i}")
                    assert bytes(m.body) == b"dl %d" % i and m.msg_id == sent[i].offset_msg_id
                    [m] = await a.message_by_id(sent[i].msg_id, TOPIC)
                    assert m.msg_id == sent[i].offset_msg_id
                assert len(await a.query_message(TOPIC, "dl-all", max_num=64)) == 60
        asyncio.run(check())
        for b in g.brokers.values():  # every member's files hold every key: UNIQ_KEY + 2 KEYS tokens each
            files = read_index(str(b.store), 16, 50)
            assert sum(f["count"] - 1 for f in files) == 180, b.name
    finally:
        g.stop()


def test_index_entries_not_flushed_before_a_crash_are_rebuilt(tmp_path):
    """The index is flushed (and the checkpoint's indexMsgTimestamp moved) only every
    flushIntervalConsumeQueue, here never within the test: after kill -9 every index file holds
    entries past the checkpoint, is deleted, and the reput re-indexes the whole log."""
    c = Cluster(tmp_path / "c", "maxHashSlotNum=16\nmaxIndexNum=30\nflushIntervalConsumeQueue=600000\n")
    with c:
        topic = "UnflushedIndex"
        c.create_topic(topic, 2)

        async def send():
            async with Producer("unflushed-pg", c.namesrv) as p:
                return [await p.send(Message(topic, b"u%d" % i, keys=[f"u{i}"])) for i in range(50)]
        sent = asyncio.run(send())
        wait_for(c.dispatched_all, 30, "the reput to index everything")
        assert struct.unpack_from(">q", (c.root / "store" / "checkpoint").read_bytes(), 16)[0] == 0
        before = [f["data"] for f in read_index(str(c.root / "store"), 16, 30)]
        c.procs[1].kill_group()
        c.restart_broker()
        wait_for(c.dispatched_all, 30, "the restarted reput")
        c.wait_route(topic)
        log_text = (c.root / "broker2.err").read_text()
        assert "not flushed before the crash" in log_text, log_text[-3000:]
        after = read_index(str(c.root / "store"), 16, 30)
        # rebuilt from the log alone: the same entries in the same places (only the files' names differ)
        assert [f["data"] for f in after] == before

        async def check():
            async with Admin(c.namesrv) as a:
                for i, s in enumerate(sent):
                    [m] = await a.query_message(topic, f"u{i}")
                    assert m.msg_id == s.offset_msg_id
        asyncio.run(check())


def test_a_corrupt_chain_or_slot_ends_the_walk_instead_of_cycling_or_reading_past_the_file(tmp_path):
    """A bit flip (no crash leaves these, but a disk can) must not hang QUERY_MESSAGE in a cycle of
    previous-index links, nor raise out of a read past the file's end: the walk keeps what it found
    and stops."""
    from broker.store.index_file import HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, IndexFile
    slots, num = 4, 8
    f = IndexFile.create(str(tmp_path), slots, num, 0, 0)
    try:
        entries = INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE
        key_hash = 5  # slot 1
        struct.pack_into(">qqqqii", f.mm, 0, 1_000_000, 1_000_000, 0, 0, slots, 3)  # entries 1 and 2 written
        struct.pack_into(">iqii", f.mm, entries + 1 * INDEX_ENTRY_SIZE, key_hash, 100, 0, 2)  # 1 -> 2: not older
        struct.pack_into(">iqii", f.mm, entries + 2 * INDEX_ENTRY_SIZE, key_hash, 200, 0, 1)  # 2 -> 1: a cycle
        struct.pack_into(">i", f.mm, INDEX_HEADER_SIZE + (key_hash % slots) * HASH_SLOT_SIZE, 2)
        out: list[int] = []
        f.select_phy_offsets(out, key_hash, 1000, 0, 2_000_000, f.header())
        assert out == [200, 100]
        # a slot and an index count past the file's entries
        struct.pack_into(">qqqqii", f.mm, 0, 1_000_000, 1_000_000, 0, 0, slots, 1 << 30)
        struct.pack_into(">i", f.mm, INDEX_HEADER_SIZE + (key_hash % slots) * HASH_SLOT_SIZE, 1 << 29)
        out = []
        f.select_phy_offsets(out, key_hash, 1000, 0, 2_000_000, f.header())
        assert out == []
    finally:
        f.close()
