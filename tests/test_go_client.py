"""The real Go remoting client, github.com/apache/rocketmq-client-go/v2 v2.1.2 (pinned in
tests/go/go.mod), unmodified, against `broker namesrv` + `broker serve` processes on loopback: its
sends (sync, async, one-way, batch, orderly with a queue selector, delayed, transactional with the
check-back, also after a producer restart), its push consumer (CLUSTERING and BROADCASTING, tag
expressions, orderly consumption, retries up to the dead letter queue, offsets kept across a
restart, two members sharing the queues, a SQL92 selector refused), its pull consumer, its admin
client, namespaces and ACL. The driver (tests/go, built to build/go/rmqgo by `make clients`) prints
one JSON line per event; every field that comes back is checked against what the broker stored."""
from __future__ import annotations

import itertools
import re
import socket

import pytest

from tests.conftest import wait_for
from tests.helpers.go_client import GoConsumer, go, produce
from tests.helpers.real_clients import Cluster

_names = itertools.count()
SEND_OK = 0  # primitive.SendOK
PULL_FOUND = 0  # primitive.PullFound


def _unique(prefix: str) -> str:
    return f"{prefix}-go-{next(_names)}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # a check-back every 200 ms, up to 100 times: 20 s for a restarted producer to register
    conf = "maxReconsumeTimes=16\ntransactionCheckInterval=200\ntransactionTimeOut=400\ntransactionCheckMax=100\n"
    with Cluster(tmp_path_factory.mktemp("go-client"), conf) as c:
        yield c


def _messages(n: int, tags=("TagA", "TagB"), prefix: str = "body") -> list[dict]:
    return [{"tags": tags[i % len(tags)], "keys": [f"key-{i}", f"order-{i}"], "props": {"color": f"c{i}"},
             "body": f"{prefix}-{i}"} for i in range(n)]


def _offset_msg_id(cluster: Cluster, physical_offset: int) -> str:
    """RocketMQ's offsetMsgId: the store host (IPv4, port) and the commit log offset, in hex."""
    return (socket.inet_aton("127.0.0.1") + cluster.port.to_bytes(4, "big")
            + physical_offset.to_bytes(8, "big")).hex().upper()


def _stored(cluster: Cluster, topic: str, queues: int = 4) -> dict:
    """The topic's stored records by (queueId, queueOffset)."""
    return {(r.queue_id, r.queue_offset): r for q in range(queues) for r in cluster.records(topic, q)}


def _check_stored(cluster: Cluster, topic: str, messages: list[dict], results: list[dict]) -> None:
    """Each send result names the record the broker stored for its message: same queue and offset,
    offsetMsgId of its commit log offset, msgId its UNIQ_KEY, tags, keys, properties and body."""
    stored = _stored(cluster, topic)
    assert len(stored) == len(messages)
    for m, r in zip(messages, results):
        assert (r["status"], r["topic"], r["brokerName"], r["regionId"]) == (SEND_OK, topic, "broker-a", "DefaultRegion")
        rec = stored[(r["queueId"], r["queueOffset"])]
        assert re.fullmatch(r"[0-9A-Fa-f]{32}", r["msgId"]), r
        assert rec.properties["UNIQ_KEY"] == r["msgId"]
        assert r["offsetMsgId"] == rec.msg_id == _offset_msg_id(cluster, rec.physical_offset)
        assert (bytes(rec.body).decode(), rec.properties["TAGS"], rec.properties["KEYS"], rec.properties["color"]) == \
               (m["body"], m["tags"], " ".join(m["keys"]), m["props"]["color"])
        assert rec.born_host.startswith("127.0.0.1:") and rec.store_host == cluster.addr
    assert len({r["msgId"] for r in results}) == len(results)


def _committed(cluster: Cluster, group: str, topic: str, queue_id: int) -> int:
    """The group's offset the broker holds for a queue (QUERY_CONSUMER_OFFSET), -1 for none."""
    from broker.remoting import codes
    r = cluster.call(codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": queue_id})
    return int(r.ext["offset"]) if r.code == codes.SUCCESS else -1


def _contiguous(results: list[dict]) -> None:
    """Per queue, the offsets handed out are 0, 1, 2, ... with none twice."""
    by_queue: dict[int, list[int]] = {}
    for r in results:
        by_queue.setdefault(r["queueId"], []).append(r["queueOffset"])
    for q, offsets in by_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), (q, offsets)


