"""DLedger file expiry (issue 17): the DLedger cleaner (broker.raft.dledger_clean), the entry store
after its first data files were deleted (DLedgerEntryStore.drop_before, recovery of a log that
begins above entry 0, an empty follower taking a leader's first entry above 0), and groups of
real `broker serve` processes cleaning, restarting, and rebuilding a wiped member from a leader
whose begin moved."""
from __future__ import annotations

import os
import random

from broker.raft.entry_format import INDEX_UNIT_SIZE
from broker.raft.entry_store import DLedgerEntryStore
from broker.raft.errors import IndexOutOfRange

DATA = 64 * 1024
INDEX = 32 * 16  # 16 entries per index file


def _open(d) -> DLedgerEntryStore:
    return DLedgerEntryStore(str(d), data_file_size=DATA, index_file_size=INDEX, warm=False)


def _names(d) -> list[int]:
    return sorted(int(n) for n in os.listdir(d) if n.isdigit())


def _filled(d, n: int) -> tuple[DLedgerEntryStore, list[bytes]]:
    s = _open(d)
    rnd = random.Random(7)
    bodies = [rnd.randbytes(rnd.choice([100, 3000, 9000])) for _ in range(n)]
    for b in bodies:
        s.append(1, b)
    s.update_committed_index(n - 1)
    s.flush()
    return s, bodies


def _first_index_of(s: DLedgerEntryStore, base: int) -> int:
    for i in range(s.ledger_begin_index, s.ledger_end_index + 1):
        if s.position(i)[0] == base:
            return i
    raise AssertionError(f"no entry starts file {base}")


def test_a_store_whose_first_files_were_deleted_moves_its_begin_and_reopens_there(tmp_path):
    s, bodies = _filled(tmp_path, 300)
    data_dir, index_dir = os.path.join(tmp_path, "data"), os.path.join(tmp_path, "index")
    files = _names(data_dir)
    assert len(files) >= 5
    cut = files[3]  # the cleaner deletes the first three data files
    begin = _first_index_of(s, cut)
    assert begin > 16  # index files below it can go too
    for base in files[:3]:
        os.unlink(os.path.join(data_dir, f"{base:020d}"))
    view = s.get(1).body  # a reader still holding a view of a deleted file's map
    assert s.drop_before(cut) == 3
    assert bytes(view) == bodies[1]  # its pages stay until it lets go
    assert s.ledger_begin_index == begin
    assert _names(index_dir)[0] == (begin * INDEX_UNIT_SIZE) // INDEX * INDEX
    try:
        s.get(begin - 1)
        raise AssertionError("an entry below the begin was read")
    except IndexOutOfRange:
        pass
    assert bytes(s.get(begin).body) == bodies[begin]
    s.close()

    s = _open(tmp_path)  # recovery: the first file's first entry is not entry 0
    assert (s.ledger_begin_index, s.ledger_end_index, s.committed_index) == (begin, 299, 299)
    for i in range(begin, 300):
        assert bytes(s.get(i).body) == bodies[i]
    assert s.append(1, b"after")[0] == 300
    s.close()
    s = _open(tmp_path)
    assert (s.ledger_begin_index, bytes(s.get(300).body)) == (begin, b"after")
    s.close()


def test_index_files_left_below_the_begin_go_at_the_next_open(tmp_path):
    """The broker stopped between the cleaner's deletion of data files and its own of the index
    files below them: the next open deletes them."""
    s, bodies = _filled(tmp_path, 300)
    data_dir, index_dir = os.path.join(tmp_path, "data"), os.path.join(tmp_path, "index")
    files = _names(data_dir)
    begin = _first_index_of(s, files[3])
    s.close()
    for base in files[:3]:
        os.unlink(os.path.join(data_dir, f"{base:020d}"))
    s = _open(tmp_path)
    assert s.ledger_begin_index == begin
    assert _names(index_dir)[0] <= begin * INDEX_UNIT_SIZE < _names(index_dir)[0] + INDEX
    assert bytes(s.get(299).body) == bodies[299]
    s.close()


