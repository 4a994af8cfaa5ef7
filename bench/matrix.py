"""The mode matrix of `python -m bench`: real processes, the project's client, peers beside them.

    python -m bench.matrix [--full] [--no-peers] [--seconds S]     # this section alone

Modes: flushDiskType {ASYNC_FLUSH, SYNC_FLUSH} x replication {single master, ASYNC_MASTER + slave,
SYNC_MASTER + slave}. Per mode and repeat a name server, a master and (when replicated) a slave are
started as `broker namesrv` / `broker serve` processes in fresh store directories; the topic is
created on the master (4 queues) and routed by the name server; the slave links to the master.
Then each cell (body size x sends in flight) drives the master through the project's client,
broker.client.Producer.send (closed loop: `in_flight` tasks each send, await SEND_OK, repeat),
after an unclocked warm-up. Per cell:

  - msgs/s and MB/s of bodies;
  - latency per send, call to SEND_OK: p50/p99/p99.9 from an HdrHistogram (hdrhistogram package,
    3 significant digits) when importable, else exact nearest-rank percentiles of the sorted samples
    (the report says which);
  - CPU seconds per million messages of each process over the clock (psutil user+system): the master
    broker, each of its service processes (its children, named by their `-m broker.services.*` /
    `broker.ha.*` module), the slave and its services, the name server, and this (client) process;
  - replication lag (replicated modes): master `wrote` minus slave `HA received`, bytes, sampled
    from the two offset tables every 10 ms.

After the client cells, a raw cell per mode (1 KiB, 64 in flight; --full also 256): the C load
generator build/loadgen (bench/loadgen.c) sending SEND_MESSAGE_V2 to the master on a topic of
its own, with the CPU-µs per message of each process of the master's and the slave's trees
(bench.proc_cpu) over loadgen's window and loadgen's own CPU. The quick run's loadgen cells are
read against redis-benchmark's XADD (bench.redis_benchmark, -c 50 -P 16): ASYNC_FLUSH single
master against appendfsync everysec, SYNC_FLUSH single master against appendfsync always.

After those, a consume cell per mode: PullConsumer.pull of everything the mode's cells
sent, 4 queues at once, 256 per pull, until caught up or `seconds`.

Peers (bench.peers: Redis Streams, NATS JetStream) run the same body sizes and in-flight counts;
results are ratios project/peer: ASYNC_FLUSH single master <-> peer ASYNC_FLUSH, SYNC_FLUSH
single master <-> peer SYNC_FLUSH, ASYNC_FLUSH SYNC_MASTER + slave <-> peer SYNC_MASTER (the peers'
replicated setups flush asynchronously). Medians over repeats (quick 1, full 3) of every figure.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field

from bench import loadgen
from bench.ha_bench import SEGMENT, Node
from bench.driver import CLIENT_TOPIC, bench_client_pull, client_loop, wait_for_route
from bench.processes import NamesrvProcess

FLUSHES = ("ASYNC_FLUSH", "SYNC_FLUSH")
REPLICATIONS = ("single", "ASYNC_MASTER", "SYNC_MASTER")
REPL_LABEL = {"single": "single master", "ASYNC_MASTER": "ASYNC_MASTER + slave", "SYNC_MASTER": "SYNC_MASTER + slave"}
BODIES = (128, 1024, 16384)
IN_FLIGHT = (1, 64)
# project mode paired with each peer mode
PEER_PAIRS = {"ASYNC_FLUSH": ("ASYNC_FLUSH", "single"), "SYNC_FLUSH": ("SYNC_FLUSH", "single"),
              "SYNC_MASTER": ("ASYNC_FLUSH", "SYNC_MASTER")}
# the loadgen cells' topic: not CLIENT_TOPIC, whose contents the consume cell reads
LOADGEN_TOPIC = "BenchLoadgenTopic"
# project mode a redis-benchmark XADD cell is read against, by appendfsync
REDIS_PAIRS = {"everysec": ("ASYNC_FLUSH", "single"), "always": ("SYNC_FLUSH", "single")}


def body_label(n: int) -> str:
    return f"{n // 1024}KiB" if n >= 1024 and n % 1024 == 0 else f"{n}B"


def mode_name(flush: str, repl: str) -> str:
    return f"{flush} {REPL_LABEL[repl]}"


def cell_name(flush: str, repl: str, body: int, in_flight: int) -> str:
    return f"{mode_name(flush, repl)} {body_label(body)} x{in_flight}"


# ------------------------------------------------------------------------------------ percentiles

try:
    from hdrh.histogram import HdrHistogram
    import importlib.metadata as _md
    HISTOGRAM = f"HdrHistogram (hdrhistogram {_md.version('hdrhistogram')}, 3 significant digits)"
except Exception:  # noqa: BLE001
    HdrHistogram = None
    HISTOGRAM = "exact nearest-rank percentiles of the sorted samples (hdrhistogram not installed)"


def percentiles_us(lat_ns: list[int]) -> dict:
    if not lat_ns:
        return {"p50_us": float("nan"), "p99_us": float("nan"), "p999_us": float("nan")}
    if HdrHistogram is not None:
        h = HdrHistogram(1, 600_000_000_000, 3)
        for v in lat_ns:
            h.record_value(max(1, v))
        return {k: h.get_value_at_percentile(q) / 1000 for k, q in (("p50_us", 50), ("p99_us", 99), ("p999_us", 99.9))}
    s = sorted(lat_ns)
    import math
    return {k: s[max(1, math.ceil(q * len(s))) - 1] / 1000 for k, q in (("p50_us", 0.5), ("p99_us", 0.99),
                                                                         ("p999_us", 0.999))}


# ------------------------------------------------------------------------------------ processes

def _module_of(p) -> str:
    try:
        cmd = p.cmdline()
    except Exception:  # noqa: BLE001
        return f"pid{p.pid}"
    if "-m" in cmd and cmd.index("-m") + 1 < len(cmd):
        return cmd[cmd.index("-m") + 1].rsplit(".", 1)[-1]
    return os.path.basename(cmd[0]) if cmd else f"pid{p.pid}"


def process_set(master: Node, slave: Node | None, ns: NamesrvProcess) -> dict:
    """name -> psutil.Process: each broker, its service processes (children), the name server, this process."""
    import psutil
    out = {}
    for label, node in (("master", master), ("slave", slave)):
        if node is None:
            continue
        p = psutil.Process(node.proc.pid)
        out[label] = p
        for c in p.children(recursive=True):
            out[f"{label}/{_module_of(c)}"] = c
    out["namesrv"] = psutil.Process(ns.proc.pid)
    out["client (bench)"] = psutil.Process()
    return out


def cpu_snapshot(procs: dict) -> dict:
    out = {}
    for name, p in procs.items():
        try:
            t = p.cpu_times()
            out[name] = t.user + t.system
        except Exception:  # noqa: BLE001 - a service that exited mid-cell
            out[name] = float("nan")
    return out


def cpu_per_million(c0: dict, c1: dict, msgs: int) -> dict:
    return {k: (c1[k] - c0[k]) / max(1, msgs) * 1e6 for k in c0 if k in c1}


class LagSampler:
    def __init__(self, master: Node, slave: Node | None):
        self.master, self.slave = master, slave
        self.values: list[int] = []
        self.stop = threading.Event()
        self.thread = None

    def __enter__(self):
        if self.slave is not None:
            from broker.store.offset_table import Slot
            m, s = self.master.table, self.slave.table

            def run():
                while not self.stop.wait(0.01):  # sampling two other processes' tables
                    self.values.append(m.load(Slot.WROTE) - s.load(Slot.HA_RECEIVED))
            self.thread = threading.Thread(target=run, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread is not None:
            self.thread.join()

    def figures(self) -> dict:
        if not self.values:
            return {}
        s = sorted(self.values)
        return {"lag_p50_bytes": float(s[len(s) // 2]), "lag_p99_bytes": float(s[min(len(s) - 1, int(0.99 * len(s)))]),
                "lag_max_bytes": float(s[-1])}


# ------------------------------------------------------------------------------------ plan

@dataclass
class Plan:
    full: bool
    seconds: float
    repeats: int
    cells: dict = field(default_factory=dict)      # (flush, repl) -> [(body, in_flight)]
    peers: list = field(default_factory=list)      # peer names to try
    consume: bool = True
    raw: list = field(default_factory=list)        # [(body, in_flight)] of build/loadgen per mode

    @staticmethod
    def make(full: bool, seconds: float | None = None, peers: bool = True) -> "Plan":
        p = Plan(full, seconds or (5.0 if full else 2.0), 3 if full else 1)
        for flush in FLUSHES:
            for repl in REPLICATIONS:
                if full:
                    p.cells[(flush, repl)] = [(b, n) for b in BODIES for n in IN_FLIGHT]
                else:  # every mode once at 1 KiB x64; one mode also x1
                    p.cells[(flush, repl)] = [(1024, 64)] + ([(1024, 1)] if (flush, repl) == ("ASYNC_FLUSH", "single")
                                                             else [])
        p.raw = [(1024, 64), (1024, 256)] if full else [(1024, 64)]
        if peers:
            p.peers = ["redis", "nats"] if full else ["redis"]
        return p

    def peer_cells(self) -> list[tuple[str, int, int]]:
        return [(pm, b, n) for pm, key in PEER_PAIRS.items() for b, n in self.cells.get(key, [])]

    def total_steps(self) -> int:
        per_rep = sum(len(v) + len(self.raw) + (1 if self.consume else 0) for v in self.cells.values())
        return self.repeats * (per_rep + len(self.peers) * len(self.peer_cells()))


class Progress:
    """`[k/N] cell ... eta` on stderr."""

    def __init__(self, total: int):
        self.total, self.k, self.t0 = total, 0, time.perf_counter()

    def step(self, what: str) -> None:
        self.k += 1
        el = time.perf_counter() - self.t0
        eta = el / max(1, self.k - 1) * (self.total - self.k + 1) if self.k > 1 else float("nan")
        eta_s = f"eta {eta:.0f} s" if eta == eta else "eta ?"
        print(f"[{self.k}/{self.total}] {what} ... {el:.0f} s elapsed, {eta_s}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ cells

async def _wait_linked(master: Node, timeout: float = 30.0) -> None:
    from broker.store.offset_table import Slot
    deadline = time.monotonic() + timeout
    while not master.table.load(Slot.HA_SLAVES):
        if time.monotonic() > deadline:
            raise RuntimeError("the slave did not link to the master")
        await asyncio.sleep(0.01)


async def send_cell(producer, procs: dict, master: Node, slave: Node | None, body: int, in_flight: int,
                    seconds: float) -> dict:
    from broker.client.message import Message
    payload = os.urandom(body)

    def call():
        return producer.send(Message(CLIENT_TOPIC, payload, tags="bench", keys="k"))

    await client_loop(call, in_flight, min(0.5, seconds / 4), 1)  # warm-up
    c0 = cpu_snapshot(procs)
    with LagSampler(master, slave) as lag:
        n, lat, dt = await client_loop(call, in_flight, seconds, 1)
    c1 = cpu_snapshot(procs)
    out = {"msgs": n, "seconds": dt, "msgs_per_s": n / dt, "mb_per_s": n * body / dt / 1e6,
           **percentiles_us(lat), **lag.figures(), "cpu_s_per_M": cpu_per_million(c0, c1, n)}
    out["cpu_s_per_M_total_server"] = sum(v for k, v in out["cpu_s_per_M"].items() if k != "client (bench)")
    return out


def loadgen_cell(master: Node, slave: Node | None, body: int, in_flight: int, seconds: float) -> dict:
    """build/loadgen send to the master; CPU-µs/msg of the master's processes ("broker", "flush",
    ...) and the slave's ("slave", "slave/ha", ...). Blocking: run it off the event loop."""
    r = loadgen.measure("send", master.addr, master.proc.pid, {"slave": slave.proc.pid} if slave else None,
                        topic=LOADGEN_TOPIC, queues=4, body=body, in_flight=in_flight, seconds=seconds,
                        warmup=min(0.5, seconds / 4))
    return {"body": body, "in_flight": in_flight, "msgs": r["msgs"], "seconds": r["seconds"],
            "msgs_per_s": r["msgs_per_s"], "mb_per_s": r["mb_per_s"],
            "p50_us": r["p50_us"], "p99_us": r["p99_us"], "p999_us": r["p999_us"], "errors": r["errors"],
            "error_codes": r["error_codes"], "loadgen_cpu_us_per_msg": r["cpu_us_per_msg"],
            "cpu_us_per_msg": r["broker_cpu_us_per_msg"], "driver": r["driver"]}