def test_sync_send_results_name_the_stored_messages(cluster):
    topic = _unique("Sync")
    messages = _messages(8)
    results = produce(cluster, topic, messages, "sync")
    _check_stored(cluster, topic, messages, results)
    _contiguous(results)
    # the producer's round robin visits every queue of the auto-created topic
    assert {r["queueId"] for r in results} == {0, 1, 2, 3}


def test_async_sends_all_in_flight_each_get_their_own_offset(cluster):
    topic = _unique("Async")
    messages = _messages(16)
    results = produce(cluster, topic, messages, "async")
    _check_stored(cluster, topic, messages, results)
    _contiguous(results)


def test_oneway_sends_are_stored(cluster):
    topic = _unique("Oneway")
    messages = _messages(6)
    assert produce(cluster, topic, messages, "oneway") == [{"sent": True}] * 6
    wait_for(lambda: cluster.total(topic) == 6, 30, "the one-way messages stored")
    stored = sorted(_stored(cluster, topic).values(), key=lambda r: bytes(r.body))
    assert [(bytes(r.body).decode(), r.properties["TAGS"], r.properties["color"]) for r in stored] == \
           [(m["body"], m["tags"], m["props"]["color"]) for m in messages]


def test_a_batch_lands_in_one_queue_in_order_each_message_with_its_own_properties(cluster):
    topic = _unique("Batch")
    messages = _messages(5)
    [r] = produce(cluster, topic, messages, "batch")
    assert (r["status"], r["topic"]) == (SEND_OK, topic)
    stored = _stored(cluster, topic)
    records = [stored[(r["queueId"], r["queueOffset"] + i)] for i in range(5)]
    assert len(stored) == 5 and r["queueOffset"] == 0
    # the reply's offsetMsgId: the comma-joined ids of the messages, in their order
    assert r["offsetMsgId"] == ",".join(rec.msg_id for rec in records)
    for m, rec in zip(messages, records):
        assert (bytes(rec.body).decode(), rec.properties["TAGS"], rec.properties["KEYS"], rec.properties["color"]) == \
               (m["body"], m["tags"], " ".join(m["keys"]), m["props"]["color"])
    # v2.1.2 gives a batch's messages no UNIQ_KEY, and a RocketMQ broker adds none to a batch
    # (only to a single message without one, from 5.0): consumers see their offsetMsgId as msgId
    assert not any("UNIQ_KEY" in rec.properties for rec in records)


def test_orderly_sends_keep_a_sharding_key_on_one_queue_and_its_order_when_consumed(cluster, tmp_path):
    topic, group = _unique("Orderly"), _unique("cg")
    keys = ["order-a", "order-b", "order-c", "order-d"]
    messages = [{"tags": "TagA", "shardingKey": k, "keys": [k], "body": f"{k}:{i}"} for i in range(10) for k in keys]
    results = produce(cluster, topic, messages, "orderly")
    assert all(r["status"] == SEND_OK for r in results)
    queue_of: dict[str, set] = {}
    for m, r in zip(messages, results):
        queue_of.setdefault(m["shardingKey"], set()).add(r["queueId"])
    assert all(len(qs) == 1 for qs in queue_of.values()), queue_of
    for k in keys:  # in a key's queue, its messages at increasing offsets in the order sent
        offsets = [r["queueOffset"] for m, r in zip(messages, results) if m["shardingKey"] == k]
        assert offsets == sorted(offsets)
    with GoConsumer(cluster, tmp_path, topic, group, "orderly", orderly=True, fromFirst=True) as c:
        got = c.wait(lambda g: len(g) >= len(messages), 90, "every orderly message")
    assert sorted(d["body"] for d in got) == sorted(m["body"] for m in messages)
    for k in keys:
        mine = [d for d in got if d["body"].startswith(k + ":")]
        assert [d["body"] for d in mine] == [f"{k}:{i}" for i in range(10)], mine
        assert {d["queueId"] for d in mine} == queue_of[k] and {d["keys"] for d in mine} == {k}


