"""The gRPC front's cells: `broker proxy` (broker.proxy, the front for RocketMQ 5.x clients) in its
own process beside the network section's name server and broker, driven by a grpc.aio client of
this project (the v2 stubs of broker.proxy.protocol, one HTTP/2 channel), beside the remoting cells
of the same broker:
- grpc_send: SendMessage of one 1 KiB message per call, 64 calls in flight. Then the same driver
  runs as long against bench/grpc_floor.py, a bare grpc.aio server with the front's channel
  arguments answering SendMessage at once: grpcio's own floor on this machine in this run, printed
  beside the front's figures (the front cannot be cheaper per message than that floor);
- grpc_send_local, grpc_receive_local: the same drivers against the broker's own front (local
  mode: grpcServerPort in the bench broker's broker.conf, the front in the broker's process); the
  front's CPU is then the broker process's (front and broker together);
- grpc_receive_h2_local: the same receive and ack loop driven by build/grpc_receive
  (bench/grpc_receive.c, libnghttp2's client in C, ~1 CPU-us a message) against the broker's own
  front, 32 loops on one connection: the cell `make bench` reads against the remoting pull (25 %).
  32 loops of 32 hold 1,024 messages in flight, as the pull cell's 4 pulls of 256 do; at 8 loops
  (its figure until 2026-11-30) the broker's loop idled ~40 % waiting for the next receive, so
  the cell measured the loops' latency more than the front's capacity;
- grpc_receive: ReceiveMessage of up to 32 messages (pop, 30 s invisible) then one AckMessage of
  the batch's receipt handles, 4 such loops at once, from the start of the client cells' topic
  until caught up (a receive that finds nothing) or the clock ends; a fresh consumer group each
  run. An empty topic is first filled by the client's batches (unclocked), as client_pull does.
  Read beside client_pull (the remoting consume cell: pulls of the same stored messages), though
  pop does more per message (a checkpoint per receive, an ack record per message in the revive log).

The driver is our own rather than the official 5.x Python client: that client sends through a
thread pool with one blocking future per message (and its SimpleConsumer blocks a thread per
receive and per ack), and would measure itself more than the front.
The driver runs on asyncio's own loop in a thread of the bench process (grpc.aio does not run on
uvloop, which runs the rest of the section). The front's CPU per message is reported beside the
broker's processes'.
"""
from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import time

from bench.driver import BODY, CLIENT_TOPIC, NetResult, fill_client_topic, nothing
from bench.processes import CliProcess, free_port

BROKER_NAME = "broker-a"  # BrokerProcess leaves brokerName at the broker's default


class FrontProcess(CliProcess):
    """`broker proxy` on a free loopback port, finding the broker through `namesrv_addr`."""

    def __init__(self, namesrv_addr: str, workdir: str, tls: bool = False, extra_conf: str = ""):
        self.port = free_port()
        self.endpoints = f"127.0.0.1:{self.port}"
        self.conf = os.path.join(workdir, f"proxy-{self.port}.conf")
        with open(self.conf, "w") as f:
            f.write(f"namesrvAddr={namesrv_addr}\ngrpcServerPort={self.port}\nbindAddress=127.0.0.1\n")
            if tls:  # test mode: the front's own self-signed certificate, which the driver fetches and trusts
                f.write("tls.server.mode=enforcing\n")
            f.write(extra_conf)
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "FrontProcess":
        self._start(["proxy", "-c", self.conf], "grpc proxy listening", "the gRPC front")
        return self

    def __exit__(self, *exc) -> None:
        super().__exit__()
        os.unlink(self.conf)


class LocalFront:
    """The broker's own front (local mode: grpcServerPort in its broker.conf), in place of a
    FrontProcess: its endpoints, and as its CPU the broker process's (where the front runs) plus a
    front child's if the broker has one (a broker whose local front was a child process)."""

    def __init__(self, broker, grpc_port: int):
        self.broker = broker
        self.endpoints = f"127.0.0.1:{grpc_port}"

    def __enter__(self) -> "LocalFront":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def cpu_seconds(self) -> float:
        import psutil
        root = psutil.Process(self.broker.proc.pid)
        total = 0.0
        for p in (root, *root.children(recursive=True)):
            try:
                if p is root or "broker.proxy.startup" in p.cmdline():
                    t = p.cpu_times()
                    total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total