def raw_name(flush: str, repl: str, body: int, in_flight: int) -> str:
    return f"{cell_name(flush, repl, body, in_flight)} (build/loadgen)"


async def consume_cell(ns_addr: str, procs: dict, seconds: float) -> dict:
    c0 = {}

    def on_start():
        c0.update(cpu_snapshot(procs))
    r = await bench_client_pull(ns_addr, seconds, on_start=on_start)
    c1 = cpu_snapshot(procs)
    return {"msgs": r.msgs, "seconds": r.seconds, "msgs_per_s": r.msgs_per_s, "mb_per_s": r.mb_per_s,
            **percentiles_us(r.lat_ns), "cpu_s_per_M": cpu_per_million(c0, c1, r.msgs)}


async def run_mode(flush: str, repl: str, cells: list, plan: Plan, workdir: str, progress: Progress, say) -> tuple:
    from broker.client.producer import Producer
    sends, consume, raw = {}, None, {}
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(NamesrvProcess())
        role = "ASYNC_MASTER" if repl == "single" else repl
        master = stack.enter_context(Node(workdir, role, flush=flush, namesrv=ns.addr))
        slave = None
        if repl != "single":
            slave = stack.enter_context(Node(workdir, "SLAVE", flush=flush, namesrv=ns.addr,
                                             master_ha=f"127.0.0.1:{master.ha_port}", broker_id=1))
            await _wait_linked(master)
        await wait_for_route(ns.addr, master.addr)
        procs = process_set(master, slave, ns)
        producer = Producer("bench_matrix", ns.addr)
        await producer.start()
        try:
            for body, in_flight in cells:
                name = cell_name(flush, repl, body, in_flight)
                progress.step(name)
                r = await send_cell(producer, procs, master, slave, body, in_flight, plan.seconds)
                sends[name] = r
                lag = f"; lag p99 {r['lag_p99_bytes'] / 1024:,.1f} KiB" if "lag_p99_bytes" in r else ""
                say(f"  {name}: {r['msgs_per_s']:,.0f} msgs/s ({r['mb_per_s']:,.1f} MB/s), p50 {r['p50_us']:,.0f} "
                    f"p99 {r['p99_us']:,.0f} p99.9 {r['p999_us']:,.0f} us; server CPU "
                    f"{r['cpu_s_per_M_total_server']:,.1f} s/M msgs{lag}")
        finally:
            await producer.shutdown()
        for body, in_flight in plan.raw:
            name = raw_name(flush, repl, body, in_flight)
            progress.step(name)
            r = await asyncio.get_running_loop().run_in_executor(None, loadgen_cell, master, slave, body, in_flight,
                                                                 plan.seconds)
            raw[name] = r
            say(f"  {name}: {r['msgs_per_s']:,.0f} msgs/s ({r['mb_per_s']:,.1f} MB/s), p50 {r['p50_us']:,.0f} "
                f"p99 {r['p99_us']:,.0f} p99.9 {r['p999_us']:,.0f} us; "
                f"CPU-us/msg {loadgen.cpu_line(r['cpu_us_per_msg'])}; loadgen {r['loadgen_cpu_us_per_msg']:.2f}"
                + (f"; {r['errors']} errors {r['error_codes']}" if r["errors"] else ""))
        if plan.consume:
            progress.step(f"{mode_name(flush, repl)} consume")
            consume = await consume_cell(ns.addr, procs, plan.seconds)
            say(f"  {mode_name(flush, repl)} consume (PullConsumer): {consume['msgs_per_s']:,.0f} msgs/s "
                f"({consume['mb_per_s']:,.1f} MB/s)")
    return sends, consume, raw


