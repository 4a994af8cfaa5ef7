"""Upgrading an existing store to DLedger mode (issue 17 item 6): the commit log written without
DLedger stays readable below the divided offset, as RocketMQ keeps it, and turning DLedger mode
off again refuses to start.

The first tests work in one process on real files (small segments): the old log sealed with a
blank, the DLedger data files starting at the divided offset, recovery of a log whose first data
file is not at 0, reads by physical offset on both sides of the divide (the composite file list
the readers and the queue-read kernel use), the reput dispatching old records then entries with
dense queue offsets, an empty log taking a leader's first position, and the ordinary store's
refusal. The last ones run real brokers: an ordinary master and its slave, then a three-member
DLedger group over their stores and a new, empty one."""
from __future__ import annotations

import asyncio
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.client import api
from broker.client.pull_consumer import PullConsumer
from broker.client.route import MessageQueue
from broker.raft.dledger_commit_log import DLedgerCommitLog
from broker.raft.dledger_reput import DLedgerReputService
from broker.raft.divided_commit_log import DividedFileQueue, Hole, open_old_commit_log
from broker.raft.entry_store import DLedgerEntryStore
from broker.raft.errors import OldCommitLogMismatch
from broker.services.message_store import refuse_dledger_log
from broker.services.queue_reader import QueueReader
from broker.store.commit_log import CommitLog
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.errors import StoreConfigError, StoreError
from broker.store.mapped_file import create_segment_file, offset_to_name
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.offset_table import Slot, create_table
from broker.store.results import GetStatus, PutStatus
from tests.conftest import small_config
from tests.helpers.dledger_checks import QUEUES, TOPIC, check_dense, pull_all, wait_caught_up
from tests.helpers.dledger_cluster import GROUP, SEGMENT, DLedgerGroup, data_dir
from tests.helpers.ha_cluster import Broker, NameServer, send_all, wait_replicated
from tests.twins.decoder import MAGIC_BLANK, decode_record
from tests.twins.dledger_twin import walk_data

DATA = 64 * 1024
HOST = b"\x7f\0\0\1\0\0\0\1"


class _Leader:
    """What DLedgerCommitLog needs of a DLedgerServer: its store and an append a quorum answers at once."""

    def __init__(self, store: DLedgerEntryStore):
        self.store = store
        self.term = 1

    def begin_append(self, body):
        self.check_leading()
        index, pos = self.store.append(self.term, body)
        return index, pos, self.appended(index, pos)

    @property
    def state(self):
        return self  # the member's term is this leader's

    def check_leading(self) -> None:
        pass  # always leads

    def appended(self, index, pos):
        fut = asyncio.get_running_loop().create_future()
        fut.set_result((index, pos))
        return fut


def _config(root: Path):
    return small_config(root, mappedFileSizeCommitLog=DATA, enableDLegerCommitLog=True, dLegerSelfId="n0")


def _write_old_log(cfg, n: int) -> list[tuple[int, int, int, bytes]]:
    """An ordinary commit log of n records over several segments; (queue, queue offset, phys, body)."""
    cl = CommitLog(cfg, writable=True)
    cl.load()
    cl.set_write_position(0, {})
    out = []
    for i in range(n):
        q = i % 3
        body = f"old-{i}-".encode() * 40
        phys, qo, _, _ = cl.append(b"TU", q, body, b"TAGS\x01t", 0, 0, -1, HOST)
        out.append((q, qo, phys, body))
    if cl.queue._ahead is not None:  # the segment prepared ahead: made, empty (the divide deletes it)
        cl.queue._ahead.join()
    cl.close()
    return out


def _open_store(cfg, floor: int) -> DLedgerEntryStore:
    return DLedgerEntryStore.open(cfg.storePathRootDir, "n0", data_file_size=DATA, index_file_size=32 * 1024,
                                  warm=False, floor=floor)


