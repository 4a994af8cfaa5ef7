"""Consumption through the gRPC front with the real 5.x Python client (PyPI rocketmq-python-client
5.1.2): the PushConsumer, redelivery of what was not acked with its delivery attempt raised, the
dead letter queue (ForwardMessageToDeadLetterQueue and the broker's revive past its max attempts),
a broker kill -9 in the middle of consumption, and ali-ons (4.x) producing for a 5.x consumer.

No sleeps: every wait is on a line a client prints or on the broker's state (wait_for)."""
from __future__ import annotations



import time

import pytest

from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from tests.conftest import wait_for
from tests.helpers.grpc_front import (GrpcFront, Py5Push, consumer_settings_reply, front_beside_cluster, py5, py5_produce,
                                      stub_of)
from tests.helpers.real_clients import produce

pytestmark = pytest.mark.timeout(300)

MAX_RECONSUME = 2  # the broker's maxReconsumeTimes: a message gets 3 deliveries, then %DLQ%<group>


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc-consume")
    with front_beside_cluster(root, f"maxReconsumeTimes={MAX_RECONSUME}\n") as f:
        yield f


@pytest.fixture
def stub(front):
    with stub_of(front) as s:
        yield s


MD = (("x-mq-client-id", "test-consume-client"),)


def _dlq(front, group: str) -> list:
    return front.cluster.records(f"%DLQ%{group}", 0)


def _receive(stub, topic: str, group: str, invisible_s: int = 30) -> list[pb.Message]:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=32,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), broker=pb.Broker(name="broker-a")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    req.invisible_duration.FromSeconds(invisible_s)
    req.long_polling_timeout.FromSeconds(5)
    return [r.message for r in stub.ReceiveMessage(req, metadata=MD, timeout=60) if r.WhichOneof("content") == "message"]


def _forward(stub, topic: str, group: str, handle: str, message_id: str = "m"):
    return stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=handle, message_id=message_id,
        delivery_attempt=1, max_delivery_attempts=1), metadata=MD, timeout=30)


def test_forward_to_dlq_sends_back_then_acks_and_refuses_bad_handles(front, stub):
    topic, group = "GrpcFwd", "GrpcFwdG"
    front.cluster.create_topic(topic, queues=1)
    receipts = py5_produce(front.endpoints, topic, [{"body": "f0", "tag": "T", "keys": ["kf"]}, {"body": "f1"}])
    got = []
    wait_for(lambda: got.extend(_receive(stub, topic, group)) or len(got) >= 2, 60, "both messages received")
    m0, m1 = sorted(got, key=lambda m: m.body)
    h0, h1 = m0.system_properties.receipt_handle, m1.system_properties.receipt_handle
    assert len(h0.split(" ")) == 9  # the broker's 8 fields and the commit log offset
    f = h0.split(" ")
    forged = [
        ("garbage", "not a handle"),
        ("8 fields", " ".join(f[:8])),
        ("offset of the other message", " ".join(f[:8] + [h1.split(" ")[8]])),
        ("offset of no message", " ".join(f[:8] + [str(1 << 40)])),
        ("other queue offset", " ".join(f[:7] + [str(int(f[7]) + 1), f[8]])),
    ]
    for what, handle in forged:
        r = _forward(stub, topic, group, handle)
        assert r.status.code == pb.Code.INVALID_RECEIPT_HANDLE and r.status.message, (what, r)
    # a handle superseded by a change of the invisible time names nothing in flight any more
    c = stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=h1,
        invisible_duration={"seconds": 30}, message_id=m1.system_properties.message_id), metadata=MD, timeout=30)
    assert c.status.code == pb.Code.OK and c.receipt_handle.split(" ")[8] == h1.split(" ")[8], c
    r = _forward(stub, topic, group, h1)
    assert r.status.code == pb.Code.INVALID_RECEIPT_HANDLE and "expired or acked" in r.status.message, r
    r = _forward(stub, "GrpcFwd", "bad group!", h0)
    assert r.status.code == pb.Code.ILLEGAL_CONSUMER_GROUP, r
    assert _dlq(front, group) == []  # nothing refused went to the DLQ
    # the real handle: into %DLQ%<group>, then acked (a second forward finds nothing in flight)
    r = _forward(stub, topic, group, h0, m0.system_properties.message_id)
    assert r.status.code == pb.Code.OK, r
    [dead] = _dlq(front, group)
    assert dead.body == b"f0" and dead.properties["UNIQ_KEY"] == receipts[0]["messageId"]
    assert dead.properties["TAGS"] == "T" and dead.properties["KEYS"] == "kf"
    r = _forward(stub, topic, group, h0)
    assert r.status.code == pb.Code.INVALID_RECEIPT_HANDLE, r
    assert len(_dlq(front, group)) == 1