def _median_dict(runs: list[dict]) -> dict:
    out = {}
    for k, v in runs[0].items():
        if isinstance(v, dict):
            out[k] = _median_dict([r[k] for r in runs if k in r])
        elif isinstance(v, (int, float)):
            vals = [r[k] for r in runs if isinstance(r.get(k), (int, float))]
            out[k] = statistics.median(vals)
        else:
            out[k] = v
    return out


def limit_figures(r: dict, L: dict, flush: str) -> dict:
    """Each figure beside its limit of the same run: throughput as % of the limit, latency as the
    limit's share of it (100 % = at the floor)."""
    lo_MBps = L["loopback_GiBps"] * (1 << 30) / 1e6
    out = {"pct_loopback_bw": 100 * r["mb_per_s"] / lo_MBps,
           "pct_memcpy": 100 * r["mb_per_s"] / (L["memcpy_GiBps"] * (1 << 30) / 1e6),
           "pct_seq_durable": 100 * r["mb_per_s"] / L["seq_durable_MBps"],
           "rtt_pct_of_p50": 100 * L["loopback_rtt_p50_us"] / r["p50_us"],
           "rtt_pct_of_p99": 100 * L["loopback_rtt_p99_us"] / r["p99_us"]}
    if flush == "SYNC_FLUSH":
        out["fdatasync_pct_of_p50"] = 100 * L["fdatasync_p50_us"] / r["p50_us"]
        out["fdatasync_pct_of_p99"] = 100 * L["fdatasync_p99_us"] / r["p99_us"]
    return out


