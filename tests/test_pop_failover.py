"""Pop consumption wherever the broker takes writes (issue 20): a DLedger leader and a controller-mode
master serve POP / ACK / CHANGE_INVISIBLETIME, their checkpoints and acks go to the revive log
through the replicated commit log, and after the serving broker is killed -9 the new one
revives what was popped and not acked, and nothing acked comes back. Followers and slaves refuse
pop with SLAVE_NOT_AVAILABLE (RocketMQ's code for a request that must write, sent to a slave) and
a remark naming where writes go, at once: a client never hangs on them.

All real processes (name server, controllers, brokers) on loopback; no sleeps (a message that
must not come back is shown not to by a long-polled pop the revive would answer)."""
from __future__ import annotations

import asyncio
import re
import threading

import msgspec
import pytest

from broker.client import pop as P
from broker.client.errors import ResponseError
from broker.remoting import codes
from tests.conftest import wait_for
from tests.helpers.controller_mode import ControllerModeGroup
from tests.helpers.dledger_cluster import DLedgerGroup
from tests.helpers.ha_cluster import Broker, NameServer, call, send_all
from tests.helpers.pop_client import bodies, receive_until, run_with_client

TOPIC = "PopHA"
GROUP = "PopHAG"
N = 8
# long enough that the killed broker never revives them itself (its log would say so; checked),
# short enough that the new one does within the test
INVISIBLE_MS = 6000
# a dead leader noticed after 8 missed heartbeats of 200 ms, not 3: the other helpers' tests share
# the 2 cores, and a live leader's heartbeats late by 600 ms would depose it mid-test
STEADY_RAFT = "maxHeartBeatLeak=8\n"
# the window test: followers copy offsets every 200 ms (flushConsumerOffsetInterval), and a stalled
# leader is noticed only after 25 missed heartbeats (5 s), so the window stays open until the kill
WINDOW_RAFT = "maxHeartBeatLeak=25\nflushConsumerOffsetInterval=200\n"
REVIVE_MS = 2000  # the revive window test: due soon after the Raft links are stalled
# controller mode answers a put once `inSyncReplicas` members of the SyncStateSet hold it, the
# master counting itself: with RocketMQ's default of 1 it answers without waiting for the slave
# (CommitLog.handleHA), so an ack so answered can die with a master killed -9 and its message be
# revived by the new one (at least once). With allAckInSyncStateSet every record waits for the slave.
ALL_ACK = "allAckInSyncStateSet=true\n"


def _addr(b: Broker) -> str:
    return f"127.0.0.1:{b.port}"


def _revived_by(*bs: Broker) -> list[str]:
    return [m for b in bs for m in re.findall(r"pop revive: \S+ of " + GROUP, b.stderr())]


def _refuses_pop(b: Broker, handle: str | None = None) -> None:
    """`b` (not the master) answers POP at once, long poll or not, and an ack or an invisible-time
    change of a handle the master gave, with SLAVE_NOT_AVAILABLE and a remark saying why."""
    async def go(client, addr):
        c = P.SimpleConsumer(client, addr, GROUP, TOPIC)
        calls = [c.receive(INVISIBLE_MS, poll_ms=20_000)]
        if handle is not None:
            calls += [c.ack(handle), c.change_invisible_time(handle, 1000)]
        for call in calls:
            with pytest.raises(ResponseError) as e:
                await asyncio.wait_for(call, 10)  # (a hang guard, well under the 20 s long poll)
            assert e.value.code == codes.SLAVE_NOT_AVAILABLE, e.value
            assert "served by the master only" in e.value.remark, e.value.remark
    run_with_client(go, _addr(b))


