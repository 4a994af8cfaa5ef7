"""Recalling a timer message (RocketMQ 5.3's RECALL_MESSAGE and the gRPC RecallMessage): the send
reply of a timer message carries a recall handle; giving it back before the message's time stores a
delete marker in the same timer slot, and neither the message nor the marker is delivered, across
a kill -9 too. Refusals carry RocketMQ's codes and words; the other messages of the slot arrive."""
from __future__ import annotations

import asyncio
import base64
import time

from broker.client.message import Message
from broker.client.producer import Producer
from broker.common.recall_handle import RecallHandle
from broker.remoting import codes
from tests.helpers.grpc_front import front_beside_cluster, py5, py5_produce
from tests.helpers.procs import wait_until
from tests.test_timer_messages import TOPIC, Watcher, _broker, _send

RECALL = "recallMessageEnable=true\n"


def _recall(conn, handle: str, topic: str = TOPIC):
    return conn.request(codes.RECALL_MESSAGE, {"topic": topic, "recallHandle": handle, "producerGroup": "timer-pg"})


def test_a_recalled_timer_message_is_never_delivered_across_a_kill_9_and_its_slot_mates_are(tmp_path):
    from tests.helpers.raw_wire import RawConn
    b = _broker(tmp_path, RECALL).start()
    try:
        conn = RawConn(b.port)
        t0 = int(time.time() * 1000)
        replies = [_send(conn, i, "TIMER_DELAY_MS\x013000\x02") for i in range(3)]
        assert all(r.code == codes.SUCCESS for r in replies)
        plain = _send(conn, 3, "")
        assert plain.code == codes.SUCCESS and "recallHandle" not in plain.ext  # no time: nothing to recall
        handle = replies[0].ext["recallHandle"]
        h = RecallHandle.decode(handle)
        assert (h.topic, h.broker_name, h.message_id) == (TOPIC, "broker-a", "TIMERKEY0000")
        assert t0 + 1000 < int(h.timestamp) <= t0 + 3000 + 1000  # TIMER_OUT_MS + 1: inside its slot

        # refused, with RocketMQ's codes and words
        conn.request(codes.UPDATE_AND_CREATE_TOPIC, {"topic": "OtherT", "readQueueNums": 1, "writeQueueNums": 1,
                                                      "perm": 6, "topicFilterType": "SINGLE_TAG"})
        for req_topic, bad, code, remark in (
                (TOPIC, "not-base64!", codes.ILLEGAL_OPERATION, "recall handle is invalid"),
                (TOPIC, base64.urlsafe_b64encode(b"v2 TimerT broker-a 1 x").decode(), codes.ILLEGAL_OPERATION,
                 "recall handle is invalid"),
                (TOPIC, base64.urlsafe_b64encode(b"v1 TimerT broker-a").decode(), codes.ILLEGAL_OPERATION,
                 "recall handle is invalid"),
                ("OtherT", handle, codes.ILLEGAL_OPERATION, "recall failed, topic not match"),
                (TOPIC, RecallHandle(TOPIC, "broker-z", h.timestamp, h.message_id).encode(), codes.ILLEGAL_OPERATION,
                 "recall failed, broker service not available"),
                (TOPIC, RecallHandle(TOPIC, "broker-a", str(t0 - 1000), h.message_id).encode(),
                 codes.ILLEGAL_OPERATION, "recall failed, timestamp invalid"),
                ("NoSuchT", handle, codes.TOPIC_NOT_EXIST, "recall failed, the topic[NoSuchT] not exist")):
            r = _recall(conn, bad, req_topic)
            assert (r.code, r.remark) == (code, remark), (bad, r)

        r = _recall(conn, handle)
        assert r.code == codes.SUCCESS and r.ext["msgId"] == "TIMERKEY0000", r
        conn.close()
        b.kill9()  # the marker is in the log; the timer's checkpoint may not have seen it yet
        b.start()
        w = Watcher(b.port, t0)
        slot_end = int(h.timestamp) + 1000  # the slot is read once all of its times have come
        wait_until(lambda: len(w.poll()) >= 3 and time.time() * 1000 > slot_end + 1500, 30,
                   "the slot's other messages delivered and the slot read")
        assert set(w.seen) == {b"timer-1", b"timer-2", b"timer-3"}, sorted(w.seen)  # no timer-0, no marker
        assert all(n == 1 for n in w.count.values()), w.count
    finally:
        b.kill9()


def test_recall_is_refused_unless_recall_message_enable(tmp_path):
    from tests.helpers.raw_wire import RawConn
    b = _broker(tmp_path).start()
    try:
        conn = RawConn(b.port)
        r = _send(conn, 0, "TIMER_DELAY_MS\x0130000\x02")
        assert r.code == codes.SUCCESS
        r = _recall(conn, r.ext["recallHandle"])
        assert (r.code, r.remark) == (codes.NO_PERMISSION, "recall failed, operation is forbidden")
    finally:
        b.kill9()


def test_the_5x_client_and_our_producer_recall_through_their_paths(tmp_path):
    """The official 5.x Python client's recall_message through the gRPC front, and the project's
    Producer.recall over remoting: the recalled messages never reach a consumer, the kept ones do."""
    with front_beside_cluster(tmp_path, broker_conf=RECALL) as front:
        front.cluster.create_topic("RecallT")
        receipts = py5_produce(front.endpoints, "RecallT", [
            {"body": "kept", "delaySeconds": 3}, {"body": "recalled", "delaySeconds": 3, "recall": True}])
        kept, recalled, taken = receipts
        assert kept["recallHandle"] and recalled["recallHandle"], receipts
        assert taken == {"recalled": recalled["messageId"]}, receipts

        async def ours() -> tuple[str, str]:
            async with Producer("recall-pg", front.cluster.namesrv) as p:
                m = Message("RecallT", b"ours-recalled")
                m.properties["TIMER_DELAY_MS"] = "3000"
                r = await p.send(m)
                assert r.recall_handle, r
                return r.msg_id, await p.recall("RecallT", r.recall_handle)
        sent_id, recalled_id = asyncio.run(ours())
        assert recalled_id == sent_id

        got = py5("receive", front.endpoints, "RecallT", group="recall-g", count=1)
        assert [m["body"] for m in got] == ["kept"]
        # the recalled ones shared the slot (or the next): a further receive finds nothing
        assert py5("receive", front.endpoints, "RecallT", group="recall-g", count=1, rounds=2) == []