def test_transactions_commit_rollback_and_the_check_back_of_an_unknown_one(cluster):
    topic = _unique("Tx")
    messages = [{"tags": "TagA", "keys": ["tx-commit"], "props": {"color": "c0"}, "body": "commit", "local": "commit"},
                {"tags": "TagA", "keys": ["tx-rollback"], "body": "rollback", "local": "rollback"},
                {"tags": "TagB", "keys": ["tx-late-commit"], "props": {"color": "c2"}, "body": "late-commit",
                 "local": "unknown", "check": "commit"},
                {"tags": "TagB", "keys": ["tx-late-rollback"], "body": "late-rollback", "local": "unknown",
                 "check": "rollback"}]
    lines = go("transaction", cluster, group=_unique("txg"), topic=topic, messages=messages, checkSeconds=60)
    sends = [ln for ln in lines if "state" in ln]
    checks = [ln for ln in lines if "check" in ln]
    assert "timeout" not in str(lines), lines
    assert [s["state"] for s in sends] == ["commit", "rollback", "unknown", "unknown"]
    assert all(s["status"] == SEND_OK and s["topic"] == topic for s in sends)
    # the broker checked back each undecided one with the half message as the producer sent it
    by_body = {c["check"]: c for c in checks}
    assert set(by_body) == {"late-commit", "late-rollback"}, checks
    for s, m in zip(sends[2:], messages[2:]):
        c = by_body[m["body"]]
        assert (c["topic"], c["msgId"], c["transactionId"], c["tags"], c["keys"]) == \
               (topic, s["msgId"], s["msgId"], m["tags"], m["keys"][0])
        assert c["props"]["UNIQ_KEY"] == s["msgId"] and c["props"]["TRAN_MSG"] == "true"
    assert by_body["late-commit"]["props"]["color"] == "c2"
    # what was committed (at once, or on the check-back) reaches the topic; nothing rolled back does
    wait_for(lambda: cluster.total(topic) == 2, 30, "both commits in the topic")
    stored = sorted(_stored(cluster, topic).values(), key=lambda r: bytes(r.body))
    assert [bytes(r.body) for r in stored] == [b"commit", b"late-commit"]
    for rec, s in zip(stored, (sends[0], sends[2])):
        assert rec.properties["UNIQ_KEY"] == s["msgId"] and "TRAN_MSG" not in rec.properties
    assert stored[1].properties["color"] == "c2" and stored[1].properties["TAGS"] == "TagB"


def test_push_consumer_gets_only_the_subscribed_tags_field_by_field(cluster, tmp_path):
    topic, group = _unique("Tags"), _unique("cg")
    messages = _messages(12, tags=("TagA", "TagB", "TagC"))
    results = produce(cluster, topic, messages)
    with GoConsumer(cluster, tmp_path, topic, group, "tags", expression="TagA || TagB", fromFirst=True) as c:
        got = c.wait(lambda g: len(g) >= 8, 60, "every TagA and TagB message")
        # a TagC sent last on each queue: had it passed the filter it would have been delivered
        # by the time a TagA after it is
        tail = produce(cluster, topic, [{"tags": "TagC", "body": f"tail-c-{i}"} for i in range(4)]
                       + [{"tags": "TagA", "body": f"tail-a-{i}"} for i in range(4)])
        got = c.wait(lambda g: len(g) >= 12, 60, "the tail's TagA messages")
    assert sorted(d["body"] for d in got) == sorted(
        [m["body"] for m in messages if m["tags"] != "TagC"] + [f"tail-a-{i}" for i in range(4)])
    sent = {r["msgId"]: (m, r) for m, r in zip(messages, results)}
    for d in got:
        if d["body"].startswith("tail"):
            continue
        m, r = sent[d["msgId"]]
        assert (d["topic"], d["body"], d["tags"], d["keys"], d["props"]["color"]) == \
               (topic, m["body"], m["tags"], " ".join(m["keys"]), m["props"]["color"])
        assert (d["queueId"], d["queueOffset"], d["offsetMsgId"], d["brokerName"]) == \
               (r["queueId"], r["queueOffset"], r["offsetMsgId"], "broker-a")
        assert d["reconsumeTimes"] == 0 and d["storeHost"] == cluster.addr
        assert d["props"]["UNIQ_KEY"] == d["msgId"]
    assert len(tail) == 8


def test_a_failed_delivery_comes_back_with_reconsume_times_1(cluster, tmp_path):
    topic, group = _unique("Retry"), _unique("cg")
    messages = _messages(4)
    results = produce(cluster, topic, messages)
    with GoConsumer(cluster, tmp_path, topic, group, "retry", fail="once", fromFirst=True) as c:
        got = c.wait(lambda g: sum(d["reconsumeTimes"] == 1 for d in g) >= 4, 60, "every message redelivered")
    first = {d["msgId"]: d for d in got if d["reconsumeTimes"] == 0}
    again = {d["msgId"]: d for d in got if d["reconsumeTimes"] == 1}
    assert set(first) == set(again) == {r["msgId"] for r in results}
    for m, r in zip(messages, results):  # through %RETRY%<group>, handed back under the topic, intact
        d = again[r["msgId"]]
        assert (d["topic"], d["body"], d["tags"], d["keys"], d["props"]["color"]) == \
               (topic, m["body"], m["tags"], " ".join(m["keys"]), m["props"]["color"])
        assert d["props"]["RETRY_TOPIC"] == topic and d["props"]["ORIGIN_MESSAGE_ID"] == r["offsetMsgId"]
        assert d["offsetMsgId"] != r["offsetMsgId"]  # a copy, stored anew
    assert cluster.total(f"%RETRY%{group}", 1) == 4
    assert cluster.total(f"%DLQ%{group}", 1) == 0


