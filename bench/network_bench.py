"""Network figures of the broker daemon: a real `broker serve` process on loopback, driven over
the remoting protocol.

    python -m bench.network_bench [--seconds S] [--flush ASYNC_FLUSH|SYNC_FLUSH] [cell ...]

Raw cells (the broker alone), driven by build/loadgen (bench/loadgen.c, C, one thread, epoll;
its own CPU per message is reported beside the broker's): `send` (SEND_MESSAGE_V2, 1 KiB, 64
requests in flight), `send256` (the same, 256 in flight), `batch` (SEND_BATCH_MESSAGE, 32 x 1 KiB
per request, 8 in flight), `pull` (PULL_MESSAGE of what the cells before sent, 256 messages per
request, 4 in flight), all on one connection. Each reports the CPU-µs per message of every
process of the broker (the broker and its flush, reput, ha and clean services; bench.proc_cpu)
over loadgen's measured window.

Client cells (the project's client, broker.client, end to end): `client_send` (Producer.send,
64 sends in flight), `client_batch` (Producer.send_batch of 32 x 1 KiB, 8 in flight),
`client_pull` (PullConsumer.pull of what the client cells sent, 256 per pull, 4 queues at once,
messages decoded by the client). They need a name server: one is started as a `broker namesrv`
subprocess and the broker registers with it; the client cells' topic is created on the broker
(UPDATE_AND_CREATE_TOPIC, 4 queues) and the cells wait until the name server routes it. Their
driver runs in this process.

The Python raw drivers (bench_send, bench_batch, bench_pull: the project's remoting connection,
pipelined) remain for the HA and Spark benchmarks.

The broker (and the name server, idle during the clock) run in their own processes, so on a
2-core machine the driver and the broker each have a core. Latency is per request (per
`send`/`send_batch`/`pull` call for the client cells), request to answer. Broker CPU is counted
from the end of each cell's warm-up to the end of its clock.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from bench import loadgen
from bench.proc_cpu import ProcessTree, cpu_us_per_msg
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.remoting.message_batch import encode_batch_body

BODY = 1024
TOPIC = "BenchTopic"
CLIENT_TOPIC = "BenchClientTopic"
CLIENT_QUEUES = 4


@dataclass
class NetResult:
    name: str
    msgs: int
    seconds: float
    bytes: int
    lat_ns: list[int] = field(default_factory=list)
    broker_cpu_s: float = 0.0
    pcts: dict | None = None          # percentiles already computed (loadgen's), instead of lat_ns
    extra: dict = field(default_factory=dict)   # driver, CPU-µs/msg per process, loadgen's own CPU

    @property
    def msgs_per_s(self) -> float:
        return self.msgs / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6

    def pct_us(self, q: float) -> float:
        if self.pcts is not None:
            return self.pcts[q]
        if not self.lat_ns:
            return float("nan")
        s = sorted(self.lat_ns)
        return s[min(len(s) - 1, int(q * len(s)))] / 1000

    def as_dict(self) -> dict:
        return {"msgs": self.msgs, "seconds": self.seconds, "msgs_per_s": self.msgs_per_s,
                "mb_per_s": self.mb_per_s, "p50_us": self.pct_us(0.5), "p99_us": self.pct_us(0.99),
                "broker_cpu_s": self.broker_cpu_s,
                "broker_cpu_us_per_msg": 1e6 * self.broker_cpu_s / self.msgs if self.msgs else float("nan"),
                **self.extra}

    def line(self) -> str:
        by_process = self.extra.get("cpu_us_per_msg_by_process")
        cpu = (f"broker CPU-us/msg {loadgen.cpu_line(by_process)}" if by_process
               else f"broker CPU {1e6 * self.broker_cpu_s / max(1, self.msgs):.2f} us/msg")
        if "loadgen_cpu_us_per_msg" in self.extra:
            cpu += f"; loadgen {self.extra['loadgen_cpu_us_per_msg']:.2f} CPU-us/msg"
        if self.extra.get("errors"):
            cpu += f"; {self.extra['errors']} errors {self.extra['error_codes']}"
        if "front_cpu_us_per_msg" in self.extra:
            cpu += f"; gRPC front {self.extra['front_cpu_us_per_msg']:.1f} CPU-us/msg"
        if "floor_calls_per_s" in self.extra:
            cpu += (f" (grpcio floor, a bare grpc.aio SendMessage server, same driver: "
                    f"{self.extra['floor_calls_per_s']:,.0f} calls/s at {self.extra['floor_cpu_us_per_call']:.1f} "
                    f"CPU-us/call)")
        for key, what in (("vs_client_send", "client send"), ("vs_loadgen_send", "loadgen send"),
                          ("vs_client_pull", "client pull")):
            if key in self.extra:
                cpu += f"; {100 * self.extra[key]:.1f} % of the remoting {what}"
        return (f"{self.name}: {self.msgs_per_s:,.0f} msgs/s ({self.mb_per_s:,.1f} MB/s), p50 {self.pct_us(0.5):,.0f} us"
                f" p99 {self.pct_us(0.99):,.0f} us; {cpu}")


def _wait_for_line(proc: subprocess.Popen, marker: str, what: str) -> None:
    for line in proc.stdout:
        if marker in line:
            break
    else:
        raise RuntimeError(f"{what} did not start (exit {proc.wait()})")


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class NamesrvProcess:
    """`broker namesrv` on a free loopback port; stopped (SIGTERM, then waited for) on exit."""

    def __init__(self):
        self.port = _free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "NamesrvProcess":
        env = dict(os.environ, BROKER_LOG_LEVEL="WARNING")
        self.proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "namesrv", "--listen", self.addr],
                                     stdout=subprocess.PIPE, env=env, text=True)
        try:
            _wait_for_line(self.proc, "listening on", "name server")
        except BaseException:
            _stop(self.proc)
            raise
        return self

    def __exit__(self, *exc) -> None:
        _stop(self.proc)


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CliProcess:
    """A `python -m broker.cli ...` child of a bench cell: started, waited for until it prints its
    ready line, its CPU read, stopped (SIGTERM, then waited for)."""

    proc: subprocess.Popen | None = None
    module = "broker.cli"

    def _start(self, args: list[str], ready: str, what: str) -> None:
        env = dict(os.environ, BROKER_LOG_LEVEL="WARNING")
        self.proc = subprocess.Popen([sys.executable, "-m", self.module, *args], stdout=subprocess.PIPE, env=env,
                                     text=True)
        try:
            _wait_for_line(self.proc, ready, what)
        except BaseException:
            self.__exit__()
            raise

    def cpu_seconds(self) -> float:
        import psutil
        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def __exit__(self, *exc) -> None:
        _stop(self.proc)


class BrokerProcess(CliProcess):
    """`broker serve` in a fresh store directory; stopped (SIGTERM, then waited for) on exit."""

    def __init__(self, flush: str, workdir: str, namesrv_addr: str = ""):
        self.port = _free_port()
        self.root = tempfile.mkdtemp(prefix=f"net-{flush}-", dir=workdir)
        self.conf = os.path.join(self.root, "broker.conf")
        with open(self.conf, "w") as f:
            f.write(f"brokerIP1=127.0.0.1\nlistenPort={self.port}\nstorePathRootDir={self.root}/store\n"
                    f"flushDiskType={flush}\nmappedFileSizeCommitLog={256 << 20}\nnamesrvAddr={namesrv_addr}\n")
        self.proc: subprocess.Popen | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "BrokerProcess":
        self._start(["serve", "-c", self.conf, "--status-interval", "3600"], "listening on", "broker")
        return self

    def __exit__(self, *exc) -> None:
        super().__exit__()
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


def _nothing() -> None:
    pass


async def bench_send(port: int, seconds: float, in_flight: int = 64, on_start=_nothing) -> NetResult:
    conn = await connect("127.0.0.1", port)
    body = os.urandom(BODY)
    exts = [_send_ext(q) for q in range(4)]

    def req(i: int):
        return conn.request(RemotingCommand.request(codes.SEND_MESSAGE_V2, exts[i & 3], body), 30)

    await _closed_loop(req, in_flight, min(1.0, seconds / 4), 1)  # warm-up: topic creation, segment
    on_start()
    n, lat, dt = await _closed_loop(req, in_flight, seconds, 1)
    conn.close()
    return NetResult(f"send 1 KiB x{in_flight} in flight", n, dt, n * BODY, lat)


async def bench_batch(port: int, seconds: float, in_flight: int = 8, per_batch: int = 32,
                      on_start=_nothing) -> NetResult:
    conn = await connect("127.0.0.1", port)
    body = encode_batch_body([(os.urandom(BODY), b"TAGS\x01bench\x02", 0) for _ in range(per_batch)])
    exts = [dict(_send_ext(q), m=True) for q in range(4)]

    def req(i: int):
        return conn.request(RemotingCommand.request(codes.SEND_BATCH_MESSAGE, exts[i & 3], body), 30)

    await _closed_loop(req, in_flight, min(1.0, seconds / 4), per_batch)
    on_start()
    n, lat, dt = await _closed_loop(req, in_flight, seconds, per_batch)
    conn.close()
    return NetResult(f"batch 320 of {per_batch} x 1 KiB x{in_flight} in flight", n, dt, n * BODY, lat)


async def bench_pull(port: int, seconds: float, per_pull: int = 256, on_start=_nothing) -> NetResult:
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

    on_start()
    t0 = time.perf_counter()
    await asyncio.gather(*(one_queue(q) for q in range(4)))
    dt = time.perf_counter() - t0
    conn.close()
    return NetResult(f"pull {per_pull}/request, 4 queues", n, dt, nbytes, lat)


# -- the project's client (broker.client) ---------------------------------------------------------

async def _wait_for_route(namesrv_addr: str, broker_addr: str, timeout: float = 30.0) -> None:
    """Create CLIENT_TOPIC on the broker (UPDATE_AND_CREATE_TOPIC) and wait until the name server
    routes it with its own queue data (the broker re-registers when a topic is created)."""
    from broker.client.admin import Admin
    from broker.client.errors import ClientError
    admin = Admin(namesrv_addr)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout
        while True:  # the broker may not have registered yet: create_topic needs only its address
            try:
                await admin.create_topic(CLIENT_TOPIC, CLIENT_QUEUES, broker_addr=broker_addr)
                break
            except ClientError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        while True:
            try:
                if CLIENT_TOPIC in await admin.topic_list():
                    route = await admin.route(CLIENT_TOPIC)
                    if len(route.write_queues(CLIENT_TOPIC)) == CLIENT_QUEUES:
                        return
            except ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the name server at {namesrv_addr} did not route {CLIENT_TOPIC} within {timeout:g} s")
            await asyncio.sleep(0.1)
    finally:
        await admin.shutdown()


async def _client_loop(call, in_flight: int, seconds: float, per_call: int) -> tuple[int, list[int], float]:
    """`in_flight` workers each await one client call (which raises on failure), repeat, for `seconds`."""
    lat: list[int] = []
    count = 0
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal count
        while time.perf_counter() < stop:
            t0 = time.perf_counter_ns()
            r = await call()
            lat.append(time.perf_counter_ns() - t0)
            if r.status != "SEND_OK":
                raise RuntimeError(f"send answered {r.status}")
            count += per_call

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return count, lat, time.perf_counter() - t0


async def bench_client_send(namesrv_addr: str, seconds: float, in_flight: int = 64, on_start=_nothing) -> NetResult:
    from broker.client.message import Message
    from broker.client.producer import Producer
    body = os.urandom(BODY)
    producer = Producer("bench_client", namesrv_addr)
    await producer.start()
    try:
        def call():
            return producer.send(Message(CLIENT_TOPIC, body, tags="bench", keys="k"))

        await _client_loop(call, in_flight, min(1.0, seconds / 4), 1)  # warm-up: route, connection, segment
        on_start()
        n, lat, dt = await _client_loop(call, in_flight, seconds, 1)
    finally:
        await producer.shutdown()
    return NetResult(f"client send 1 KiB x{in_flight} in flight", n, dt, n * BODY, lat)


async def bench_client_batch(namesrv_addr: str, seconds: float, in_flight: int = 8, per_batch: int = 32,
                             on_start=_nothing) -> NetResult:
    from broker.client.message import Message
    from broker.client.producer import Producer
    bodies = [os.urandom(BODY) for _ in range(per_batch)]
    producer = Producer("bench_client", namesrv_addr)
    await producer.start()
    try:
        def call():
            return producer.send_batch([Message(CLIENT_TOPIC, b, tags="bench") for b in bodies])

        await _client_loop(call, in_flight, min(1.0, seconds / 4), per_batch)
        on_start()
        n, lat, dt = await _client_loop(call, in_flight, seconds, per_batch)
    finally:
        await producer.shutdown()
    return NetResult(f"client batch of {per_batch} x 1 KiB x{in_flight} in flight", n, dt, n * BODY, lat)


async def fill_client_topic(consumer, queues, namesrv_addr: str, seconds: float) -> None:
    """An empty CLIENT_TOPIC filled by the client's batches for `seconds` (unclocked), so that a
    consume cell run alone has something to read."""
    if sum([await consumer.max_offset(mq) for mq in queues]) == 0:
        await bench_client_batch(namesrv_addr, seconds)


async def bench_client_pull(namesrv_addr: str, seconds: float, per_pull: int = 256, on_start=_nothing) -> NetResult:
    """PullConsumer.pull of every queue of CLIENT_TOPIC from offset 0 until caught up (or
    `seconds`), 4 queues at once; an empty topic is first filled by the client's batches (unclocked)."""
    from broker.client.api import FOUND
    from broker.client.pull_consumer import PullConsumer
    consumer = PullConsumer("bench_client_pull", namesrv_addr)
    await consumer.start()
    try:
        queues = await consumer.fetch_queues(CLIENT_TOPIC)
        await fill_client_topic(consumer, queues, namesrv_addr, seconds)
        n = 0
        nbytes = 0
        lat: list[int] = []
        deadline = time.perf_counter() + seconds

        async def one_queue(mq) -> None:
            nonlocal n, nbytes
            offset = 0
            while time.perf_counter() < deadline:
                t0 = time.perf_counter_ns()
                r = await consumer.pull(mq, offset, per_pull)
                lat.append(time.perf_counter_ns() - t0)
                if r.status != FOUND:
                    return
                n += len(r.messages)
                nbytes += sum(len(m.body) for m in r.messages)
                offset = r.next_begin_offset

        on_start()
        t0 = time.perf_counter()
        await asyncio.gather(*(one_queue(mq) for mq in queues))
        dt = time.perf_counter() - t0
    finally:
        await consumer.shutdown()
    # MB/s of message bodies as the caller gets them (the raw `pull` counts the stored records, ~10 % more)
    return NetResult(f"client pull {per_pull}/pull, {len(queues)} queues (MB/s of bodies)", n, dt, nbytes, lat)


