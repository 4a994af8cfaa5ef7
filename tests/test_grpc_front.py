"""The gRPC front (broker.proxy, `broker proxy`) with the real 5.x Python client (PyPI
rocketmq-python-client 5.1.2): every kind of send a 5.x Producer makes goes through the front to a
real broker, and comes out of 4.x consumers (the project's PushConsumer and npm ali-ons) with its
tag, keys, properties and message id intact; bad requests get a v2 Status saying why."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from broker.proxy.config import ProxyConfig
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.protocol import service_pb2_grpc as rpc
from broker.server.broker_config import load_broker_config
from broker.store.errors import StoreConfigError
from tests.helpers.grpc_front import GrpcFront, front_beside_cluster, py5, py5_argv, py5_produce, stub_of
from tests.conftest import free_port
from tests.helpers.procs import Child, group_members
from tests.helpers.real_clients import Cluster, Consumer
from tests.test_transaction import TX_CONF

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc")
    with front_beside_cluster(root, TX_CONF) as f:
        yield f


def _consumers(front, tmp_path, topic):
    """The project's PushConsumer and ali-ons, each in a group of its own."""
    return (Consumer("py", front.cluster, tmp_path, topic, f"{topic}-py", f"{topic}-py"),
            Consumer("ons", front.cluster, tmp_path, topic, f"{topic}-ons", f"{topic}-ons"))


def _wait_all(consumer, n: int, what: str) -> list[dict]:
    return consumer.wait(lambda got: len(got) >= n, 60, what)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sends_reach_4x_consumers_intact(front, tmp_path, mode):
    topic = f"GrpcSend{mode}"
    front.cluster.create_topic(topic)
    sent = [{"tag": f"Tag{i % 2}", "keys": [f"k{i}", f"kk{i}"], "props": {"color": f"c{i}", "n": str(i)},
             "body": f"{mode}-{i}"} for i in range(6)]
    receipts = py5_produce(front.endpoints, topic, sent, mode=mode)
    assert all("messageId" in r for r in receipts), receipts
    ids = {m["body"]: r["messageId"] for m, r in zip(sent, receipts)} if mode == "sync" else None
    py, ons = _consumers(front, tmp_path, topic)
    with py, ons:
        for c in (py, ons):
            got = {d["body"]: d for d in _wait_all(c, 6, f"{c.kind} to get 6")}
            assert sorted(got) == sorted(m["body"] for m in sent)
            for m in sent:
                d = got[m["body"]]
                assert d["tags"] == m["tag"]
                assert sorted(d["keys"].split(" ")) == sorted(m["keys"])
                for k, v in m["props"].items():
                    assert d["props"][k] == v
                uniq = d["props"]["UNIQ_KEY"]
                assert uniq in {r["messageId"] for r in receipts}
                if c.kind == "py":
                    assert d["msgId"] == uniq
                if ids is not None:
                    assert uniq == ids[m["body"]]


def test_fifo_message_group_keeps_one_queue_in_order(front, tmp_path):
    topic = "GrpcFifo"
    front.cluster.create_topic(topic, queues=8)
    sent = [{"body": f"{g}-{i}", "group": g} for i in range(5) for g in ("ga", "gb", "gc")]
    receipts = py5_produce(front.endpoints, topic, sent)
    assert len(receipts) == 15 and all("messageId" in r for r in receipts), receipts
    py, = (Consumer("py", front.cluster, tmp_path, topic, "fifo-py", "fifo-py"),)
    with py:
        got = _wait_all(py, 15, "15 FIFO messages")
    for g in ("ga", "gb", "gc"):
        mine = sorted((d for d in got if d["body"].startswith(g)), key=lambda d: d["queueOffset"])
        assert len({d["queueId"] for d in mine}) == 1, f"group {g} spread over queues: {mine}"
        assert [d["body"] for d in mine] == [f"{g}-{i}" for i in range(5)]  # in send order
        assert {d["props"]["__SHARDINGKEY"] for d in mine} == {g}


