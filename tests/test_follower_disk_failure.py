"""A failing disk on the followers' side (tests/test_fsync_failure.py has the master's): the HA
slave's and the DLedger follower's writers, under the LD_PRELOAD fault shim
(tests/faults/fsync_fault.c) in the follower's processes only.

After a failed fdatasync/msync the kernel may have dropped the dirty pages it covered
("fsyncgate"), so a later sync that succeeds proves nothing. A follower then acknowledges nothing
more to its master or leader, stops taking replicated writes (a log line, a metric), and comes
back after a restart by recovering its log by CRC and fetching the rest. Every SEND_OK the
producer got is on the master/leader, and after the restart on the follower too. A pwrite that
writes short (half of each call) loses and corrupts nothing; a DLedger follower's pwrite that
writes nothing refuses the push and changes nothing."""
from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest

from broker.remoting import codes
from broker.store.message import decode_message
from tests.conftest import wait_for
from tests.helpers.dledger_checks import TOPIC as DLEDGER_TOPIC
from tests.helpers.dledger_checks import check_history
from tests.helpers.dledger_cluster import DLedgerGroup
from tests.helpers.fault_shim import build_shim, faults_logged, shim_env
from tests.helpers.ha_cluster import Broker, NameServer, call, send_all, wait_replicated

TOPIC = "FollowerDisk"


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    return build_shim(tmp_path_factory.mktemp("shim"))