def _successes(got: list[dict]) -> dict[str, dict]:
    return {d["body"]: d for d in got if d["result"] == "SUCCESS"}


def test_push_consumer_consumes_everything_and_a_failed_delivery_comes_back_with_its_attempt_raised(front, tmp_path):
    """The listener fails every message's first delivery: the client changes its invisible time
    (its backoff), the broker's revive redelivers it with delivery attempt 2, and it is acked."""
    topic = "GrpcPush"
    front.cluster.create_topic(topic)
    sent = [{"body": f"p{i}", "tag": f"T{i % 2}", "keys": [f"k{i}"], "props": {"i": str(i)}} for i in range(8)]
    receipts = py5_produce(front.endpoints, topic, sent)
    with Py5Push(front.endpoints, topic, "GrpcPushG", tmp_path, fail=1) as push:
        got = push.wait(lambda g: len(_successes(g)) == 8, 120, "every message consumed")
    done = _successes(got)
    assert sorted(done) == sorted(m["body"] for m in sent)
    assert {d["messageId"] for d in done.values()} == {r["messageId"] for r in receipts}
    for m in sent:
        d = done[m["body"]]
        assert d["deliveryAttempt"] == 2 and d["tag"] == m["tag"] and d["keys"] == m["keys"]
        assert d["props"]["i"] == m["props"]["i"]
        failed = [x for x in got if x["body"] == m["body"] and x["result"] == "FAILURE"]
        assert [x["deliveryAttempt"] for x in failed] == [1] and failed[0]["messageId"] == d["messageId"]


def test_a_slow_push_listener_keeps_its_message_the_front_renews_the_invisible_time(front, tmp_path):
    """A PushConsumer receives with auto_renew: the front pops for defaultInvisibleTimeMills (2 s
    here) and renews it while the listener works (6 s on each message), so no message is delivered
    a second time, and the ack the client sends with its first handle acks the renewed one."""
    topic, group = "GrpcSlowPush", "GrpcSlowPushG"
    front.cluster.create_topic(topic)
    renewing = GrpcFront(front.cluster, tmp_path, "defaultInvisibleTimeMills=2000\nrenewAheadTimeMillis=1000\n"
                                                  "renewSliceTimeMillis=2000\n")
    try:
        receipts = py5_produce(renewing.endpoints, topic, [{"body": f"s{i}"} for i in range(3)])
        with Py5Push(renewing.endpoints, topic, group, tmp_path, work=6, threads=4) as push:
            got = push.wait(lambda g: len(g) >= 3, 60, "each message delivered")
            # each listener call outlives three of the front's invisible times; a revive would
            # deliver the message again within them
            with pytest.raises(AssertionError):
                push.wait(lambda g: len(g) > 3, 10, "a second delivery")
        assert sorted(d["body"] for d in got) == ["s0", "s1", "s2"]
        assert {d["deliveryAttempt"] for d in got} == {1}
        assert {d["messageId"] for d in got} == {r["messageId"] for r in receipts}
        # acked with the handles the client held: nothing comes back after the invisible time
        assert py5("receive", renewing.endpoints, topic, group=group, count=1, invisibleSeconds=10, rounds=3) == []
    finally:
        renewing.close()