def test_delivery_time_is_kept_by_the_timer_wheel(front, tmp_path):
    """A 5.x delivery timestamp goes to the broker as TIMER_DELIVER_MS (the Java proxy's default,
    useDelayLevel=false): held in rmq_sys_wheel_timer to its time, not rounded to a delay level."""
    topic = "GrpcDelay"
    front.cluster.create_topic(topic)
    before = int(time.time() * 1000)
    [r] = py5_produce(front.endpoints, topic, [{"body": "later", "tag": "D", "delaySeconds": 2}])
    assert "messageId" in r, r
    with Consumer("py", front.cluster, tmp_path, topic, "delay-py", "delay-py") as py:
        [d] = _wait_all(py, 1, "the delayed message")
    assert d["tags"] == "D" and d["props"]["UNIQ_KEY"] == r["messageId"] and "DELAY" not in d["props"]
    deliver = int(d["props"]["TIMER_DELIVER_MS"])  # the client's time, in whole seconds
    assert deliver >= before + 1000 and int(d["props"]["TIMER_DEQUEUE_MS"]) >= deliver  # never early
    held = [m for m in front.cluster.records("rmq_sys_wheel_timer", 0) if m.properties.get("REAL_TOPIC") == topic]
    assert [m.properties["UNIQ_KEY"] for m in held] == [r["messageId"]]


def test_delivery_time_out_of_range_is_refused_with_a_reason(front):
    """5.1.2 copies a millisecond delivery time into the Timestamp's seconds: a time ~55000 years
    ahead, refused as the Java proxy does (past maxDelayTimeMills), not a crash."""
    topic = "GrpcDelayBad"
    front.cluster.create_topic(topic)
    [r] = py5_produce(front.endpoints, topic, [{"body": "x", "deliverAtMs": int(time.time() * 1000) + 5000}])
    assert "ILLEGAL_DELIVERY_TIME" in r.get("error", "") or "40012" in r.get("error", ""), r


def test_transaction_commit_and_rollback(front, tmp_path):
    topic = "GrpcTx"
    front.cluster.create_topic(topic, queues=1)  # one queue: what follows C was stored before it
    [a] = py5_produce(front.endpoints, topic, [{"body": "A", "tag": "TA", "props": {"p": "a"}}], transaction="commit")
    [b] = py5_produce(front.endpoints, topic, [{"body": "B"}], transaction="rollback")
    [c] = py5_produce(front.endpoints, topic, [{"body": "C"}])
    assert a["transactionId"] and b["transactionId"] and "messageId" in c, (a, b, c)
    py, ons = _consumers(front, tmp_path, topic)
    with py, ons:
        for consumer in (py, ons):
            got = consumer.wait(lambda g: any(d["body"] == "C" for d in g), 60, "C")
            assert [d["body"] for d in got] == ["A", "C"]
            assert got[0]["tags"] == "TA" and got[0]["props"]["p"] == "a"
            assert got[0]["props"]["UNIQ_KEY"] == a["messageId"]


def test_unknown_transaction_is_checked_back_through_telemetry(front, tmp_path):
    """The producer leaves its transaction unknown; the broker's check reaches it as a
    recover_orphaned_transaction_command on its Telemetry stream, its checker commits."""
    topic = "GrpcTxCheck"
    front.cluster.create_topic(topic, queues=1)
    opt = {"endpoints": front.endpoints, "topic": topic, "transaction": "unknown", "checker": "commit", "checks": 1,
           "messages": [{"body": "U", "tag": "TU", "keys": ["ku"]}]}
    producer = Child(py5_argv("produce", opt), tmp_path / "py5.err", stdin=subprocess.PIPE)
    try:
        checked = producer.wait_lines(lambda ls: [line for line in ls if '"checked"' in line], 60, "the check")
        assert '"topic": "GrpcTxCheck"' in checked[0] and '"tag": "TU"' in checked[0]
        with Consumer("py", front.cluster, tmp_path, topic, "check-py", "check-py") as py:
            [d] = _wait_all(py, 1, "the message its check committed")
        assert d["body"] == "U" and d["tags"] == "TU" and d["keys"] == "ku"
        producer.proc.stdin.close()
        producer.wait_lines(lambda ls: '{"done": true}' in ls, 60, "the producer to stop")
    finally:
        producer.kill_group()