def run_peers(plan: Plan, workdir: str, progress: Progress, say) -> dict:
    out = {"available": {}, "cells": {}, "skipped": []}
    try:
        from bench import peers
    except Exception as e:  # noqa: BLE001
        for p in plan.peers:
            out["available"][p] = f"bench.peers not importable: {e!r}"
            say(f"  peer {p}: skipped: bench.peers not importable ({e!r})")
        return out
    avail = peers.available(lambda m: say("  " + m))
    out["driver"] = {}
    for peer in plan.peers:
        out["available"][peer] = avail.get(peer, "not reported by bench.peers.available()")
        if out["available"][peer]:
            say(f"  peer {peer}: skipped: {out['available'][peer]}")
            for _ in range(plan.repeats * len(plan.peer_cells())):
                progress.step(f"{peer} (unavailable)")
            continue
        unavailable_modes: dict = {}
        for rep in range(plan.repeats):
            for pm, body, n in plan.peer_cells():
                name = f"{peer} {pm} {body_label(body)} x{n}"
                progress.step(name + (f" (repeat {rep + 1})" if plan.repeats > 1 else ""))
                if pm in unavailable_modes:
                    continue
                try:
                    r = peers.run_peer(peer, pm, body, n, plan.seconds, workdir, lambda m: say("    " + m))
                except peers.PeerUnavailable as e:
                    unavailable_modes[pm] = str(e)
                    out["skipped"].append({"peer": peer, "mode": pm, "reason": str(e)})
                    say(f"  {peer} {pm}: skipped: {e}")
                    continue
                except Exception as e:  # noqa: BLE001 - a peer failing must not lose the project's figures
                    out["skipped"].append({"peer": peer, "mode": pm, "body": body, "in_flight": n,
                                           "reason": f"failed: {e!r}"})
                    say(f"  {name}: failed: {e!r}")
                    continue
                out["driver"][name] = r.pop("driver", "")
                r["server_cpu_s_per_M"] = r["server_cpu_s"] / max(1, r["msgs"]) * 1e6
                out["cells"].setdefault(name, []).append(r)
                say(f"  {name}: {r['msgs_per_s']:,.0f} msgs/s ({r['mb_per_s']:,.1f} MB/s), p50 {r['p50_us']:,.0f} "
                    f"p99 {r['p99_us']:,.0f} p99.9 {r['p999_us']:,.0f} us; server CPU "
                    f"{r['server_cpu_s_per_M']:,.1f} s/M msgs")
    out["cells"] = {k: _median_dict(v) | {"repeats": len(v)} for k, v in out["cells"].items()}
    return out


