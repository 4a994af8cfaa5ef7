"""Pop consumption (RocketMQ 5's POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME /
BATCH_ACK_MESSAGE) against real broker processes: a popped message is invisible until acked or
until its invisible time passes, then it comes back through %RETRY%<group>_<topic> with its
attempt raised, and into %DLQ%<group> past maxReconsumeTimes; orderly pops hand out one batch per
queue at a time; bad handles are refused and ack nothing; a kill -9 loses nothing popped and
unacked and brings back nothing acked.

No sleeps: a message that must not come back is shown not to by a long-polled pop that outlives
its invisible time (the revive would answer it), one that must come back by a long-polled pop
answered by the revive."""
from __future__ import annotations

import asyncio
import base64
import time

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.client import pop as P
from broker.client.errors import ResponseError
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.common import extra_info as ei
from tests.helpers.ha_cluster import Broker
from tests.helpers.pop_client import bodies as _bodies, receive_until as _receive_until, run_with_client

GROUP = "PopG"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("pop"), "b", "", "ASYNC_MASTER", 0, extra="maxReconsumeTimes=2\n")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _addr(b: Broker) -> str:
    return f"127.0.0.1:{b.port}"


async def _send(client, addr: str, topic: str, body: str, queue_id: int = 0) -> RemotingCommand:
    r = await client.invoke(addr, RemotingCommand.request(codes.SEND_MESSAGE_V2, {
        "a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": int(time.time() * 1000),
        "h": 0, "i": f"TAGS\x01TagA\x02UNIQ_KEY\x01{body}\x02", "j": 0, "k": False}, body.encode()), 10)
    assert r.code == codes.SUCCESS, r.remark
    return r


def _run(coro_fn, b: Broker):
    run_with_client(coro_fn, _addr(b))


def test_popped_message_is_invisible_until_acked_and_never_comes_back(broker):
    async def go(client, addr):
        for i in range(3):
            await _send(client, addr, "PopAck", f"a{i}", queue_id=i % 2)
        c = P.SimpleConsumer(client, addr, GROUP, "PopAck")
        msgs = await _receive_until(c, 3, invisible_ms=1500)
        assert sorted(_bodies(msgs)) == ["a0", "a1", "a2"]
        assert all(m.topic == "PopAck" and m.reconsume_times == 0 for m in msgs)
        # invisible: another pop of the group gets nothing while they are out
        assert await c.receive(1500, poll_ms=200) == []
        for m in msgs:
            await c.ack(m)
        # a pop held past their invisible time is not answered by a revive: acked stays acked
        assert await c.receive(1500, poll_ms=3500) == []
        # an acked message's handle acks nothing any more
        with pytest.raises(ResponseError) as e:
            await c.change_invisible_time(P.handle_of(msgs[0]), 1000)
        assert e.value.code == codes.NO_MESSAGE
    _run(go, broker)


def test_unacked_message_comes_back_after_its_invisible_time_with_its_attempt_raised(broker):
    async def go(client, addr):
        await _send(client, addr, "PopRedeliver", "r0")
        c = P.SimpleConsumer(client, addr, GROUP, "PopRedeliver")
        [first] = await _receive_until(c, 1, invisible_ms=300)
        [again] = await _receive_until(c, 1, invisible_ms=30_000)  # answered by the revive
        assert _bodies([again]) == ["r0"] and again.reconsume_times == 1 and again.topic == "PopRedeliver"
        assert again.properties["ORIGIN_MESSAGE_ID"] == first.msg_id
        assert again.properties["RETRY_TOPIC"] == "PopRedeliver"
        assert P.handle_of(again).split()[4] == "1"  # popped from the pop retry topic
        with pytest.raises(ResponseError) as e:  # the first delivery's handle is dead
            await c.ack(first)
        assert e.value.code == codes.NO_MESSAGE
        await c.ack(again)
        assert await c.receive(300, poll_ms=1000) == []
    _run(go, broker)


