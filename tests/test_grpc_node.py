"""The gRPC front with the official 5.x Node.js client (npm rocketmq-client-nodejs 1.0.8, in
tests/clients5, unmodified): its Producer's sends of every kind come out of a 4.x consumer intact,
its SimpleConsumer receives, changes invisible times and acks, its PushConsumer consumes, and what
it leaves unacked comes back, also across a broker kill -9."""
from __future__ import annotations

import json
import sys
import subprocess
import time

import pytest

from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb

from tests.conftest import wait_for
from tests.helpers.grpc_front import GrpcFront, front_beside_cluster, node5, node5_argv, stub_of
from tests.helpers.procs import Child
from tests.helpers.real_clients import Cluster, Consumer, produce
from tests.test_transaction import TX_CONF

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc-node")
    with front_beside_cluster(root, TX_CONF) as f:
        yield f


def _py_consumer(front, tmp_path, topic: str, group: str) -> Consumer:
    return Consumer("py", front.cluster, tmp_path, topic, group, group)


def _node_push(front, tmp_path, topic: str, group: str, **opt) -> Consumer:
    return Consumer("node5", front.cluster, tmp_path, topic, group, group, endpoints=front.endpoints, **opt)


def _all(consumer, n: int, what: str) -> list[dict]:
    return consumer.wait(lambda got: len(got) >= n, 60, what)


def _produce(front, topic: str, messages: list[dict], **opt) -> list[dict]:
    receipts = node5("produce", front.endpoints, topic, messages=messages, **opt)
    assert len(receipts) == len(messages) and all("messageId" in r for r in receipts), receipts
    return receipts


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sends_reach_a_4x_consumer_intact(front, tmp_path, mode):
    topic = f"NodeSend{mode}"
    front.cluster.create_topic(topic)
    sent = [{"tag": f"Tag{i % 2}", "keys": [f"k{i}", f"kk{i}"], "props": {"color": f"c{i}", "n": str(i)},
             "body": f"{mode}-{i}"} for i in range(6)]
    receipts = _produce(front, topic, sent, mode=mode)
    with _py_consumer(front, tmp_path, topic, f"{topic}-py") as py:
        got = {d["body"]: d for d in _all(py, 6, "6 messages")}
    assert sorted(got) == sorted(m["body"] for m in sent)
    ids = {r["messageId"] for r in receipts}
    for m, r in zip(sent, receipts):
        d = got[m["body"]]
        assert d["tags"] == m["tag"] and sorted(d["keys"].split(" ")) == sorted(m["keys"])
        assert {k: d["props"][k] for k in m["props"]} == m["props"]
        assert d["msgId"] == d["props"]["UNIQ_KEY"] and d["msgId"] in ids
        if mode == "sync":  # each receipt is its own message's
            assert d["msgId"] == r["messageId"]


def test_fifo_message_group_is_kept_in_order_on_one_queue(front, tmp_path):
    topic = "NodeFifo"
    front.cluster.create_topic(topic, queues=8)
    sent = [{"body": f"{g}-{i}", "group": g} for i in range(5) for g in ("ga", "gb")]
    _produce(front, topic, sent)
    with _py_consumer(front, tmp_path, topic, "node-fifo-py") as py:
        got = _all(py, 10, "10 FIFO messages")
    for g in ("ga", "gb"):
        mine = sorted((d for d in got if d["body"].startswith(g)), key=lambda d: d["queueOffset"])
        assert len({d["queueId"] for d in mine}) == 1, f"group {g} spread over queues: {mine}"
        assert [d["body"] for d in mine] == [f"{g}-{i}" for i in range(5)]
        assert {d["props"]["__SHARDINGKEY"] for d in mine} == {g}


def test_delay_is_held_until_its_delivery_time(front, tmp_path):
    topic = "NodeDelay"
    front.cluster.create_topic(topic)
    before_ms = int(time.time() * 1000)
    [r] = _produce(front, topic, [{"body": "later", "tag": "D", "delaySeconds": 2}])
    with _py_consumer(front, tmp_path, topic, "node-delay-py") as py:
        [d] = _all(py, 1, "the delayed message")
    assert d["tags"] == "D" and d["msgId"] == r["messageId"]
    assert int(d["props"]["TIMER_DELIVER_MS"]) >= before_ms + 2000
    assert int(d["props"]["TIMER_DEQUEUE_MS"]) >= int(d["props"]["TIMER_DELIVER_MS"])  # not before its time
    # held by the broker's timer wheel (the Java proxy's default: no delay level)
    held = [m for m in front.cluster.records("rmq_sys_wheel_timer", 0) if m.properties.get("REAL_TOPIC") == topic]
    assert [m.properties["UNIQ_KEY"] for m in held] == [r["messageId"]]