def test_past_max_reconsume_times_a_message_lands_in_the_dead_letter_queue(cluster, tmp_path):
    topic, group = _unique("Dlq"), _unique("cg")
    messages = _messages(2)
    results = produce(cluster, topic, messages)
    with GoConsumer(cluster, tmp_path, topic, group, "dlq", fail="always", maxReconsumeTimes=2, fromFirst=True) as c:
        wait_for(lambda: cluster.total(f"%DLQ%{group}", 1) == 2, 60, "both messages in the dead letter queue")
        got = c.wait(lambda g: sum(d["reconsumeTimes"] == 2 for d in g) >= 2, 30, "the last retries")
    for r in results:  # delivered 3 times: the first and 2 retries, then no more
        assert sorted(d["reconsumeTimes"] for d in got if d["msgId"] == r["msgId"]) == [0, 1, 2]
    # the dead letters, read back with the Go pull consumer
    lines = go("pull", cluster, group=_unique("dlq-reader"), topic=f"%DLQ%{group}", queueId=0, offset=0, max=32)
    head, dead = lines[0], lines[1:]
    assert (head["status"], head["minOffset"], head["maxOffset"], head["nextBeginOffset"]) == (PULL_FOUND, 0, 2, 2)
    by_id = {d["msgId"]: d for d in dead}
    assert set(by_id) == {r["msgId"] for r in results}
    for m, r in zip(messages, results):
        d = by_id[r["msgId"]]
        assert (d["topic"], d["body"], d["tags"], d["keys"], d["props"]["color"]) == \
               (f"%DLQ%{group}", m["body"], m["tags"], " ".join(m["keys"]), m["props"]["color"])
        assert d["props"]["RETRY_TOPIC"] == topic and d["reconsumeTimes"] == 3
        assert d["props"]["ORIGIN_MESSAGE_ID"] == r["offsetMsgId"]


def test_a_restarted_consumer_resumes_from_its_committed_offsets(cluster, tmp_path):
    topic, group = _unique("Resume"), _unique("cg")
    produce(cluster, topic, _messages(8))
    with GoConsumer(cluster, tmp_path, topic, group, "first", fromFirst=True) as c:
        c.wait(lambda g: len(g) >= 8, 60, "the first 8")
        ends = [cluster.max_offset(topic, q) for q in range(4)]
        # the consumer commits every queue's offset to the broker (one-way requests, which the
        # driver has it send every 100 ms; see tests/go/consumer.go for why not only at Shutdown)
        wait_for(lambda: [_committed(cluster, group, topic, q) for q in range(4)] == ends, 10,
                 f"the committed offsets to reach {ends}")
    later = [{"tags": "TagA", "body": f"later-{i}"} for i in range(8)]
    produce(cluster, topic, later)
    # fromFirst again: only offsets the broker kept for the group keep the first 8 from coming back
    with GoConsumer(cluster, tmp_path, topic, group, "second", fromFirst=True) as c:
        got = c.wait(lambda g: len(g) >= 8, 60, "the next 8")
        produce(cluster, topic, [{"tags": "TagA", "body": "sentinel"}])
        got = c.wait(lambda g: any(d["body"] == "sentinel" for d in g), 60, "the sentinel")
    assert sorted(d["body"] for d in got) == sorted([f"later-{i}" for i in range(8)] + ["sentinel"]), got


def test_a_body_over_4k_is_deflated_by_the_producer_and_inflated_for_the_consumer(cluster, tmp_path):
    topic, group = _unique("Big"), _unique("cg")
    [r] = produce(cluster, topic, [{"tags": "Big", "keys": ["big"], "props": {"color": "big"}, "size": 9000}])
    [rec] = _stored(cluster, topic).values()
    # stored as sent: the compressed flag set, the deflated body far smaller than 9000 bytes
    assert rec.sys_flag & 1 and len(rec.body) < 1024 and rec.properties["UNIQ_KEY"] == r["msgId"]
    with GoConsumer(cluster, tmp_path, topic, group, "big") as c:
        [d] = c.wait(lambda g: len(g) >= 1, 60, "the big message")
    assert (d["msgId"], d["size"], d["bodyIsX"], d["tags"], d["props"]["color"]) == (r["msgId"], 9000, True, "Big", "big")