def test_simple_consumer_receives_changes_invisible_time_and_acks(front):
    """SimpleConsumer through the front: ReceiveMessage pops, ChangeInvisibleDuration and AckMessage
    by receipt handle; acked messages are not received again."""
    topic = "GrpcPop"
    front.cluster.create_topic(topic)
    sent = [{"tag": "P", "keys": [f"k{i}"], "props": {"i": str(i)}, "body": f"pop-{i}"} for i in range(5)]
    receipts = py5_produce(front.endpoints, topic, sent)
    got = py5("receive", front.endpoints, topic, group="pop-5x", count=5, changeInvisible=True,
              expression="P", rounds=10)
    assert sorted(d["body"] for d in got) == [m["body"] for m in sent], got
    assert {d["messageId"] for d in got} == {r["messageId"] for r in receipts}
    for d in got:
        i = int(d["body"].split("-")[1])
        assert d["tag"] == "P" and d["keys"] == [f"k{i}"] and d["props"]["i"] == str(i)
        assert d["deliveryAttempt"] == 1 and not d["corrupted"]
    assert py5("receive", front.endpoints, topic, group="pop-5x", count=1, rounds=2) == []


@pytest.fixture
def stub(front):
    with stub_of(front) as s:
        yield s


MD = (("x-mq-client-id", "test-client"),)


def _message(topic="GrpcBad", body=b"x", **sp) -> pb.Message:
    sp.setdefault("message_id", "0123456789ABCDEF")
    user = sp.pop("user", {})
    return pb.Message(topic=pb.Resource(name=topic), body=body, user_properties=user,
                      system_properties=pb.SystemProperties(**sp))


