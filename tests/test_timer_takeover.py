"""A timer wheel's takeover (RocketMQ 5's slave TimerMessageStore): a DLedger follower builds its
own wheel from the replicated timer topic and copies its leader's timer checkpoint (read time,
queue offset) through SlaveSynchronize (GET_TIMER_CHECK_POINT); when the leader dies by kill -9 the
new leader goes on from there. Every timer is delivered once: the ones the old leader delivered are
not delivered again, the ones still pending come at their time, never before it."""
from __future__ import annotations

import struct
import time

from broker.remoting import codes
from broker.store.message import decode_message
from tests.helpers.dledger_cluster import DLedgerGroup
from tests.helpers.procs import wait_until
from tests.helpers.raw_wire import RawConn, pull
from tests.test_timer_messages import TOPIC, _send

N = 30


def _delivered(port: int) -> dict[bytes, list[int]]:
    """Every copy in TOPIC's queue 0 of the broker at `port`: body -> [TIMER_DEQUEUE_MS, ...]."""
    conn, out, offset = RawConn(port), {}, 0
    try:
        while True:
            r = pull(conn, TOPIC, 0, offset)
            if r.code != codes.SUCCESS:
                return out
            body, pos = bytes(r.body), 0
            while pos < len(body):
                m = decode_message(body, pos)
                pos += m.size
                offset += 1
                out.setdefault(bytes(m.body), []).append(int(m.properties.get("TIMER_DEQUEUE_MS", "0")))
    finally:
        conn.close()


def test_a_follower_takes_the_wheel_over_and_delivers_each_timer_once(tmp_path):
    g = DLedgerGroup(tmp_path, extra="autoCreateTopicEnable=true\nflushConsumerOffsetInterval=500\n"
                                     "timerFlushIntervalMs=200\n").start()
    try:
        leader = g.leader()
        conn = RawConn(leader.port)
        t0 = int(time.time() * 1000)
        early, late = t0 + 2000, t0 + 9000
        for i in range(2 * N):
            due = early if i < N else late
            assert _send(conn, i, f"TIMER_DELIVER_MS\x01{due}\x02").code == codes.SUCCESS
        conn.close()
        wait_until(lambda: len(_delivered(leader.port)) == N, 20, "the early timers delivered by the leader")
        followers = [b for b in g.alive() if b is not leader]
        # each follower enqueued the timers the leader's checkpoint covers and took its read time
        wait_until(lambda: all((lambda i: int(i.get("timer_queue_offset", 0)) == 2 * N and
                                int(i.get("timer_read_ms", 0)) > early)(b.info()) for b in followers), 30,
                   "the followers' wheels to follow the leader's checkpoint")
        r = RawConn(leader.port).request(codes.GET_TIMER_CHECK_POINT)
        read_ms, _, queue_offset, master_queue_offset = struct.unpack_from(">4q", bytes(r.body))
        assert r.code == codes.SUCCESS and len(r.body) == 64 and queue_offset == master_queue_offset == 2 * N
        assert read_ms > early
        leader.kill9()
        new = g.leader(among=followers)
        wait_until(lambda: len(_delivered(new.port)) == 2 * N, 30, "the late timers delivered by the new leader")
        got = _delivered(new.port)
        assert {b: len(ts) for b, ts in got.items() if len(ts) != 1} == {}  # each one once
        for i in range(2 * N):
            [at] = got[b"timer-%d" % i]
            assert at >= (early if i < N else late), (i, at)  # never early
        assert "taking over the master's wheel" in new.stderr()
    finally:
        g.stop()
