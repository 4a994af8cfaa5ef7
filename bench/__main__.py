"""`python -m bench` (`make bench`): machine limits, kernel micro-benchmarks, store figures, the
mode matrix through the project's client and peer brokers, in one run, side by side, with the
milestones' targets marked met or missed.

    python -m bench                     # quick subset (make bench), < 5 minutes on the 2-core VMs, plus
                                        # about 4 for the java section
    python -m bench --full              # everything: whole matrix, 3 repeats, both peers, full-size cells
    python -m bench --only matrix,peers # some sections (kernels, store, network, ha, dledger, controller,
                                        # reliable, java, matrix, peers)
    python -m bench --only java --no-docs   # ours beside Apache RocketMQ's Java broker alone
    python -m bench --compare OLD.json  # after the run, what moved (figure, old, new, % change)
    python -m bench --compare OLD.json NEW.json   # compare two results files, no run
    python -m bench --out DIR           # results (JSON + Markdown + PNG plots); default bench/results/
    python -m bench --no-docs           # do not publish the report to docs/bench/

A run of every section (make bench, --full) publishes its report to docs/bench/latest.md and its
plots to docs/bench/*.png (bench/docs.py), with the run's date, commit and machine limits: the
figures in docs/ are always the last run's. Each section after the limits runs on its own: one that
fails (an exception, a missing dependency, a server that did not start) is reported as failed, with
its reason, in the report (its traceback in failed-<section>.txt beside it), the other sections'
figures are written all the same, and the run exits 1.

Order: 1. limits (bench.limits.measure_all on the store's filesystem), 2. the kernel suite
(bench/test_kernels_bench.py under pytest-benchmark, in a subprocess; every kernel beside a memcpy
benchmark of the same bytes), 3. in-process put and put_batch throughput, SYNC_FLUSH latency by
writer count, reput rate (kernel path and service end to end), 4. network cells: a `broker serve`
process on loopback driven over the remoting protocol by the C load generator build/loadgen
(bench/loadgen.c; CPU-µs per message of each broker process) and through the project's client
(bench/network_bench.py), beside redis-benchmark's XADD against Redis with appendfsync everysec
and always (bench/redis_benchmark.py; skipped with --no-peers), 5. HA cells
(bench/ha_bench.py), 5b. DLedger mode (bench/dledger_bench.py): a three-member group's throughput
through the project's client and the write outage over 10 kill -9s of the leader, with DLedger's
defaults and with heartBeatTimeIntervalMs=500 (about 3 minutes), 5c. controller mode
(bench/controller_bench.py): a two-broker group given its roles by three controllers,
allAckInSyncStateSet=true (two copies per ack), its throughput through the same client cell as
DLedger's, and the write outage over 10 kill -9s of the master with RocketMQ's default intervals and
with short ones (about 1 minute), 5d. broker.reliable (bench/reliable_bench.py): the idempotent consumer
on durable PostgreSQL and on SQLite, with and without Redis, beside the plain PushConsumer of the
same run, and the outbox's sends (about 1 minute), 5e. ours against Apache RocketMQ 5.5.0's Java broker and proxy
(bench/java_bench.py, JVMs started by bench/java_peer.py): the same build/loadgen shapes (64 and 256
pipelined, 50 connections x 1, batches of 32, pull) under ASYNC_FLUSH, SYNC_FLUSH and SYNC_MASTER +
slave (--full: ASYNC_MASTER + slave and DLedger's three members too), and SendMessage through our
gRPC front against the Java proxy, each side warmed until HotSpot's compiler threads are quiet;
ours/Java per cell (about 4 minutes quick), 6. the mode matrix (bench/matrix.py): flushDiskType x {single master,
ASYNC_MASTER + slave, SYNC_MASTER + slave} x body x in flight, name server / master / slave
processes driven by broker.client, with CPU per process, replication lag and consume throughput,
then the peers (bench/peers.py: Redis Streams, NATS JetStream) as ratios project/peer. The quick
default runs each mode once (1 KiB, 64 in flight, plus 1 in flight for ASYNC_FLUSH single master,
2 s cells, one peer); --full runs 128 B / 1 KiB / 16 KiB x 1 / 64 in flight, medians of 3 repeats of
5 s, both peers. A line is printed per cell as it finishes (and `[k/N] cell ... eta` on stderr
during the matrix); the table comes last, then PNG plots are written next to the JSON
(bench/plots.py).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The services log at INFO on every stop; a benchmark only wants their warnings and errors.
os.environ.setdefault("BROKER_LOG_LEVEL", "WARNING")

TARGETS = {
    "put_batch_1k_async": 1_000_000,     # msgs/s
    "put_1k_async": 300_000,             # msgs/s
    "sync_scaling_64_over_1": 20.0,      # throughput(64 writers) / throughput(1 writer)
    "sync_p99_over_fdatasync_p99": 3.0,  # at most
    "reput_records_per_s": 2_000_000,
    # broker-daemon milestone, over loopback, 1 KiB bodies; each is shown twice: the raw remoting
    # driver (the broker alone) and the project's client (broker.client, end to end)
    "net_send_async": 150_000,           # msgs/s, 64 in flight
    "net_batch_async": 500_000,          # msgs/s, 320 batches of 32
    "net_send_sync": 100_000,            # msgs/s, 64 in flight
    "net_pull_MBps": 1_000,              # MB/s
    # HA milestone
    "ha_sync_over_async": 0.5,           # SYNC_MASTER throughput / ASYNC_MASTER, 64 in flight
    "ha_sync_added_p50_us": 300,         # at most
    "ha_catch_up_MBps": 1_000,           # fresh slave
    # controller mode (issue 18): the write outage after a kill -9 of the master, every kill, with
    # scanInactiveMasterInterval and the heartbeats at RocketMQ's defaults or lower
    "controller_outage_s": 3.0,          # at most
    # broker.reliable (issue 19): the idempotent consumer on durable PostgreSQL, beside the plain
    # PushConsumer of the same run
    "reliable_pg_msgs_per_s": 20_000,
    "reliable_pg_vs_plain": 0.3,
    # real load shapes (issue 31): 50 connections x 1 in flight, beside redis-benchmark -c 50 -P 1
    "conns50_vs_redis": 1.0,             # at least, in both flush modes
    "conns50_cpu_us": 10.0,              # at most, every broker process together
    "pipelined_vs_redis": 1.0,           # 64 in flight, beside -c 50 -P 16
    "pipelined_cpu_us": 4.0,             # at most
    "lone_p50_over_rtt": 3.0,            # ASYNC_FLUSH; SYNC_FLUSH: fdatasync p50 + 3 RTT
    "crowd_rss_mib": 100.0,              # 5,000 connected clients, at most
    "crowd_vs_alone": 0.9,               # the 50 senders beside them / alone, at least
    # the gRPC front (issue 32): SendMessage through the broker's own front driven by h2load (a C
    # driver: grpc.aio's own ~50 CPU-us per call bounded the grpc.aio cells), beside the remoting
    # client's send in the same run
    "grpc_send_vs_remoting": 0.5,        # at least
    # DLedger (issue 31): three members beside the matrix's SYNC_MASTER + slave cell, the two cells
    # run side by side (one right after the other, twice: cells minutes apart met different loads)
    "dledger_vs_sync_master": 0.8,       # at least
    "dledger_leader_cpu_us": 15.0,       # at most: the leader's processes per message
    "grpc_receive_vs_pull": 0.25,        # at least: ReceiveMessage + AckMessage (build/grpc_receive, a C driver) beside
                                         # the remoting pull (build/loadgen pull) of the same stored messages
    "grpc_front_share_cpu_us": 15.0,     # at most: the broker process per call, less a remoting send's
    "grpc_idle_rss_mib": 64.0,           # 1,000 idle 5.x clients, each with its Telemetry stream open, at most
    "grpc_held_cpu_ms_per_s": 1.0,       # 200 long-polling receives held at once "cost no CPU while they wait":
                                         # at most 0.1 % of a core (the process's own timers included)
    "grpc_vs_java_proxy_cpu": 1.0,       # at most: ours (`broker proxy` + broker) / the Java proxy + broker,
                                         # CPU-us per message, each gRPC pair of the java section
}


def say(msg: str) -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------------------------ filesystem

def _mount_of(path: str) -> tuple[str, str, str]:
    """(mount point, fs type, device) of the filesystem holding `path`."""
    path = os.path.realpath(path)
    best = ("/", "?", "?")
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, mnt, fstype = line.split()[:3]
            mnt = mnt.replace("\\040", " ")
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
                best = (mnt, fstype, dev)
    return best


def check_workdir(workdir: str) -> dict:
    mnt, fstype, dev = _mount_of(workdir)
    info = {"workdir": workdir, "mount": mnt, "fstype": fstype, "device": dev,
            "same_fs_as_repo": os.stat(workdir).st_dev == os.stat(REPO).st_dev}
    if fstype in ("tmpfs", "ramfs", "overlay"):
        say(f"WARNING: {workdir} is on {fstype}: disk figures will not be the disk's")
    return info


# --------------------------------------------------------------------------------------- kernels

def run_kernel_suite(out_dir: str, quick: bool) -> dict:
    """bench/test_kernels_bench.py under pytest-benchmark, in a subprocess; medians and extra_info."""
    js = os.path.join(out_dir, "kernels-benchmark.json")
    cmd = [sys.executable, "-m", "pytest", os.path.join("bench", "test_kernels_bench.py"), "--benchmark-only",
           "-q", "-p", "no:cacheprovider", f"--benchmark-json={js}", "--benchmark-columns=min,median,max,rounds"]
    if quick:
        cmd += ["--benchmark-max-time=0.25", "--benchmark-min-rounds=3"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    with open(os.path.join(out_dir, "kernels-pytest.txt"), "w") as f:
        f.write(p.stdout + p.stderr)
    if p.returncode != 0:
        say(p.stdout[-4000:] + p.stderr[-2000:])
        raise RuntimeError(f"kernel benchmark suite failed (exit {p.returncode}); see kernels-pytest.txt")
    with open(js) as f:
        data = json.load(f)
    out = {}
    # each group has a test_memcpy_* benchmark of the same bytes under the same harness
    ref = {b.get("group"): b["stats"]["median"] for b in data["benchmarks"] if b["name"].startswith("test_memcpy_")}
    for b in data["benchmarks"]:
        fig = dict(b["extra_info"])
        fig["median_s"] = b["stats"]["median"]
        fig["rounds"] = b["stats"]["rounds"]
        fig["group"] = b.get("group")
        if b.get("group") in ref and not b["name"].startswith("test_memcpy_"):
            fig["memcpy_bench_s"] = ref[b["group"]]
            fig["x_memcpy_bench"] = fig["median_s"] / ref[b["group"]]
        out[b["name"]] = fig
        say(f"  kernel {b['name']}: median {fig['median_s'] * 1e6:,.2f} us, "
            f"{fig.get('bytes_per_s', math.nan) / 1e9:.2f} GB/s, {fig.get('records_per_s', math.nan):,.0f} records/s, "
            + (f"the memcpy reference of group {fig['group']}" if b["name"].startswith("test_memcpy_")
               else f"{fig.get('x_memcpy_bench', math.nan):.2f}x the memcpy benchmark of its group"))
    out["_suite_s"] = time.perf_counter() - t0
    return out


# ---------------------------------------------------------------------------------------- report

def _fmt_rate(v: float) -> str:
    return f"{v:,.0f}"


def _verdict(value: float, target: float, higher_is_better: bool = True) -> str:
    if value is None or not math.isfinite(value):
        return "not measured"
    if higher_is_better:
        if value >= target:
            return f"**met** ({value / target:.2f}x target)"
        return f"**missed** by {100 * (1 - value / target):.0f} % ({value / target:.2f}x target)"
    if value <= target:
        return f"**met** ({value:.2f} <= {target:g})"
    return f"**missed** by {100 * (value / target - 1):.0f} % ({value:.2f} > {target:g})"


def evaluate(figs: dict) -> list[dict]:
    L, S = figs["limits"], figs.get("store") or {}
    out = []

    def add(name, value, target, unit, higher=True, where=""):
        out.append({"target": name, "value": value, "threshold": target, "unit": unit, "where": where,
                    "met": (value >= target) if higher else (value <= target),
                    "verdict": _verdict(value, target, higher)})

    for key, label, target in (("put_batch ASYNC_FLUSH 1KiB", "put_batch 1 KiB ASYNC_FLUSH >= 1,000,000 msgs/s",
                                 "put_batch_1k_async"),
                                ("put ASYNC_FLUSH 1KiB", "single put >= 300,000 msgs/s (1 KiB, ASYNC_FLUSH)", "put_1k_async"),
                                ("put ASYNC_FLUSH 128B", "single put >= 300,000 msgs/s (128 B, ASYNC_FLUSH)", "put_1k_async")):
        if key in S:  # absent when the store section was not run (--only)
            add(label, S[key]["msgs_per_s"], TARGETS[target], "msgs/s", where=key)
    w1, w64 = S.get("sync latency 1 writers 1KiB"), S.get("sync latency 64 writers 1KiB")
    if w1 and w64:
        add("SYNC_FLUSH throughput(64 writers) >= 20x throughput(1 writer)",
            w64["msgs_per_s"] / w1["msgs_per_s"], TARGETS["sync_scaling_64_over_1"], "x")
        add("SYNC_FLUSH p99 (64 writers) <= 3x fdatasync p99", w64["p99_us"] / L["fdatasync_p99_us"],
            TARGETS["sync_p99_over_fdatasync_p99"], "x", higher=False)
    k = next((v for n, v in S.items() if n.startswith("reput kernel")), None)
    e = next((v for n, v in S.items() if n.startswith("reput service")), None)
    if k:
        add("reput >= 2,000,000 records/s (kernel path: scan + dispatch)", k["records_per_s"],
            TARGETS["reput_records_per_s"], "records/s")
    if e:
        add("reput >= 2,000,000 records/s (service, end to end while put_batch writes)", e["records_per_s"],
            TARGETS["reput_records_per_s"], "records/s")
    # the message index must not take the reput below the same target (records with KEYS + UNIQ_KEY)
    for name, f in S.items():
        if name.startswith("reput kernel scan+dispatch+index"):
            which = "fresh index" if "fresh index" in name else "index in use"
            add(f"reput with the index >= 2,000,000 records/s (kernel path, {which})", f["records_per_s"],
                TARGETS["reput_records_per_s"], "records/s", where=name)
        elif name.startswith("reput service end-to-end keyed, index on"):
            add("reput with the index >= 2,000,000 records/s (service, end to end)", f["records_per_s"],
                TARGETS["reput_records_per_s"], "records/s", where=name)
    N = figs.get("network") or {}
    for key, target, label, field in (
            ("ASYNC_FLUSH send", "net_send_async", "network send >= 150,000 msgs/s (ASYNC_FLUSH, 64 in flight)",
             "msgs_per_s"),
            ("ASYNC_FLUSH batch", "net_batch_async", "network batch >= 500,000 msgs/s (ASYNC_FLUSH, 320 x 32)",
             "msgs_per_s"),
            ("SYNC_FLUSH send", "net_send_sync", "network send >= 100,000 msgs/s (SYNC_FLUSH, 64 in flight)",
             "msgs_per_s"),
            ("ASYNC_FLUSH pull", "net_pull_MBps", "pull >= 1 GB/s", "mb_per_s"),
            ("ASYNC_FLUSH client send", "net_send_async",
             "client send >= 150,000 msgs/s (ASYNC_FLUSH, Producer.send, 64 in flight)", "msgs_per_s"),
            ("ASYNC_FLUSH client batch", "net_batch_async",
             "client batch >= 500,000 msgs/s (ASYNC_FLUSH, Producer.send_batch of 32)", "msgs_per_s"),
            ("SYNC_FLUSH client send", "net_send_sync",
             "client send >= 100,000 msgs/s (SYNC_FLUSH, Producer.send, 64 in flight)", "msgs_per_s"),
            ("ASYNC_FLUSH client pull", "net_pull_MBps", "client pull >= 1 GB/s (PullConsumer.pull)", "mb_per_s")):
        f = next((v for n, v in N.items() if n.startswith(key)), None)
        if f:
            add(label, f[field], TARGETS[target], "MB/s" if field == "mb_per_s" else "msgs/s")
    vs_redis = figs.get("network_vs_redis") or {}
    for flush, fsync in (("ASYNC_FLUSH", "everysec"), ("SYNC_FLUSH", "always")):
        for shape, key, what in (("send 1 KiB, 50 connections x1 (", "conns50", "50 connections x 1 in flight"),
                                 ("send 1 KiB x64 in flight (", "pipelined", "64 in flight")):
            name = next((n for n in N if n.startswith(f"{flush} {shape}")), None)
            if name is None:
                continue
            r = vs_redis.get(name)
            if r:
                add(f"{what} >= 1.0x Redis appendfsync {fsync} at -P {r['redis_pipeline']} ({flush})",
                    r["throughput_ratio"], TARGETS[f"{key}_vs_redis"], "x", where=name)
            total = (N[name].get("cpu_us_per_msg_by_process") or {}).get("total")
            if total is not None:
                add(f"{what}: the broker's processes <= {TARGETS[f'{key}_cpu_us']:g} CPU-us/msg ({flush})", total,
                    TARGETS[f"{key}_cpu_us"], "us", higher=False, where=name)
        lone = next((f for n, f in N.items() if n.startswith(f"{flush} send 1 KiB, 1 in flight")), None)
        if lone is not None:
            rtt = L["loopback_rtt_p50_us"]
            if flush == "ASYNC_FLUSH":
                add("lone send p50 <= 3x the loopback RTT (ASYNC_FLUSH)", lone["p50_us"] / rtt,
                    TARGETS["lone_p50_over_rtt"], "x RTT", higher=False)
            else:
                add("lone send p50 <= fdatasync p50 + 3x RTT (SYNC_FLUSH)", lone["p50_us"],
                    L["fdatasync_p50_us"] + TARGETS["lone_p50_over_rtt"] * rtt, "us", higher=False)
    crowd = next((f for n, f in N.items() if "connected clients" in n), None)
    if crowd is not None:
        add(f"{crowd['crowd']:,} connected clients add <= 100 MiB to the broker's RSS (RssAnon)", crowd["rss_added_mib"],
            TARGETS["crowd_rss_mib"], "MiB", higher=False)
        if "vs_conns50_alone" in crowd:
            add("50 senders beside them within 10 % of the 50 alone", crowd["vs_conns50_alone"],
                TARGETS["crowd_vs_alone"], "x")
    grpc = next(((n, f) for n, f in N.items() if n.startswith("ASYNC_FLUSH grpc send 1 KiB, h2load")), None)
    remoting = next((f for n, f in N.items() if n.startswith("ASYNC_FLUSH client send 1 KiB x64")), None)
    if grpc is not None and remoting is not None:
        name, g = grpc
        add("gRPC SendMessage >= 50 % of the remoting client's send rate (h2load, the broker's local front)",
            g["msgs_per_s"] / remoting["msgs_per_s"], TARGETS["grpc_send_vs_remoting"], "x", where=name)
        per_g = (g.get("cpu_us_per_msg_by_process") or {}).get("broker")
        per_r = (remoting.get("cpu_us_per_msg_by_process") or {}).get("broker")
        if per_g is not None and per_r is not None:
            add("the front's share <= 15 CPU-us per SendMessage (the broker process per call, less a remoting send's)",
                per_g - per_r, TARGETS["grpc_front_share_cpu_us"], "us", higher=False, where=name)
    recv = next(((n, f) for n, f in N.items() if n.startswith("ASYNC_FLUSH grpc receive+ack")
                 and "build/grpc_receive" in n), None)
    pull = next((f for n, f in N.items() if n.startswith("ASYNC_FLUSH pull 256/request")), None)
    if recv is not None and pull is not None:
        name, g = recv
        add("gRPC ReceiveMessage + AckMessage >= 25 % of the remoting pull rate (build/grpc_receive, the broker's "
            "local front)", g["msgs_per_s"] / pull["msgs_per_s"], TARGETS["grpc_receive_vs_pull"], "x", where=name)
    idle = next((f for n, f in N.items() if "idle_streams" in f), None)
    if idle is not None:
        add(f"{idle['idle_streams']:,} idle 5.x clients (Telemetry streams open) add <= 64 MiB to the process serving "
            f"them (RssAnon)", idle["idle_rss_added_mib"], TARGETS["grpc_idle_rss_mib"], "MiB", higher=False)
        if "receives_held" in idle:
            add(f"{idle['receives_held']} long-polling receives held at once cost no CPU while they wait (<= 1 ms "
                f"per s in the process serving them)", idle["held_cpu_ms_per_s"], TARGETS["grpc_held_cpu_ms_per_s"],
                "ms/s", higher=False)
    for c in (figs.get("java") or {}).get("cells") or []:
        if c.get("mode") == "gRPC front / proxy":
            add(f"gRPC front ahead of Apache RocketMQ's Java proxy per core: {c['label']} (CPU-us/msg, ours/Java, "
                f"both in cluster mode before their brokers)", c["cpu_ratio"], TARGETS["grpc_vs_java_proxy_cpu"], "x",
                higher=False, where=c["label"])
    T = figs.get("timer") or {}
    if T:
        add("timer enqueue >= 100,000 timers/s", T["enqueue"]["enqueued_per_s"], 100_000, "timers/s")
        add("timer delivery p99 lateness <= 1,000 ms", T["precision"]["p99_ms"], 1000, "ms", higher=False)
        add("timer delivered never early (earliest delivery at or after its time)",
            T["precision"]["min_ms"] + 1, 1, "ms after its time + 1")
        if T["enqueue"]["timers"] >= 1_000_000:
            add("1,000,000 timers pending add <= 64 MiB to the broker and its services (RssAnon)", T["enqueue"]["rss_added_mib"], 64, "MiB",
                higher=False)
    D = figs.get("dledger") or {}
    pairs = D.get("beside_sync_master") or []
    if pairs:
        add(f"DLedger, three members >= 0.8x SYNC_MASTER + slave's throughput (64 in flight; the two cells side by "
            f"side, {len(pairs)} pairs, their sums)", sum(r["dledger_msgs_per_s"] for r in pairs)
            / sum(r["sync_master_msgs_per_s"] for r in pairs), TARGETS["dledger_vs_sync_master"], "x")
    leader = [v for k, v in (D.get("throughput") or {}).get("cpu_us_per_msg", {}).items() if "(" in k]
    if leader:
        add("DLedger leader <= 15 CPU-us per message (64 in flight)", leader[0], TARGETS["dledger_leader_cpu_us"],
            "us", higher=False)
    H = figs.get("ha") or {}
    if H:
        add("SYNC_MASTER >= 50% of ASYNC_MASTER throughput (64 in flight)", H["sync_vs_async"],
            TARGETS["ha_sync_over_async"], "x")
        add("SYNC_MASTER adds <= 300 us p50 (64 in flight)", H["sync_added_p50_us"], TARGETS["ha_sync_added_p50_us"],
            "us", higher=False)
        add("SYNC_MASTER adds <= 300 us p50 (1 in flight)", H["sync_added_p50_us_one"],
            TARGETS["ha_sync_added_p50_us"], "us", higher=False)
        add("fresh slave catch-up >= 1 GB/s", max(c["MBps"] for c in H["catch_up"]), TARGETS["ha_catch_up_MBps"],
            "MB/s")
    R = figs.get("reliable") or {}
    for r in R.get("consume", []):
        if r["consumer"] == "idempotent" and r["store"] == "postgresql":
            where = f"reliable postgresql redis={'yes' if r['redis'] else 'no'}"
            add(f"idempotent consumer on PostgreSQL >= 20,000 msgs/s ({where})", r["msgs_per_s"],
                TARGETS["reliable_pg_msgs_per_s"], "msgs/s", where=where)
            add(f"idempotent consumer on PostgreSQL >= 0.3x the plain PushConsumer ({where})", r["vs_plain"],
                TARGETS["reliable_pg_vs_plain"], "x", where=where)
    C = figs.get("controller") or {}
    for name, o in (C.get("outage") or {}).items():
        add(f"controller mode: write outage after kill -9 of the master <= 3 s, every one of {o['kills']} kills "
            f"({name}: {o.get('settings', '')})", o["outage_max_s"], TARGETS["controller_outage_s"], "s",
            higher=False, where=f"controller {name}")
    return out


def network_vs_redis(N: dict, NP: dict) -> dict:
    """Each send cell of the network section beside redis-benchmark's XADD of the same run:
    ASYNC_FLUSH against appendfsync everysec, SYNC_FLUSH against appendfsync always; the cells of
    many connections with one request each against `-c 50 -P 1`, the others against `-P 16`."""
    from bench.redis_benchmark import cell_name
    out = {}
    for name, f in N.items():
        flush, _, rest = name.partition(" ")
        if not (rest.startswith("send ") or rest.startswith("client send ")) or "1 in flight" in rest \
                or "TLS" in rest:
            continue
        fsync = "everysec" if flush == "ASYNC_FLUSH" else "always"
        peer_name = cell_name(fsync, pipeline=1 if "50 connections x1" in rest else 16)
        peer = NP.get(peer_name)
        if peer and peer["msgs_per_s"]:
            out[name] = {"redis": peer_name, "redis_pipeline": peer["pipeline"], "redis_fsync": fsync, "project_msgs_per_s": f["msgs_per_s"],
                         "redis_msgs_per_s": peer["msgs_per_s"],
                         "throughput_ratio": f["msgs_per_s"] / peer["msgs_per_s"],
                         "p50_ratio": f["p50_us"] / peer["p50_us"], "p99_ratio": f["p99_us"] / peer["p99_us"]}
    return out


def _outage_cell(o: dict) -> str:
    lo = f"min {o['outage_min_s']:.2f} s, " if "outage_min_s" in o else ""
    return f"{lo}p50 {o['outage_p50_s']:.2f} s, max {o['outage_max_s']:.2f} s over {o['kills']} kills"


def _from_kill(o: dict) -> str:
    if "from_kill_p50_s" not in o:
        return ""
    return f"kill to the first SEND_OK: p50 {o['from_kill_p50_s']:.2f} s, max {o['from_kill_max_s']:.2f} s"


def _cpu_parts(f: dict, mean_key: str) -> str:
    """How bench.grpc_idle read the CPU figure of its window: the median of the window's parts
    (the steady cost) and the window's mean (one housekeeping burst moves it)."""
    if mean_key not in f:
        return ""
    from bench.grpc_idle import PART_S
    return f"; median of the window's {PART_S} s parts, its mean {f[mean_key]:.1f} ms per s"


