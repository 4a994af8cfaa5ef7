"""Master/slave replication with real processes on loopback: a name server, a master and slaves
(`broker serve`), their HA services, a TCP proxy on the HA link, kill -9, and a real client."""
from __future__ import annotations

import filecmp
import os
import random
import signal

import msgspec
import pytest

from broker.remoting import codes
from broker.store.message import decode_message
from tests.conftest import wait_for
from tests.helpers.ha_cluster import SEGMENT, Broker, NameServer, Proxy, call, send_all, wait_replicated
from tests.helpers.real_clients import Consumer, check_installed, produce


@pytest.fixture
def ns(tmp_path):
    n = NameServer(tmp_path)
    yield n
    n.stop()


@pytest.fixture
def brokers():
    started: list[Broker] = []
    yield started
    for b in reversed(started):
        b.stop()


def _bodies(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [rnd.randbytes(rnd.randint(10, 3000)) for _ in range(n)]


def _same_log(master: Broker, slave: Broker, end: int) -> None:
    """Byte-identical commit logs up to `end`, identical consume queues."""
    seg_names = sorted(os.listdir(master.store / "commitlog"))
    for name in seg_names:
        base = int(name)
        if base >= end:
            continue
        n = min(SEGMENT, end - base)
        with open(master.store / "commitlog" / name, "rb") as a, open(slave.store / "commitlog" / name, "rb") as b:
            assert a.read(n) == b.read(n), f"segment {name} differs"
    cq_m, cq_s = master.store / "consumequeue", slave.store / "consumequeue"
    for topic in os.listdir(cq_m):
        for q in os.listdir(cq_m / topic):
            files = os.listdir(cq_m / topic / q)
            match, mismatch, errors = filecmp.cmpfiles(cq_m / topic / q, cq_s / topic / q, files, shallow=False)
            assert not mismatch and not errors, f"consume queue {topic}/{q}: {mismatch or errors}"


def test_slave_log_is_byte_identical_and_a_restarted_or_fresh_slave_catches_up(tmp_path, ns, brokers):
    master = Broker(tmp_path, "master", ns.addr, "ASYNC_MASTER", 0).start()
    brokers.append(master)
    slave = Broker(tmp_path, "slave", ns.addr, "SLAVE", 1, f"haMasterAddress=127.0.0.1:{master.ha_port}\n").start()
    brokers.append(slave)
    assert all(r.code == codes.SUCCESS for r in send_all(master.port, "HaTopic", _bodies(1500, 1)))  # ~2.2 MiB
    wait_replicated(master, slave)
    # the slave, killed mid-stream, restarts from its own recovered log and catches up
    replies = send_all(master.port, "HaTopic", _bodies(800, 2))
    slave.kill9()
    assert all(r.code == codes.SUCCESS for r in replies + send_all(master.port, "HaTopic", _bodies(800, 3)))
    slave.start()
    end = wait_replicated(master, slave)
    assert master.info()["slaves"] == 1 and slave.info()["linked"] == 1
    # a fresh slave bootstraps the whole log, not only the newest segment (RocketMQ 4.x)
    fresh = Broker(tmp_path, "fresh", ns.addr, "SLAVE", 2, f"haMasterAddress=127.0.0.1:{master.ha_port}\n").start()
    brokers.append(fresh)
    assert wait_replicated(master, fresh) == end and end > 3 * SEGMENT
    for b in (fresh, slave, master):
        b.stop()
    _same_log(master, slave, end)
    _same_log(master, fresh, end)


def test_sync_master_killed_loses_no_acknowledged_message(tmp_path, ns, brokers):
    """SEND_OK from a SYNC_MASTER means a slave holds the message: kill -9 the master's whole
    process group and a real client (ali-ons) consumes every acknowledged message from the slave,
    which learned its master from the name server."""
    check_installed()
    master = Broker(tmp_path, "master", ns.addr, "SYNC_MASTER", 0).start()
    brokers.append(master)
    # no slave yet: a SYNC_MASTER cannot promise a copy, and says so at once
    assert send_all(master.port, "Orders", [b"lonely"])[0].code == codes.SLAVE_NOT_AVAILABLE
    slave = Broker(tmp_path, "slave", ns.addr, "SLAVE", 1).start()
    brokers.append(slave)
    wait_for(lambda: master.info()["slaves"] == 1, 40, "the slave to link (address from the name server)")
    sent = produce("ons", _Cluster(ns), "Orders", [{"tags": "T", "body": f"order-{i}"} for i in range(60)], tmp_path)
    acked = {s["msgId"] for s in sent if s.get("status") == "SEND_OK"}
    assert len(acked) == 60, sent
    # the slave copies the topic config from its master every 10 s: wait for it, then the crash
    wait_for(lambda: _slave_has_topic(slave, "Orders"), 30, "the slave to copy the topic config")
    master.kill9()
    wait_for(lambda: "0" not in (ns.route("Orders") or {"brokerDatas": [{"brokerAddrs": {"0": 1}}]})
             ["brokerDatas"][0]["brokerAddrs"], 30, "the route to hold the slave only")
    with Consumer("ons", _Cluster(ns), tmp_path, "Orders", "cg", "c1") as c:
        got = c.wait(lambda g: {m["body"] for m in g} >= {f"order-{i}" for i in range(60)}, 60,
                     "every acknowledged message from the slave")
    assert {m["body"] for m in got} == {f"order-{i}" for i in range(60)} | ({"lonely"} & {m["body"] for m in got})


def test_a_slave_serves_a_topic_its_master_created_just_before_dying(tmp_path, ns, brokers):
    """SYNC_MASTER + SLAVE: ali-ons auto-creates topic HA on the master and gets 3,000 SEND_OK, and
    the master's process group is killed before SlaveSynchronize could copy the topic's config
    (RocketMQ runs it 3 s after start, then every 10 s; here the slave's broker process is
    paused meanwhile, while its HA client and reput, processes of their own, keep replicating and
    acknowledging). A new consumer group reading from the first offset gets all 3,000 from the
    slave: the slave holds a config for every topic and queue it dispatched from the replicated
    log, and registers them with the name server at once."""
    check_installed()
    master = Broker(tmp_path, "master", ns.addr, "SYNC_MASTER", 0).start()
    brokers.append(master)
    slave = Broker(tmp_path, "slave", ns.addr, "SLAVE", 1).start()
    brokers.append(slave)
    wait_for(lambda: master.info()["slaves"] == 1, 40, "the slave to link")
    paused = slave.child.proc.pid  # the broker process only: not its service processes
    os.kill(paused, signal.SIGSTOP)
    try:
        sent = produce("ons", _Cluster(ns), "HA", [{"body": f"ha-{i}"} for i in range(3000)], tmp_path)
        assert sum(s.get("status") == "SEND_OK" for s in sent) == 3000, [s for s in sent if s.get("status") != "SEND_OK"][:3]
        assert not _slave_has_topic_on_disk(slave, "HA"), "the slave's config must not have been copied yet"
        master.kill9()
    finally:
        os.kill(paused, signal.SIGCONT)
    wait_for(lambda: "0" not in (ns.route("HA") or {"brokerDatas": [{"brokerAddrs": {"0": 1}}]})
             ["brokerDatas"][0]["brokerAddrs"], 30, "the route to hold the slave only")
    with Consumer("ons", _Cluster(ns), tmp_path, "HA", "cg-new", "c1",
                  consumeFromWhere="CONSUME_FROM_FIRST_OFFSET") as c:
        got = c.wait(lambda g: len({m["body"] for m in g}) >= 3000, 90, "all 3,000 from the slave")
    assert {m["body"] for m in got} == {f"ha-{i}" for i in range(3000)}
    assert "topics learned from the replicated log: HA" in slave.stderr()


def test_a_stalled_link_times_out_is_dropped_and_a_cut_one_is_slave_not_available(tmp_path, ns, brokers):
    quick = "haSendHeartbeatInterval=300\nhaHousekeepingInterval=2000\n"
    master = Broker(tmp_path, "master", ns.addr, "SYNC_MASTER", 0, "syncFlushTimeout=1000\n" + quick).start()
    brokers.append(master)
    proxy = Proxy(master.ha_port)
    try:
        slave = Broker(tmp_path, "slave", ns.addr, "SLAVE", 1,
                       f"haMasterAddress=127.0.0.1:{proxy.port}\n" + quick).start()
        brokers.append(slave)
        wait_for(lambda: master.info()["slaves"] == 1, 30, "the slave to link through the proxy")
        assert [r.code for r in send_all(master.port, "T", [b"a", b"b"])] == [codes.SUCCESS] * 2
        proxy.stall()  # the link stays up and silent: the copy never arrives
        r = send_all(master.port, "T", [b"stalled"])[0]
        assert r.code == codes.FLUSH_SLAVE_TIMEOUT, (r.code, r.remark)
        # no report for haHousekeepingInterval: the master drops the silent link
        wait_for(lambda: "no report for 2000 ms" in master.stderr(), 30, "the master to drop the silent link")
        proxy.cut()  # and the slave cannot come back: no wait at all for a send
        wait_for(lambda: master.info()["slaves"] == 0, 30, "the master to have no slave")
        r = send_all(master.port, "T", [b"cut"])[0]
        assert r.code == codes.SLAVE_NOT_AVAILABLE, (r.code, r.remark)
        proxy.heal()  # the slave reconnects by itself and catches up, including the unacknowledged
        wait_for(lambda: master.info()["slaves"] == 1, 30, "the slave to link again")
        assert send_all(master.port, "T", [b"healed"])[0].code == codes.SUCCESS
        wait_replicated(master, slave)
    finally:
        proxy.close()


def test_a_slave_ahead_of_its_master_is_refused_and_reported(tmp_path, ns, brokers):
    old = Broker(tmp_path, "old-master", ns.addr, "ASYNC_MASTER", 0).start()
    brokers.append(old)
    slave = Broker(tmp_path, "slave", ns.addr, "SLAVE", 1, f"haMasterAddress=127.0.0.1:{old.ha_port}\n").start()
    brokers.append(slave)
    send_all(old.port, "T", _bodies(50, 4))
    ahead = wait_replicated(old, slave)
    slave.stop()
    old.stop()
    # a new, empty master on the same HA port: the slave holds a log it never wrote
    new = Broker(tmp_path, "new-master", ns.addr, "ASYNC_MASTER", 0, ha_port=old.ha_port).start()
    brokers.append(new)
    slave.start()
    wait_for(lambda: "has diverged" in new.stderr(), 30, "the master to report the diverged slave")
    assert f"ends at {ahead}" in new.stderr()
    assert new.info()["commitLogMaxOffset"] == 0 and slave.info()["commitLogMaxOffset"] == ahead  # nobody overwrote
    assert new.info()["slaves"] == 0


def test_view_message_by_id_on_a_slave_finds_segments_the_ha_client_made(tmp_path, ns, brokers):
    """VIEW_MESSAGE_BY_ID (33) on a slave for a message in a segment its broker process has not
    mapped yet (the HA client made it): the stored record, not an internal error; an offset
    outside the log or inside a record is a clear error naming it. The slave's reput indexed the
    messages too: QUERY_MESSAGE (12) by key finds them there."""
    master = Broker(tmp_path, "master", ns.addr, "ASYNC_MASTER", 0).start()
    brokers.append(master)
    slave = Broker(tmp_path, "slave", ns.addr, "SLAVE", 1, f"haMasterAddress=127.0.0.1:{master.ha_port}\n").start()
    brokers.append(slave)
    bodies = _bodies(1500, 7)  # ~2.2 MiB: three segments, two of them made after the slave started
    replies = send_all(master.port, "ViewTopic", bodies)
    end = wait_replicated(master, slave)
    assert end > 2 * SEGMENT
    for i in (len(bodies) - 1, 0):
        phys = int(replies[i].ext["msgId"][16:], 16)
        r = call(slave.port, codes.VIEW_MESSAGE_BY_ID, {"offset": phys})
        assert r.code == codes.SUCCESS, r.remark
        msg = decode_message(bytes(r.body), 0)
        assert bytes(msg.body) == bodies[i] and msg.physical_offset == phys
        q = call(slave.port, codes.QUERY_MESSAGE, {"topic": "ViewTopic", "key": f"k{i}", "maxNum": 32,
                                                    "beginTimestamp": 0, "endTimestamp": 2**63 - 1})
        assert q.code == codes.SUCCESS and decode_message(bytes(q.body), 0).physical_offset == phys, q.remark
    for bad in (end + 100, 1, -5):
        r = call(slave.port, codes.VIEW_MESSAGE_BY_ID, {"offset": bad})
        assert r.code == codes.SYSTEM_ERROR and str(bad) in r.remark and "internal error" not in r.remark, r.remark


class _Cluster:
    """What tests/helpers/real_clients' drivers need of a cluster: the name server's address."""

    def __init__(self, ns: NameServer):
        self.namesrv = ns.addr


def _slave_has_topic_on_disk(slave: Broker, topic: str) -> bool:
    """The slave's persisted topic config (readable while its broker process is paused)."""
    path = slave.store / "config" / "topics.json"
    return path.exists() and topic in msgspec.json.decode(path.read_bytes()).get("topicConfigTable", {})


def _slave_has_topic(slave: Broker, topic: str) -> bool:
    r = call(slave.port, codes.GET_ALL_TOPIC_CONFIG)
    return topic in msgspec.json.decode(bytes(r.body)).get("topicConfigTable", {})
