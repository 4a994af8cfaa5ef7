"""The same HA wire both ways: Apache RocketMQ 5.5.0's Java broker (unmodified, tests/helpers/
java_broker.py) as the master of our slave, and as the slave of our master, on loopback.

Each pair proves what a SYNC_MASTER promises: every SEND_OK came after the slave held the
message (the slave's offset, read at once, covers every acknowledged record, and a slave that
cannot acknowledge turns the next send into FLUSH_SLAVE_TIMEOUT), the slave's commit log is
byte-identical to the master's, and after the master's kill -9 PULL_MESSAGE on the slave returns
every acknowledged message. docs/ha.md "With Apache RocketMQ's broker" has the findings."""
from __future__ import annotations

import os
import random
import signal

import pytest

from broker.remoting import codes
from broker.store.message import decode_message
from tests.conftest import wait_for
from tests.helpers.controller_mode import ControllerModeGroup
from tests.helpers.ha_cluster import SEGMENT, Broker, NameServer, Proxy, call, send_all
from tests.helpers.java_broker import JavaBroker, JavaController, available

pytestmark = pytest.mark.skipif(not available(), reason="needs java and build/javabroker (make build/javabroker/.copied)")
QUEUES = 4
# quick heartbeats and metadata checks, RocketMQ's 10 s heartbeat timeout: a machine busy with
# JVMs must not make the controller think our master died
CONTROLLER_MODE = "enableControllerMode=true\nallAckInSyncStateSet=true\nbrokerHeartbeatInterval=200\nsyncBrokerMetadataPeriod=1000\n"