def test_transaction_commit_and_rollback(front, tmp_path):
    topic = "NodeTx"
    front.cluster.create_topic(topic, queues=1)  # one queue: what precedes C was stored before it
    [a] = _produce(front, topic, [{"body": "A", "tag": "TA", "props": {"p": "a"}}], transaction="commit")
    [b] = _produce(front, topic, [{"body": "B"}], transaction="rollback")
    _produce(front, topic, [{"body": "C"}])
    assert a["transactionId"] and b["transactionId"]
    with _py_consumer(front, tmp_path, topic, "node-tx-py") as py:
        got = py.wait(lambda g: any(d["body"] == "C" for d in g), 60, "C")
    assert [d["body"] for d in got] == ["A", "C"]
    assert got[0]["tags"] == "TA" and got[0]["props"]["p"] == "a" and got[0]["msgId"] == a["messageId"]


@pytest.mark.parametrize("answer", ["commit", "rollback"])
def test_unknown_transaction_is_resolved_by_the_transaction_checker(front, tmp_path, answer):
    """The producer leaves its transaction unknown; the broker's check reaches the Node client's
    transactionChecker through its Telemetry stream, and the checker's answer is applied."""
    topic = f"NodeTxCheck{answer}"
    front.cluster.create_topic(topic, queues=1)
    opt = {"endpoints": front.endpoints, "topic": topic, "transaction": "unknown", "checker": answer, "checks": 1,
           "messages": [{"body": "U", "tag": "TU", "keys": ["ku"]}]}
    producer = Child(node5_argv("produce", opt), tmp_path / "node5.err", stdin=subprocess.PIPE)
    try:
        [line] = producer.wait_lines(lambda ls: [x for x in ls if '"checked"' in x], 60, "the check")
        assert f'"topic":"{topic}"' in line and '"tag":"TU"' in line
        node5("produce", front.endpoints, topic, messages=[{"body": "after"}])
        with _py_consumer(front, tmp_path, topic, f"{topic}-py") as py:
            got = py.wait(lambda g: any(d["body"] == "after" for d in g), 60, "the message sent after the check")
        if answer == "commit":
            assert [(d["body"], d["tags"], d["keys"]) for d in got] == [("U", "TU", "ku"), ("after", None, None)]
        else:
            assert [d["body"] for d in got] == ["after"]
        producer.proc.stdin.close()
        producer.wait_lines(lambda ls: '{"done":true}' in ls, 60, "the producer to stop")
    finally:
        producer.kill_group()


def test_simple_consumer_receives_changes_invisible_time_and_acks(front):
    topic = "NodePop"
    front.cluster.create_topic(topic)
    sent = [{"tag": "P", "keys": [f"k{i}"], "props": {"i": str(i)}, "body": f"pop-{i}"} for i in range(5)]
    receipts = _produce(front, topic, sent)
    got = node5("receive", front.endpoints, topic, group="node-pop", count=5, changeInvisible=True, expression="P")
    assert sorted(d["body"] for d in got) == [m["body"] for m in sent], got
    assert {d["messageId"] for d in got} == {r["messageId"] for r in receipts}
    for d in got:
        i = int(d["body"].split("-")[1])
        assert d["tag"] == "P" and d["keys"] == [f"k{i}"] and d["props"] == {"i": str(i)}
        assert d["deliveryAttempt"] == 1 and not d["corrupted"]
    assert node5("receive", front.endpoints, topic, group="node-pop", count=1, rounds=2) == []