@pytest.mark.parametrize("request_, code", [
    (spb.SendMessageRequest(), pb.Code.MESSAGE_CORRUPTED),
    (spb.SendMessageRequest(messages=[_message(topic="bad topic!")]), pb.Code.ILLEGAL_TOPIC),
    (spb.SendMessageRequest(messages=[_message(topic="主题")]), pb.Code.ILLEGAL_TOPIC),  # the broker's rule: ASCII
    (spb.SendMessageRequest(messages=[_message(body=b"")]), pb.Code.MESSAGE_BODY_EMPTY),
    (spb.SendMessageRequest(messages=[_message(message_id="")]), pb.Code.ILLEGAL_MESSAGE_ID),
    (spb.SendMessageRequest(messages=[_message(user={"UNIQ_KEY": "forged"})]), pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (spb.SendMessageRequest(messages=[_message(tag="a||b")]), pb.Code.ILLEGAL_MESSAGE_TAG),
    (spb.SendMessageRequest(messages=[_message(body=b"\x1f\x8b\x00", body_encoding=pb.GZIP)]), pb.Code.MESSAGE_CORRUPTED),
    (spb.SendMessageRequest(messages=[_message(message_group="g" * 64)]), pb.Code.ILLEGAL_MESSAGE_GROUP),
])
def test_bad_sends_are_answered_with_a_status(front, stub, request_, code):
    front.cluster.create_topic("GrpcBad")
    r = stub.SendMessage(request_, metadata=MD, timeout=30)
    assert r.status.code == code, r
    assert r.status.message


def test_a_request_of_several_fifo_messages_keeps_each_group_on_one_queue_in_order(front, stub):
    """One SendMessage with messages of two groups interleaved: each message goes to its own
    group's queue, and each group's messages are stored in the request's order."""
    topic = "GrpcFifoMany"
    front.cluster.create_topic(topic)
    msgs = [_message(topic, f"{g}-{i}".encode(), message_group=g, message_id=f"{n:032X}")
            for n, (i, g) in enumerate((i, g) for i in range(4) for g in ("ga", "gb"))]
    r = stub.SendMessage(spb.SendMessageRequest(messages=msgs), metadata=MD, timeout=60)
    assert r.status.code == pb.Code.OK and len(r.entries) == 8, r
    by_queue = {q: [m.body.decode() for m in front.cluster.records(topic, q)] for q in range(4)}
    for g in ("ga", "gb"):
        [held] = [bodies for bodies in by_queue.values() if any(b.startswith(g) for b in bodies)]
        assert [b for b in held if b.startswith(g)] == [f"{g}-{i}" for i in range(4)], by_queue


def test_bad_requests_and_unserved_rpcs_are_answered_at_once(front, stub):
    # (an unknown but well-formed topic is routed: the name server's autoCreateTopicEnable)
    r = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="no such/topic"), endpoints=pb.Endpoints(
        scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=1)])), metadata=MD, timeout=30)
    assert r.status.code == pb.Code.ILLEGAL_TOPIC, r
    r = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="GrpcBad")), metadata=MD, timeout=30)
    assert r.status.code == pb.Code.ILLEGAL_ACCESS_POINT, r
    r = stub.EndTransaction(spb.EndTransactionRequest(topic=pb.Resource(name="GrpcBad"), transaction_id="garbage",
                                                      resolution=pb.COMMIT), metadata=MD, timeout=30)
    assert r.status.code == pb.Code.INVALID_TRANSACTION_ID, r
    r = stub.Heartbeat(spb.HeartbeatRequest(), timeout=30)  # no client id
    assert r.status.code == pb.Code.CLIENT_ID_REQUIRED, r
    # the consumer RPCs: bad input refused
    [r] = list(stub.ReceiveMessage(spb.ReceiveMessageRequest(group=pb.Resource(name="g")), metadata=MD, timeout=30))
    assert r.status.code == pb.Code.ILLEGAL_TOPIC, r
    for call, req in ((stub.AckMessage, spb.AckMessageRequest()),
                      (stub.ChangeInvisibleDuration, spb.ChangeInvisibleDurationRequest()),
                      (stub.ForwardMessageToDeadLetterQueue, spb.ForwardMessageToDeadLetterQueueRequest())):
        r = call(req, metadata=MD, timeout=30)
        assert r.status.code == pb.Code.ILLEGAL_CONSUMER_GROUP, r
    r = stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name="g"), topic=pb.Resource(name="GrpcBad"), entries=[
        spb.AckMessageEntry(message_id="m", receipt_handle="not a handle")]), metadata=MD, timeout=30)
    assert r.entries[0].status.code == pb.Code.INVALID_RECEIPT_HANDLE, r
    r = stub.UpdateOffset(spb.UpdateOffsetRequest(), metadata=MD, timeout=30)
    assert r.status.code == pb.Code.ILLEGAL_CONSUMER_GROUP, r
    [r] = list(stub.PullMessage(spb.PullMessageRequest(), metadata=MD, timeout=30))
    assert r.status.code == pb.Code.ILLEGAL_CONSUMER_GROUP, r
    r = stub.RecallMessage(spb.RecallMessageRequest(), metadata=MD, timeout=30)
    assert r.status.code == pb.Code.ILLEGAL_TOPIC, r
    r = stub.RecallMessage(spb.RecallMessageRequest(topic=pb.Resource(name="GrpcBad"), recall_handle="not a handle"),
                           metadata=MD, timeout=30)
    assert r.status.code == pb.Code.INTERNAL_SERVER_ERROR and r.status.message == "recall handle is invalid", r
    # still serving
    front.cluster.create_topic("GrpcAlive")
    r = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="GrpcAlive"), endpoints=pb.Endpoints(
        scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=front.port)])), metadata=MD, timeout=30)
    assert r.status.code == pb.Code.OK and len(r.message_queues) == 4
    assert {q.permission for q in r.message_queues} == {pb.READ_WRITE}
    assert r.message_queues[0].broker.endpoints.addresses[0].port == front.port


