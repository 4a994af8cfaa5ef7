"""Network figures of the broker daemon: a real `broker serve` process on loopback, driven over
the remoting protocol.

    python -m bench.network_bench [--seconds S] [--flush ASYNC_FLUSH|SYNC_FLUSH] [cell ...]

Cells: `send` (SEND_MESSAGE_V2, 1 KiB, 64 requests in flight), `batch` (SEND_BATCH_MESSAGE, 32 x
1 KiB per request, 8 in flight), `pull` (PULL_MESSAGE of what was sent, 256 messages per request,
4 queues pulled concurrently). The driver is the project's remoting connection (broker.remoting),
pipelined on one connection per cell; it runs in this process while the broker runs in its own,
so on a 2-core machine each has a core. Latency is per request, send to response.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.remoting.message_batch import encode_batch_body

BODY = 1024
TOPIC = "BenchTopic"


@dataclass
class NetResult:
    name: str
    msgs: int
    seconds: float
    bytes: int
    lat_ns: list[int] = field(default_factory=list)
    broker_cpu_s: float = 0.0

    @property
    def msgs_per_s(self) -> float:
        return self.msgs / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6

    def pct_us(self, q: float) -> float:
        if not self.lat_ns:
            return float("nan")
        s = sorted(self.lat_ns)
        return s[min(len(s) - 1, int(q * len(s)))] / 1000

    def as_dict(self) -> dict:
        return {"msgs": self.msgs, "seconds": self.seconds, "msgs_per_s": self.msgs_per_s,
                "mb_per_s": self.mb_per_s, "p50_us": self.pct_us(0.5), "p99_us": self.pct_us(0.99),
                "broker_cpu_s": self.broker_cpu_s,
                "broker_cpu_us_per_msg": 1e6 * self.broker_cpu_s / self.msgs if self.msgs else float("nan")}

    def line(self) -> str:
        return (f"{self.name}: {self.msgs_per_s:,.0f} msgs/s ({self.mb_per_s:,.1f} MB/s), p50 {self.pct_us(0.5):,.0f} us"
                f" p99 {self.pct_us(0.99):,.0f} us; broker CPU {1e6 * self.broker_cpu_s / max(1, self.msgs):.2f} "
                f"us/msg")


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    """`broker serve` in a fresh store directory; stopped (SIGTERM, then waited for) on exit."""

    def __init__(self, flush: str, workdir: str):
        self.port = _free_port()
        self.root = tempfile.mkdtemp(prefix=f"net-{flush}-", dir=workdir)
        self.conf = os.path.join(self.root, "broker.conf")
        with open(self.conf, "w") as f:
            f.write(f"brokerIP1=127.0.0.1\nlistenPort={self.port}\nstorePathRootDir={self.root}/store\n"
                    f"flushDiskType={flush}\nmappedFileSizeCommitLog={256 << 20}\nnamesrvAddr=\n")
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "BrokerProcess":
        env = dict(os.environ, BROKER_LOG_LEVEL="WARNING")
        self.proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "-c", self.conf,
                                      "--status-interval", "3600"], stdout=subprocess.PIPE, env=env, text=True)
        for line in self.proc.stdout:
            if "listening on" in line:
                break
        else:
            raise RuntimeError(f"broker did not start (exit {self.proc.wait()})")
        return self

    def cpu_seconds(self) -> float:
        import psutil
        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        import shutil
        shutil.rmtree(self.root, ignore_errors=True)


def _send_ext(queue_id: int) -> dict:
    return {"a": "bench", "b": TOPIC, "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": int(time.time() * 1000),
            "h": 0, "i": "TAGS\x01bench\x02KEYS\x01k\x02", "j": 0, "k": False}


async def _closed_loop(make_request, in_flight: int, seconds: float, per_request: int) -> tuple[int, list[int], float]:
    """`in_flight` workers each issue a request, await its answer, repeat, for `seconds`."""
    lat: list[int] = []
    count = 0
    stop = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        nonlocal count
        i = w
        while time.perf_counter() < stop:
            t0 = time.perf_counter_ns()
            r = await make_request(i)
            lat.append(time.perf_counter_ns() - t0)
            if r.code != codes.SUCCESS:
                raise RuntimeError(f"request failed: {r.code} {r.remark}")
            count += per_request
            i += in_flight

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(in_flight)))
    return count, lat, time.perf_counter() - t0


async def bench_send(port: int, seconds: float, in_flight: int = 64) -> NetResult:
    conn = await connect("127.0.0.1", port)
    body = os.urandom(BODY)
    exts = [_send_ext(q) for q in range(4)]

    def req(i: int):
        return conn.request(RemotingCommand.request(codes.SEND_MESSAGE_V2, exts[i & 3], body), 30)

    await _closed_loop(req, in_flight, min(1.0, seconds / 4), 1)  # warm-up: topic creation, segment
    n, lat, dt = await _closed_loop(req, in_flight, seconds, 1)
    conn.close()
    return NetResult(f"send 1 KiB x{in_flight} in flight", n, dt, n * BODY, lat)


async def bench_batch(port: int, seconds: float, in_flight: int = 8, per_batch: int = 32) -> NetResult:
    conn = await connect("127.0.0.1", port)
    body = encode_batch_body([(os.urandom(BODY), b"TAGS\x01bench\x02", 0) for _ in range(per_batch)])
    exts = [dict(_send_ext(q), m=True) for q in range(4)]

    def req(i: int):
        return conn.request(RemotingCommand.request(codes.SEND_BATCH_MESSAGE, exts[i & 3], body), 30)

    await _closed_loop(req, in_flight, min(1.0, seconds / 4), per_batch)
    n, lat, dt = await _closed_loop(req, in_flight, seconds, per_batch)
    conn.close()
    return NetResult(f"batch 320 of {per_batch} x 1 KiB x{in_flight} in flight", n, dt, n * BODY, lat)


async def bench_pull(port: int, seconds: float, per_pull: int = 256) -> NetResult:
    """Pull every queue of TOPIC from offset 0 until caught up (or `seconds`), 4 queues at once."""
    conn = await connect("127.0.0.1", port)
    n = 0
    nbytes = 0
    lat: list[int] = []
    deadline = time.perf_counter() + seconds

    async def one_queue(q: int) -> None:
        nonlocal n, nbytes
        offset = 0
        while time.perf_counter() < deadline:
            ext = {"consumerGroup": "bench", "topic": TOPIC, "queueId": q, "queueOffset": offset,
                   "maxMsgNums": per_pull, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0,
                   "subscription": "*", "subVersion": 0}
            t0 = time.perf_counter_ns()
            r = await conn.request(RemotingCommand.request(codes.PULL_MESSAGE, ext), 30)
            lat.append(time.perf_counter_ns() - t0)
            if r.code != codes.SUCCESS:
                return
            nxt = int(r.ext["nextBeginOffset"])
            n += nxt - offset
            nbytes += len(r.body)
            offset = nxt

    t0 = time.perf_counter()
    await asyncio.gather(*(one_queue(q) for q in range(4)))
    dt = time.perf_counter() - t0
    conn.close()
    return NetResult(f"pull {per_pull}/request, 4 queues", n, dt, nbytes, lat)


async def run_flush_mode(flush: str, seconds: float, cells: list[str], workdir: str, progress=print) -> list[NetResult]:
    out = []
    with BrokerProcess(flush, workdir) as b:
        for cell in cells:
            fn = {"send": bench_send, "batch": bench_batch, "pull": bench_pull}[cell]
            c0 = b.cpu_seconds()
            r = await fn(b.port, seconds)
            r.broker_cpu_s = b.cpu_seconds() - c0
            r.name = f"{flush} {r.name}"
            progress(r.line())
            out.append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cells", nargs="*", default=["send", "batch", "pull"])
    p.add_argument("--flush", default="ASYNC_FLUSH")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--workdir", default=os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench", "work"))
    a = p.parse_args(argv)
    os.makedirs(a.workdir, exist_ok=True)
    import uvloop
    uvloop.run(run_flush_mode(a.flush, a.seconds, a.cells, a.workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
