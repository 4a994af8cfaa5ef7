"""The drivers the bench's cells share: NetResult (one cell's figures), the raw remoting drivers
(bench_send, bench_batch, bench_pull: the project's remoting connection, pipelined) and the
project's client drivers (bench_client_send, bench_client_batch, bench_client_pull, client_loop),
and wait_for_route (a topic created on a broker and routed by the name server).

The network section (bench/network_bench.py) runs them as cells beside build/loadgen's; the gRPC
front's cells (bench/grpc_bench.py), the HA, matrix, failover and Spark benchmarks reuse them.
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

from bench import loadgen
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
        if "idle_streams" in self.extra:  # no messages: what idle clients cost (bench.grpc_idle)
            from bench.grpc_idle import line
            return line(self.name, self.extra)
        by_process = self.extra.get("cpu_us_per_msg_by_process")
        cpu = (f"broker CPU-us/msg {loadgen.cpu_line(by_process)}" if by_process
               else f"broker CPU {1e6 * self.broker_cpu_s / max(1, self.msgs):.2f} us/msg")
        if "client_cpu_us_per_msg" in self.extra:
            cpu += f"; client (bench process) {self.extra['client_cpu_us_per_msg']:.2f} CPU-us/msg"
        if "loadgen_cpu_us_per_msg" in self.extra:
            cpu += f"; loadgen {self.extra['loadgen_cpu_us_per_msg']:.2f} CPU-us/msg"
        if "driver_cpu_us_per_msg" in self.extra:
            cpu += f"; driver {self.extra['driver_cpu_us_per_msg']:.2f} CPU-us/msg"
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


def nothing() -> None:
    pass


async def bench_send(port: int, seconds: float, in_flight: int = 64, on_start=nothing) -> NetResult:
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
                      on_start=nothing) -> NetResult:
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


async def bench_pull(port: int, seconds: float, per_pull: int = 256, on_start=nothing) -> NetResult:
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

async def wait_for_route(namesrv_addr: str, broker_addr: str, timeout: float = 30.0, topic: str = CLIENT_TOPIC) -> None:
    """Create `topic` on the broker (UPDATE_AND_CREATE_TOPIC) and wait until the name server
    routes it with its own queue data (the broker re-registers when a topic is created)."""
    from broker.client.admin import Admin
    from broker.client.errors import ClientError
    admin = Admin(namesrv_addr)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout
        while True:  # the broker may not have registered yet: create_topic needs only its address
            try:
                await admin.create_topic(topic, CLIENT_QUEUES, broker_addr=broker_addr)
                break
            except ClientError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        while True:
            try:
                if topic in await admin.topic_list():
                    route = await admin.route(topic)
                    if len(route.write_queues(topic)) == CLIENT_QUEUES:
                        return
            except ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the name server at {namesrv_addr} did not route {topic} within {timeout:g} s")
            await asyncio.sleep(0.1)
    finally:
        await admin.shutdown()


async def client_loop(call, in_flight: int, seconds: float, per_call: int) -> tuple[int, list[int], float]:
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


async def bench_client_send(namesrv_addr: str, seconds: float, in_flight: int = 64, on_start=nothing,
                            tls: bool = False) -> NetResult:
    """Producer.send, `in_flight` at a time; with `tls` over TLS to the broker (a broker serving
    tls.server.mode=permissive), the name server plaintext."""
    from broker.client.client_instance import MQClientInstance
    from broker.client.message import Message
    from broker.client.producer import Producer
    body = os.urandom(BODY)
    producer = Producer("bench_client", client=MQClientInstance(namesrv_addr, tls=tls, tls_namesrv=False))
    await producer.start()
    try:
        def call():
            return producer.send(Message(CLIENT_TOPIC, body, tags="bench", keys="k"))

        await client_loop(call, in_flight, min(1.0, seconds / 4), 1)  # warm-up: route, connection, segment
        on_start()
        n, lat, dt = await client_loop(call, in_flight, seconds, 1)
    finally:
        await producer.shutdown()
    return NetResult(f"client send 1 KiB x{in_flight} in flight{' over TLS' if tls else ''}", n, dt, n * BODY, lat)


async def bench_client_batch(namesrv_addr: str, seconds: float, in_flight: int = 8, per_batch: int = 32,
                             on_start=nothing) -> NetResult:
    from broker.client.message import Message
    from broker.client.producer import Producer
    bodies = [os.urandom(BODY) for _ in range(per_batch)]
    producer = Producer("bench_client", namesrv_addr)
    await producer.start()
    try:
        def call():
            return producer.send_batch([Message(CLIENT_TOPIC, b, tags="bench") for b in bodies])

        await client_loop(call, in_flight, min(1.0, seconds / 4), per_batch)
        on_start()
        n, lat, dt = await client_loop(call, in_flight, seconds, per_batch)
    finally:
        await producer.shutdown()
    return NetResult(f"client batch of {per_batch} x 1 KiB x{in_flight} in flight", n, dt, n * BODY, lat)


async def fill_client_topic(consumer, queues, namesrv_addr: str, seconds: float) -> None:
    """An empty CLIENT_TOPIC filled by the client's batches for `seconds` (unclocked), so that a
    consume cell run alone has something to read."""
    if sum([await consumer.max_offset(mq) for mq in queues]) == 0:
        await bench_client_batch(namesrv_addr, seconds)


async def bench_client_pull(namesrv_addr: str, seconds: float, per_pull: int = 256, on_start=nothing) -> NetResult:
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
