"""Network figures of the broker daemon: a real `broker serve` process on loopback, driven over
the remoting protocol.

    python -m bench.network_bench [--seconds S] [--flush ASYNC_FLUSH|SYNC_FLUSH] [cell ...]

Raw cells (the broker alone), driven by build/loadgen (bench/loadgen.c, C, one thread, epoll;
its own CPU per message is reported beside the broker's): `send` (SEND_MESSAGE_V2, 1 KiB, 64
requests in flight), `send256` (the same, 256 in flight), `batch` (SEND_BATCH_MESSAGE, 32 x 1 KiB
per request, 8 in flight), `pull` (PULL_MESSAGE of what the cells before sent, 256 messages per
request, 4 in flight), all on one connection; `conns50` (the same send on 50 connections, one
request in flight on each: a service whose 50 threads each call send() and wait), `lone` (one
send in flight: the latency floor, read against the loopback RTT) and `crowd` (conns50 beside
5,000 connected clients that each sent a heartbeat, bench/crowd.py: the broker's RSS with them,
and the 50 senders' throughput against conns50 alone). Each reports the CPU-µs per message of every
process of the broker (the broker and its flush, reput, ha and clean services; bench.proc_cpu)
over loadgen's measured window.

Client cells (the project's client, broker.client, end to end): `client_send` (Producer.send,
64 sends in flight), `client_batch` (Producer.send_batch of 32 x 1 KiB, 8 in flight),
`client_pull` (PullConsumer.pull of what the client cells sent, 256 per pull, 4 queues at once,
messages decoded by the client), `client_send_tls` (client_send over TLS: the broker then serves
tls.server.mode=permissive, plaintext and TLS on its port). They need a name server: one is started as a `broker namesrv`
subprocess and the broker registers with it; the client cells' topic is created on the broker
(UPDATE_AND_CREATE_TOPIC, 4 queues) and the cells wait until the name server routes it. Their
driver runs in this process.

The drivers themselves are in bench/driver.py (the Python raw drivers bench_send, bench_batch,
bench_pull remain there for the HA and Spark benchmarks), the processes in bench/processes.py.

The broker (and the name server, idle during the clock) run in their own processes, so on a
2-core machine the driver and the broker can each have a core; the scheduler often puts both on
one and they take turns (`python -m bench.turns` shows it; docs/bench.md). Latency is per request (per
`send`/`send_batch`/`pull` call for the client cells), request to answer. Broker CPU is counted
from the end of each cell's warm-up to the end of its clock.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time

from bench import loadgen
from bench.driver import (BODY, TOPIC, NetResult, bench_client_batch, bench_client_pull, bench_client_send, nothing,
                          wait_for_route)
from bench.proc_cpu import ProcessTree, cpu_us_per_msg
from bench.processes import BrokerProcess, NamesrvProcess, free_port

# -- build/loadgen (bench/loadgen.c) ----------------------------------------------------------------

# cell -> (loadgen mode, its options, label); labels keep the rows' names (bench/__main__ looks
# the targets up by "<flush> send", "<flush> batch", "<flush> pull")
LOADGEN_CELLS = {
    "send": ("send", {"in_flight": 64}, "send 1 KiB x64 in flight"),
    "send256": ("send", {"in_flight": 256}, "send 1 KiB x256 in flight"),
    "batch": ("batch", {"batch": 32, "in_flight": 8}, "batch 320 of 32 x 1 KiB x8 in flight"),
    "pull": ("pull", {"max_msgs": 256, "in_flight": 4}, "pull 256/request, 4 in flight, MB/s of stored records"),
    # what a service with 50 threads each calling send() and waiting puts on the wire (issue 31)
    "conns50": ("send", {"connections": 50, "in_flight": 1}, "send 1 KiB, 50 connections x1"),
    # one producer, one send at a time: the latency floor (p50 against the loopback RTT)
    "lone": ("send", {"in_flight": 1}, "send 1 KiB, 1 in flight"),
}
CROWD = 5000  # connected clients beside the 50 senders of the "crowd" cell


def loadgen_cell(cell: str, broker: BrokerProcess, seconds: float) -> NetResult:
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


async def _grpc_send(namesrv_addr: str, seconds: float, on_start=nothing) -> NetResult:
    from bench.grpc_bench import bench_grpc_send  # grpc imported only when the cell runs
    return await bench_grpc_send(namesrv_addr, seconds, on_start=on_start)


async def _grpc_receive(namesrv_addr: str, seconds: float, on_start=nothing) -> NetResult:
    from bench.grpc_bench import bench_grpc_receive  # grpc imported only when the cell runs
    return await bench_grpc_receive(namesrv_addr, seconds, on_start=on_start)


async def _grpc_send_tls(namesrv_addr: str, seconds: float, on_start=nothing) -> NetResult:
    from bench.grpc_bench import bench_grpc_send
    return await bench_grpc_send(namesrv_addr, seconds, on_start=on_start, tls=True)


async def _grpc_send_coalesce(namesrv_addr: str, seconds: float, on_start=nothing) -> NetResult:
    from bench.grpc_bench import bench_grpc_send
    return await bench_grpc_send(namesrv_addr, seconds, on_start=on_start, coalesce_us=2000)


async def _grpc_send_local(namesrv_addr: str, seconds: float, on_start=nothing, local=None) -> NetResult:
    from bench.grpc_bench import bench_grpc_send
    return await bench_grpc_send(namesrv_addr, seconds, on_start=on_start, local=local)


async def _grpc_send_h2load_local(namesrv_addr: str, seconds: float, on_start=nothing, local=None) -> NetResult:
    from bench.grpc_bench import bench_grpc_send_h2load
    return await bench_grpc_send_h2load(namesrv_addr, seconds, on_start=on_start, local=local)


async def _grpc_receive_local(namesrv_addr: str, seconds: float, on_start=nothing, local=None) -> NetResult:
    from bench.grpc_bench import bench_grpc_receive
    return await bench_grpc_receive(namesrv_addr, seconds, on_start=on_start, local=local)


async def _grpc_receive_h2_local(namesrv_addr: str, seconds: float, on_start=nothing, local=None) -> NetResult:
    from bench.grpc_bench import bench_grpc_receive_h2
    return await bench_grpc_receive_h2(namesrv_addr, seconds, on_start=on_start, local=local)


async def _grpc_py5_send_local(namesrv_addr: str, seconds: float, on_start=nothing, local=None) -> NetResult:
    from bench.grpc_bench import bench_grpc_py5
    return await bench_grpc_py5(namesrv_addr, seconds, "send", on_start=on_start, local=local)


async def _grpc_py5_receive_local(namesrv_addr: str, seconds: float, on_start=nothing, local=None) -> NetResult:
    from bench.grpc_bench import bench_grpc_py5
    return await bench_grpc_py5(namesrv_addr, seconds, "receive", on_start=on_start, local=local)


async def _wait_listening(port: int, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)  # a poll of the port, not a wait for an event
            continue
        w.close()
        return


LOCAL_FRONT_CELLS = ("grpc_send_local", "grpc_send_h2load_local", "grpc_receive_local", "grpc_receive_h2_local",
                     "grpc_py5_send_local", "grpc_py5_receive_local")  # the broker's own front: grpcServerPort in broker.conf


def crowd_cell(broker: BrokerProcess, seconds: float, n: int = CROWD) -> NetResult:
    """`n` connected clients (each sent one heartbeat, bench.crowd) beside the 50 senders of
    "conns50": the broker's RSS before the crowd, with it, and after the senders ran beside it."""
    from bench.crowd import Crowd, rss_bytes
    pid = broker.proc.pid
    rss0 = rss_bytes(pid, "RssAnon")  # the broker's own memory: the log's mapped pages grow with the sends
    host, port = broker.addr.rsplit(":", 1)
    with Crowd(host, int(port), n):
        rss_idle = rss_bytes(pid, "RssAnon")
        r = loadgen_cell("conns50", broker, seconds)
        rss_busy = rss_bytes(pid, "RssAnon")
    r.name = f"send 1 KiB, 50 connections x1 beside {n:,} connected clients (build/loadgen)"
    r.extra.update({"crowd": n, "rss_before_mib": rss0 / (1 << 20), "rss_crowd_mib": rss_idle / (1 << 20),
                    "rss_crowd_busy_mib": rss_busy / (1 << 20),
                    "rss_added_mib": (max(rss_idle, rss_busy) - rss0) / (1 << 20)})
    return r


