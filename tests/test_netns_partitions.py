"""Real network faults between hosts (tests/helpers/netns.py): every broker and the name server in a
network namespace of its own on a bridge, faults as packet drops inside the namespaces. A host cut
off this way answers nothing, not even a RST: what the loopback proxies of the other fault tests
cannot show. The test and its clients run in the root namespace, which reaches every host.

Each test runs the fault loops' history checker (tests/helpers/history.py) and asks:
- every message acknowledged SEND_OK is present once, at the queue offset its ack named, on every
  member that stays in the group (each member drained on its own);
- no queue offset is acknowledged for two different messages;
- nothing sent to a side that cannot commit is acknowledged SEND_OK;
- the outage (the longest gap between acknowledgements of the side that can commit) ends within
  its bound, during the fault and once it heals.
The figures (outages, sends) are printed: `pytest -s` shows them."""
from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import pytest

from broker.remoting import codes
from tests.conftest import wait_for
from tests.helpers.controller_mode import ControllerModeGroup
from tests.helpers.dledger_cluster import DLedgerGroup
from tests.helpers.ha_cluster import Broker, NameServer, call, wait_replicated
from tests.helpers.history import History, Workload, drain
from tests.helpers.netns import Hosts, unavailable, wire_unavailable

WHY = unavailable()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"needs network namespaces: {WHY}")

TOPIC = "NetFaults"
QUEUES = 4
# A shared 2-core machine runs these beside other work: bounds 3-5x what a quiet one needs.
ELECTION_S = 15.0   # partition -> the majority acknowledges again (3 x 200 ms heartbeats, a vote, a reconnect)
HEAL_S = 15.0       # heal -> the cut-off member follows again / the slave acknowledges again
QUICK_HA = "syncFlushTimeout=1500\nhaSendHeartbeatInterval=300\nhaHousekeepingInterval=2000\n"
MAY_COMMIT = "may still commit"  # a deposed leader's answer for an entry already in its log: unknown outcome


def _create_topic(brokers) -> None:
    """The topic on every broker, whoever leads later (a controller-mode broker refuses while it
    switches roles: asked again)."""
    for b in brokers:
        wait_for(lambda: call(b.port, codes.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES, "perm": 6}, host=b.host).code
                 == codes.SUCCESS, 30, f"{b.name} to create {TOPIC}")


def _longest_gap(work: Workload, start: float, end: float) -> float:
    """The longest time in [start, end] without a SEND_OK for `work`: its outage."""
    with work.history.lock:
        times = sorted(s.at for m, s in work.history.sends.items()
                       if s.outcome == "ok" and work.first_id <= m < work.next_id and start <= s.at <= end)
    marks = [start, *times, end]
    return max(b - a for a, b in zip(marks, marks[1:]))


def _served_twice(history: History, outcomes=("ok",)) -> dict:
    """(queue, offset) acknowledged for more than one message (SEND_OK; with "degraded" in
    `outcomes` also FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE, which may be lost and their offset
    then given to another message)."""
    seen: dict[tuple[int, int], list[int]] = {}
    for m, s in history.sends.items():
        if s.outcome in outcomes:
            seen.setdefault((s.queue, s.offset), []).append(m)
    return {k: v for k, v in seen.items() if len(v) > 1}


def _served(b) -> dict[tuple[int, int], int]:
    """What member `b` serves now: (queue, offset) -> message id, every queue from its minimum (not
    waiting for its reput: a cut-off controller-mode master's stops short of its log's end)."""
    h = History()
    drain(h, b.port, TOPIC, QUEUES, host=b.host, settled=False)
    return {(q, o): m for m, q, o in h.consumed}


def _check_member(history: History, b, *, degraded_kept: bool = False) -> History:
    """Drain member `b` on its own into a copy of the history and check it."""
    h = History()
    h.sends = dict(history.sends)
    drain(h, b.port, TOPIC, QUEUES, host=b.host)
    v = h.check()
    assert v.duplicates == 0, f"{b.name}: {v.duplicates} messages stored twice"
    assert not v.holes, f"{b.name}: queue offsets missing: {v.holes}"
    assert not v.lost, f"{b.name}: {len(v.lost)} acknowledged messages missing, e.g. {v.lost[:10]}"
    assert not v.misplaced, f"{b.name}: acknowledged at another queue offset: {v.misplaced[:10]}"
    assert not v.failed_seen, f"{b.name}: refused sends stored anyway: {v.failed_seen[:10]}"
    if degraded_kept:
        assert not v.lost_degraded, f"{b.name}: degraded sends missing: {v.lost_degraded[:10]}"
    return h