def _bodies(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [rnd.randbytes(rnd.randint(10, 3000)) for _ in range(n)]


def _phys(reply) -> int:
    """The commit-log offset in a SEND_OK's msgId (store host 8 bytes, then the offset)."""
    return int(reply.ext["msgId"][16:], 16)


def _record_end(store, phys: int) -> int:
    """Where the record at `phys` ends, read from the commit-log file itself."""
    base = phys - phys % SEGMENT
    with open(store / "commitlog" / f"{base:020d}", "rb") as f:
        f.seek(phys - base)
        return phys + int.from_bytes(f.read(4), "big")


def _same_commit_log(master_store, slave_store, end: int) -> None:
    """Byte-identical commit-log files over [0, end)."""
    for base in range(0, end, SEGMENT):
        n = min(SEGMENT, end - base)
        name = f"{base:020d}"
        with open(master_store / "commitlog" / name, "rb") as a, open(slave_store / "commitlog" / name, "rb") as b:
            assert a.read(n) == b.read(n), f"commit-log segment {name} differs within the written range"


def _pull_all(port: int, topic: str) -> list[bytes]:
    """PULL_MESSAGE (FLAG_SUBSCRIPTION, no suspension) every queue from offset 0 until the broker has no more."""
    bodies = []
    for q in range(QUEUES):
        offset = 0
        while True:
            r = call(port, codes.PULL_MESSAGE, {
                "consumerGroup": "interop-cg", "topic": topic, "queueId": q, "queueOffset": offset, "maxMsgNums": 32,
                "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
                "expressionType": "TAG"})
            if r.code in (codes.PULL_NOT_FOUND, codes.PULL_OFFSET_MOVED) and int(r.ext.get("nextBeginOffset", -1)) <= offset:
                break
            assert r.code == codes.SUCCESS, (q, offset, r.code, r.remark)
            pos, body = 0, bytes(r.body)
            while pos < len(body):
                m = decode_message(body, pos)
                bodies.append(bytes(m.body))
                pos += m.size
            offset = int(r.ext["nextBeginOffset"])
    return bodies


def _wait_stopped(pid: int) -> None:
    """Until every thread of `pid` is stopped. SIGSTOP takes effect asynchronously: on a loaded
    machine the JVM's HA thread could still read a frame and acknowledge it after kill() returned."""
    def stopped() -> bool:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                states.append(open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                continue  # a thread that just exited
        return all(st in "tT" for st in states)
    wait_for(stopped, 10, f"every thread of process {pid} to stop")


def _check_acked(replies, bodies, slave_offset_at_ack: int, master_store) -> set[bytes]:
    """Every reply SEND_OK, and the slave held each acknowledged record when the answers came."""
    assert [r.code for r in replies] == [codes.SUCCESS] * len(replies), {(r.code, r.remark) for r in replies}
    last = max(_record_end(master_store, _phys(r)) for r in replies)
    assert slave_offset_at_ack >= last, f"a SEND_OK came before the slave held the bytes ({slave_offset_at_ack} < {last})"
    return set(bodies)


def test_java_sync_master_replicates_to_our_slave(tmp_path):
    """Java SYNC_MASTER (inSyncReplicas=2, so it really waits for a slave's ack) -> our SLAVE, both
    registered with our name server (the Java name server serves mixed groups as well, but its 4 s
    start is not needed here: our slave is given the master's HA address)."""
    ns = NameServer(tmp_path)
    master = slave = proxy = None
    try:
        master = JavaBroker(tmp_path, "jmaster", ns.addr, "SYNC_MASTER", 0,
                            "inSyncReplicas=2\nslaveTimeout=1000\n"
                            # its default 200 ms sheds sends queued behind the slave's acks on a busy machine
                            "waitTimeMillsInSendQueue=10000\n").start()
        # no slave: RocketMQ 5.x waits slaveTimeout for one (ours answers SLAVE_NOT_AVAILABLE at once)
        lonely = send_all(master.port, "Interop", [b"lonely"], QUEUES)[0]
        assert lonely.code == codes.FLUSH_SLAVE_TIMEOUT, (lonely.code, lonely.remark)
        proxy = Proxy(master.ha_port)  # the HA link through it, to be able to stall it
        slave = Broker(tmp_path, "slave", ns.addr, "SLAVE", 1, f"haMasterAddress=127.0.0.1:{proxy.port}\n").start()
        wait_for(lambda: slave.info()["linked"] == 1, 30, "our slave to link to the Java master")
        acked: set[bytes] = set()
        for seed in (1, 2):  # two rounds: over 1 MiB, so the slave rolls a segment where the master did
            bodies = _bodies(500, seed)
            replies = send_all(master.port, "Interop", bodies, QUEUES)
            acked |= _check_acked(replies, bodies, slave.info()["received"], master.store)
        # the sync path really waits: with the link stalled the Java master cannot get our ack
        proxy.stall()
        stalled = send_all(master.port, "Interop", [b"stalled"], QUEUES)[0]
        assert stalled.code == codes.FLUSH_SLAVE_TIMEOUT, (stalled.code, stalled.remark)
        proxy.heal()
        replies = send_all(master.port, "Interop", [b"after"], QUEUES)
        acked |= _check_acked(replies, [b"after"], slave.info()["received"], master.store)
        end = master.info()["commitLogMaxOffset"]
        assert end > SEGMENT
        wait_for(lambda: slave.info()["dispatchedOffset"] >= end, 30, "our slave to dispatch everything")
        master.kill9()
        got = _pull_all(slave.port, "Interop")
        assert acked <= set(got), f"{len(acked - set(got))} acknowledged messages missing on our slave"
        assert len(got) == len(set(got)) and set(got) <= acked | {b"stalled", b"lonely"}
        slave.stop()
        _same_commit_log(master.store, slave.store, end)
    finally:
        if slave is not None:
            slave.stop()
        if master is not None:
            master.kill9()  # a JVM's orderly shutdown takes 15 s; nothing here needs it
        if proxy is not None:
            proxy.close()
        ns.stop()


def test_our_sync_master_replicates_to_a_java_slave(tmp_path):
    """Our SYNC_MASTER -> Java SLAVE (5.5.0 DefaultHAClient), which finds our HA port through our
    name server's registration answer, as RocketMQ's slaves do."""
    ns = NameServer(tmp_path)
    master = slave = None
    try:
        master = Broker(tmp_path, "master", ns.addr, "SYNC_MASTER", 0, "syncFlushTimeout=1000\n").start()
        lonely = send_all(master.port, "Interop", [b"lonely"], QUEUES)[0]
        assert lonely.code == codes.SLAVE_NOT_AVAILABLE, (lonely.code, lonely.remark)
        # RocketMQ 5.x's slave refuses every pull ("[REJECTREQUEST]system busy") unless slaveReadEnable
        slave = JavaBroker(tmp_path, "jslave", ns.addr, "SLAVE", 1, "slaveReadEnable=true\n").start()
        # the Java slave reports its offset only haSendHeartbeatInterval (5 s) after connecting; our
        # master counts it from the connection, and a send before that report waits for it
        wait_for(lambda: master.info()["slaves"] == 1, 30, "the Java slave to link to our master")
        sinfo = slave.info  # JavaBroker.info waits for its first statistics sample
        sinfo()
        acked: set[bytes] = set()
        for seed in (3, 4):
            bodies = _bodies(500, seed)
            replies = send_all(master.port, "Interop", bodies, QUEUES)
            acked |= _check_acked(replies, bodies, sinfo()["commitLogMaxOffset"], master.store)
        # the sync path really waits: a frozen Java slave cannot ack, our master answers so
        os.kill(slave.pid, signal.SIGSTOP)
        try:
            _wait_stopped(slave.pid)
            stalled = send_all(master.port, "Interop", [b"stalled"], QUEUES)[0]
        finally:
            os.kill(slave.pid, signal.SIGCONT)
        assert stalled.code == codes.FLUSH_SLAVE_TIMEOUT, (stalled.code, stalled.remark)
        replies = send_all(master.port, "Interop", [b"after"], QUEUES)
        acked |= _check_acked(replies, [b"after"], sinfo()["commitLogMaxOffset"], master.store)
        end = master.info()["commitLogMaxOffset"]
        assert end > SEGMENT
        # RocketMQ 5.x's slave copies its master's topic config only once a minute (SlaveSynchronize)
        # and answers TOPIC_NOT_EXIST meanwhile; an operator creates it there (mqadmin updateTopic -b)
        r = call(slave.port, codes.UPDATE_AND_CREATE_TOPIC, {
            "topic": "Interop", "defaultTopic": "TBW102", "readQueueNums": QUEUES, "writeQueueNums": QUEUES,
            "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
        assert r.code == codes.SUCCESS, (r.code, r.remark)
        wait_for(lambda: sinfo()["dispatchBehindBytes"] == 0, 30, "the Java slave to dispatch everything")
        master.kill9()
        got = _pull_all(slave.port, "Interop")
        assert acked <= set(got), f"{len(acked - set(got))} acknowledged messages missing on the Java slave"
        assert len(got) == len(set(got)) and set(got) <= acked | {b"stalled", b"lonely"}
        slave.kill9()  # its commit log is in the page cache: no need for the JVM's 15 s shutdown
        _same_commit_log(master.store, slave.store, end)
    finally:
        if slave is not None:
            slave.kill9()
        if master is not None:
            master.stop()
        ns.stop()


def test_rocketmq_controller_elects_our_broker_and_a_java_slave_cannot_follow_it(tmp_path):
    """Controller mode with RocketMQ 5.5.0's controller (ControllerStartup), our broker and a Java
    broker in one group. The controller protocol meets: our broker applies for its id the 5.1 way
    (GET_NEXT_BROKER_ID, APPLY_BROKER_ID, then REGISTER_BROKER with it: that controller hands out
    none on registration), is elected master and takes sends; the Java broker registers, heartbeats
    and is told to follow it. The HA wire does not: the Java AutoSwitchHAClient opens with a
    HANDSHAKE frame our master does not speak, and our master says so at once and serves alone."""
    ns = NameServer(tmp_path)
    controller = JavaController(tmp_path, "scanInactiveMasterInterval=1000\n")
    ours = java = None
    try:
        ours = Broker(tmp_path, "ours", ns.addr, "ASYNC_MASTER", 0,
                      f"controllerAddr={controller.addr}\n{CONTROLLER_MODE}").start()
        wait_for(lambda: ControllerModeGroup.role(ours).get("controllerRole") == "master", 30,
                 "our broker to be elected master by RocketMQ's controller")
        assert (ours.store / "brokerIdentity").read_text() == "DefaultCluster#broker-a#1"
        java = JavaBroker(tmp_path, "java", ns.addr, "SLAVE", -1, f"controllerAddr={controller.addr}\n{CONTROLLER_MODE}")
        java.start()
        refusal = "opened with RocketMQ 5's AutoSwitch HA HANDSHAKE frame"
        wait_for(lambda: refusal in ours.stderr(), 30, "the Java slave's HANDSHAKE to be refused")
        # the id in its HANDSHAKE is the one the controller gave it: the group's second
        assert f"slave 2 {refusal}" in ours.stderr()
        info = ours.info()
        assert info["controllerBrokerId"] == 1 and str(info["syncStateSet"]) == "1", info
        replies = send_all(ours.port, "Mixed", _bodies(20, 5), QUEUES)
        assert {r.code for r in replies} == {codes.SUCCESS}, {(r.code, r.remark) for r in replies}
    finally:
        if java is not None:
            java.kill9()
        if ours is not None:
            ours.kill9()
        controller.stop()
        ns.stop()