def test_an_empty_follower_takes_a_leader_first_entry_above_zero(tmp_path):
    leader, bodies = _filled(tmp_path / "leader", 300)
    files = _names(os.path.join(tmp_path, "leader", "data"))
    begin = _first_index_of(leader, files[3])
    for base in files[:3]:
        os.unlink(os.path.join(tmp_path, "leader", "data", f"{base:020d}"))
    leader.drop_before(files[3])
    follower = _open(tmp_path / "follower")
    for i in range(begin, 300):
        e = leader.get(i)
        assert follower.append_at(i, e.term, e.body, pos=e.pos) == e.pos
    assert (follower.ledger_begin_index, follower.ledger_end_index) == (begin, 299)
    assert _names(os.path.join(tmp_path, "follower", "data"))[0] == files[3]
    follower.close()
    follower = _open(tmp_path / "follower")
    assert follower.ledger_begin_index == begin
    assert [leader.entry_header(i) for i in range(begin, 300)] == [follower.entry_header(i) for i in range(begin, 300)]
    follower.close()
    leader.close()


# -- groups of real brokers --------------------------------------------------------------------------
import asyncio  # noqa: E402

import pytest  # noqa: E402

from broker.client import api  # noqa: E402
from broker.client.pull_consumer import PullConsumer  # noqa: E402
from broker.client.route import MessageQueue  # noqa: E402
from broker.remoting import codes  # noqa: E402
from tests.conftest import wait_for  # noqa: E402
from tests.helpers.dledger_checks import QUEUES, TOPIC, wait_caught_up  # noqa: E402
from tests.helpers.dledger_cluster import GROUP, SEGMENT, DLedgerGroup, data_dir  # noqa: E402
from tests.helpers.ha_cluster import call, send_all  # noqa: E402

# fileReservedTime=-1: DLedger data files are kept fileReservedTime + 1 = 0 hours (RocketMQ's
# reading), so a manual clean (`broker admin clean`) deletes every one it may at once.
# cleanFileForciblyEnable=false: the test's disk is the host's, and a host disk above
# diskSpaceCleanForciblyRatio (85 %) made the cleaners delete forcibly, past the frozen follower's
# pin, as they should on a full disk (it happened beside other work: "disk 87% > ..., forcibly")
EXPIRE_AT_ONCE = ("fileReservedTime=-1\ncleanResourceInterval=100\ndeleteCommitLogFilesInterval=0\n"
                  "cleanFileForciblyEnable=false\n")


@pytest.fixture
def group(tmp_path):
    g = DLedgerGroup(tmp_path, extra=EXPIRE_AT_ONCE)
    try:
        yield g.start()
    finally:
        g.stop()


def _send(b, start: int, n: int) -> list[bytes]:
    bodies = [b"%07d" % i + b"e" * 1200 for i in range(start, start + n)]  # ~1.2 KiB each
    assert {r.code for r in send_all(b.port, TOPIC, bodies, QUEUES)} == {0}
    return bodies


def _files(b) -> list[int]:
    return sorted(int(n) for n in os.listdir(data_dir(b)) if n.isdigit())


def _clean(*members) -> None:
    for b in members:
        assert call(b.port, codes.DELETE_EXPIRED_COMMITLOG).code == codes.SUCCESS


def _read_from_min(g, b) -> dict[int, list]:
    """Every queue read from offset 0 as a consumer would: told the queue's new minimum, then
    read from there to the end."""
    master = b.info()["brokerRole"] == "SYNC_MASTER"

    async def main():
        out = {}
        async with PullConsumer("cg", g.namesrv.addr) as pc:
            addr = f"127.0.0.1:{b.port}"
            for q in range(QUEUES):
                mq = MessageQueue(TOPIC, GROUP, q)
                r = await api.pull(pc.client, addr, pc.group, mq, 0, 64)
                msgs, offset = [], 0
                if r.min_offset > 0:
                    # as the ordinary store: offset 0 below the minimum answers it, no messages; a
                    # master tells the consumer to go there, a slave to come again (offsetCheckInSlave)
                    assert r.status != "FOUND", r
                    if master:
                        assert r.next_begin_offset == r.min_offset, r
                    offset = r.min_offset
                while True:
                    r = await api.pull(pc.client, addr, pc.group, mq, offset, 64)
                    if r.status != "FOUND":
                        break
                    msgs += r.messages
                    offset = r.next_begin_offset
                assert [m.queue_offset for m in msgs] == list(range(offset - len(msgs), offset))
                out[q] = [(m.queue_offset, m.body) for m in msgs]
        return out
    return asyncio.run(main())