def _dump(brokers, hosts: Hosts) -> None:
    for b in brokers:
        try:
            info = {k: v for k, v in b.info().items() if k.startswith(("dLedger", "commitLog", "dispatched",
                                                                      "brokerRole"))}
        except Exception as e:  # noqa: BLE001 - a host that answers nothing
            info = repr(e)
        print(f"---- {b.name} ({b.addr}): {info}\n{hosts.rules(b.name)}\n---- log (tail) ----\n{b.stderr()[-20000:]}")


class Leader:
    """Where the producer of the majority's side sends: the member that says it is the master,
    looked up again after a refusal, never one of `excluded` (the side cut off)."""

    def __init__(self, group: DLedgerGroup):
        self.group, self.excluded = group, set()
        self.where = (group.leader().host, group.leader().port)

    def __call__(self):
        def lookup():
            for b in self.group.alive():
                if b.name in self.excluded:
                    continue
                try:
                    if b.info().get("brokerRole") == "SYNC_MASTER":
                        return b.host, b.port
                except Exception:  # noqa: BLE001 - unreachable or busy: ask the next one
                    continue
            return self.where
        # asked from the workload's event loop: the lookups (each an asyncio.run) in a thread
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            self.where = ex.submit(lookup).result()
        return self.where


DLEDGER_FAULTS = {
    # the leader partitioned from every other host, both ways
    "isolate": lambda h, old, others: h.isolate(old),
    # the others do not hear the leader; it still hears them
    "unheard": lambda h, old, others: [h.partition_one_way(old, o) for o in others],
    # the leader hears nothing from the others; they still hear it
    "deaf": lambda h, old, others: [h.partition_one_way(o, old) for o in others],
}


@pytest.mark.parametrize("fault,n", [("isolate", 3), ("unheard", 3), ("deaf", 3), ("isolate", 5)],
                         ids=["isolate-3", "unheard-3", "deaf-3", "isolate-5"])
