"""An operator's migration in place: Apache RocketMQ 5.5.0's Java broker and ours each start on a
store the other wrote, in the same directory, with the same broker.conf keys, and serve it.

One store goes through four brokers in turn, each answer compared with the previous broker's:
1. the Java broker writes round J (every kind of record: tests/helpers/migration_workload.py) and
   is stopped cleanly (SIGTERM, as mqshutdown);
2. ours starts on it and answers as the Java broker did; it checks J's pending half back with its
   producer; it writes round O and is stopped cleanly;
3. the Java broker starts on it and answers as ours did; it checks O's pending half back; it writes
   round K and is killed (SIGKILL) once its offsets are persisted;
4. ours starts on the killed broker's store and answers as the Java broker did before the kill;
   it writes round Z and is killed (SIGKILL) once its offsets are persisted;
5. the Java broker starts on the store ours was killed on and answers as ours did before the kill.
"""
from __future__ import annotations

import struct
import subprocess
import sys

import pytest

from broker.store.message import decode_message
from tests.helpers import java_broker
from tests.helpers.ha_cluster import Broker, NameServer
from tests.helpers.java_broker import JavaBroker
from tests.helpers.migration_workload import CONF, SCHEDULE, Round, fastjson_decode, observe
from tests.helpers.procs import wait_until

pytestmark = pytest.mark.skipif(not java_broker.available(),
                                reason="needs java and Apache RocketMQ's jars (make build/javabroker/.copied)")