class FloorProcess(CliProcess):
    """bench/grpc_floor.py on a free loopback port, in `mode` (aio, syncN, bridgeN)."""

    module = "bench.grpc_floor"

    def __init__(self, mode: str = "aio"):
        self.port = free_port()
        self.endpoints = f"127.0.0.1:{self.port}"
        self.mode = mode

    def __enter__(self) -> "FloorProcess":
        self._start([str(self.port), self.mode], "grpc floor listening", "the grpcio floor server")
        return self


def _drive_with(proc: CliProcess, on_start, make_loop):
    """(`make_loop(started)`'s result, `proc`'s CPU seconds over the clock): a driver on asyncio's
    own loop, in this thread; `started` is called when the clock starts."""
    c0 = [0.0]

    def started() -> None:
        c0[0] = proc.cpu_seconds()
        on_start()

    res = asyncio.run(make_loop(started))
    return res, proc.cpu_seconds() - c0[0]


def _drive(endpoints: str, in_flight: int, seconds: float, proc: CliProcess, on_start,
           tls: bool = False) -> tuple[int, list, float, float]:
    """(calls, latencies, seconds, `proc`'s CPU seconds over the clock) of the send driver."""
    (n, lat, dt), cpu = _drive_with(proc, on_start, lambda started: _grpc_loop(
        endpoints, in_flight, min(1.0, seconds / 4), seconds, started, tls))
    return n, lat, dt, cpu


def _channel(endpoints: str, tls: bool):
    import grpc
    if not tls:
        return grpc.aio.insecure_channel(endpoints)
    import ssl
    host, _, port = endpoints.rpartition(":")
    root = ssl.get_server_certificate((host, int(port))).encode()  # the front's test-mode certificate
    return grpc.aio.secure_channel(endpoints, grpc.ssl_channel_credentials(root_certificates=root))


async def _grpc_loop(endpoints: str, in_flight: int, warmup: float, seconds: float, on_start,
                     tls: bool = False) -> tuple[int, list, float]:
    from broker.proxy.protocol import definition_pb2 as pb
    from broker.proxy.protocol import service_pb2 as spb
    from broker.proxy.protocol import service_pb2_grpc as rpc

    body = os.urandom(BODY)
    ids = itertools.count()
    prefix = os.urandom(8).hex().upper()
    md = (("x-mq-client-id", f"bench@{os.getpid()}"),)

    def request() -> spb.SendMessageRequest:
        sp = pb.SystemProperties(tag="bench", keys=["k"], message_id=f"{prefix}{next(ids):016X}",
                                 message_type=pb.NORMAL, body_encoding=pb.IDENTITY)
        return spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=CLIENT_TOPIC), body=body,
                                                           system_properties=sp)])

    async with _channel(endpoints, tls) as channel:
        stub = rpc.MessagingServiceStub(channel)

        async def run(secs: float, lat: list) -> int:
            stop = time.perf_counter() + secs
            count = 0

            async def worker() -> None:
                nonlocal count
                while time.perf_counter() < stop:
                    t0 = time.perf_counter_ns()
                    r = await stub.SendMessage(request(), metadata=md, timeout=10)
                    lat.append(time.perf_counter_ns() - t0)
                    if r.status.code != pb.Code.OK:
                        raise RuntimeError(f"SendMessage answered {pb.Code.Name(r.status.code)}: {r.status.message}")
                    count += 1
            await asyncio.gather(*(worker() for _ in range(in_flight)))
            return count

        await run(warmup, [])  # the route, the broker connection, the segment
        on_start()
        lat: list[int] = []
        t0 = time.perf_counter()
        n = await run(seconds, lat)
        return n, lat, time.perf_counter() - t0