class _OnMaster:
    """Pop calls made on the current master: a call refused because the master changed under it
    (a re-election on a loaded machine: SLAVE_NOT_AVAILABLE, SYSTEM_BUSY while the next one
    replays, or a record no majority kept) is made again on the master `find` names next. A pop
    answered and an ack made stay so across the change: they were answered once replicated."""

    RETRY = (codes.SLAVE_NOT_AVAILABLE, codes.SYSTEM_BUSY)

    def __init__(self, client, find):
        self.client, self.find = client, find

    async def master(self) -> Broker:
        return await asyncio.to_thread(self.find)

    async def call(self, name: str, *args, **kw):
        for _ in range(20):
            c = P.SimpleConsumer(self.client, _addr(await self.master()), GROUP, TOPIC)
            try:
                return await getattr(c, name)(*args, **kw)
            except ResponseError as e:
                if e.code not in self.RETRY and "did not keep this request's record" not in (e.remark or ""):
                    raise
        raise AssertionError(f"{name}: the master kept changing")

    async def send(self, body: bytes) -> None:
        for _ in range(20):
            rs = await asyncio.to_thread(send_all, (await self.master()).port, TOPIC, [body])
            if rs[0].code == codes.SUCCESS:
                return
        raise AssertionError(f"no master took {body!r}: {rs[0].remark}")

    async def receive_until(self, n: int, invisible_ms: int) -> list:
        got: list = []
        for _ in range(6):  # 10 s long polls: a revive answers them
            if len(got) == n:
                break
            got += await self.call("receive", invisible_ms, max_nums=n - len(got), poll_ms=10_000)
        assert len(got) == n, f"only {len(got)} of {n} messages came: {bodies(got)}"
        return got