def test_dledger_leader_cut_off_commits_nothing_and_the_majority_takes_over(tmp_path: Path, fault: str, n: int):
    """The DLedger leader's host cut off from the other members while one client writes straight to
    it and another to whoever leads the majority: the majority elects a leader within ELECTION_S,
    the old leader acknowledges nothing sent after the cut, and after the heal (the clients still
    writing on both sides) it follows the new leader within HEAL_S and every member holds every
    acknowledged message once, where its ack said."""
    names = [f"n{i}" for i in range(n)]
    with Hosts(["ns", *names]) as hosts:
        g = DLedgerGroup(tmp_path, n=n, extra=QUICK_HA, hosts=hosts)
        history = History()
        works: list[Workload] = []
        try:
            g.start()
            old = g.leader()
            _create_topic(g.brokers.values())
            others = [b for b in g.brokers.values() if b is not old]
            leader = Leader(g)
            majority = Workload(history, leader, TOPIC, QUEUES, reconnect_on=frozenset({codes.SERVICE_NOT_AVAILABLE}),
                                outcome_unknown=lambda r: MAY_COMMIT in (r.remark or ""))
            straight = Workload(history, lambda: (old.host, old.port), TOPIC, QUEUES, inflight=2, first_id=10**7,
                                outcome_unknown=lambda r: MAY_COMMIT in (r.remark or ""))
            works = [majority.start(), straight.start()]
            wait_for(lambda: majority.acked() > 100 and straight.acked() > 20, 30, "sends before the fault")

            DLEDGER_FAULTS[fault](hosts, old.name, [o.name for o in others])
            leader.excluded.add(old.name)
            cut_at, cut_id = time.monotonic(), straight.next_id  # ids from here on left after the cut
            new = g.leader(among=others, timeout=ELECTION_S)
            wait_for(lambda: len(majority.acked_since(cut_at)) > 50, ELECTION_S, "the majority to acknowledge again")
            wait_for(lambda: old.info()["dLedgerRole"] != "LEADER", ELECTION_S, "the old leader to step down")
            elected = time.monotonic()
            dropped = sum(hosts.dropped(name) for name in hosts.names)
            assert dropped > 0, "the partition's rules dropped nothing"
            during = _longest_gap(majority, cut_at, elected)
            late = [m for m in straight.acked_since(cut_at) if m >= cut_id]
            assert not late, f"the cut-off leader acknowledged {len(late)} sends it cannot commit: {late[:10]}"
            # what a consumer reading the cut-off member now gets (its log's uncommitted tail, if it
            # served that, would be replaced after the heal: an offset served twice)
            served_cut_off = _served(old)
            uncommitted = sorted(m for m in served_cut_off.values() if m >= cut_id)
            assert not uncommitted, f"the cut-off leader served sends it never committed: {uncommitted[:10]}"

            tried = range(cut_id, straight.next_id)  # sent to the cut-off leader while cut off
            # entries in the cut-off member's log that it could not commit: the heal must cut them
            uncut = (lambda i: i["dLedgerEndIndex"] - i["dLedgerCommittedIndex"])(old.info())
            if fault == "isolate":
                assert uncut > 0, "the cut-off leader appended nothing it could not commit: nothing to cut at the heal"
            hosts.heal()
            healed_at = time.monotonic()
            wait_for(lambda: (lambda i: i["dLedgerRole"] == "FOLLOWER" and i["dLedgerLeader"] in
                              {b.name for b in others})(old.info()), HEAL_S, f"{old.name} to follow again")
            rejoined = time.monotonic() - healed_at
            wait_for(lambda: len(majority.acked_since(healed_at)) > 100, HEAL_S, "sends after the heal")
            after = _longest_gap(majority, healed_at, time.monotonic())
            for w in works:
                w.stop()
            works = []
            assert _longest_gap(majority, cut_at, healed_at) < ELECTION_S
            assert after < HEAL_S, f"the majority stopped acknowledging for {after:.1f}s after the heal"

            # every member has the whole committed log and has dispatched it
            lead = g.leader(among=others, timeout=ELECTION_S)
            wait_for(lambda: all((lambda i: i["dispatchedOffset"] >= i["commitLogMaxOffset"] ==
                                  lead.info()["commitLogMaxOffset"])(b.info()) for b in g.brokers.values()),
                     HEAL_S, "every member to hold and dispatch the whole log")
            assert not _served_twice(history), _served_twice(history)
            drained = {b.name: _check_member(history, b) for b in g.brokers.values()}
            final = {(q, o): m for m, q, o in drained[lead.name].consumed}
            changed = {k: (m, final.get(k)) for k, m in served_cut_off.items() if final.get(k) != m}
            assert not changed, f"offsets the cut-off member served hold other messages after the heal: {changed}"
            rows = {name: h.check().row() for name, h in drained.items()}
            assert rows[lead.name]["ok"] > 200, rows
            if fault != "deaf":
                # what the cut-off leader appended never left it: cut from its log at the heal (when
                # the others heard it, they may hold it and a later leader commit it: not checked)
                kept = sorted({m for h in drained.values() for m, _, _ in h.consumed if m in tried})
                assert not kept, f"writes the cut-off leader took while cut off survived the heal: {kept[:10]}"
            print(f"{fault}-{n}: {dropped} packets dropped; {len(tried)} sends to the old leader {old.name} while cut "
                  f"off, {uncut} entries uncommitted in its log at the heal; it served {len(served_cut_off)} "
                  f"messages while cut off, new leader {new.name}; outage during the fault {during:.2f}s, "
                  f"after the heal {after:.2f}s, rejoined in {rejoined:.2f}s; {rows[lead.name]}")
        except BaseException:
            _dump(g.brokers.values(), hosts)
            raise
        finally:
            for w in works:
                w.stop_event.set()
            for w in works:
                w.thread.join(30)
            g.stop()


LOSS_S = 4.0  # how long the loss lasts