def test_change_invisible_time_extends_and_shortens_it(broker):
    async def go(client, addr):
        await _send(client, addr, "PopChange", "c0")
        c = P.SimpleConsumer(client, addr, GROUP, "PopChange")
        [m] = await _receive_until(c, 1, invisible_ms=500)
        old = P.handle_of(m)
        new = await c.change_invisible_time(m, 60_000)  # extended: not back after the first 500 ms
        assert new != old and P.handle_of(m) == new
        assert await c.receive(30_000, poll_ms=2500) == []
        with pytest.raises(ResponseError) as e:
            await c.ack(old)
        assert e.value.code == codes.NO_MESSAGE
        await c.change_invisible_time(m, 100)  # shortened: back at once
        [again] = await _receive_until(c, 1, invisible_ms=30_000)
        assert _bodies([again]) == ["c0"] and again.reconsume_times == 1
        await c.ack(again)
    _run(go, broker)


def test_past_max_reconsume_times_the_message_goes_to_the_dlq(broker):
    async def go(client, addr):
        await _send(client, addr, "PopDlq", "d0")
        group = "PopDlqG"
        c = P.SimpleConsumer(client, addr, group, "PopDlq")
        attempts = []
        for _ in range(3):  # maxReconsumeTimes=2: the first delivery and two retries
            [m] = await _receive_until(c, 1, invisible_ms=200)
            attempts.append(m.reconsume_times)
        assert attempts == [0, 1, 2]
        assert await c.receive(200, poll_ms=1500) == []  # not redelivered a fourth time
        dlq = P.SimpleConsumer(client, addr, "PopDlqReader", f"%DLQ%{group}")
        [dead] = await _receive_until(dlq, 1, invisible_ms=30_000)
        assert _bodies([dead]) == ["d0"] and dead.reconsume_times == 3
    _run(go, broker)


def test_forward_to_dlq_the_front_way_send_back_then_ack(broker):
    """The gRPC front's ForwardMessageToDeadLetterQueue: CONSUMER_SEND_MSG_BACK with delayLevel -1
    (the proxy's way), then an ack of the handle."""
    async def go(client, addr):
        await _send(client, addr, "PopFwd", "f0")
        group = "PopFwdG"
        c = P.SimpleConsumer(client, addr, group, "PopFwd")
        [m] = await _receive_until(c, 1, invisible_ms=500)
        r = await client.invoke(addr, RemotingCommand.request(codes.CONSUMER_SEND_MSG_BACK, {
            "offset": m.commit_log_offset, "group": group, "delayLevel": -1, "originMsgId": m.msg_id,
            "originTopic": "PopFwd", "maxReconsumeTimes": 0}), 5)
        assert r.code == codes.SUCCESS, r.remark
        await c.ack(m)
        assert await c.receive(500, poll_ms=1500) == []
        [dead] = await _receive_until(P.SimpleConsumer(client, addr, "PopFwdReader", f"%DLQ%{group}"), 1, 30_000)
        assert _bodies([dead]) == ["f0"]
    _run(go, broker)