def _bodies(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [b"%d-%d:" % (seed, i) + rnd.randbytes(rnd.randint(10, 3000)) for i in range(n)]


def _acked(replies, bodies) -> list[tuple[int, bytes]]:
    """(physical offset, body) of every send answered SEND_OK (the offset is in its msgId)."""
    return [(int(r.ext["msgId"][16:], 16), b) for r, b in zip(replies, bodies) if r.code == codes.SUCCESS]


def _holds(b: Broker, acked: list[tuple[int, bytes]]) -> None:
    """Every acknowledged message is stored on `b` at its offset, byte for byte."""
    for phys, body in acked:
        r = call(b.port, codes.VIEW_MESSAGE_BY_ID, {"offset": phys})
        assert r.code == codes.SUCCESS, f"{b.name} lost the SEND_OK at {phys}: {r.remark}"
        assert bytes(decode_message(bytes(r.body), 0).body) == body, f"{b.name} holds another body at {phys}"


def _last_run(b: Broker) -> str:
    return (b.logs / f"stderr.{b.runs}").read_text(errors="replace")


class ShimmedGroup:
    """A DLedger group with every member under the fault shim (which one leads is learnt later),
    a control file per member (`ctls`), and the sends tried and acknowledged for the history check."""

    def __init__(self, tmp_path: Path, shim: Path, extra: str = ""):
        self.g = DLedgerGroup(tmp_path, extra=extra)
        self.ctls = {}
        for sid, b in self.g.brokers.items():
            self.ctls[sid] = tmp_path / f"{sid}.ctl"
            b.env = shim_env(shim, self.ctls[sid], match="/dledger-")
        self.tried, self.acked = [], []

    def send(self, bodies: list[bytes], to: Broker) -> list:
        replies = send_all(to.port, DLEDGER_TOPIC, bodies)
        self.tried.extend(bodies)
        self.acked.extend(b for r, b in zip(replies, bodies) if r.code == codes.SUCCESS)
        return replies


@pytest.mark.parametrize("fault", ["eio-once fdatasync", "eio fdatasync"])
def test_a_slave_whose_fdatasync_fails_acknowledges_nothing_more_and_recovers_after_a_restart(tmp_path, shim, fault):
    ns = NameServer(tmp_path)
    master = Broker(tmp_path, "master", ns.addr, "SYNC_MASTER", 0, "syncFlushTimeout=3000\n")
    ctl = tmp_path / "slave.ctl"
    slave = Broker(tmp_path, "slave", ns.addr, "SLAVE", 1, f"haMasterAddress=127.0.0.1:{master.ha_port}\n",
                   env=shim_env(shim, ctl))
    try:
        master.start()
        # every pwrite of a replicated frame into the slave's commit log writes half: it goes on
        # where it stopped, so the slave's log is still the master's, byte for byte
        ctl.write_text("short-pwrite")
        slave.start()
        wait_for(lambda: master.info()["slaves"] == 1, 30, "the slave to link")
        bodies = _bodies(300, 1)
        acked = _acked(send_all(master.port, TOPIC, bodies), bodies)
        assert len(acked) == len(bodies)
        wait_replicated(master, slave)
        assert any(f.startswith("short-pwrite") for f in faults_logged(ctl))
        _holds(slave, acked)

        # the slave's next fdatasync fails: once (the fault a retry would hide), or always
        ctl.write_text(fault)
        seed, answered, deadline = 2, [], time.monotonic() + 30
        while not any(r.code != codes.SUCCESS for r in answered):  # the slave flushes every 500 ms
            assert time.monotonic() < deadline, "the slave's flush never failed"
            bodies = _bodies(20, seed)
            answered = send_all(master.port, TOPIC, bodies)
            acked += _acked(answered, bodies)
            seed += 1
        assert {r.code for r in answered} <= {codes.SUCCESS, codes.SLAVE_NOT_AVAILABLE, codes.FLUSH_SLAVE_TIMEOUT}
        failed = [f.split()[0] for f in faults_logged(ctl) if not f.startswith("short")]
        assert failed[0] == "fdatasync" and set(failed) == {"fdatasync"}
        if fault.startswith("eio-once"):
            assert len(failed) == 1 and ctl.read_text() == ""  # fdatasync works again: the slave stays stopped
        wait_for(lambda: "stops replicating and acknowledges nothing more" in slave.stderr(), 30, "the slave's log line")
        wait_for(lambda: master.info()["slaves"] == 0, 30, "the master to lose its slave")
        info = slave.info()
        assert info["slave_replication_stopped"] == 1 and info["linked"] == 0 and info["flush_errors"] >= 1, info
        # nothing the slave received after the failure was acknowledged, and nothing more is
        held, counted = info["received"], master.info()["acked"]
        assert counted <= held
        bodies = _bodies(20, 999)
        assert {r.code for r in send_all(master.port, TOPIC, bodies)} == {codes.SLAVE_NOT_AVAILABLE}
        assert slave.info()["received"] == held and master.info()["acked"] == counted
        _holds(master, acked)

        slave.stop()
        ctl.write_text("")  # a disk that works again (or a replaced one)
        assert "next start recovers" in slave.stderr()  # not marked clean: the restart checks CRCs
        slave.start()
        assert re.search(r"recovered commit log after a crash: scanned [1-9]", _last_run(slave))
        wait_for(lambda: master.info()["slaves"] == 1, 30, "the restarted slave to link")
        bodies = _bodies(20, 1000)
        replies = send_all(master.port, TOPIC, bodies)
        assert all(r.code == codes.SUCCESS for r in replies)  # SYNC_MASTER counts on the slave again
        acked += _acked(replies, bodies)
        wait_replicated(master, slave)
        _holds(slave, acked)
        _holds(master, acked)
    finally:
        slave.stop()
        master.stop()
        ns.stop()


@pytest.mark.parametrize("fault", ["eio-once fdatasync", "eio fdatasync"])
def test_dledger_followers_whose_write_back_fails_acknowledge_nothing_more_and_recover_after_a_restart(
        tmp_path, shim, fault):
    """flushDiskType=SYNC_FLUSH: the leader counts a follower for an entry only once the follower
    wrote it back. Both followers' write-back fails (the flusher's fdatasync, once or always): with
    no durable majority left, no send may be SEND_OK, even once their fdatasync works again; after
    a restart they recover and the group takes writes again."""
    sg = ShimmedGroup(tmp_path, shim, extra="flushDiskType=SYNC_FLUSH\n")
    g, ctls, send, tried, acked = sg.g, sg.ctls, sg.send, sg.tried, sg.acked

    try:
        g.start()
        leader = g.leader()
        followers = [b for b in g.brokers.values() if b is not leader]
        for f in followers:
            g.wait_follows(f, leader)
        assert all(r.code == codes.SUCCESS for r in send(_bodies(100, 1), leader))
        for f in followers:
            ctls[f.name].write_text(fault)
        seed = 2

        def both_failed() -> bool:
            nonlocal seed
            send(_bodies(10, seed), leader)  # entries to write back
            seed += 1
            return all(f.info()["dledger_disk_failed"] == 1 for f in followers)
        wait_for(both_failed, 60, "both followers' write-back to fail")
        for f in followers:
            assert any(line.startswith(fault.split()[1]) for line in faults_logged(ctls[f.name]))
            assert "takes and acknowledges no more entries until it is restarted" in f.stderr()
            if fault.startswith("eio-once"):
                assert ctls[f.name].read_text() == ""  # their fdatasync works again
                assert len(faults_logged(ctls[f.name])) == 1
        # no durable majority: nothing is SEND_OK, and the followers refuse the leader's pushes
        assert not any(r.code == codes.SUCCESS for r in send(_bodies(10, 999), leader))
        assert "DISK_ERROR" in leader.stderr()

        for f in followers:
            f.stop()
            ctls[f.name].write_text("")
        for f in followers:
            f.start()
        leader = g.leader()
        for f in g.brokers.values():
            if f is not leader:
                g.wait_follows(f, leader)
            assert f.info()["dledger_disk_failed"] == 0
        wait_for(lambda: all(r.code == codes.SUCCESS for r in send(_bodies(10, seed + 1000), leader)), 30,
                 "the group to take writes again")
        # every SEND_OK is on the leader once, and on every member with the same queues and files
        check_history(g, acked, tried, members=list(g.brokers.values()))
    finally:
        g.stop()


def test_a_dledger_leader_whose_write_back_fails_steps_down_and_the_others_go_on(tmp_path, shim):
    """The leader's own write-back fails once: it could append nothing more, so it steps down and
    asks for no votes; the two members whose disks work elect one of them and take writes; the old
    leader, restarted, recovers and follows."""
    sg = ShimmedGroup(tmp_path, shim, extra="flushDiskType=SYNC_FLUSH\n")
    g, ctls, send, tried, acked = sg.g, sg.ctls, sg.send, sg.tried, sg.acked

    try:
        g.start()
        old = g.leader()
        others = [b for b in g.brokers.values() if b is not old]
        assert all(r.code == codes.SUCCESS for r in send(_bodies(100, 1), old))
        ctls[old.name].write_text("eio-once fdatasync")
        seed = 2

        def stepped_down() -> bool:
            nonlocal seed
            send(_bodies(10, seed), old)
            seed += 1
            return old.info()["dledger_disk_failed"] == 1
        wait_for(stepped_down, 60, "the leader's write-back to fail")
        assert ctls[old.name].read_text() == "" and len(faults_logged(ctls[old.name])) == 1
        assert "stepping down from leading term" in old.stderr()
        new = g.leader(among=others)
        wait_for(lambda: old.info()["dledger_leader"] == 0, 30, "the old leader to have stepped down")
        wait_for(lambda: all(r.code == codes.SUCCESS for r in send(_bodies(10, seed + 1000), new)), 30,
                 "the new leader to take writes")
        assert old.info()["dledger_leader"] == 0  # it never stood again, its disk working or not
        old.stop()
        ctls[old.name].write_text("")
        old.start()
        g.wait_follows(old, new)
        assert all(r.code == codes.SUCCESS for r in send(_bodies(10, seed + 2000), new))
        check_history(g, acked, tried, members=list(g.brokers.values()))
    finally:
        g.stop()


def test_dledger_followers_whose_pwrite_writes_short_or_nothing_lose_nothing(tmp_path, shim):
    """A follower writes the entries a push carries with pwrite (entry_push.append_entries): a
    pwrite that writes half of what it is asked is continued; one that writes nothing refuses the
    push (DISK_ERROR, the log unchanged) and the group goes on with the other follower; once that
    follower's pwrite works again it catches up. Every SEND_OK is then on every member."""
    sg = ShimmedGroup(tmp_path, shim)
    g, ctls, send, tried, acked = sg.g, sg.ctls, sg.send, sg.tried, sg.acked

    try:
        g.start()
        leader = g.leader()
        followers = [b for b in g.brokers.values() if b is not leader]
        for f in followers:
            g.wait_follows(f, leader)
            ctls[f.name].write_text("short-pwrite")
        assert all(r.code == codes.SUCCESS for r in send(_bodies(100, 1), leader))
        wait_for(lambda: all(f.info()["dledger_end_index"] == leader.info()["dledger_end_index"] for f in followers),
                 30, "the followers to hold every entry")
        for f in followers:
            assert any(line.startswith("short-pwrite") for line in faults_logged(ctls[f.name]))

        stuck, other = followers
        ctls[stuck.name].write_text("zero-pwrite")
        ctls[other.name].write_text("")
        end = stuck.info()["dledger_end_index"]
        assert all(r.code == codes.SUCCESS for r in send(_bodies(50, 2), leader))  # the other follower's majority
        wait_for(lambda: "pwrite of" in stuck.stderr(), 30, "the stuck follower to refuse a push")
        assert "DISK_ERROR" in stuck.stderr() and stuck.info()["dledger_end_index"] == end
        assert stuck.info()["dledger_disk_failed"] == 0  # nothing was acknowledged: no write-back to distrust
        assert any(line.startswith("zero-pwrite") for line in faults_logged(ctls[stuck.name]))

        ctls[stuck.name].write_text("")
        assert all(r.code == codes.SUCCESS for r in send(_bodies(50, 3), leader))
        wait_for(lambda: stuck.info()["dledger_end_index"] == leader.info()["dledger_end_index"], 30,
                 "the stuck follower to catch up")
        check_history(g, acked, tried, members=list(g.brokers.values()))
    finally:
        g.stop()


@pytest.mark.parametrize("how", ["msync", "fdatasync"])
def test_an_entry_store_whose_write_back_failed_never_moves_its_flushed_marks_again(tmp_path, monkeypatch, how):
    """The store's side, for the call the group test does not reach: msync (mmap.flush) is the
    write-back of flush(), which the checkpoint, a truncation and close use; the flusher's
    fdatasync goes through write_back and written_back."""
    import broker.raft.entry_files as entry_files
    from broker.raft.entry_store import DLedgerEntryStore
    from broker.raft.errors import EntryStoreDiskFailed
    from broker.raft.protocol import ResponseCode
    s = DLedgerEntryStore(str(tmp_path), data_file_size=64 * 1024, index_file_size=32 * 64)
    for i in range(5):
        s.append(1, b"e%d" % i)
    s.update_committed_index(4)
    s.persist_checkpoint()
    ckpt = (tmp_path / "checkpoint").read_text()
    for i in range(5, 10):
        s.append(1, b"e%d" % i)

    def eio(*_):
        raise OSError(5, "Input/output error")
    if how == "msync":
        monkeypatch.setattr(entry_files, "msync", eio)
        with pytest.raises(EntryStoreDiskFailed) as raised:
            s.flush()
        err = raised.value
    else:
        plan = s.flush_plan()
        monkeypatch.setattr(entry_files.os, "fdatasync", eio)
        with pytest.raises(OSError) as raised:
            s.write_back(plan)  # in the flusher's thread, which then reports it on the loop:
        err = s.write_back_failed("fdatasync of the entry files", raised.value)
    assert err.code is ResponseCode.DISK_ERROR and "until it is restarted" in str(err)
    assert s.flushed_index == 4 and s.disk_failed
    monkeypatch.undo()  # the disk answers again: that proves nothing, the marks stay
    with pytest.raises(EntryStoreDiskFailed):
        s.flush()
    plan = s.flush_plan()
    s.write_back(plan)
    s.written_back(plan)
    assert s.flushed_index == 4
    with pytest.raises(EntryStoreDiskFailed):
        s.persist_checkpoint()
    s.update_committed_index(9)
    s.close()  # no checkpoint naming entries the failed write-back covered
    assert (tmp_path / "checkpoint").read_text() == ckpt
    s = DLedgerEntryStore(str(tmp_path), data_file_size=64 * 1024, index_file_size=32 * 64)
    assert s.ledger_end_index == 9 and s.committed_index == 4  # recovered by CRC past the checkpoint
    assert [bytes(s.get(i).body) for i in range(10)] == [b"e%d" % i for i in range(10)]
    s.close()


def test_a_short_pwrite_is_continued_and_one_that_writes_nothing_is_an_error(tmp_path, monkeypatch):
    """pwrite_all (the HA slave's frames, the store checkpoint's first zeros) under a pwrite that
    writes half of what it is asked, then under one that writes nothing."""
    import os

    from broker.store import checkpoint as checkpoint_mod
    from broker.store.durable import ShortWrite, pwrite_all
    real = os.pwrite
    calls = []

    def half(fd, data, offset):
        calls.append(len(data))
        return real(fd, memoryview(data)[:max(1, len(data) // 2)], offset)
    monkeypatch.setattr(os, "pwrite", half)
    ck = checkpoint_mod.StoreCheckpoint(str(tmp_path / "checkpoint"))
    assert os.path.getsize(tmp_path / "checkpoint") == checkpoint_mod.SIZE and len(calls) > 1
    ck.set(flushedOffset=77)
    assert ck.get("flushedOffset") == 77
    data = random.Random(3).randbytes(100_000)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        pwrite_all(fd, data, 10)
        assert (tmp_path / "f").read_bytes() == bytes(10) + data
        monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: 0)
        with pytest.raises(ShortWrite, match="wrote nothing of 5 bytes"):
            pwrite_all(fd, b"12345", 0)
    finally:
        os.close(fd)


def test_a_member_whose_write_back_failed_asks_for_no_votes_but_still_gives_them(tmp_path):
    """Such a member could not append as leader: it never stands (the group elects another, or
    waits for its restart), and it answers the others' vote requests as before."""
    import asyncio

    from broker.raft.config import DLedgerConfig
    from broker.raft.elector import LeaderElector
    from broker.raft.member_state import MemberState
    from broker.raft.protocol import VoteRequest, VoteResult

    asked = []

    class Rpc:
        async def vote(self, peer, req, timeout):
            asked.append(peer)
            raise ConnectionError("no network in this test")

        async def heartbeat(self, *a):
            raise ConnectionError("no network in this test")
    cfg = DLedgerConfig(enableDLegerCommitLog=True, dLegerGroup="g", dLegerSelfId="n0",
                        dLegerPeers="n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913")
    e = LeaderElector(MemberState(cfg, str(tmp_path)), Rpc())
    failed = True
    e.may_stand = lambda: not failed
    e.change_role_to_candidate(0)
    term, before = e.state.term, e.now_ms()
    asyncio.run(e._maintain_as_candidate())
    assert asked == [] and e.next_vote_at > before  # no round, and no busy loop on a past deadline
    asyncio.run(e._maintain_as_candidate())
    assert e.state.term == term  # no term of its own: a leader's heartbeats stay current here

    def ask(term: int):
        return e.handle_vote(VoteRequest(group="g", leaderId="n1", term=term, ledgerEndIndex=-1, ledgerEndTerm=-1,
                                         localId="n1", remoteId="n0")).voteResult
    assert ask(term + 2) == VoteResult.REJECT_TERM_NOT_READY  # as any member: it takes the term next turn
    asyncio.run(e._maintain_as_candidate())
    assert e.state.term == term + 2 and ask(term + 2) == VoteResult.ACCEPT and asked == []
    failed = False  # (after a restart, in life)
    e.next_vote_at = -1
    asyncio.run(e._maintain_as_candidate())
    assert sorted(asked) == ["n1", "n2"]


def test_a_truncation_whose_write_back_fails_stops_the_store_and_the_restart_ends_at_the_cut(tmp_path, monkeypatch):
    import broker.raft.entry_files as entry_files
    from broker.raft.entry_store import DLedgerEntryStore
    from broker.raft.errors import EntryStoreDiskFailed

    def eio(*_):
        raise OSError(5, "Input/output error")
    s = DLedgerEntryStore(str(tmp_path), data_file_size=64 * 1024, index_file_size=32 * 64)
    for i in range(10):
        s.append(1, b"e%d" % i)
    s.flush()
    monkeypatch.setattr(entry_files, "msync", eio)
    with pytest.raises(EntryStoreDiskFailed, match="writing back the truncation failed"):
        s.truncate(7)
    monkeypatch.undo()
    with pytest.raises(EntryStoreDiskFailed):  # nothing more, though msync works again
        s.truncate(8)
    s.close()
    s = DLedgerEntryStore(str(tmp_path), data_file_size=64 * 1024, index_file_size=32 * 64)
    # the zeros were stored through the map before the failed msync: the log ends at the cut
    assert s.ledger_end_index == 6 and [bytes(s.get(i).body) for i in range(7)] == [b"e%d" % i for i in range(7)]
    s.close()
