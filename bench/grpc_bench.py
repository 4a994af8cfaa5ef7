"""The gRPC front's cells: `broker proxy` (broker.proxy, the front for RocketMQ 5.x clients) in its
own process beside the network section's name server and broker, driven by a grpc.aio client of
this project (the v2 stubs of broker.proxy.protocol, one HTTP/2 channel), beside the remoting cells
of the same broker:
- grpc_send: SendMessage of one 1 KiB message per call, 64 calls in flight;
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

from bench.network_bench import BODY, CLIENT_TOPIC, CliProcess, NetResult, _free_port, _nothing

BROKER_NAME = "broker-a"  # BrokerProcess leaves brokerName at the broker's default


class FrontProcess(CliProcess):
    """`broker proxy` on a free loopback port, finding the broker through `namesrv_addr`."""

    def __init__(self, namesrv_addr: str, workdir: str):
        self.port = _free_port()
        self.endpoints = f"127.0.0.1:{self.port}"
        self.conf = os.path.join(workdir, f"proxy-{self.port}.conf")
        with open(self.conf, "w") as f:
            f.write(f"namesrvAddr={namesrv_addr}\ngrpcServerPort={self.port}\nbindAddress=127.0.0.1\n")
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "FrontProcess":
        self._start(["proxy", "-c", self.conf], "grpc proxy listening", "the gRPC front")
        return self

    def __exit__(self, *exc) -> None:
        super().__exit__()
        os.unlink(self.conf)


async def _grpc_loop(endpoints: str, in_flight: int, warmup: float, seconds: float, on_start) -> tuple[int, list, float]:
    import grpc

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

    async with grpc.aio.insecure_channel(endpoints) as channel:
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


async def _through_front(namesrv_addr: str, seconds: float, loop_fn, on_start, workdir: str | None):
    """`loop_fn(endpoints, started)` on asyncio's own loop in a thread, against a fresh front; its
    result and the front's CPU seconds over the clock (from `started`)."""
    import tempfile
    workdir = workdir or tempfile.gettempdir()
    with FrontProcess(namesrv_addr, workdir) as front:
        c0 = [0.0]

        def started() -> None:
            c0[0] = front.cpu_seconds()
            on_start()

        loop = asyncio.get_running_loop()
        res = await loop.run_in_executor(None, lambda: asyncio.run(loop_fn(front.endpoints, started)))
        return res, front.cpu_seconds() - c0[0]


def _per_msg(cpu_s: float, n: int) -> float:
    return 1e6 * cpu_s / n if n else float("nan")


async def bench_grpc_send(namesrv_addr: str, seconds: float, in_flight: int = 64, on_start=_nothing,
                          workdir: str | None = None) -> NetResult:
    (n, lat, dt), front_cpu = await _through_front(namesrv_addr, seconds, lambda ep, started: _grpc_loop(
        ep, in_flight, min(1.0, seconds / 4), seconds, started), on_start, workdir)
    return NetResult(f"grpc send 1 KiB x{in_flight} in flight (through the front)", n, dt, n * BODY, lat,
                     extra={"driver": "ours: grpc.aio SendMessage (broker.proxy.protocol stubs), in the bench process",
                            "front_cpu_us_per_msg": _per_msg(front_cpu, n)})


async def bench_grpc_receive(namesrv_addr: str, seconds: float, in_flight: int = 4, on_start=_nothing,
                             workdir: str | None = None) -> NetResult:
    from bench.network_bench import fill_client_topic
    from broker.client.pull_consumer import PullConsumer
    consumer = PullConsumer("bench_grpc_receive_fill", namesrv_addr)
    await consumer.start()
    try:
        await fill_client_topic(consumer, await consumer.fetch_queues(CLIENT_TOPIC), namesrv_addr, seconds)
    finally:
        await consumer.shutdown()
    (n, lat, dt, nbytes), front_cpu = await _through_front(namesrv_addr, seconds, lambda ep, started: _receive_loop(
        ep, in_flight, min(1.0, seconds / 4), seconds, started), on_start, workdir)
    return NetResult(f"grpc receive+ack 32/receive, x{in_flight} (through the front, MB/s of bodies)", n, dt, nbytes,
                     lat, extra={"driver": "ours: grpc.aio ReceiveMessage + AckMessage of each batch "
                                           "(broker.proxy.protocol stubs), in the bench process",
                                 "front_cpu_us_per_msg": _per_msg(front_cpu, n)})