def grpc_idle_cell(broker: BrokerProcess, grpc_port: int, seconds: float, n: int = 1000) -> NetResult:
    """`n` 5.x clients with their Telemetry streams open and idle on the broker's own front: its
    RssAnon before and with them, its CPU while they idle; then 200 long-polling receives held on
    an empty topic and its CPU while they wait (bench.grpc_idle)."""
    from bench import grpc_idle
    f = grpc_idle.run(f"127.0.0.1:{grpc_port}", broker.proc.pid, None, n, seconds)  # ns, not ticks
    return NetResult(f"{n:,} idle Telemetry streams, one connection each (the broker's local front)", n,
                     f["idle_s"], 0, extra={"driver": "grpc.aio channels in the bench process", **f})


RAW_CELLS = {**LOADGEN_CELLS, "crowd": None, "grpc_idle_local": None}
async def _client_send_tls(namesrv_addr: str, seconds: float, on_start=nothing) -> NetResult:
    return await bench_client_send(namesrv_addr, seconds, on_start=on_start, tls=True)


CLIENT_CELLS = {"client_send": bench_client_send, "client_send_tls": _client_send_tls, "client_batch": bench_client_batch, "client_pull": bench_client_pull,
                "grpc_send": _grpc_send, "grpc_receive": _grpc_receive, "grpc_send_tls": _grpc_send_tls,
                "grpc_send_coalesce": _grpc_send_coalesce, "grpc_send_local": _grpc_send_local,
                "grpc_send_h2load_local": _grpc_send_h2load_local,
                "grpc_receive_local": _grpc_receive_local, "grpc_receive_h2_local": _grpc_receive_h2_local,
                "grpc_py5_send_local": _grpc_py5_send_local, "grpc_py5_receive_local": _grpc_py5_receive_local}
