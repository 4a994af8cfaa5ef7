"""Timer messages through the send kernel in a real broker over real sockets: a plain one is
stored in the timer topic byte for byte as the processors store it (properties with TIMER_OUT_MS,
REAL_TOPIC, REAL_QID), answered with the same fields and recall handle, and enqueued by the timer
service; the ones the kernel must not take (refused, due already, a recall's marker, properties
the processors would rewrite) reach the processors in order within the same read."""
from __future__ import annotations

import asyncio
import time

import pytest

from broker.remoting import codes
from broker.server.timer.timer_message_service import TIMER_TOPIC
from broker.store.message import decode_message
from tests.helpers.procs import async_wait_until
from tests.test_broker_remoting import Broker
from tests.test_send_path import _burst, _v2


def _raw_props(view) -> bytes:
    """A stored record's properties as the bytes it holds (IPv4 hosts)."""
    m = decode_message(view)
    start = 48 + 8 + 8 + 8 + 12 + 4 + len(m.body) + 1 + len(m.topic.encode()) + 2
    return bytes(view[start:m.size])


def _timer_records(store, n: int) -> list:
    r = store.get(TIMER_TOPIC, 0, 0, max_msgs=n)
    try:
        return [(decode_message(v), _raw_props(v)) for v in r.messages]
    finally:
        r.release()


@pytest.mark.parametrize("serialize_type", [0, 1])
def test_the_kernel_stores_and_answers_a_timer_message_as_the_processors_do(tmp_path, serialize_type):
    async def go():
        async with Broker(tmp_path) as b:
            fast = b.controller.fast
            pipe = fast.pipeline
            await async_wait_until(lambda: pipe.timer_topic == TIMER_TOPIC.encode(), 10)
            await _burst(b.port, _v2("Timed", b"warm-up", 0, opaque=1), 1)  # the topic's route, by the processors
            due = int(time.time() * 1000) + 3_600_000 + 500
            props = f"TAGS\x01T\x02UNIQ_KEY\x01AC1F00010000ABCD\x02TIMER_DELIVER_MS\x01{due}"
            pipe.set_timer(None)  # the processors take it
            slow = (await _burst(b.port, _v2("Timed", b"body", 1, opaque=7, props=props,
                                             serialize_type=serialize_type), 1))[7]
            assert pipe.appended == 0
            fast.sync_routes()  # the kernel takes it
            quick = (await _burst(b.port, _v2("Timed", b"body", 1, opaque=8, props=props,
                                              serialize_type=serialize_type), 1))[8]
            assert pipe.appended == 1
            for r in (slow, quick):
                assert r.code == codes.SUCCESS and r.ext["queueId"] == "1", (r.code, r.remark, r.ext)
            assert (slow.ext["queueOffset"], quick.ext["queueOffset"]) == ("0", "1")
            assert slow.ext["recallHandle"] and slow.ext["recallHandle"] == quick.ext["recallHandle"]
            assert {k: v for k, v in slow.ext.items() if k not in ("msgId", "queueOffset")} == \
                   {k: v for k, v in quick.ext.items() if k not in ("msgId", "queueOffset")}
            await b.controller.store.wait_dispatched(b.controller.store.offsets()["wrote"], 10)
            (a, pa), (c, pc) = _timer_records(b.controller.store, 2)
            assert [a.msg_id, c.msg_id] == [slow.ext["msgId"], quick.ext["msgId"]]
            assert pa == pc and pa.endswith(f"\x02TIMER_OUT_MS\x01{due // 1000 * 1000}\x02REAL_TOPIC\x01Timed"
                                            f"\x02REAL_QID\x011".encode()), pa
            for field in ("topic", "queue_id", "body", "flag", "sys_flag", "store_host", "reconsume_times",
                          "body_crc"):
                assert getattr(a, field) == getattr(c, field), field
            timer = b.controller.timer
            await async_wait_until(lambda: timer.enqueued == 2, 10)  # the kernel's arrival was told
    asyncio.run(go())


def test_timer_messages_the_kernel_cannot_take_reach_the_processors_in_order(tmp_path):
    """One read: a plain timer message (the kernel's), one beyond timerMaxDelaySec (refused
    MESSAGE_ILLEGAL by the processors), one due already (stored in its own topic), a recall's
    marker with no time (refused), one with a key twice and one with a value int() reads but the
    kernel does not (both stored by the processors in the timer topic), another plain one."""
    async def go():
        async with Broker(tmp_path) as b:
            pipe = b.controller.fast.pipeline
            await async_wait_until(lambda: pipe.timer_topic == TIMER_TOPIC.encode(), 10)
            await _burst(b.port, _v2("Mixed", b"warm-up", 0, opaque=1), 1)
            now = int(time.time() * 1000)
            cases = [("TIMER_DELAY_SEC\x01600", codes.SUCCESS), ("TIMER_DELAY_SEC\x0199999999", codes.MESSAGE_ILLEGAL),
                     (f"TIMER_DELIVER_MS\x01{now - 1000}", codes.SUCCESS),
                     ("TIMER_DEL_UNIQKEY\x01Mixed+X", codes.MESSAGE_ILLEGAL),
                     ("TIMER_DELAY_SEC\x01600\x02TAGS\x01a\x02TAGS\x01b", codes.SUCCESS),
                     ("TIMER_DELAY_SEC\x01 600", codes.SUCCESS), ("TIMER_DELAY_MS\x01600000", codes.SUCCESS)]
            before = pipe.appended
            data = b"".join(_v2("Mixed", b"m%d" % i, 0, opaque=10 + i, props=p) for i, (p, _) in enumerate(cases))
            got = await _burst(b.port, data, len(cases))
            assert [got[10 + i].code for i in range(len(cases))] == [c for _, c in cases], \
                [(got[10 + i].code, got[10 + i].remark) for i in range(len(cases))]
            assert pipe.appended - before == 2  # the two plain ones
            assert got[11].remark.startswith("timer message illegal")
            assert got[12].ext["queueOffset"] == "1"  # due: in Mixed queue 0, after the warm-up
            store = b.controller.store
            await store.wait_dispatched(store.offsets()["wrote"], 10)
            stored = _timer_records(store, 10)
            assert [m.body for m, _ in stored] == [b"m0", b"m4", b"m5", b"m6"]  # in the order sent
            assert [int(got[10 + i].ext["queueOffset"]) for i in (0, 4, 5, 6)] == [0, 1, 2, 3]
            assert stored[1][0].properties["TAGS"] == "b"  # the processors' reading of a key twice
            timer = b.controller.timer
            await async_wait_until(lambda: timer.enqueued == 4, 10)
    asyncio.run(go())