async def _receive_loop(endpoints: str, in_flight: int, warmup: float, seconds: float,
                        on_start) -> tuple[int, list, float, int]:
    import grpc

    from broker.proxy.protocol import definition_pb2 as pb
    from broker.proxy.protocol import service_pb2 as spb
    from broker.proxy.protocol import service_pb2_grpc as rpc

    group = f"bench_grpc_receive_{os.getpid()}_{int(time.time())}"
    md = (("x-mq-client-id", f"bench-receive@{os.getpid()}"),)
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=32,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=CLIENT_TOPIC), broker=pb.Broker(name=BROKER_NAME)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    req.invisible_duration.FromSeconds(30)
    req.long_polling_timeout.FromSeconds(1)  # caught up: the receive ends empty after 1 s

    async with grpc.aio.insecure_channel(endpoints) as channel:
        stub = rpc.MessagingServiceStub(channel)

        async def one() -> tuple[int, int]:
            """One receive and the ack of its batch: (messages, body bytes); (0, 0) caught up."""
            msgs = []
            async for r in stub.ReceiveMessage(req, metadata=md, timeout=30):
                which = r.WhichOneof("content")
                if which == "message":
                    msgs.append(r.message)
                elif which == "status" and r.status.code not in (pb.Code.OK, pb.Code.MESSAGE_NOT_FOUND):
                    raise RuntimeError(f"ReceiveMessage answered {pb.Code.Name(r.status.code)}: {r.status.message}")
            if not msgs:
                return 0, 0
            a = await stub.AckMessage(spb.AckMessageRequest(
                group=req.group, topic=req.message_queue.topic, entries=[spb.AckMessageEntry(
                    message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle)
                    for m in msgs]), metadata=md, timeout=10)
            if a.status.code != pb.Code.OK:
                raise RuntimeError(f"AckMessage answered {pb.Code.Name(a.status.code)}: {a.status.message}")
            return len(msgs), sum(len(m.body) for m in msgs)

        async def run(secs: float, lat: list) -> tuple[int, int]:
            stop = time.perf_counter() + secs
            count = nbytes = 0

            async def worker() -> None:
                nonlocal count, nbytes
                while time.perf_counter() < stop:
                    t0 = time.perf_counter_ns()
                    n, b = await one()
                    if not n:
                        return
                    lat.append(time.perf_counter_ns() - t0)
                    count += n
                    nbytes += b
            await asyncio.gather(*(worker() for _ in range(in_flight)))
            return count, nbytes

        await run(warmup, [])  # the route, the broker connection, the group's first offsets
        on_start()
        lat: list[int] = []
        t0 = time.perf_counter()
        n, nbytes = await run(seconds, lat)
        return n, lat, time.perf_counter() - t0, nbytes


async def bench_grpc_send(namesrv_addr: str, seconds: float, in_flight: int = 64, on_start=nothing,
                          workdir: str | None = None, tls: bool = False, coalesce_us: int = 0,
                          local: LocalFront | None = None) -> NetResult:
    """`tls`: the front in TLS test mode (tls.server.mode=enforcing), the driver over TLS;
    `coalesce_us`: the front's remotingCoalesceMicros; `local`: the broker's own front instead of
    `broker proxy`. The floor is run for the plain cluster-mode cell only."""
    import tempfile
    workdir = workdir or tempfile.gettempdir()
    loop = asyncio.get_running_loop()
    with local or FrontProcess(namesrv_addr, workdir, tls, f"remotingCoalesceMicros={coalesce_us}\n") as front:
        n, lat, dt, front_cpu = await loop.run_in_executor(
            None, _drive, front.endpoints, in_flight, seconds, front, on_start, tls)
    extra = {"driver": "grpc.aio SendMessage (broker.proxy.protocol stubs), in the bench process",
             "front_cpu_us_per_msg": 1e6 * front_cpu / n if n else float("nan")}
    if not tls and not coalesce_us and local is None:
        with FloorProcess() as floor:
            fn, _, fdt, floor_cpu = await loop.run_in_executor(
                None, _drive, floor.endpoints, in_flight, seconds, floor, nothing)
        extra.update(floor_calls_per_s=fn / fdt, floor_cpu_us_per_call=1e6 * floor_cpu / fn if fn else float("nan"))
    how = (", TLS" if tls else "") + (f", remotingCoalesceMicros={coalesce_us}" if coalesce_us else "")
    where = "the broker's local front" if local is not None else "the front"
    return NetResult(f"grpc send 1 KiB x{in_flight} in flight (through {where}{how})",
                     n, dt, n * BODY, lat, extra=extra)