def test_orderly_pop_hands_out_one_batch_per_queue_in_order(broker):
    async def go(client, addr):
        for i in range(6):
            await _send(client, addr, "PopFifo", f"o{i}", queue_id=0)
        a = P.SimpleConsumer(client, addr, "PopFifoG", "PopFifo")
        b = P.SimpleConsumer(client, addr, "PopFifoG", "PopFifo")
        first = await _receive_until(a, 2, invisible_ms=30_000, order=True, queue_id=0)
        assert _bodies(first) == ["o0", "o1"]
        assert await b.receive(30_000, max_nums=2, poll_ms=300, order=True) == []  # the queue is out
        await a.ack(first[0])
        assert await b.receive(30_000, max_nums=2, poll_ms=300, order=True) == []  # until all of it is acked
        held = asyncio.ensure_future(b.receive(500, max_nums=2, poll_ms=10_000, order=True))
        await a.ack(first[1])  # wakes the held orderly pop
        second = await held
        assert _bodies(second) == ["o2", "o3"] and all(m.reconsume_times == 0 for m in second)
        # not acked in time: the same batch again, in order, each attempt raised
        again = await _receive_until(a, 2, invisible_ms=30_000, order=True)
        assert _bodies(again) == ["o2", "o3"] and [m.reconsume_times for m in again] == [1, 1]
        with pytest.raises(ResponseError):  # the first delivery's handle is stale
            await b.ack(second[0])
        for m in again:
            await a.ack(m)
        third = await _receive_until(b, 2, invisible_ms=30_000, order=True, attempt_id="att-1")
        assert _bodies(third) == ["o4", "o5"]
        # a receive retried with its attemptId (its answer was lost) gets the same batch, not a block
        retried = await b.receive(30_000, max_nums=2, poll_ms=300, order=True, attempt_id="att-1")
        assert _bodies(retried) == ["o4", "o5"] and [m.reconsume_times for m in retried] == [0, 0]
        assert await a.receive(30_000, max_nums=2, poll_ms=300, order=True, attempt_id="att-2") == []
        for m in retried:
            await b.ack(m)
    _run(go, broker)


def test_concurrent_consumers_of_a_group_never_get_the_same_invisible_message(broker):
    async def go(client, addr):
        n = 60
        for i in range(n):
            await _send(client, addr, "PopShare", f"s{i}", queue_id=i % 4)
        consumers = [P.SimpleConsumer(client, addr, "PopShareG", "PopShare") for _ in range(4)]
        got: list[list] = [[] for _ in consumers]

        async def run(i):
            while sum(map(len, got)) < n:
                got[i] += await consumers[i].receive(60_000, max_nums=3, poll_ms=500)
        await asyncio.wait_for(asyncio.gather(*(run(i) for i in range(4))), 60)
        every = [b for g in got for b in _bodies(g)]
        assert sorted(every) == sorted(f"s{i}" for i in range(n))  # each exactly once
        assert sum(1 for g in got if g) >= 2  # shared, not one consumer taking all
    _run(go, broker)


def test_held_pop_is_answered_by_a_send(broker):
    async def go(client, addr):
        c = P.SimpleConsumer(client, addr, GROUP, "PopHold")
        await _send(client, addr, "PopHold", "h-1")
        await _receive_until(c, 1, invisible_ms=60_000)  # the group's offsets are set: nothing left
        held = asyncio.ensure_future(c.receive(60_000, poll_ms=20_000))
        await _send(client, addr, "PopHold", "h0", queue_id=3)
        assert _bodies(await asyncio.wait_for(held, 30)) == ["h0"]
    _run(go, broker)