@pytest.mark.parametrize("who,percent", [("follower", 30), ("leader", 5)], ids=["follower-30", "leader-5"])
def test_dledger_member_with_packet_loss_the_group_keeps_committing(tmp_path: Path, who: str, percent: int):
    """`percent` % of the packets between one member's host (a follower's, or the leader's) and the
    other hosts dropped, each way, for LOSS_S: the group keeps acknowledging (no gap past
    ELECTION_S, a new election included), and once the loss ends every member, the lossy one
    included, holds every acknowledged message once."""
    with Hosts(["ns", "n0", "n1", "n2"]) as hosts:
        g = DLedgerGroup(tmp_path, extra=QUICK_HA, hosts=hosts)
        history = History()
        work = None
        try:
            g.start()
            lead = g.leader()
            _create_topic(g.brokers.values())
            lossy = lead if who == "leader" else next(b for b in g.brokers.values() if b is not lead)
            work = Workload(history, Leader(g), TOPIC, QUEUES, reconnect_on=frozenset({codes.SERVICE_NOT_AVAILABLE}),
                            outcome_unknown=lambda r: MAY_COMMIT in (r.remark or "")).start()
            wait_for(lambda: work.acked() > 100, 30, "sends before the loss")
            hosts.loss(lossy.name, percent)
            start = time.monotonic()
            before = work.acked()
            time.sleep(LOSS_S)  # the fault's length, not a wait for anything
            acked = work.acked() - before
            gap = _longest_gap(work, start, time.monotonic())
            dropped = hosts.dropped(lossy.name)
            assert dropped > 0, "the loss rules dropped nothing"
            terms = {b.name: b.info()["dLedgerTerm"] for b in g.brokers.values()}
            hosts.heal()
            healed_at = time.monotonic()
            wait_for(lambda: len(work.acked_since(healed_at)) > 100, HEAL_S, "sends after the loss")
            work.stop()
            assert acked > 100, f"only {acked} sends acknowledged in {LOSS_S}s under {percent} % loss on the {who}"
            assert gap < ELECTION_S, f"no acknowledgement for {gap:.1f}s under {percent} % loss on the {who}"
            lead = g.leader()
            wait_for(lambda: all((lambda i: i["dispatchedOffset"] >= i["commitLogMaxOffset"] ==
                                  lead.info()["commitLogMaxOffset"])(b.info()) for b in g.brokers.values()),
                     HEAL_S, "every member to hold and dispatch the whole log")
            assert not _served_twice(history)
            rows = {b.name: _check_member(history, b).check().row() for b in g.brokers.values()}
            print(f"loss-{percent} on the {who} {lossy.name}: {acked} acks in {LOSS_S}s, {dropped} packets dropped, "
                  f"longest gap {gap:.2f}s, "
                  f"terms {terms}; "
                  f"{rows[lead.name]}")
        except BaseException:
            _dump(g.brokers.values(), hosts)
            raise
        finally:
            if work is not None:
                work.stop_event.set()
                work.thread.join(30)
            g.stop()


SYNC_FAULTS = {
    "both-ways": lambda h: h.partition("master", "slave"),
    # the slave hears nothing from the master; its reports (stale offsets) still reach the master
    "slave-deaf": lambda h: h.partition_one_way("master", "slave"),
}


@pytest.mark.parametrize("fault", list(SYNC_FAULTS))
def test_sync_master_with_its_slave_cut_off_degrades_and_loses_nothing_acknowledged(tmp_path: Path, fault: str):
    """SYNC_MASTER and SLAVE on hosts of their own, the slave's host cut off from the master's (both
    ways, or the slave deaf to the master while the master still hears it): no
    send after the cut is acknowledged SEND_OK (each waits syncFlushTimeout and is answered
    FLUSH_SLAVE_TIMEOUT, then SLAVE_NOT_AVAILABLE once the master drops the silent slave); after the
    heal the slave reconnects and SEND_OK returns within HEAL_S, and master and slave both hold every
    message acknowledged SEND_OK and every degraded one (the master was never down)."""
    with Hosts(["ns", "master", "slave"]) as hosts:
        ns = NameServer(tmp_path, host=hosts.addr["ns"], wrap=hosts.wrap("ns"))
        master = Broker(tmp_path, "master", ns.addr, "SYNC_MASTER", 0, QUICK_HA, host=hosts.addr["master"],
                        wrap=hosts.wrap("master"))
        slave = Broker(tmp_path, "slave", ns.addr, "SLAVE", 1, QUICK_HA, host=hosts.addr["slave"],
                       wrap=hosts.wrap("slave"))
        history = History()
        work = None
        try:
            master.start()
            slave.start()
            _create_topic([master])
            wait_for(lambda: master.info()["slaves"] == 1, 30, "the slave to link (through the name server's route)")
            work = Workload(history, lambda: (master.host, master.port), TOPIC, QUEUES, timeout=8.0).start()
            wait_for(lambda: work.acked() > 100, 30, "SEND_OK before the fault")
            SYNC_FAULTS[fault](hosts)
            cut_at, cut_id = time.monotonic(), work.next_id
            codes_seen = lambda: {s.code for m, s in history.sends.items() if m >= cut_id}  # noqa: E731
            wait_for(lambda: codes.SLAVE_NOT_AVAILABLE in codes_seen(), 30,
                     "sends answered SLAVE_NOT_AVAILABLE once the master dropped the silent slave")
            late = [m for m in work.acked_since(cut_at) if m >= cut_id]
            assert not late, f"SEND_OK for {len(late)} sends the cut-off slave never had: {late[:10]}"
            seen = codes_seen()
            hosts.heal()
            healed_at = time.monotonic()
            wait_for(lambda: len(work.acked_since(healed_at)) > 50, HEAL_S, "SEND_OK again after the heal")
            back = min(history.sends[m].at for m in work.acked_since(healed_at)) - healed_at
            work.stop()
            wait_replicated(master, slave, HEAL_S)
            assert not _served_twice(history)
            rows = {b.name: _check_member(history, b, degraded_kept=True).check().row() for b in (master, slave)}
            assert rows["master"]["degraded"] > 0, rows
            print(f"sync-master {fault}: codes after the cut {sorted(seen)}, SEND_OK again {back:.2f}s after the heal; "
                  f"{rows}")
        except BaseException:
            _dump([master, slave], hosts)
            raise
        finally:
            if work is not None:
                work.stop_event.set()
                work.thread.join(30)
            for b in (slave, master):
                if b.child is not None:
                    b.stop()
            ns.stop()