def send_request_frame(topic: str) -> bytes:
    """One SendMessage request of one 1 KiB message as a gRPC message (flag, length, protobuf)."""
    from broker.proxy.protocol import definition_pb2 as pb
    from broker.proxy.protocol import service_pb2 as spb
    sp = pb.SystemProperties(tag="bench", keys=["k"], message_id=os.urandom(16).hex().upper(),
                             message_type=pb.NORMAL, body_encoding=pb.IDENTITY)
    m = spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic), body=os.urandom(BODY),
                                                    system_properties=sp)]).SerializeToString()
    return b"\0" + len(m).to_bytes(4, "big") + m


def _h2load(endpoints: str, body_path: str, args: list[str], log_path: str | None = None) -> dict:
    """h2load's SendMessage calls on `endpoints` with `body_path` as every request's body: its counts."""
    cmd = ["h2load", *args, "-d", body_path, "-H", "content-type: application/grpc", "-H", "te: trailers",
           "-H", "x-mq-client-id: h2load@bench", *(["--log-file", log_path] if log_path else []),
           f"http://{endpoints}/apache.rocketmq.v2.MessagingService/SendMessage"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    import re
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed", out)
    if m is None:
        raise RuntimeError(f"h2load printed no request counts: {out[-500:]}")
    return {"done": int(m.group(3)), "succeeded": int(m.group(4)), "failed": int(m.group(5))}


async def bench_grpc_send_h2load(namesrv_addr: str, seconds: float, on_start=nothing, local: LocalFront | None = None,
                                 connections: int = 1, streams: int = 64, workdir: str | None = None) -> NetResult:
    """SendMessage driven by h2load (Debian's nghttp2-client, libnghttp2's load generator in C)
    instead of grpc.aio, whose ~50 CPU-us per call in the bench process bounded the other cells:
    `connections` HTTP/2 connections of `streams` streams each, one 1 KiB message per call, the same
    request body every time (one message id for all: the broker stores each, as RocketMQ would).
    h2load reads HTTP statuses, not gRPC's: the messages the topic gained are counted and must be
    at least the calls it saw succeed. Latencies from its per-request log."""
    import tempfile
    from broker.client.pull_consumer import PullConsumer
    workdir = workdir or tempfile.gettempdir()
    body_path = os.path.join(workdir, "grpc-send-request.bin")
    log_path = os.path.join(workdir, "h2load-requests.log")
    with open(body_path, "wb") as f:
        f.write(send_request_frame(CLIENT_TOPIC))
    consumer = PullConsumer("bench_grpc_h2load_count", namesrv_addr)
    await consumer.start()
    loop = asyncio.get_running_loop()
    try:
        with local or FrontProcess(namesrv_addr, workdir) as front:
            flags = ["-c", str(connections), "-m", str(streams)]
            await loop.run_in_executor(None, _h2load, front.endpoints, body_path, ["-n", "5000", *flags])  # warm
            queues = await consumer.fetch_queues(CLIENT_TOPIC)
            stored0 = sum([await consumer.max_offset(mq) for mq in queues])
            c0 = front.cpu_seconds()
            on_start()
            t0 = time.perf_counter()
            counts = await loop.run_in_executor(None, _h2load, front.endpoints, body_path,
                                                ["-D", f"{seconds:g}", *flags], log_path)
            dt = time.perf_counter() - t0
            front_cpu = front.cpu_seconds() - c0
            n = counts["succeeded"]
            # the consume queues trail the commit log by the reput's dispatch: the last calls' messages
            # are counted once it caught up (3 s at most), not read as calls that stored nothing
            deadline = loop.time() + 3.0
            while True:
                stored = sum([await consumer.max_offset(mq) for mq in queues]) - stored0
                if stored >= n or loop.time() > deadline:
                    break
                await asyncio.sleep(0.05)
    finally:
        await consumer.shutdown()
    with open(log_path) as f:
        lat = [int(line.split("\t")[2]) * 1000 for line in f if line.count("\t") >= 2]
    os.unlink(log_path)
    where = "the broker's local front" if local is not None else "the front"
    extra = {"driver": f"h2load (nghttp2-client, C), {connections} connection(s) x {streams} streams, in its own "
                       f"process", "front_cpu_us_per_msg": 1e6 * front_cpu / n if n else float("nan"),
             "stored": stored, "h2load_failed": counts["failed"]}
    if stored < n:  # calls h2load saw succeed that stored nothing: refused in a gRPC status it does not read
        extra["errors"] = n - stored
        extra["error_codes"] = "(HTTP 200 without a stored message: a gRPC status other than OK)"
    # h2load's wall time includes its connect; the main duration is what it measured
    return NetResult(f"grpc send 1 KiB, h2load {connections}x{streams} streams (through {where})",
                     n, min(dt, seconds), n * BODY, lat, extra=extra)


async def _fill_receive_topic(namesrv_addr: str, seconds: float) -> None:
    """The receive cells' topic filled (unclocked) for `seconds` of receiving, if it is short of it."""
    from broker.client.pull_consumer import PullConsumer
    consumer = PullConsumer("bench_grpc_receive_fill", namesrv_addr)
    await consumer.start()
    try:
        await fill_client_topic(consumer, await consumer.fetch_queues(CLIENT_TOPIC), namesrv_addr, seconds)
    finally:
        await consumer.shutdown()


async def bench_grpc_receive(namesrv_addr: str, seconds: float, in_flight: int = 4, on_start=nothing,
                             workdir: str | None = None, local: LocalFront | None = None) -> NetResult:
    """`local`: the broker's own front instead of `broker proxy`."""
    await _fill_receive_topic(namesrv_addr, seconds)
    import tempfile
    loop = asyncio.get_running_loop()
    with local or FrontProcess(namesrv_addr, workdir or tempfile.gettempdir()) as front:
        (n, lat, dt, nbytes), front_cpu = await loop.run_in_executor(
            None, _drive_with, front, on_start, lambda started: _receive_loop(
                front.endpoints, in_flight, min(1.0, seconds / 4), seconds, started))
    where = "the broker's local front" if local is not None else "the front"
    return NetResult(f"grpc receive+ack 32/receive, x{in_flight} (through {where}, MB/s of bodies)", n, dt, nbytes,
                     lat, extra={"driver": "ours: grpc.aio ReceiveMessage + AckMessage of each batch "
                                           "(broker.proxy.protocol stubs), in the bench process",
                                 "front_cpu_us_per_msg": 1e6 * front_cpu / n if n else float("nan")})


RECEIVE_DRIVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "grpc_receive")


