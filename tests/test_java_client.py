"""The real Java 4.x client, Maven Central org.apache.rocketmq:rocketmq-client 4.9.8, unmodified,
against our `broker namesrv` + `broker serve` processes: producers (sync, async, oneway, batch,
orderly, delayed, compressed), push consumers (concurrently, orderly, tag filters, retries into
the DLQ, broadcasting), the lite pull consumer and the transactional producer, each JVM its own
process on loopback (tests/helpers/java_client.py; built by `make clients`)."""
from __future__ import annotations

import itertools
import re
from collections import defaultdict

import msgspec
import pytest

from broker.remoting import codes
from tests.conftest import wait_for
from tests.helpers.java_client import JavaProcess, SecondBroker, run
from tests.helpers.real_clients import Cluster, Consumer, produce

_names = itertools.count()
# delay level 10 is 2 s here; every other level (retries use 3 and up) 100 ms
DELAYS = " ".join("2s" if level == 10 else "100ms" for level in range(1, 19))


def _unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("java-client"), f"maxReconsumeTimes=16\nmessageDelayLevel={DELAYS}\n"
                 # undecided transactions checked within a second (RocketMQ: 6 s, then every 60 s)
                 "transactionCheckInterval=200\ntransactionTimeOut=400\ntransactionCheckMax=100\n") as c:
        yield c


def _messages(n: int, tags=("TagA", "TagB"), prefix="body") -> list[dict]:
    return [{"tags": tags[i % len(tags)], "keys": [f"key-{i}", f"order-{i}"], "props": {"color": f"c{i}"},
             "body": f"{prefix}-{i}"} for i in range(n)]


def _consumer(cluster, tmp, topic, group, name="c1", **opt) -> Consumer:
    opt.setdefault("consumeFromWhere", "CONSUME_FROM_FIRST_OFFSET")
    return Consumer("java", cluster, tmp, topic, group, name, **opt)


def _offset_msg_id(port: int, commit_log_offset: int) -> str:
    """The broker's message id: store host IPv4, port and commit-log offset, upper-case hex."""
    return f"7F000001{port:08X}{commit_log_offset:016X}"


def _check_sent(sent: list[dict], topic: str, cluster) -> None:
    """Each SendResult: SEND_OK on our broker, a client-made unique id, the broker's id, and queue
    offsets that count up from 0 in each queue without a gap."""
    assert all(s["status"] == "SEND_OK" for s in sent), sent
    per_queue = defaultdict(list)
    for s in sent:
        assert (s["topic"], s["brokerName"]) == (topic, "broker-a")
        # MessageClientIDSetter: the client's IP (IPv4 or IPv6), pid, class loader, time, counter
        assert re.fullmatch(r"[0-9A-F]{32}|[0-9A-F]{56}", s["msgId"]) and s["msgId"] != s["offsetMsgId"], s
        assert s["offsetMsgId"].startswith(f"7F000001{cluster.port:08X}"), s
        per_queue[s["queueId"]].append(s["queueOffset"])
    for q, offsets in per_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), (q, offsets)


def _check_received(got: dict, sent: dict, spec: dict, topic: str, cluster) -> None:
    """A delivery against the SendResult and the message the producer was given, field by field."""
    assert (got["topic"], got["tags"], got["body"], got["reconsumeTimes"]) == (topic, spec["tags"], spec["body"], 0)
    assert got["keys"] == " ".join(spec["keys"])
    assert got["props"]["color"] == spec["props"]["color"]
    assert got["props"]["UNIQ_KEY"] == got["msgId"] == sent["msgId"]
    assert (got["queueId"], got["queueOffset"], got["offsetMsgId"]) == \
        (sent["queueId"], sent["queueOffset"], sent["offsetMsgId"])
    assert got["offsetMsgId"] == _offset_msg_id(cluster.port, got["commitLogOffset"])
    assert got["brokerName"] == "broker-a" and got["sysFlag"] == 0
    assert got["bornTimestamp"] <= got["storeTimestamp"] <= got["receivedAt"]


def test_sync_sends_come_back_to_a_push_consumer_field_by_field(cluster, tmp_path):
    topic, group = _unique("JSync"), _unique("cg")
    specs = _messages(12)
    sent = produce("java", cluster, topic, specs, tmp_path)
    assert [s["i"] for s in sent] == list(range(12))
    _check_sent(sent, topic, cluster)
    assert len({s["queueId"] for s in sent}) == 4  # the producer rotates over the 4 queues
    with _consumer(cluster, tmp_path, topic, group) as c:
        got = c.wait(lambda g: len(g) >= 12, 60, "all 12")
    by_id = {m["msgId"]: m for m in got}
    assert len(got) == 12 and len(by_id) == 12
    for s, spec in zip(sent, specs):
        _check_received(by_id[s["msgId"]], s, spec, topic, cluster)


def test_async_and_oneway_sends_arrive(cluster, tmp_path):
    topic, group = _unique("JAsync"), _unique("cg")
    specs = _messages(8, prefix="async")
    sent = produce("java", cluster, topic, specs, tmp_path, mode="async")
    assert sorted(s["i"] for s in sent) == list(range(8)) and all(s["async"] for s in sent)
    _check_sent(sent, topic, cluster)
    one = _messages(4, prefix="oneway")
    assert produce("java", cluster, topic, one, tmp_path, mode="oneway") == [{"i": i} for i in range(4)]
    with _consumer(cluster, tmp_path, topic, group) as c:
        got = c.wait(lambda g: len(g) >= 12, 60, "the 8 async and 4 oneway messages")
    by_id = {m["msgId"]: m for m in got}
    for s in sent:
        _check_received(by_id[s["msgId"]], s, specs[s["i"]], topic, cluster)
    oneway = sorted((m for m in got if m["body"].startswith("oneway")), key=lambda m: m["body"])
    assert [(m["body"], m["tags"], m["keys"], m["props"]["color"]) for m in oneway] == \
        [(f"oneway-{i}", ("TagA", "TagB")[i % 2], f"key-{i} order-{i}", f"c{i}") for i in range(4)]
    assert len(got) == 12