def test_controller_mode_master_cut_off_acknowledges_nothing_and_its_slave_takes_over(tmp_path: Path):
    """Controller mode (allAckInSyncStateSet), every process on a host of its own: the master's host
    cut off from the controllers, the name server and its slave while one client writes straight to
    it and another to whoever the controllers elect. The slave is elected within ELECTION_S, the
    cut-off master acknowledges nothing sent after the cut, and after the heal (both clients still
    writing) it serves as a slave within HEAL_S and both brokers hold every acknowledged message once."""
    with Hosts(["ns", "cn0", "cn1", "cn2", "b0", "b1"]) as hosts:
        g = ControllerModeGroup(tmp_path, extra="allAckInSyncStateSet=true\nsyncFlushTimeout=1500\n", hosts=hosts)
        history = History()
        works: list[Workload] = []
        changed: dict = {}
        try:
            g.start()
            old = g.master()
            g.wait_in_sync(old, 2)
            _create_topic(g.brokers.values())
            current = [old]
            majority = Workload(history, lambda: (current[0].host, current[0].port), TOPIC, QUEUES, timeout=8.0,
                                reconnect_on=frozenset({codes.SYSTEM_BUSY, codes.SERVICE_NOT_AVAILABLE}))
            straight = Workload(history, lambda: (old.host, old.port), TOPIC, QUEUES, inflight=2, timeout=8.0,
                                first_id=10**7)
            works = [majority.start(), straight.start()]
            wait_for(lambda: majority.acked() > 100 and straight.acked() > 20, 30, "sends before the fault")

            hosts.isolate(old.name)
            cut_at, cut_id = time.monotonic(), straight.next_id
            new = current[0] = g.master(timeout=ELECTION_S, exclude=old)
            majority.redirect()  # the old master, reachable from here, still answers (FLUSH_SLAVE_TIMEOUT)
            wait_for(lambda: len(majority.acked_since(cut_at)) > 50, ELECTION_S, "the new master to acknowledge")
            during = _longest_gap(majority, cut_at, time.monotonic())
            wait_for(lambda: straight.next_id > cut_id + 4, ELECTION_S, "sends tried on the cut-off master")
            late = [m for m in straight.acked_since(cut_at) if m >= cut_id]
            assert not late, f"the cut-off master acknowledged {len(late)} sends: {late[:10]}"
            served_cut_off = _served(old)  # what a consumer reading the cut-off master gets now

            hosts.heal()
            healed_at = time.monotonic()
            wait_for(lambda: g.role(old).get("controllerRole") == "slave", HEAL_S, f"{old.name} to serve as a slave")
            rejoined = time.monotonic() - healed_at
            late = [m for m in straight.acked_since(cut_at) if m >= cut_id]
            assert not late, f"the cut-off master acknowledged {len(late)} sends: {late[:10]}"
            g.wait_in_sync(new, 2, HEAL_S)
            wait_for(lambda: len(majority.acked_since(healed_at)) > 50, HEAL_S, "sends after the heal")
            for w in works:
                w.stop()
            works = []
            after = _longest_gap(majority, healed_at, time.monotonic())
            assert after < HEAL_S, f"the new master stopped acknowledging for {after:.1f}s after the heal"
            wait_replicated(new, old, HEAL_S)
            assert not _served_twice(history), _served_twice(history)
            drained = {b.name: _check_member(history, b) for b in (new, old)}
            final = {(q, o): m for m, q, o in drained[new.name].consumed}
            changed = {k: (m, final.get(k)) for k, m in served_cut_off.items() if final.get(k) != m}
            # what it served and lost was never acknowledged SEND_OK (else `lost`/`misplaced` above)
            assert all(history.sends[m].outcome != "ok" for m, _ in changed.values())
            rows = {name: h.check().row() for name, h in drained.items()}
            print(f"controller: {old.name} cut off, {new.name} elected; outage {during:.2f}s, {old.name} a slave "
                  f"{rejoined:.2f}s after the heal, longest gap after it {after:.2f}s; served while cut off and "
                  f"replaced since: {len(changed)} offsets; {rows}")
        except BaseException:
            _dump(g.brokers.values(), hosts)
            print("answers after the cut:", _answers_after(history, cut_at) if "cut_at" in locals() else None)
            raise
        finally:
            for w in works:
                w.stop_event.set()
            for w in works:
                w.thread.join(30)
            g.stop()
    # RocketMQ 5's confirmOffset: the consume queues hold only what the SyncStateSet acknowledged,
    # so nothing a consumer read from the cut-off master is replaced after the failover
    assert not changed, (f"the cut-off master served {len(changed)} queue offsets to consumers with messages it "
                         f"never replicated and cut at the heal; the new master serves other messages there "
                         f"(queue, offset): (then, now): {dict(list(changed.items())[:4])}")


