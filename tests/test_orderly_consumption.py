"""Orderly consumption (MessageListenerOrderly) through our broker's queue locks (LOCK_BATCH_MQ 41 /
UNLOCK_BATCH_MQ 42): the project's own client and the real C++ client (PyPI rocketmq 0.4.4), each
consumer its own process, against a name server and broker that are processes too.

Messages carry "<queueId>:<seq>", seq counting 0, 1, 2, ... in each queue. The project's consumers
append every delivery to one shared file in the order they happen (tests/helpers/order_consumer.py),
so a queue's story across its holders can be read back in order: each holder's stretch must go
up one by one, a new holder must start no later than one past its predecessor's last (a graceful
handover starts exactly there; after a kill -9 it may go back to the last committed offset and
repeat the tail), and every seq must be there.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from broker.client.message import Message
from broker.client.route import MessageQueue
from broker.client.sync import SyncProducer
from broker.server.broker_config import load_broker_config
from broker.store.errors import StoreConfigError
from tests.conftest import wait_for
from tests.helpers.raw_wire import BrokerLog
from tests.helpers.real_clients import Cluster, Consumer

QUEUES = 4
_names = itertools.count()
# The kill test's broker lets a dead holder's locks go after 3 s instead of 60 s; its clients
# renew and distrust their locks at the same proportions as Java's 20 s / 30 s against 60 s.
SHORT_LOCKS = "rebalanceLockMaxLiveTime=3000\n"
FAST_LOCK_CLIENT = {"lock_interval": 1.0, "lock_max_live_time": 1.5, "rebalance_interval": 1.0,
                    "persist_interval": 0.5}


def _unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("orderly")) as c:  # the broker's own 60 s lock expiry
        yield c


class Stream:
    """Sends rounds of messages, one per queue ("<queueId>:<seq>"), into chosen queues."""

    def __init__(self, cluster: Cluster, topic: str):
        cluster.create_topic(topic, QUEUES)
        self.topic = topic
        self.producer = SyncProducer(_unique("pg-orderly"), cluster.namesrv)
        self.rounds = 0

    def round(self) -> None:
        for q in range(QUEUES):
            r = self.producer.send(Message(self.topic, f"{q}:{self.rounds}".encode()),
                                   queue=MessageQueue(self.topic, "broker-a", q))
            assert r.queue_offset == self.rounds, r  # each queue holds exactly its rounds, in order
        self.rounds += 1

    def close(self) -> None:
        self.producer.shutdown()


class ConsumedLog:
    """The consumers' shared delivery file, read as it grows: (consumer, queue, seq, reconsumeTimes, ok)."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: list[tuple[str, int, int, int, bool]] = []
        self._pos = 0

    def read(self) -> list[tuple[str, int, int, int, bool]]:
        if self.path.exists():
            with open(self.path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
            done = data.rfind(b"\n") + 1
            self._pos += done
            for line in data[:done].decode().splitlines():
                name, queue, body, times, ok = line.split()
                q, seq = body.split(":")
                assert int(q) == int(queue), line  # delivered from the queue it was sent to
                self.entries.append((name, int(queue), int(seq), int(times), ok == "ok"))
        return self.entries

    def consumed(self) -> int:
        """Deliveries the listener took, counting each (queue, seq) once."""
        return len({(q, s) for _, q, s, _, ok in self.read() if ok})

    def holders(self, name: str) -> set[int]:
        return {q for n, q, _, _, ok in self.read() if ok and n == name}


def py_orderly(cluster: Cluster, tmp: Path, topic: str, group: str, name: str, log: Path, work_ms: int = 0,
               **kw) -> Consumer:
    return Consumer("py", cluster, tmp, topic, group, name, orderly=True, log=str(log), workMs=work_ms, kw=kw)


def keep_pace(stream: Stream, log: ConsumedLog, until, what: str, max_rounds: int = 1500) -> None:
    """Send rounds, each once the consumers are within two rounds of the stream, until `until()`."""
    for _ in range(max_rounds):
        if until():
            return
        wait_for(lambda: log.consumed() >= (stream.rounds - 2) * QUEUES, 60, f"the consumers to keep up ({what})")
        stream.round()
    raise AssertionError(f"{max_rounds} rounds sent and still not {what}")


def check_queue_order(log: ConsumedLog, rounds: int, repeats_allowed: bool) -> dict[int, list[tuple[str, int]]]:
    """Per queue, the seqs taken in delivery order: every seq of 0..rounds-1 present, each holder's
    stretch +1 at a time, a new holder starting at most one past the last (exactly there unless
    `repeats_allowed`). Returns them, for the test's own checks."""
    by_queue: dict[int, list[tuple[str, int]]] = {q: [] for q in range(QUEUES)}
    for name, q, seq, _, ok in log.read():
        if ok:
            by_queue[q].append((name, seq))
    for q, taken in by_queue.items():
        seqs = [s for _, s in taken]
        assert set(seqs) == set(range(rounds)), f"queue {q}: missing {sorted(set(range(rounds)) - set(seqs))}"
        assert seqs[0] == 0, f"queue {q} started at {seqs[0]}"
        for (was, prev), (now, cur) in zip(taken, taken[1:]):
            if now == was:
                assert cur == prev + 1, f"queue {q}: {now} took {cur} after {prev}: {taken}"
            elif repeats_allowed:
                assert cur <= prev + 1, f"queue {q}: {now} skipped from {prev} to {cur}: {taken}"
            else:
                assert cur == prev + 1, f"queue {q}: handover from {was} to {now} went {prev} -> {cur}: {taken}"
    return by_queue


def test_a_member_joining_mid_stream_takes_its_queues_after_the_last_holder_commits(cluster, tmp_path):
    topic, group = _unique("Orderly"), _unique("cg-orderly")
    stream, log = Stream(cluster, topic), ConsumedLog(tmp_path / "consumed.log")
    broker_log = BrokerLog(cluster.root / "broker.err")
    try:
        for _ in range(10):
            stream.round()
        # a's listener logs each message, then holds it 50 ms: the rebalance meets it with a message
        # in hand, which it must let finish (had it cut it off, b would log that message again)
        with py_orderly(cluster, tmp_path, topic, group, "a", log.path, work_ms=50, rebalance_interval=1.0):
            # while holding all four queues, a's locks keep anyone else of the group out
            keep_pace(stream, log, lambda: len(log.holders("a")) == QUEUES, "a consuming all four queues")
            assert cluster.lock_batch(group, "intruder", topic, range(QUEUES)) == set()
            for _ in range(40):  # 2 s of work per queue: a is busy as b joins
                stream.round()
            with py_orderly(cluster, tmp_path, topic, group, "b", log.path, rebalance_interval=1.0):
                keep_pace(stream, log, lambda: len(log.holders("b")) == 2, "b consuming its two queues")
                for _ in range(10):
                    stream.round()
                wait_for(lambda: log.consumed() == stream.rounds * QUEUES, 60, "every message consumed")
        # both shut down and unlocked their queues (42) at once, well inside the broker's 60 s expiry
        assert cluster.lock_batch(group, "intruder", topic, range(QUEUES)) == set(range(QUEUES))
    finally:
        stream.close()
    assert all(ok for *_, ok in log.read())
    taken = check_queue_order(log, stream.rounds, repeats_allowed=False)
    moved = {q for q, t in taken.items() if t[-1][0] == "b"}
    assert moved == log.holders("b") and len(moved) == 2
    for q in moved:  # a held it first, then b carried on from exactly where a stopped
        assert taken[q][0][0] == "a" and {n for n, _ in taken[q]} == {"a", "b"}
    assert f"in group {group} expired" not in broker_log.text()  # handed over by unlocking, not by expiry


def test_a_member_killed_mid_stream_is_taken_over_after_its_locks_expire_in_order(tmp_path):
    topic, group = _unique("OrderlyKill"), _unique("cg-orderly-kill")
    with Cluster(tmp_path / "cluster", SHORT_LOCKS) as cluster:
        stream, log = Stream(cluster, topic), ConsumedLog(tmp_path / "consumed.log")
        try:
            with py_orderly(cluster, tmp_path, topic, group, "a", log.path, **FAST_LOCK_CLIENT) as a:
                keep_pace(stream, log, lambda: len(log.holders("a")) == QUEUES, "a consuming all four queues")
                with py_orderly(cluster, tmp_path, topic, group, "b", log.path, **FAST_LOCK_CLIENT) as b:
                    keep_pace(stream, log, lambda: log.holders("b") == {2, 3} and stream.rounds > 60,
                              "b consuming queues 2 and 3")
                    broker_log = BrokerLog(tmp_path / "cluster" / "broker.err")
                    a.child.kill_group()  # SIGKILL: no commit, no unlock; a's locks on 0 and 1 just age
                    killed_at = {q: max(s for n, qq, s, _, ok in log.read() if n == "a" and qq == q and ok)
                                 for q in (0, 1)}
                    keep_pace(stream, log, lambda: all(
                        any(n == "b" and qq == q and s > killed_at[q] for n, qq, s, _, ok in log.read() if ok)
                        for q in (0, 1)), "b carrying on past a's last message in queues 0 and 1")
                    for _ in range(10):
                        stream.round()
                    wait_for(lambda: log.consumed() == stream.rounds * QUEUES, 60, "every message consumed")
                    assert b.child.proc.poll() is None
                    for q in (0, 1):  # b got them only once the broker let a's locks expire
                        broker_log.wait(rf"lock of \('{topic}', {q}\) in group {group} expired from \S+@a: "
                                        rf"now \S+@b's", 5)
        finally:
            stream.close()
        taken = check_queue_order(log, stream.rounds, repeats_allowed=True)
        for q in (0, 1):  # b took over what a had, at or before a's last delivery (its commit), in order
            names = [n for n, _ in taken[q]]
            assert names[-1] == "b" and "a" in names and names.index("b") > names.index("a")


def test_a_killed_members_group_is_told_at_once_and_takes_its_queues_without_waiting_for_a_rebalance(
        cluster, tmp_path):
    """A member's connection closing makes the broker send NOTIFY_CONSUMER_IDS_CHANGED to the rest
    of its group, as RocketMQ's ClientHousekeepingService does: the survivor rebalances now, not at
    its next timer (20 s in the Java client, 300 s here), so the dead member's queues are consumed
    again at once (concurrent consumption: no locks to wait for)."""
    topic, group = _unique("NotifyOnClose"), _unique("cg-notify-close")
    stream, log = Stream(cluster, topic), ConsumedLog(tmp_path / "consumed.log")
    slow_timer = {"rebalance_interval": 300.0, "persist_interval": 0.5}
    try:
        with Consumer("py", cluster, tmp_path, topic, group, "a", log=str(log.path), kw=slow_timer) as a:
            keep_pace(stream, log, lambda: len(log.holders("a")) == QUEUES, "a consuming all four queues")
            # b's heartbeat made the broker tell a (that path existed before): a keeps 0 and 1
            with Consumer("py", cluster, tmp_path, topic, group, "b", log=str(log.path), kw=slow_timer):
                keep_pace(stream, log, lambda: log.holders("b") == {2, 3} and stream.rounds > 20,
                          "b consuming queues 2 and 3")
                a.child.kill_group()  # SIGKILL: its connection closes, no UNREGISTER_CLIENT
                keep_pace(stream, log, lambda: {0, 1} <= log.holders("b"), "b consuming a's queues 0 and 1")
                for _ in range(5):
                    stream.round()
                wait_for(lambda: log.consumed() == stream.rounds * QUEUES, 60, "every message consumed")
    finally:
        stream.close()


def test_a_failing_message_is_retried_in_place_and_past_max_reconsume_times_goes_to_the_dlq(cluster, tmp_path):
    topic, group = _unique("OrderlyFail"), _unique("cg-orderly-fail")
    stream, log = Stream(cluster, topic), ConsumedLog(tmp_path / "consumed.log")
    try:
        for _ in range(8):
            stream.round()
        # 1:3 fails twice, then passes; 2:2 always fails, and once failed at reconsumeTimes 3 (the
        # maximum) it is re-published with 4, which the broker puts in the DLQ
        with Consumer("py", cluster, tmp_path, topic, group, "a", orderly=True, log=str(log.path),
                      fail={"1:3": 2, "2:2": -1},
                      kw={"max_reconsume_times": 3, "suspend_current_queue_time_millis": 100}):
            wait_for(lambda: log.consumed() == 8 * QUEUES - 1, 60, "all but 2:2 consumed")
            wait_for(lambda: cluster.total(f"%DLQ%{group}", 1) == 1, 30, "2:2 in the dead letter queue")
    finally:
        stream.close()
    per_queue = {q: [(s, times, ok) for _, qq, s, times, ok in log.read() if qq == q] for q in range(QUEUES)}
    # suspended and offered again in place, the count going up; nothing of its queue before it
    assert per_queue[1] == [(0, 0, True), (1, 0, True), (2, 0, True), (3, 0, False), (3, 1, False), (3, 2, True),
                            *[(s, 0, True) for s in range(4, 8)]]
    assert per_queue[2] == [(0, 0, True), (1, 0, True), *[(2, t, False) for t in range(4)],
                            *[(s, 0, True) for s in range(3, 8)]]
    assert per_queue[0] == per_queue[3] == [(s, 0, True) for s in range(8)]
    assert cluster.total(f"%RETRY%{group}", 1) == 0  # retried in place, never sent back for later
    [dead] = cluster.records(f"%DLQ%{group}", 0)
    assert bytes(dead.body) == b"2:2" and dead.properties["RETRY_TOPIC"] == topic and dead.reconsume_times == 4


def test_the_cpp_orderly_consumer_locks_its_queues_and_consumes_each_in_order(cluster, tmp_path):
    topic, group = _unique("OrderlyCpp"), _unique("cg-orderly-cpp")
    stream = Stream(cluster, topic)
    try:
        for _ in range(30):
            stream.round()
        with Consumer("cpp", cluster, tmp_path, topic, group, "cpp-a", orderly=True) as c:
            got = c.wait(lambda g: len({m["body"] for m in g}) == 30 * QUEUES, 90, "every message")
            # it consumed under its broker locks (LOCK_BATCH_MQ): no one else of the group gets them
            assert cluster.lock_batch(group, "intruder", topic, range(QUEUES)) == set()
        # its shutdown unlocked them (UNLOCK_BATCH_MQ), well inside the broker's 60 s expiry
        assert cluster.lock_batch(group, "intruder", topic, range(QUEUES)) == set(range(QUEUES))
    finally:
        stream.close()
    for q in range(QUEUES):
        seqs = [int(m["body"].split(":")[1]) for m in got if m["queueId"] == q]
        assert seqs == list(range(30)), f"queue {q}: {seqs}"


def test_rebalance_lock_max_live_time_is_read_from_broker_conf_and_validated():
    assert load_broker_config({})[0].rebalanceLockMaxLiveTime == 60_000  # RocketMQ's default
    assert load_broker_config({"rebalanceLockMaxLiveTime": "3000"})[0].rebalanceLockMaxLiveTime == 3000
    for bad, why in (("0", "must be positive"), ("1m", "is not an integer")):
        with pytest.raises(StoreConfigError, match=f"rebalanceLockMaxLiveTime.*{why}"):
            load_broker_config({"rebalanceLockMaxLiveTime": bad})