def ratios(sends: dict, peer_out: dict) -> dict:
    out = {}
    for name, pr in peer_out.get("cells", {}).items():
        flush, repl = PEER_PAIRS[pr["mode"]]
        ours = sends.get(cell_name(flush, repl, pr["body"], pr["in_flight"]))
        if not ours:
            continue
        out[f"{cell_name(flush, repl, pr['body'], pr['in_flight'])} / {name}"] = {
            "project": cell_name(flush, repl, pr["body"], pr["in_flight"]), "peer": pr["peer"], "peer_mode": pr["mode"],
            "body": pr["body"], "in_flight": pr["in_flight"],
            "project_msgs_per_s": ours["msgs_per_s"], "peer_msgs_per_s": pr["msgs_per_s"],
            "throughput_ratio": ours["msgs_per_s"] / pr["msgs_per_s"] if pr["msgs_per_s"] else float("nan"),
            "p50_ratio": ours["p50_us"] / pr["p50_us"], "p99_ratio": ours["p99_us"] / pr["p99_us"],
            "p999_ratio": ours["p999_us"] / pr["p999_us"],
            "server_cpu_ratio": ours["cpu_s_per_M_total_server"] / pr["server_cpu_s_per_M"]
            if pr.get("server_cpu_s_per_M") else float("nan")}
    return out


