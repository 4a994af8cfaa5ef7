"""The client's CPU per message in network_bench's client_send, without the network: where the
bench process's CPU goes, split between the Producer and the caller's own loop.

    python -m bench.client_cpu [--messages N] [--in-flight 64]

client_send's workers (`await producer.send(Message(...))`, `in_flight` at a time, latency taken
per send) run twice on uvloop: once against a Producer whose connection's transport is a stand-in
broker (each write's frames answered in the next loop turn with answers built before the clock
starts, as a broker writes a stored send's), once with no Producer at all (each send a future, the
turn's futures answered together in the next turn: the caller's loop alone). The difference is
the Producer's CPU per message (render, SendSlots, the reply reader, completing the futures),
plus a little of the stand-in's (counting the frames of a write). Figures are process CPU time
over the clocked sends, so they hold on a busy machine better than client_send's msgs/s; a
client_send figure adds the socket's write and read to them.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import os
import struct
import sys
import time

from broker.client.channel import ClientChannel
from broker.client.message import Message
from broker.client.producer import SEND_OK, Producer, SendResult
from broker.client.route import MessageQueue, single_broker_route
from broker.remoting import codes
from broker.remoting.command import RemotingCommand

TOPIC = "BenchClientCpu"
ADDR = "127.0.0.1:1"  # never dialled: the channel is given its transport
BODY = 1024
WARM_UP = 20_000


def _answers(n: int) -> list[bytes]:
    """answers[opaque]: a stored send's answer under that opaque (no queueId: any queue asked)."""
    cmd = RemotingCommand.request(codes.SEND_MESSAGE_V2, {})
    cmd.opaque = 999_999_999
    raw = cmd.response(codes.SUCCESS, {"msgId": "7F00000100002A9F0000000000001234", "queueOffset": "12345",
                                      "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}).encode()
    hl = struct.unpack_from(">I", raw, 4)[0] & 0xFFFFFF
    before, after = raw[8:8 + hl].split(b"999999999")
    out = [b""]
    for opaque in range(1, n + 1):
        h = before + str(opaque).encode() + after
        out.append(struct.pack(">II", 4 + len(h), len(h)) + h)
    return out


class StandInBroker(asyncio.Transport):
    """A channel's transport that answers every request of a write, in order, in the next loop turn."""

    def __init__(self, channel: ClientChannel, n: int):
        super().__init__()
        self.channel, self.answers, self.next_opaque, self.writes = channel, _answers(n), 1, 0
        self.loop = asyncio.get_running_loop()

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def write(self, data) -> None:
        self.writes += 1
        pos, k, end = 0, 0, len(data)
        while pos < end:  # the opaques are the channel's, one after the other
            pos += 4 + int.from_bytes(data[pos:pos + 4], "big")
            k += 1
        first, self.next_opaque = self.next_opaque, self.next_opaque + k
        self.loop.call_soon(self._deliver, b"".join(self.answers[first:first + k]))

    def _deliver(self, data: bytes) -> None:
        buf = self.channel.get_buffer(len(data))
        buf[:len(data)] = data
        self.channel.buffer_updated(len(data))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


async def _workers(send, messages: int, in_flight: int) -> tuple[int, float]:
    """client_send's loop (bench.driver.client_loop) for `messages` sends: (sends, CPU seconds)."""
    body = os.urandom(BODY)
    lat: list[int] = []
    count = 0

    async def worker(until: int) -> None:
        nonlocal count
        while count < until:
            t0 = time.perf_counter_ns()
            r = await send(Message(TOPIC, body, tags="bench", keys="k"))
            lat.append(time.perf_counter_ns() - t0)
            if r.status != SEND_OK:
                raise RuntimeError(f"send answered {r.status}")
            count += 1

    await asyncio.gather(*(worker(WARM_UP) for _ in range(in_flight)))
    start, lat[:] = count, []
    c0 = time.process_time()
    await asyncio.gather(*(worker(start + messages) for _ in range(in_flight)))
    return count - start, time.process_time() - c0


async def producer_cpu(messages: int, in_flight: int) -> tuple[float, int]:
    """CPU-µs per message of client_send's loop on a Producer (stand-in broker), and its writes."""
    producer = Producer("bench_client_cpu")
    producer.client.routes.routes[TOPIC] = (single_broker_route("broker-a", ADDR, 4, 4), time.monotonic())
    channel = ClientChannel()
    broker = StandInBroker(channel, WARM_UP + messages + 2 * in_flight)
    channel.connection_made(broker)
    producer.client.conns[ADDR] = channel
    gc.collect()
    gc.freeze()  # the prepared answers: out of the collector's way, as a broker's are
    n, cpu = await _workers(producer.send, messages, in_flight)
    return 1e6 * cpu / n, broker.writes


async def caller_cpu(messages: int, in_flight: int) -> float:
    """CPU-µs per message of the same loop with no Producer: a future per send, answered per turn."""
    loop = asyncio.get_running_loop()
    result = SendResult(SEND_OK, "u", "o", MessageQueue(TOPIC, "broker-a", 0), 1)
    pending: list[asyncio.Future] = []

    def answer() -> None:
        for fut in pending:
            fut.set_result(result)
        pending.clear()

    def send(msg: Message) -> asyncio.Future:
        fut = loop.create_future()
        if not pending:
            loop.call_soon(answer)
        pending.append(fut)
        return fut
    n, cpu = await _workers(send, messages, in_flight)
    return 1e6 * cpu / n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=300_000)
    p.add_argument("--in-flight", type=int, default=64)
    a = p.parse_args(argv)
    import uvloop
    total, writes = uvloop.run(producer_cpu(a.messages, a.in_flight))
    caller = uvloop.run(caller_cpu(a.messages, a.in_flight))
    print(f"client_send without the network, {a.messages:,} sends x{a.in_flight} in flight: {total:.2f} CPU-us/msg "
          f"(the caller's loop alone {caller:.2f}, the Producer {total - caller:.2f}); "
          f"{(WARM_UP + a.messages) / max(writes, 1):.1f} requests a write")
    return 0


if __name__ == "__main__":
    sys.exit(main())
