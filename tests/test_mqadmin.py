"""Apache RocketMQ's mqadmin (rocketmq-tools 5.5.0, unmodified, one JVM per command) against a
`broker namesrv` and a `broker serve` process: each command's printed output read for our broker's
real figures (addresses, queue numbers, offsets, message ids, bodies). mqadmin prints its failures
and still exits 0, so every assertion reads what it printed. docs/mqadmin.md has the table."""
from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time

import msgspec
import pytest

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from tests.conftest import wait_for
from tests.helpers import mqadmin as mq
from tests.helpers.controller_mode import ControllerModeGroup
from tests.helpers.ha_cluster import Broker, NameServer, call, runtime
from tests.helpers.procs import REPO

SENT_KEYS = ("msgId", "offsetMsgId", "queue", "queueOffset")


@pytest.fixture(scope="module")
def jars():
    assert mq.available(), f"mqadmin's jars or its launcher are missing from {mq.LIB.parent}: run `make clients`"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, jars):
    root = tmp_path_factory.mktemp("mqadmin")
    ns = NameServer(root)
    broker = Broker(root, "b0", ns.addr, "ASYNC_MASTER", 0).start()
    wait_for(lambda: ns.route("TBW102") is not None, 30, "the broker's registration")
    try:
        yield ns, broker, root
    finally:
        broker.stop()
        ns.stop()


def admin(cluster, *args: str) -> mq.Result:
    ns, _, root = cluster
    return mq.mqadmin(ns.addr, *args, home=root / "mqadmin-home")


def produce(ns_addr: str, topic: str, count: int, tags: str, keys: str, body: str) -> list[dict]:
    """`broker produce`, a real producer process; its SEND_OK lines as dicts (msgId, offsetMsgId, queue id, queueOffset)."""
    p = subprocess.run([sys.executable, "-m", "broker.cli", "produce", "-n", ns_addr, "--topic", topic, "--tags", tags,
                        "--keys", keys, "--body", body, "--count", str(count), "--group", "mqadmin_pg"],
                       capture_output=True, text=True, timeout=60, cwd=str(REPO))
    sent = [dict(kv.split("=", 1) for kv in line.split()[1:]) for line in p.stdout.splitlines()
            if line.startswith("SEND_OK")]
    assert len(sent) == count, p.stdout + p.stderr
    for s in sent:
        s["qid"] = int(s["queue"].rsplit(":", 1)[1])
    return sent


def consume(ns_addr: str, topic: str, group: str, count: int) -> None:
    """`broker consume --from-first`: a real push consumer that commits its offsets when it exits."""
    p = subprocess.run([sys.executable, "-m", "broker.cli", "consume", "-n", ns_addr, "--topic", topic, "--group", group,
                        "--count", str(count), "--from-first", "--timeout", "60"],
                       capture_output=True, text=True, timeout=90, cwd=str(REPO))
    assert len(p.stdout.splitlines()) == count, p.stdout + p.stderr


def rows(out: str, first: str) -> list[list[str]]:
    """The whitespace-split lines of a table that start with `first`."""
    return [line.split() for line in out.splitlines() if line.split()[:1] == [first]]


def test_cluster_list_and_broker_status(cluster):
    ns, broker, _ = cluster
    produce(ns.addr, "MqaStatus", 3, "TagS", "KeyS", "status")
    r = admin(cluster, "clusterList")
    assert r.out.startswith("#Cluster Name"), r
    (row,) = rows(r.out, "DefaultCluster")
    # cluster, broker name, id, address, version, InTPS(queue,wait), OutTPS(...), timer, PCWait, hour, space, activated
    assert row[:4] == ["DefaultCluster", "broker-a", "0", f"127.0.0.1:{broker.port}"], r
    assert re.fullmatch(r"\d+\.\d\d\(0,0ms\)", row[5]) and re.fullmatch(r"\d+\.\d\d\(0,0ms\|N,Nms\)", row[6]), r
    assert row[-1] == "true", r
    info = runtime(broker.port)
    assert float(row[-2]) == pytest.approx(float(info["commitLogDiskRatio"]), abs=0.01), r
    # the oldest message is the one just sent: well under an hour old
    assert 0 <= float(row[-3]) < 1, r

    r = admin(cluster, "getNamesrvConfig")
    assert r.out.splitlines()[0] == f"============{ns.addr}============", r
    assert re.search(rf"^listenPort\s+=  {ns.port}$", r.out, re.M), r
    assert re.search(r"^scanNotActiveBrokerInterval\s+=  10000$", r.out, re.M), r

    r = admin(cluster, "brokerStatus", "-b", f"127.0.0.1:{broker.port}")
    table = dict(re.split(r"\s*:\s", line, maxsplit=1) for line in r.out.splitlines() if " : " in line)
    info = runtime(broker.port)
    assert int(table["commitLogMaxOffset"]) == info["commitLogMaxOffset"] > 0, r
    assert table["brokerRole"] == "ASYNC_MASTER" and table["brokerActive"] == "true", r
    assert len(table["putTps"].split()) == 3, r