def _build_receive_driver() -> str:
    """build/grpc_receive (bench/grpc_receive.c), (re)built by make when missing or older than its source."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grpc_receive.c")
    if not os.path.exists(RECEIVE_DRIVER) or os.path.getmtime(RECEIVE_DRIVER) < os.path.getmtime(src):
        subprocess.run(["make", "-s", "build/grpc_receive"], cwd=os.path.dirname(os.path.dirname(src)), check=True)
    return RECEIVE_DRIVER


def consumer_settings(endpoints: str, group: str, topic: str) -> bytes:
    """The TelemetryCommand a 5.x SimpleConsumer of `group` on `topic` sends first (its Settings),
    for build/grpc_receive's --telemetry: the Java proxy reads a receive's subscription from them."""
    from broker.proxy.protocol import definition_pb2 as pb
    from broker.proxy.protocol import service_pb2 as spb
    host, _, port = endpoints.rpartition(":")
    return spb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.SIMPLE_CONSUMER,
        access_point=pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))]),
        request_timeout={"seconds": 3},
        subscription=pb.Subscription(group=pb.Resource(name=group), subscriptions=[pb.SubscriptionEntry(
            topic=pb.Resource(name=topic), expression=pb.FilterExpression(type=pb.TAG, expression="*"))]),
        user_agent=pb.UA(language=pb.JAVA, version="5.0.7", platform="bench", hostname="localhost"))
    ).SerializeToString()


def run_receive_driver(endpoints: str, group: str, seconds: float, in_flight: int, batch: int,
                       on_start=nothing, on_end=nothing, warmup: float = 1.0, topic: str = CLIENT_TOPIC,
                       broker: str = BROKER_NAME, deadline: float = 0, long_poll: float = 1) -> dict:
    """build/grpc_receive on `endpoints` to completion: its JSON line; `on_start`/`on_end` called at
    the edges of its measured window. It opens a Telemetry stream with the consumer's settings
    first, as the 5.x clients do; `deadline` > 0: each call sends a grpc-timeout of that many
    seconds (plus the long polling time for a receive), as the clients do. `long_poll`: each
    receive's long polling time (what an empty receive waits)."""
    from bench.loadgen import run_driver
    cmd = [_build_receive_driver(), "--addr", endpoints, "--topic", topic, "--group", group,
           "--broker", broker, "--in-flight", str(in_flight), "--batch", str(batch),
           "--seconds", f"{seconds:g}", "--warmup", f"{warmup:g}",
           "--telemetry", consumer_settings(endpoints, group, topic).hex(), "--deadline", f"{deadline:g}",
           "--long-poll", f"{long_poll:g}"]
    return run_driver(cmd, "grpc_receive", on_start, on_end)