def redis_ratios(raw: dict, redis: dict) -> dict:
    """Each loadgen cell of a mode REDIS_PAIRS names, beside redis-benchmark's XADD of the same run."""
    from bench.redis_benchmark import cell_name as redis_cell
    out = {}
    for fsync, (flush, repl) in REDIS_PAIRS.items():
        peer = redis.get(redis_cell(fsync))
        for name, r in raw.items():
            if not peer or r.get("flush") != flush or r.get("replication") != repl:
                continue
            out[f"{name} / {redis_cell(fsync)}"] = {
                "project": name, "peer": redis_cell(fsync), "project_msgs_per_s": r["msgs_per_s"],
                "peer_msgs_per_s": peer["msgs_per_s"], "throughput_ratio": r["msgs_per_s"] / peer["msgs_per_s"],
                "p50_ratio": r["p50_us"] / peer["p50_us"], "p99_ratio": r["p99_us"] / peer["p99_us"],
                "server_cpu_ratio": r["cpu_us_per_msg"]["total"] / peer["server_cpu_us_per_msg"]
                if peer["server_cpu_us_per_msg"] else float("nan")}
    return out


def run(plan: Plan, workdir: str, L: dict, runner, say=print, redis_xadd: dict | None = None) -> dict:
    """The whole matrix (project cells, loadgen cells, consume cells, peers); every process
    stopped on any exit. `redis_xadd`: redis-benchmark cells already measured in this run (the
    network section's), else they are measured here when the plan has the redis peer."""
    progress = Progress(plan.total_steps())
    say(f"  matrix: {sum(len(v) for v in plan.cells.values())} send cells x {plan.repeats} repeat(s) of "
        f"{plan.seconds:g} s, latency percentiles by {HISTOGRAM}")
    send_runs: dict = {}
    consume_runs: dict = {}
    raw_runs: dict = {}
    errors = []
    for rep in range(plan.repeats):
        for (flush, repl), cells in plan.cells.items():
            try:
                sends, consume, raw = runner(run_mode(flush, repl, cells, plan, workdir, progress, say))
            except Exception as e:  # noqa: BLE001 - one mode failing must not lose the others' figures
                errors.append(f"{mode_name(flush, repl)} (repeat {rep + 1}): {e!r}")
                say(f"  {mode_name(flush, repl)}: FAILED: {e!r}")
                continue
            for k, v in sends.items():
                send_runs.setdefault(k, []).append(v)
            for k, v in raw.items():
                raw_runs.setdefault(k, []).append(v | {"flush": flush, "replication": repl})
            if consume:
                consume_runs.setdefault(mode_name(flush, repl), []).append(consume)
    sends = {}
    for (flush, repl), cells in plan.cells.items():
        for body, n in cells:
            name = cell_name(flush, repl, body, n)
            if name not in send_runs:
                continue
            r = _median_dict(send_runs[name])
            r.update(flush=flush, replication=repl, body=body, in_flight=n, repeats=len(send_runs[name]))
            r["limits"] = limit_figures(r, L, flush)
            sends[name] = r
    consume = {}
    for name, runs in consume_runs.items():
        r = _median_dict(runs)
        r["repeats"] = len(runs)
        r["pct_loopback_bw"] = 100 * r["mb_per_s"] / (L["loopback_GiBps"] * (1 << 30) / 1e6)
        r["pct_memcpy"] = 100 * r["mb_per_s"] / (L["memcpy_GiBps"] * (1 << 30) / 1e6)
        consume[name] = r
    raw = {name: _median_dict(runs) | {"repeats": len(runs)} for name, runs in raw_runs.items()}
    peer_out = run_peers(plan, workdir, progress, say) if plan.peers else {"available": {}, "cells": {}, "skipped": []}
    redis = redis_xadd
    if redis is None and "redis" in plan.peers:
        from bench import redis_benchmark
        redis = redis_benchmark.run_both(plan.seconds, workdir, progress=lambda m: say("  " + m))
    return {"config": {"full": plan.full, "seconds": plan.seconds, "repeats": plan.repeats,
                       "raw": [[b, n] for b, n in plan.raw],
                       "cells": {mode_name(*k): [[b, n] for b, n in v] for k, v in plan.cells.items()},
                       "peers": plan.peers, "peer_pairs": {k: mode_name(*v) for k, v in PEER_PAIRS.items()},
                       "histogram": HISTOGRAM, "segment_bytes": SEGMENT},
            "send": sends, "raw": raw, "consume": consume, "peers": peer_out, "ratios": ratios(sends, peer_out),
            "redis_benchmark": redis or {}, "raw_vs_redis": redis_ratios(raw, redis or {}), "errors": errors}