DEFAULT_CELLS = [*RAW_CELLS, *CLIENT_CELLS]


async def run_flush_mode(flush: str, seconds: float, cells: list[str], workdir: str, progress=print,
                         conf: str = "") -> list[NetResult]:
    unknown = [c for c in cells if c not in RAW_CELLS and c not in CLIENT_CELLS]
    if unknown:
        raise ValueError(f"unknown cell(s) {unknown}; known: {DEFAULT_CELLS}")
    out = []
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(NamesrvProcess()) if any(c in CLIENT_CELLS or c == "grpc_idle_local"
                                                           for c in cells) else None
        # permissive TLS when a cell speaks it: plaintext cells only pass its first-byte check at accept
        tls = "tls.server.mode=permissive\n" if "client_send_tls" in cells else ""
        grpc_port = free_port() if any(c in LOCAL_FRONT_CELLS or c == "grpc_idle_local" for c in cells) else 0
        b = stack.enter_context(BrokerProcess(flush, workdir, ns.addr if ns else "",
                                              extra=tls + (f"grpcServerPort={grpc_port}\n" if grpc_port else "") + conf))
        if grpc_port:  # the front listens before the broker prints its line; a child front (an older broker) after
            await _wait_listening(grpc_port)
        if ns is not None:
            await wait_for_route(ns.addr, b.addr)
            if "grpc_idle_local" in cells:  # the held long-polling receives wait on a topic of their own
                from bench.grpc_idle import EMPTY_TOPIC
                await wait_for_route(ns.addr, b.addr, topic=EMPTY_TOPIC)
        tree = ProcessTree(b.proc.pid)
        for cell in cells:
            if cell == "grpc_idle_local":  # blocking (its own loop in a thread), off this one
                r = await asyncio.get_running_loop().run_in_executor(None, grpc_idle_cell, b, grpc_port, seconds)
            elif cell in RAW_CELLS:  # blocking (a subprocess), off the loop
                r = await asyncio.get_running_loop().run_in_executor(
                    None, crowd_cell if cell == "crowd" else loadgen_cell, *((b, seconds) if cell == "crowd"
                                                                            else (cell, b, seconds)))
                if cell == "crowd":  # beside the 50 senders alone, same broker, same run
                    alone = next((x for x in out if x.name.startswith(f"{flush} send 1 KiB, 50 connections x1 ")),
                                 None)
                    if alone is not None:
                        r.extra["vs_conns50_alone"] = r.msgs_per_s / alone.msgs_per_s
            else:
                c0 = mine0 = None
                snap0: dict = {}

                def on_start() -> None:
                    nonlocal c0, mine0
                    c0 = b.cpu_seconds()
                    mine0 = time.process_time()
                    snap0.update(tree.snapshot())
                if cell in LOCAL_FRONT_CELLS:
                    from bench.grpc_bench import LocalFront
                    r = await CLIENT_CELLS[cell](ns.addr, seconds, on_start=on_start, local=LocalFront(b, grpc_port))
                else:
                    r = await CLIENT_CELLS[cell](ns.addr, seconds, on_start=on_start)
                mine = time.process_time() - mine0  # the client's, and its driver loop's (this process)
                r.broker_cpu_s = b.cpu_seconds() - c0
                r.extra = {"driver": "the project's client (broker.client), in the bench process",
                           "cpu_us_per_msg_by_process": cpu_us_per_msg(snap0, tree.snapshot(), r.msgs),
                           "client_cpu_us_per_msg": 1e6 * mine / r.msgs if r.msgs else float("nan"), **r.extra}
                # the front's cells beside the remoting path's on the same broker (goal for sends: half)
                bases = {"grpc_send": (("vs_client_send", "client send 1 KiB x64"),
                                       ("vs_loadgen_send", "send 1 KiB x64 in flight")),
                         "client_send_tls": (("vs_client_send", "client send 1 KiB x64 in flight"),),
                         "grpc_receive": (("vs_client_pull", "client pull"),)}
                for key, prefix in bases.get("grpc_send" if cell.startswith(("grpc_send", "grpc_py5_send")) else
                                             "grpc_receive" if cell.startswith(("grpc_receive", "grpc_py5_receive"))
                                             else cell, ()):
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
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker.conf line for the broker under test (A/B of a store setting)")
    p.add_argument("--workdir", default=os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench", "work"))
    a = p.parse_args(argv)
    os.makedirs(a.workdir, exist_ok=True)
    import uvloop
    uvloop.run(run_flush_mode(a.flush, a.seconds, a.cells, a.workdir, conf="".join(c + "\n" for c in a.conf)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