J, O, K, Z = Round("J", 1), Round("O", 2), Round("K", 3), Round("Z", 4)
# C1 only: the broker's start is most of this file's time, and C2 compiling it buys nothing here
JVM = [*java_broker.JVM_BROKER, "-XX:TieredStopAtLevel=1"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("migrate")
    store = root / "store"
    ns = NameServer(root)
    try:
        yield root, ns, f"storePathRootDir={store}\n{CONF}", store
    finally:
        ns.stop()


@pytest.fixture(scope="module")
def java_wrote(env):
    root, ns, conf, _ = env
    jb = JavaBroker(root, "java-1", ns.addr, extra=conf, jvm=JVM)
    try:
        jb.start()
        J.write(jb.port)
        answers = observe(jb.port, [J])
    finally:
        jb.stop()
    answers["indexFiles"] = sorted(p.name for p in (env[3] / "index").iterdir())
    return answers


@pytest.fixture(scope="module")
def ours_on_java(env, java_wrote):
    root, ns, conf, _ = env
    ob = Broker(root, "ours-1", ns.addr, "ASYNC_MASTER", 0, extra=conf)
    try:
        ob.start()
        served = observe(ob.port, [J])
        index_files = sorted(p.name for p in (env[3] / "index").iterdir())
        check = J.resolve_pending(ob.port)
        checked = observe(ob.port, [J])
        O.write(ob.port)
        wrote = observe(ob.port, [J, O])
    finally:
        ob.stop()
    return {"served": served, "check": check, "checked": checked, "wrote": wrote, "stderr": ob.stderr(),
            "indexFiles": index_files}


@pytest.fixture(scope="module")
def java_on_ours(env, ours_on_java):
    root, ns, conf, store = env
    jb = JavaBroker(root, "java-2", ns.addr, extra=conf, jvm=JVM)
    try:
        jb.start()
        rival = Broker(root, "ours-rival", ns.addr, "ASYNC_MASTER", 0, extra=conf)
        refused = subprocess.run([sys.executable, "-m", "broker.cli", "serve", "-c", str(rival.conf)],
                                 capture_output=True, text=True, timeout=60)
        served = observe(jb.port, [J, O])
        check = O.resolve_pending(jb.port)
        checked = observe(jb.port, [O])
        K.write(jb.port)
        wrote = observe(jb.port, [J, O, K])
        # what a SIGKILL keeps is what the broker persisted: wait for round K's offsets on disk
        wait_until(lambda: persisted(store, K, wrote), 30, "round K's offsets in config/*.json")
        jb.kill9()
    finally:
        jb.stop()
    return {"served": served, "check": check, "checked": checked, "wrote": wrote, "refused": refused}


@pytest.fixture(scope="module")
def ours_after_kill(env, java_on_ours):
    root, ns, conf, store = env
    ob = Broker(root, "ours-2", ns.addr, "ASYNC_MASTER", 0, extra=conf)
    try:
        ob.start()
        served = observe(ob.port, [J, O, K])
        Z.write(ob.port)
        wrote = observe(ob.port, [J, O, K, Z])
        wait_until(lambda: persisted(store, Z, wrote), 30, "round Z's offsets in config/*.json")
        ob.kill9()
    finally:
        ob.stop()
    return {"served": served, "wrote": wrote, "stderr": ob.stderr()}


@pytest.fixture(scope="module")
def java_after_kill(env, ours_after_kill):
    root, ns, conf, _ = env
    jb = JavaBroker(root, "java-3", ns.addr, extra=conf, jvm=JVM)
    try:
        jb.start()
        served = observe(jb.port, [J, O, K, Z])
    finally:
        jb.stop()
    return {"served": served}


def persisted(store, rd: Round, answers: dict) -> bool:
    """Whether config/ holds the round's consumer offsets and every delay offset as answered."""
    try:
        offsets = fastjson_decode((store / "config" / "consumerOffset.json").read_bytes())["offsetTable"]
        delay = fastjson_decode((store / "config" / "delayOffset.json").read_bytes())["offsetTable"]
    except (OSError, ValueError):
        return False
    want = {int(k): v for k, v in answers["delayOffsets"][1].items()}
    committed = answers["consumerOffsets"]
    return all(str(offsets.get(f"{t}@{rd.group}", {}).get(str(q))) == committed[f"{rd.group}@{t}/{q}"][1]
               for t, q in rd.offsets) and {int(k): v for k, v in delay.items()} == want


def assert_same(got: dict, want: dict) -> None:
    """Answer by answer, record by record, field by field."""
    assert set(got["queues"]) == set(want["queues"])
    for name, w in want["queues"].items():
        g = got["queues"][name]
        for field in ("code", "minOffset", "maxOffset"):
            assert g[field] == w[field], (name, field)
        assert len(g["records"]) == len(w["records"]), name
        for i, (gm, wm) in enumerate(zip(g["records"], w["records"])):
            for field, value in wm.items():
                assert gm[field] == value, (name, i, field)
    for section in ("consumerOffsets", "query", "view"):
        assert set(got[section]) == set(want[section]), section
        for key, value in want[section].items():
            assert got[section][key] == value, (section, key)
    assert got["schedule"] == want["schedule"]
    assert got["delayOffsets"] == want["delayOffsets"]


def bodies(answers: dict, queue: str) -> list[bytes]:
    return [m["body"] for m in answers["queues"][queue]["records"]]


def test_java_broker_wrote_every_kind_of_record(java_wrote):
    """The reference answers hold what the workload wrote: the rest of the file compares to them."""
    a = java_wrote
    assert bodies(a, "JA/0") == [b"JA-plain-0", b"JA-plain-4", b"JA-delay-1s"]
    assert bodies(a, "JB/1") == [b"JB-plain-1", b"JB-plain-3", b"JB-plain-5", b"JB-batch-0", b"JB-batch-1",
                                 b"JB-batch-2"]
    assert bodies(a, "JTx/0") == [b"JTx-commit"]
    assert bodies(a, "%RETRY%J-cg/0") == [b"JA-to-retry"]
    assert bodies(a, "%DLQ%J-cg/0") == [b"JA-to-dlq"]
    assert a["queues"]["%DLQ%J-cg/0"]["records"][0]["reconsumeTimes"] == 17
    assert a["schedule"][16] == 1  # the 1 h message is still scheduled
    assert a["delayOffsets"][0] == 0 and a["delayOffsets"][1][17] == 0 and a["delayOffsets"][1][1] == 2
    assert a["consumerOffsets"]["J-cg@JA/3"] == (0, "4")
    assert [b for _, b in a["query"]["JA#J-shared"][1]] == [f"JA-plain-{i}".encode() for i in range(6)]
    assert a["query"]["JTx#J-tx-rollback"][1] == [] and a["query"]["JTx#J-tx-pending"][1] == []
    assert a["query"][f"{SCHEDULE}#J-delay-1h"][1][0][1] == b"JA-delay-1h"


def test_ours_serves_the_java_store(java_wrote, ours_on_java):
    assert_same(ours_on_java["served"], java_wrote)


def test_ours_recovers_a_clean_java_stop_as_rocketmq_does(java_wrote, ours_on_java):
    """No abort file and none of our offsets in the checkpoint: the end of the log is found from the
    third-last segment (RocketMQ's recoverNormally) and the Java broker's index files are kept
    (served above: the index queries answered alike)."""
    assert "recovered commit log after another broker's clean stop: scanned" in ours_on_java["stderr"]
    assert "recovered (clean stop)" in ours_on_java["stderr"]
    assert len(java_wrote["indexFiles"]) == 1
    assert ours_on_java["indexFiles"] == java_wrote["indexFiles"]


def test_ours_checks_back_the_java_pending_half(ours_on_java):
    assert ours_on_java["check"] == {"topic": "JTx", "body": b"JTx-pending",
                                     "uniq": J.uniq(302), "realTopic": "JTx"}
    checked = ours_on_java["checked"]
    assert bodies(checked, "JTx/0") == [b"JTx-commit", b"JTx-pending"]
    assert [b for _, b in checked["query"]["JTx#J-tx-pending"][1]] == [b"JTx-pending"]
    assert checked["query"]["JTx#J-tx-rollback"][1] == []


def test_java_serves_our_store(ours_on_java, java_on_ours):
    assert_same(java_on_ours["served"], ours_on_java["wrote"])


def test_ours_refuses_a_store_the_java_broker_runs_on(env, java_on_ours):
    """The Java broker's lock is an fcntl record lock on the `lock` file's first byte; ours takes
    the same lock (besides its flock), so it cannot start beside it on one store."""
    refused = java_on_ours["refused"]
    assert refused.returncode != 0
    assert f"store {env[3]} is in use by another broker (lock file held)" in refused.stderr


def test_java_checks_back_our_pending_half(java_on_ours):
    assert java_on_ours["check"] == {"topic": "OTx", "body": b"OTx-pending",
                                     "uniq": O.uniq(302), "realTopic": "OTx"}
    assert bodies(java_on_ours["checked"], "OTx/0") == [b"OTx-commit", b"OTx-pending"]


def test_ours_serves_the_store_of_a_killed_java_broker(java_on_ours, ours_after_kill):
    assert_same(ours_after_kill["served"], java_on_ours["wrote"])


def test_java_serves_the_store_of_our_killed_broker(ours_after_kill, java_after_kill):
    assert_same(java_after_kill["served"], ours_after_kill["wrote"])


def test_delayed_entries_carry_their_delivery_time(env, java_after_kill):
    """Each broker's dispatch wrote (or, after the kill, rewrote) SCHEDULE_TOPIC_XXXX's tagsCode as
    RocketMQ reads it: store time + the level's delay (a tag hash there made the Java broker deliver
    our 1 h messages at once)."""
    store = env[3]
    log = (store / "commitlog" / "00000000000000000000").read_bytes()
    for queue, delay in ((0, 1000), (16, 3_600_000)):
        cq = (store / "consumequeue" / SCHEDULE / str(queue) / "00000000000000000000").read_bytes()
        entries = [struct.unpack_from(">qiq", cq, i) for i in range(0, len(cq), 20)]
        entries = [e for e in entries if e[1] > 0]
        assert len(entries) == (8 if queue == 0 else 4)
        for phys, size, tags_code in entries:
            m = decode_message(log, phys)
            assert (m.size, m.topic, m.properties["DELAY"]) == (size, SCHEDULE, "1" if queue == 0 else "17")
            assert tags_code == m.store_timestamp + delay, (queue, phys)