# -- build/loadgen (bench/loadgen.c) ----------------------------------------------------------------

# cell -> (loadgen mode, its options, label); labels keep the rows' names (bench/__main__ looks
# the targets up by "<flush> send", "<flush> batch", "<flush> pull")
LOADGEN_CELLS = {
    "send": ("send", {"in_flight": 64}, "send 1 KiB x64 in flight"),
    "send256": ("send", {"in_flight": 256}, "send 1 KiB x256 in flight"),
    "batch": ("batch", {"batch": 32, "in_flight": 8}, "batch 320 of 32 x 1 KiB x8 in flight"),
    "pull": ("pull", {"max_msgs": 256, "in_flight": 4}, "pull 256/request, 4 in flight, MB/s of stored records"),
}


def loadgen_cell(cell: str, broker: "BrokerProcess", seconds: float) -> NetResult:
    """One raw cell through build/loadgen against `broker`, with the CPU per message of each of
    the broker's processes over loadgen's window. Replies with a non-zero code are reported
    (errors, error_codes), not raised: a SYNC_FLUSH FLUSH_DISK_TIMEOUT is a figure too."""
    mode, opts, label = LOADGEN_CELLS[cell]
    if mode != "pull":  # pull reads what is there, once: nothing to warm
        opts = dict(opts, warmup=min(1.0, seconds / 4))
    r = loadgen.measure(mode, broker.addr, broker.proc.pid, topic=TOPIC, queues=4, body=BODY, seconds=seconds, **opts)
    per = r["broker_cpu_us_per_msg"]
    return NetResult(
        f"{label} (build/loadgen)", r["msgs"], r["seconds"], r["record_bytes"] if mode == "pull" else r["body_bytes"],
        broker_cpu_s=per.get("broker", float("nan")) * r["msgs"] / 1e6,
        pcts={0.5: r["p50_us"], 0.99: r["p99_us"], 0.999: r["p999_us"]},
        extra={"driver": r["driver"], "p999_us": r["p999_us"], "errors": r["errors"], "error_codes": r["error_codes"],
               "loadgen_cpu_us_per_msg": r["cpu_us_per_msg"], "loadgen_cpu_s": r["cpu_user_s"] + r["cpu_sys_s"],
               "cpu_us_per_msg_by_process": per})