def test_a_batch_is_stored_in_one_queue_in_order(cluster, tmp_path):
    topic, group = _unique("JBatch"), _unique("cg")
    specs = [{"tags": "TagA", "keys": [f"b{i}"], "props": {"color": f"c{i}"}, "body": f"batch-{i}"} for i in range(5)]
    [result] = produce("java", cluster, topic, specs, tmp_path, mode="batch")
    ids, offset_ids = result["msgId"].split(","), result["offsetMsgId"].split(",")
    assert result["status"] == "SEND_OK" and len(ids) == len(offset_ids) == 5, result
    assert result["queueOffset"] == 0  # the first of the batch's offsets
    with _consumer(cluster, tmp_path, topic, group) as c:
        got = c.wait(lambda g: len(g) >= 5, 60, "the batch")
    got.sort(key=lambda m: m["queueOffset"])
    assert [m["body"] for m in got] == [f"batch-{i}" for i in range(5)]
    assert [m["msgId"] for m in got] == ids and [m["offsetMsgId"] for m in got] == offset_ids
    assert {m["queueId"] for m in got} == {result["queueId"]}
    assert [m["queueOffset"] for m in got] == list(range(5))
    assert [(m["keys"], m["props"]["color"], m["tags"]) for m in got] == [(f"b{i}", f"c{i}", "TagA") for i in range(5)]


def test_a_body_over_compress_msg_body_over_howmuch_is_compressed_and_read_back_intact(cluster, tmp_path):
    topic, group = _unique("JZip"), _unique("cg")
    specs = [{"tags": "Big", "keys": ["big"], "props": {"color": "big"}, "size": 64 * 1024},
             {"tags": "Small", "keys": ["small"], "body": "small"}]
    sent = produce("java", cluster, topic, specs, tmp_path, compressOver=4096)
    _check_sent(sent, topic, cluster)
    with _consumer(cluster, tmp_path, topic, group) as c:
        got = c.wait(lambda g: len(g) >= 2, 60, "both")
    big = next(m for m in got if m["tags"] == "Big")
    assert (big["size"], big["bodyIsX"], big["keys"], big["props"]["color"]) == (64 * 1024, True, "big", "big")
    stored = [r for q in range(4) for r in cluster.records(topic, q)]
    zipped = next(r for r in stored if r.properties.get("TAGS") == "Big")
    plain = next(r for r in stored if r.properties.get("TAGS") == "Small")
    # compressed by the client, stored as sent (flag and all), inflated by the consumer
    assert zipped.sys_flag & 1 and len(zipped.body) < 1024 and big["sysFlag"] & 1
    assert not plain.sys_flag & 1 and bytes(plain.body) == b"small"


def test_a_tag_expression_delivers_only_those_tags(cluster, tmp_path):
    topic, group = _unique("JTags"), _unique("cg")
    specs = _messages(15, tags=("TagA", "TagB", "TagC"))
    produce("java", cluster, topic, specs, tmp_path)
    with _consumer(cluster, tmp_path, topic, group, expression="TagA || TagB") as c:
        c.wait(lambda g: len(g) >= 10, 60, "the TagA and TagB messages")
        # then a TagB behind every TagC in each queue: once those are in, a TagC let through
        # (by the broker's tag-hash filter or the client's tag-name check) would be too
        tail = produce("java", cluster, topic, [{"tags": "TagB", "body": f"tail-{i}"} for i in range(8)], tmp_path)
        assert {s["queueId"] for s in tail} == {0, 1, 2, 3}
        got = c.wait(lambda g: len(g) >= 18, 60, "the tail")
    assert sorted(m["body"] for m in got if m["body"].startswith("body")) == \
        sorted(f"body-{i}" for i in range(15) if i % 3 != 2)
    assert {m["tags"] for m in got} == {"TagA", "TagB"} and len(got) == 18


def test_orderly_sends_keep_their_order_in_one_queue_per_key(cluster, tmp_path):
    topic, group = _unique("JOrder"), _unique("cg")
    specs = [{"tags": "TagA", "keys": [f"k{i % 3}"], "body": f"{i % 3}-{i // 3}", "orderKey": i % 3} for i in range(30)]
    sent = produce("java", cluster, topic, specs, tmp_path, mode="orderly")
    assert all(s["status"] == "SEND_OK" and s["queueId"] == s["i"] % 3 for s in sent), sent
    with _consumer(cluster, tmp_path, topic, group, orderly=True) as c:
        got = c.wait(lambda g: len(g) >= 30, 60, "all 30 in order")
    for key in range(3):
        mine = [m for m in got if m["keys"] == f"k{key}"]
        assert [m["body"] for m in mine] == [f"{key}-{n}" for n in range(10)]
        assert {m["queueId"] for m in mine} == {key}
        assert [m["queueOffset"] for m in mine] == list(range(10))


def test_a_delay_level_is_delivered_after_its_delay_not_before(cluster, tmp_path):
    topic, group = _unique("JDelay"), _unique("cg")
    with _consumer(cluster, tmp_path, topic, group, consumeFromWhere="CONSUME_FROM_LAST_OFFSET") as c:
        produce("java", cluster, topic, [{"tags": "now", "body": "now"}], tmp_path)
        c.wait(lambda g: len(g) >= 1, 60, "the immediate message")  # the consumer is pulling
        sent = produce("java", cluster, topic, [{"tags": "later", "keys": ["d"], "props": {"color": "d"},
                                                 "body": "later", "delayLevel": 10}], tmp_path)
        assert sent[0]["status"] == "SEND_OK"
        got = c.wait(lambda g: len(g) >= 2, 30, "the delayed message")
    later = got[1]
    assert (later["body"], later["tags"], later["keys"], later["props"]["color"]) == ("later", "later", "d", "d")
    assert later["msgId"] == sent[0]["msgId"] and later["queueId"] == sent[0]["queueId"]
    # the level asked for stays readable (getDelayTimeLevel), with where it was bound, as on RocketMQ
    assert (later["delayLevel"], later["props"]["REAL_TOPIC"], later["props"]["REAL_QID"]) == \
        (10, topic, str(sent[0]["queueId"]))
    # level 10 is 2 s here: not delivered before it (born and received on this machine's clock)
    assert later["receivedAt"] - later["bornTimestamp"] >= 2000, later
    assert later["storeTimestamp"] - later["bornTimestamp"] >= 2000, later  # stored again when due