def test_batch_ack(broker):
    async def go(client, addr):
        for i in range(4):
            await _send(client, addr, "PopBatch", f"b{i}", queue_id=0)
        c = P.SimpleConsumer(client, addr, GROUP, "PopBatch")
        msgs = await _receive_until(c, 4, invisible_ms=1500, queue_id=0)
        info = [h.split() for h in map(P.handle_of, msgs)]
        so, pt, rq = int(info[0][0]), int(info[0][1]), int(info[0][3])
        bits = sum(1 << (m.queue_offset - so) for m in msgs[:3])
        body = msgspec.json.encode({"brokerName": "broker-a", "acks": [{
            "c": GROUP, "t": "PopBatch", "r": "0", "so": so, "q": 0, "rq": rq, "pt": pt, "it": 1500,
            "b": base64.b64encode(bits.to_bytes(8, "little")).decode()}]})
        r = await client.invoke(addr, RemotingCommand.request(codes.BATCH_ACK_MESSAGE, {}, body), 5)
        assert r.code == codes.SUCCESS, r.remark
        [back] = await _receive_until(c, 1, invisible_ms=30_000)  # only the one not in the batch
        assert _bodies([back]) == [_bodies(msgs)[3]] and back.reconsume_times == 1
        await c.ack(back)
        r = await client.invoke(addr, RemotingCommand.request(codes.BATCH_ACK_MESSAGE, {}, b"{\"acks\": 3}"), 5)
        assert r.code == codes.SYSTEM_ERROR and "acks" in r.remark

        def bad(**change) -> bytes:  # an ack of the offsets so and so + 40 (past the queue's end)
            a = {"c": GROUP, "t": "PopBatch", "r": "0", "so": so, "q": 0, "rq": rq, "pt": pt, "it": 1500,
                 "b": base64.b64encode((1 | 1 << 40).to_bytes(8, "little")).decode(), **change}
            return msgspec.json.encode({"brokerName": "broker-a", "acks": [a]})
        # each offset is named with the first check it fails, in the single ack's order: the topic,
        # then the offset's range, then the handle's fields
        r = await client.invoke(addr, RemotingCommand.request(codes.BATCH_ACK_MESSAGE, {}, bad(t="PopNoSuch")), 5)
        assert r.code == codes.NO_MESSAGE
        assert r.remark.count("topic[PopNoSuch] not exist") == 2 and f"PopNoSuch@0:{so + 40}" in r.remark
        r = await client.invoke(addr, RemotingCommand.request(codes.BATCH_ACK_MESSAGE, {}, bad(pt=-1)), 5)
        assert r.code == codes.NO_MESSAGE
        assert f"PopBatch@0:{so} (extraInfo popTime -1 is out of range)" in r.remark
        assert f"PopBatch@0:{so + 40} (offset is illegal" in r.remark
    _run(go, broker)


def test_bad_handles_and_requests_are_refused_and_ack_nothing(broker):
    async def go(client, addr):
        await _send(client, addr, "PopBad", "x0")
        c = P.SimpleConsumer(client, addr, "PopBadG", "PopBad")
        [m] = await _receive_until(c, 1, invisible_ms=1000)
        h = P.handle_of(m).split()
        qid, off = m.queue_id, m.queue_offset

        async def ack(extra: str, offset: int = off, queue_id: int = qid, topic: str = "PopBad", group="PopBadG"):
            return await client.invoke(addr, RemotingCommand.request(codes.ACK_MESSAGE, {
                "consumerGroup": group, "topic": topic, "queueId": queue_id, "extraInfo": extra,
                "offset": offset}), 5)
        forged_time = " ".join([h[0], str(int(h[1]) + 1), *h[2:]])
        forged_rq = " ".join([*h[:3], str((int(h[3]) + 1) % 8), *h[4:]])
        refused = {
            "malformed": (await ack("garbage"), codes.SYSTEM_ERROR),
            "non-numeric": (await ack(" ".join(["x", *h[1:]])), codes.SYSTEM_ERROR),
            "bad retry flag": (await ack(" ".join([*h[:4], "7", *h[5:]])), codes.SYSTEM_ERROR),
            "forged pop time": (await ack(forged_time), codes.NO_MESSAGE),
            "forged revive queue": (await ack(forged_rq), codes.NO_MESSAGE),
            "other group": (await ack(" ".join(h), group="PopOtherG"), codes.NO_MESSAGE),
            "offset not in handle": (await ack(" ".join(h[:7]), offset=off + 5), codes.NO_MESSAGE),
            "handle of another offset": (await ack(" ".join([*h[:7], str(off + 1)])), codes.SYSTEM_ERROR),
            "unknown topic": (await ack(" ".join(h), topic="NoSuchPopTopic"), codes.TOPIC_NOT_EXIST),
            "queue out of range": (await ack(" ".join([*h[:6], "99", h[7]]), queue_id=99), codes.MESSAGE_ILLEGAL),
        }
        for what, (r, want) in refused.items():
            assert r.code == want, (what, r.code, r.remark)
            assert r.remark, what
        pop = {"consumerGroup": "PopBadG", "topic": "PopBad", "queueId": -1, "maxMsgNums": 1, "invisibleTime": 1000,
               "pollTime": 0, "bornTime": 0, "initMode": 0}
        for change, want in (({"topic": "NoSuchPopTopic"}, codes.TOPIC_NOT_EXIST),
                             ({"maxMsgNums": 33}, codes.INVALID_PARAMETER),
                             ({"invisibleTime": 0}, codes.INVALID_PARAMETER),
                             ({"queueId": 64}, codes.INVALID_PARAMETER),
                             ({"consumerGroup": "bad group!"}, codes.SYSTEM_ERROR),
                             ({"maxMsgNums": "many"}, codes.SYSTEM_ERROR),
                             ({"topic": "rmq_sys_REVIVE_LOG_DefaultCluster"}, codes.NO_PERMISSION),
                             ({"consumerGroup": "CID_RMQ_SYS_REVIVE_GROUP"}, codes.NO_PERMISSION)):
            r = await client.invoke(addr, RemotingCommand.request(codes.POP_MESSAGE, {**pop, **change}), 5)
            assert r.code == want and r.remark, (change, r.code, r.remark)
        # none of it acked the message: it comes back after its invisible time
        [again] = await _receive_until(c, 1, invisible_ms=30_000)
        assert _bodies([again]) == ["x0"] and again.reconsume_times == 1
        await c.ack(again)
    _run(go, broker)


