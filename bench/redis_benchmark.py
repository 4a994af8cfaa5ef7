"""The Redis figures the broker's targets are stated against, measured in the same run with
Redis's own load generator: `redis-benchmark -c 50 -P 16` (pipelined) and `-c 50 -P 1` (50
clients, one request in flight each: the shape of the broker's conns50 cell) of
`XADD bench * d <1 KiB>` against a fresh `redis-server --appendonly yes --appendfsync
everysec|always` on loopback.

    python -m bench.redis_benchmark [--seconds 2]     # both fsync modes, one JSON line each

redis-benchmark runs a request count, not a duration: short calibration runs (unclocked) give
the rate, and the measured run asks for `seconds` worth of requests. Figures: requests/s and
latency p50/p99 as redis-benchmark reports them (`--csv`), redis-server's CPU-µs per XADD over the
measured run (/proc), and redis-benchmark's own (its rusage), to show the driver was not the limit.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

CLIENTS = 50
PIPELINE = 16


def available(progress=print) -> str | None:
    """None when redis-server and redis-benchmark run here, else why not; installs the Debian
    packages (redis-server, redis-tools, which has redis-benchmark) when missing."""
    from bench import peers
    if all(peers._which(b) for b in ("redis-server", "redis-benchmark")):
        return None
    why = peers._apt_install(["redis-server", "redis-tools"], progress)
    if all(peers._which(b) for b in ("redis-server", "redis-benchmark")):
        return None
    return why or "redis-server or redis-benchmark not found after installing redis-server redis-tools"


def _run_benchmark(port: int, n: int, value: str, clients: int, pipeline: int) -> dict:
    """One redis-benchmark run: its CSV row, as floats."""
    from bench import peers
    cmd = [peers._which("redis-benchmark"), "-h", "127.0.0.1", "-p", str(port), "-c", str(clients),
           "-P", str(pipeline), "-n", str(n), "--csv", "XADD", "bench", "*", "d", value]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"redis-benchmark exited {proc.returncode}: {err.decode(errors='replace')[-500:]}")
    rows = list(csv.DictReader(io.StringIO(out.decode())))
    if not rows:
        raise RuntimeError(f"redis-benchmark printed no CSV row: {out.decode(errors='replace')[-500:]}")
    return {k: float(v) for k, v in rows[-1].items() if k != "test"}


def _children_cpu() -> float:
    """CPU of this process's reaped children: around one redis-benchmark run, that run's own
    (no other child is reaped meanwhile: the servers are still running)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def xadd(fsync: str, seconds: float, workdir: str, body: int = 1024, clients: int = CLIENTS,
         pipeline: int = PIPELINE) -> dict:
    """One cell: a fresh redis-server with `appendfsync fsync`, redis-benchmark XADD."""
    from bench import peers
    from bench.proc_cpu import cpu_seconds
    root = tempfile.mkdtemp(prefix=f"redis-bench-{fsync}-", dir=workdir)
    server = None
    try:
        port = peers._free_port()
        server = peers._redis_server(port, root, fsync)
        value = os.urandom(body // 2 + 1).hex()[:body]
        calib = max(2000, clients * pipeline * 20)
        # unclocked: the rate (a first short run, then half a second of it, as the first one is
        # mostly connection set-up), and the AOF and the stream warm
        row = _run_benchmark(port, calib, value, clients, pipeline)
        row = _run_benchmark(port, int(min(max(row["rps"] / 2, calib), 10_000_000)), value, clients, pipeline)
        n = int(min(max(row["rps"] * seconds, calib), 20_000_000))
        c0, d0, t0 = cpu_seconds(server.pid), _children_cpu(), time.perf_counter()
        row = _run_benchmark(port, n, value, clients, pipeline)
        elapsed = time.perf_counter() - t0
        c1, d1 = cpu_seconds(server.pid), _children_cpu()
        version = peers._version(peers._which("redis-server"))
    finally:
        if server is not None:
            peers._stop(server)
        shutil.rmtree(root, ignore_errors=True)
    return {"peer": "redis", "fsync": fsync, "body": body, "clients": clients, "pipeline": pipeline, "msgs": n,
            "seconds": n / row["rps"], "msgs_per_s": row["rps"], "mb_per_s": row["rps"] * body / 1e6,
            "p50_us": row["p50_latency_ms"] * 1000, "p99_us": row["p99_latency_ms"] * 1000,
            "avg_us": row["avg_latency_ms"] * 1000, "wall_s": elapsed,
            "server_cpu_us_per_msg": (c1 - c0) * 1e6 / n, "driver_cpu_us_per_msg": (d1 - d0) * 1e6 / n,
            "driver": f"redis-benchmark -c {clients} -P {pipeline} -n {n} --csv XADD bench * d <{body} B>; "
                      f"{version} --appendonly yes --appendfsync {fsync} --save ''"}


def cell_name(fsync: str, body: int = 1024, pipeline: int = PIPELINE) -> str:
    return f"Redis XADD {body // 1024} KiB appendfsync {fsync} (redis-benchmark -c {CLIENTS} -P {pipeline})"


def run_both(seconds: float, workdir: str, progress=print) -> dict:
    """{cell name: figures} for appendfsync everysec and always; {} (and a line saying why) when
    Redis cannot run here."""
    why = available(progress)
    if why:
        progress(f"redis-benchmark cells skipped: {why}")
        return {}
    out = {}
    for fsync, pipeline in (("everysec", PIPELINE), ("always", PIPELINE), ("everysec", 1), ("always", 1)):
        r = xadd(fsync, seconds, workdir, pipeline=pipeline)
        name = cell_name(fsync, pipeline=pipeline)
        out[name] = r
        progress(f"{name}: {r['msgs_per_s']:,.0f} msgs/s, p50 {r['p50_us']:,.0f} us p99 "
                 f"{r['p99_us']:,.0f} us; redis-server {r['server_cpu_us_per_msg']:.1f} CPU-us/msg, "
                 f"redis-benchmark {r['driver_cpu_us_per_msg']:.1f} CPU-us/msg")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.redis_benchmark", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    try:
        for r in run_both(a.seconds, workdir, progress=lambda m: print(m, file=sys.stderr)).values():
            print(json.dumps(r))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