async def bench_grpc_receive_h2(namesrv_addr: str, seconds: float, in_flight: int = 32, batch: int = 32,
                                on_start=nothing, workdir: str | None = None,
                                local: LocalFront | None = None) -> NetResult:
    """ReceiveMessage + AckMessage driven by build/grpc_receive (bench/grpc_receive.c, libnghttp2's
    client in C) instead of grpc.aio, whose ~35 CPU-us per message in the bench process bounded
    grpc_receive: `in_flight` receive/ack loops on one HTTP/2 connection, `batch` messages per
    receive (30 s invisible), one AckMessage of each answer's receipt handles, a fresh consumer
    group each run, until caught up or the clock ends. An empty topic is first filled (unclocked)."""
    await _fill_receive_topic(namesrv_addr, seconds)
    import tempfile
    loop = asyncio.get_running_loop()
    group = f"bench_grpc_receive_h2_{os.getpid()}_{int(time.time())}"
    cpu: dict = {}
    with local or FrontProcess(namesrv_addr, workdir or tempfile.gettempdir()) as front:
        def started() -> None:
            cpu["c0"] = front.cpu_seconds()
            on_start()

        def ended() -> None:
            cpu["c1"] = front.cpu_seconds()
        r = await loop.run_in_executor(None, lambda: run_receive_driver(
            front.endpoints, group, seconds, in_flight, batch, started, ended, min(1.0, seconds / 4)))
    n = r["msgs"]
    where = "the broker's local front" if local is not None else "the front"
    res = NetResult(f"grpc receive+ack {batch}/receive, x{in_flight}, build/grpc_receive (through {where}, "
                    f"MB/s of bodies; latency of the receive calls)", n, r["seconds"], n * BODY,
                    pcts={0.5: r["receive_p50_us"], 0.99: r["receive_p99_us"]}, extra={
                        "driver": f"build/grpc_receive (libnghttp2 client, C), 1 connection x {in_flight} "
                                  f"receive+ack loops, in its own process",
                        "front_cpu_us_per_msg": 1e6 * (cpu["c1"] - cpu["c0"]) / n if n else float("nan"),
                        "driver_cpu_us_per_msg": r["cpu_us_per_msg"], "caught_up": r["caught_up"],
                        **{k: r[k] for k in ("receives", "acks", "receive_p50_us", "receive_p99_us",
                                             "ack_p50_us", "ack_p99_us")}})
    return res


PY5_PYTHON = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv-rocketmq5", "bin", "python")