def test_a_delay_level_holds_the_message_in_the_schedule_topic_until_due(cluster, tmp_path):
    topic, group = _unique("Delay"), _unique("cg")
    held_before = sum(len(cluster.records("SCHEDULE_TOPIC_XXXX", q)) for q in range(18))
    [r] = produce(cluster, topic, [{"tags": "TagA", "keys": ["late"], "props": {"color": "late"}, "body": "late",
                                    "delayLevel": 3}])
    # stored in SCHEDULE_TOPIC_XXXX queue 2 (level 3) with the real topic and queue it goes to
    held = [m for m in cluster.records("SCHEDULE_TOPIC_XXXX", 2) if m.properties.get("REAL_TOPIC") == topic]
    assert len(held) == 1 and held[0].properties["REAL_QID"] == str(r["queueId"]) and held[0].properties["DELAY"] == "3"
    assert sum(len(cluster.records("SCHEDULE_TOPIC_XXXX", q)) for q in range(18)) == held_before + 1
    with GoConsumer(cluster, tmp_path, topic, group, "delay", fromFirst=True) as c:
        [d] = c.wait(lambda g: len(g) >= 1, 60, "the delayed message")
    assert (d["msgId"], d["body"], d["tags"], d["keys"], d["props"]["color"], d["queueId"]) == \
           (r["msgId"], "late", "TagA", "late", "late", r["queueId"])
    # level 3 is 100 ms here (the cluster's messageDelayLevel): not stored in the topic before it
    assert d["storeTimestamp"] - d["bornTimestamp"] >= 100


def test_orderly_consumption_suspends_a_failing_queue_then_dead_letters_the_message(cluster, tmp_path):
    """The orderly consumer retries locally (SuspendCurrentQueueAMoment), in order; past
    maxReconsumeTimes it sends the message back with delay level -1, which goes straight to %DLQ%."""
    topic, group = _unique("OrderlyDlq"), _unique("cg")
    messages = [{"tags": "TagA", "shardingKey": "k", "props": {"color": f"c{i}"}, "body": f"o{i}"} for i in range(3)]
    results = produce(cluster, topic, messages, "orderly")
    assert len({r["queueId"] for r in results}) == 1
    with GoConsumer(cluster, tmp_path, topic, group, "orderly-dlq", orderly=True, fail="always",
                    maxReconsumeTimes=1) as c:
        wait_for(lambda: cluster.total(f"%DLQ%{group}", 1) == 3, 90, "the three messages dead-lettered")
        got = c.wait(lambda g: len(g) >= 9, 30, "every local retry")
    # each delivered 3 times (first, the retry, the one found past the limit), one after the other
    assert [(d["body"], d["reconsumeTimes"]) for d in got[:9]] == \
           [(f"o{i}", t) for i in range(3) for t in (0, 1, 2)]
    assert cluster.total(f"%RETRY%{group}", 1) == 0  # no retry topic for orderly consumption
    dead = cluster.records(f"%DLQ%{group}", 0)
    assert [bytes(m.body) for m in dead] == [b"o0", b"o1", b"o2"]
    for m, r, sent in zip(dead, results, messages):  # the broker counts the one send-back
        assert (m.properties["UNIQ_KEY"], m.properties["RETRY_TOPIC"], m.properties["color"], m.reconsume_times) == \
               (r["msgId"], topic, sent["props"]["color"], 1)
        assert m.properties["ORIGIN_MESSAGE_ID"] == r["offsetMsgId"]


def test_a_new_group_on_a_young_queue_reads_from_0_whatever_its_consume_from_where(cluster, tmp_path):
    """RocketMQ's QUERY_CONSUMER_OFFSET answers 0 for a group without an offset while the queue
    still holds its first message, so CONSUME_FROM_TIMESTAMP (like CONSUME_FROM_LAST_OFFSET) only
    applies once the queue's head was cleaned: the Go consumer then reads everything."""
    import time as _time
    topic, group = _unique("Since"), _unique("cg")
    produce(cluster, topic, [{"tags": "TagA", "body": f"before-{i}"} for i in range(4)])
    stamp = _time.strftime("%Y%m%d%H%M%S", _time.localtime(_time.time() + 60))  # after all of them
    with GoConsumer(cluster, tmp_path, topic, group, "since", consumeTimestamp=stamp) as c:
        got = c.wait(lambda g: len(g) >= 4, 60, "the four sent before")
    assert sorted(d["body"] for d in got) == [f"before-{i}" for i in range(4)]
    assert all(d["queueOffset"] == 0 for d in got)