def test_a_group_expires_its_files_keeps_what_a_frozen_follower_needs_and_restarts_there(group):
    g = group
    leader = g.leader()
    sent = _send(leader, 0, 100)
    wait_caught_up(g.brokers.values(), leader)
    lagging, live = [b for b in g.brokers.values() if b is not leader]

    # a frozen follower pins the leader's files: the leader deletes none of what it lacks
    g.freeze(lagging)
    sent += _send(leader, 100, 4900)  # ~6 MiB, 6 data files of 1 MiB, committed with the live follower alone
    wait_caught_up([leader, live], leader)
    _clean(leader, live)
    wait_for(lambda: live.info()["commitLogMinOffset"] > 0, 30, "the live follower to delete its old files")
    wait_for(lambda: "manual clean requested" in leader.stderr(), 30, "the leader's cleaner to run")
    _clean(leader)  # a second request: at least one whole pass ran since the first
    wait_for(lambda: leader.stderr().count("manual clean requested") >= 2, 30, "the leader's cleaner to run again")
    assert leader.info()["commitLogMinOffset"] == 0 and _files(leader)[0] == 0
    g.thaw(lagging)
    wait_caught_up(g.brokers.values(), leader)

    _clean(*g.brokers.values())
    for b in g.brokers.values():
        wait_for(lambda: b.info()["commitLogMinOffset"] >= 3 * SEGMENT, 30, f"{b.name} to delete its old files")
        info = b.info()
        # only what is committed, dispatched and written back: never the file being written
        assert info["commitLogMinOffset"] == _files(b)[0] < info["commitLogMaxOffset"]
        assert info["commitLogMinOffset"] <= info["dispatchedOffset"]
    expect = {}
    for i, body in enumerate(sent):
        expect.setdefault(i % QUEUES, []).append(body)
    before = _read_from_min(g, leader)
    for q, msgs in before.items():
        assert msgs and msgs[0][0] > 0  # the queue's head went with the files
        assert [body for _, body in msgs] == expect[q][msgs[0][0]:]

    more = _send(leader, 5000, 200)  # writes and reads go on
    wait_caught_up(g.brokers.values(), leader)
    after = _read_from_min(g, leader)
    assert sum(len(v) for v in after.values()) == sum(len(v) for v in before.values()) + len(more)

    begins = {b.name: _files(b)[0] for b in g.brokers.values()}
    for b in g.brokers.values():
        b.stop()
    for b in g.brokers.values():
        b.start()
    leader = g.wait_master(TOPIC)
    wait_caught_up(g.brokers.values(), leader)
    assert {b.name: _files(b)[0] for b in g.brokers.values()} == begins
    for b in g.brokers.values():
        assert _read_from_min(g, b) == after, f"{b.name} serves other messages after the restart"
    assert "Traceback" not in "".join(b.stderr() for b in g.brokers.values())


def test_a_member_wiped_after_the_leader_begin_moved_rebuilds_from_that_begin(group):
    g = group
    leader = g.leader()
    _send(leader, 0, 5000)
    wait_caught_up(g.brokers.values(), leader)
    _clean(*g.brokers.values())
    for b in g.brokers.values():
        wait_for(lambda: b.info()["commitLogMinOffset"] >= 3 * SEGMENT, 30, f"{b.name} to delete its old files")
    wiped = next(b for b in g.brokers.values() if b is not leader)
    wiped.stop()
    g.wipe(wiped)
    wiped.start()
    leader = g.wait_master(TOPIC)
    wait_caught_up(g.brokers.values(), leader)
    # its log starts where the leader's does (entry b > 0 at the leader's position)
    assert _files(wiped)[0] == _files(leader)[0] > 0
    assert wiped.info()["dLedgerEndIndex"] == leader.info()["dLedgerEndIndex"]
    assert _read_from_min(g, wiped) == _read_from_min(g, leader)
    assert "Traceback" not in wiped.stderr() + leader.stderr()
