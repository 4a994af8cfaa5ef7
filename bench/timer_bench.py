"""Timer messages (broker.server.timer) on a `broker serve` process: how fast timers are stored
and enqueued into the wheel, what the pending timers cost the broker's memory, and how late they
are delivered.

    python -m bench.timer_bench [--timers N] [--delay-s S]

Cell 1, enqueue: N sends with TIMER_DELAY_SEC=3600 through the project's client (64 in flight);
figures: sends/s, and the wheel's enqueue rate (the broker's timer_enqueued counter from its
runtime table, from the first send to the last enqueue), and the anonymous memory (RssAnon) of
the broker and its service processes together before and with the N timers pending: what the
timers cost in objects, not the pages of the commit log, timer log and wheel they are mapped from.
Cell 2, precision: 2,000 timers due in `delay_s` seconds, each message's lateness at delivery
(TIMER_DEQUEUE_MS minus its asked time, from the delivered copies): p50 / p99 / max.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

from bench.crowd import rss_bytes
from bench.proc_cpu import children
from bench.driver import wait_for_route
from bench.processes import BrokerProcess, NamesrvProcess


def _runtime(addr: str) -> dict:
    """GET_BROKER_RUNTIME_INFO's table (`broker admin status`)."""
    from broker.remoting import codes
    from broker.remoting.command import RemotingCommand
    from broker.remoting.connection import connect

    async def ask() -> dict:
        host, port = addr.rsplit(":", 1)
        conn = await connect(host, int(port))
        try:
            r = await conn.request(RemotingCommand.request(codes.GET_BROKER_RUNTIME_INFO), 10)
            return json.loads(bytes(r.body))["table"]
        finally:
            conn.close()
    return asyncio.run(ask())


async def _send(namesrv: str, n: int, props_of, topic: str, in_flight: int = 64, pin: bool = True) -> float:
    """n sends, `in_flight` at a time (as many workers, not a task per message: a million tasks
    cost the bench more than the broker); `pin`: all to queue 0 (the precision cell reads it),
    else the producer's own queue choice (its C send path)."""
    from broker.client.message import Message
    from broker.client.producer import Producer
    from broker.client.route import MessageQueue
    producer = Producer("timer_bench", namesrv_addr=namesrv)
    await producer.start()
    try:
        mq = MessageQueue(topic, "broker-a", 0) if pin else None
        body = b"t" * 256

        async def worker(first: int) -> None:
            for i in range(first, n, in_flight):
                await producer.send(Message(topic, body, properties=props_of(i)), queue=mq)
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(in_flight)))
        return time.perf_counter() - t0
    finally:
        await producer.shutdown()


def _rss_anon(pid: int) -> int:
    """RssAnon of the broker and its service processes (the reput, flush, HA, cleaner ...)."""
    total = 0
    for p in [pid, *children(pid)]:
        try:
            total += rss_bytes(p, "RssAnon")
        except (OSError, RuntimeError):  # a service between restarts
            pass
    return total


def run(timers: int, delay_s: float, workdir: str, progress=print) -> dict:
    out: dict = {}
    with NamesrvProcess() as ns, BrokerProcess("ASYNC_FLUSH", workdir, ns.addr, extra="autoCreateTopicEnable=true\n") as b:
        asyncio.run(wait_for_route(ns.addr, b.addr))
        rss0 = _rss_anon(b.proc.pid)
        t0 = time.perf_counter()
        send_s = asyncio.run(_send(ns.addr, timers, lambda i: {"TIMER_DELAY_SEC": "3600"}, "TimerBench", pin=False))
        while int(_runtime(b.addr).get("timer_enqueued", 0)) < timers:
            time.sleep(0.05)  # a poll of another process's counter, for a figure
        enq_s = time.perf_counter() - t0
        rss1 = _rss_anon(b.proc.pid)
        out["enqueue"] = {"timers": timers, "sends_per_s": timers / send_s, "enqueued_per_s": timers / enq_s,
                          "rss_before_mib": rss0 / (1 << 20), "rss_pending_mib": rss1 / (1 << 20),
                          "rss_added_mib": (rss1 - rss0) / (1 << 20)}
        progress(f"timer enqueue: {timers:,} timers, {timers / send_s:,.0f} sends/s, enqueued {timers / enq_s:,.0f}/s; "
                 f"broker and services RssAnon {rss0 / (1 << 20):,.0f} -> {rss1 / (1 << 20):,.0f} MiB")
        n = 2000
        due = int(time.time() * 1000) + int(delay_s * 1000)
        asyncio.run(_send(ns.addr, n, lambda i: {"TIMER_DELIVER_MS": str(due)}, "TimerDue"))
        lateness = asyncio.run(_collect(b.addr, "TimerDue", n, due, delay_s + 30))
        lateness.sort()
        out["precision"] = {"timers": n, "p50_ms": lateness[len(lateness) // 2], "p99_ms": lateness[int(len(lateness) * 0.99)],
                            "max_ms": lateness[-1], "min_ms": lateness[0], "delivered": len(lateness)}
        progress(f"timer precision: {len(lateness):,} of {n:,} delivered, lateness p50 {out['precision']['p50_ms']} ms, "
                 f"p99 {out['precision']['p99_ms']} ms, min {lateness[0]} ms")
    return out


async def _collect(addr: str, topic: str, n: int, due: int, timeout: float) -> list[int]:
    """Lateness (ms) of each delivered copy: its TIMER_DEQUEUE_MS minus the asked time."""
    from broker.client.client_instance import MQClientInstance
    from broker.client import api
    from broker.client.route import MessageQueue
    client = MQClientInstance("127.0.0.1:1")
    out: list[int] = []
    offset, deadline = 0, time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            r = await api.pull(client, addr, "timer_bench_cg", MessageQueue(topic, "broker-a", 0), offset, 256,
                               suspend_ms=1000)
            offset = r.next_begin_offset
            out += [int(m.properties["TIMER_DEQUEUE_MS"]) - due for m in r.messages]
    finally:
        await client.shutdown()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--timers", type=int, default=100_000)
    p.add_argument("--delay-s", type=float, default=3.0)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="timer-bench-") as d:
        print(json.dumps(run(a.timers, a.delay_s, d)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
