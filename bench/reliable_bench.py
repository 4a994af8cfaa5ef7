"""Throughput of the idempotent consumer (broker.reliable, issue 9) against the plain PushConsumer.

    .venv/bin/python -m bench.reliable_bench            # 20,000 messages of 1 KiB per cell
    .venv/bin/python -m bench.reliable_bench -n 5000 --json out.json

A name server and a broker (ASYNC_FLUSH, bench.processes) run as processes on loopback, with a real
Redis and a real PostgreSQL (tools/servers.py; durable: PostgreSQL's defaults, fsync and
synchronous_commit on) started for the run, and SQLite with its default here (WAL, synchronous=FULL). Per cell: a fresh topic (8 queues) and group; the
messages, each with its own RELIABLE_ID, are produced beforehand in batches of 32 with their stubs
written in one transaction (so each handler's confirmation updates a real row); then a consumer
starts and the clock runs until it has processed every message. The handler does no business
work: what is measured is the machinery (Redis SET NX, the claim, the stub check and confirmation,
the commit, the Redis "done"), one transaction per batch of `--batch` messages (the consumer's
default, 64), 8 queues consumed in parallel. Run as a section of `python -m bench --only reliable`.

A second table: OutboxProducer.send (stub transaction, send, send bookkeeping) with 32 sends in
flight.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.proc_cpu import ProcessTree
from bench.processes import BrokerProcess, NamesrvProcess
from broker.client.admin import Admin
from broker.client.errors import ClientError
from broker.client.message import Message
from broker.client.producer import Producer
from broker.client.push_consumer import PushConsumer
from broker.reliable import IdempotentConsumer, OutboxProducer, open_store
from broker.reliable.idempotent import DEFAULT_BATCH_SIZE
from broker.reliable.ids import PROPERTY_RELIABLE_ID
from broker.reliable.stub import Stub, now_ms
from tools.servers import PostgresServer, RedisServer

QUEUES = 8
BATCH = 32
CELLS = (("plain", None, False), ("idempotent", "postgresql", True), ("idempotent", "postgresql", False),
         ("idempotent", "sqlite", True), ("idempotent", "sqlite", False))


async def _topic(namesrv: str, broker: str, topic: str) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, QUEUES, broker_addr=broker)
        for _ in range(600):
            try:
                if len((await admin.route(topic)).read_queues(topic)) == QUEUES:
                    return
            except ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"no route of {topic}")


async def _produce(namesrv: str, topic: str, n: int, body: bytes, store_url: str | None) -> None:
    ids = [f"{topic}-{i}" for i in range(n)]
    if store_url is not None:  # the stubs, as an outbox would have written them
        store = open_store(store_url)
        async with store:
            async with store.transaction() as s:
                for rid in ids:
                    msg = Message(topic, body, properties={PROPERTY_RELIABLE_ID: rid})
                    stub = Stub.from_message(rid, "bench-pg", msg, now_ms() + 3_600_000)
                    stub.count = 1
                    await store.insert_stub(s, stub)
    async with Producer("bench-pg", namesrv) as p:
        batches = [ids[i:i + BATCH] for i in range(0, n, BATCH)]
        for i in range(0, len(batches), 8):
            await asyncio.gather(*(p.send_batch([Message(topic, body, properties={PROPERTY_RELIABLE_ID: rid})
                                                 for rid in batch], 10) for batch in batches[i:i + 8]))


class OtherCpu:
    """CPU seconds of the processes a consumer makes work, apart from its own: the broker (and its
    services) with the name server, PostgreSQL (the postmaster and every backend) and Redis."""

    def __init__(self, roots: dict[str, int]):
        self.trees = {label: ProcessTree(pid) for label, pid in roots.items()}

    def snapshot(self) -> dict[str, float]:
        return {label: sum(cpu for _, cpu in t.snapshot().values()) for label, t in self.trees.items()}


async def _consume_cell(namesrv: str, broker: str, kind: str, store_url: str | None, redis_url: str | None,
                        n: int, body: bytes, tag: str, batch_size: int = DEFAULT_BATCH_SIZE,
                        others: OtherCpu | None = None) -> dict:
    topic, group = f"RB_{tag}", f"rbcg_{tag}"
    await _topic(namesrv, broker, topic)
    await _produce(namesrv, topic, n, body, store_url)
    pc = PushConsumer(group, namesrv, consume_from_first=True)
    pc.subscribe(topic)
    done = asyncio.Event()
    count = [0]
    if kind == "plain":
        def listener(msgs):
            count[0] += len(msgs)
            if count[0] >= n:
                done.set()
            return True
        pc.register(listener)
        runner = pc
    else:
        async def handler(msg, session):
            pass

        def committed(rid, msg):  # the clock stops at the last commit, not the last handler call
            count[0] += 1
            if count[0] >= n:
                done.set()
        runner = IdempotentConsumer(pc, handler, store_url, redis_url, batch_size=batch_size, on_confirmed=committed)
    o0 = others.snapshot() if others is not None else {}
    t0, c0 = time.perf_counter(), time.process_time()
    await runner.start()
    try:
        await asyncio.wait_for(done.wait(), 600)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        o1 = others.snapshot() if others is not None else {}
    finally:
        await runner.shutdown()
    # the consumer's own CPU per message (this process: the client, redis-py, psycopg), the figure
    # that holds still when other work on the machine makes the wall clock jump
    out = {"messages": n, "seconds": round(elapsed, 3), "msgs_per_s": round(n / elapsed),
           "cpu_us_per_msg": round(cpu / n * 1e6, 1)}
    # and what every process on the path spent per message: the sum says how many messages a
    # second this machine's cores could carry at best (the CPU ceiling), whatever the wall clock did
    per = {label: round((o1[label] - o0[label]) / n * 1e6, 1) for label in o1}
    if per:
        out["other_cpu_us_per_msg"] = per
        total = cpu / n * 1e6 + sum(per.values())
        out["total_cpu_us_per_msg"] = round(total, 1)
        out["cpu_ceiling_msgs_per_s"] = round(os.cpu_count() / total * 1e6) if total > 0 else None
    if kind != "plain":
        m = runner.metrics.snapshot()
        out["processed"], out["confirmed_stubs"] = m["processed"], m["confirmed_stubs"]
        out["batch_size"] = batch_size
        out["batches"] = m["batches"]
    return out


async def _outbox_cell(namesrv: str, broker: str, store_url: str, n: int, body: bytes, tag: str,
                       in_flight: int = 32) -> dict:
    topic = f"RBO_{tag}"
    await _topic(namesrv, broker, topic)
    outbox = OutboxProducer(Producer(f"rbpg_{tag}", namesrv), store_url, resend=False)
    async with outbox:
        queue = iter(range(n))

        async def sender():
            for _ in queue:
                await outbox.send(Message(topic, body))
        t0 = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(in_flight)))
        elapsed = time.perf_counter() - t0
    return {"messages": n, "in_flight": in_flight, "seconds": round(elapsed, 3), "msgs_per_s": round(n / elapsed)}


def run(n: int = 20_000, body_size: int = 1024, outbox_n: int = 2_000, batch_size: int = DEFAULT_BATCH_SIZE,
        progress=None, workdir: str | None = None) -> dict:
    """Start the servers, run every cell, stop the servers; the figures as a dict. The broker's
    store and the SQLite files go under `workdir` (default: the temporary directory)."""
    if progress is None:
        def progress(line: str) -> None:
            print("  " + line, file=sys.stderr, flush=True)
    body = os.urandom(body_size // 2).hex().encode()[:body_size]
    root = Path(tempfile.mkdtemp(prefix="reliable-bench-", dir=workdir))
    with contextlib.ExitStack() as servers:
        servers.callback(shutil.rmtree, root, ignore_errors=True)
        ns = servers.enter_context(NamesrvProcess())
        broker = servers.enter_context(BrokerProcess("ASYNC_FLUSH", str(root), ns.addr))
        redis = RedisServer()
        servers.callback(redis.close)
        pg = PostgresServer(durable=True)
        servers.callback(pg.close)
        others = OtherCpu({"broker": broker.proc.pid, "namesrv": ns.proc.pid,
                           "postgresql": pg.proc.pid, "redis": redis.proc.pid})
        results: dict = {"messages": n, "body": body_size, "queues": QUEUES, "consume": [], "outbox": []}
        for i, (kind, db, with_redis) in enumerate(CELLS):
            url = None
            if db == "postgresql":
                url = pg.new_database("bench")
            elif db == "sqlite":
                url = f"sqlite:///{root / f'cell{i}.db'}"
            tag = f"{i}_{kind}_{db}_{'redis' if with_redis else 'nored'}"
            r = asyncio.run(_consume_cell(ns.addr, broker.addr, kind, url, redis.url if with_redis else None, n, body,
                                          tag, batch_size, others))
            r.update(consumer=kind, store=db or "-", redis=with_redis if kind != "plain" else None)
            results["consume"].append(r)
            progress(f"{kind:<10} {db or '-':<10} redis={'yes' if with_redis else 'no ':<3} {r['msgs_per_s']:>8} msgs/s")
        for db in ("postgresql", "sqlite"):
            url = pg.new_database("outbox") if db == "postgresql" else f"sqlite:///{root / 'outbox.db'}"
            r = asyncio.run(_outbox_cell(ns.addr, broker.addr, url, outbox_n, body, f"ob_{db}"))
            r["store"] = db
            results["outbox"].append(r)
        plain = results["consume"][0]["msgs_per_s"]
        for r in results["consume"]:
            r["vs_plain"] = round(r["msgs_per_s"] / plain, 3)
        return results


def _thousands(x) -> str:
    return "-" if x is None else f"{x:,}"


def markdown(results: dict) -> str:
    lines = [(f"Consume: {results['messages']:,} messages of {results['body']} B, {results['queues']} queues, "
              "one transaction per batch (durable PostgreSQL, SQLite WAL synchronous=FULL)"), "",
             "| consumer | store | Redis | msgs/s | seconds | vs plain | CPU-us/msg: consumer, broker, PostgreSQL, "
             "Redis, all | CPU ceiling msgs/s |", "|---|---|---|---:|---:|---:|---|---:|"]
    for r in results["consume"]:
        redis = "-" if r["redis"] is None else ("yes" if r["redis"] else "no")
        o = r.get("other_cpu_us_per_msg") or {}
        cpu = (f"{r['cpu_us_per_msg']}, {o.get('broker', 0) + o.get('namesrv', 0):.1f}, {o.get('postgresql', 0)}, "
               f"{o.get('redis', 0)}, **{r.get('total_cpu_us_per_msg', '-')}**")
        lines.append(f"| {r['consumer']} | {r['store']} | {redis} | {r['msgs_per_s']:,} | {r['seconds']:.2f} | "
                     f"{r['vs_plain']:.3f} | {cpu} | {_thousands(r.get('cpu_ceiling_msgs_per_s'))} |")
    lines += ["", "| OutboxProducer.send | in flight | msgs/s | seconds |", "|---|---:|---:|---:|"]
    for r in results["outbox"]:
        lines.append(f"| {r['store']} | {r['in_flight']} | {r['msgs_per_s']:,} | {r['seconds']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20_000, help="messages per consume cell (default 20000)")
    ap.add_argument("--body", type=int, default=1024, help="body size in bytes (default 1024)")
    ap.add_argument("--outbox-n", type=int, default=2_000, help="messages of the outbox send cells (default 2000)")
    ap.add_argument("--batch", type=int, default=DEFAULT_BATCH_SIZE,
                    help=f"the idempotent consumer's batch_size (default {DEFAULT_BATCH_SIZE})")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    results = run(args.n, args.body, args.outbox_n, args.batch)
    print(markdown(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
