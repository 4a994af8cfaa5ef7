"""The gRPC front with the official Java 5.x client (Maven Central rocketmq-client-java 5.2.0,
unmodified; tests/java5): its Producer's normal, FIFO, delayed and transactional sends (commit,
rollback, and the broker's check answered by its TransactionChecker), its SimpleConsumer's receive,
ack and changeInvisibleDuration, its PushConsumer's consumption, retries, FIFO order and
forwarding to %DLQ% past max attempts, and a broker killed -9 while messages are in flight, all
field by field. A JVM costs about a second, so each test plays its scenarios in one run."""
from __future__ import annotations

import json
import socket

import pytest

from broker.remoting import codes
from tests.conftest import wait_for
from tests.helpers.grpc_front import consumer_settings_reply, front_beside_cluster, stub_of
from tests.helpers.java5_client import Java5Process, of_step, run
from tests.test_transaction import TX_CONF

pytestmark = pytest.mark.timeout(180)

# three fast levels for the consumers' retries (the retry policy the front appoints), then whole
# seconds so that a 1 s delivery time maps to a level that really holds the message that long
LEVELS = "100ms 100ms 100ms " + " ".join(f"{s}s" for s in range(1, 16))
CONF = f"messageDelayLevel={LEVELS}\n"
# a PushConsumer's shutdown waits for its receive in flight: 2 s polls, not 20 s
FRONT_CONF = CONF + "grpcClientConsumerMaxLongPollingTimeoutMillis=2000\n"


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    root = tmp_path_factory.mktemp("java5")
    with front_beside_cluster(root, TX_CONF + CONF, FRONT_CONF) as f:
        yield f