def test_broker_config_get_and_update(cluster):
    _, broker, _ = cluster
    addr = f"127.0.0.1:{broker.port}"
    r = admin(cluster, "getBrokerConfig", "-b", addr)
    conf = dict(re.split(r"\s*=\s\s", line, maxsplit=1) for line in r.out.splitlines() if "=  " in line)
    assert r.out.startswith(f"============{addr}============"), r
    assert conf["brokerName"] == "broker-a" and conf["brokerClusterName"] == "DefaultCluster", r
    assert conf["listenPort"] == str(broker.port) and conf["autoCreateTopicEnable"] == "true", r

    # a key the running broker reads again: a send to an unknown topic is refused from now on
    r = admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "autoCreateTopicEnable", "-v", "false")
    assert r.out.strip() == f"update broker config success, {addr}", r
    try:
        r = admin(cluster, "getBrokerConfig", "-b", addr)
        assert re.search(r"^autoCreateTopicEnable\s+=  false$", r.out, re.M), r
        ext = {"a": "pg", "b": "MqaNeverCreated", "c": "TBW102", "d": "4", "e": "0", "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false"}
        assert call(broker.port, codes.SEND_MESSAGE_V2, ext, b"x").code == codes.TOPIC_NOT_EXIST
    finally:
        admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "autoCreateTopicEnable", "-v", "true")
    # a key read only at start is refused naming it, rather than reported as changed
    r = admin(cluster, "updateBrokerConfig", "-b", addr, "-k", "flushDiskType", "-v", "SYNC_FLUSH")
    assert "UpdateBrokerConfigSubCommand command failed" in r.err and "flushDiskType: read only when the broker starts" in r.err, r