def test_a_message_not_acked_within_its_invisible_duration_is_received_again(front):
    """A SimpleConsumer receives and does not ack; once its invisible duration passed the message
    is received again with delivery attempt 2; acked then, it is not received a third time."""
    topic, group = "GrpcInvisible", "GrpcInvisibleG"
    front.cluster.create_topic(topic)
    [r] = py5_produce(front.endpoints, topic, [{"body": "late", "tag": "I"}])
    [first] = py5("receive", front.endpoints, topic, group=group, count=1, ackLimit=0, invisibleSeconds=10, rounds=10)
    assert first["acked"] is False and first["deliveryAttempt"] == 1 and first["messageId"] == r["messageId"]
    [again] = py5("receive", front.endpoints, topic, group=group, count=1, invisibleSeconds=10, rounds=15)
    assert again["acked"] and again["deliveryAttempt"] == 2 and again["messageId"] == r["messageId"]
    assert again["body"] == "late" and again["tag"] == "I"
    # acked: a receive that outlives the invisible duration (rounds of 2 s long polls) gets nothing
    assert py5("receive", front.endpoints, topic, group=group, count=1, invisibleSeconds=10, rounds=7) == []


def test_a_push_consumer_that_always_fails_ends_in_the_dlq(front, tmp_path):
    """maxReconsumeTimes=2: three deliveries, each failed; the broker's revive then puts the message
    in %DLQ%<group>, where a 4.x pull finds it whole."""
    topic, group = "GrpcPushDlq", "GrpcPushDlqG"
    front.cluster.create_topic(topic)
    [r] = py5_produce(front.endpoints, topic, [{"body": "doomed", "tag": "D", "keys": ["kd"], "props": {"p": "v"}}])
    with Py5Push(front.endpoints, topic, group, tmp_path, fail="always") as push:
        got = push.wait(lambda g: len(g) >= MAX_RECONSUME + 1, 120, "three failed deliveries")
        [dead] = wait_for(lambda: _dlq(front, group), 60, "the message in the DLQ")
    assert [d["deliveryAttempt"] for d in got] == [1, 2, 3]
    assert {d["messageId"] for d in got} == {r["messageId"]}
    assert dead.body == b"doomed" and dead.properties["UNIQ_KEY"] == r["messageId"]
    assert dead.properties["TAGS"] == "D" and dead.properties["KEYS"] == "kd" and dead.properties["p"] == "v"


def test_a_broker_kill_9_during_consumption_loses_nothing_and_brings_back_only_the_unacked(tmp_path):
    """20 messages the 5.x producer had receipts for; a SimpleConsumer acks 8 and holds 12 in
    flight; the broker is killed with -9 and started again: the 12 come back (delivery attempt 2),
    none of the 8 does."""
    topic, group, n, k = "GrpcCrash", "GrpcCrashG", 20, 8
    with front_beside_cluster(tmp_path, f"maxReconsumeTimes={MAX_RECONSUME}\n") as f:
        f.cluster.create_topic(topic)
        receipts = py5_produce(f.endpoints, topic, [{"body": f"c{i}", "tag": "C"} for i in range(n)])
        assert all("messageId" in r for r in receipts), receipts
        first = py5("receive", f.endpoints, topic, group=group, count=n, ackLimit=k, invisibleSeconds=10, rounds=10)
        acked = {d["body"] for d in first if d["acked"]}
        held = {d["body"] for d in first if not d["acked"]}
        assert len(acked) == k and acked | held == {f"c{i}" for i in range(n)} and not acked & held
        f.cluster.procs[1].kill_group()  # SIGKILL, the broker's whole process group
        f.cluster.restart_broker()
        f.cluster.wait_route(topic)
        again = py5("receive", f.endpoints, topic, group=group, count=n - k, invisibleSeconds=10, rounds=15)
        assert sorted(d["body"] for d in again) == sorted(held)
        assert {d["deliveryAttempt"] for d in again} == {2}
        assert {d["messageId"] for d in first} | {d["messageId"] for d in again} == \
            {r["messageId"] for r in receipts}
        # and nothing acked comes back: a receive outliving the invisible duration gets nothing
        assert py5("receive", f.endpoints, topic, group=group, count=1, invisibleSeconds=10, rounds=7) == []