def test_ali_ons_producer_to_the_node_simple_consumer(front, tmp_path):
    """The other way round: a 4.x producer (ali-ons, remoting) to the 5.x SimpleConsumer (gRPC),
    tag, keys, properties and message id intact."""
    topic = "NodeFromOns"
    front.cluster.create_topic(topic)
    sent = [{"tags": "O", "keys": [f"k{i}", f"kk{i}"], "props": {"n": str(i)}, "body": f"ons-{i}"} for i in range(4)]
    receipts = produce("ons", front.cluster, topic, sent, tmp_path, group="node-ons-pg")
    got = {d["body"]: d for d in node5("receive", front.endpoints, topic, group="node-from-ons", count=4)}
    assert sorted(got) == [m["body"] for m in sent]
    assert {d["messageId"] for d in got.values()} == {r["msgId"] for r in receipts}
    for m in sent:
        d = got[m["body"]]
        assert d["tag"] == "O" and d["keys"] == sorted(m["keys"]) and d["props"] == m["props"]
        assert d["deliveryAttempt"] == 1 and not d["corrupted"]


def test_unacked_message_comes_back_with_its_delivery_attempt_raised(front):
    topic = "NodeRedeliver"
    front.cluster.create_topic(topic, queues=1)
    [r] = _produce(front, topic, [{"body": "again", "tag": "R"}])
    [first] = node5("receive", front.endpoints, topic, group="node-redo", count=1, invisibleSeconds=10, ackFirst=0)
    # after its 10 s invisible time (the front's minimum), from the group's retry topic
    [second] = node5("receive", front.endpoints, topic, group="node-redo", count=1, rounds=20)
    assert first["messageId"] == second["messageId"] == r["messageId"]
    assert (first["deliveryAttempt"], second["deliveryAttempt"]) == (1, 2)
    assert second["body"] == "again" and second["tag"] == "R" and not second["corrupted"]
    assert node5("receive", front.endpoints, topic, group="node-redo", count=1, rounds=2) == []


def test_push_consumer_consumes_everything(front, tmp_path):
    topic = "NodePush"
    front.cluster.create_topic(topic)
    sent = [{"tag": "T", "keys": [f"k{i}"], "props": {"i": str(i)}, "body": f"push-{i}"} for i in range(12)]
    receipts = _produce(front, topic, sent)
    with _node_push(front, tmp_path, topic, "node-push") as push:
        got = _all(push, 12, "12 messages pushed")
    assert sorted(d["body"] for d in got) == sorted(m["body"] for m in sent)
    assert {d["messageId"] for d in got} == {r["messageId"] for r in receipts}
    assert all(not d["corrupted"] and d["deliveryAttempt"] == 1 and d["props"] == {"i": d["body"][5:]} for d in got)


def test_push_consumer_failing_retries_then_the_broker_moves_it_to_the_dlq(front, tmp_path):
    """A listener that always fails: each failure is a nack (ChangeInvisibleDuration), the message
    comes back with its attempt raised, and past the group's 16 retries it is in %DLQ%<group>."""
    topic, group = "NodeDlq", "node-dlq"
    front.cluster.create_topic(topic, queues=1)
    [r] = _produce(front, topic, [{"body": "poison", "tag": "X"}])
    with _node_push(front, tmp_path, topic, group, fail="always") as push:
        got = push.wait(lambda g: len(g) >= 17, 120, "17 deliveries")
        [dead] = wait_for(lambda: front.cluster.records(f"%DLQ%{group}", 0), 60, "the message in the DLQ")
    assert [d["deliveryAttempt"] for d in got] == list(range(1, 18))  # none after the DLQ
    assert {d["messageId"] for d in got} == {r["messageId"]}
    assert dead.body == b"poison" and dead.properties["UNIQ_KEY"] == r["messageId"]