def _mq(topic: str, queue_id: int, broker: str = "broker-a") -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id, broker=pb.Broker(name=broker))


def test_the_pull_consumer_rpcs_pull_commit_and_query_offsets(front, stub):
    """PullMessage, UpdateOffset, GetOffset and QueryOffset (the 5.x PullConsumer's), against what
    the broker holds: the messages of a queue from an offset, in order, then where to go on; the
    group's committed offset; the queue's first, end and by-time offsets."""
    import time as _time
    topic, group = "GrpcPull", "grpc-pull-g"
    front.cluster.create_topic(topic)
    t0 = int(_time.time() * 1000)
    # one message group: all six on one queue, in the order sent
    msgs = [_message(topic, f"p{i}".encode(), message_id=f"{0xABC0 + i:032X}", message_group="pull-order")
            for i in range(6)]
    for m in msgs:
        r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=MD, timeout=30)
        assert r.status.code == pb.Code.OK, r
    held = {q: [m.body.decode() for m in front.cluster.records(topic, q)] for q in range(4)}
    [(q, bodies)] = [(q, b) for q, b in held.items() if b]
    assert bodies == [f"p{i}" for i in range(6)]
    g = pb.Resource(name=group)
    r = stub.QueryOffset(spb.QueryOffsetRequest(message_queue=_mq(topic, q), query_offset_policy=pb.END),
                         metadata=MD, timeout=30)
    assert (r.status.code, r.offset) == (pb.Code.OK, len(bodies)), r
    r = stub.QueryOffset(spb.QueryOffsetRequest(message_queue=_mq(topic, q), query_offset_policy=pb.BEGINNING),
                         metadata=MD, timeout=30)
    assert (r.status.code, r.offset) == (pb.Code.OK, 0), r
    ts = Timestamp()
    ts.FromMilliseconds(t0 - 60_000)
    r = stub.QueryOffset(spb.QueryOffsetRequest(message_queue=_mq(topic, q), query_offset_policy=pb.TIMESTAMP,
                                                timestamp=ts), metadata=MD, timeout=30)
    assert (r.status.code, r.offset) == (pb.Code.OK, 0), r
    # pull from 1, two at a time: status, the messages in order, then the next offset
    out = list(stub.PullMessage(spb.PullMessageRequest(group=g, message_queue=_mq(topic, q), offset=1, batch_size=2,
                                                       filter_expression=pb.FilterExpression(type=pb.TAG, expression="*")),
                                metadata=MD, timeout=30))
    assert out[0].status.code == pb.Code.OK and out[-1].next_offset == 1 + len(out[1:-1]), out
    got = [x.message for x in out[1:-1]]
    assert [m.body.decode() for m in got] == bodies[1:3] and [m.system_properties.queue_offset for m in got] == [1, 2]
    assert all(m.topic.name == topic and m.system_properties.queue_id == q for m in got)
    # at the end: nothing new, and where to come back
    end = len(bodies)
    out = list(stub.PullMessage(spb.PullMessageRequest(group=g, message_queue=_mq(topic, q), offset=end, batch_size=8),
                                metadata=MD, timeout=30))
    assert [x.status.code for x in out[:1]] == [pb.Code.MESSAGE_NOT_FOUND] and out[-1].next_offset == end, out
    out = list(stub.PullMessage(spb.PullMessageRequest(group=g, message_queue=_mq(topic, q), offset=end + 100,
                                                       batch_size=8), metadata=MD, timeout=30))
    assert out[0].status.code == pb.Code.ILLEGAL_OFFSET and out[-1].next_offset == end, out
    # long polling: a pull at the end waits for the next message instead of answering at once
    import threading
    from google.protobuf.duration_pb2 import Duration
    held_pull: list = []
    t = threading.Thread(target=lambda: held_pull.extend(stub.PullMessage(spb.PullMessageRequest(
        group=g, message_queue=_mq(topic, q), offset=end, batch_size=8, long_polling_timeout=Duration(seconds=20)),
        metadata=MD, timeout=40)))
    t.start()
    from tests.helpers.ha_cluster import runtime
    from tests.helpers.procs import wait_until as _wait_until
    _wait_until(lambda: int(runtime(front.cluster.port)["pullHeldRequests"]) > 0, 30, "the pull held at the broker")
    late = _message(topic, b"late", message_id=f"{0xABCF:032X}", message_group="pull-order")
    assert stub.SendMessage(spb.SendMessageRequest(messages=[late]), metadata=MD, timeout=30).status.code == pb.Code.OK
    t.join(40)
    assert held_pull[0].status.code == pb.Code.OK and [x.message.body for x in held_pull[1:-1]] == [b"late"]
    assert held_pull[-1].next_offset == end + 1
    # offsets: none committed (the broker answers 0 while the queue's first message is in memory,
    # as RocketMQ's queryConsumerOffset), then the one committed
    r = stub.GetOffset(spb.GetOffsetRequest(group=g, message_queue=_mq(topic, q)), metadata=MD, timeout=30)
    assert (r.status.code, r.offset) == (pb.Code.OK, 0), r
    r = stub.UpdateOffset(spb.UpdateOffsetRequest(group=g, message_queue=_mq(topic, q), offset=3), metadata=MD,
                          timeout=30)
    assert r.status.code == pb.Code.OK, r
    r = stub.GetOffset(spb.GetOffsetRequest(group=g, message_queue=_mq(topic, q)), metadata=MD, timeout=30)
    assert (r.status.code, r.offset) == (pb.Code.OK, 3), r
    # bad input: a queue of no broker, a negative offset, an SQL filter
    r = stub.GetOffset(spb.GetOffsetRequest(group=g, message_queue=_mq(topic, q, broker="no-such-broker")),
                       metadata=MD, timeout=30)
    assert r.status.code == pb.Code.NOT_FOUND, r
    r = stub.UpdateOffset(spb.UpdateOffsetRequest(group=g, message_queue=_mq(topic, q), offset=-1), metadata=MD,
                          timeout=30)
    assert r.status.code == pb.Code.ILLEGAL_OFFSET, r
    [r] = list(stub.PullMessage(spb.PullMessageRequest(group=g, message_queue=_mq(topic, q), batch_size=1,
                                                       filter_expression=pb.FilterExpression(type=pb.SQL,
                                                                                             expression="a > 1")),
                                metadata=MD, timeout=30))
    assert r.status.code == pb.Code.ILLEGAL_FILTER_EXPRESSION, r


