"""What idle 5.x clients cost the broker's own gRPC front (issue 32's memory target): `n` clients,
each on its own HTTP/2 connection with its Telemetry stream open (one Settings command, then
nothing), as a 5.x producer keeps it for as long as it runs. The broker's RssAnon before and with
them, and its CPU over an idle window while they stay connected. Then `receives` long-polling
ReceiveMessage calls are held at once on a topic with nothing in it (RECEIVERS consumers, each a
connection with several receives in flight, as a 5.x SimpleConsumer's threads put them), and the
broker's CPU is measured over a second window while they wait: a held receive must cost nothing
until a message or its timeout wakes it. The clients are grpc.aio channels on asyncio's own loop in
a thread of the bench process (grpc.aio does not run on uvloop)."""
from __future__ import annotations

import asyncio
import os
import statistics
import time

from bench.crowd import rss_bytes

EMPTY_TOPIC = "BenchLongPollTopic"  # created by the cell with nothing sent to it
RECEIVERS = 10                      # connections the held receives are spread over
LONG_POLL_S = 30                    # each receive's long_polling_timeout: longer than the window
PART_S = 0.5                        # the CPU read every PART_S within a window (measure)
SETTLE_S = 1.0                      # from the receives' sending to the window's start


async def _hold_receives(endpoints: str, receives: int, idle_s: float, measure) -> dict:
    """`receives` ReceiveMessage calls long-polling EMPTY_TOPIC, held while `measure` runs; each
    must still be waiting at the end of the window (none answered early)."""
    import grpc
    from broker.server.broker_config import BrokerConfig
    from broker.proxy.protocol import definition_pb2 as pb
    from broker.proxy.protocol import service_pb2 as spb
    from broker.proxy.protocol import service_pb2_grpc as rpc
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name="bench_long_poll"), batch_size=32,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=EMPTY_TOPIC), broker=pb.Broker(name=BrokerConfig.brokerName)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    req.invisible_duration.FromSeconds(30)
    req.long_polling_timeout.FromSeconds(LONG_POLL_S)
    channels = [grpc.aio.insecure_channel(endpoints, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(RECEIVERS)]
    answered = 0

    async def one(i: int) -> None:
        nonlocal answered
        stub = rpc.MessagingServiceStub(channels[i % RECEIVERS])
        md = (("x-mq-client-id", f"long-poll-{i % RECEIVERS}"),)
        async for _ in stub.ReceiveMessage(req, metadata=md, timeout=LONG_POLL_S + 30):
            answered += 1

    tasks = [asyncio.ensure_future(one(i)) for i in range(receives)]
    try:
        for ch in channels:
            await asyncio.wait_for(ch.channel_ready(), 30)
        await asyncio.sleep(SETTLE_S)  # the receives' arrival and first look are not what is measured
        out = await asyncio.get_running_loop().run_in_executor(None, measure, idle_s)
        out["receives_answered_early"] = answered + sum(t.done() for t in tasks)
        return out
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ch in channels:
            await ch.close()


async def _hold(endpoints: str, n: int, idle_s: float, measure) -> dict:
    import grpc
    from broker.proxy.protocol import definition_pb2 as pb
    from broker.proxy.protocol import service_pb2 as spb
    from broker.proxy.protocol import service_pb2_grpc as rpc
    done = asyncio.Event()
    channels, calls = [], []

    async def commands(i: int):
        yield spb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(
            topics=[pb.Resource(name="BenchIdleTopic")])))
        await done.wait()

    try:
        for i in range(n):
            ch = grpc.aio.insecure_channel(endpoints, options=[("grpc.use_local_subchannel_pool", 1)])
            channels.append(ch)
            call = rpc.MessagingServiceStub(ch).Telemetry(commands(i), metadata=(("x-mq-client-id", f"idle-{i}"),))
            calls.append(call)
        for call in calls:  # every stream open: its Settings answered
            await asyncio.wait_for(call.read(), 30)
        return await asyncio.get_running_loop().run_in_executor(None, measure, idle_s)
    finally:
        done.set()
        for ch in channels:
            await ch.close()


