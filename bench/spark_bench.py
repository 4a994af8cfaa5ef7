"""Spark figures of broker.spark (issue 8): a topic of 1M messages with 1 KiB bodies read by Spark
(local[2]) in batch and as an availableNow stream, beside the broker's raw pull throughput over
the same topic in the same run, and Spark writing rows to a topic.

    python -m bench.spark_bench [--messages N] [--write-rows N] [--workdir DIR]

A real `broker namesrv` and `broker serve` (ASYNC_FLUSH, 256 MiB commit-log segments) run as
processes on loopback (bench.processes' NamesrvProcess and BrokerProcess). The topic is
bench.driver's raw TOPIC with 4 queues, filled through the project's Producer (send_batch, 8
batches of 128 in flight). Then, each clocked on its own:

- raw pull: bench.driver.bench_pull, the remoting protocol alone, 4 queues at once, no decoding;
- Spark batch read: spark.read.format("rocketmq") → noop sink (every column materialised in the
  JVM); run twice after a warm-up query (the first query of a session starts the Python workers);
- Spark streaming read: readStream ... trigger(availableNow=True) → noop sink, one run from
  earliest, including the query's start (~1.5 s);
- Spark write: spark.range(N) as 1 KiB bodies → df.write.format("rocketmq"), after a warm-up
  write of 10k rows.

The JVM runs with C2 (the tests' -XX:TieredStopAtLevel=1 starts faster but halves the JVM's
Arrow-to-row conversion speed).

MB/s counts message bodies (1 KiB each); the broker's stored records are ~15 % bigger.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time

from bench.driver import TOPIC, bench_pull
from bench.processes import BrokerProcess, NamesrvProcess

BODY = 1024
QUEUES = 4
WRITE_TOPIC = "SparkWriteBench"
os.environ.setdefault("BROKER_LOG_LEVEL", "WARNING")


async def _create_topics(namesrv: str, broker_addr: str, topics: list[str], timeout: float = 30.0) -> None:
    from broker.client.admin import Admin
    async with Admin(namesrv) as admin:
        for t in topics:
            await admin.create_topic(t, QUEUES, broker_addr=broker_addr)
        deadline = time.monotonic() + timeout
        while not set(topics) <= set(await admin.topic_list()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topics} not registered with {namesrv} within {timeout:g} s")
            await asyncio.sleep(0.05)


async def _fill(namesrv: str, n: int, per_batch: int = 128, in_flight: int = 8) -> float:
    """n messages of BODY bytes into TOPIC; returns the seconds it took."""
    from broker.client.message import Message
    from broker.client.producer import Producer
    body = os.urandom(BODY)
    left = n
    t0 = time.perf_counter()
    async with Producer("spark_bench_fill", namesrv) as p:
        async def worker():
            nonlocal left
            while left > 0:
                k = min(per_batch, left)
                left -= k
                r = await p.send_batch([Message(TOPIC, body, tags=f"t{i % 8}", keys=f"k{i}") for i in range(k)])
                if r.status != "SEND_OK":
                    raise RuntimeError(f"fill: send answered {r.status}")
        await asyncio.gather(*(worker() for _ in range(in_flight)))
    return time.perf_counter() - t0


async def _total(namesrv: str, topic: str) -> int:
    from broker.client.pull_consumer import PullConsumer
    async with PullConsumer("spark_bench_count", namesrv) as c:
        return sum([await c.max_offset(mq) for mq in await c.fetch_queues(topic)])


def _figure(name: str, rows: int, seconds: float) -> dict:
    return {"name": name, "rows": rows, "seconds": seconds, "rows_per_s": rows / seconds,
            "mb_per_s": rows * BODY / seconds / 1e6}


def run(messages: int = 1_000_000, write_rows: int = 200_000, workdir: str | None = None,
        progress=print) -> dict:
    """Everything above; returns {"fill": ..., "raw_pull": ..., "spark_batch_read": ..., ...} of
    _figure dicts (plus "spark_batch_read_first" and "session_start_s")."""
    workdir = workdir or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "work")
    os.makedirs(workdir, exist_ok=True)
    out: dict = {}
    with NamesrvProcess() as ns, BrokerProcess("ASYNC_FLUSH", workdir, ns.addr) as b:
        asyncio.run(_create_topics(ns.addr, b.addr, [TOPIC, WRITE_TOPIC]))
        dt = asyncio.run(_fill(ns.addr, messages))
        out["fill"] = _figure("fill (Producer.send_batch of 128, 8 in flight)", messages, dt)
        progress(f"filled {messages:,} messages in {dt:.1f} s")

        raw = asyncio.run(bench_pull(b.port, 600))
        out["raw_pull"] = _figure("broker raw pull (remoting, 4 queues at once)", raw.msgs, raw.seconds)
        out["raw_pull"]["mb_per_s_records"] = raw.mb_per_s
        progress(f"raw pull: {raw.msgs_per_s:,.0f} msgs/s")

        ck = tempfile.mkdtemp(prefix="spark-bench-", dir=workdir)
        try:
            from broker.spark.local import local_session
            t0 = time.perf_counter()
            # C2 and the parallel collector: the tests' C1-only JVM starts faster but converts
            # Arrow to rows at half the speed
            spark = local_session("broker-spark-bench", **{"spark.local.dir": ck, "spark.driver.memory": "2g",
                                                           "spark.driver.extraJavaOptions": "-XX:+UseParallelGC"})
            out["session_start_s"] = time.perf_counter() - t0

            def source(stream: bool = False, **opts):
                r = (spark.readStream if stream else spark.read).format("rocketmq")
                r = r.option("namesrvAddr", ns.addr).option("topic", TOPIC)
                for k, v in opts.items():
                    r = r.option(k, v)
                return r.load()

            try:
                # warm-up: Python workers, the JIT, the data source's first planning
                warm = json.dumps({TOPIC: {f"broker-a:{q}": 2000 for q in range(QUEUES)}})
                source(endingOffsets=warm).write.format("noop").mode("overwrite").save()
                for i in range(2):
                    t0 = time.perf_counter()
                    source().write.format("noop").mode("overwrite").save()
                    f = _figure("Spark batch read → noop", messages, time.perf_counter() - t0)
                    out["spark_batch_read_first" if i == 0 else "spark_batch_read"] = f
                    progress(f"spark batch read: {f['rows_per_s']:,.0f} rows/s")
                if out["spark_batch_read_first"]["seconds"] < out["spark_batch_read"]["seconds"]:
                    out["spark_batch_read"] = out["spark_batch_read_first"]  # report the best of two

                t0 = time.perf_counter()
                q = (source(stream=True, startingOffsets="earliest").writeStream.format("noop")
                     .option("checkpointLocation", os.path.join(ck, "stream")).trigger(availableNow=True).start())
                q.awaitTermination()
                if q.exception() is not None:
                    raise RuntimeError(f"streaming read failed: {q.exception()}")
                f = _figure("Spark streaming read, availableNow → noop", messages, time.perf_counter() - t0)
                out["spark_stream_read"] = f
                progress(f"spark streaming read: {f['rows_per_s']:,.0f} rows/s")

                def write(n: int) -> float:
                    rows = (spark.range(n).selectExpr(
                        "cast(substring(concat(cast(id as string), repeat('x', 1024)), 1, 1024) as binary) AS body",
                        "concat('t', cast(id % 8 as string)) AS tags"))
                    t0 = time.perf_counter()
                    (rows.write.format("rocketmq").option("namesrvAddr", ns.addr).option("topic", WRITE_TOPIC)
                     .mode("append").save())
                    return time.perf_counter() - t0

                warm_rows = 10_000
                write(warm_rows)  # the write path's first Python workers and imports
                f = _figure("Spark write (df.write.format rocketmq)", write_rows, write(write_rows))
                stored = asyncio.run(_total(ns.addr, WRITE_TOPIC))
                if stored != warm_rows + write_rows:
                    raise RuntimeError(f"Spark wrote {warm_rows + write_rows} rows but {WRITE_TOPIC} holds {stored}")
                out["spark_write"] = f
                progress(f"spark write: {f['rows_per_s']:,.0f} rows/s")
            finally:
                spark.stop()
        finally:
            shutil.rmtree(ck, ignore_errors=True)
    return out


def format_table(results: dict) -> str:
    lines = ["| path | rows | seconds | rows/s | MB/s (bodies) |", "|---|---:|---:|---:|---:|"]
    for key in ("fill", "raw_pull", "spark_batch_read_first", "spark_batch_read", "spark_stream_read", "spark_write"):
        f = results.get(key)
        if f:
            name = f["name"] + (" (first of two)" if key == "spark_batch_read_first" else
                                " (best of two)" if key == "spark_batch_read" else "")
            lines.append(f"| {name} | {f['rows']:,} | {f['seconds']:.2f} | {f['rows_per_s']:,.0f} | "
                         f"{f['mb_per_s']:,.0f} |")
    if "session_start_s" in results:
        lines.append(f"\nSparkSession start (local[2]): {results['session_start_s']:.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--write-rows", type=int, default=200_000)
    p.add_argument("--workdir", default=None)
    a = p.parse_args(argv)
    print(format_table(run(a.messages, a.write_rows, a.workdir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