def test_old_log_sealed_and_read_below_the_divided_offset(tmp_path):
    cfg = _config(tmp_path / "store")
    old_sent = _write_old_log(cfg, 400)
    old_end = old_sent[-1][2] + decode_record_size(cfg, old_sent[-1][2])
    assert old_end > 2 * DATA
    divided = -(-old_end // DATA) * DATA
    assert os.path.exists(os.path.join(cfg.commitlog_dir, offset_to_name(divided)))  # prepared ahead

    os.makedirs(cfg.consumequeue_dir)
    old = open_old_commit_log(cfg)
    # sealed: a blank from the records' end to the segment's end, nothing prepared after it
    assert old.files[-1].end == divided
    assert sorted(os.listdir(cfg.commitlog_dir))[-1] == offset_to_name(divided - DATA)
    magic_size = struct.unpack_from(">ii", bytes(old.find(old_end).mv[old_end % DATA:old_end % DATA + 8]))
    assert magic_size == (divided - old_end, MAGIC_BLANK)
    # the DLedger data files start at the divided offset, named by it
    assert os.listdir(cfg.dledger_data_dir) == [offset_to_name(divided)]

    store = _open_store(cfg, old.files[-1].end)
    assert store.write_pos == divided and store.ledger_end_index == -1
    new_sent = []

    async def write():
        leader = _Leader(store)
        cl = DLedgerCommitLog(cfg, leader, lambda topic, q: sum(1 for s in old_sent if s[0] == q), old)
        assert cl.begin_pos == 0 and cl.committed_pos == divided and cl.min_offset == 0
        store.append(1, b"")  # the leader's no-op: entry 0 at the divided offset
        for i in range(150):
            q = i % 3
            body = f"new-{i}-".encode() * 40
            phys, qo, _, _, fut = cl.append(b"TU", q, body, b"TAGS\x01t", 0, 0, -1, HOST)
            assert await fut is PutStatus.PUT_OK
            new_sent.append((q, qo, phys, body))
        return cl
    cl = asyncio.run(write())
    store.update_committed_index(store.ledger_end_index)
    end = store.committed_pos
    assert store.position(0) == (divided, 48)
    assert new_sent[0][2] == divided + 48 + 48  # after the no-op's 48 bytes, the record at pos + 48
    assert end > divided + DATA  # the entries cross data files

    # reads by physical offset on both sides (view by msgId), through the composite list
    q = cl.queue
    assert isinstance(q, DividedFileQueue) and q.divided == divided and q.min_offset == 0
    assert [f.base for f in q.files] == list(range(0, q.files[-1].end, DATA))
    for _, qo, phys, body in old_sent[::37] + new_sent[::23]:
        mf = q.find(phys)
        rec = decode_record(mf.mv, phys - mf.base)
        assert (rec["physical_offset"], rec["queue_offset"], rec["body"]) == (phys, qo, body)

    # the reput: the old records with the ordinary scan, then the entries; queue offsets dense
    table = create_table(cfg.storePathRootDir)
    reput = DLedgerReputService(cfg, -1)
    reput.log.load()
    reput.cqs.load()
    table.store(Slot.WROTE, end)
    assert reput.reput(cl.begin_pos, end) == end == table.load(Slot.DISPATCHED)
    reput.flush_queues(end)

    # the read path of a member (QueueReader and the kernel) over those queues
    cqs = ConsumeQueueStore(cfg.consumequeue_dir, cfg.mappedFileSizeConsumeQueue, writable=False)
    cqs.load()
    fake = SimpleNamespace(cqs=cqs, commit_log=cl, table=table, config=cfg, reads_dispatched_only=True,
                           queue_heads_may_be_unwritten=False,
                           topic_bytes=lambda t: t.encode())
    reader = QueueReader(fake)
    for qid in range(3):
        want = [(qo, phys, body) for qq, qo, phys, body in old_sent + new_sent if qq == qid]
        assert [w[0] for w in want] == list(range(len(want)))
        got, offset = [], 0
        while True:
            r = reader.get("TU", qid, offset, 16)
            if r.status is not GetStatus.FOUND:
                break
            for view, qo in zip(r.messages, r.queue_offsets):
                rec = decode_record(view, 0)
                got.append((qo, rec["physical_offset"], rec["body"]))
            offset = r.next_offset
            r.release()
        assert got == want
    assert reader.lookup(new_sent[5][2]).body == new_sent[5][3]
    assert reader.lookup(old_sent[5][2]).body == old_sent[5][3]
    cqs.close()
    reput.cqs.close()
    table.close()

    # the files, by the twin: entry 0 at the divided offset
    store.close()
    walk = walk_data(cfg.dledger_data_dir, DATA)
    assert walk.entries[0].index == 0 and walk.entries[0].pos == divided
    assert [e.pos + 48 for e in walk.entries[1:]] == [s[2] for s in new_sent]

    # a later start: recovery over a data file list starting at the divided offset, the old log
    # found below it unchanged
    cl.close()
    old = open_old_commit_log(cfg)
    assert old.files[-1].end == divided and sorted(os.listdir(cfg.dledger_data_dir))[0] == offset_to_name(divided)
    store = _open_store(cfg, divided)
    assert (store.ledger_begin_index, store.ledger_end_index, store.write_pos) == (0, len(new_sent), end)
    assert store.committed_index == len(new_sent)
    assert decode_record(store.get(1).body, 0)["body"] == new_sent[0][3]
    store.close()
    old.close()

    # turning DLedger mode off again over that store: refused, naming the key
    with pytest.raises(StoreConfigError) as e:
        refuse_dledger_log(cfg.storePathRootDir)
    assert e.value.key == "enableDLegerCommitLog" and "DLedger" in str(e.value)


def decode_record_size(cfg, phys: int) -> int:
    q = MappedFileQueue(cfg.commitlog_dir, DATA, writable=False)
    q.load()
    try:
        mf = q.find(phys)
        return struct.unpack_from(">i", bytes(mf.mv[phys - mf.base:phys - mf.base + 4]))[0]
    finally:
        q.close()


def test_empty_log_takes_the_leaders_first_position_unless_its_old_log_ends_elsewhere(tmp_path):
    divided = 5 * DATA
    # a new member (no old log, no data file): its data files start at the leader's position
    new = DLedgerEntryStore(str(tmp_path / "new"), data_file_size=DATA, index_file_size=32 * 1024, warm=False)
    assert new.append_at(0, 1, b"", pos=divided) == divided
    assert new.append_at(1, 1, b"x" * 100, pos=divided + 48) == divided + 48
    new.settle()
    assert sorted(os.listdir(tmp_path / "new" / "data"))[0] == offset_to_name(divided)
    new.close()
    new = DLedgerEntryStore(str(tmp_path / "new"), data_file_size=DATA, index_file_size=32 * 1024, warm=False)
    assert (new.ledger_begin_index, new.ledger_end_index, new.position(1)) == (0, 1, (divided + 48, 148))
    # a non-empty log never jumps: a mismatch at entry 2 is refused as before
    with pytest.raises(Exception, match="lands at position"):
        new.append_at(2, 1, b"y", pos=divided + 10 * DATA)
    new.close()

    # a member whose old log ended lower (a slave that had not copied everything): refused, naming
    # both offsets (taking it would leave a hole in its queues)
    (tmp_path / "low" / "data").mkdir(parents=True)
    create_segment_file(str(tmp_path / "low" / "data" / offset_to_name(3 * DATA)), DATA, warm=False)
    low = DLedgerEntryStore(str(tmp_path / "low"), data_file_size=DATA, index_file_size=32 * 1024, warm=False,
                            floor=3 * DATA)
    assert low.write_pos == 3 * DATA
    with pytest.raises(OldCommitLogMismatch, match=f"position {divided}, above the end {3 * DATA}"):
        low.append_at(0, 1, b"", pos=divided)
    assert low.ledger_end_index == -1
    # ... while it takes its own old log's end (what a leader upgraded from the same log sends)
    assert low.append_at(0, 0, b"", pos=3 * DATA) == 3 * DATA
    low.close()
    # reads over a gap found on disk between the old log and the data files: a Hole, no map
    shutil.rmtree(tmp_path / "low")
    (tmp_path / "low" / "data").mkdir(parents=True)
    create_segment_file(str(tmp_path / "low" / "data" / offset_to_name(divided)), DATA, warm=False)
    low = DLedgerEntryStore(str(tmp_path / "low"), data_file_size=DATA, index_file_size=32 * 1024, warm=False,
                            floor=3 * DATA)
    assert low.append_at(0, 1, b"", pos=divided) == divided  # a non-empty data list: no jump asked
    old_dir = tmp_path / "low-old"
    old_dir.mkdir()
    for b in range(0, 3 * DATA, DATA):
        (old_dir / offset_to_name(b)).write_bytes(bytes(DATA))
    old = MappedFileQueue(str(old_dir), DATA, writable=False)
    old.load()
    q = DividedFileQueue(old, low.data)
    assert [type(f) for f in q.files] == [type(old.files[0])] * 3 + [Hole, Hole] + [type(low.data.files[0])] * len(
        low.data.files)
    assert q.find(3 * DATA + 100) is None and q.find(divided + 10).base == divided
    table = create_table(str(tmp_path / "low"))
    table.store(Slot.WROTE, divided + 48)
    reader = QueueReader(SimpleNamespace(commit_log=SimpleNamespace(queue=q, min_offset=0), table=table,
                                         config=small_config(tmp_path / "x"), cqs=None))
    with pytest.raises(StoreError, match="no message at physical offset"):
        reader.record_view(4 * DATA)
    table.close()
    old.close()
    low.close()

    # a member whose own old log ends above the leader's entry 0: refused, naming both offsets
    high = DLedgerEntryStore(str(tmp_path / "high"), data_file_size=DATA, index_file_size=32 * 1024, warm=False,
                             floor=7 * DATA)
    with pytest.raises(OldCommitLogMismatch, match=f"position {divided}, below the end {7 * DATA}"):
        high.append_at(0, 1, b"", pos=divided)
    assert high.ledger_end_index == -1
    high.close()


def test_an_old_log_without_records_is_left_alone(tmp_path):
    cfg = _config(tmp_path / "store")
    cl = CommitLog(cfg, writable=True)
    cl.load()
    cl.set_write_position(0, {})
    cl.close()
    assert os.listdir(cfg.commitlog_dir)
    assert open_old_commit_log(cfg) is None
    assert not os.path.exists(cfg.dledger_data_dir)
    refuse_dledger_log(cfg.storePathRootDir)  # no DLedger entries: the ordinary store may start


# -- real brokers ------------------------------------------------------------------------------
def _pull(ns_addr: str, port: int) -> dict[int, list]:
    async def main():
        async with PullConsumer("cg", ns_addr) as pc:
            return await pull_all(pc, f"127.0.0.1:{port}")
    return asyncio.run(main())


def _rows(by_queue: dict[int, list]) -> dict[int, list]:
    return {q: [(m.queue_offset, m.commit_log_offset, m.offset_msg_id, m.body) for m in ms]
            for q, ms in by_queue.items()}


def _pull_from_min(ns_addr: str, port: int) -> dict[int, tuple[int, list]]:
    """Each queue's minimum offset as a pull from 0 reports it, and every message from there on.
    (A slave does not move a consumer below its minimum, as RocketMQ's with offsetCheckInSlave
    off: the consumer starts where the broker says the queue starts.)"""
    async def main():
        async with PullConsumer("cg", ns_addr) as pc:
            out = {}
            for q in range(QUEUES):
                mq = MessageQueue(TOPIC, GROUP, q)
                r = await api.pull(pc.client, f"127.0.0.1:{port}", pc.group, mq, 0, 64)
                start = at = r.min_offset
                rows = []
                while True:
                    r = await api.pull(pc.client, f"127.0.0.1:{port}", pc.group, mq, at, 64)
                    if r.status != "FOUND":
                        assert r.status == "NO_NEW_MSG", (q, at, r.status)
                        break
                    rows += [(m.queue_offset, m.commit_log_offset, m.offset_msg_id, m.body) for m in r.messages]
                    at = r.next_begin_offset
                out[q] = start, rows
            return out
    return asyncio.run(main())


def _cq_entries(broker, q: int) -> list[tuple[int, int]]:
    """(queue offset, phys) of every written entry of the consume queue on disk, holes skipped."""
    d = broker.store / "consumequeue" / TOPIC / str(q)
    out = []
    for p in sorted(d.iterdir()):
        if p.name.isdigit():
            data = p.read_bytes()
            for i in range(len(data) // 20):
                phys, size = struct.unpack_from(">qi", data, i * 20)
                if size:
                    out.append((int(p.name) // 20 + i, phys))
    return out


def test_an_ordinary_master_and_slave_upgraded_to_a_dledger_group_and_back(tmp_path):
    # 1. an ordinary master and its slave (HA) write the old log: more than one segment
    ns = NameServer(tmp_path)
    master = Broker(tmp_path, "n0", ns.addr, "ASYNC_MASTER", 0)
    slave = Broker(tmp_path, "n1", ns.addr, "SLAVE", 1, f"haMasterAddress=127.0.0.1:{master.ha_port}\n")
    try:
        master.start()
        slave.start()
        old_bodies = [f"old-{i:04d}-".encode() + bytes(1500) for i in range(800)]
        assert all(r.code == 0 for r in send_all(master.port, TOPIC, old_bodies, QUEUES))
        wait_replicated(master, slave)
        old = _rows(_pull(ns.addr, master.port))
        assert sum(len(v) for v in old.values()) == len(old_bodies)
        assert _rows(_pull(ns.addr, slave.port)) == old
    finally:
        master.stop()
        slave.stop()
        ns.stop()

    # 2. a DLedger group over those stores and a new member with an empty store. The new member
    # starts first with one that holds the old log: they are a majority, and the one with the old
    # log must lead (its marker entry 0 outranks an empty ledger in the vote). The new member,
    # elected, would put entry 0 at its own position (0), which the others refuse for ever (their
    # old logs end above): without the marker, a coin toss between the two
    g = DLedgerGroup(tmp_path)
    try:
        n0, n1, n2 = (g.brokers[i] for i in g.ids)
        n2.start()
        n1.start()
        assert g.leader(among=[n1, n2]) is n1
        assert "marks the divided offset" in n1.stderr()
        n0.start()
        leader = n1
        g.wait_follows(n0, leader)
        divided = -(-max(m[1] for ms in old.values() for m in ms) // SEGMENT) * SEGMENT
        assert divided >= 2 * SEGMENT  # the old log spans segments
        for b in (n0, n1):
            assert sorted(os.listdir(data_dir(b)))[0] == offset_to_name(divided)
            assert f"dividedCommitlogOffset {divided}" in b.stderr()
        g.wait_follows(n2, leader)
        # every old message, on the leader and on the follower that holds the old log: the same
        # msgIds, physical offsets and queue offsets as the ordinary store served
        follower = n1 if leader is n0 else n0
        for b in (leader, follower):
            assert _rows(_pull(g.namesrv.addr, b.port)) == old

        # new sends continue every queue's offsets densely, above the divided offset
        new_bodies = [f"new-{i:04d}".encode() for i in range(200)]
        replies = send_all(leader.port, TOPIC, new_bodies, QUEUES)
        assert all(r.code == 0 for r in replies)
        for i, r in enumerate(replies):
            q = i % QUEUES
            assert int(r.ext["queueOffset"]) >= len(old[q])
            assert int(r.ext["msgId"][16:], 16) > divided
        wait_caught_up(g.brokers.values(), leader)
        got = _pull(g.namesrv.addr, leader.port)
        check_dense(got)
        for q in range(QUEUES):
            rows = _rows({q: got[q]})[q]
            assert rows[:len(old[q])] == old[q]  # from queue offset 0: the old messages, then the new
            assert [r[3] for r in rows[len(old[q]):]] == [b for i, b in enumerate(new_bodies) if i % QUEUES == q]
        assert _rows(_pull(g.namesrv.addr, follower.port)) == _rows(got)

        # 3. the new member follows: its data files start at the leader's divided offset, and its
        # consume queues hold the new messages at the same queue offsets and physical offsets
        assert sorted(os.listdir(data_dir(n2)))[0] == offset_to_name(divided)
        for q in range(QUEUES):
            assert _cq_entries(n2, q) == [(m.queue_offset, m.commit_log_offset) for m in got[q][len(old[q]):]]
        # ... and it serves them: its queues start after the old messages it never held, and end
        # where the leader's do (what a leader it became would continue the queue offsets from)
        assert _pull_from_min(g.namesrv.addr, n2.port) == {q: (len(old[q]), _rows({q: got[q][len(old[q]):]})[q])
                                                          for q in range(QUEUES)}
    finally:
        g.stop()

    # 4. turning DLedger mode off again over that store refuses to start, naming the key
    ordinary = Broker(tmp_path, "n0", "127.0.0.1:9", "ASYNC_MASTER", 0)
    r = subprocess.run([sys.executable, "-m", "broker.cli", "serve", "-c", str(ordinary.conf)], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert r.returncode != 0
    assert "enableDLegerCommitLog" in r.stderr and "DLedger" in r.stderr, r.stderr
