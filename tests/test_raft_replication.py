"""DLedger mode, step 3 (issue 17): replication and quorum commit (broker.raft.server).

Live groups of 3 and 5 DLedgerServers in one event loop, each with its own store folder and its
own remoting server on 127.0.0.1, real sockets between them, short timings. Logs are compared
through the independent decoder of DLedger's files (tests/twins/dledger_twin.py), never through
the store that wrote them. Every wait is bounded and waits on a wake-up (a role change, a
committed index) rather than sleeping.
"""
from __future__ import annotations

import asyncio
import logging
import os
import shutil
import random
import time

import pytest
import uvloop

from broker.raft.append_errors import LeaderPendingFull, NotLeader, TermChanged, WaitQuorumAckTimeout
from broker.raft.committed import CommittedIndex
from broker.raft.config import DLedgerConfig
from broker.raft.entry_pusher import PushWindow
from broker.raft.entry_store import DLedgerEntryStore
from broker.raft.protocol import ResponseCode
from broker.raft.push_protocol import PushEntryRequest, PushEntryResponse, PushType
from broker.raft.quorum import QuorumAckChecker
from broker.raft.server import DLedgerServer
from broker.remoting.connection import connect
from tests.helpers.procs import async_wait_until
from tests.conftest import free_port
from tests.twins import dledger_twin as twin

GROUP = "RaftNode00"
DATA = 64 * 1024          # small data files: entries cross file ends (blanks) all the time
INDEX = 32 * 1024
STORE = dict(data_file_size=DATA, index_file_size=INDEX, warm=False)
# a small window, so that several pushes are in flight and entries are split across pushes
WINDOW = PushWindow(push_bytes=8 * 1024, push_entries=8, pushes=4, window_bytes=32 * 1024)
FAST = dict(heartBeatTimeIntervalMs=100, maxHeartBeatLeak=3, minVoteIntervalMs=50, maxVoteIntervalMs=150,
            maxWaitAckTimeMs=1000)
RETRYABLE = (NotLeader, TermChanged, WaitQuorumAckTimeout)
TEST_TIMEOUT = 60