def _front_pids(cluster) -> list[int]:
    broker = cluster.procs[1]
    out = []
    for pid in group_members(broker.pgid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue
        if b"broker.proxy.startup" in cmd:
            out.append(pid)
    return out


def _tcp_sockets(pid: int) -> list[tuple[str, int, int]]:
    """(state, local port, remote port) of each TCP socket process `pid` holds (its fds' inodes
    against /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[9] in inodes:
                out.append((f[3], int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16)))
    return out


def test_local_mode_front_runs_in_the_broker_process_and_stops_with_it(tmp_path):
    """grpcServerPort in broker.conf: the front listens in the broker's own process (no child); a
    send through it reaches a consumer, with no TCP connection from the broker to itself; a SIGTERM to the broker stops the front, then the broker,
    cleanly."""
    port = free_port()
    with Cluster(tmp_path / "cluster", f"grpcServerPort={port}\n") as cluster:
        broker = cluster.procs[1]
        broker.wait_lines(lambda ls: any("grpc proxy listening" in line and "started by broker broker-a" in line
                                         for line in ls), 60, "the broker's front to listen")
        assert _front_pids(cluster) == [] and ("0A", port, 0) in _tcp_sockets(broker.proc.pid)  # 0A: LISTEN
        cluster.create_topic("GrpcLocal")
        endpoints = f"127.0.0.1:{port}"
        [a] = py5_produce(endpoints, "GrpcLocal", [{"body": "one", "tag": "L"}])
        with Consumer("py", cluster, tmp_path, "GrpcLocal", "local-py", "local-py") as py:
            got = _wait_all(py, 1, "the message")
        assert [(d["body"], d["props"]["UNIQ_KEY"]) for d in got] == [("one", a["messageId"])]
        # the front reached its broker in-process: no TCP connection from the broker to its own port
        assert not [t for t in _tcp_sockets(broker.proc.pid) if t[2] == cluster.port], _tcp_sockets(broker.proc.pid)
        broker.proc.send_signal(signal.SIGTERM)
        assert broker.proc.wait(60) == 0
        lines = broker.wait_lines(lambda ls: broker.eof and ls, 30, "the broker's stdout to end")
        stopped = [line for line in lines if line in ("grpc proxy stopped", "stopped cleanly")]
        assert stopped == ["grpc proxy stopped", "stopped cleanly"], lines[-10:]
        assert "Traceback" not in broker.stderr_tail(100_000)


@pytest.mark.parametrize("props, key", [
    ({"grpcServerPort": "70000"}, "grpcServerPort"),
    ({"grpcServerPort": "x"}, "grpcServerPort"),
    ({"namesrvAddr": " "}, "namesrvAddr"),
    ({"maxMessageGroupSize": "0"}, "maxMessageGroupSize"),
    ({"messageDelayLevel": "1s 5x"}, "messageDelayLevel"),
])
def test_bad_proxy_config_is_refused_naming_the_key(props, key):
    with pytest.raises(StoreConfigError) as e:
        ProxyConfig.from_properties(props)
    assert e.value.key == key


def test_broker_grpc_server_port_is_checked():
    with pytest.raises(StoreConfigError) as e:
        load_broker_config({"grpcServerPort": "8081"})  # no name server to find brokers through
    assert e.value.key == "grpcServerPort"
    with pytest.raises(StoreConfigError) as e:
        load_broker_config({"grpcServerPort": "-1", "namesrvAddr": "127.0.0.1:9876"})
    assert e.value.key == "grpcServerPort"
    broker, _, unknown = load_broker_config({"grpcServerPort": "8081", "namesrvAddr": "127.0.0.1:9876"})
    assert broker.grpcServerPort == 8081 and not unknown
    # grpcListenPort, the name for it, is read as grpcServerPort; two different values are refused
    broker, _, unknown = load_broker_config({"grpcListenPort": "8082", "namesrvAddr": "127.0.0.1:9876"})
    assert broker.grpcServerPort == 8082 and not unknown
    broker, _, _ = load_broker_config({"grpcListenPort": "8082", "grpcServerPort": "8082", "namesrvAddr": "h:1"})
    assert broker.grpcServerPort == 8082
    with pytest.raises(StoreConfigError) as e:
        load_broker_config({"grpcListenPort": "8082", "grpcServerPort": "8081", "namesrvAddr": "127.0.0.1:9876"})
    assert e.value.key == "grpcListenPort"


def test_a_taken_grpc_port_refuses_the_broker_and_a_missing_proxy_conf_the_front(tmp_path):
    """A grpcServerPort another process holds would make the supervised front exit at every
    restart, for ever: the broker refuses to start, naming the key. `broker proxy -c` with a file
    that is not there says so in one line."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        conf = tmp_path / "broker.conf"
        conf.write_text(f"brokerIP1=127.0.0.1\nlistenPort={free_port()}\nstorePathRootDir={tmp_path}/store\n"
                        f"namesrvAddr=127.0.0.1:9\ngrpcServerPort={port}\n")
        r = subprocess.run([sys.executable, "-m", "broker.cli", "serve", "-c", str(conf)], capture_output=True,
                           text=True, timeout=60)
    assert r.returncode == 2 and "grpcServerPort" in r.stderr and str(port) in r.stderr, r.stderr
    assert not (tmp_path / "store" / "commitlog").exists()  # refused before the store was touched
    r = subprocess.run([sys.executable, "-m", "broker.cli", "proxy", "-c", str(tmp_path / "missing.conf")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "missing.conf" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_stopping_front_ends_idle_telemetry_streams_instead_of_waiting_its_grace(front, tmp_path):
    """A 5.x client keeps its Telemetry stream open for as long as it runs: SIGTERM ends those
    streams at once, so the front stops without sitting out grpcShutdownTimeSeconds (30 s)."""
    second = GrpcFront(front.cluster, tmp_path)
    try:
        channel = grpc.insecure_channel(second.endpoints)
        stop_sending = threading.Event()

        def commands():  # the client's side of the stream: one Settings, then open until the end
            yield spb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(
                topics=[pb.Resource(name="GrpcStop")])))
            stop_sending.wait(120)

        stream = rpc.MessagingServiceStub(channel).Telemetry(commands(), metadata=MD, timeout=120)
        assert next(stream).status.code == pb.Code.OK  # the Settings reply: the stream is open
        os.kill(second.child.proc.pid, signal.SIGTERM)
        assert list(stream) == []  # ended by the front, with no error
        assert second.child.proc.wait(timeout=20) == 0
        assert any("grpc proxy stopped" in line for line in second.child.lines)
        stop_sending.set()
        channel.close()
    finally:
        second.close()


def test_a_topic_typed_fifo_takes_fifo_messages_only_and_its_route_says_so(front, stub):
    """RocketMQ 5's message.type attribute (set with UPDATE_AND_CREATE_TOPIC's attributes): the
    front refuses a message of another type as the Java proxy does (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    its words), and QueryRoute's queues accept that type alone; a topic without the attribute takes
    every type."""
    from broker.remoting import codes
    from tests.helpers.raw_wire import RawConn
    topic = "GrpcTypedFifo"
    conn = RawConn(front.cluster.port)
    r = conn.request(codes.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False, "attributes": "+message.type=FIFO"})
    assert r.code == codes.SUCCESS, r.remark
    conn.close()
    front.cluster.create_topic(topic)  # waits for the route (the attribute stays: no attributes header)
    for _ in range(2):  # the second with the topic's type cached, which the fast path checks
        r = stub.SendMessage(spb.SendMessageRequest(messages=[_message(topic, b"plain")]), metadata=MD, timeout=30)
        assert r.status.code == pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, r
        assert r.status.message == ("TopicMessageType validate failed, the expected type is FIFO, but actual type "
                                    "is NORMAL"), r
    r = stub.SendMessage(spb.SendMessageRequest(messages=[_message(topic, b"in order", message_group="g1")]),
                         metadata=MD, timeout=30)
    assert r.status.code == pb.Code.OK, r
    r = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=pb.Endpoints(
        scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=front.port)])), metadata=MD, timeout=30)
    assert {tuple(q.accept_message_types) for q in r.message_queues} == {(pb.FIFO,)}
    front.cluster.create_topic("GrpcUntyped")
    r = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="GrpcUntyped"), endpoints=pb.Endpoints(
        scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=front.port)])), metadata=MD, timeout=30)
    assert {tuple(q.accept_message_types) for q in r.message_queues} == {(pb.NORMAL, pb.FIFO, pb.DELAY,
                                                                          pb.TRANSACTION)}