def _cpu_by_process(by_process: dict | None) -> str:
    """"CPU-us/msg broker 3.1, flush 0.4, ..., total 5.2" (the processes that spent anything)."""
    if not by_process:
        return ""
    return "CPU-us/msg " + ", ".join(f"{k} {v:.1f}" for k, v in by_process.items() if k == "total" or v >= 0.05)


def markdown(figs: dict) -> str:
    L, K, S, meta = figs["limits"], figs.get("kernels") or {}, figs.get("store") or {}, figs["meta"]
    memcpy_Bps = L["memcpy_GiBps"] * (1 << 30)
    fsync_p99 = L["fdatasync_p99_us"]
    rows: list[tuple[str, str, str, str]] = []

    def row(fig, value, limit="", vs=""):
        rows.append((fig, value, limit, vs))

    # limits
    row("**machine limits**", "", "", "")
    row("memcpy (numpy 256 MiB)", f"{L['memcpy_GiBps']:.2f} GiB/s", "anchor 10.1 GiB/s")
    row("4 KiB mmap write + fdatasync", f"p50 {L['fdatasync_p50_us']:.0f} us, p99 {fsync_p99:.0f} us, "
        f"p99.9 {L['fdatasync_p999_us']:.0f} us", "anchor p50 140-180, p99 250-270 us",
        f"{L['fdatasync_per_s']:,.0f} syncs/s (1 thread)")
    for key, label in (("broker_sync", "same, on a SYNC_FLUSH segment the broker made (16 KiB pwrite warm-up)"),
                       ("broker_async", "same, on an ASYNC_FLUSH segment the broker made (2 MiB pwrite warm-up)"),
                       ("rocketmq_map_touch", "same, segment warmed as RocketMQ (a zero per page via the map)"),
                       ("madv_random_touch", "same, map touch with MADV_RANDOM")):
        sp = L.get("segment_probe", {}).get(key)
        if sp:
            kib = sp.get("device_KiB_per_sync")
            row(label, f"p50 {sp['p50_us']:.0f} us, p99 {sp['p99_us']:.0f} us; "
                f"stores through the map {sp['map_write_MiBps']:,.0f} MiB/s",
                f"memcpy {L['memcpy_GiBps']:.2f} GiB/s",
                f"{sp['per_s']:,.0f} syncs/s" + (f"; device wrote {kib:,.1f} KiB per sync" if kib is not None else ""))
    row("sequential durable write", f"{L['seq_durable_MBps']:.0f} MB/s", "anchor 450-610 MB/s")
    if "first_touch_us_per_KiB" in L:
        row("stores into a new file's pages through a map (page cache growing)",
            f"{L['first_touch_us_per_KiB']:.2f} CPU-us per KiB",
            f"the same pages again {L['touched_us_per_KiB']:.2f} CPU-us per KiB",
            "paid per KiB stored by any log while its page cache grows (the broker's warm-ahead thread)")
    row("loopback TCP", f"{L['loopback_GiBps']:.2f} GiB/s; RTT p50 {L['loopback_rtt_p50_us']:.0f} us, "
        f"p99 {L['loopback_rtt_p99_us']:.0f} us", "anchor 2.4-2.6 GiB/s; 24 (45) us")

    # kernels
    row("**kernels** (pytest-benchmark medians, cache-warm)", "", "", "")
    names = {"test_encode_record_1k": "encode_record 1 KiB", "test_encode_batch_256x1k": "encode_batch 256 x 1 KiB",
             "test_scanner_scan_1k_segment": "Scanner.scan 8 MiB of 1 KiB records (no CRC)",
             "test_scanner_scan_1k_segment_crc": "Scanner.scan 8 MiB of 1 KiB records, CRC checked",
             "test_dispatch_read_request_4MiB": "ha.dispatch_read_request, 4 MiB of 32 KiB HA frames",
             "test_reallocate_byte_buffer_32k": "ha.reallocate_byte_buffer, 32 KiB tail to the front",
             "test_split_frames_1MiB": "remoting.split_frames, 1 MiB of SEND_MESSAGE_V2 frames (1 KiB bodies)"}
    for key, label in names.items():
        k = K.get(key)
        if not k or "bytes_per_s" not in k:
            continue
        ref = (f"memcpy benchmark of the same {k['bytes']:,} B: {k['memcpy_bench_s'] * 1e6:,.2f} us"
               if "memcpy_bench_s" in k else f"np.copyto of the same {k['bytes']:,} B: {k['memcpy_s'] * 1e6:,.2f} us")
        ratio = k.get("x_memcpy_bench", k["x_memcpy"])
        row(label, f"{k['median_s'] * 1e6:,.2f} us/call; {k['bytes_per_s'] / 1e9:.2f} GB/s; "
            f"{k['records_per_s']:,.0f} records/s", ref,
            f"**{ratio:.2f}x memcpy** time; {k['bulk_memcpy_pct']:.0f} % of bulk memcpy bandwidth")

    # put throughput
    row("**put throughput** (in-process MessageStore, 1 GiB segments, uvloop)", "", "", "")
    for name, f in S.items():
        if not name.startswith("put"):
            continue
        mode = "ASYNC" if "ASYNC" in name else "SYNC"
        how = ""
        if name.startswith("put_batch"):
            how = f" (batches of {f['batch']}" + (f", {f['tasks']} tasks)" if "tasks" in f else ")")
        elif "tasks" in f:
            how = f" ({f['tasks']} tasks)"
        value = f"{f['msgs_per_s']:,.0f} msgs/s; {f['MBps']:,.0f} MB/s"
        pct = 100 * f["MBps"] * 1e6 / memcpy_Bps
        if mode == "ASYNC":
            limit = f"memcpy {L['memcpy_GiBps']:.2f} GiB/s"
            vs = f"{pct:.1f} % of memcpy"
        else:
            limit = (f"fdatasync {L['fdatasync_per_s']:,.0f}/s; seq durable {L['seq_durable_MBps']:.0f} MB/s")
            vs = (f"{f['msgs_per_flush']:,.0f} msgs/flush ({f['flushes_observed'] / f['elapsed_s']:,.0f} flushes/s); "
                  f"{100 * f['MBps'] / L['seq_durable_MBps']:.0f} % of seq durable; {pct:.1f} % of memcpy")
            if "p99_us" in f:
                value += f"; p50 {f['p50_us']:,.0f} us p99 {f['p99_us']:,.0f} us"
        row(f"{name}{how}", value, limit, vs)

    # SYNC latency
    row("**SYNC_FLUSH latency** (1 KiB puts, each writer: t0; await put; record)", "", "", "")
    base = S.get("sync latency 1 writers 1KiB")
    for name, f in S.items():
        if not name.startswith("sync latency"):
            continue
        scale = f" = {f['msgs_per_s'] / base['msgs_per_s']:.1f}x one writer" if base else ""
        row(f"{f['tasks']} writer{'s' if f['tasks'] > 1 else ''}",
            f"p50 {f['p50_us']:,.0f} us, p99 {f['p99_us']:,.0f} us, p99.9 {f['p999_us']:,.0f} us; "
            f"{f['msgs_per_s']:,.0f} msgs/s{scale}",
            f"fdatasync p50 {L['fdatasync_p50_us']:.0f} us, p99 {fsync_p99:.0f} us",
            f"p99 = {f['p99_us'] / fsync_p99:.2f}x fdatasync p99; {f['msgs_per_flush']:.1f} msgs/flush; "
            f"timeouts {f['flush_timeouts']}")

    # reput
    row("**reput**", "", "", "")
    for name, f in S.items():
        if name.startswith("reput kernel"):
            row(f"{name} ({f['records']:,} records, {f['bytes'] / 1e6:,.0f} MB segment)",
                f"{f['records_per_s']:,.0f} records/s ({f['bytes'] / f['elapsed_s'] / 1e9:.2f} GB/s of log)",
                f"memcpy {L['memcpy_GiBps']:.2f} GiB/s",
                f"scan {f['scan_share_pct']:.0f} % / dispatch {100 - f['scan_share_pct']:.0f} % of the time; "
                f"scan alone {f['scan_only_records_per_s']:,.0f} records/s ({f['scan_only_GBps']:.1f} GB/s)"
                + (f"; {f['index_keys']:,} index keys" if f.get("index_keys") else ""))
        elif name.startswith("reput service"):
            row(f"{name} ({f['records']:,} records via put_batch, ASYNC_FLUSH)",
                f"{f['records_per_s']:,.0f} records/s (first write to last dispatch)",
                f"writer alone {f['writer_records_per_s']:,.0f} records/s",
                f"writes took {f['write_s']:.2f} s, dispatch done {f['dispatch_done_s']:.2f} s; "
                f"{f['left_when_writes_ended']:,} left at end of writes, drained at "
                + (f"{f['drain_records_per_s']:,.0f}/s" if math.isfinite(f["drain_records_per_s"]) else "n/a"))

    N = figs.get("network") or {}
    NP = figs.get("network_peers") or {}
    vs_redis = figs.get("network_vs_redis") or {}
    if N or NP:
        row("**network** (a `broker serve` process on loopback, 1 KiB bodies; `(build/loadgen)` cells: the C load "
            "generator bench/loadgen.c, one connection, pipelined; `client` cells: through the project's client, "
            "broker.client, routed by a name server; CPU-us/msg of each broker process over the clock; Redis: "
            "redis-benchmark in the same run)", "", "", "")
        for name, f in N.items():
            if "idle_streams" in f:  # no messages: what idle 5.x clients cost (bench/grpc_idle.py)
                row(name, f"broker RssAnon {f['rss_before_mib']:,.0f} MiB, {f['rss_with_mib']:,.0f} MiB with them: "
                    f"**+{f['idle_rss_added_mib']:,.1f} MiB**", "target: <= 64 MiB (issue 32)",
                    f"the broker's CPU while they idle: {f['idle_cpu_ms_per_s']:.1f} ms per s"
                    + _cpu_parts(f, "idle_cpu_mean_ms_per_s"))
                if "receives_held" in f:
                    from bench.grpc_idle import LONG_POLL_S, RECEIVERS
                    row(f"ASYNC_FLUSH {f['receives_held']} long-polling ReceiveMessage calls held at once on an empty "
                        f"topic ({RECEIVERS} connections; the broker's local front)",
                        f"the broker's CPU while they wait: **{f['held_cpu_ms_per_s']:.1f} ms per s**",
                        "target: no CPU while they wait (<= 1 ms per s; issue 32)",
                        f"{f['receives_answered_early']} answered before their {LONG_POLL_S} s timeout"
                        + _cpu_parts(f, "held_cpu_mean_ms_per_s"))
                continue
            by_process = f.get("cpu_us_per_msg_by_process")
            if by_process:
                cpu = _cpu_by_process(by_process)
            else:
                cpu = f"broker process {f['broker_cpu_us_per_msg']:.1f} CPU-us/msg"
            if "loadgen_cpu_us_per_msg" in f:
                cpu += f"; loadgen {f['loadgen_cpu_us_per_msg']:.2f}"
            if "driver_cores" in f:  # the official 5.x Python client (bench/py5_driver.py): its own CPU
                bound = f["driver_cpu_us_per_msg"] > 2 * f["front_cpu_us_per_msg"]
                cpu += (f"; the client's own CPU {f['driver_cpu_us_per_msg']:,.0f} CPU-us/msg, "
                        f"{f['driver_cores']:.2f} cores" + (" (**the client is the bound**: it spends "
                        f"{f['driver_cpu_us_per_msg'] / f['front_cpu_us_per_msg']:.0f}x the front's CPU "
                        f"a message)" if bound else ""))
            elif "driver_cpu_us_per_msg" in f:  # build/grpc_receive: its own CPU and the ack calls' latency
                cpu += (f"; driver {f['driver_cpu_us_per_msg']:.2f}; AckMessage p50 {f['ack_p50_us']:,.0f} us, "
                        f"p99 {f['ack_p99_us']:,.0f} us")
            if f.get("errors"):
                cpu += f"; **{f['errors']:,} errors** {f.get('error_codes')}"
            if "rss_added_mib" in f:
                cpu += (f"; broker RssAnon {f['rss_before_mib']:,.0f} MiB, {f['rss_crowd_mib']:,.0f} with the "
                        f"{f['crowd']:,} clients, {f['rss_crowd_busy_mib']:,.0f} after the senders: "
                        f"**+{f['rss_added_mib']:,.0f} MiB**")
                if "vs_conns50_alone" in f:
                    cpu += f"; **{f['vs_conns50_alone']:.2f}x the 50 senders alone**"
            ratio = vs_redis.get(name)
            if ratio:
                cpu += f"; **{ratio['throughput_ratio']:.2f}x Redis {ratio['redis_fsync']} -P {ratio['redis_pipeline']}**"
            row(name, f"{f['msgs_per_s']:,.0f} msgs/s ({f['mb_per_s']:,.1f} MB/s); p50 {f['p50_us']:,.0f} us, "
                f"p99 {f['p99_us']:,.0f} us",
                f"loopback {L['loopback_GiBps']:.2f} GiB/s, RTT p50 {L['loopback_rtt_p50_us']:.0f} us",
                f"{100 * f['mb_per_s'] * 1e6 / (L['loopback_GiBps'] * (1 << 30)):.1f} % of loopback bandwidth; "
                f"p50 = {f['p50_us'] / L['loopback_rtt_p50_us']:.0f}x RTT; {cpu}")
        for name, f in NP.items():
            row(name, f"{f['msgs_per_s']:,.0f} msgs/s ({f['mb_per_s']:,.1f} MB/s); p50 {f['p50_us']:,.0f} us, "
                f"p99 {f['p99_us']:,.0f} us",
                f"loopback {L['loopback_GiBps']:.2f} GiB/s, RTT p50 {L['loopback_rtt_p50_us']:.0f} us",
                f"redis-server {f['server_cpu_us_per_msg']:.1f} CPU-us/msg; redis-benchmark "
                f"{f['driver_cpu_us_per_msg']:.2f}")

    H = figs.get("ha") or {}
    if H:
        lo = H["loopback"]
        row("**HA** (master and slave `broker serve` processes on loopback; raw driver, 1 KiB, 64 in flight)",
            "", "", "")
        for role in ("ASYNC_MASTER", "SYNC_MASTER"):
            f = H[role]
            row(f"{role} send, 1 in flight", f"{f['one_msgs_per_s']:,.0f} msgs/s; p50 {f['one_p50_us']:,.0f} us, "
                f"p99 {f['one_p99_us']:,.0f} us", f"RTT p50 {lo['loopback_rtt_p50_us']:.0f} us",
                _cpu_by_process(f.get("one_cpu_us_per_msg_by_process")))
            row(f"{role} send", f"{f['msgs_per_s']:,.0f} msgs/s; p50 {f['p50_us']:,.0f} us, p99 {f['p99_us']:,.0f} us",
                f"RTT p50 {lo['loopback_rtt_p50_us']:.0f} us",
                f"replication lag p50 {f['lag_p50_bytes'] / 1024:,.1f} KiB, p99 {f['lag_p99_bytes'] / 1024:,.1f} KiB, "
                f"max {f['lag_max_bytes'] / 1024:,.1f} KiB; " + _cpu_by_process(f.get("cpu_us_per_msg_by_process")))
        for c in H["catch_up"]:
            row(f"fresh slave catch-up, {c['batch'] // 1024} KiB frames",
                f"{c['MBps']:,.0f} MB/s ({c['bytes'] / 2**20:,.0f} MiB in {c['seconds']:.2f} s)",
                f"loopback {lo['loopback_GiBps']:.2f} GiB/s; pwrite into a fresh file {lo['fresh_file_write_MBps']:,.0f} MB/s",
                f"{100 * c['MBps'] / lo['fresh_file_write_MBps']:.0f} % of fresh-file writes")

    T = figs.get("timer") or {}
    if T:
        row("**timer messages** (a `broker serve` process; the project's client, 64 in flight, 256 B bodies; "
            "bench/timer_bench.py)", "", "", "")
        e, p = T["enqueue"], T["precision"]
        row(f"{e['timers']:,} timers 1 h ahead (TIMER_DELAY_SEC)",
            f"{e['sends_per_s']:,.0f} sends/s; into the wheel {e['enqueued_per_s']:,.0f}/s",
            "target: enqueue >= 100,000 timers/s",
            f"broker + services RssAnon {e['rss_before_mib']:,.0f} -> {e['rss_pending_mib']:,.0f} MiB with them pending "
            f"(+{e['rss_added_mib']:,.0f})")
        row(f"{p['timers']:,} timers due at one time (with the {e['timers']:,} above pending), "
            f"{p['delivered']:,} delivered",
            f"lateness p50 {p['p50_ms']} ms, p99 {p['p99_ms']} ms, max {p['max_ms']} ms, min {p['min_ms']} ms",
            "target: p99 <= 1,000 ms (timerPrecisionMs=1000), never early", "")

    D = figs.get("dledger") or {}
    if D:
        row("**DLedger mode** (three `broker serve` members with enableDLegerCommitLog=true on loopback; the "
            "project's client, 1 KiB; bench/dledger_bench.py)", "", "", "")
        t = D["throughput"]
        row(f"Producer.send, {t['in_flight']} in flight (a send answered once a majority holds it)",
            f"{t['msgs_per_s']:,.0f} msgs/s; p50 {t['p50_us']:,.0f} us, p99 {t['p99_us']:,.0f} us",
            "the matrix's SYNC_MASTER + slave row of this run",
            "CPU-us/msg " + ", ".join(f"{k} {v:.1f}" for k, v in t["cpu_us_per_msg"].items()))
        for i, r in enumerate(D.get("beside_sync_master") or []):
            row(f"side by side, pair {i + 1}: the matrix's SYNC_MASTER + slave cell, then DLedger's",
                f"SYNC_MASTER {r['sync_master_msgs_per_s']:,.0f} msgs/s, DLedger {r['dledger_msgs_per_s']:,.0f} "
                f"msgs/s: **{r['ratio']:.2f}x**", "", "CPU-us/msg SYNC_MASTER " + ", ".join(
                    f"{k} {v:.1f}" for k, v in r["sync_master_cpu_us_per_msg"].items()) + "; DLedger " + ", ".join(
                    f"{k} {v:.1f}" for k, v in r["dledger_cpu_us_per_msg"].items()))
        for name, o in D["outage"].items():
            row(f"write outage after kill -9 of the leader ({name}), last SEND_OK to the next",
                _outage_cell(o), "goal <= 5 s with DLedger's defaults", _from_kill(o))

    R = figs.get("reliable") or {}
    if R:
        row(f"**broker.reliable** (bench/reliable_bench.py: name server and broker processes, real Redis and "
            f"durable PostgreSQL; {R['messages']:,} messages of {R['body']} B, {R['queues']} queues per cell)",
            "", "", "")
        plain = R["consume"][0]["msgs_per_s"]
        for r in R["consume"]:
            redis = "" if r["redis"] is None else (" + Redis" if r["redis"] else ", no Redis")
            batch = f", batch {r['batch_size']}" if r.get("batch_size") else ""
            o = r.get("other_cpu_us_per_msg") or {}
            every = (f"; every process {r['total_cpu_us_per_msg']:.1f} us/msg (broker "
                     f"{o.get('broker', 0) + o.get('namesrv', 0):.1f}, PostgreSQL {o.get('postgresql', 0):.1f}, "
                     f"Redis {o.get('redis', 0):.1f}): CPU ceiling of {os.cpu_count()} cores "
                     f"{r['cpu_ceiling_msgs_per_s']:,.0f} msgs/s") if r.get("cpu_ceiling_msgs_per_s") else ""
            row(f"{r['consumer']} consumer, {r['store']}{redis}{batch}",
                f"{r['msgs_per_s']:,.0f} msgs/s; consumer CPU {r['cpu_us_per_msg']:.1f} us/msg{every}",
                f"plain PushConsumer, same run: {plain:,.0f} msgs/s", f"{r['vs_plain']:.3f}x plain")
        for r in R["outbox"]:
            row(f"OutboxProducer.send, {r['store']}, {r['in_flight']} in flight", f"{r['msgs_per_s']:,.0f} msgs/s")

    C = figs.get("controller") or {}
    if C:
        row("**Controller mode** (two `broker serve` brokers with enableControllerMode=true and three `broker "
            "controller` processes on loopback; allAckInSyncStateSet=true; the project's client, 1 KiB; "
            "bench/controller_bench.py)", "", "", "")
        t = C["throughput"]
        dt = D.get("throughput")
        row(f"Producer.send, {t['in_flight']} in flight ({t.get('config', 'defaults')}; a send answered once both "
            "brokers hold it: two copies)",
            f"{t['msgs_per_s']:,.0f} msgs/s; p50 {t['p50_us']:,.0f} us, p99 {t['p99_us']:,.0f} us",
            (f"DLedger's three copies, same cell: {dt['msgs_per_s']:,.0f} msgs/s, p50 {dt['p50_us']:,.0f} us"
             if dt else "DLedger's cell (not run)"),
            (f"{t['msgs_per_s'] / dt['msgs_per_s']:.2f}x DLedger; " if dt else "")
            + "CPU-us/msg " + ", ".join(f"{k} {v:.1f}" for k, v in t["cpu_us_per_msg"].items()))
        for name, o in C["outage"].items():
            row(f"write outage after kill -9 of the master ({name}: {o.get('settings', '')}), last SEND_OK to the "
                "next", _outage_cell(o), f"goal <= {C.get('goal_s', 3):g} s (scanInactiveMasterInterval and "
                "heartbeats at RocketMQ's defaults or lower)", _from_kill(o))

    # a section header with nothing under it (the section was not run: --only / --no-kernels) is dropped
    rows = [r for i, r in enumerate(rows)
            if not (r[0].startswith("**") and not r[1]
                    and (i + 1 == len(rows) or (rows[i + 1][0].startswith("**") and not rows[i + 1][1])))]
    failed = meta.get("failed") or {}
    lines = [f"# Benchmark {meta['started']} ({'quick' if meta['quick'] else 'full'})", "",
             f"Commit {meta.get('commit', 'unknown')}; {meta['machine']}; store on {meta['fs']['fstype']} "
             f"({meta['fs']['device']}, {meta['fs']['mount']}); event loop {meta['loop']}; total {meta['total_s']:.0f} s. "
             f"Sections: {', '.join(x for x in meta['sections'] if x not in failed)}"
             + (f"; **failed: {', '.join(failed)}**" if failed else "") + ". The machine's limits below were "
             "measured in the same run.", ""]
    if failed:
        lines += ["## Sections that failed", "", "| section | reason |", "|---|---|"]
        lines += [f"| {k} | {v.splitlines()[0][:300].replace('|', '/')} |" for k, v in failed.items()] + [""]
    lines += ["| figure | value | limit beside it (this run) | vs limit |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    if figs["targets"]:
        lines += ["", "## Targets (store-core, broker-daemon, HA and controller-mode milestones)", "",
                  "| target | measured | verdict |", "|---|---|---|"]
    for t in figs["targets"]:
        v = t["value"]
        shown = f"{v:,.0f} {t['unit']}" if v >= 100 else f"{v:.2f}{t['unit']}"
        lines.append(f"| {t['target']} | {shown} | {t['verdict']} |")
    if figs.get("matrix"):
        from bench import matrix
        lines += matrix.markdown(figs["matrix"], L).splitlines()
    if figs.get("java"):
        from bench import java_bench
        lines += java_bench.markdown(figs["java"])
    lines += ["", "MB/s counts stored record bytes (body + 91-byte header + topic + properties). "
              "Each store cell uses a fresh store directory; its clock starts after a warm-up put and after "
              "the next segment's pre-allocation finished, and it stops before filling its 1 GiB segment."]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ main

def git_commit() -> str:
    """The checkout's commit, "+ uncommitted changes" when the work tree differs from it (read
    before the run writes anything), or "unknown" outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes" if dirty else "")


SECTIONS = ("kernels", "store", "network", "timer", "ha", "dledger", "controller", "reliable", "java", "matrix",
            "peers")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--full", action="store_true",
                   help="everything: the whole matrix (3 bodies x 2 in-flight counts x 6 modes, 3 repeats of 5 s), "
                        "both peers, the full-size store/network/HA cells")
    p.add_argument("--quick", action="store_true", help="the default (make bench): the quick subset, < 5 minutes")
    p.add_argument("--only", default=None,
                   help=f"comma-separated sections to run ({','.join(SECTIONS)}); limits are always measured")
    p.add_argument("--no-kernels", action="store_true", help="skip the pytest-benchmark kernel suite")
    p.add_argument("--no-peers", action="store_true",
                   help="skip the peers (Redis Streams, NATS JetStream, the network section's redis-benchmark cells)")
    p.add_argument("--seconds", type=float, default=None, help="matrix cell length (default 2 s quick, 5 s full)")
    p.add_argument("--compare", nargs="+", metavar="JSON",
                   help="OLD.json: after the run, print what moved against it; OLD.json NEW.json: compare two "
                        "results files and exit without running")
    p.add_argument("--compare-threshold", type=float, default=5.0,
                   help="--compare lists figures that moved by at least this %% (default 5)")
    p.add_argument("--compare-all", action="store_true",
                   help="--compare every numeric figure, not only the headline ones (throughput, latency, ratios)")
    p.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results"), help="results directory")
    p.add_argument("--docs", default=os.path.join(REPO, "docs", "bench"),
                   help="where a run of every section publishes its report and plots (latest.md, *.png; default "
                        "docs/bench/)")
    p.add_argument("--no-docs", dest="docs", action="store_const", const=None, help="do not publish to --docs")
    p.add_argument("--workdir", default=None,
                   help="where store directories are made (default: inside --out; must be a real disk, not tmpfs)")
    args = p.parse_args(argv)
    if args.full and args.quick:
        p.error("--full and --quick exclude each other")
    quick = not args.full
    if args.compare and len(args.compare) > 2:
        p.error("--compare takes OLD.json or OLD.json NEW.json")
    if args.compare and len(args.compare) == 2:
        from bench import compare
        print(compare.report(args.compare[0], args.compare[1], args.compare_threshold, args.compare_all))
        return 0
    only = set(SECTIONS) if args.only is None else {x.strip() for x in args.only.split(",") if x.strip()}
    unknown = only - set(SECTIONS)
    if unknown:
        p.error(f"unknown section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    if args.no_kernels:
        only.discard("kernels")
    if args.no_peers:
        only.discard("peers")

    import broker.kernels.codec as codec
    if not codec.__file__.endswith(".so"):
        say("broker.kernels are not compiled: run `make install`")
        return 2
    from bench import limits, segment_probe, store_bench

    os.makedirs(args.out, exist_ok=True)
    base = args.workdir or args.out
    os.makedirs(base, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=".work-", dir=base)
    started = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    commit = git_commit()
    t_start = time.perf_counter()
    fs = check_workdir(workdir)
    try:
        import uvloop
        runner, loop_name = uvloop.run, f"uvloop {uvloop.__version__}"
    except ImportError:
        runner, loop_name = asyncio.run, "asyncio"
    settings = store_bench.Settings.make(quick)
    steps = ["limits"] + [x for x in ("kernels", "store", "network", "timer", "ha", "dledger", "controller",
                                      "reliable", "java") if x in only] \
        + (["matrix"] if only & {"matrix", "peers"} else [])
    n = len(steps)

    say(f"bench ({'quick' if quick else 'full'}; sections: {', '.join(steps)}): store work dir {workdir} "
        f"on {fs['fstype']} {fs['device']}")

    K: dict = {}
    S: dict = {}
    N: dict = {}
    NP: dict = {}
    H: dict = {}
    D: dict = {}
    C: dict = {}
    R: dict = {}
    J: dict = {}
    M: dict = {}
    T: dict = {}
    failed: dict[str, str] = {}
    secs = 2.0 if quick else 5.0

    def section(name: str, text: str, body) -> None:
        """Run one section; an exception (a missing dependency, a server that did not start, a cell
        that failed) is reported as this section's failure, and the run goes on with the next."""
        say(f"{steps.index(name) + 1}/{n} {text} ...")
        t0 = time.perf_counter()
        try:
            body()
        except Exception as e:  # noqa: BLE001 - one section must not lose the others' figures
            failed[name] = f"{type(e).__name__}: {e}"
            with open(os.path.join(args.out, f"failed-{name}.txt"), "w") as f:
                f.write(traceback.format_exc())
            say(f"  FAILED after {time.perf_counter() - t0:.0f} s: {failed[name]} "
                f"(traceback in {os.path.join(args.out, f'failed-{name}.txt')})")

    def run_kernels() -> None:
        K.update(run_kernel_suite(args.out, quick))

    def run_store() -> None:
        def progress(r: store_bench.Result) -> None:
            say(f"  {r.line()}  [setup {r.figures.get('store_setup_s', 0):.1f} s, "
                f"{time.perf_counter() - t_start:.0f} s elapsed]")

        S.update(runner(store_bench.run_all(workdir, settings, progress)))

    def run_network() -> None:
        from bench import network_bench
        for flush, cells in (("ASYNC_FLUSH", ["send", "send256", "conns50", "crowd", "lone", "batch", "pull",
                                              "client_send", "client_send_tls", "client_batch", "client_pull",
                                              "grpc_send", "grpc_receive"]),
                             # the broker's own front: a broker of its own (the one above serves
                             # TLS permissive for client_send_tls, which a local front refuses)
                             ("ASYNC_FLUSH", ["grpc_send_h2load_local", "grpc_receive_h2_local", "grpc_idle_local",
                                              "grpc_py5_send_local", "grpc_py5_receive_local"]),
                             ("SYNC_FLUSH", ["send", "send256", "conns50", "lone", "batch", "client_send",
                                             "client_batch"])):
            for r in runner(network_bench.run_flush_mode(flush, secs, cells, workdir,
                                                         progress=lambda x: say("  " + x))):
                N[r.name] = r.as_dict()
        if not args.no_peers:  # the figures the send cells are read against, same run
            from bench import redis_benchmark
            NP.update(redis_benchmark.run_both(secs, workdir, progress=lambda x: say("  " + x)))

    def run_timer() -> None:
        from bench import timer_bench
        T.update(timer_bench.run(1_000_000, 3.0, workdir, progress=lambda x: say("  " + x)))

    def run_ha() -> None:
        from bench import ha_bench
        H.update(runner(ha_bench.run_all(secs, (128 if quick else 512) << 20, [32 << 10, 1 << 20], workdir,
                                         progress=lambda x: say("  " + x))))

    def run_dledger() -> None:
        from bench import dledger_bench
        D.update(runner(dledger_bench.run_all(secs, 10, workdir, progress=say)))
        say("  beside SYNC_MASTER + slave, side by side, 2 pairs")
        D["beside_sync_master"] = runner(dledger_bench.beside_sync_master(secs, 2, workdir,
                                                                          progress=lambda x: say("    " + x)))

    def run_controller() -> None:
        from bench import controller_bench
        C.update(runner(controller_bench.run_all(secs, 10, workdir, progress=say)))

    def run_reliable() -> None:
        from bench import reliable_bench
        R.update(reliable_bench.run(40_000 if quick else 100_000, progress=lambda x: say("  " + x), workdir=workdir))

    def run_java() -> None:
        from bench import java_bench
        J.update(java_bench.run_all(quick, workdir, args.seconds, progress=say))

    def run_matrix() -> None:
        from bench import matrix
        plan = matrix.Plan.make(args.full, args.seconds, peers="peers" in only)
        if "matrix" not in only:  # peers alone: no project cells, nothing to pair them with
            plan.cells = {k: v for k, v in plan.cells.items() if k in matrix.PEER_PAIRS.values()}
        M.update(matrix.run(plan, workdir, L, runner, say=say, redis_xadd=NP or None))

    try:
        # the limits come first and everything is read against them: without them there is no report
        say(f"1/{n} machine limits ...")
        t0 = time.perf_counter()
        L = limits.measure_all(workdir, quick=quick)
        L["segment_probe"] = segment_probe.measure(workdir, fs["device"], quick=quick)
        say(f"  memcpy {L['memcpy_GiBps']:.2f} GiB/s; fdatasync p50 {L['fdatasync_p50_us']:.0f} us "
            f"p99 {L['fdatasync_p99_us']:.0f} us; seq durable {L['seq_durable_MBps']:.0f} MB/s; "
            f"loopback {L['loopback_GiBps']:.2f} GiB/s ({time.perf_counter() - t0:.1f} s)")
        for name, text, body in (
                ("kernels", "kernel micro-benchmarks (pytest-benchmark, bench/test_kernels_bench.py)", run_kernels),
                ("store", "store cells (fresh store per cell; ~5 s of segment pre-allocation each before its clock)",
                 run_store),
                ("network", "network cells (broker process on loopback)", run_network),
                ("timer", "timer messages (broker process on loopback; bench/timer_bench.py)", run_timer),
                ("ha", "HA cells (master and slave processes on loopback)", run_ha),
                ("dledger", "DLedger mode (three members on loopback): throughput, and the outage after kill -9s "
                            "of the leader", run_dledger),
                ("controller", "controller mode (two brokers, three controllers on loopback): throughput of two "
                               "copies, and the outage after kill -9s of the master", run_controller),
                ("reliable", "broker.reliable: the idempotent consumer (PostgreSQL, SQLite, with and without Redis) "
                             "beside the plain PushConsumer, and the outbox", run_reliable),
                ("java", "against Apache RocketMQ's Java broker and proxy (JVMs on loopback, the same drivers)",
                 run_java),
                ("matrix", "mode matrix (name server, master, slave processes; the project's client) and peers",
                 run_matrix)):
            if name in steps:
                section(name, text, body)
    finally:
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)

    say("report")
    figs = {
        "meta": {"started": started, "quick": quick, "loop": loop_name, "fs": fs, "sections": steps,
                 "failed": failed, "commit": commit,
                 "machine": f"{L['cpu_count']} CPUs, kernel {L['kernel']}, Python {L['python']}, "
                            f"{platform.machine()}",
                 "settings": settings.__dict__, "targets": TARGETS, "argv": sys.argv[1:] if argv is None else argv,
                 "total_s": time.perf_counter() - t_start},
        "limits": L, "kernels": K, "store": S, "network": N, "network_peers": NP,
        "network_vs_redis": network_vs_redis(N, NP), "ha": H, "dledger": D, "controller": C,
        "reliable": R, "java": J, "matrix": M, "timer": T,
    }
    figs["targets"] = evaluate(figs)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + ("-quick" if quick else "")
    plot_files: list[str] = []
    if not args.no_plots:
        try:
            from bench import plots
            plot_files = plots.write_all(figs, args.out, f"bench-{stamp}")
        except Exception as e:  # noqa: BLE001 - a plot must not lose the run's figures
            say(f"plots failed: {e!r}")
    figs["meta"]["plots"] = [os.path.basename(f) for f in plot_files]
    for name in (f"bench-{stamp}", "latest"):  # the figures first: nothing after this can lose them
        with open(os.path.join(args.out, name + ".json"), "w") as f:
            json.dump(figs, f, indent=2, default=str)
    report = markdown(figs)
    md = report
    if plot_files:
        md += "\nPlots: " + ", ".join(f"`{os.path.basename(f)}`" for f in plot_files) + "\n"
    for name in (f"bench-{stamp}", "latest"):
        with open(os.path.join(args.out, name + ".md"), "w") as f:
            f.write(md)
    print()
    print(md)
    say(f"written: {os.path.join(args.out, f'bench-{stamp}.json')} and .md (also latest.json / latest.md)"
        + (f"; {len(plot_files)} plots" if plot_files else ""))
    if args.docs and only == set(SECTIONS):
        from bench import docs
        written = docs.publish(report, plot_files, args.docs)
        say(f"published: {', '.join(os.path.relpath(w, REPO) for w in written)}")
    elif args.docs:
        say(f"{os.path.relpath(args.docs, REPO)} not updated: not every section ran (--only, --no-kernels, --no-peers)")
    if args.compare:
        from bench import compare
        print(compare.report(args.compare[0], os.path.join(args.out, f"bench-{stamp}.json"), args.compare_threshold,
                             args.compare_all))
    if failed:
        say(f"failed sections: {', '.join(f'{k} ({v})' for k, v in failed.items())}")
        return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