def test_admin_creates_a_topic_and_lists_topics_queues_and_subscription_groups(cluster, tmp_path):
    topic, group = _unique("Admin"), _unique("cg")
    with GoConsumer(cluster, tmp_path, topic, group, "admin-group"):
        pass  # its heartbeat creates the subscription group
    [create] = go("admin", cluster, ops=[{"op": "create", "topic": topic, "brokerAddr": cluster.addr, "queues": 3,
                                          "perm": 6}])
    assert create == {"op": "create"}
    # the broker registers the new topic with the name server (till then it answers a default route)
    route = wait_for(lambda: (r := cluster.wait_route(topic))["queueDatas"][0]["readQueueNums"] == 3 and r, 30,
                     "the created topic's route")
    topics, queues, groups = go("admin", cluster, ops=[
        {"op": "topics"}, {"op": "queues", "topic": topic}, {"op": "groups", "brokerAddr": cluster.addr}])
    assert topic in topics["topics"] and "TBW102" in topics["topics"]
    assert queues["queues"] == [{"topic": topic, "brokerName": "broker-a", "queueId": q} for q in range(3)]
    assert [(q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]] == [(3, 3, 6)]
    g = groups["groups"][group]
    assert (g["GroupName"], g["ConsumeEnable"], g["RetryMaxTimes"], g["RetryQueueNums"]) == (group, True, 16, 1)
    assert groups["dataVersion"]["Counter"] >= 1


def test_acl_signed_sends_consumption_and_check_back_pass_a_wrong_secret_is_refused(tmp_path):
    """Under aclEnable=true the Go client signs every request (HMAC-SHA1 of the sorted ext fields
    and the body): its sends, heartbeats, pulls, send-backs and a transaction's one-way
    END_TRANSACTION after the check-back all pass; a wrong secret is refused and stores nothing."""
    from tests.test_real_clients import ACL
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    conf = f"aclEnable=true\naclFile={acl}\ntransactionCheckInterval=200\ntransactionTimeOut=400\n"
    key = {"accessKey": "RocketMQ", "secretKey": "12345678"}
    with Cluster(tmp_path / "acl", conf, access=("inspector", "inspector-secret")) as c:
        topic, group = _unique("Acl"), _unique("cg")
        msg = {"tags": "TagA", "keys": ["k"], "props": {"color": "signed"}, "body": "signed"}
        [ok] = go("produce", c, group="go-acl-pg", topic=topic, messages=[msg], **key)
        assert ok["status"] == SEND_OK, ok
        [bad] = go("produce", c, group="go-acl-pg", topic=topic, messages=[dict(msg, body="forged")],
                   accessKey="RocketMQ", secretKey="wrong")
        assert set(bad) == {"error"} and "Check signature failed for accessKey=RocketMQ" in bad["error"], bad
        lines = go("transaction", c, group=_unique("txg"), topic=topic, checkSeconds=60, **key,
                   messages=[{"tags": "TagB", "body": "late", "local": "unknown", "check": "commit"}])
        assert [ln.get("check") for ln in lines if "check" in ln] == ["late"] and "timeout" not in str(lines), lines
        with GoConsumer(c, tmp_path, topic, group, "acl", fail="once", **key) as cons:
            got = cons.wait(lambda g: sum(d["reconsumeTimes"] == 1 for d in g) >= 2, 60, "both redelivered")
        assert sorted((d["body"], d["reconsumeTimes"]) for d in got) == \
               [("late", 0), ("late", 1), ("signed", 0), ("signed", 1)]
        assert sorted(bytes(r.body) for r in _stored(c, topic).values()) == [b"late", b"signed"]


def test_two_consumers_of_a_group_split_the_queues(cluster, tmp_path):
    """The Go client rebalances on GET_CONSUMER_LIST_BY_GROUP (at once on the broker's
    NOTIFY_CONSUMER_IDS_CHANGED, else every 20 s): with two members each queue has one owner."""
    topic, group = _unique("Split"), _unique("cg")
    produce(cluster, topic, [{"body": "warm-up"}])  # creates the topic's 4 queues
    with GoConsumer(cluster, tmp_path, topic, group, "split-a") as a, \
            GoConsumer(cluster, tmp_path, topic, group, "split-b") as b:
        for round_ in range(20):  # while ownership moves a queue may briefly have two pullers
            bodies = {f"r{round_}-{i}" for i in range(8)}
            produce(cluster, topic, [{"body": body} for body in sorted(bodies)])
            wait_for(lambda bodies=bodies: {d["body"] for d in a.got + b.got} >= bodies, 60, f"round {round_}")
            qa = {d["queueId"] for d in a.got if d["body"] in bodies}
            qb = {d["queueId"] for d in b.got if d["body"] in bodies}
            if qa and qb and not qa & qb:
                break
        else:
            raise AssertionError("the two consumers never shared the queues")
        assert len(qa | qb) == 4, (qa, qb)
        both = [d["body"] for d in a.got + b.got if d["body"] in bodies]
        assert sorted(both) == sorted(bodies)  # each once


