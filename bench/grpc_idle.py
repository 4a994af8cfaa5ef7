"""What idle 5.x clients cost the broker's own gRPC front (issue 32's memory target): `n` clients,
each on its own HTTP/2 connection with its Telemetry stream open (one Settings command, then
nothing), as a 5.x producer keeps it for as long as it runs. The broker's RssAnon before and with
them, and its CPU over an idle window while they stay connected. The clients are grpc.aio channels
on asyncio's own loop in a thread of the bench process (grpc.aio does not run on uvloop)."""
from __future__ import annotations

import asyncio
import time

from bench.crowd import rss_bytes


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


def run(endpoints: str, pid: int, cpu_seconds, n: int = 1000, idle_s: float = 5.0) -> dict:
    """`pid`: the process serving the front (RssAnon); `cpu_seconds()`: its CPU seconds so far."""
    rss0 = rss_bytes(pid, "RssAnon")

    def measure(idle: float) -> dict:
        rss1 = rss_bytes(pid, "RssAnon")
        c0 = cpu_seconds()
        time.sleep(idle)  # the window itself: nothing happens in it, that is what is measured
        return {"rss_with_mib": rss1 / (1 << 20), "idle_cpu_ms_per_s": 1000 * (cpu_seconds() - c0) / idle}

    out = asyncio.run(_hold(endpoints, n, idle_s, measure))
    out.update(idle_streams=n, idle_s=idle_s, rss_before_mib=rss0 / (1 << 20),
               idle_rss_added_mib=out["rss_with_mib"] - rss0 / (1 << 20))
    return out


def line(name: str, f: dict) -> str:
    return (f"{name}: broker RssAnon {f['rss_before_mib']:,.0f} MiB, {f['rss_with_mib']:,.0f} MiB with them "
            f"(+{f['idle_rss_added_mib']:,.1f} MiB); its CPU while they idle {f['idle_cpu_ms_per_s']:.1f} ms per s")
