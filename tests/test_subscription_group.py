"""Subscription groups (RocketMQ's SubscriptionGroupManager, config/subscriptionGroup.json) and what
they change: `broker admin updateSubGroup` (mqadmin's letters) makes a FIFO group (-o true), which
the gRPC front answers fifo=true and pops in order for, so the real 5.x clients get each message
group in send order, one message at a time; a FIFO PushConsumer that keeps failing a message
forwards it to %DLQ%<group> after retryMaxTimes + 1 attempts (-r) and the group then flows on;
consumeEnable=false (-s false) refuses pulls and pops; the file survives a kill -9; bad input is
refused naming the field.

No sleeps: every wait is on a line a client prints or on the broker's state (wait_for)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.remoting import codes
from tests.conftest import wait_for
from tests.helpers.grpc_front import Py5Push, consumer_settings_reply, front_beside_cluster, py5_produce, stub_of
from tests.helpers.procs import REPO
from tests.helpers.real_clients import Cluster

pytestmark = pytest.mark.timeout(300)

MD = (("x-mq-client-id", "test-subgroup-client"),)


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    root = tmp_path_factory.mktemp("subgroup")
    with front_beside_cluster(root) as f:
        yield f


@pytest.fixture
def stub(front):
    with stub_of(front) as s:
        yield s


def admin(namesrv: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", "admin", "updateSubGroup", "--namesrv", namesrv, *args],
                          capture_output=True, text=True, timeout=60, cwd=str(REPO))


def sub_group(cluster, group: str) -> dict | None:
    r = cluster.call(codes.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group})
    if r.code == codes.SUBSCRIPTION_GROUP_NOT_EXIST:
        return None
    assert r.code == codes.SUCCESS, (r.code, r.remark)
    return json.loads(bytes(r.body))


def make_group(cluster, group: str, *args: str) -> dict:
    p = admin(cluster.namesrv, "-g", group, *args)
    assert p.returncode == 0, p.stderr
    return sub_group(cluster, group)


def _receive(stub, topic: str, group: str, attempt: str, batch: int = 32, poll_s: int = 1) -> list[pb.Message]:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=batch, attempt_id=attempt,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), broker=pb.Broker(name="broker-a")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    req.invisible_duration.FromSeconds(30)
    req.long_polling_timeout.FromSeconds(poll_s)
    return [r.message for r in stub.ReceiveMessage(req, metadata=MD, timeout=60) if r.WhichOneof("content") == "message"]


def _ack(stub, topic: str, group: str, m: pb.Message) -> None:
    r = stub.AckMessage(spb.AckMessageRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic),
        entries=[spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                     receipt_handle=m.system_properties.receipt_handle)]), metadata=MD, timeout=30)
    assert r.status.code == pb.Code.OK, r


def test_update_sub_group_makes_a_fifo_group_the_front_answers_fifo_with_its_max_attempts(front, stub):
    topic, group = "SgSettings", "SgSettingsFifoG"
    front.cluster.create_topic(topic)
    plain = consumer_settings_reply(stub, topic, "SgSettingsPlainG")  # unknown to the broker: RocketMQ's defaults
    assert not plain.subscription.fifo and plain.backoff_policy.max_attempts == 17
    cfg = make_group(front.cluster, group, "-o", "true", "-r", "4")
    assert cfg["consumeMessageOrderly"] is True and cfg["retryMaxTimes"] == 4 and cfg["consumeEnable"] is True
    reply = consumer_settings_reply(stub, topic, group)
    assert reply.subscription.fifo and reply.backoff_policy.max_attempts == 5
    # updateSubGroup changes only the fields it is given
    cfg = make_group(front.cluster, group, "-r", "3")
    assert cfg["consumeMessageOrderly"] is True and cfg["retryMaxTimes"] == 3


def test_a_fifo_groups_next_message_waits_until_the_one_before_is_acked(front, stub):
    topic, group = "SgOrder", "SgOrderG"
    front.cluster.create_topic(topic, queues=1)
    make_group(front.cluster, group, "-o", "true")
    sent = py5_produce(front.endpoints, topic, [{"body": f"o{i}", "group": "g1"} for i in range(3)])
    assert all("messageId" in r for r in sent), sent
    [first] = wait_for(lambda: _receive(stub, topic, group, "a1", batch=1), 30, "the first message")
    assert first.body == b"o0"
    # another receive while o0 is out and unacked: nothing of the queue (not o1)
    assert _receive(stub, topic, group, "a2", batch=1) == []
    # the same attemptId (a client retrying its receive) is given the same message again
    [again] = _receive(stub, topic, group, "a1", batch=1)
    assert again.body == b"o0"
    _ack(stub, topic, group, again)
    got = []
    for i in range(2):
        [m] = wait_for(lambda: _receive(stub, topic, group, f"b{i}", batch=1), 30, f"message o{i + 1}")
        got.append(m.body)
        _ack(stub, topic, group, m)
    assert got == [b"o1", b"o2"]


def test_a_fifo_push_consumer_gets_each_message_group_in_send_order(front, tmp_path):
    topic, group = "SgPushOrder", "SgPushOrderG"
    front.cluster.create_topic(topic)
    make_group(front.cluster, group, "-o", "true")
    msgs = [{"body": f"{g}-{i}", "group": g} for i in range(8) for g in ("A", "B", "C")]
    sent = py5_produce(front.endpoints, topic, msgs)
    assert all("messageId" in r for r in sent), sent
    with Py5Push(front.endpoints, topic, group, tmp_path) as push:
        got = push.wait(lambda g: len({d["body"] for d in g}) >= len(msgs), 120, "every message")
    for g in ("A", "B", "C"):
        bodies = [d["body"] for d in got if d["body"].startswith(g + "-")]
        assert bodies == [f"{g}-{i}" for i in range(8)], bodies


def test_a_fifo_push_consumer_forwards_a_failing_message_to_the_dlq_and_its_group_flows_on(front, tmp_path):
    """retryMaxTimes 2: the listener fails "F-1" three times (retryMaxTimes + 1 attempts, the
    client's own retries), the client forwards it to %DLQ%<group>, and F-2, F-3 follow it."""
    topic, group = "SgPushDlq", "SgPushDlqG"
    front.cluster.create_topic(topic, queues=1)
    make_group(front.cluster, group, "-o", "true", "-r", "2")
    sent = py5_produce(front.endpoints, topic, [{"body": f"F-{i}", "group": "F"} for i in range(4)])
    doomed = sent[1]["messageId"]
    with Py5Push(front.endpoints, topic, group, tmp_path, failBodies=["F-1"]) as push:
        got = push.wait(lambda g: any(d["body"] == "F-3" for d in g), 120, "the messages after the failing one")
        [dead] = wait_for(lambda: front.cluster.records(f"%DLQ%{group}", 0), 60, "F-1 in the DLQ")
    assert [(d["body"], d["result"]) for d in got] == [
        ("F-0", "SUCCESS"), ("F-1", "FAILURE"), ("F-1", "FAILURE"), ("F-1", "FAILURE"),
        ("F-2", "SUCCESS"), ("F-3", "SUCCESS")]
    assert dead.body == b"F-1" and dead.properties["UNIQ_KEY"] == doomed


def test_consume_enable_false_refuses_pull_and_pop(front, stub):
    topic, group = "SgDisabled", "SgDisabledG"
    front.cluster.create_topic(topic)
    make_group(front.cluster, group, "-s", "false")
    r = front.cluster.call(codes.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": 0, "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 0,
        "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0})
    assert (r.code, r.remark) == (codes.NO_PERMISSION, f"subscription group no permission, {group}")
    r = front.cluster.call(codes.POP_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": -1, "maxMsgNums": 1, "invisibleTime": 30000,
        "pollTime": 0, "bornTime": 0, "initMode": 0, "expType": "TAG", "exp": "*", "order": "false"})
    assert (r.code, r.remark) == (codes.NO_PERMISSION, f"subscription group no permission, {group}")
    # through the front: the receive is refused with the broker's words, not an empty answer
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=1,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), broker=pb.Broker(name="broker-a")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    req.invisible_duration.FromSeconds(30)
    [resp] = list(stub.ReceiveMessage(req, metadata=MD, timeout=30))
    assert resp.status.code != pb.Code.OK and "no permission" in resp.status.message
    # enabled again: served
    make_group(front.cluster, group, "-s", "true")
    r = front.cluster.call(codes.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": 0, "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 0,
        "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0})
    assert r.code != codes.NO_PERMISSION


def test_bad_admin_input_is_refused_naming_the_field(front):
    p = admin(front.cluster.namesrv, "-g", "SgBad", "-r", "-1")
    assert p.returncode == 2 and "retryMaxTimes" in p.stderr, p.stderr
    p = admin(front.cluster.namesrv, "-g", "SgBad", "-o", "maybe")
    assert p.returncode == 2 and "consumeMessageOrderly" in p.stderr, p.stderr
    p = admin(front.cluster.namesrv, "-g", "bad group!")
    assert p.returncode == 2 and "groupName" in p.stderr, p.stderr
    for body in (b"{not json", b'{"groupName": "SgBad", "consumeEnable": "yes"}', b"[1]"):
        r = front.cluster.call(codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
        assert r.code == codes.SYSTEM_ERROR and r.remark, (body, r.remark)
    assert "consumeEnable" in r.remark or "SubscriptionGroupConfig" in r.remark
    assert sub_group(front.cluster, "SgBad") is None  # nothing half-made


def test_subscription_group_json_survives_a_kill_9_and_a_corrupt_one_refuses_to_start(tmp_path):
    with Cluster(tmp_path / "c", "autoCreateSubscriptionGroup=false\n") as cluster:
        make_group(cluster, "SgDurableG", "-o", "true", "-r", "5")
        cluster.procs[1].kill_group()  # SIGKILL, right after the admin's answer
        cluster.restart_broker()
        cfg = sub_group(cluster, "SgDurableG")
        assert cfg["consumeMessageOrderly"] is True and cfg["retryMaxTimes"] == 5
        # autoCreateSubscriptionGroup=false: an unknown group is refused, not made
        r = cluster.call(codes.PULL_MESSAGE, {
            "consumerGroup": "SgUnknownG", "topic": "TBW102", "queueId": 0, "queueOffset": 0, "maxMsgNums": 1,
            "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0})
        assert r.code == codes.SUBSCRIPTION_GROUP_NOT_EXIST and "SgUnknownG" in r.remark
        r = cluster.call(codes.CONSUMER_SEND_MSG_BACK, {"offset": 0, "group": "SgUnknownG", "delayLevel": 0})
        assert r.code == codes.SUBSCRIPTION_GROUP_NOT_EXIST and "SgUnknownG" in r.remark
        assert sub_group(cluster, "SgUnknownG") is None
        path = tmp_path / "c" / "store" / "config" / "subscriptionGroup.json"
        table = json.loads(path.read_text())["subscriptionGroupTable"]
        assert table["SgDurableG"]["consumeMessageOrderly"] is True
        cluster.procs[1].kill_group()
        # a torn file: read from its .bak (written by the update before the last one)
        make_bak = path.read_text()
        (path.parent / "subscriptionGroup.json.bak").write_text(make_bak)
        path.write_text(make_bak[: len(make_bak) // 2])
        cluster.restart_broker("broker3.err")
        assert sub_group(cluster, "SgDurableG")["retryMaxTimes"] == 5
        cluster.procs[1].kill_group()
        # neither parses: the broker refuses to start, naming the file
        path.write_text("{torn")
        (path.parent / "subscriptionGroup.json.bak").write_text("{torn too")
        p = subprocess.run([sys.executable, "-m", "broker.cli", "serve", "-c", str(cluster.conf)],
                           capture_output=True, text=True, timeout=60, cwd=str(REPO))
        assert p.returncode != 0 and "subscriptionGroup.json" in p.stderr, p.stderr[-2000:]


def test_a_fifo_node_push_consumer_keeps_group_order_and_forwards_a_failing_message_to_the_dlq(front, tmp_path):
    """The Node.js client 1.0.8's FIFO PushConsumer (FifoConsumeService): a group in send order,
    and "N-1", failed on every attempt, forwarded to %DLQ%<group> before N-2 comes. (This client
    ignores a CUSTOMIZED retry policy, the one a group's Settings carry as the Java proxy's do, so
    it retries as its own default policy says: the count is not asserted here, the Python one's is.)"""
    from tests.helpers.real_clients import Consumer
    topic, group = "SgNodeFifo", "SgNodeFifoG"
    front.cluster.create_topic(topic, queues=1)
    make_group(front.cluster, group, "-o", "true", "-r", "2")
    sent = py5_produce(front.endpoints, topic, [{"body": f"N-{i}", "group": "N"} for i in range(4)])
    doomed = sent[1]["messageId"]
    with Consumer("node5", front.cluster, tmp_path, topic, group, group, endpoints=front.endpoints,
                  failBodies=["N-1"]) as push:
        got = push.wait(lambda g: any(d["body"] == "N-3" for d in g), 120, "the messages after the failing one")
        [dead] = wait_for(lambda: front.cluster.records(f"%DLQ%{group}", 0), 60, "N-1 in the DLQ")
    tries = sum(d["body"] == "N-1" for d in got)
    assert tries >= 1 and [(d["body"], d["failing"]) for d in got] == [
        ("N-0", False), *[("N-1", True)] * tries, ("N-2", False), ("N-3", False)]
    assert all(d["group"] == "N" for d in got)
    assert dead.body == b"N-1" and dead.properties["UNIQ_KEY"] == doomed


def test_a_groups_retry_max_times_decides_send_back_and_the_pop_revive(front, tmp_path):
    """retryMaxTimes of the group, not the broker's maxReconsumeTimes (16): a 4.x send-back of a
    group with retryMaxTimes 0 goes straight to %DLQ%<group>; a 5.x PushConsumer (not FIFO) of a
    group with retryMaxTimes 1 that always fails sees 2 deliveries, then the revive moves it."""
    topic = "SgRetries"
    front.cluster.create_topic(topic, queues=1)
    make_group(front.cluster, "SgSendBackG", "-r", "0")
    py5_produce(front.endpoints, topic, [{"body": "back"}])
    [stored] = wait_for(lambda: front.cluster.records(topic, 0), 30, "the message stored")
    r = front.cluster.call(codes.CONSUMER_SEND_MSG_BACK, {"offset": stored.physical_offset, "group": "SgSendBackG",
                                                          "delayLevel": 0, "originMsgId": "", "originTopic": topic})
    assert r.code == codes.SUCCESS, r.remark
    [dead] = front.cluster.records("%DLQ%SgSendBackG", 0)
    assert dead.body == b"back"
    assert front.cluster.records("%RETRY%SgSendBackG", 0) == []

    topic2, group = "SgRevive", "SgReviveG"
    front.cluster.create_topic(topic2, queues=1)
    make_group(front.cluster, group, "-r", "1")
    [r] = py5_produce(front.endpoints, topic2, [{"body": "revived"}])
    with Py5Push(front.endpoints, topic2, group, tmp_path, fail="always") as push:
        got = push.wait(lambda g: len(g) >= 2, 120, "two failed deliveries")
        [dead] = wait_for(lambda: front.cluster.records(f"%DLQ%{group}", 0), 60, "the message in the DLQ")
    assert [d["deliveryAttempt"] for d in got[:2]] == [1, 2] and dead.properties["UNIQ_KEY"] == r["messageId"]


def _nack_now(stub, topic: str, group: str, m: pb.Message) -> None:
    """ChangeInvisibleDuration 0: the message is visible again at once (a nack)."""
    req = spb.ChangeInvisibleDurationRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                                             receipt_handle=m.system_properties.receipt_handle,
                                             message_id=m.system_properties.message_id)
    req.invisible_duration.FromMilliseconds(0)
    r = stub.ChangeInvisibleDuration(req, metadata=MD, timeout=30)
    assert r.status.code == pb.Code.OK, r


def test_a_fifo_message_past_its_max_attempts_goes_to_the_dlq_and_the_group_moves_on(front, stub):
    """A SimpleConsumer of a FIFO group with retryMaxTimes 1 (2 attempts) nacks S-0 twice: the
    third receive finds it past its max attempts, the front moves it to %DLQ%<group> (the Java
    proxy's PopMessageResultFilterImpl) and S-1 comes instead, never S-0 again."""
    topic, group = "SgSimpleDlq", "SgSimpleDlqG"
    front.cluster.create_topic(topic, queues=1)
    make_group(front.cluster, group, "-o", "true", "-r", "1")
    sent = py5_produce(front.endpoints, topic, [{"body": f"S-{i}", "group": "S"} for i in range(2)])
    attempts = []
    for i in range(2):
        [m] = wait_for(lambda: _receive(stub, topic, group, f"s{i}", batch=1), 30, f"delivery {i + 1} of S-0")
        attempts.append((m.body, m.system_properties.delivery_attempt))
        _nack_now(stub, topic, group, m)
    assert attempts == [(b"S-0", 1), (b"S-0", 2)]
    [m] = wait_for(lambda: _receive(stub, topic, group, "s-next", batch=1), 30, "S-1")
    assert m.body == b"S-1" and m.system_properties.delivery_attempt == 1
    [dead] = front.cluster.records(f"%DLQ%{group}", 0)
    assert dead.body == b"S-0" and dead.properties["UNIQ_KEY"] == sent[0]["messageId"]