# ------------------------------------------------------------------------------------ report

def _cpu_summary(cpu: dict) -> str:
    groups: dict = {}
    for k, v in cpu.items():
        groups[k] = v
    parts = []
    for k in sorted(groups, key=lambda x: (x.split("/")[0] != "master", x)):
        if groups[k] >= 0.05:
            parts.append(f"{k} {groups[k]:,.1f}")
    return ", ".join(parts)


def markdown(M: dict, L: dict) -> str:
    cfg = M["config"]
    lines = ["", f"## Mode matrix (the project's client, broker.client, and the raw driver build/loadgen; medians of "
             f"{cfg['repeats']} repeat(s) "
             f"of {cfg['seconds']:g} s cells)", "",
             f"Latency per send (call to SEND_OK) by {cfg['histogram']}. CPU: seconds per million messages of each "
             f"process over the clock (master, its service processes, slave, name server, this client process). "
             f"Limits of this run: loopback {L['loopback_GiBps']:.2f} GiB/s, RTT p50 {L['loopback_rtt_p50_us']:.0f} us; "
             f"fdatasync p50 {L['fdatasync_p50_us']:.0f} us; seq durable {L['seq_durable_MBps']:.0f} MB/s; "
             f"memcpy {L['memcpy_GiBps']:.2f} GiB/s. `% of limit`: throughput as % of loopback bandwidth / "
             f"sequential durable write; latency: the floor's share of p50 (RTT, and fdatasync for SYNC_FLUSH; "
             f"100 % = at the floor).", "",
             *[f"- **failed**: {e}" for e in M.get("errors", [])], "",
             "| mode | body | in flight | msgs/s | MB/s | p50 / p99 / p99.9 us | CPU s per M msgs | repl lag p50 / p99 KiB "
             "| % of limit |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in M["send"].items():
        lim = r["limits"]
        lag = (f"{r['lag_p50_bytes'] / 1024:,.1f} / {r['lag_p99_bytes'] / 1024:,.1f}" if "lag_p50_bytes" in r else "-")
        pct = (f"{lim['pct_loopback_bw']:.2g} % loopback, {lim['pct_seq_durable']:.2g} % seq durable; "
               f"RTT {lim['rtt_pct_of_p50']:.2g} % of p50")
        if "fdatasync_pct_of_p50" in lim:
            pct += f", fdatasync {lim['fdatasync_pct_of_p50']:.2g} % of p50"
        lines.append(f"| {mode_name(r['flush'], r['replication'])} | {body_label(r['body'])} | {r['in_flight']} | "
                     f"{r['msgs_per_s']:,.0f} | {r['mb_per_s']:,.1f} | {r['p50_us']:,.0f} / {r['p99_us']:,.0f} / "
                     f"{r['p999_us']:,.0f} | {r['cpu_s_per_M_total_server']:,.1f} server ({_cpu_summary(r['cpu_s_per_M'])}) "
                     f"| {lag} | {pct} |")
    if M.get("raw"):
        lines += ["", "| raw send (build/loadgen, SEND_MESSAGE_V2, one connection) | body | in flight | msgs/s | "
                  "p50 / p99 / p99.9 us | CPU-us per msg by process | loadgen CPU-us/msg | vs Redis |",
                  "|---|---|---|---|---|---|---|---|"]
        vs = {r["project"]: r for r in M.get("raw_vs_redis", {}).values()}
        for name, r in M["raw"].items():
            cpu = ", ".join(f"{k} {v:.1f}" for k, v in r["cpu_us_per_msg"].items() if k == "total" or v >= 0.05)
            if r.get("errors"):
                cpu += f"; **{r['errors']:,} errors** {r.get('error_codes')}"
            peer = vs.get(name)
            lines.append(f"| {mode_name(r['flush'], r['replication'])} | {body_label(int(r['body']))} | "
                         f"{int(r['in_flight'])} | {r['msgs_per_s']:,.0f} | {r['p50_us']:,.0f} / "
                         f"{r['p99_us']:,.0f} / {r['p999_us']:,.0f} | {cpu} | {r['loadgen_cpu_us_per_msg']:.2f} | "
                         + (f"**{peer['throughput_ratio']:.2f}x** {peer['peer']} ({peer['peer_msgs_per_s']:,.0f} msgs/s)"
                            if peer else "-") + " |")
    if M.get("redis_benchmark"):
        lines += ["", "| peer (same run) | msgs/s | p50 / p99 us | redis-server CPU-us/msg | redis-benchmark CPU-us/msg |",
                  "|---|---|---|---|---|"]
        for name, r in M["redis_benchmark"].items():
            lines.append(f"| {name} | {r['msgs_per_s']:,.0f} | {r['p50_us']:,.0f} / {r['p99_us']:,.0f} | "
                         f"{r['server_cpu_us_per_msg']:.1f} | {r['driver_cpu_us_per_msg']:.2f} |")
    if M["consume"]:
        lines += ["", "| consume (PullConsumer.pull, 256/pull, 4 queues) | msgs/s | MB/s of bodies | p50 / p99 us per pull "
                  "| CPU s per M msgs | % of limit |", "|---|---|---|---|---|---|"]
        for name, r in M["consume"].items():
            lines.append(f"| {name} | {r['msgs_per_s']:,.0f} | {r['mb_per_s']:,.1f} | {r['p50_us']:,.0f} / "
                         f"{r['p99_us']:,.0f} | {_cpu_summary(r['cpu_s_per_M'])} | {r['pct_loopback_bw']:.1f} % loopback, "
                         f"{r['pct_memcpy']:.2f} % memcpy |")
    P = M["peers"]
    if P.get("available") or P.get("cells"):
        lines += ["", "## Peers (same run, same body sizes and in-flight counts; ratio = project / peer)", ""]
        for peer, why in P.get("available", {}).items():
            if why:
                lines.append(f"- **{peer} skipped**: {why}")
        for s in P.get("skipped", []):
            lines.append(f"- {s['peer']} {s['mode']}"
                         + (f" {body_label(s['body'])} x{s['in_flight']}" if "body" in s else "")
                         + f" skipped: {s['reason']}")
        for k, d in (P.get("driver") or {}).items():
            lines.append(f"- driver {k}: {d}")
        lines += ["", "| project cell | peer cell | project msgs/s | peer msgs/s | throughput ratio | p50 ratio | "
                  "p99 ratio | p99.9 ratio | server CPU/msg ratio |", "|---|---|---|---|---|---|---|---|---|"]
        for name, r in M["ratios"].items():
            pc = name.split(" / ", 1)[1]
            lines.append(f"| {r['project']} | {pc} | {r['project_msgs_per_s']:,.0f} | {r['peer_msgs_per_s']:,.0f} | "
                         f"**{r['throughput_ratio']:.2f}** | {r['p50_ratio']:.2f} | {r['p99_ratio']:.2f} | "
                         f"{r['p999_ratio']:.2f} | {r['server_cpu_ratio']:.2f} |")
        lines += ["", "| peer cell | msgs/s | MB/s | p50 / p99 / p99.9 us | server CPU s per M msgs |", "|---|---|---|---|---|"]
        for name, r in P.get("cells", {}).items():
            lines.append(f"| {name} | {r['msgs_per_s']:,.0f} | {r['mb_per_s']:,.1f} | {r['p50_us']:,.0f} / "
                         f"{r['p99_us']:,.0f} / {r['p999_us']:,.0f} | {r['server_cpu_s_per_M']:,.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.matrix", description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--workdir", default=os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench", "work"))
    a = ap.parse_args(argv)
    from bench import limits
    os.makedirs(a.workdir, exist_ok=True)
    L = limits.measure_all(a.workdir, quick=True)
    import uvloop
    M = run(Plan.make(a.full, a.seconds, not a.no_peers), a.workdir, L, uvloop.run)
    print(markdown(M, L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