def test_reconsume_later_retries_then_ends_in_the_dead_letter_queue(cluster, tmp_path):
    topic, group = _unique("JRetry"), _unique("cg")
    specs = _messages(2)
    sent = produce("java", cluster, topic, specs, tmp_path)
    with _consumer(cluster, tmp_path, topic, group, fail="always", maxReconsumeTimes=2) as c:
        wait_for(lambda: cluster.total(f"%DLQ%{group}", 1) == 2, 60, "both messages in the dead letter queue")
        got = c.wait(lambda g: len(g) >= 6, 30, "three deliveries of each")
    for s, spec in zip(sent, specs):
        mine = sorted((m for m in got if m["msgId"] == s["msgId"]), key=lambda m: m["reconsumeTimes"])
        # the first delivery, then two through %RETRY%<group>, each handed back under the topic sent to
        assert [m["reconsumeTimes"] for m in mine] == [0, 1, 2], mine
        for m in mine:
            assert (m["topic"], m["body"], m["tags"], m["keys"], m["props"]["color"]) == \
                (topic, spec["body"], spec["tags"], " ".join(spec["keys"]), spec["props"]["color"])
        assert mine[0]["offsetMsgId"] == s["offsetMsgId"]
        assert len({m["offsetMsgId"] for m in mine}) == 3  # each retry is a new record
    assert cluster.total(f"%RETRY%{group}", 1) == 4
    dead = sorted(cluster.records(f"%DLQ%{group}", 0), key=lambda r: bytes(r.body))
    assert [bytes(r.body) for r in dead] == [b"body-0", b"body-1"]
    for r, s in zip(dead, sent):
        assert (r.properties["RETRY_TOPIC"], r.properties["UNIQ_KEY"], r.reconsume_times) == (topic, s["msgId"], 3)


def test_broadcasting_delivers_everything_to_every_member(cluster, tmp_path):
    topic, group = _unique("JBroadcast"), _unique("cg")
    specs = _messages(8)
    sent = produce("java", cluster, topic, specs, tmp_path)
    with _consumer(cluster, tmp_path, topic, group, "a", model="BROADCASTING") as a, \
            _consumer(cluster, tmp_path, topic, group, "b", model="BROADCASTING") as b:
        got_a = a.wait(lambda g: len(g) >= 8, 60, "a to get all 8")
        got_b = b.wait(lambda g: len(g) >= 8, 60, "b to get all 8")
    for got in (got_a, got_b):
        assert sorted(m["msgId"] for m in got) == sorted(s["msgId"] for s in sent)
    # offsets are the consumers' own: a local file each (LocalFileOffsetStore), written on shutdown
    for name in ("a", "b"):
        [offsets] = (tmp_path / "home" / "offsets").glob(f"*@{name}/{group}/offsets.json")
        assert topic in offsets.read_text()