def _run_py5(cmd: str, opt: dict, started) -> dict:
    """bench/py5_driver.py under the official 5.x Python client's venv: `started()` when it prints
    that its clock starts, then its figures (a dict)."""
    import json
    driver = os.path.join(os.path.dirname(os.path.abspath(__file__)), "py5_driver.py")
    p = subprocess.Popen([PY5_PYTHON, driver, cmd, json.dumps(opt)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        out = None
        for line in p.stdout:
            msg = json.loads(line)
            if msg.get("start"):
                started()
            elif "msgs" in msg:
                out = msg
        err = p.stderr.read()
        if p.wait(timeout=60) != 0 or out is None:
            raise RuntimeError(f"py5_driver {cmd} failed (exit {p.returncode}): {err[-2000:]}")
        return out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


async def bench_grpc_py5(namesrv_addr: str, seconds: float, what: str, on_start=nothing,
                         local: LocalFront | None = None, workdir: str | None = None) -> NetResult:
    """The official 5.x Python client (rocketmq-python-client 5.1.2, unmodified) against the front:
    `what` "send" (Producer.send_async, 64 in flight, 1 KiB) or "receive" (a SimpleConsumer's 8
    threads, each receive(32) then ack() of each message, a fresh group from the topic's start).
    Its own CPU (the driver process, every thread) is reported beside the front's: where it is
    one core or more, the client is the bound, not the front."""
    import tempfile
    if what == "receive":
        await _fill_receive_topic(namesrv_addr, seconds)
    loop = asyncio.get_running_loop()
    cpu: dict = {}
    with local or FrontProcess(namesrv_addr, workdir or tempfile.gettempdir()) as front:
        def started() -> None:
            cpu["c0"] = front.cpu_seconds()
            on_start()
        opt = {"endpoints": front.endpoints, "topic": CLIENT_TOPIC, "seconds": seconds, "warmup": min(2.0, seconds / 2),
               "body": BODY, "in_flight": 64, "threads": 8, "invisible": 30,
               "group": f"bench_py5_receive_{os.getpid()}_{int(time.time())}"}
        r = await loop.run_in_executor(None, _run_py5, what, opt, started)
        front_cpu = front.cpu_seconds() - cpu["c0"]
    n = r["msgs"]
    where = "the broker's local front" if local is not None else "the front"
    shape = "send 1 KiB, send_async x64" if what == "send" else "receive(32) + ack() of each, 8 threads"
    extra = {"driver": "the official 5.x Python client (rocketmq-python-client 5.1.2), in its own process",
             "front_cpu_us_per_msg": 1e6 * front_cpu / n if n else float("nan"),
             "driver_cpu_us_per_msg": 1e6 * r["cpu_s"] / n if n else float("nan"),
             "driver_cores": r["cpu_s"] / r["seconds"], "py5_errors": r["errors"]}
    return NetResult(f"grpc {shape}, the official 5.x Python client (through {where}; its CPU: "
                     f"{r['cpu_s'] / r['seconds']:.2f} cores)", n, r["seconds"], n * BODY,
                     pcts={0.5: r["p50_us"], 0.99: r["p99_us"]}, extra=extra)


def floors(modes: list[str], seconds: float, in_flight: int = 64) -> None:
    """Each floor server mode driven as the cell drives the front: calls/s and server CPU-µs/call."""
    for mode in modes:
        with FloorProcess(mode) as floor:
            n, _, dt, cpu = _drive(floor.endpoints, in_flight, seconds, floor, nothing)
        print(f"grpc floor {mode}: {n / dt:,.0f} calls/s, server {1e6 * cpu / n:.1f} CPU-us/call "
              f"(load {os.getloadavg()[0]:.2f})", flush=True)


if __name__ == "__main__":
    import argparse
    p = argparse.ArgumentParser(description="grpcio floor variants (bench/grpc_floor.py) under the grpc_send driver")
    p.add_argument("cmd", choices=["floors"])
    p.add_argument("modes", nargs="*", default=["aio", "sync8", "bridge8"])
    p.add_argument("--seconds", type=float, default=3.0)
    a = p.parse_args()
    floors(a.modes, a.seconds)