def group_configs(n: int, **timing) -> list[DLedgerConfig]:
    ports = [free_port() for _ in range(n)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    t = {**FAST, **timing}
    return [DLedgerConfig(enableDLegerCommitLog=True, dLegerGroup=GROUP, dLegerPeers=peers, dLegerSelfId=f"n{i}", **t)
            for i in range(n)]


class Group:
    """n members; `changed` is set on every role change of any of them (what `until` waits on)."""

    def __init__(self, root, n: int, durable: bool = False, **timing):
        self.durable = durable
        self.configs = group_configs(n, **timing)
        self.roots = [root / f"m{i}" for i in range(n)]
        self.members: list[DLedgerServer | None] = [None] * n
        self.changed = asyncio.Event()

    async def start(self, i: int) -> DLedgerServer:
        srv = DLedgerServer(self.configs[i], self.roots[i], store_options=STORE, window=WINDOW, durable=self.durable)
        srv.elector.handlers.append(lambda *_: self.changed.set())
        self.members[i] = srv
        await srv.start()
        self.changed.set()
        return srv

    async def start_all(self) -> "Group":
        for i in range(len(self.configs)):
            await self.start(i)
        return self

    async def stop(self, i: int) -> None:
        srv, self.members[i] = self.members[i], None
        if srv is not None:
            await srv.stop()
        self.changed.set()

    async def close(self) -> None:
        for i in range(len(self.members)):
            await self.stop(i)

    def live(self) -> list[DLedgerServer]:
        return [m for m in self.members if m is not None]

    def index_of(self, srv: DLedgerServer) -> int:
        return self.members.index(srv)

    def data_dir(self, i: int) -> str:
        return os.path.join(self.roots[i], f"dledger-n{i}", "data")

    def index_dir(self, i: int) -> str:
        return os.path.join(self.roots[i], f"dledger-n{i}", "index")

    async def until(self, pred, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while True:
            value = pred()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}: {self.live()}")
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    def settled(self) -> DLedgerServer | None:
        """The leader every live member follows in one term, or None."""
        live = self.live()
        leaders = [m for m in live if m.is_leader]
        if len(leaders) != 1:
            return None
        lead = leaders[0].state
        if all(m.state.is_follower and m.state.leader_id == lead.self_id and m.state.term == lead.term
               for m in live if m is not leaders[0]):
            return leaders[0]
        return None

    async def leader(self, timeout: float = 15) -> DLedgerServer:
        return await self.until(self.settled, timeout, "a leader followed by every live member")

    async def append(self, body: bytes, attempts: int = 20) -> tuple[int, int]:
        """Append through whoever leads, again if leadership moved meanwhile (the entry may then
        be in the log twice: only the acknowledged copy is checked)."""
        for _ in range(attempts):
            lead = await self.leader()
            try:
                index, pos = await lead.append(body)
            except RETRYABLE:
                continue
            assert_majority_holds(self.live(), lead, index, len(self.configs))
            return index, pos
        raise AssertionError(f"no leader took an append in {attempts} attempts")

    async def all_committed(self, index: int, timeout: float = 10) -> None:
        await asyncio.gather(*(asyncio.wait_for(m.wait_committed(index), timeout) for m in self.live()))


def assert_majority_holds(members, lead: DLedgerServer, index: int, n: int) -> None:
    """At the moment an append returns, a majority of the group holds the entry as the leader does."""
    want = lead.store.entry_header(index)
    holders = [m for m in members if m.store.ledger_end_index >= index and m.store.entry_header(index) == want]
    assert len(holders) >= n // 2 + 1, f"entry {index} acknowledged while only {len(holders)} of {n} hold it"


def read_log(group: Group, i: int):
    """(entries, blanks, end) of member i's data files, and its index units, by the twin."""
    walk = twin.walk_data(group.data_dir(i), DATA)
    entries = [(e.index, e.term, e.pos, e.size, e.body_crc, e.body) for e in walk.entries]
    blanks = [(b.at, b.size) for b in walk.blanks]
    units = [(u.pos, u.size, u.index, u.term) for u in twin.walk_index(group.index_dir(i), INDEX)]
    assert [e[0] for e in entries] == list(range(len(entries)))
    assert [(e[2], e[3], e[0], e[1]) for e in entries] == units
    return entries, blanks, walk.end


def assert_logs_equal(group: Group, members: list[int]) -> list:
    logs = [read_log(group, i) for i in members]
    for i, other in zip(members[1:], logs[1:]):
        assert other == logs[0], f"n{i}'s log differs from n{members[0]}'s"
    for i, (_, _, end) in zip(members, logs):
        assert twin.first_nonzero_after(group.data_dir(i), DATA, end) is None, f"n{i} has bytes past its end"
    return logs[0][0]


def assert_acknowledged(entries, acked: dict[int, tuple[int, bytes]]) -> None:
    by_index = {e[0]: e for e in entries}
    for index, (pos, body) in acked.items():
        e = by_index.get(index)
        assert e is not None and e[2] == pos and e[5] == body, f"acknowledged entry {index} lost or changed"


def bodies(rng: random.Random, n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}-".encode() + rng.randbytes(rng.randrange(1, 3000)) for i in range(n)]


def run(main, loop: str = "asyncio") -> None:
    """Run a test's main, bounded as a whole: a hang is a failure, not a stuck suite."""
    async def bounded():
        async with asyncio.timeout(TEST_TIMEOUT):
            await main()
    (uvloop.run if loop == "uvloop" else asyncio.run)(bounded())


# -- the parts, without a network -----------------------------------------------------------------

def test_entry_span_is_views_of_the_maps_split_at_file_ends(tmp_path):
    store = DLedgerEntryStore(str(tmp_path), **STORE)
    try:
        rng = random.Random(3)
        for body in bodies(rng, 80, "span"):
            store.append(1, body)
        walk = twin.walk_data(os.path.join(tmp_path, "data"), DATA)
        raw = b"".join(open(p, "rb").read() for p in walk.files)
        assert walk.blanks
        for first in range(0, 80, 7):
            span = store.entry_span(first, 12, 20_000)
            entries = walk.entries[first:first + span.count]
            assert span.count >= 1 and (span.count == 12 or span.last == 79
                                        or span.nbytes + walk.entries[span.last + 1].size > 20_000)
            assert span.pos == entries[0].pos and span.nbytes == sum(e.size for e in entries)
            files = {e.pos // DATA for e in entries}
            assert len(span.views) == len(files)  # one view per file: no blank in a push
            for v in span.views:  # views of the map itself, not copies
                assert isinstance(v, memoryview) and v.readonly and type(v.obj).__name__ == "memmap"
            assert b"".join(span.views) == b"".join(raw[e.pos:e.pos + e.size] for e in entries)
        # the span is found by a binary search over the index: the same entries as taking them one
        # by one while they keep within both limits (the first always)
        for first, max_count, max_bytes in ((rng.randrange(80), rng.choice([1, 2, 5, 30, 100]),
                                             rng.choice([1, 5_000, 20_000, 70_000, 1 << 20])) for _ in range(200)):
            n, total = 1, walk.entries[first].size
            while (n < max_count and first + n < 80
                   and total + walk.entries[first + n].size <= max_bytes):
                total += walk.entries[first + n].size
                n += 1
            span = store.entry_span(first, max_count, max_bytes)
            assert (span.count, span.nbytes) == (n, total), (first, max_count, max_bytes)
            assert b"".join(span.views) == b"".join(raw[e.pos:e.pos + e.size] for e in walk.entries[first:first + n])
    finally:
        store.close()


def test_quorum_commits_an_earlier_terms_entry_only_with_one_of_its_own(tmp_path):
    """Raft's rule (DLedger 0.3.1.2 would commit entry 4 at once)."""
    async def main():
        (c,) = group_configs(3)[:1]
        store = DLedgerEntryStore(str(tmp_path), **STORE)
        committed = CommittedIndex(store.committed_index)
        q = QuorumAckChecker(c, store, committed)
        try:
            for k in range(5):
                store.append(1, b"term one %d" % k)
            q.begin_term(2)
            assert q.water_marks == {"n0": 4, "n1": -1, "n2": -1}
            q.update_water_mark(2, "n1", 4)  # a majority holds entry 4, of term 1
            assert q.quorum_index() == 4 and store.committed_index == -1 and committed.value == -1
            q.update_water_mark(1, "n2", 4)  # an answer of another term says nothing about this one
            assert q.water_marks["n2"] == -1
            index, pos = store.append(2, b"term two")
            fut = q.wait_ack(index, pos)
            waiter = asyncio.ensure_future(committed.wait_for(5))
            await asyncio.sleep(0)  # one loop turn: the waiter registers
            assert not fut.done() and not waiter.done()
            q.update_water_mark(2, "n2", 5)
            assert store.committed_index == 5 and await fut == (5, pos) and await waiter == 5
            q.update_water_mark(2, "n2", 3)  # water marks and the committed index never go back
            assert q.water_marks["n2"] == 5 and store.committed_index == 5
        finally:
            store.close()
    run(main)


@pytest.mark.parametrize("durable,slow_leader", [(True, True), (True, False), (False, True)])
def test_a_durable_group_answers_only_what_a_majority_wrote_back(tmp_path, durable, slow_leader):
    """flushDiskType=SYNC_FLUSH (durable): an append is answered once a majority, the leader's own
    disk counted as one, has written it back. One follower is stopped; of the two left, one
    writes back in 0.8 s and the other in 0.3 s, so the answer needs both disks and takes 0.8 s,
    whichever is slow: the leader (counting its memory would answer at 0.3 s) or the follower
    (answering from memory would). DLedger's way (not durable) answers before either write-back."""
    async def main():
        g = await Group(tmp_path, 3, durable=durable).start_all()
        try:
            lead = await g.leader()
            await g.append(b"first")  # connections made, logs compared
            await g.stop(next(i for i, m in enumerate(g.members) if m is not None and m is not lead))
            delays = {srv.self_id: 0.8 if (srv is lead) == slow_leader else 0.3 for srv in g.live()}
            for srv in g.live():
                def slow(plan, write_back=srv.store.write_back, delay=delays[srv.self_id]):
                    time.sleep(delay)
                    write_back(plan)
                srv.store.write_back = slow
            t0 = time.monotonic()
            index, _ = await lead.append(b"x" * 100)
            took = time.monotonic() - t0
            on_disk = sorted(srv.self_id for srv in g.live() if srv.store.flushed_index >= index)
            if durable:
                assert on_disk == sorted(delays) and took >= 0.8, (on_disk, took)
            else:
                assert not on_disk and took < 0.3, (on_disk, took)
        finally:
            await g.close()
    run(main)


def test_pending_appends_are_bounded_and_fail_when_the_leader_is_deposed(tmp_path):
    async def main():
        g = await Group(tmp_path, 3, heartBeatTimeIntervalMs=250, maxWaitAckTimeMs=5000,
                        maxPendingRequestsNum=3).start_all()
        try:
            lead = await g.leader()
            for m in g.live():
                if m is not lead:
                    await g.stop(g.index_of(m))
            waiting = [asyncio.ensure_future(lead.append(b"never committed %d" % k)) for k in range(3)]
            await asyncio.sleep(0)  # one loop turn (a yield, not a timed wait): each append runs to its quorum wait
            assert not any(w.done() for w in waiting) and lead.store.ledger_end_index == 2
            with pytest.raises(LeaderPendingFull) as e:
                await lead.append(b"one too many")
            assert e.value.code is ResponseCode.LEADER_PENDING_FULL and int(e.value.code) == 503
            assert lead.store.ledger_end_index == 2  # refused before it was appended
            t0 = time.monotonic()
            lead.elector.change_role_to_candidate(lead.state.term)  # what a higher term in an answer does
            for w in waiting:
                with pytest.raises(TermChanged) as e:
                    await asyncio.wait_for(w, 1)
                assert e.value.code is ResponseCode.TERM_CHANGED
            assert time.monotonic() - t0 < 0.1 and lead.committed_index == -1
        finally:
            await g.close()
    run(main)


# -- a healthy group ---------------------------------------------------------------------------------

@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_appends_return_at_majority_and_every_log_ends_equal(tmp_path, loop):
    async def main():
        g = await Group(tmp_path, 3).start_all()
        rng = random.Random(7)
        acked = {}
        try:
            await g.leader()
            for body in bodies(rng, 30, "one"):  # one at a time
                index, pos = await g.append(body)
                acked[index] = (pos, body)
            for _ in range(3):  # and 30 at once: pipelined pushes, several entries each
                batch = bodies(rng, 30, "many")
                for (index, pos), body in zip(await asyncio.gather(*(g.append(b) for b in batch)), batch):
                    acked[index] = (pos, body)
            end, pos = await g.append(b"last")  # the end of the log, committed on the leader
            acked[end] = (pos, b"last")
            lead = await g.leader()
            assert end >= 120 and lead.store.ledger_end_index == end
            await g.all_committed(end)
            entries = assert_logs_equal(g, [0, 1, 2])
            assert len(entries) == end + 1
            assert_acknowledged(entries, acked)
            assert read_log(g, 0)[1], "the test meant entries to cross data files"
            await g.close()
            for i in range(3):  # the committed index is persisted on stop
                ckpt = twin.read_checkpoint(os.path.join(g.roots[i], f"dledger-n{i}", "checkpoint"))
                assert int(ckpt["committedIndex"]) == end and int(ckpt["endIndex"]) == end
        finally:
            await g.close()
    run(main, loop)


def test_not_leader_and_no_quorum(tmp_path):
    # heartbeats of 250 ms: a leader without quorum steps down only after ~750 ms, well after the
    # 150 ms its append waits
    async def main():
        g = await Group(tmp_path, 3, heartBeatTimeIntervalMs=250, maxWaitAckTimeMs=150).start_all()
        try:
            lead = await g.leader()
            follower = next(m for m in g.live() if m is not lead)
            with pytest.raises(NotLeader) as e:
                await follower.append(b"to a follower")
            assert e.value.code is ResponseCode.NOT_LEADER and e.value.leader_id == lead.self_id
            assert follower.store.ledger_end_index == -1  # nothing was appended there
            index, _ = await lead.append(b"committed")
            committed = lead.committed_index
            assert committed == index
            for m in g.live():
                if m is not lead:
                    await g.stop(g.index_of(m))
            t0 = time.monotonic()
            with pytest.raises(WaitQuorumAckTimeout) as e:
                await lead.append(b"no majority")
            waited = time.monotonic() - t0
            assert e.value.code is ResponseCode.WAIT_QUORUM_ACK_TIMEOUT and int(e.value.code) == 502
            assert 0.14 <= waited < 0.6, waited
            assert lead.committed_index == committed and lead.store.committed_index == committed
            assert lead.store.ledger_end_index == index + 1  # in its log, never acknowledged
            await g.until(lambda: not lead.is_leader, 5, "the leader without a quorum to step down")
            with pytest.raises(NotLeader):
                await lead.append(b"after stepping down")
            assert lead.committed_index == committed
        finally:
            await g.close()
    run(main)


def test_a_new_leader_holds_every_acknowledged_entry(tmp_path):
    async def main():
        g = await Group(tmp_path, 3).start_all()
        rng = random.Random(11)
        acked = {}
        try:
            for body in bodies(rng, 40, "before"):
                index, pos = await g.append(body)
                acked[index] = (pos, body)
            old = await g.leader()
            old_i, old_term = g.index_of(old), old.state.term
            await g.stop(old_i)  # the leader dies
            new = await g.leader()
            assert new.state.term > old_term
            for index, (pos, body) in acked.items():
                e = new.store.get(index)
                assert (e.pos, bytes(e.body)) == (pos, body)
            for body in bodies(rng, 40, "after"):  # appends go on with two of three
                index, pos = await g.append(body)
                acked[index] = (pos, body)
            await g.start(old_i)  # the old leader comes back and catches up
            await g.leader()
            index, pos = await g.append(b"last")  # an entry of the current term commits all before it
            acked[index] = (pos, b"last")
            await g.all_committed(index)
            entries = assert_logs_equal(g, [0, 1, 2])
            assert_acknowledged(entries, acked)
        finally:
            await g.close()
    run(main)


def test_a_diverged_old_leader_loses_its_uncommitted_tail(tmp_path):
    async def main():
        g = await Group(tmp_path, 3, maxWaitAckTimeMs=300).start_all()
        rng = random.Random(13)
        acked = {}
        try:
            for body in bodies(rng, 10, "agreed"):
                index, pos = await g.append(body)
                acked[index] = (pos, body)
            lead = await g.leader()
            li = g.index_of(lead)
            others = [i for i in range(3) if i != li]
            for i in others:  # cut off from the others, it still takes appends...
                await g.stop(i)
            base = lead.store.ledger_end_index
            lost = [b"lost-%d" % k for k in range(5)]
            results = await asyncio.gather(*(lead.append(b) for b in lost), return_exceptions=True)
            for r in results:  # ...that it never acknowledges
                assert isinstance(r, (WaitQuorumAckTimeout, TermChanged, NotLeader)), r
            assert lead.store.ledger_end_index == base + 5 and lead.store.committed_index <= base
            await g.stop(li)
            before = read_log(g, li)[0]
            assert [e[5] for e in before[base + 1:]] == lost  # the stale tail, on disk
            for i in others:  # the others elect one of them and go on
                await g.start(i)
            new = await g.leader()
            assert new.state.term > before[-1][1]
            for body in bodies(rng, 8, "new"):
                index, pos = await g.append(body)
                acked[index] = (pos, body)
            await g.start(li)  # the old leader rejoins: it cannot win with an older log
            await g.leader()
            index, pos = await g.append(b"last")
            acked[index] = (pos, b"last")
            await g.all_committed(index)
            entries = assert_logs_equal(g, [0, 1, 2])  # nothing past the end either: zeroed
            assert not any(e[5].startswith(b"lost-") for e in entries), "the uncommitted tail survived"
            assert_acknowledged(entries, acked)
            assert g.members[li].store.ledger_end_index == index
        finally:
            await g.close()
    run(main)


def test_five_members_commit_with_three_and_not_with_two(tmp_path):
    async def main():
        g = await Group(tmp_path, 5, heartBeatTimeIntervalMs=250, maxWaitAckTimeMs=200).start_all()
        try:
            lead = await g.leader()
            followers = [g.index_of(m) for m in g.live() if m is not lead]
            for i in followers[:2]:
                await g.stop(i)
            acked = [await lead.append(b"three of five %d" % k) for k in range(5)]
            assert lead.committed_index == acked[-1][0]
            # the followers learn it with the next push (a COMMIT COMMIT_DELAY_MS after the last)
            await g.until(lambda: all(m.committed_index == acked[-1][0] for m in g.live()), 5,
                          "the followers to learn the committed index")
            await g.stop(followers[2])  # two of five left
            committed = {m.self_id: m.committed_index for m in g.live()}
            with pytest.raises(WaitQuorumAckTimeout):
                await lead.append(b"two of five")
            assert {m.self_id: m.committed_index for m in g.live()} == committed
            await g.until(lambda: not lead.is_leader, 5, "the leader of a minority to step down")
            assert {m.self_id: m.committed_index for m in g.live()} == committed
        finally:
            await g.close()
    run(main)


# -- bad input ---------------------------------------------------------------------------------------

def lone_member(root, port: int) -> DLedgerServer:
    """Member n0 on `port`, its peers unreachable: a test drives its state and pushes to it by hand."""
    c = DLedgerConfig(enableDLegerCommitLog=True, dLegerGroup=GROUP, dLegerSelfId="n0",
                      dLegerPeers=f"n0-127.0.0.1:{port};n1-127.0.0.1:1;n2-127.0.0.1:2", **FAST)
    return DLedgerServer(c, root, store_options=STORE)


async def following_n1(tmp_path, entries: int, entry_term: int):
    """The lone member holding `entries` entries of `entry_term`, a follower of n1 in term 3 (its
    elector not started: only its server answers): (the member, a connection to it, a function
    giving its data files' bytes)."""
    port = free_port()
    srv = lone_member(tmp_path, port)
    st, store = srv.state, srv.store
    data_dir = os.path.join(tmp_path, "dledger-n0", "data")

    def files() -> bytes:
        return b"".join(open(os.path.join(data_dir, n), "rb").read() for n in sorted(os.listdir(data_dir)))

    for k in range(entries):
        store.append(entry_term, b"entry %d" % k)
    srv.ledger_changed()
    st.change_to_candidate(3)
    st.next_term()
    srv.elector.change_role_to_follower(3, "n1")
    await srv.remoting.start()
    return srv, await connect("127.0.0.1", port), files


def test_bad_pushes_are_refused_and_change_nothing(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="raft")

    async def main():
        srv, conn, files = await following_n1(tmp_path, 5, 2)
        st, store = srv.state, srv.store
        data_dir = os.path.join(tmp_path, "dledger-n0", "data")

        def header(index: int) -> bytes:
            return bytes(store.header_view(index))

        async def push(ext: dict, body=b"") -> PushEntryResponse:
            base = dict(group=GROUP, leader_id="n1", term=3, commit_index=-1, remote_id="n0")
            base.update(ext)
            req = PushEntryRequest(**base)
            reply = await conn.request(req.command(body), 5)
            return PushEntryResponse.from_ext(reply.ext)

        async def raw(ext: dict, body=b"") -> PushEntryResponse:
            cmd = PushEntryRequest(group=GROUP, leader_id="n1", term=9, type=PushType.COMMIT,
                                   commit_index=-1).command(body)
            cmd.ext = ext
            return PushEntryResponse.from_ext((await conn.request(cmd, 5)).ext)

        def unchanged() -> None:
            assert (st.term, st.role.value, st.leader_id, st.known_max_term) == (3, "FOLLOWER", "n1", 3)
            assert (store.ledger_end_index, store.committed_index) == (4, -1)
            assert files() == snapshot

        snapshot = files()
        try:
            w = store.write_pos
            good = twin.encode_entry(5, 3, w, b"next", body_crc=0)
            # who sends, and in which term
            r = await push(dict(type=PushType.TRUNCATE, term=2, index=0), header(0))
            assert r.response_code is ResponseCode.EXPIRED_TERM and r.term == 3
            r = await push(dict(type=PushType.COMPARE, leader_id="n2", index=4), header(4))
            assert r.response_code is ResponseCode.INCONSISTENT_LEADER
            r = await push(dict(type=PushType.TRUNCATE, leader_id="n9", term=7, index=0), header(0))
            assert r.response_code is ResponseCode.UNKNOWN_MEMBER
            r = await push(dict(type=PushType.TRUNCATE, leader_id="n0", term=7, index=0), header(0))
            assert r.response_code is ResponseCode.UNEXPECTED_MEMBER
            r = await push(dict(type=PushType.TRUNCATE, group="other", term=7, index=0), header(0))
            assert r.response_code is ResponseCode.UNKNOWN_GROUP
            r = await push(dict(type=PushType.TRUNCATE, remote_id="n2", term=7, index=0), header(0))
            assert r.response_code is ResponseCode.UNKNOWN_MEMBER
            unchanged()
            # malformed, from the leader and in a higher term: the term must not move
            for ext in ({"group": GROUP, "leaderId": "n1", "type": "TRUNCATE", "index": "0"},  # no term
                        {"group": GROUP, "leaderId": "n1", "term": "abc", "type": "TRUNCATE", "index": "0"},
                        {"group": GROUP, "leaderId": "n1", "term": "9", "type": "BOGUS", "index": "0"},
                        {"group": GROUP, "leaderId": "n1", "term": "9", "type": "APPEND", "index": "5",
                         "count": "0", "pos": str(w)}):
                r = await raw(ext, header(0))
                assert r.response_code is ResponseCode.UNEXPECTED_ARGUMENT, ext
            bad_crc = bytearray(twin.encode_entry(5, 3, w, b"next", body_crc=12345))
            bad_magic = bytearray(good)
            bad_magic[3] = 7
            for ext, body in (
                    (dict(type=PushType.APPEND, index=5, pos=w, count=1), os.urandom(100)),
                    (dict(type=PushType.APPEND, index=5, pos=w, count=1), bytes(bad_magic)),
                    (dict(type=PushType.APPEND, index=5, pos=w, count=1), bytes(bad_crc)),
                    (dict(type=PushType.APPEND, index=5, pos=w, count=1), good[:-1]),       # cut short
                    (dict(type=PushType.APPEND, index=5, pos=w, count=2), good),            # count
                    (dict(type=PushType.APPEND, index=6, pos=w, count=1), good),            # index
                    (dict(type=PushType.APPEND, index=5, pos=w + 8, count=1), good),        # pos
                    (dict(type=PushType.APPEND, index=5, pos=w, count=1, term=2), good),    # entry above term
                    (dict(type=PushType.TRUNCATE, index=0), header(0)[:47]),
                    (dict(type=PushType.TRUNCATE, index=1), header(0)),                      # another entry
                    (dict(type=PushType.TRUNCATE, index=0), b""),
                    (dict(type=PushType.COMMIT), header(0))):
                r = await push({"term": 9, **ext}, body)
                assert r.response_code is ResponseCode.UNEXPECTED_ARGUMENT, (ext, body[:60])
            unchanged()
            assert any("malformed PUSH from 127.0.0.1:" in rec.getMessage() for rec in caplog.records)
            # well-formed, but not this log's entry: refused, nothing truncated
            other = bytearray(header(2))
            other[23] = 1  # term 2 -> 1 (the big-endian int64 at bytes 16..23)
            r = await push(dict(type=PushType.TRUNCATE, index=2), bytes(other))
            assert r.response_code is ResponseCode.INCONSISTENT_STATE and r.local_term == 2
            r = await push(dict(type=PushType.COMPARE, index=7), header(4))
            assert r.response_code is ResponseCode.UNEXPECTED_ARGUMENT  # the header is entry 4's
            unchanged()
            # and the leader's good pushes are taken
            r = await push(dict(type=PushType.COMPARE, index=4), header(4))
            assert r.response_code is ResponseCode.SUCCESS and r.end_index == 4
            r = await push(dict(type=PushType.APPEND, index=5, pos=w, count=1, prev_term=1), good)
            assert r.response_code is ResponseCode.INCONSISTENT_STATE  # prevTerm is not entry 4's
            r = await push(dict(type=PushType.APPEND, index=5, pos=w, count=1, prev_term=2), good)
            assert r.response_code is ResponseCode.SUCCESS and store.ledger_end_index == 5
            assert st.ledger_end_index == 5 and st.ledger_end_term == 3  # what votes are compared on
            # a push sent again (the leader compared after a lost answer): entries held are checked, not
            # written again, and the ones after them appended; a held entry that differs is refused
            held = files()
            r = await push(dict(type=PushType.APPEND, index=5, pos=w, count=1, prev_term=2), good)
            assert r.response_code is ResponseCode.SUCCESS and r.index == 5 and files() == held
            other5 = twin.encode_entry(5, 3, w, b"another", body_crc=0)  # headers differ (size)
            r = await push(dict(type=PushType.APPEND, index=5, pos=w, count=1, prev_term=2), other5)
            assert r.response_code is ResponseCode.INCONSISTENT_STATE and files() == held
            more = twin.encode_entry(6, 3, w + len(good), b"more", body_crc=0)
            r = await push(dict(type=PushType.APPEND, index=5, pos=w, count=2, prev_term=2), good + more)
            assert r.response_code is ResponseCode.SUCCESS and r.index == 6 and store.ledger_end_index == 6
            assert bytes(store.header_view(6)) == more[:48] and bytes(store.get(6).body) == b"more"
            r = await push(dict(type=PushType.TRUNCATE, index=2), header(2))
            assert r.response_code is ResponseCode.SUCCESS and r.end_index == 2
            entries, _, end = read_log_at(data_dir)
            assert [e.index for e in entries] == [0, 1, 2]
            assert twin.first_nonzero_after(data_dir, DATA, end) is None
            r = await push(dict(type=PushType.COMMIT, commit_index=2))
            assert r.response_code is ResponseCode.SUCCESS and srv.committed_index == 2
        finally:
            conn.close()
            await srv.stop()
    run(main)


def test_a_followed_leaders_appends_take_the_short_path_and_it_refuses_as_the_full_one(tmp_path):
    """Once a push from n1 in term 3 passed every check (EntryHandler.leader), its APPENDs take
    _fast_append: a malformed or misaddressed one from that leader in that term is still refused
    as the full path refuses it (it falls back there) and changes nothing; a good one is taken,
    counts as the leader's heartbeat, and is answered with the full path's fields."""
    async def main():
        srv, conn, files = await following_n1(tmp_path, 3, 3)
        st, store = srv.state, srv.store

        async def push(ext: dict, body=b"", patch: dict | None = None) -> PushEntryResponse:
            base = dict(group=GROUP, leader_id="n1", term=3, commit_index=-1, remote_id="n0")
            base.update(ext)
            cmd = PushEntryRequest(**base).command(body)
            if patch:
                cmd.ext.update(patch)
            return PushEntryResponse.from_ext((await conn.request(cmd, 5)).ext)

        try:
            r = await push(dict(type=PushType.COMPARE, index=2), bytes(store.header_view(2)))
            assert r.response_code is ResponseCode.SUCCESS and srv.handler.leader == (3, "n1")
            w = store.write_pos
            good = twin.encode_entry(3, 3, w, b"next", body_crc=0)
            append = dict(type=PushType.APPEND, index=3, pos=w, count=1, prev_term=3)
            held = files()
            bad_crc = twin.encode_entry(3, 3, w, b"next", body_crc=12345)
            for patch, body, code in (
                    (None, bad_crc, ResponseCode.UNEXPECTED_ARGUMENT),
                    (None, good[:-1], ResponseCode.UNEXPECTED_ARGUMENT),
                    ({"count": "2"}, good, ResponseCode.UNEXPECTED_ARGUMENT),
                    ({"count": "0"}, good, ResponseCode.UNEXPECTED_ARGUMENT),
                    ({"pos": str(w + 8)}, good, ResponseCode.UNEXPECTED_ARGUMENT),
                    ({"index": "x"}, good, ResponseCode.UNEXPECTED_ARGUMENT),
                    ({"index": True}, good, ResponseCode.UNEXPECTED_ARGUMENT),
                    ({"term": str(1 << 63)}, good, ResponseCode.UNEXPECTED_ARGUMENT),
                    ({"group": "other"}, good, ResponseCode.UNKNOWN_GROUP),
                    ({"remoteId": "n2"}, good, ResponseCode.UNKNOWN_MEMBER),
                    ({"leaderId": "n2"}, good, ResponseCode.INCONSISTENT_LEADER),
                    ({"term": "2"}, twin.encode_entry(3, 2, w, b"next", body_crc=0), ResponseCode.EXPIRED_TERM),
                    ({"prevTerm": "2"}, good, ResponseCode.INCONSISTENT_STATE)):
                r = await push(append, body, patch)
                assert r.response_code is code, (patch, body[:60])
                assert files() == held and store.ledger_end_index == 2 and (st.term, st.leader_id) == (3, "n1")
            srv.elector.last_leader_hb = 0.0
            r = await push(append, good)
            assert (r.response_code, r.index, r.end_index, r.begin_index, r.term, r.leader_id, r.local_term) == \
                (ResponseCode.SUCCESS, 3, 3, 0, 3, "n1", -1)
            assert store.ledger_end_index == 3 and bytes(store.header_view(3)) == good[:48]
            assert srv.elector.last_leader_hb > 0  # the push was the leader's heartbeat
            more = twin.encode_entry(4, 3, w + len(good), b"more", body_crc=0)
            r = await push(dict(type=PushType.APPEND, index=4, pos=w + len(good), count=1, prev_term=3,
                                commit_index=4), more)
            assert r.response_code is ResponseCode.SUCCESS and srv.committed_index == 4
        finally:
            conn.close()
            await srv.stop()
    run(main)


def read_log_at(data_dir: str):
    walk = twin.walk_data(data_dir, DATA)
    return walk.entries, walk.blanks, walk.end


def test_a_follower_back_with_an_empty_log_between_two_pushes_is_rebuilt_while_the_group_is_idle(tmp_path):
    """A follower stops, loses its log (wiped; a power cut can do the same to its tail) and is back
    before the leader's next push; nothing is appended meanwhile. Its answer to the next COMMIT
    says its log ends below what it had acknowledged: the leader compares again and rebuilds it.
    (Before, the SUCCESS of a COMMIT kept the leader believing it matched until the next append,
    and that append, finding the log empty, was taken as its first entry: a hole in its log.)"""
    async def main():
        g = await Group(tmp_path, 3).start_all()
        try:
            lead = await g.leader()
            for i in range(20):
                end, _ = await g.append(f"e{i}".encode())
            await g.all_committed(end)
            f = next(i for i in range(3) if g.members[i] is not lead)
            await g.stop(f)
            shutil.rmtree(os.path.join(g.roots[f], f"dledger-n{f}"))
            back = await g.start(f)  # at once: well within the leader's next COMMIT (a second)
            t0 = time.monotonic()
            await async_wait_until(lambda: back.store.ledger_end_index == end and back.store.committed_index == end,
                                   15, "the wiped follower to be rebuilt with no new append")
            # found at the leader's next COMMIT (a second), compared and pushed again at once
            assert time.monotonic() - t0 < 5
            assert lead.is_leader and back.store.ledger_begin_index == 0
            entries = assert_logs_equal(g, [0, 1, 2])
            assert len(entries) == end + 1
        finally:
            await g.close()
    run(main)


def test_an_empty_log_takes_only_the_leaders_first_entry_as_its_own_first(tmp_path):
    """An empty log takes a first entry above 0 only when the leader sends it as its log's first
    (prevTerm -1: its files before it expired); a push continuing from an entry the leader thinks
    this member holds (prevTerm >= 0) is refused, and nothing is written: taking it would leave a
    hole before it."""
    async def main():
        port = free_port()
        srv = lone_member(tmp_path, port)
        st, store = srv.state, srv.store
        st.change_to_candidate(3)
        st.next_term()
        srv.elector.change_role_to_follower(3, "n1")
        await srv.remoting.start()
        conn = await connect("127.0.0.1", port)
        size = STORE["data_file_size"]

        async def append(index: int, prev_term: int) -> PushEntryResponse:
            body = twin.encode_entry(index, 3, 2 * size, b"x", body_crc=0)
            req = PushEntryRequest(group=GROUP, leader_id="n1", term=3, commit_index=-1, remote_id="n0",
                                   type=PushType.APPEND, index=index, pos=2 * size, count=1, prev_term=prev_term)
            return PushEntryResponse.from_ext((await conn.request(req.command(body), 5)).ext)
        try:
            r = await append(40, prev_term=3)
            assert r.response_code is ResponseCode.INCONSISTENT_STATE
            assert store.ledger_end_index == -1
            r = await append(40, prev_term=-1)
            assert r.response_code is ResponseCode.SUCCESS
            assert (store.ledger_begin_index, store.ledger_end_index, store.position(40)[0]) == (40, 40, 2 * size)
        finally:
            conn.close()
            await srv.remoting.close()
            store.close()
    run(main)