def test_a_sql92_subscription_is_refused_with_rocketmqs_error_not_silently_starved(cluster, tmp_path):
    """The broker filters by tags only. A SQL92 expression (the Go consumer's MessageSelector of
    type SQL92, registered by its heartbeat) is refused on pull with RocketMQ's own answer when
    enablePropertyFilter is off, instead of being read as a tag that matches nothing."""
    from broker.remoting import codes
    topic, group = _unique("Sql"), _unique("cg")
    sent = produce(cluster, topic, [{"tags": "TagA", "props": {"a": str(i)}, "body": f"b{i}"} for i in range(4)])
    refusal = "The broker does not support consumer to filter message by SQL92"
    pull = {"consumerGroup": group, "topic": topic, "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
            "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0}
    with GoConsumer(cluster, tmp_path, topic, group, "sql", expression="a > 1", expressionType="SQL92") as c:
        # the consumer's own pulls name no expression: the broker takes its heartbeat's
        r = cluster.call(codes.PULL_MESSAGE, {**pull, "sysFlag": 0, "subscription": "", "expressionType": "TAG"})
        assert (r.code, r.remark) == (codes.SYSTEM_ERROR, refusal)
        assert c.got == []
    # a pull naming its SQL92 expression is refused too; a TAG one of the same group is served
    r = cluster.call(codes.PULL_MESSAGE, {**pull, "sysFlag": 4, "subscription": "a > 1", "expressionType": "SQL92"})
    assert (r.code, r.remark) == (codes.SYSTEM_ERROR, refusal)
    r = cluster.call(codes.PULL_MESSAGE, {**pull, "queueId": sent[0]["queueId"], "sysFlag": 4, "subscription": "TagA",
                                          "expressionType": "TAG"})
    assert r.code == codes.SUCCESS and r.ext["nextBeginOffset"] == "1"


def test_non_ascii_and_json_special_characters_survive_in_keys_properties_and_body(cluster, tmp_path):
    """The Go client writes its header as JSON: quotes, backslashes, tabs and non-ASCII text in
    keys and properties come through the broker's header parsing byte for byte."""
    topic, group = _unique("Text"), _unique("cg")
    msg = {"tags": "Tägß", "keys": ["ключ", 'q"uote', "back\\slash"], "props": {"ünï": '值"\\/\t', "emoji": "😀"},
           "body": "тело 😀"}
    [r] = produce(cluster, topic, [msg])
    [rec] = _stored(cluster, topic).values()
    assert (rec.properties["TAGS"], rec.properties["KEYS"], rec.properties["ünï"], rec.properties["emoji"]) == \
           ("Tägß", 'ключ q"uote back\\slash', '值"\\/\t', "😀")
    assert bytes(rec.body).decode() == "тело 😀" and rec.properties["UNIQ_KEY"] == r["msgId"]
    # (subscribed with "*": v2.1.2 hashes a tag's UTF-8 bytes for its codeSet where RocketMQ hashes
    # UTF-16, so a non-ASCII tag expression matches nothing on RocketMQ's broker either)
    with GoConsumer(cluster, tmp_path, topic, group, "text") as c:
        [d] = c.wait(lambda g: len(g) >= 1, 60, "the message")
    assert (d["tags"], d["keys"], d["props"]["ünï"], d["props"]["emoji"], d["body"], d["msgId"]) == \
           ("Tägß", 'ключ q"uote back\\slash', '值"\\/\t', "😀", "тело 😀", r["msgId"])


def test_a_namespace_prefixes_topic_group_and_retry_topic_on_the_wire(cluster, tmp_path):
    """WithNamespace("ns1"): the client sends to ns1%<topic> and consumes as group ns1%<group>, so
    the broker must take '%' inside names (TopicValidator's [%|a-zA-Z0-9_-])."""
    topic, group = _unique("Ns"), _unique("cg")
    results = go("produce", cluster, group="go-ns-pg", topic=topic, namespace="ns1",
                 messages=[{"tags": "TagA", "body": f"b{i}"} for i in range(3)])
    assert [r["topic"] for r in results] == [f"ns1%{topic}"] * 3
    wait_for(cluster.dispatched_all, 30, "the broker to dispatch everything it wrote")
    assert cluster.total(f"ns1%{topic}") == 3 and cluster.total(topic) == 0
    with GoConsumer(cluster, tmp_path, topic, group, "ns", namespace="ns1", fail="once") as c:
        got = c.wait(lambda g: sum(d["reconsumeTimes"] == 1 for d in g) >= 3, 60, "every message redelivered")
    assert sorted((d["body"], d["reconsumeTimes"]) for d in got) == [(f"b{i}", t) for i in range(3) for t in (0, 1)]
    assert cluster.total(f"%RETRY%ns1%{group}", 1) == 3


def test_a_producer_restarted_in_the_middle_answers_the_check_back(cluster):
    """The producer leaves two transactions undecided (UNKNOW) and exits; the broker checks them
    back with the next producer of the group, which commits one and rolls the other back."""
    topic, group = _unique("TxRestart"), _unique("txg")
    messages = [{"tags": "TagA", "keys": ["to-commit"], "body": "to-commit", "local": "unknown", "check": "commit"},
                {"tags": "TagA", "keys": ["to-roll-back"], "body": "to-roll-back", "local": "unknown",
                 "check": "rollback"}]
    first = go("transaction", cluster, group=group, topic=topic, checkSeconds=-1,
               messages=[dict(m, check="unknown") for m in messages])
    sends = [ln for ln in first if "state" in ln]
    assert [s["state"] for s in sends] == ["unknown", "unknown"] and all(s["status"] == SEND_OK for s in sends)
    # the first producer is gone; a new one of the group is asked (once its first send taught it the
    # broker's address, which its heartbeat registers the group with)
    second = go("transaction", cluster, group=group, topic=topic, checkSeconds=60, messages=[
        {"tags": "TagB", "body": "after-restart", "local": "commit"}, *[dict(m, checkOnly=True) for m in messages]])
    assert "timeout" not in str(second), second
    checks = {c["check"]: c for c in second if "check" in c}
    assert {b: c["answer"] for b, c in checks.items()} == {"to-commit": "commit", "to-roll-back": "rollback"}
    for s, m in zip(sends, messages):
        c = checks[m["body"]]
        assert (c["msgId"], c["topic"], c["keys"], c["props"]["PGROUP"]) == (s["msgId"], topic, m["keys"][0], group)
    wait_for(lambda: cluster.total(topic) == 2, 30, "both commits in the topic")
    stored = {bytes(r.body): r for r in _stored(cluster, topic).values()}
    assert sorted(stored) == [b"after-restart", b"to-commit"]
    assert stored[b"to-commit"].properties["UNIQ_KEY"] == sends[0]["msgId"]


def test_broadcasting_consumers_each_get_every_message_and_keep_their_offsets_locally(cluster, tmp_path):
    topic, group = _unique("Broadcast"), _unique("cg")
    produce(cluster, topic, [{"body": "warm-up"}])  # the topic and its 4 queues exist
    # from the first offset: "ready" is printed once the client starts, its rebalance (which reads a
    # new queue's start, the end of the queue when from the last offset) follows on its own; on a
    # loaded host it came after the sends and a member started past them
    with GoConsumer(cluster, tmp_path, topic, group, "bc-a", broadcasting=True, fromFirst=True) as a, \
            GoConsumer(cluster, tmp_path, topic, group, "bc-b", broadcasting=True, fromFirst=True) as b:
        results = produce(cluster, topic, _messages(8))
        want = {r["msgId"] for r in results}
        for c in (a, b):  # each member reads every queue
            got = c.wait(lambda g: want <= {d["msgId"] for d in g}, 60, "every message")
            assert sorted(d["body"] for d in got if d["msgId"] in want) == sorted(f"body-{i}" for i in range(8))
            assert {d["queueId"] for d in got if d["msgId"] in want} == {r["queueId"] for r in results}
    # each member keeps its own offsets, past every message (9 in all over the 4 queues)
    import json as _json
    files = sorted((tmp_path / "go-home" / ".rocketmq_client_go" / group).glob("*/offset.json"))
    assert [f.parent.name.split("@")[1] for f in files] == ["bc-a", "bc-b"]
    for f in files:
        table = {_json.loads(k)["queueId"]: v for k, v in _json.loads(f.read_text())["offsetTable"].items()}
        assert table == {q: cluster.max_offset(topic, q) for q in range(4)} and sum(table.values()) == 9