async def _grpc_send(namesrv_addr: str, seconds: float, on_start=_nothing) -> NetResult:
    from bench.grpc_bench import bench_grpc_send  # grpc imported only when the cell runs
    return await bench_grpc_send(namesrv_addr, seconds, on_start=on_start)


async def _grpc_receive(namesrv_addr: str, seconds: float, on_start=_nothing) -> NetResult:
    from bench.grpc_bench import bench_grpc_receive  # grpc imported only when the cell runs
    return await bench_grpc_receive(namesrv_addr, seconds, on_start=on_start)


async def _grpc_send_tls(namesrv_addr: str, seconds: float, on_start=_nothing) -> NetResult:
    from bench.grpc_bench import bench_grpc_send
    return await bench_grpc_send(namesrv_addr, seconds, on_start=on_start, tls=True)


async def _grpc_send_coalesce(namesrv_addr: str, seconds: float, on_start=_nothing) -> NetResult:
    from bench.grpc_bench import bench_grpc_send
    return await bench_grpc_send(namesrv_addr, seconds, on_start=on_start, coalesce_us=2000)


RAW_CELLS = LOADGEN_CELLS
CLIENT_CELLS = {"client_send": bench_client_send, "client_batch": bench_client_batch, "client_pull": bench_client_pull,
                "grpc_send": _grpc_send, "grpc_receive": _grpc_receive, "grpc_send_tls": _grpc_send_tls,
                "grpc_send_coalesce": _grpc_send_coalesce}