def test_kill9_during_consumption_loses_nothing_and_redelivers_only_the_unacked(tmp_path):
    """Eight messages acked by the producer; the SimpleConsumer receives them all, acks five and
    holds three when the broker is killed with -9; the broker is started again and the same
    consumer goes on: the three come back (attempt 2), the five acked never do."""
    with Cluster(tmp_path / "cluster") as cluster:
        front = GrpcFront(cluster, tmp_path)
        consumer = None
        try:
            cluster.create_topic("NodeCrash", queues=2)
            receipts = node5("produce", front.endpoints, "NodeCrash", messages=[{"body": f"c{i}"} for i in range(8)])
            assert all("messageId" in r for r in receipts), receipts
            opt = {"endpoints": front.endpoints, "topic": "NodeCrash", "group": "node-crash", "count": 11,
                   "invisibleSeconds": 10, "rounds": 30, "pauseAfter": 8, "ackFirst": 5}
            consumer = Child(node5_argv("receive", opt), tmp_path / "node5.err", stdin=subprocess.PIPE)
            consumer.wait_lines(lambda ls: '{"paused":true}' in ls, 60, "the consumer to hold 8 messages")
            cluster.procs[1].kill_group()  # SIGKILL, with three messages received and not acked
            cluster.procs[1] = Child([sys.executable, "-m", "broker.cli", "serve", "-c", str(cluster.conf)],
                                     tmp_path / "broker2.err")
            cluster.procs[1].wait_lines(lambda ls: any("listening on" in x for x in ls), 60, "the broker again")
            consumer.proc.stdin.write(b"go\n")
            consumer.proc.stdin.flush()
            consumer.wait_lines(lambda ls: '{"done":true}' in ls, 120, "the three unacked back")
            got = [json.loads(x) for x in consumer.lines if x.startswith('{"topic"')]
            first, back = got[:8], got[8:]
            assert sorted(d["body"] for d in first) == [f"c{i}" for i in range(8)]
            assert sorted(d["body"] for d in back) == sorted(d["body"] for d in first[5:])
            assert [d["deliveryAttempt"] for d in got] == [1] * 8 + [2] * 3
            assert {d["messageId"] for d in got} == {r["messageId"] for r in receipts}
            assert node5("receive", front.endpoints, "NodeCrash", group="node-crash", count=1, rounds=3) == []
        finally:
            if consumer is not None:
                consumer.kill_group()
            front.close()


def test_settings_reply_carries_what_the_server_appoints(front):
    """The Telemetry settings reply (GrpcClientSettingsManager): a producer gets the Java proxy's
    exponential backoff (the Node client asserts one), a consumer its batch size, polling time and
    the group's retry policy (16 retries, the delay levels), all a PushConsumer runs by."""
    with stub_of(front) as stub:
        pub = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="NodeSet")]))
        sub = pb.Settings(client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name="g")))
        for settings in (pub, sub):
            call = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]),
                                  metadata=(("x-mq-client-id", "settings-test"),), timeout=30)
            reply = next(call)
            call.cancel()
            assert reply.status.code == pb.Code.OK, reply
            if settings is pub:
                backoff = reply.settings.backoff_policy
                assert backoff.max_attempts == 3 and backoff.exponential_backoff.initial.ToMilliseconds() == 10
                assert reply.settings.publishing.max_body_size == 4 * 1024 * 1024
            else:
                s = reply.settings.subscription
                assert s.receive_batch_size == 32 and s.long_polling_timeout.ToMilliseconds() == 20_000
                backoff = reply.settings.backoff_policy
                assert backoff.max_attempts == 17
                assert [d.ToMilliseconds() for d in backoff.customized_backoff.next] == [100] * 18  # FAST_DELAYS


def test_change_invisible_duration_of_zero_makes_the_message_visible_at_once(front):
    """The Java proxy's minimum for ChangeInvisibleDuration is 0 (a nack without backoff), not 1 ms."""
    topic = "NodeNack"
    front.cluster.create_topic(topic, queues=1)
    _produce(front, topic, [{"body": "n"}])
    with stub_of(front) as stub:
        md = (("x-mq-client-id", "nack-test"),)
        route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=pb.Endpoints(
            scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=front.port)])), metadata=md, timeout=30)

        def receive() -> list:
            req = spb.ReceiveMessageRequest(group=pb.Resource(name="node-nack"), message_queue=route.message_queues[0],
                                            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                                            batch_size=1)
            req.invisible_duration.FromSeconds(60)
            req.long_polling_timeout.FromSeconds(5)
            return [r.message for r in stub.ReceiveMessage(req, metadata=md, timeout=30) if r.HasField("message")]

        [m] = receive()
        req = spb.ChangeInvisibleDurationRequest(group=pb.Resource(name="node-nack"), topic=pb.Resource(name=topic),
                                                 receipt_handle=m.system_properties.receipt_handle,
                                                 message_id=m.system_properties.message_id)
        req.invisible_duration.FromMilliseconds(0)
        r = stub.ChangeInvisibleDuration(req, metadata=md, timeout=30)
        assert r.status.code == pb.Code.OK and r.receipt_handle, r
        again = wait_for(receive, 30, "the nacked message back")  # not after the 60 s it was received for
        assert [a.system_properties.message_id for a in again] == [m.system_properties.message_id]
        assert again[0].system_properties.delivery_attempt == 2
        assert again[0].system_properties.body_digest.type == pb.MD5 and not again[0].user_properties