def test_topic_commands(cluster):
    ns, broker, _ = cluster
    addr = f"127.0.0.1:{broker.port}"
    r = admin(cluster, "updateTopic", "-c", "DefaultCluster", "-t", "MqaTopic", "-r", "3", "-w", "3")
    assert r.out.splitlines()[0] == f"create topic to {addr} success.", r
    assert "TopicConfig [topicName=MqaTopic, readQueueNums=3, writeQueueNums=3, perm=RW-" in r.out, r
    wait_for(lambda: ns.route("MqaTopic") is not None, 30, "MqaTopic's route")
    assert "MqaTopic" in admin(cluster, "topicList").out.split()

    route = json.loads(re.sub(r"(\s)(\d+):", r'\1"\2":', admin(cluster, "topicRoute", "-t", "MqaTopic").out))
    assert route["brokerDatas"] == [{"brokerAddrs": {"0": addr}, "brokerName": "broker-a", "cluster": "DefaultCluster",
                                     "enableActingMaster": False}]
    assert route["queueDatas"] == [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 3, "topicSysFlag": 0,
                                    "writeQueueNums": 3}]

    sent = produce(ns.addr, "MqaTopic", 7, "TagT", "KeyT", "topic-status")
    r = admin(cluster, "topicStatus", "-t", "MqaTopic")
    status = {int(row[1]): row for row in rows(r.out, "broker-a")}
    assert sorted(status) == [0, 1, 2], r
    for qid, row in status.items():
        assert row[2:4] == ["0", str(sum(1 for s in sent if s["qid"] == qid))], r
    # mqadmin prints 0.0 against any broker: examineTopicStats merges the brokers' offset tables
    # only; the broker's body has the minute's rate of TOPIC_PUT_NUMS (7 messages within it)
    assert "Topic Put TPS: 0.0" in r.out, r
    stats = call(broker.port, codes.GET_TOPIC_STATS_INFO, {"topic": "MqaTopic"})
    assert re.search(rb'"topicPutTps":([0-9.e-]+)', bytes(stats.body)) and \
        float(re.search(rb'"topicPutTps":([0-9.e-]+)', bytes(stats.body)).group(1)) > 0, stats

    r = admin(cluster, "updateTopicPerm", "-c", "DefaultCluster", "-t", "MqaTopic", "-p", "4")
    assert f"update topic perm from 6 to 4 in {addr} success." in r.out, r
    wait_for(lambda: ns.route("MqaTopic")["queueDatas"][0]["perm"] == 4, 30, "the read-only route")

    # a topic holding messages goes as on RocketMQ: its config, its route, its consume queues (its
    # messages can no longer be pulled); made again, it starts empty, its queue offsets from 0
    r = admin(cluster, "deleteTopic", "-c", "DefaultCluster", "-t", "MqaTopic")
    assert r.out.splitlines() == ["delete topic [MqaTopic] from cluster [DefaultCluster] success.",
                                  "delete topic [MqaTopic] from NameServer success."], r
    assert "MqaTopic" not in admin(cluster, "topicList").out.split()
    assert not (broker.store / "consumequeue" / "MqaTopic").exists()
    offsets = [call(broker.port, codes.GET_MAX_OFFSET, {"topic": "MqaTopic", "queueId": q}).ext["offset"] for q in range(3)]
    assert offsets == ["0", "0", "0"]
    # made again by a send (auto-creation, 4 queues): one message per queue, each at offset 0, and
    # a pull from 0 finds it alone
    again = produce(ns.addr, "MqaTopic", 4, "TagT", "KeyT", "made-again")
    assert sorted(int(s["queueOffset"]) for s in again) == [0, 0, 0, 0], again
    pulled = call(broker.port, codes.PULL_MESSAGE, {"consumerGroup": "MqaAfterDelete", "topic": "MqaTopic", "queueId": 0,
                                                    "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 0})
    assert pulled.code == codes.SUCCESS and bytes(pulled.body).count(b"made-again") == 1, pulled
    # an empty one goes from the broker and the name server
    admin(cluster, "updateTopic", "-c", "DefaultCluster", "-t", "MqaEmpty")
    wait_for(lambda: ns.route("MqaEmpty") is not None, 30, "MqaEmpty's route")
    r = admin(cluster, "deleteTopic", "-c", "DefaultCluster", "-t", "MqaEmpty")
    assert r.out.splitlines() == ["delete topic [MqaEmpty] from cluster [DefaultCluster] success.",
                                  "delete topic [MqaEmpty] from NameServer success."], r
    assert "MqaEmpty" not in admin(cluster, "topicList").out.split()
    # the broker's next registration does not bring it back
    assert "MqaEmpty" not in msgspec.json.decode(bytes(call(broker.port, codes.GET_ALL_TOPIC_CONFIG).body))[
        "topicConfigTable"]


class OnlineClient:
    """A client connection that sent one HEART_BEAT (a producer group and/or a consumer group) and
    stays open until closed: the broker counts it online meanwhile."""

    def __init__(self, port: int, body: dict):
        self.loop = asyncio.new_event_loop()
        self.ready, self.stop = threading.Event(), None
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._run(port, body),), daemon=True)
        self.thread.start()
        assert self.ready.wait(10), "the heartbeat was not answered"

    async def _run(self, port, body):
        self.stop = asyncio.Event()
        conn = await connect("127.0.0.1", port)
        beat = RemotingCommand.request(codes.HEART_BEAT, {}, msgspec.json.encode(body))
        beat.language, beat.version = "PYTHON", 479  # V5_3_3 (MQVersion ordinal): what the connection lists must show
        r = await conn.request(beat, 10)
        assert r.code == codes.SUCCESS, r.remark
        self.ready.set()
        await self.stop.wait()
        conn.close()

    def close(self):
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)