def update_sub_group(front, group: str, **config) -> None:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, as `broker admin updateSubGroup` sends it:
    consumeMessageOrderly makes a FIFO group, retryMaxTimes its retries."""
    r = front.cluster.call(codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                           json.dumps({"groupName": group, **config}).encode())
    assert r.code == codes.SUCCESS, (r.code, r.remark)


def _ok(sent: list[dict]) -> list[str]:
    assert all("messageId" in s for s in sent), sent
    return [s["messageId"] for s in sent]


def _by_body(got: list[dict]) -> dict[str, dict]:
    return {d["body"]: d for d in got}


# -- Producer: every kind of send, received by a SimpleConsumer -------------------------------------

NORMAL = [{"tag": f"T{i % 2}", "keys": [f"k{i}", f"kk{i}"], "props": {"color": f"c{i}", "n": str(i)},
           "body": f"normal-{i}"} for i in range(5)] + [
    {"tag": "Big", "body": "x" * 20_000},
    {"tag": "Ünï", "keys": ["ключ", "k-2"], "props": {"名前": "値 = 1; 2", "q": "a\"b\\c", "sp": "a b"},
     "body": "unicode-雪 {\"json\": [1]}"}]
ASYNC = [{"tag": "A", "keys": [f"a{i}"], "props": {"i": str(i)}, "body": f"async-{i}"} for i in range(6)]
FIFO = [{"body": f"{g}-{i}", "group": g, "props": {"i": str(i)}} for i in range(5) for g in ("ga", "gb")]
DELAY = [{"body": "later", "tag": "D", "keys": ["kd"], "props": {"p": "d"}, "delayMs": 1000}]
TX = [{"body": "A", "tag": "TA", "keys": ["ka"], "props": {"p": "a"}, "transaction": "commit"},
      {"body": "B", "tag": "TB", "transaction": "rollback"},
      {"body": "U", "tag": "TU", "keys": ["ku"], "props": {"p": "u"}, "transaction": "unknown"}]

# refused by the front (a reserved property key, a delivery time past maxDelayTimeMills): the client
# is told why
BAD = [{"body": "bad-key", "props": {"__BORNHOST": "elsewhere"}},
       {"body": "bad-time", "delayMs": 2 * 24 * 3600 * 1000}]


@pytest.fixture(scope="module")
def sends(front, tmp_path_factory):
    """One run: the sends of every kind, then a SimpleConsumer of each topic; its lines by step."""
    c = front.cluster
    c.create_topic("J5Normal")
    c.create_topic("J5Fifo", queues=8)
    c.create_topic("J5Delay")
    c.create_topic("J5TxC", queues=1)
    c.create_topic("J5TxR", queues=1)
    update_sub_group(front, "j5-fifo", consumeMessageOrderly=True)
    lines = run(front.endpoints, [
        {"do": "produce", "name": "normal", "topic": "J5Normal", "messages": NORMAL},                  # 0
        {"do": "produce", "name": "normal", "topic": "J5Normal", "messages": ASYNC, "mode": "async"},  # 1
        {"do": "produce", "topic": "J5Fifo", "name": "fifo", "messages": FIFO},                       # 2
        {"do": "produce", "topic": "J5Delay", "name": "delay", "messages": DELAY},                    # 3
        # the producers of the transactions answer the broker's check COMMIT and ROLLBACK
        {"do": "produce", "topic": "J5TxC", "name": "txc", "messages": TX, "checker": "COMMIT",
         "awaitChecks": 1},                                                                            # 4
        {"do": "produce", "topic": "J5TxR", "name": "txr", "checker": "ROLLBACK", "awaitChecks": 1,
         "messages": [{"body": "R", "tag": "TR", "transaction": "unknown"}]},                          # 5
        {"do": "produce", "topic": "J5TxR", "name": "txr", "messages": [{"body": "after"}]},           # 6
        {"do": "receive", "name": "c1", "topic": "J5Normal", "group": "j5-normal", "count": 13},      # 7
        {"do": "receive", "name": "c2", "topic": "J5Fifo", "group": "j5-fifo", "count": 10},          # 8
        {"do": "receive", "name": "c3", "topic": "J5Delay", "group": "j5-delay", "count": 1},         # 9
        {"do": "receive", "name": "c4", "topic": "J5TxC", "group": "j5-txc", "count": 2},             # 10
        {"do": "receive", "name": "c5", "topic": "J5TxR", "group": "j5-txr", "count": 0, "awaitMs": 500},  # 11
        {"do": "produce", "name": "normal", "topic": "J5Normal", "messages": BAD},                    # 12
    ], tmp_path_factory.mktemp("java5-sends") / "home")
    assert not [x for x in lines if "failed" in x or "receiveFailed" in x], lines
    return lines


def test_normal_sync_and_async_sends_arrive_field_by_field(sends):
    ids = _ok(of_step(sends, 0, "sent")) + _ok(of_step(sends, 1, "sent"))
    got = of_step(sends, 7, "received")
    assert sorted(d["body"] for d in got) == sorted(m["body"] for m in NORMAL + ASYNC)
    assert sorted(d["messageId"] for d in got) == sorted(ids) and len(set(ids)) == 13
    by_body = _by_body(got)
    for i, m in enumerate(NORMAL):
        d = by_body[m["body"]]
        assert d["messageId"] == ids[i] and d["topic"] == "J5Normal" and d["tag"] == m["tag"]
        assert d["keys"] == sorted(m.get("keys", [])) and d["properties"] == m.get("props", {})
        assert d["messageGroup"] is None and d["deliveryTimestamp"] is None and d["deliveryAttempt"] == 1
        assert d["bornTimestamp"] <= d["receivedAt"]
        # the producer's host as its client named it (InetAddress.getLocalHost), not the front's
        assert d["bornHost"] == socket.gethostname()
    for m in ASYNC:
        d = by_body[m["body"]]
        assert (d["tag"], d["keys"], d["properties"], d["deliveryAttempt"]) == ("A", m["keys"], m["props"], 1)
    assert of_step(sends, 7, "acked") == [d["messageId"] for d in got]


def test_refused_sends_say_why(sends):
    key, time_ = of_step(sends, 12, "sent")
    assert key["error"] == "BadRequestException" and "__BORNHOST" in key["message"], key
    assert time_["error"] == "BadRequestException" and "delay time" in time_["message"], time_
    assert "messageId" not in key and "messageId" not in time_


def test_fifo_message_groups_come_in_send_order(sends):
    ids = _ok(of_step(sends, 2, "sent"))
    got = of_step(sends, 8, "received")
    assert sorted(d["messageId"] for d in got) == sorted(ids)
    for g in ("ga", "gb"):
        mine = [d for d in got if d["messageGroup"] == g]
        assert [d["body"] for d in mine] == [f"{g}-{i}" for i in range(5)]
        assert [d["properties"] for d in mine] == [{"i": str(i)} for i in range(5)]
        assert all(d["deliveryAttempt"] == 1 and d["tag"] is None for d in mine)
    assert {d["messageId"]: d["body"] for d in got} == {i: m["body"] for i, m in zip(ids, FIFO)}


def test_delivery_timestamp_holds_the_message_until_then(sends):
    [s] = of_step(sends, 3, "sent")
    [d] = of_step(sends, 9, "received")
    assert d["messageId"] == s["messageId"] and d["deliveryTimestamp"] == s["deliveryTimestamp"]
    assert d["receivedAt"] >= d["deliveryTimestamp"], "delivered before its delivery time"
    assert (d["body"], d["tag"], d["keys"], d["properties"]) == ("later", "D", ["kd"], {"p": "d"})


def test_transactions_commit_rollback_and_check_back(sends):
    a, b, u = _ok(of_step(sends, 4, "sent"))
    # only U, left open, is checked (again if a check comes before the answer to the first one)
    checks = of_step(sends, 4, "checked")
    assert checks and {(c["messageId"], c["topic"]) for c in checks} == {(u, "J5TxC")}
    for checked in checks:
        assert (checked["body"], checked["tag"], checked["keys"]) == ("U", "TU", ["ku"])
        assert checked["properties"]["p"] == "u"
    got = of_step(sends, 10, "received")
    assert [(d["body"], d["messageId"]) for d in got] == [("A", a), ("U", u)]  # B rolled back
    assert (got[0]["tag"], got[0]["keys"], got[0]["properties"]) == ("TA", ["ka"], {"p": "a"})
    assert (got[1]["tag"], got[1]["keys"], got[1]["properties"]["p"]) == ("TU", ["ku"], "u")
    [r_id] = _ok(of_step(sends, 5, "sent"))
    checks = of_step(sends, 5, "checked")
    assert checks and {(c["body"], c["messageId"]) for c in checks} == {("R", r_id)}
    # the check answered ROLLBACK: only the message sent after it is there
    assert [d["body"] for d in of_step(sends, 11, "received")] == ["after"]


# -- SimpleConsumer ---------------------------------------------------------------------------------

def test_simple_consumer_acks_changes_invisible_duration_and_filters_by_tag(front, tmp_path):
    c = front.cluster
    c.create_topic("J5Simple", queues=1)
    c.create_topic("J5Filter")
    sent = [{"body": f"s{i}", "tag": "S", "keys": [f"k{i}"], "props": {"i": str(i)}} for i in range(3)]
    tagged = [{"body": t.lower(), "tag": t} for t in ("TagA", "TagB", "TagC")]
    lines = run(front.endpoints, [
        {"do": "produce", "name": "p", "topic": "J5Simple", "messages": sent},                       # 0
        {"do": "produce", "name": "p2", "topic": "J5Filter", "messages": tagged},                     # 1
        # s1's invisible time is extended, then acked with the handle that gave; s2 is nacked
        # (invisible time 0) and comes back at once, attempt 2
        {"do": "receive", "name": "s", "topic": "J5Simple", "group": "j5-simple", "count": 4, "awaitMs": 500,
         "actions": {"s1": ["extend"], "s2": ["nack", "ack"]}},                                      # 2
        {"do": "receive", "name": "s", "topic": "J5Simple", "group": "j5-simple", "count": 0},       # 3
        {"do": "receive", "name": "f", "topic": "J5Filter", "group": "j5-filter", "count": 2, "awaitMs": 500,
         "expression": "TagA||TagB"},                                                                # 4
        {"do": "receive", "name": "f", "topic": "J5Filter", "group": "j5-filter", "count": 0},       # 5
    ], tmp_path / "home")
    ids = _ok(of_step(lines, 0, "sent"))
    got = of_step(lines, 2, "received")
    assert [(d["body"], d["deliveryAttempt"]) for d in got] == [("s0", 1), ("s1", 1), ("s2", 1), ("s2", 2)]
    assert [d["messageId"] for d in got] == ids + [ids[2]]
    for d in got:
        i = d["body"][1:]
        assert (d["tag"], d["keys"], d["properties"]) == ("S", [f"k{i}"], {"i": i})
    assert of_step(lines, 2, "changed") == [ids[1], ids[2]]
    assert of_step(lines, 2, "acked") == [ids[0], ids[1], ids[2]]
    assert not of_step(lines, 2, "failed") and not of_step(lines, 3, "received")  # nothing acked comes back
    assert sorted((d["body"], d["tag"]) for d in of_step(lines, 4, "received")) == [("taga", "TagA"), ("tagb", "TagB")]
    assert not of_step(lines, 5, "received")


# -- PushConsumer -----------------------------------------------------------------------------------

def test_settings_appoint_the_configured_long_polling_time(front):
    """grpcClientConsumerMaxLongPollingTimeoutMillis (ProxyConfig's key) is what consumers are told
    to poll for: a Java PushConsumer's close waits for the receive it has in flight."""
    with stub_of(front) as stub:
        settings = consumer_settings_reply(stub, "J5Push", "j5-settings")
    assert settings.subscription.long_polling_timeout.ToMilliseconds() == 2000


def test_push_consumer_retries_keeps_fifo_order_and_forwards_to_the_dlq(front, tmp_path):
    """Three PushConsumers in one JVM: a plain group whose listener fails one message once (it comes
    back, attempt 2), a FIFO group whose listener fails ga-1 twice (retried in place, ga-2 waits for
    it), and a group of 2 retries whose listener always fails: 3 attempts, then %DLQ%<group>."""
    c = front.cluster
    c.create_topic("J5Push")
    c.create_topic("J5PushFifo", queues=4)
    c.create_topic("J5PushDlq", queues=1)
    update_sub_group(front, "j5-push-fifo", consumeMessageOrderly=True)
    update_sub_group(front, "j5-push-dlq", retryMaxTimes=2)
    plain = [{"body": f"p-{i}", "tag": "P", "keys": [f"k{i}"], "props": {"i": str(i)}} for i in range(6)]
    fifo = [{"body": f"{g}-{i}", "group": g} for i in range(4) for g in ("ga", "gb")]
    poison = [{"body": "poison", "tag": "X", "keys": ["kx", "ky"], "props": {"why": "always fails"}}]
    steps = [
        {"do": "push", "name": "plain", "topic": "J5Push", "group": "j5-push", "fail": {"p-1": 1}},          # 0
        {"do": "push", "name": "fifo", "topic": "J5PushFifo", "group": "j5-push-fifo", "fail": {"ga-1": 2}},  # 1
        {"do": "push", "name": "dlq", "topic": "J5PushDlq", "group": "j5-push-dlq", "failUntil": -1},        # 2
        {"do": "produce", "name": "p1", "topic": "J5Push", "messages": plain},                               # 3
        {"do": "produce", "name": "p2", "topic": "J5PushFifo", "messages": fifo},                            # 4
        {"do": "produce", "name": "p3", "topic": "J5PushDlq", "messages": poison},                           # 5
        {"do": "awaitPushed", "name": "plain", "count": 7},
        {"do": "awaitPushed", "name": "fifo", "count": 10},
        {"do": "awaitPushed", "name": "dlq", "count": 3},
        {"do": "pause"},                                                                                     # 9
    ]
    with Java5Process(front.endpoints, steps, tmp_path / "home", "java5-push") as p:
        p.paused(9)
        [dead] = wait_for(lambda: c.records("%DLQ%j5-push-dlq", 0), 30, "the poison message in the DLQ")
        p.go()
        lines = p.finish()
    [poison_id] = _ok(of_step(lines, 5, "sent"))
    # plain: every message once, p-1 twice (failed, then attempt 2)
    plain_ids = _ok(of_step(lines, 3, "sent"))
    got = of_step(lines, 0, "pushed")
    assert sorted((d["body"], d["deliveryAttempt"], d["result"]) for d in got) == sorted(
        [(m["body"], 1, "FAILURE" if m["body"] == "p-1" else "SUCCESS") for m in plain] + [("p-1", 2, "SUCCESS")])
    assert {d["messageId"] for d in got} == set(plain_ids)
    for d in got:
        i = d["body"][2:]
        assert (d["tag"], d["keys"], d["properties"], d["topic"]) == ("P", [f"k{i}"], {"i": i}, "J5Push")
    # FIFO: each group in send order, ga-1 tried three times before ga-2 came
    got = of_step(lines, 1, "pushed")
    ga = [(d["body"], d["deliveryAttempt"], d["result"]) for d in got if d["messageGroup"] == "ga"]
    assert ga == [("ga-0", 1, "SUCCESS"), ("ga-1", 1, "FAILURE"), ("ga-1", 2, "FAILURE"), ("ga-1", 3, "SUCCESS"),
                  ("ga-2", 1, "SUCCESS"), ("ga-3", 1, "SUCCESS")]
    assert [d["body"] for d in got if d["messageGroup"] == "gb"] == [f"gb-{i}" for i in range(4)]
    # max attempts (retryMaxTimes 2 + 1), then the DLQ, the message whole
    got = of_step(lines, 2, "pushed")
    assert [(d["deliveryAttempt"], d["messageId"]) for d in got] == [(n, poison_id) for n in (1, 2, 3)]
    assert all((d["body"], d["tag"], d["keys"], d["properties"]) == ("poison", "X", ["kx", "ky"],
                                                                      {"why": "always fails"}) for d in got)
    assert dead.body == b"poison" and dead.properties["UNIQ_KEY"] == poison_id
    assert dead.properties["TAGS"] == "X" and sorted(dead.properties["KEYS"].split(" ")) == ["kx", "ky"]
    assert dead.properties["why"] == "always fails"


# -- a broker killed -9 ----------------------------------------------------------------------------

def test_broker_kill9_during_consumption_loses_nothing_acknowledged(front, tmp_path):
    """Ten messages acknowledged to the producer; the SimpleConsumer receives all ten, acks six and
    holds four when the broker is killed with -9. Sends while it is down fail; after its restart
    the four come back (attempt 2) with every message acknowledged since, and none of the six acked
    ever does. (The module's broker, restarted by the test: it comes last.)"""
    cluster = front.cluster
    cluster.create_topic("J5Crash", queues=2)
    steps = [
        {"do": "produce", "name": "p", "topic": "J5Crash",
         "messages": [{"body": f"c{i}", "keys": [f"k{i}"], "props": {"i": str(i)}} for i in range(10)]},  # 0
        {"do": "receive", "name": "s", "topic": "J5Crash", "group": "j5-crash", "count": 10,
         "invisibleMs": 10_000, "ackFirst": 6, "awaitMs": 1000},                                           # 1
        {"do": "pause"},                                                                                  # 2
        {"do": "produce", "name": "p", "topic": "J5Crash", "messages": [{"body": f"d{i}"} for i in range(3)]},  # 3
        {"do": "pause"},                                                                                  # 4
        {"do": "produce", "name": "p", "topic": "J5Crash", "messages": [{"body": f"e{i}"} for i in range(3)]},  # 5
        {"do": "pause"},                                                                                  # 6
        {"do": "receive", "name": "s", "topic": "J5Crash", "group": "j5-crash", "count": "answer",
         "invisibleMs": 10_000, "maxEmpty": 30},                                                           # 7
        {"do": "receive", "name": "s", "topic": "J5Crash", "group": "j5-crash", "count": 0},              # 8
    ]
    with Java5Process(front.endpoints, steps, tmp_path / "home", "java5-crash", deadline=100) as p:
        p.paused(2)
        cluster.procs[1].kill_group()  # SIGKILL: six acked, four received and not acked
        p.go()
        p.paused(4)
        cluster.restart_broker("broker-after-kill9.err")
        cluster.wait_registered()  # until then the name server has no route of the topic
        p.go()
        lines = p.paused(6)
        acknowledged_during = [s["messageId"] for s in of_step(lines, 3, "sent") if "messageId" in s]
        after = _ok(of_step(lines, 5, "sent"))
        p.child.proc.stdin.write(f"{4 + len(acknowledged_during) + 3}\n".encode())
        p.child.proc.stdin.flush()
        lines = p.finish(90)
    sent = _ok(of_step(lines, 0, "sent"))
    first = of_step(lines, 1, "received")
    assert sorted(d["messageId"] for d in first) == sorted(sent)
    assert of_step(lines, 1, "acked") == [d["messageId"] for d in first[:6]]
    back = of_step(lines, 7, "received")
    held = {d["messageId"]: d for d in first[6:]}
    redelivered = [d for d in back if d["messageId"] in held]
    assert sorted(d["messageId"] for d in redelivered) == sorted(held)
    for d in redelivered:
        f = held[d["messageId"]]
        assert d["deliveryAttempt"] == 2
        assert (d["body"], d["keys"], d["properties"]) == (f["body"], f["keys"], f["properties"])
    fresh = [d for d in back if d["messageId"] not in held]
    assert sorted(d["messageId"] for d in fresh) == sorted(acknowledged_during + after)
    assert all(d["deliveryAttempt"] == 1 for d in fresh)
    assert not of_step(lines, 8, "received"), "an acked message came back"