def _pop_some_ack_some(find) -> tuple[list[str], list[str], str]:
    """Send N messages, pop them all, ack half, move one's invisible time, leave the rest out:
    (acked bodies, bodies left unacked, a handle of an acked message)."""
    out: dict = {}

    async def go(client, addr):
        m = _OnMaster(client, find)
        for i in range(N):
            await m.send(f"m{i}".encode())
        msgs = await m.receive_until(N, INVISIBLE_MS)
        assert sorted(bodies(msgs)) == sorted(f"m{i}" for i in range(N))
        assert await m.call("receive", INVISIBLE_MS, poll_ms=200) == []  # all out, invisible
        for msg in msgs[:N // 2]:
            await m.call("ack", msg)  # answered once the ack record is replicated
        await m.call("change_invisible_time", msgs[N // 2], INVISIBLE_MS + 2000)  # its new checkpoint too
        out.update(acked=bodies(msgs[:N // 2]), unacked=bodies(msgs[N // 2:]), handle=P.handle_of(msgs[0]))
    run_with_client(go, "")
    return out["acked"], out["unacked"], out["handle"]


def _new_master_revives(find, unacked: list[str]) -> None:
    """The new master redelivers exactly the unacked messages (once each, attempt raised), its pop
    offsets are past what the old master handed out, and nothing acked comes back."""
    async def go(client, addr):
        m = _OnMaster(client, find)
        back = await m.receive_until(len(unacked), 60_000)
        assert sorted(bodies(back)) == sorted(unacked)
        assert all(msg.reconsume_times == 1 for msg in back), [msg.reconsume_times for msg in back]
        for msg in back:
            await m.call("ack", msg)
        await m.send(b"fresh")
        [fresh] = await m.receive_until(1, 60_000)
        assert bodies([fresh]) == ["fresh"]  # m0..m7 are not popped again from their queues
        await m.call("ack", fresh)
        # every old checkpoint's invisible time has passed (the revived came after it): a long
        # poll the revive would answer gets nothing
        assert await m.call("receive", 60_000, poll_ms=3000) == []
    run_with_client(go, "")


def test_dledger_leader_serves_pop_and_a_new_leader_revives_after_kill9(tmp_path):
    g = DLedgerGroup(tmp_path, extra=STEADY_RAFT).start()
    try:
        leader = g.leader()
        acked, unacked, handle = _pop_some_ack_some(g.leader)
        assert g.wait_master(TOPIC) is leader
        for b in g.brokers.values():
            if b is not leader:
                _refuses_pop(b, handle)
        leader.kill9()
        survivors = [b for b in g.brokers.values() if b is not leader]
        _new_master_revives(lambda: g.leader(among=survivors), unacked)
        assert _revived_by(leader) == [], "the old leader revived before it was killed: the test proves nothing"
        assert len(_revived_by(*survivors)) == len(unacked)
        # the old leader rejoins as a follower: it refuses pop, the new leader keeps serving it
        leader.start()
        wait_for(lambda: leader.info()["brokerRole"] == "SLAVE", 60, "the old leader to follow")
        _refuses_pop(leader)
    finally:
        g.stop()


def test_partitioned_dledger_leader_stops_reviving_and_the_majority_leader_revives(tmp_path):
    """The leader loses its quorum while alive (Raft links cut, clients still reach it): it steps
    down, refuses pop from then on, and never revives what it handed out (its revive stopped with
    its role, its pop state dropped); the majority's leader revives it instead."""
    g = DLedgerGroup(tmp_path, extra=STEADY_RAFT, proxied=True).start()
    try:
        old = g.leader()
        others = [b for b in g.brokers.values() if b is not old]
        acked, unacked, handle = _pop_some_ack_some(lambda: old)
        g.isolate(old, "cut")
        g.leader(among=others, timeout=30)
        wait_for(lambda: old.info()["brokerRole"] == "SLAVE", 30, "the old leader to step down")
        _refuses_pop(old, handle)
        _new_master_revives(lambda: g.leader(among=others), unacked)
        assert _revived_by(old) == [] and len(_revived_by(*others)) == len(unacked)
        assert "pop: not the master any more" in old.stderr()
        g.heal()
        g.wait_follows(old, g.leader(among=others))
        _refuses_pop(old)
    finally:
        g.stop()


def test_controller_mode_master_serves_pop_and_a_new_master_revives_after_kill9(tmp_path):
    g = ControllerModeGroup(tmp_path, n=2, extra=ALL_ACK).start()
    try:
        master = g.master()
        g.wait_in_sync(master, 2)  # its slave in sync, ALL_ACK: every record waits for the slave's copy
        slave = next(b for b in g.brokers.values() if b is not master)
        acked, unacked, handle = _pop_some_ack_some(lambda: master)
        _refuses_pop(slave, handle)
        master.kill9()
        assert g.master(exclude=master) is slave
        _new_master_revives(lambda: g.master(exclude=master), unacked)
        assert _revived_by(master) == [], "the old master revived before it was killed: the test proves nothing"
        assert len(_revived_by(slave)) == len(unacked)
    finally:
        g.stop()


def test_controller_mode_ack_is_answered_once_the_slave_holds_it(tmp_path):
    """The window between an ack's record and its copy on the slave, held open: the master's HA
    link is stalled (its slave reaches it through a proxy) while acks are made. None is answered
    while the slave lacks its record; once the link flows again they are, and after the master is
    killed -9 the slave, elected, revives exactly the unacked messages. Under RocketMQ's default
    inSyncReplicas=1 (no ALL_ACK) the acks are answered at once, stalled or not, and a master
    killed inside the window takes them along: the new master revives the acked messages too."""
    g = ControllerModeGroup(tmp_path, n=2, extra=ALL_ACK, proxied=True).start()
    try:
        master = g.master()
        g.wait_in_sync(master, 2)
        slave = next(b for b in g.brokers.values() if b is not master)
        ha_link = g.proxies[master.name][-1]  # the one its slave replicates through
        out: dict = {}

        async def go(client, addr):
            m = _OnMaster(client, lambda: master)
            for i in range(N):
                await m.send(f"w{i}".encode())
            msgs = await m.receive_until(N, INVISIBLE_MS)
            ha_link.stall()
            acks = asyncio.ensure_future(asyncio.gather(*(m.call("ack", msg) for msg in msgs[:N // 2])))
            # well under haMaxTimeSlaveNotCatchup / haHousekeepingInterval (3 s), after which the
            # master would drop the silent slave from the set and answer without it
            done, _ = await asyncio.wait([acks], timeout=1.0)
            assert not done, "an ack was answered while the slave did not hold its record"
            ha_link.heal()
            await asyncio.wait_for(acks, 10)
            out["unacked"] = bodies(msgs[N // 2:])
        run_with_client(go, "")
        master.kill9()
        assert g.master(exclude=master) is slave
        _new_master_revives(lambda: g.master(exclude=master), out["unacked"])
        assert _revived_by(master) == [], "the old master revived before it was killed: the test proves nothing"
    finally:
        g.stop()


def test_slave_refuses_pop_at_once_and_its_master_serves_it(tmp_path):
    ns = NameServer(tmp_path)
    master = Broker(tmp_path, "m", ns.addr, "ASYNC_MASTER", 0).start()
    slave = Broker(tmp_path, "s", ns.addr, "SLAVE", 1).start()
    try:
        rs = send_all(master.port, TOPIC, [b"s0"])
        assert rs[0].code == codes.SUCCESS, rs[0].remark
        got: list = []

        async def pop(client, addr):
            c = P.SimpleConsumer(client, addr, GROUP, TOPIC)
            got.extend(await receive_until(c, 1, INVISIBLE_MS))
        run_with_client(pop, _addr(master))
        assert bodies(got) == ["s0"]
        handle = P.handle_of(got[0])
        _refuses_pop(slave, handle)

        async def ack(client, addr):  # the slave acked nothing: the master still has it in flight
            await P.SimpleConsumer(client, addr, GROUP, TOPIC).ack(handle)
        run_with_client(ack, _addr(master))
    finally:
        slave.stop()
        master.stop()
        ns.stop()



def _offset_table(b: Broker) -> dict:
    """`b`'s consumer offset table (on a follower: what it copied), "topic@group" -> {queueId: offset}."""
    r = call(b.port, codes.GET_ALL_CONSUMER_OFFSET)
    assert r.code == codes.SUCCESS, r.remark
    return {k: {int(q): o for q, o in v.items()} for k, v in msgspec.json.decode(bytes(r.body))["offsetTable"].items()}


def _committed_end(leader: Broker) -> int:
    """The leader's last entry index, once every entry is committed."""
    return wait_for(lambda: (lambda i: i["dLedgerCommittedIndex"] == i["dLedgerEndIndex"] and i)(leader.info()),
                    30, "the leader's log committed")["dLedgerEndIndex"]


def _followers_copy_now(leader: Broker, followers: list[Broker], mark: int) -> list[dict]:
    """Each follower's offset table, once it copied one the leader had after this call began: a
    marker offset committed on the leader now (the copy takes the whole table at once)."""
    r = call(leader.port, codes.UPDATE_CONSUMER_OFFSET,
             {"consumerGroup": "PopWindowMarker", "topic": TOPIC, "queueId": 0, "commitOffset": mark})
    assert r.code == codes.SUCCESS, r.remark
    return [wait_for(lambda: (lambda t: t.get(f"{TOPIC}@PopWindowMarker", {}).get(0) == mark and t)(_offset_table(f)),
                     3, f"{f.name} to copy the marker offset") for f in followers]


def _kill_inside_window(g: DLedgerGroup, leader: Broker, end: int) -> None:
    """Kill -9 the stalled leader while what it appended after `end` is still uncommitted, and
    drop what the proxies held from it (delivered late, it would reach the followers)."""
    assert leader.info()["dLedgerCommittedIndex"] == end, "the window closed before the kill: the test proves nothing"
    leader.kill9()
    g.isolate(leader, "cut")
    g.heal()


def test_leader_killed_before_a_pops_checkpoint_replicates_skips_nothing(tmp_path):
    """The window between a pop and the replication of its checkpoint, held open on purpose: the
    leader's Raft links are stalled (DLedgerGroup(proxied=True).isolate(leader, "stall"): its
    pushes and heartbeats wait in the proxies, its client port still answers), so a pop's
    checkpoints reach its log and no follower's. The followers keep copying the leader's offset
    table meanwhile (every 200 ms); the test waits until they copied one taken after the pop (a
    marker offset committed after it), kills the leader -9 and drops what the proxies held.

    The followers' copy must not have the pop's move (the checkpoint was never durable), so the
    new leader delivers every message of that pop: none is skipped. Before, the leader's table
    moved with the pop and a follower copied it; the new leader, with no checkpoint to revive
    from, never delivered those messages. What was popped and acked before the window, once
    replicated, is in the followers' copy and does not come back."""
    g = DLedgerGroup(tmp_path, extra=WINDOW_RAFT, proxied=True).start()
    try:
        leader = g.leader()
        followers = [b for b in g.brokers.values() if b is not leader]

        async def before(client, addr):  # a first batch popped and acked: its offsets are published
            m = _OnMaster(client, lambda: leader)
            for i in range(N):
                await m.send(f"a{i}".encode())
            for msg in await m.receive_until(N, INVISIBLE_MS):
                await m.call("ack", msg)
            for i in range(N):
                await m.send(f"b{i}".encode())
        run_with_client(before, "")
        for f in followers:  # a durable pop's move does reach the followers
            wait_for(lambda: sum(_offset_table(f).get(f"{TOPIC}@{GROUP}", {}).values()) == N, 30,
                     f"{f.name} to copy the pop offsets")
        end = _committed_end(leader)

        g.isolate(leader, "stall")
        popped: list = []

        async def pop(client, addr):  # answered only once its checkpoints are durable: never
            try:
                popped.extend(await P.SimpleConsumer(client, addr, GROUP, TOPIC).receive(INVISIBLE_MS, max_nums=N))
            except Exception as e:  # the leader is killed under it
                popped.append(e)
        popper = threading.Thread(target=run_with_client, args=(pop, _addr(leader)), daemon=True)
        popper.start()
        # the pop wrote its checkpoints: in the leader's log, not committed
        info = wait_for(lambda: (lambda i: i["dLedgerEndIndex"] > end and i)(leader.info()), 30, "the pop's checkpoints")
        assert info["dLedgerCommittedIndex"] == end, info
        for f, copied in zip(followers, _followers_copy_now(leader, followers, 1)):
            pop_offsets = copied.get(f"{TOPIC}@{GROUP}", {})
            assert sum(pop_offsets.values()) == N, \
                f"{f.name} copied a pop offset past a checkpoint not replicated: {pop_offsets}"
        _kill_inside_window(g, leader, end)
        popper.join(30)
        assert not popper.is_alive() and len(popped) == 1 and isinstance(popped[0], Exception), popped

        async def after(client, addr):
            m = _OnMaster(client, lambda: g.leader(among=followers))
            back = await m.receive_until(N, 60_000)
            assert sorted(bodies(back)) == sorted(f"b{i}" for i in range(N))
            assert all(msg.reconsume_times == 0 for msg in back)  # never delivered: first deliveries
            for msg in back:
                await m.call("ack", msg)
            assert await m.call("receive", 60_000, poll_ms=3000) == []  # nothing acked comes back
        run_with_client(after, "")
    finally:
        g.stop()


def test_leader_killed_before_a_revive_replicates_skips_nothing(tmp_path):
    """The revive's own window, held open the same way: a checkpoint comes due on a leader whose
    Raft links are stalled, so the retry copies it re-stores and the acks it writes for them stay
    in its log. The revive offset the followers copy must not pass that checkpoint (before, it
    did at once, and the new leader, replaying from past it with no retry copy, never delivered
    those messages); the new leader replays it and revives them again."""
    g = DLedgerGroup(tmp_path, extra=WINDOW_RAFT, proxied=True).start()
    try:
        leader = g.leader()
        followers = [b for b in g.brokers.values() if b is not leader]
        got: list = []

        async def before(client, addr):
            m = _OnMaster(client, lambda: leader)
            for i in range(N):
                await m.send(f"r{i}".encode())
            got.extend(await m.receive_until(N, REVIVE_MS))  # answered: the checkpoints are replicated
        run_with_client(before, "")
        end = _committed_end(leader)
        g.isolate(leader, "stall")
        assert _revived_by(leader) == [], "revived before the window opened: the test proves nothing"
        revive_topic = next(k for k in _offset_table(leader) if k.startswith("rmq_sys_REVIVE_LOG_"))
        held = _offset_table(leader)[revive_topic]  # the revive offsets: none past the checkpoints
        wait_for(lambda: len(_revived_by(leader)) == N, 30, "the stalled leader to revive")
        for f, copied in zip(followers, _followers_copy_now(leader, followers, 2)):
            revive_offsets = copied.get(revive_topic, {})
            assert all(revive_offsets.get(q, -1) <= o for q, o in held.items()), \
                f"{f.name} copied a revive offset past a checkpoint whose revive is not replicated: " \
                f"{revive_offsets}, was {held}"
        _kill_inside_window(g, leader, end)

        async def after(client, addr):
            m = _OnMaster(client, lambda: g.leader(among=followers))
            back = await m.receive_until(N, 60_000)
            assert sorted(bodies(back)) == sorted(bodies(got))
            assert all(msg.reconsume_times == 1 for msg in back)  # revived once, by the new leader
            for msg in back:
                await m.call("ack", msg)
            assert await m.call("receive", 60_000, poll_ms=3000) == []
        run_with_client(after, "")
        assert len(_revived_by(*followers)) == N
    finally:
        g.stop()