def test_group_commands_and_progress(cluster):
    ns, broker, _ = cluster
    addr = f"127.0.0.1:{broker.port}"
    admin(cluster, "updateTopic", "-c", "DefaultCluster", "-t", "MqaProgress", "-r", "2", "-w", "2")
    r = admin(cluster, "updateSubGroup", "-c", "DefaultCluster", "-g", "MqaGroup")
    assert r.out.startswith(f"create subscription group to {addr} success."), r
    assert "SubscriptionGroupConfig{groupName=MqaGroup, consumeEnable=true" in r.out, r
    sent = produce(ns.addr, "MqaProgress", 6, "TagP", "KeyP", "progress")
    consume(ns.addr, "MqaProgress", "MqaGroup", 6)
    sent += produce(ns.addr, "MqaProgress", 4, "TagP", "KeyP", "progress")  # 4 not consumed: the diff

    r = admin(cluster, "consumerProgress", "-g", "MqaGroup")
    progress = {int(row[2]): row for row in rows(r.out, "MqaProgress")}
    assert sorted(progress) == [0, 1], r
    for qid, row in progress.items():
        total = sum(1 for s in sent if s["qid"] == qid)
        consumed = sum(1 for s in sent[:6] if s["qid"] == qid)
        assert row[1] == "broker-a" and row[3:6] == [str(total), str(consumed), str(total - consumed)], r
    assert "Consume Diff Total: 4" in r.out, r
    # the minute's rate of GROUP_GET_NUMS: the 6 messages pulled moments ago
    assert float(re.search(r"Consume TPS: ([0-9.]+)", r.out).group(1)) > 0, r
    r = admin(cluster, "consumerProgress")
    (row,) = rows(r.out, "MqaGroup")
    assert row[1:3] == ["0", "OFFLINE"] and row[-1] == "4", r

    r = admin(cluster, "brokerConsumeStats", "-b", addr)
    for row in rows(r.out, "MqaProgress"):
        qid = int(row[3])
        total = sum(1 for s in sent if s["qid"] == qid)
        consumed = sum(1 for s in sent[:6] if s["qid"] == qid)
        assert row[1:3] == ["MqaGroup", "broker-a"] and row[4:7] == [str(total), str(consumed), str(total - consumed)], r
    assert sorted(int(row[3]) for row in rows(r.out, "MqaProgress")) == [0, 1], r

    # statsAll: accumulation, #InTPS and #OutTPS (the minute's rates), the messages put and got
    # today (VIEW_BROKER_STATS_DATA: TOPIC_PUT_NUMS, GROUP_GET_NUMS), as this broker counted them
    r = admin(cluster, "statsAll")
    (row,) = [x for x in rows(r.out, "MqaProgress") if x[1] == "MqaGroup"]
    assert row[2] == "4" and float(row[3]) > 0 and float(row[4]) > 0 and row[5:7] == ["10", "6"], r
    stats = call(broker.port, codes.VIEW_BROKER_STATS_DATA, {"statsName": "GROUP_GET_NUMS",
                                                              "statsKey": "MqaProgress@MqaGroup"})
    day = msgspec.json.decode(bytes(stats.body))["statsDay"]
    assert stats.code == codes.SUCCESS and day["sum"] == 6 and day["avgpt"] > 0, stats
    stats = call(broker.port, codes.VIEW_BROKER_STATS_DATA, {"statsName": "GROUP_GET_NUMS", "statsKey": "No@Such"})
    assert stats.code == codes.SYSTEM_ERROR and stats.remark == "The stats <GROUP_GET_NUMS> <No@Such> not exist", stats

    # the group offline: mqadmin falls back to committing the offsets itself, as against RocketMQ
    r = admin(cluster, "resetOffsetByTime", "-g", "MqaGroup", "-t", "MqaProgress", "-s", "0")
    assert "reset consumer offset by specified consumerGroup[MqaGroup], topic[MqaProgress]" in r.out, r
    assert len(rows(r.out, "broker-a")) == 2 and all(row[-1] == "0" for row in rows(r.out, "broker-a")), r
    assert "Consume Diff Total: 10" in admin(cluster, "consumerProgress", "-g", "MqaGroup").out

    # online members: consumerConnection lists them with their subscription, producerConnection the producer
    member = OnlineClient(broker.port, {
        "clientID": "127.0.0.1@mqadmin-test", "producerDataSet": [{"groupName": "MqaProducers"}],
        "consumerDataSet": [{"groupName": "MqaGroup", "consumeType": "CONSUME_PASSIVELY",
                             "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                             "subscriptionDataSet": [{"topic": "MqaProgress", "subString": "TagP", "tagsSet": ["TagP"],
                                                      "codeSet": [], "subVersion": 1, "expressionType": "TAG"}],
                             "unitMode": False}]})
    try:
        r = admin(cluster, "consumerConnection", "-g", "MqaGroup")
        (conn_row,) = rows(r.out, "127.0.0.1@mqadmin-test")
        assert conn_row[1].startswith("127.0.0.1:") and conn_row[2:4] == ["PYTHON", "V5_3_3"], r
        assert rows(r.out, "MqaProgress") == [["MqaProgress", "TagP"]], r
        assert "ConsumeType: CONSUME_PASSIVELY" in r.out and "MessageModel: CLUSTERING" in r.out, r
        assert "ConsumeFromWhere: CONSUME_FROM_FIRST_OFFSET" in r.out, r
        r = admin(cluster, "producerConnection", "-g", "MqaProducers", "-t", "MqaProgress")
        assert re.search(r"^0001\s+127\.0\.0\.1@mqadmin-test\s+127\.0\.0\.1:\d+\s+PYTHON\s+V5_3_3$", r.out, re.M), r
        # online: the broker computes the offsets (timestamp -1: each queue's end) and sends them to the members
        r = admin(cluster, "resetOffsetByTime", "-g", "MqaGroup", "-t", "MqaProgress", "-s", "-1")
        table = {int(row[1]): int(row[2]) for row in rows(r.out, "broker-a")}
        assert table == {q: sum(1 for s in sent if s["qid"] == q) for q in (0, 1)}, r
    finally:
        member.close()
    r = admin(cluster, "consumerConnection", "-g", "MqaGroup")
    assert "CODE: 206  DESC: the consumer group[MqaGroup] not online" in r.err, r

    # the project's own client (`broker consume`) shows as the 4.9.4 Java client it speaks as
    live = subprocess.Popen([sys.executable, "-m", "broker.cli", "consume", "-n", ns.addr, "--topic", "MqaProgress",
                             "--group", "MqaLive", "--timeout", "120"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=str(REPO))
    try:
        wait_for(lambda: call(broker.port, codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "MqaLive"}).code
                 == codes.SUCCESS, 60, "the consumer's heartbeat")
        r = admin(cluster, "consumerConnection", "-g", "MqaLive")
        (conn_row,) = [row for row in (line.split() for line in r.out.splitlines()) if row[2:3] == ["JAVA"]]
        assert conn_row[3] == "V4_9_4", r
    finally:
        live.kill()
        live.wait(10)

    r = admin(cluster, "deleteSubGroup", "-c", "DefaultCluster", "-g", "MqaGroup")
    assert r.out.strip() == f"delete subscription group [MqaGroup] from broker [{addr}] in cluster [DefaultCluster] success.", r
    groups = msgspec.json.decode(bytes(call(broker.port, codes.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body))
    assert "MqaGroup" not in groups["subscriptionGroupTable"]


def test_message_queries(cluster):
    ns, broker, _ = cluster
    sent = produce(ns.addr, "MqaQuery", 3, "TagQ", "KeyQ", "query-body")
    r = admin(cluster, "queryMsgByKey", "-t", "MqaQuery", "-k", "KeyQ")
    found = {row[0]: row for row in (line.split() for line in r.out.splitlines()[1:]) if row}
    assert set(found) == {s["msgId"] for s in sent}, r
    for s in sent:
        assert found[s["msgId"]][1:3] == [str(s["qid"]), s["queueOffset"]], r

    s = sent[0]
    for cmd in (["queryMsgByUniqueKey", "-t", "MqaQuery", "-i", s["msgId"]],
                ["queryMsgById", "-t", "MqaQuery", "-i", s["offsetMsgId"]]):
        r = admin(cluster, *cmd)
        fields = dict(re.split(r":\s+", line, maxsplit=1) for line in r.out.splitlines() if re.match(r"^[A-Z][\w ]+:\s", line))
        assert fields["Topic"] == "MqaQuery" and fields["Tags"] == "[TagQ]" and fields["Keys"] == "[KeyQ]", r
        assert fields["Queue ID"] == str(s["qid"]) and fields["Queue Offset"] == s["queueOffset"], r
        assert fields["Store Host"] == f"127.0.0.1:{broker.port}", r
        assert f"UNIQ_KEY={s['msgId']}" in fields["Properties"], r
        body_path = fields["Message Body Path"]
        assert open(body_path, "rb").read() == b"query-body", r

    r = admin(cluster, "queryMsgByOffset", "-t", "MqaQuery", "-b", "broker-a", "-i", str(s["qid"]),
              "-o", s["queueOffset"])
    assert f"OffsetID:            {s['offsetMsgId']}" in r.out and "Tags:                [TagQ]" in r.out, r

    r = admin(cluster, "printMsg", "-t", "MqaQuery", "-d", "true")
    ids = re.findall(r"^MSGID: (\w+) ", r.out, re.M)
    assert sorted(ids) == sorted(x["msgId"] for x in sent), r
    assert r.out.count("BODY: query-body") == 3, r


def test_controller_mode_commands(tmp_path, jars):
    group = ControllerModeGroup(tmp_path, n=2).start()
    try:
        master = group.master()
        ctl = next(iter(group.controllers.ports.values()))
        meta = {}
        r = mq.mqadmin(group.namesrv.addr, "getControllerMetaData", "-a", f"127.0.0.1:{ctl}", home=tmp_path / "home")
        for line in r.out.splitlines():
            if line.startswith("#") and "\t" in line:
                k, v = line[1:].split("\t", 1)
                meta.setdefault(k.rstrip(":"), []).append(v)
        assert meta["ControllerLeaderAddress"][0] in {f"127.0.0.1:{p}" for p in group.controllers.ports.values()}, r
        assert len(meta["Peer"]) == 3, r

        group.wait_in_sync(master, 2)
        r = mq.mqadmin(group.namesrv.addr, "getSyncStateSet", "-a", f"127.0.0.1:{ctl}", "-b", "broker-a",
                       home=tmp_path / "home")
        assert f"#MasterAddr\t127.0.0.1:{master.port}" in r.out and "#SyncStateSetNums\t2" in r.out, r
        assert r.out.count("InSyncReplica:") == 2, r

        r = mq.mqadmin(group.namesrv.addr, "getBrokerEpoch", "-b", "broker-a", home=tmp_path / "home")
        addrs = re.findall(r"^#brokerAddr\t(\S+)$", r.out, re.M)
        assert sorted(addrs) == sorted(f"127.0.0.1:{b.port}" for b in group.brokers.values()), r
        assert r.out.count("#Epoch: EpochEntry{epoch=1, startOffset=0") == 2, r
    finally:
        group.stop()


@pytest.mark.parametrize("code, ext, body, remark", [
    (codes.GET_TOPIC_STATS_INFO, {}, b"", "the request has no topic"),
    (codes.GET_TOPIC_STATS_INFO, {"topic": "MqaNoSuchTopic"}, b"", "topic[MqaNoSuchTopic] not exist"),
    (codes.GET_CONSUME_STATS, {"topic": "T"}, b"", "the request has no consumerGroup"),
    (codes.INVOKE_BROKER_TO_RESET_OFFSET, {"group": "g", "topic": "TBW102", "timestamp": "soon"}, b"",
     "timestamp is 'soon', not an integer"),
    (codes.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "MqaNoSuchGroup"}, b"",
     "the producer group[MqaNoSuchGroup] not exist"),
    (codes.DELETE_TOPIC_IN_BROKER, {"topic": "SCHEDULE_TOPIC_XXXX"}, b"", "is conflict with system topic"),
    (codes.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "MqaNoSuchGroup", "clientId": "c"}, b"",
     "The Consumer <MqaNoSuchGroup> <c> not online"),
    (codes.UPDATE_BROKER_CONFIG, {}, b"\xff\xfe", "not UTF-8"),
    (codes.UPDATE_BROKER_CONFIG, {}, b"autoCreateTopicEnable=maybe", "'maybe' is not true or false"),
    (codes.UPDATE_BROKER_CONFIG, {}, b"noSuchKey=1", "unknown broker config key(s): noSuchKey"),
    (codes.UPDATE_BROKER_CONFIG, {}, b"storePathRootDir=/tmp", "Can not update config in black list."),
])
def test_admin_requests_with_bad_input_get_a_clear_error(cluster, code, ext, body, remark):
    """Each request these commands send, malformed: an error naming what is wrong, the broker still serving."""
    _, broker, _ = cluster
    r = call(broker.port, code, ext, body)
    assert r.code != codes.SUCCESS and remark in (r.remark or ""), (r.code, r.remark)
    assert call(broker.port, codes.GET_BROKER_CONFIG).code == codes.SUCCESS