def test_ali_ons_producer_to_5x_simple_consumer_keeps_tag_keys_properties_and_id(front, tmp_path):
    topic = "GrpcFromOns"
    front.cluster.create_topic(topic)
    sent = [{"tags": "OnsTag" if i % 2 == 0 else "Other", "keys": [f"ok{i}", f"ok{i}b"], "props": {"color": f"c{i}"},
             "body": f"ons-{i}"} for i in range(6)]
    results = produce("ons", front.cluster, topic, sent, tmp_path)
    assert all(r.get("status") == "SEND_OK" for r in results), results
    got = py5("receive", front.endpoints, topic, group="GrpcFromOnsG", count=3, expression="OnsTag", rounds=10)
    mine = [(m, r) for m, r in zip(sent, results) if m["tags"] == "OnsTag"]
    assert sorted(d["body"] for d in got) == sorted(m["body"] for m, _ in mine)
    by_body = {d["body"]: d for d in got}
    for m, r in mine:
        d = by_body[m["body"]]
        assert d["tag"] == "OnsTag" and d["keys"] == sorted(m["keys"]) and d["props"]["color"] == m["props"]["color"]
        assert d["messageId"] == r["msgId"] and d["deliveryAttempt"] == 1 and not d["corrupted"]


def test_a_consumer_is_told_the_fronts_long_polling_time_and_batch_size(front, stub):
    """The Telemetry reply to a consumer's Settings carries the front's long polling time and batch
    size (the Java proxy's mergeSubscriptionData): the 5.x PushConsumer long-polls for what the reply
    says, and would give up on each receive the front holds after 0 + its request timeout."""
    sub = consumer_settings_reply(stub, "GrpcSettings", "GrpcSettingsG").subscription
    assert sub.long_polling_timeout.ToMilliseconds() == 20_000 and sub.receive_batch_size == 32
    assert sub.group.name == "GrpcSettingsG" and sub.subscriptions[0].topic.name == "GrpcSettings"


def test_an_ack_of_several_handles_is_one_batch_and_each_entry_gets_its_status(front, stub):
    """AckMessage with several entries goes to the broker as one BATCH_ACK_MESSAGE (one revive-log
    record per checkpoint); a bad handle among them is answered alone, and a batch the broker
    refuses falls back to one ACK_MESSAGE per handle, so every entry still gets its own status. The acked
    messages are not received again once their invisible duration has passed."""
    topic, group = "GrpcBatchAck", "GrpcBatchAckG"
    front.cluster.create_topic(topic, queues=1)
    py5_produce(front.endpoints, topic, [{"body": f"b{i}"} for i in range(4)])
    got: list = []
    wait_for(lambda: got.extend(_receive(stub, topic, group, invisible_s=10)) or len(got) >= 4, 60, "4 received")
    got.sort(key=lambda m: m.body)

    def ack(*entries):
        return stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                                                     entries=list(entries)), metadata=MD, timeout=30)

    def entry(m):
        return spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                   receipt_handle=m.system_properties.receipt_handle)

    bad = spb.AckMessageEntry(message_id="m", receipt_handle="not a handle")
    r = ack(entry(got[0]), bad, entry(got[1]), entry(got[2]))
    assert [e.status.code for e in r.entries] == [pb.Code.OK, pb.Code.INVALID_RECEIPT_HANDLE, pb.Code.OK, pb.Code.OK]
    assert r.status.code == pb.Code.MULTIPLE_RESULTS
    assert [e.receipt_handle for e in r.entries] == [got[0].system_properties.receipt_handle, "not a handle",
                                                      got[1].system_properties.receipt_handle,
                                                      got[2].system_properties.receipt_handle]
    # one acked already in a checkpoint still out, one not: both OK, as an ACK_MESSAGE of each would be
    r = ack(entry(got[1]), entry(got[3]))
    assert [e.status.code for e in r.entries] == [pb.Code.OK, pb.Code.OK], r
    # the checkpoint is done: the broker refuses the batch, and each handle acked alone is refused too
    r = ack(entry(got[0]), entry(got[3]))
    assert [e.status.code for e in r.entries] == [pb.Code.INVALID_RECEIPT_HANDLE] * 2, r
    # receives (5 s long polls) until past the invisible duration: an unacked one would come back
    end = time.monotonic() + 11
    while time.monotonic() < end:
        assert _receive(stub, topic, group, invisible_s=10) == []