def thread_cpu_seconds(pid: int) -> float:
    """The CPU seconds of `pid`'s threads so far, to the nanosecond (the first field of each
    thread's /proc schedstat: time on a CPU). /proc/PID/stat counts in clock ticks of 10 ms, so
    over a 5 s window it reads 0 or 2 ms per s and more, too coarse for the 1 ms per s target."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def run(endpoints: str, pid: int, cpu_seconds=None, n: int = 1000, idle_s: float = 5.0, receives: int = 200) -> dict:
    """`pid`: the process serving the front (RssAnon); `cpu_seconds()`: its CPU seconds so far
    (by default thread_cpu_seconds(pid)). EMPTY_TOPIC must exist (bench.driver.wait_for_route)
    when `receives`."""
    if cpu_seconds is None:
        def cpu_seconds() -> float:
            return thread_cpu_seconds(pid)
    rss0 = rss_bytes(pid, "RssAnon")

    def measure(idle: float) -> dict:
        """RssAnon, and the CPU per second over the window: the median of its 0.5 s parts (what a
        steady cost, such as a timer per held call, shows in every part) and the mean (which one
        burst of the broker's own housekeeping, e.g. its register with the name server every 30 s,
        moves by up to 2 ms per s in a 5 s window)."""
        rss1 = rss_bytes(pid, "RssAnon")
        parts = max(1, round(idle / PART_S))
        marks = [(time.monotonic(), cpu_seconds())]
        for _ in range(parts):
            time.sleep(idle / parts)  # the window itself: nothing happens in it, that is what is measured
            marks.append((time.monotonic(), cpu_seconds()))
        rates = [1000 * (c1 - c0) / (t1 - t0) for (t0, c0), (t1, c1) in zip(marks, marks[1:])]
        (t0, c0), (t1, c1) = marks[0], marks[-1]
        return {"rss_with_mib": rss1 / (1 << 20), "idle_cpu_ms_per_s": statistics.median(rates),
                "idle_cpu_mean_ms_per_s": 1000 * (c1 - c0) / (t1 - t0)}

    out = asyncio.run(_hold(endpoints, n, idle_s, measure))
    out.update(idle_streams=n, idle_s=idle_s, rss_before_mib=rss0 / (1 << 20),
               idle_rss_added_mib=out["rss_with_mib"] - rss0 / (1 << 20))
    if receives:
        held = asyncio.run(_hold_receives(endpoints, receives, idle_s, measure))
        out.update(receives_held=receives, held_cpu_ms_per_s=held["idle_cpu_ms_per_s"],
                   held_cpu_mean_ms_per_s=held["idle_cpu_mean_ms_per_s"],
                   receives_answered_early=held["receives_answered_early"])
    return out


def held_line(f: dict) -> str:
    if "receives_held" not in f:
        return ""
    return (f"; {f['receives_held']} long-polling receives held at once: its CPU while they wait "
            f"{f['held_cpu_ms_per_s']:.1f} ms per s{_parts(f, 'held_cpu_mean_ms_per_s')} "
            f"({f['receives_answered_early']} answered before their timeout)")


def _parts(f: dict, mean_key: str) -> str:
    """How the figure before it was read: the median of the window's parts, and the window's mean."""
    return f" (median of {PART_S} s parts; mean {f[mean_key]:.1f})" if mean_key in f else ""


def line(name: str, f: dict) -> str:
    return (f"{name}: broker RssAnon {f['rss_before_mib']:,.0f} MiB, {f['rss_with_mib']:,.0f} MiB with them "
            f"(+{f['idle_rss_added_mib']:,.1f} MiB); its CPU while they idle {f['idle_cpu_ms_per_s']:.1f} ms per s"
            f"{_parts(f, 'idle_cpu_mean_ms_per_s')}"
            + held_line(f))