def _answers_after(history: History, t: float) -> dict:
    """(outcome, code) -> count of the answers after monotonic time `t`: what a failure report shows."""
    import collections
    with history.lock:  # the workloads may still be sending (this runs when a test failed)
        sends = list(history.sends.values())
    return dict(collections.Counter((s.outcome, s.code) for s in sends if s.at > t))


WIRE = wire_unavailable()
IMPAIRMENTS = {"delay": "delay 200ms 50ms", "reorder": "delay 10ms reorder 25% 50%"}


@pytest.mark.skipif(WIRE is not None, reason=f"needs the userspace wire's TAP devices: {WIRE}")
@pytest.mark.parametrize("kind", list(IMPAIRMENTS))
def test_dledger_under_delay_or_reordering_keeps_committing(tmp_path: Path, kind: str):
    """Every member's host on the userspace wire (tests/helpers/wire.py), what it sends held
    200 ms +- 50 ms (jitter: frames overtake each other), or a quarter of it sent at once past the
    rest held 10 ms: the group keeps committing, every member holds every acknowledged message once
    where its ack said, and no queue offset is acknowledged for two messages."""
    spec = IMPAIRMENTS[kind]
    with Hosts(["ns", "n0", "n1", "n2"], wire=True) as hosts:
        g = DLedgerGroup(tmp_path, extra=QUICK_HA.replace("syncFlushTimeout=1500", "syncFlushTimeout=5000")
                         + "heartBeatTimeIntervalMs=1000\n", hosts=hosts)
        history = History()
        work = None
        try:
            g.start()
            g.leader()
            _create_topic(g.brokers.values())
            for name in g.ids:
                hosts.impair(name, spec)
            before = {name: hosts.impaired(name) for name in g.ids}
            started = time.monotonic()
            work = Workload(history, Leader(g), TOPIC, QUEUES, timeout=8.0,
                            reconnect_on=frozenset({codes.SERVICE_NOT_AVAILABLE}),
                            outcome_unknown=lambda r: MAY_COMMIT in (r.remark or "")).start()
            # reordering costs little time: more sends, more frames overtaken
            wait_for(lambda: work.acked() > (100 if kind == "delay" else 500), 60, f"sends under {spec}")
            took = time.monotonic() - started
            work.stop()
            fates = {name: {k: v - before[name][k] for k, v in hosts.impaired(name).items()} for name in g.ids}
            # every frame a member sent was held, or (reorder) some sent at once past the held ones
            expect = ((lambda f: f["delayed"] > 0 and f["sent"] == f["reordered"] == 0) if kind == "delay" else
                      (lambda f: f["delayed"] > 0 and f["reordered"] > 0 and f["sent"] == 0))
            assert all(expect(f) for f in fates.values()), f"the wire did not {kind} every member's frames: {fates}"
            assert sum(f["overtaken"] for f in fates.values()) > 0, f"no frame arrived out of order: {fates}"
            hosts.heal()
            lead = g.leader()
            wait_for(lambda: all((lambda i: i["dispatchedOffset"] >= i["commitLogMaxOffset"] ==
                                  lead.info()["commitLogMaxOffset"])(b.info()) for b in g.brokers.values()),
                     HEAL_S, "every member to hold and dispatch the whole log")
            assert not _served_twice(history)
            rows = {b.name: _check_member(history, b).check().row() for b in g.brokers.values()}
            print(f"{kind} ({spec}): {work.acked()} acks in {took:.1f}s; frames per host {fates}; "
                  f"{rows[lead.name]}")
        except BaseException:
            _dump(g.brokers.values(), hosts)
            raise
        finally:
            if work is not None:
                work.stop_event.set()
                work.thread.join(30)
            g.stop()