def test_consumer_status_asks_the_java_consumer(cluster, tmp_path):
    """consumerStatus: the broker passes GET_CONSUMER_RUNNING_INFO on to the consumer (the real Java
    client) and its answer back; mqadmin prints the client's own view of its subscription and queues."""
    from types import SimpleNamespace

    from tests.helpers.real_clients import Consumer
    ns, broker, _ = cluster
    admin(cluster, "updateTopic", "-c", "DefaultCluster", "-t", "MqaStatusT", "-r", "2", "-w", "2")
    wait_for(lambda: ns.route("MqaStatusT") is not None, 30, "MqaStatusT's route")
    produce(ns.addr, "MqaStatusT", 4, "TagS", "KeyS", "running-info")
    with Consumer("java", SimpleNamespace(namesrv=ns.addr), tmp_path, "MqaStatusT", "MqaJavaGroup", "j1",
                  consumeFromWhere="CONSUME_FROM_FIRST_OFFSET") as c:
        c.wait(lambda g: len(g) >= 4, 60, "the Java consumer to get the 4 messages")
        r = admin(cluster, "consumerStatus", "-g", "MqaJavaGroup")
    (row,) = [line.split() for line in r.out.splitlines() if line.split()[:1] == ["1"]]
    assert row[1].endswith("@j1") and row[2] == "V4_9_8", r  # the client's id and version, from its heartbeat
    assert "Same subscription in the same group of consumer" in r.out and "Rebalance OK" in r.out, r
    # the running info itself, as the Java consumer answered it, saved by mqadmin under its cwd
    info = (cluster[2] / "mqadmin-home" / row[3]).read_text()
    assert "#Consumer Subscription#" in info and "MqaStatusT" in info and "#Consumer Offset#" in info, info
    r = admin(cluster, "consumerStatus", "-g", "MqaJavaGroup")
    assert "CODE: 206" in r.err and "not online" in r.err, r  # the consumer gone: RocketMQ's own error


def test_update_topic_sets_the_compaction_policy(cluster):
    """RocketMQ 5's `updateTopic -a +cleanup.policy=COMPACTION` makes a compacted topic
    (tests/test_compaction_topic.py); a policy RocketMQ does not know is refused naming it."""
    ns, broker, _ = cluster
    r = admin(cluster, "updateTopic", "-c", "DefaultCluster", "-t", "MqaCompacted", "-r", "1", "-w", "1",
              "-a", "+cleanup.policy=COMPACTION")
    assert r.out.splitlines()[0] == f"create topic to 127.0.0.1:{broker.port} success.", r
    got = call(broker.port, codes.GET_TOPIC_CONFIG, {"topic": "MqaCompacted"})
    assert json.loads(bytes(got.body))["attributes"] == {"cleanup.policy": "COMPACTION"}
    r = admin(cluster, "updateTopic", "-c", "DefaultCluster", "-t", "MqaBadPolicy", "-a", "+cleanup.policy=SHRINK")
    assert "value is not in set" in r.out + r.err and "cleanup.policy" in r.out + r.err, r
    assert call(broker.port, codes.GET_TOPIC_CONFIG, {"topic": "MqaBadPolicy"}).code == codes.TOPIC_NOT_EXIST