def test_ack_under_sync_flush_is_answered_once_flushed(tmp_path):
    b = Broker(tmp_path, "sync", "", "ASYNC_MASTER", 0, extra="flushDiskType=SYNC_FLUSH\n")
    b.start()
    try:
        async def go(client, addr):
            await _send(client, addr, "PopSync", "s0")
            c = P.SimpleConsumer(client, addr, GROUP, "PopSync")
            [m] = await _receive_until(c, 1, invisible_ms=1000)
            await c.ack(m)  # SUCCESS once the flush service covered the ack record
            assert await c.receive(1000, poll_ms=2500) == []
        _run(go, b)
    finally:
        b.stop()


def test_kill9_loses_no_unacked_message_and_brings_back_no_acked_one(tmp_path):
    # consumerOffset.json is not written between start and the kill: the pop offsets and the
    # revive offsets come back from the revive log alone
    b = Broker(tmp_path, "crash", "", "ASYNC_MASTER", 0, extra="flushConsumerOffsetInterval=600000\n")
    b.start()
    try:
        acked: list[str] = []
        unacked: list[str] = []
        batch_unacked: list[str] = []

        async def before(client, addr):
            for i in range(8):
                await _send(client, addr, "PopCrash", f"k{i}", queue_id=i % 2)
            c = P.SimpleConsumer(client, addr, "PopCrashG", "PopCrash")
            msgs = await _receive_until(c, 8, invisible_ms=2000)
            for m in msgs[:5]:
                await c.ack(m)
            acked.extend(_bodies(msgs[:5]))
            unacked.extend(_bodies(msgs[5:]))
            # three of a batch of four acked by one BATCH_ACK_MESSAGE: one revive-log record (bAck),
            # which the restart must read as three acks
            for i in range(4):
                await _send(client, addr, "PopCrashBatch", f"bb{i}", queue_id=0)
            cb = P.SimpleConsumer(client, addr, "PopCrashG", "PopCrashBatch")
            bmsgs = await _receive_until(cb, 4, invisible_ms=2000, queue_id=0)
            so, pt, _, rq = (int(x) for x in P.handle_of(bmsgs[0]).split()[:4])
            bits = sum(1 << (m.queue_offset - so) for m in bmsgs[:3])
            body = msgspec.json.encode({"brokerName": "broker-a", "acks": [{
                "c": "PopCrashG", "t": "PopCrashBatch", "r": "0", "so": so, "q": 0, "rq": rq, "pt": pt, "it": 2000,
                "b": base64.b64encode(bits.to_bytes(8, "little")).decode()}]})
            r = await client.invoke(addr, RemotingCommand.request(codes.BATCH_ACK_MESSAGE, {}, body), 5)
            assert r.code == codes.SUCCESS, r.remark
            batch_unacked.extend(_bodies(bmsgs[3:]))
            # revived, then consumed from the retry topic and acked: not revived again after the crash
            await _send(client, addr, "PopCrash", "kr")
            await _receive_until(c, 1, invisible_ms=300)
            [again] = await _receive_until(c, 1, invisible_ms=60_000)
            assert _bodies([again]) == ["kr"] and again.reconsume_times == 1
            await c.ack(again)
            # orderly: the first batch acked, the second half acked
            for i in range(4):
                await _send(client, addr, "PopCrashFifo", f"o{i}", queue_id=0)
            f = P.SimpleConsumer(client, addr, "PopCrashFifoG", "PopCrashFifo")
            first = await _receive_until(f, 2, invisible_ms=3000, order=True, queue_id=0)
            for m in first:
                await f.ack(m)
            second = await _receive_until(f, 2, invisible_ms=3000, order=True, queue_id=0)
            assert _bodies(first + second) == ["o0", "o1", "o2", "o3"]
            await f.ack(second[0])
        _run(before, b)
        b.kill9()
        offsets = b.store / "config" / "consumerOffset.json"
        assert not offsets.exists() or "PopCrashG" not in offsets.read_text()
        b.start()

        async def after(client, addr):
            c = P.SimpleConsumer(client, addr, "PopCrashG", "PopCrash")
            back = await _receive_until(c, 3, invisible_ms=60_000)
            assert sorted(_bodies(back)) == sorted(unacked)
            assert all(m.reconsume_times == 1 for m in back)
            for m in back:
                await c.ack(m)
            cb = P.SimpleConsumer(client, addr, "PopCrashG", "PopCrashBatch")
            [bback] = await _receive_until(cb, 1, invisible_ms=60_000)
            assert _bodies([bback]) == batch_unacked  # the three batch-acked never come back
            await cb.ack(bback)
            assert await cb.receive(1000, poll_ms=2500) == []
            await _send(client, addr, "PopCrash", "k-new")
            [new] = await _receive_until(c, 1, invisible_ms=60_000)
            assert _bodies([new]) == ["k-new"]  # the pop offsets were recovered: k0..k7 are not popped again
            await c.ack(new)
            assert await c.receive(1000, poll_ms=3000) == []  # past the old invisible time: no acked one
            f = P.SimpleConsumer(client, addr, "PopCrashFifoG", "PopCrashFifo")
            # the batch out at the crash is still out (blocked) until its invisible time ends, then
            # comes back from its first unacked message; the acked ones never do
            [o3] = await _receive_until(f, 1, invisible_ms=60_000, order=True, queue_id=0)
            assert _bodies([o3]) == ["o3"] and o3.reconsume_times == 1
            await f.ack(o3)
            assert await f.receive(1000, poll_ms=1500, order=True) == []
        _run(after, b)
        b.stop()
        b.start()  # a clean restart: still nothing comes back

        async def again(client, addr):
            c = P.SimpleConsumer(client, addr, "PopCrashG", "PopCrash")
            assert await c.receive(1000, poll_ms=2500) == []
        _run(again, b)
    finally:
        b.stop()


@given(ck=st.integers(0, 1 << 62), pt=st.integers(0, 1 << 62), it=st.integers(0, 1 << 40),
       rq=st.integers(0, 999), retry=st.booleans(), qid=st.integers(0, 1023), qo=st.integers(0, 1 << 62))
def test_receipt_handle_round_trips(ck, pt, it, rq, retry, qid, qo):
    topic = "%RETRY%G_T" if retry else "T"
    handle = ei.build(ck, pt, it, rq, topic, "broker-a", qid, qo)
    info = ei.parse(handle + " 12345")  # a gRPC receipt handle's commit log offset is ignored
    assert (info.ck_offset, info.pop_time, info.invisible_time, info.revive_qid, info.queue_id,
            info.queue_offset) == (ck, pt, it, rq, qid, qo)
    assert ei.real_topic("T", "G", info.retry) == topic