@pytest.mark.skipif(WIRE is not None, reason=f"needs the userspace wire's TAP devices: {WIRE}")
def test_sync_master_and_slave_over_a_slow_lossy_link_keep_acknowledging_and_lose_nothing(tmp_path: Path):
    """SYNC_MASTER and SLAVE on the userspace wire, what each host sends held 100 ms +- 25 ms and
    5 % of it dropped (a slow, lossy WAN link between them): sends keep being acknowledged (each
    SEND_OK waits for the slave's ack across that link, and TCP resends what was dropped), and
    after the heal master and slave hold every message acknowledged (SEND_OK, and the degraded ones
    a timeout answered) with no queue offset served twice."""
    spec = "delay 100ms 25ms loss 5%"
    with Hosts(["ns", "master", "slave"], wire=True) as hosts:
        ns = NameServer(tmp_path, host=hosts.addr["ns"], wrap=hosts.wrap("ns"))
        master = Broker(tmp_path, "master", ns.addr, "SYNC_MASTER", 0,
                        QUICK_HA.replace("syncFlushTimeout=1500", "syncFlushTimeout=5000"),
                        host=hosts.addr["master"], wrap=hosts.wrap("master"))
        slave = Broker(tmp_path, "slave", ns.addr, "SLAVE", 1, QUICK_HA, host=hosts.addr["slave"],
                       wrap=hosts.wrap("slave"))
        history = History()
        work = None
        try:
            master.start()
            slave.start()
            _create_topic([master])
            wait_for(lambda: master.info()["slaves"] == 1, 30, "the slave to link (through the name server's route)")
            for name in ("master", "slave"):
                hosts.impair(name, spec)
            before = {name: hosts.impaired(name) for name in ("master", "slave")}
            started = time.monotonic()
            work = Workload(history, lambda: (master.host, master.port), TOPIC, QUEUES, timeout=12.0).start()
            wait_for(lambda: work.acked() > 200, 90, f"SEND_OK under {spec}")
            took = time.monotonic() - started
            work.stop()
            fates = {n: {k: v - before[n][k] for k, v in hosts.impaired(n).items()} for n in ("master", "slave")}
            assert all(f["delayed"] > 0 and f["lost"] > 0 for f in fates.values()), \
                f"the wire did not delay and drop both hosts' frames: {fates}"
            hosts.heal()
            wait_replicated(master, slave, HEAL_S)
            assert not _served_twice(history)
            rows = {b.name: _check_member(history, b, degraded_kept=True).check().row() for b in (master, slave)}
            print(f"sync-master over {spec}: {work.acked()} acks in {took:.1f}s; "
                  f"frames per host {fates}; {rows}")
        except BaseException:
            _dump([master, slave], hosts)
            raise
        finally:
            if work is not None:
                work.stop_event.set()
                work.thread.join(30)
            for b in (slave, master):
                if b.child is not None:
                    b.stop()
            ns.stop()