def _committed(cluster, group: str, topic: str) -> dict[int, int]:
    out = {}
    for q in range(4):
        r = cluster.call(codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": q})
        out[q] = int(r.ext["offset"]) if r.code == codes.SUCCESS else None
    return out


def _committed_reach(cluster, group: str, topic: str, ends: dict[int, int]) -> None:
    """The Java client commits one-way (updateConsumerOffsetOneway: persistAll, persist(mq),
    commitSync), from its Netty thread: the frames may reach the broker after the driver has
    printed its last line. So the broker's offsets are waited for, not read once (a CI run read
    one queue's 0 before its commit arrived)."""
    wait_for(lambda: {q: _committed(cluster, group, topic)[q] for q in ends} == ends, 15,
             f"the committed offsets to reach {ends}")


def test_a_restarted_push_consumer_resumes_from_its_committed_offsets(cluster, tmp_path):
    topic, group = _unique("JResume"), _unique("cg")
    produce("java", cluster, topic, _messages(8), tmp_path)
    with _consumer(cluster, tmp_path, topic, group, "c1") as c:
        c.wait(lambda g: len(g) >= 8, 60, "the first 8")
    # shutdown() (awaitTerminationMillisWhenShutdown: after its listeners returned) persisted the
    # offsets: the next message of every queue
    _committed_reach(cluster, group, topic, {q: cluster.max_offset(topic, q) for q in range(4)})
    later = produce("java", cluster, topic, [{"tags": "TagA", "body": f"later-{i}"} for i in range(8)], tmp_path)
    with _consumer(cluster, tmp_path, topic, group, "c2") as c:
        got = c.wait(lambda g: len(g) >= 8, 60, "the next 8")
        # then one more: had c2 started from the beginning, the first 8 would be in before it
        last = produce("java", cluster, topic, [{"tags": "TagA", "body": "last"}], tmp_path)
        got = c.wait(lambda g: any(m["body"] == "last" for m in g), 60, "the last")
    assert sorted(m["msgId"] for m in got) == sorted(s["msgId"] for s in later + last), got


def test_lite_pull_subscribe_polls_everything_and_commits(cluster, tmp_path):
    topic, group = _unique("JLite"), _unique("cg")
    specs = _messages(10)
    sent = produce("java", cluster, topic, specs, tmp_path)
    lines = run("litepull", {"nameSrv": cluster.namesrv, "group": group, "topic": topic, "expect": 10,
                             "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "autoCommit": False, "commit": True},
                tmp_path / "home")
    assert lines[1] == {"queues": [0, 1, 2, 3]}
    started, got, committed = lines[0]["started"], lines[2:-1], lines[-1]["committed"]
    # its queues come with the broker's NOTIFY_CONSUMER_IDS_CHANGED answering its first heartbeat
    # (1 s after start), not with its own rebalance timer, 20 s later
    assert got[0]["receivedAt"] - started < 10_000, got[0]["receivedAt"] - started
    by_id = {m["msgId"]: m for m in got}
    assert len(got) == 10 == len(by_id)
    for s, spec in zip(sent, specs):
        _check_received(by_id[s["msgId"]], s, spec, topic, cluster)
    ends = {q: cluster.max_offset(topic, q) for q in range(4)}
    assert {int(q): o for q, o in committed.items()} == ends
    _committed_reach(cluster, group, topic, ends)  # commitSync() persisted them on the broker


def test_lite_pull_assign_and_seek_read_one_queue_from_an_offset(cluster, tmp_path):
    topic, group = _unique("JAssign"), _unique("cg")
    sent = produce("java", cluster, topic, _messages(16), tmp_path)
    q1 = sorted((s for s in sent if s["queueId"] == 1), key=lambda s: s["queueOffset"])
    assert len(q1) == 4
    lines = run("litepull", {"nameSrv": cluster.namesrv, "group": group, "topic": topic, "assign": [1],
                             "seek": {"1": 2}, "expect": 2, "autoCommit": False, "commit": True}, tmp_path / "home")
    got = lines[2:-1]
    assert [(m["queueId"], m["queueOffset"], m["msgId"]) for m in got] == \
        [(1, s["queueOffset"], s["msgId"]) for s in q1[2:]]
    assert lines[-1]["committed"]["1"] == 4
    _committed_reach(cluster, group, topic, {1: 4})


def test_binary_rocketmq_headers_send_and_consume(cluster, tmp_path):
    """-Drocketmq.serialize.type=ROCKETMQ: every request the client makes has a binary header."""
    topic, group = _unique("JBinary"), _unique("cg")
    specs = _messages(6)
    binary = {"rocketmq.serialize.type": "ROCKETMQ"}
    sent = produce("java", cluster, topic, specs, tmp_path, jvm=binary)
    _check_sent(sent, topic, cluster)
    with _consumer(cluster, tmp_path, topic, group, jvm=binary) as c:
        got = c.wait(lambda g: len(g) >= 6, 60, "all 6")
    by_id = {m["msgId"]: m for m in got}
    for s, spec in zip(sent, specs):
        _check_received(by_id[s["msgId"]], s, spec, topic, cluster)


def test_transactions_commit_roll_back_and_are_checked_back(cluster, tmp_path):
    topic, group, pgroup = _unique("JTx"), _unique("cg"), _unique("txpg")
    specs = [{"tags": "T", "body": "commit", "local": "COMMIT_MESSAGE"},
             {"tags": "T", "body": "rollback", "local": "ROLLBACK_MESSAGE"},
             {"tags": "T", "body": "check-commit", "local": "UNKNOW", "props": {"check": "COMMIT_MESSAGE"}},
             {"tags": "T", "body": "check-rollback", "local": "UNKNOW", "props": {"check": "ROLLBACK_MESSAGE"}}]
    opt = {"nameSrv": cluster.namesrv, "group": pgroup, "topic": topic, "messages": specs, "instanceName": "tx"}
    with JavaProcess("transaction", opt, tmp_path / "home", "tx") as producer:
        sends = producer.ready()
        assert [(s["status"], s["localState"]) for s in sends] == [("SEND_OK", "COMMIT_MESSAGE"), (
            "SEND_OK", "ROLLBACK_MESSAGE"), ("SEND_OK", "UNKNOW"), ("SEND_OK", "UNKNOW")]
        # the reply names the transaction (its UNIQ_KEY), as RocketMQ 5's broker does
        assert all(s["transactionId"] == s["msgId"] for s in sends), sends
        checks = producer.wait(lambda ls: (lambda c: c if {m["body"] for m in c} >= {"check-commit", "check-rollback"}
                                           else None)([x for x in ls if "check" in x]), 60, "both check-backs")
        for m in checks:  # the half message as the producer sent it, under its real topic
            s = sends[2] if m["body"] == "check-commit" else sends[3]
            assert (m["topic"], m["uniqKey"], m["transactionId"]) == (topic, s["msgId"], s["transactionId"]), m
            assert m["check"] == m["props"]["check"]
        with _consumer(cluster, tmp_path, topic, group) as c:
            c.wait(lambda g: len(g) >= 2, 60, "the two committed")
            tail = produce("java", cluster, topic, [{"tags": "T", "body": f"tail-{i}"} for i in range(8)], tmp_path)
            assert {s["queueId"] for s in tail} == {0, 1, 2, 3}
            got = c.wait(lambda g: len(g) >= 10, 60, "the tail behind them")
    # the rolled back ones were never delivered, in any queue, before what came after them
    assert sorted(m["body"] for m in got if not m["body"].startswith("tail")) == ["check-commit", "commit"]
    committed = {m["body"]: m for m in got}
    assert committed["commit"]["msgId"] == sends[0]["msgId"]
    assert committed["check-commit"]["msgId"] == sends[2]["msgId"]


def _connections_to(port: int) -> int:
    """ESTABLISHED TCP connections the broker accepted on 127.0.0.1:`port` (/proc/net/tcp: the
    broker's IPv4 side; the JVM's may be an IPv6 socket)."""
    n = 0
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if local == f"0100007F:{port:04X}" and state == "01":
            n += 1
    return n


def test_vip_channel_clients_send_and_commit_on_listen_port_minus_2(cluster, tmp_path):
    """vipChannelEnabled: the client sends, queries and commits offsets on listenPort - 2 (pulls
    and heartbeats stay on the main port). It has no fallback: a send not served there fails."""
    topic, group = _unique("JVip"), _unique("cg")
    specs = _messages(6)
    assert _connections_to(cluster.port - 2) == 0
    sent = produce("java", cluster, topic, specs, tmp_path, vip=True)
    _check_sent(sent, topic, cluster)
    with _consumer(cluster, tmp_path, topic, group, vip=True) as c:
        got = c.wait(lambda g: len(g) >= 6, 60, "all 6")
        wait_for(lambda: _connections_to(cluster.port - 2) >= 1, 10, "the consumer's connection to the VIP port")
    by_id = {m["msgId"]: m for m in got}
    for s, spec in zip(sent, specs):
        _check_received(by_id[s["msgId"]], s, spec, topic, cluster)
    # shutdown() committed through the VIP channel
    _committed_reach(cluster, group, topic, {q: cluster.max_offset(topic, q) for q in range(4)})


def test_view_message_by_id_query_by_key_and_queue_offsets(cluster, tmp_path):
    topic = _unique("JQuery")
    specs = [{"tags": "TagA", "keys": [f"order-{i // 2}"], "props": {"color": f"c{i}"}, "body": f"q-{i}"}
             for i in range(6)]
    sent = produce("java", cluster, topic, specs, tmp_path)
    wait_for(cluster.dispatched_all, 30, "the broker to index everything it wrote")
    q = sent[0]["queueId"]
    assert sent[0]["queueOffset"] == 0
    lines = run("admin", {"nameSrv": cluster.namesrv, "group": _unique("admin"), "brokerName": "broker-a",
                          "view": [sent[1]["offsetMsgId"], sent[0]["offsetMsgId"]],
                          "viewUniq": [[topic, sent[2]["msgId"]]],
                          "query": [[topic, "order-1"], [topic, "order-none"]],
                          "offsets": [[topic, q, 0]]}, tmp_path / "home")
    view, view0, uniq, query, none, offsets = lines
    assert (view["op"], view["body"], view["offsetMsgId"], view["msgId"]) == \
        ("view", "q-1", sent[1]["offsetMsgId"], sent[1]["msgId"])
    assert (view["keys"], view["props"]["color"], view["queueOffset"]) == ("order-0", "c1", sent[1]["queueOffset"])
    assert (uniq["op"], uniq["body"], uniq["msgId"], uniq["topic"]) == ("viewUniq", "q-2", sent[2]["msgId"], topic)
    assert sorted((m["body"], m["msgId"]) for m in query["messages"]) == \
        sorted((spec["body"], s["msgId"]) for s, spec in zip(sent, specs) if spec["keys"] == ["order-1"])
    # nothing under a key: the client's own MQClientException "query message by key finished, but no message."
    assert none["op"] == "query" and "no message" in none["error"], none
    in_q = sum(s["queueId"] == q for s in sent)
    assert (offsets["op"], offsets["min"], offsets["max"], offsets["search"]) == ("offsets", 0, in_q, 0), offsets
    # earliestMsgStoreTime (GET_EARLIEST_MSG_STORETIME): when the queue's first message was stored
    assert offsets["earliest"] == view0["storeTimestamp"], offsets


def test_a_member_killed_hands_its_queues_to_the_other(cluster, tmp_path):
    """Two push consumers share a group; one is killed -9. The broker sees its connection close and
    tells the other (NOTIFY_CONSUMER_IDS_CHANGED), which takes every queue: what is sent next all
    reaches it."""
    topic, group = _unique("JKill"), _unique("cg")
    produce("java", cluster, topic, [{"tags": "TagA", "body": "warm-up"}], tmp_path)  # the topic's 4 queues
    with _consumer(cluster, tmp_path, topic, group, "a") as a, _consumer(cluster, tmp_path, topic, group, "b") as b:
        for round_ in range(20):  # until a round of 8 (2 a queue) is split cleanly between them
            bodies = {f"r{round_}-{i}" for i in range(8)}
            produce("java", cluster, topic, [{"tags": "TagA", "body": x} for x in sorted(bodies)], tmp_path)
            wait_for(lambda: {m["body"] for m in a.got + b.got} >= bodies, 60, f"round {round_} delivered")
            qa = {m["queueId"] for m in a.got if m["body"] in bodies}
            qb = {m["queueId"] for m in b.got if m["body"] in bodies}
            if qa and qb and not qa & qb:
                break
        else:
            raise AssertionError("the two consumers never shared the queues")
        a.child.kill_group()  # SIGKILL: no unregister, no last offset commit
        after = produce("java", cluster, topic, [{"tags": "TagA", "body": f"after-{i}"} for i in range(8)], tmp_path)
        assert {s["queueId"] for s in after} == {0, 1, 2, 3}
        got = b.wait(lambda g: {m["body"] for m in g} >= {f"after-{i}" for i in range(8)}, 60,
                     "b to get what was sent after the kill, from a's queues too")
    assert {m["queueId"] for m in got if m["body"].startswith("after")} == {0, 1, 2, 3}
    assert qa <= {m["queueId"] for m in got}  # a's queues are b's now


def _traces(cluster, msg_id: str) -> list[list[str]]:
    """The trace entries in RMQ_SYS_TRACE_TOPIC naming a message (TraceDataEncoder: fields split by
    \\x01, entries by \\x02)."""
    out = []
    for q in range(4):
        for rec in cluster.records("RMQ_SYS_TRACE_TOPIC", q):
            for entry in bytes(rec.body).decode().split("\x02"):
                fields = entry.split("\x01")
                if msg_id in fields:
                    out.append(fields)
    return out


def test_message_traces_are_written_to_the_trace_topic(cluster, tmp_path):
    """enableMsgTrace: the producer and the consumer each send their trace (Pub, SubBefore,
    SubAfter) to RMQ_SYS_TRACE_TOPIC, which the broker stores like any topic. (Traces are sent in
    the background: the producer stays up until they are stored.)"""
    topic, group, pgroup = _unique("JTrace"), _unique("cg"), _unique("tracepg")
    opt = {"nameSrv": cluster.namesrv, "group": pgroup, "topic": topic, "trace": True,
           "messages": [{"tags": "TagA", "keys": ["traced"], "body": "traced"}]}
    with JavaProcess("produce", opt, tmp_path / "home", "traced") as producer, \
            _consumer(cluster, tmp_path, topic, group, trace=True) as c:
        msg_id = producer.ready()[0]["msgId"]
        c.wait(lambda g: len(g) >= 1, 60, "the message")
        found = wait_for(lambda: (lambda t: t if {f[0] for f in t} >= {"Pub", "SubBefore", "SubAfter"} else None)(
            _traces(cluster, msg_id)), 30, "the Pub, SubBefore and SubAfter traces")
    pub = next(f for f in found if f[0] == "Pub")
    # TraceDataEncoder's Pub: type, time, region, group, topic, msgId, tags, keys, storeHost, ...
    assert (pub[3], pub[4], pub[5], pub[6], pub[7]) == (pgroup, topic, msg_id, "TagA", "traced")
    assert pub[8] == f"127.0.0.1:{cluster.port}"
    sub = next(f for f in found if f[0] == "SubBefore")
    assert sub[3] == group  # the consumer group that took it


def test_acl_client_rpc_hook_signs_for_an_acl_enabled_broker(tmp_path):
    """AclClientRPCHook (rocketmq-acl) against aclEnable=true: the right key sends and consumes, a
    wrong secret is refused and nothing of it is stored."""
    from tests.test_real_clients import ACL
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    key = {"accessKey": "RocketMQ", "secretKey": "12345678"}
    with Cluster(tmp_path / "acl", f"aclEnable=true\naclFile={acl}\n", access=("inspector", "inspector-secret")) as c:
        topic, group = _unique("JAcl"), _unique("cg")
        specs = _messages(4)
        sent = produce("java", c, topic, specs, tmp_path, **key)
        _check_sent(sent, topic, c)
        bad = produce("java", c, topic, [{"tags": "TagA", "body": "forged"}], tmp_path,
                      accessKey="RocketMQ", secretKey="wrong", retries=0)
        # refused NO_PERMISSION (16), as RocketMQ 5's auth; the client gives up (retries=0)
        assert bad[0]["code"] == codes.NO_PERMISSION and "still failed" in bad[0]["error"], bad
        with _consumer(c, tmp_path, topic, group, **key) as consumer:
            got = consumer.wait(lambda g: len(g) >= 4, 60, "the 4 signed ones")
        by_id = {m["msgId"]: m for m in got}
        for s, spec in zip(sent, specs):
            _check_received(by_id[s["msgId"]], s, spec, topic, c)
        wait_for(c.dispatched_all, 30, "the broker to dispatch everything it wrote")
        assert c.total(topic) == 4


def test_a_sql92_subscription_is_refused_at_start_with_rocketmqs_error(cluster, tmp_path):
    """MessageSelector.bySql: the client asks CHECK_CLIENT_CONFIG before it starts. This broker
    filters by tag only, as RocketMQ's with enablePropertyFilter=false (its default), and answers
    as that one does: the consumer does not start, with RocketMQ's words, instead of starting and
    receiving nothing."""
    import subprocess
    from tests.helpers.java_client import java_argv
    topic, group = _unique("JSql"), _unique("cg")
    produce("java", cluster, topic, [{"tags": "TagA", "body": "x", "props": {"a": "2"}}], tmp_path)
    opt = {"nameSrv": cluster.namesrv, "group": group, "topic": topic, "sql": "a > 1", "deadline": 60}
    p = subprocess.run(java_argv("consume", opt, tmp_path / "home"), capture_output=True, text=True, timeout=90,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 1, (p.stdout, p.stderr[-2000:])
    assert "The broker does not support consumer to filter message by SQL92" in p.stdout, p.stdout


def _topic_on_both(cluster, b, topic: str) -> None:
    """The topic with 4 queues on broker-a and on `b`, both in its route."""
    cluster.create_topic(topic)
    r = b.call(codes.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
    assert r.code == codes.SUCCESS
    wait_for(lambda: len(cluster.wait_route(topic)["brokerDatas"]) == 2, 30, "both groups in the route")


def test_two_broker_groups_share_the_sends_and_a_dead_one_is_sent_around(cluster, tmp_path):
    """A topic on broker-a and broker-b: the producer spreads its sends over both groups' queues and
    the consumer reads from both. Then broker-b is killed -9 under a running producer whose route
    still lists it: every later send still succeeds, retried on broker-a (retryTimesWhenSendFailed)."""
    topic, group = _unique("JTwo"), _unique("cg")
    with SecondBroker(cluster, tmp_path / "b") as b:
        _topic_on_both(cluster, b, topic)
        specs = _messages(24)
        opt = {"nameSrv": cluster.namesrv, "group": "pg", "topic": topic, "messages": specs, "pauseAfter": 16}
        with JavaProcess("produce", opt, tmp_path / "home", "two") as producer:
            sent = producer.wait(lambda ls: ls[:16] if {"paused": 16} in ls else None, 60, "the first 16 sends")
            assert {s["brokerName"] for s in sent} == {"broker-a", "broker-b"}
            for name, port in (("broker-a", cluster.port), ("broker-b", b.port)):
                mine = [s for s in sent if s["brokerName"] == name]
                assert all(s["status"] == "SEND_OK" and s["offsetMsgId"].startswith(f"7F000001{port:08X}")
                           for s in mine)
            with _consumer(cluster, tmp_path, topic, group) as c:
                got = c.wait(lambda g: len(g) >= 16, 60, "all 16 from both groups")
            by_id = {m["msgId"]: m for m in got}
            for s, spec in zip(sent, specs):
                m = by_id[s["msgId"]]
                assert (m["brokerName"], m["queueId"], m["queueOffset"], m["body"]) == \
                    (s["brokerName"], s["queueId"], s["queueOffset"], spec["body"])
            b.child.kill_group()  # kill -9; the producer's route (refreshed every 30 s) still has it
            producer.child.proc.stdin.write(b"go\n")
            producer.child.proc.stdin.flush()
            after = producer.ready()[17:]
    assert [(s.get("status"), s["brokerName"]) for s in after] == [("SEND_OK", "broker-a")] * 8, after


def test_pull_consumer_pulls_filters_commits_and_is_told_an_offset_is_illegal(cluster, tmp_path):
    """DefaultMQPullConsumer: pull(mq, "TagA || TagB", offset, 32) per queue until NO_NEW_MSG,
    updateConsumeOffset and fetchConsumeOffset(mq, true) through the broker, and an offset past the
    end answered OFFSET_ILLEGAL with where to go."""
    topic, group = _unique("JPull"), _unique("cg")
    specs = _messages(12, tags=("TagA", "TagB", "TagC"))
    sent = produce("java", cluster, topic, specs, tmp_path)
    wait_for(cluster.dispatched_all, 30, "the broker to dispatch everything it wrote")
    ends = {q: cluster.max_offset(topic, q) for q in range(4)}
    opt = {"nameSrv": cluster.namesrv, "group": group, "topic": topic, "expression": "TagA || TagB", "commit": True}
    lines = run("pull", opt, tmp_path / "home")
    assert lines[0] == {"queues": [0, 1, 2, 3]}
    assert lines[1] == {"stored": {"0": 0, "1": 0, "2": 0, "3": 0}}  # nothing committed: queues still hold 0
    pulls = lines[2:]
    found = [m for p in pulls for m in p["messages"]]
    assert sorted(m["msgId"] for m in found) == sorted(s["msgId"] for s, spec in zip(sent, specs)
                                                        if spec["tags"] != "TagC")
    by_id = {m["msgId"]: m for m in found}
    for s, spec in zip(sent, specs):
        if spec["tags"] != "TagC":
            _check_received(by_id[s["msgId"]], s, spec, topic, cluster)
    for q in range(4):
        mine = [p for p in pulls if p["queueId"] == q]
        assert (mine[0]["status"], mine[0]["minOffset"], mine[0]["maxOffset"]) == ("FOUND", 0, ends[q]), mine[0]
        assert (mine[-1]["status"], mine[-1]["nextBeginOffset"]) == ("NO_NEW_MSG", ends[q]), mine
    _committed_reach(cluster, group, topic, ends)  # updateConsumeOffset, then persist(mq)
    again = run("pull", {**opt, "from": {"0": ends[0] + 5}}, tmp_path / "home")
    assert again[1] == {"stored": {str(q): o for q, o in ends.items()}}
    past = next(p for p in again[2:] if p["queueId"] == 0)
    assert (past["offset"], past["status"], past["nextBeginOffset"], past["messages"]) == \
        (ends[0] + 5, "OFFSET_ILLEGAL", ends[0], [])
    assert all(p["status"] == "NO_NEW_MSG" for p in again[2:] if p["queueId"] != 0)


def test_without_auto_creation_an_unknown_topic_has_no_route_until_created(tmp_path):
    """autoCreateTopicEnable=false: the broker holds no TBW102 (as RocketMQ's), so the name server
    has no route for an unknown topic and the Java producer stops at its own "No route info of this
    topic", sending nothing; once the topic is created (UPDATE_AND_CREATE_TOPIC) sends go through."""
    with Cluster(tmp_path / "c", "autoCreateTopicEnable=false\n") as c:
        r = c.call(codes.GET_ALL_TOPIC_CONFIG, {})
        assert "TBW102" not in msgspec.json.decode(bytes(r.body))["topicConfigTable"]
        [refused] = produce("java", c, "NotCreated", [{"tags": "TagA", "body": "x"}], tmp_path)
        assert refused["code"] == 10005 and "No route info of this topic: NotCreated" in refused["error"], refused
        c.create_topic("NotCreated")
        sent = produce("java", c, "NotCreated", _messages(4), tmp_path)
        _check_sent(sent, "NotCreated", c)


def test_two_thousand_async_sends_in_flight_are_all_stored_in_order(cluster, tmp_path):
    """The client pipelines async sends on one connection (the send kernel's path): every one is
    answered SEND_OK and each queue's offsets run 0..n-1 without a gap or a repeat."""
    topic, group = _unique("JMany"), _unique("cg")
    sent = run("produce", {"nameSrv": cluster.namesrv, "group": "pg", "topic": topic, "mode": "async",
                           "count": 2000, "template": {"tags": "TagA", "body": "many"}}, tmp_path / "home")
    assert len(sent) == 2000 and all(s["status"] == "SEND_OK" for s in sent)
    assert sorted(s["i"] for s in sent) == list(range(2000))
    _check_sent(sent, topic, cluster)
    assert len({s["offsetMsgId"] for s in sent}) == 2000
    wait_for(cluster.dispatched_all, 30, "the broker to dispatch everything it wrote")
    assert cluster.total(topic) == 2000


def test_an_orderly_consumer_that_suspends_gets_each_message_again_before_the_next(cluster, tmp_path):
    """MessageListenerOrderly answering SUSPEND_CURRENT_QUEUE_A_MOMENT on each message's first
    delivery: the queue stays locked to it and the same message comes back (reconsumeTimes 1)
    before the next one, so the order holds."""
    topic, group = _unique("JOrderFail"), _unique("cg")
    specs = [{"tags": "TagA", "keys": [f"k{i % 2}"], "body": f"{i % 2}-{i // 2}", "orderKey": i % 2} for i in range(12)]
    produce("java", cluster, topic, specs, tmp_path, mode="orderly")
    with _consumer(cluster, tmp_path, topic, group, orderly=True, fail="once", suspendMillis=100) as c:
        got = c.wait(lambda g: sum(not m["failing"] for m in g) >= 12, 60, "all 12 after a failure each")
    for key in range(2):
        mine = [(m["body"], m["reconsumeTimes"], m["failing"]) for m in got if m["keys"] == f"k{key}"]
        assert mine == [x for n in range(6) for x in ((f"{key}-{n}", 0, True), (f"{key}-{n}", 1, False))], mine


def test_a_transaction_left_undecided_is_checked_with_the_restarted_producer(cluster, tmp_path):
    """The producer that sent a half message answers its check-backs UNKNOW, then is killed -9; a
    new producer process of the same group is asked next, commits, and the message is delivered."""
    topic, group, pgroup = _unique("JTxRestart"), _unique("cg"), _unique("txpg")
    first = {"nameSrv": cluster.namesrv, "group": pgroup, "topic": topic, "instanceName": "tx1",
             "messages": [{"tags": "T", "body": "decided later", "local": "UNKNOW"}], "checkAnswer": "UNKNOW"}
    with JavaProcess("transaction", first, tmp_path / "home", "tx1") as p1:
        [sent] = p1.ready()
        assert (sent["status"], sent["localState"]) == ("SEND_OK", "UNKNOW")
        p1.wait(lambda ls: [x for x in ls if x.get("check") == "UNKNOW"], 30, "a check-back answered UNKNOW")
        p1.child.kill_group()  # kill -9
    second = {**first, "instanceName": "tx2", "messages": [], "checkAnswer": "COMMIT_MESSAGE"}
    with JavaProcess("transaction", second, tmp_path / "home", "tx2") as p2, \
            _consumer(cluster, tmp_path, topic, group) as c:
        [check] = p2.wait(lambda ls: [x for x in ls if x.get("check") == "COMMIT_MESSAGE"][:1], 30,
                          "the check-back to reach the new producer")
        assert (check["uniqKey"], check["body"], check["topic"]) == (sent["msgId"], "decided later", topic)
        [m] = c.wait(lambda g: g, 60, "the committed message")
    assert (m["msgId"], m["body"], m["queueId"]) == (sent["msgId"], "decided later", sent["queueId"])


def test_a_sync_master_without_its_slave_answers_slave_not_available_and_the_client_sends_on(cluster, tmp_path):
    """broker-b is a SYNC_MASTER whose slave is not there: it stores each send and answers
    SLAVE_NOT_AVAILABLE (11), as RocketMQ's handleHA. The Java client reports that status (not an
    error); with retryAnotherBrokerWhenNotStoreOK it sends the message again to broker-a. A message
    sent with waitStoreMsgOK=false (WAIT=false) is answered SEND_OK without waiting for the slave,
    as RocketMQ's CommitLog does. Every message is stored as RocketMQ stores it: with the broker's
    CLUSTER, without WAIT."""
    topic, group = _unique("JSyncMaster"), _unique("cg")
    with SecondBroker(cluster, tmp_path / "b", brokerRole="SYNC_MASTER") as b:
        _topic_on_both(cluster, b, topic)
        plain = produce("java", cluster, topic, _messages(8, prefix="plain"), tmp_path)
        statuses = {(s["brokerName"], s["status"]) for s in plain}
        assert statuses == {("broker-a", "SEND_OK"), ("broker-b", "SLAVE_NOT_AVAILABLE")}, plain
        retried = produce("java", cluster, topic, _messages(8, prefix="retried"), tmp_path, retryAnotherBroker=True)
        assert {(s["brokerName"], s["status"]) for s in retried} == {("broker-a", "SEND_OK")}, retried
        nowait = produce("java", cluster, topic, [{**m, "waitStoreMsgOK": False} for m in _messages(8, prefix="nowait")],
                         tmp_path)
        assert {(s["brokerName"], s["status"]) for s in nowait} == {("broker-a", "SEND_OK"), ("broker-b", "SEND_OK")}
        # each message is stored where it was sent: those retried after broker-b's answer are
        # there too (RocketMQ's at-least-once: sending again is the client's choice)
        on_b = [s for s in plain if s["brokerName"] == "broker-b"]

        def held_by_b():
            return sum(int(b.call(codes.GET_MAX_OFFSET, {"topic": topic, "queueId": q}).ext["offset"])
                       for q in range(4))
        wait_for(lambda: held_by_b() > len(on_b), 30, "broker-b to hold the first tries of the retried sends")
        with _consumer(cluster, tmp_path, topic, group) as c:
            got = c.wait(lambda g: {m["body"] for m in g} >= {f"{p}-{i}" for i in range(8)
                                                               for p in ("plain", "retried", "nowait")}, 60, "every message")
    assert {m["msgId"] for m in got if m["brokerName"] == "broker-b"} >= {s["msgId"] for s in on_b}
    # stored as Apache RocketMQ 5.5.0 stores them: the broker's CLUSTER, WAIT as the producer sent it
    assert all(m["props"]["CLUSTER"] == "DefaultCluster" for m in got)
    assert {m["props"]["WAIT"] for m in got if m["body"].startswith("nowait")} == {"false"}
    assert {m["props"]["WAIT"] for m in got if not m["body"].startswith("nowait")} == {"true"}


def _requests(cluster, tmp_path, topic: str, n: int, timeout: int) -> list[dict]:
    """n requests sync, then n with a RequestCallback, from one requester."""
    return run("request", {"nameSrv": cluster.namesrv, "group": _unique("rq"), "topic": topic,
                           "modes": ["sync", "async"], "timeout": timeout,
                           "messages": [{"tags": "Q", "body": f"q-{i}"} for i in range(n)]}, tmp_path / "home")


def test_request_reply_sync_and_async_get_the_responders_replies(cluster, tmp_path):
    """DefaultMQProducer.request, sync and with a RequestCallback: the responder (a push consumer)
    reads the request with the broker's CLUSTER, builds its reply with MessageUtil.createReplyMessage
    and sends it (SEND_REPLY_MESSAGE_V2); the broker pushes it to the requester
    (PUSH_REPLY_MESSAGE_TO_CLIENT), which matches it by CORRELATION_ID. A message sent without
    REPLY_TO_CLIENT cannot be replied to: the broker refuses the reply."""
    topic, group = _unique("JRequest"), _unique("cg")
    produce("java", cluster, topic, [{"tags": "Plain", "body": "no-reply-to"}], tmp_path)  # the topic's route
    with _consumer(cluster, tmp_path, topic, group, reply=True) as responder:
        [plain] = responder.wait(lambda g: g, 60, "the plain message")
        assert plain["props"]["CLUSTER"] == "DefaultCluster" and plain["props"]["WAIT"] == "true"
        # SYSTEM_ERROR ("reply message properties[REPLY_TO_CLIENT] is null"), which the client retries
        assert "Send [3] times, still failed" in plain["replyError"] and "REPLY_TOPIC" in plain["replyError"], plain
        got = _requests(cluster, tmp_path, topic, 3, 15000)
        requests = responder.wait(lambda g: g if len(g) >= 7 else None, 30, "the six requests")
    assert sorted((r["mode"], r["i"]) for r in got) == [(m, i) for m in ("async", "sync") for i in range(3)], got
    for r in got:
        reply = r["reply"]
        assert reply is not None, r
        assert reply["body"] == f"reply-q-{r['i']}" and reply["topic"] == "DefaultCluster_REPLY_TOPIC"
        assert reply["props"]["CORRELATION_ID"] == r["correlationId"] and reply["props"]["MSG_TYPE"] == "reply"
        assert reply["props"]["TTL"] == "15000" and "PUSH_REPLY_TIME" in reply["props"]
    assert len({r["correlationId"] for r in got}) == 6
    asked = [m for m in requests if m.get("replied")]
    assert len(asked) == 6 and all(m["replied"] == "SEND_OK" for m in asked)
    assert {m["props"]["CORRELATION_ID"] for m in asked} == {r["correlationId"] for r in got}
    assert all(m["props"]["CLUSTER"] == "DefaultCluster" and m["props"]["REPLY_TO_CLIENT"] for m in asked)
    # the replies are stored in the reply topic too (storeReplyMessageEnable)
    wait_for(lambda: cluster.total("DefaultCluster_REPLY_TOPIC", 1) >= 6, 10, "the stored replies")


def test_a_request_nobody_answers_times_out(cluster, tmp_path):
    """No responder: request() throws RequestTimeoutException after its timeout (sync), and the
    RequestCallback gets one (async). The topic is auto-created by the request itself."""
    got = _requests(cluster, tmp_path, _unique("JNoReply"), 1, 1500)
    assert [(r["mode"], r["errorClass"]) for r in got] == [("sync", "RequestTimeoutException"),
                                                            ("async", "RequestTimeoutException")], got
    assert "wait reply message timeout" in got[0]["error"] and "no reply message" in got[1]["error"], got
    assert all(r["elapsedMs"] >= 1400 for r in got), got