DEFAULT_CELLS = [*RAW_CELLS, *CLIENT_CELLS]


async def run_flush_mode(flush: str, seconds: float, cells: list[str], workdir: str, progress=print) -> list[NetResult]:
    unknown = [c for c in cells if c not in RAW_CELLS and c not in CLIENT_CELLS]
    if unknown:
        raise ValueError(f"unknown cell(s) {unknown}; known: {DEFAULT_CELLS}")
    out = []
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(NamesrvProcess()) if any(c in CLIENT_CELLS for c in cells) else None
        b = stack.enter_context(BrokerProcess(flush, workdir, ns.addr if ns else ""))
        if ns is not None:
            await _wait_for_route(ns.addr, b.addr)
        tree = ProcessTree(b.proc.pid)
        for cell in cells:
            if cell in RAW_CELLS:  # blocking (a subprocess), off the loop
                r = await asyncio.get_running_loop().run_in_executor(None, loadgen_cell, cell, b, seconds)
            else:
                c0 = None
                snap0: dict = {}

                def on_start() -> None:
                    nonlocal c0
                    c0 = b.cpu_seconds()
                    snap0.update(tree.snapshot())
                r = await CLIENT_CELLS[cell](ns.addr, seconds, on_start=on_start)
                r.broker_cpu_s = b.cpu_seconds() - c0
                r.extra = {"driver": "the project's client (broker.client), in the bench process",
                           "cpu_us_per_msg_by_process": cpu_us_per_msg(snap0, tree.snapshot(), r.msgs), **r.extra}
                # the front's cells beside the remoting path's on the same broker (goal for sends: half)
                bases = {"grpc_send": (("vs_client_send", "client send 1 KiB x64"),
                                       ("vs_loadgen_send", "send 1 KiB x64 in flight")),
                         "grpc_receive": (("vs_client_pull", "client pull"),)}
                for key, prefix in bases.get("grpc_send" if cell.startswith("grpc_send") else cell, ()):
                    base = next((x for x in out if x.name.startswith(f"{flush} {prefix}")), None)
                    if base is not None:
                        r.extra[key] = r.msgs_per_s / base.msgs_per_s
            r.name = f"{flush} {r.name}"
            progress(r.line())
            out.append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cells", nargs="*", default=DEFAULT_CELLS)
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
