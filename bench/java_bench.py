"""Ours against Apache RocketMQ's own Java broker (5.5.0, bench/java_peer.py), in the same run, driven
by the same drivers: build/loadgen (bench/loadgen.c) for the remoting cells, the gRPC front's driver
(bench/grpc_bench.py) for ours against the Java proxy.

    python -m bench.java_bench [--full] [--seconds S] [--modes ASYNC_FLUSH,...] [--shapes send64,...]

Modes, each run on both sides with the same broker.conf keys (flushDiskType, brokerRole, brokerId,
256 MiB commit-log files, loopback ports; the side's durability keys are printed beside its
figures):
- ASYNC_FLUSH and SYNC_FLUSH: one master;
- ASYNC_MASTER + slave and SYNC_MASTER + slave (ASYNC_FLUSH both): a master and a slave; the Java
  master with inSyncReplicas=2, so that a SYNC_MASTER's SEND_OK waits for the slave (5.x's default
  1 answers at once);
- DLedger: three members with enableDLegerCommitLog=true, the loadgen at the leader (the member
  the name server routes to as master).
Shapes (1 KiB bodies): send64 / send256 (one connection, 64 / 256 pipelined), conns50 (50
connections x 1 in flight), batch (batches of 32, 8 in flight), pull (PULL_MESSAGE of what the cells
before stored, 256 per request, 4 in flight, sysFlag FLAG_SUBSCRIPTION: the Java broker serves a pull
without a heartbeat only with the subscription in the request).
gRPC: SendMessage of 1 KiB, 64 calls in flight on one channel, against ours (`broker proxy` before
`broker serve`) and the Java proxy (ProxyStartup, cluster mode, before a Java broker), each with
ASYNC_FLUSH; then ReceiveMessage of 32 + AckMessage of the batch, 8 loops on one connection
(build/grpc_receive, the C driver, which opens a Telemetry stream with a SimpleConsumer's settings
first and sends each call's grpc-timeout, as the 5.x clients do) against the same two, each side's
topic filled by loadgen first.

Every cell reports msgs/s, p50/p99 per request and the CPU-µs per message of every process of its
side (/proc, bench.proc_cpu: our broker and its services; the JVMs, each a single process), and
ours/Java. The Java side is warmed before it is measured: loadgen sends x64 in 2 s rounds until, after at least
`warm_s[0]` seconds, two rounds in a row agree within 5 % and the JVMs' JIT compiler threads (C1, C2)
spent under 5 % of a core in the last round (HotSpot has compiled the send path), or `warm_s[1]`
passed; the gRPC cell the same with its driver. Ours gets the same rounds until two agree, at most
10 s (it has no JIT; its first seconds pay the page cache's first touch, as the JVM's do). The JVMs' CPU is split
by thread kind: "jvm/jit" (compiler threads), "jvm/gc" (G1's), "jvm" (the rest).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from dataclasses import dataclass, field

from bench import loadgen
from bench.driver import BODY, TOPIC
from bench.java_peer import JavaBroker, JavaNameServer, JavaProxy, check_available, version
from bench.proc_cpu import ProcessTree, cpu_seconds_by_label, cpu_us_per_msg

# shape -> (loadgen mode, options, label)
SHAPES = {
    "send64": ("send", {"in_flight": 64}, "send x64 pipelined"),
    "send256": ("send", {"in_flight": 256}, "send x256 pipelined"),
    "conns50": ("send", {"connections": 50, "in_flight": 1}, "send, 50 connections x1"),
    "batch": ("batch", {"batch": 32, "in_flight": 8}, "batch of 32, x8"),
    "pull": ("pull", {"max_msgs": 256, "in_flight": 4, "sys_flag": 4}, "pull 256/request, x4"),
}
# mode (as --modes names it) -> its label in the report
MODES = {"ASYNC_FLUSH": "ASYNC_FLUSH", "SYNC_FLUSH": "SYNC_FLUSH", "ASYNC_MASTER": "ASYNC_MASTER + slave",
         "SYNC_MASTER": "SYNC_MASTER + slave", "DLEDGER": "DLedger, 3 members"}
QUICK_MODES = ("ASYNC_FLUSH", "SYNC_FLUSH", "SYNC_MASTER")
SEGMENT = 256 << 20
WARM_ROUND_S = 2.0
WARM_AGREE = 0.05
OURS_WARM_MAX_S = 10.0
JIT_QUIET = 0.05  # of a core: the compiler threads' share of the last warm-up round


class JvmTree(ProcessTree):
    """A JVM's CPU by thread kind (by the thread names of 5.5.0, as Linux truncates them to 15
    characters): its JIT compiler threads ("<label>/jit"), its collector's ("/gc"), Netty's I/O and
    codec threads ("/netty"), the send processor's pool ("/send"), the reput ("/reput"), the flush
    or group commit ("/flush"), replication ("/ha"), the next commit-log file's preparation
    ("/allocate", as our warm-ahead thread) and the rest ("<label>"). The JIT's share says
    whether the warm-up was long enough; the others, where a message's CPU goes, as our broker's
    processes do."""

    KINDS = (("C1 CompilerThre", "jit"), ("C2 CompilerThre", "jit"), ("GC Thread", "gc"), ("G1 ", "gc"),
             ("NettyServer", "netty"), ("NettyEventExecu", "netty"), ("NettyClient", "netty"),
             ("SendMessageThre", "send"), ("PutMessageThrea", "send"), ("ReputMessageSer", "reput"),
             ("FlushRealTimeSe", "flush"), ("GroupCommitServ", "flush"), ("FlushConsumeQue", "flush"),
             ("CommitRealTimeS", "flush"), ("HAService", "ha"), ("HAClient", "ha"), ("AcceptSocketSer", "ha"),
             ("ReadSocketServi", "ha"), ("WriteSocketServ", "ha"), ("GroupTransferSe", "ha"), ("HAConnection", "ha"),
             ("DefaultAcceptSo", "ha"), ("DefaultHAClient", "ha"), ("AllocateMappedF", "allocate"))

    def snapshot(self) -> dict:
        from bench.proc_cpu import cpu_seconds
        out: dict = {}
        pid = self.root_pid
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            return out
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            cpu = cpu_seconds(f"{pid}/task/{tid}")
            if cpu is None:
                continue
            kind = next((k for prefix, k in self.KINDS if comm.startswith(prefix)), None)
            out[f"{pid}/{tid}"] = (f"{self.root_label}/{kind}" if kind else self.root_label, cpu)
        return out


@dataclass
class Side:
    """One side of a mode, started: where the loadgen goes, the process trees whose CPU counts, and
    the durability keys it runs with."""
    addr: str
    trees: list[ProcessTree]
    settings: str
    extra: dict = field(default_factory=dict)

    def snapshot(self) -> dict:
        return {k: v for t in self.trees for k, v in t.snapshot().items()}


def _mode_keys(mode: str) -> tuple[str, str]:
    """(flushDiskType, the master's brokerRole) of a mode."""
    if mode in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        return mode, "ASYNC_MASTER"
    if mode in ("ASYNC_MASTER", "SYNC_MASTER"):
        return "ASYNC_FLUSH", mode
    return "ASYNC_FLUSH", "SYNC_MASTER"  # DLedger: the leader says SYNC_MASTER


def _probe(addr: str) -> dict:
    return loadgen.run("send", addr, topic=TOPIC, queues=4, body=BODY, in_flight=1, count=32, warmup=0, timeout=10)


def _leader(addrs: list[str], timeout: float = 120.0) -> str:
    """The member that answers 32 sends with SEND_OK (a DLedger group's leader; the followers answer
    errors, and all of them do until a leader is elected)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for a in addrs:
            try:
                if not _probe(a)["errors"]:
                    return a
            except loadgen.LoadgenError:
                pass
        time.sleep(0.2)  # an election between other processes, polled by the probe itself
    raise TimeoutError(f"no member of {addrs} answered SEND_OK within {timeout:g} s")


def _probe_until_ok(addr: str, what: str, timeout: float = 90.0) -> None:
    """loadgen sends of 32 messages until every one is answered SEND_OK (a SYNC_MASTER answers
    errors until its slave is linked)."""
    deadline = time.monotonic() + timeout
    last: dict = {}
    while time.monotonic() < deadline:
        last = _probe(addr)
        if not last["errors"]:
            return
        time.sleep(0.2)  # a wait for another process's link, polled by the probe itself
    raise TimeoutError(f"{what} still answers errors {last.get('error_codes')} after {timeout:g} s")


@contextlib.contextmanager
def ours(mode: str, workdir: str):
    from bench.processes import BrokerProcess, NamesrvProcess
    flush, role = _mode_keys(mode)
    if mode in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        with BrokerProcess(flush, workdir) as b:
            yield Side(b.addr, [ProcessTree(b.proc.pid)], f"flushDiskType={flush}, brokerRole={role}")
    elif mode in ("ASYNC_MASTER", "SYNC_MASTER"):
        from bench.ha_bench import Node
        from bench.processes import free_port
        from broker.store.offset_table import Slot
        ha_port = free_port()
        with Node(workdir, role, ha_port, flush=flush) as m, \
                Node(workdir, "SLAVE", free_port(), f"127.0.0.1:{ha_port}", broker_id=1) as s:
            m.table.wait_until_ge(Slot.HA_SLAVES, 1, 30.0)
            if not m.table.load(Slot.HA_SLAVES):
                raise RuntimeError("our slave did not link")
            yield Side(m.addr, [ProcessTree(m.proc.pid), ProcessTree(s.proc.pid, "slave", "slave/")],
                       f"flushDiskType={flush}, brokerRole={role} + SLAVE"
                       + (" (SEND_OK once the slave holds it)" if role == "SYNC_MASTER" else ""))
    else:
        from bench import dledger_bench
        with NamesrvProcess() as ns, dledger_bench.Group(workdir, ns.addr) as g:
            leader = _leader([m.addr for m in g.members])
            trees = [ProcessTree(m.proc.pid, "leader" if m.addr == leader else f"follower {m.label}",
                                 ("leader" if m.addr == leader else f"follower {m.label}") + "/") for m in g.members]
            yield Side(leader, trees, "enableDLegerCommitLog=true, 3 members (SEND_OK once 2 of 3 hold it), "
                                      "flushDiskType=ASYNC_FLUSH")


@contextlib.contextmanager
def java(mode: str, workdir: str, namesrv: str):
    flush, role = _mode_keys(mode)
    base = f"flushDiskType={flush}\n"
    if mode in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        with JavaBroker(workdir, "master", namesrv, base + f"brokerRole={role}\nbrokerId=0\n", SEGMENT) as b:
            yield Side(b.addr, [JvmTree(b.pid, "jvm")], f"flushDiskType={flush}, brokerRole={role}")
    elif mode in ("ASYNC_MASTER", "SYNC_MASTER"):
        isr = "inSyncReplicas=2\n" if role == "SYNC_MASTER" else ""
        with JavaBroker(workdir, "master", namesrv, base + f"brokerRole={role}\nbrokerId=0\n{isr}", SEGMENT) as m, \
                JavaBroker(workdir, "slave", namesrv, base + "brokerRole=SLAVE\nbrokerId=1\n", SEGMENT) as s:
            if role == "SYNC_MASTER":
                _probe_until_ok(m.addr, "the Java SYNC_MASTER")
            yield Side(m.addr, [JvmTree(m.pid, "jvm"), JvmTree(s.pid, "slave jvm")],
                       f"flushDiskType={flush}, brokerRole={role} + SLAVE"
                       + (", inSyncReplicas=2 (SEND_OK once the slave holds it)" if role == "SYNC_MASTER" else ""))
    else:
        from bench.processes import free_port
        ports = [free_port() for _ in range(3)]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
        with contextlib.ExitStack() as stack:
            members = [stack.enter_context(JavaBroker(
                workdir, f"n{i}", namesrv, base + f"enableDLegerCommitLog=true\ndLegerGroup=broker-java\n"
                f"dLegerPeers={peers}\ndLegerSelfId=n{i}\n", SEGMENT)) for i in range(3)]
            leader = _leader([m.addr for m in members])
            yield Side(leader, [JvmTree(m.pid, "leader jvm" if m.addr == leader else f"follower {m.label} jvm")
                                for m in members],
                       "enableDLegerCommitLog=true, 3 members (SEND_OK once 2 of 3 hold it), flushDiskType=ASYNC_FLUSH")


def warm(side: Side, min_s: float, max_s: float) -> dict:
    """loadgen send x64 in WARM_ROUND_S rounds until, after at least `min_s`, two rounds in a row
    agree within WARM_AGREE and the JVMs' JIT compiler threads spent less than JIT_QUIET of a core
    in the last round (C2 has compiled what the sends run), or `max_s` passed: {"seconds",
    "rounds" (msgs/s of each), "jit_cpu_s" (of each round), "settled"}."""
    rounds: list[float] = []
    jit: list[float] = []
    t0 = time.monotonic()
    while True:
        before = side.snapshot()
        r = loadgen.run("send", side.addr, topic=TOPIC, queues=4, body=BODY, in_flight=64, seconds=WARM_ROUND_S,
                        warmup=0)
        spent_by = cpu_seconds_by_label(before, side.snapshot())
        jit.append(sum(v for k, v in spent_by.items() if k.endswith("jit")))
        rounds.append(r["msgs_per_s"])
        spent = time.monotonic() - t0
        agreed = (len(rounds) >= 2 and abs(rounds[-1] - rounds[-2]) <= WARM_AGREE * max(rounds[-1], rounds[-2])
                  and jit[-1] < JIT_QUIET * WARM_ROUND_S)
        if spent >= max_s or (spent >= min_s and agreed):
            return {"seconds": spent, "rounds": rounds, "jit_cpu_s": jit, "settled": agreed}


def cell(side: Side, shape: str, seconds: float) -> dict:
    mode, opts, _ = SHAPES[shape]
    opts = dict(opts)
    if mode == "pull":  # a first pass unmeasured: the JVM's pull path compiled, the pages read once
        loadgen.run(mode, side.addr, topic=TOPIC, queues=4, body=BODY, seconds=seconds, **opts)
    else:
        opts["warmup"] = min(1.0, seconds / 4)
    snaps: dict = {}
    r = loadgen.run(mode, side.addr, on_start=lambda: snaps.__setitem__("before", side.snapshot()),
                    on_end=lambda: snaps.__setitem__("after", side.snapshot()),
                    topic=TOPIC, queues=4, body=BODY, seconds=seconds, **opts)
    per = cpu_us_per_msg(snaps["before"], snaps["after"], r["msgs"])
    return {"msgs_per_s": r["msgs_per_s"], "p50_us": r["p50_us"], "p99_us": r["p99_us"], "msgs": r["msgs"],
            "mb_per_s": r["mb_per_s"] if "mb_per_s" in r else r["body_bytes"] / r["seconds"] / 1e6,
            "errors": r["errors"], "error_codes": r["error_codes"], "cpu_us_per_msg": per,
            "loadgen_cpu_us_per_msg": r["cpu_us_per_msg"],
            "driver": f"build/loadgen {' '.join(loadgen.argv(mode, side.addr, **opts)[2:])}"}


def _line(c: dict) -> str:
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in c["cpu_us_per_msg"].items())
    err = f"; {c['errors']} errors {c['error_codes']}" if c.get("errors") else ""
    return f"{c['msgs_per_s']:,.0f} msgs/s, p50 {c['p50_us']:,.0f} us, p99 {c['p99_us']:,.0f} us; CPU-us/msg {cpu}{err}"


def _pair(mode: str, shape: str, label: str, o: dict, j: dict, settings: dict) -> dict:
    return {"target": f"{mode} {label}", "mode": mode, "shape": shape, "label": label, "ours": o, "java": j,
            "settings": settings,
            "ratio": o["msgs_per_s"] / j["msgs_per_s"] if j["msgs_per_s"] else float("nan"),
            "cpu_ratio": (o["cpu_us_per_msg"]["total"] / j["cpu_us_per_msg"]["total"]
                          if j["cpu_us_per_msg"].get("total") else float("nan"))}


def run_mode(mode: str, shapes: list[str], seconds: float, warm_s: tuple[float, float], workdir: str,
             namesrv: str, progress=print) -> list[dict]:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    res: dict[str, dict] = {}
    for side_name, make in (("ours", lambda: ours(mode, workdir)), ("java", lambda: java(mode, workdir, namesrv))):
        with make() as side:
            # ours has no JIT to wait for: two rounds that agree, at most OURS_WARM_MAX_S
            w = warm(side, *(warm_s if side_name == "java" else (0.0, min(warm_s[1], OURS_WARM_MAX_S))))
            progress(f"  {MODES[mode]}, {side_name} ({side.settings}): warmed {w['seconds']:.0f} s, rounds "
                     + ", ".join(f"{x:,.0f}" for x in w["rounds"]) + " msgs/s" + ("" if w["settled"] else " (not settled)"))
            res[side_name] = {"settings": side.settings, "warmup": w, "cells": {}}
            for shape in shapes:
                c = res[side_name]["cells"][shape] = cell(side, shape, seconds)
                progress(f"    {side_name} {SHAPES[shape][2]}: {_line(c)}")
    out = []
    for shape in shapes:
        p = _pair(MODES[mode], shape, SHAPES[shape][2], res["ours"]["cells"][shape], res["java"]["cells"][shape],
                  {"ours": res["ours"]["settings"], "java": res["java"]["settings"]})
        p["warmup"] = {"ours": res["ours"]["warmup"], "java": res["java"]["warmup"]}
        progress(f"  {MODES[mode]} {p['label']}: ours/Java {p['ratio']:.2f}x msgs/s, {p['cpu_ratio']:.2f}x CPU-us/msg")
        out.append(p)
    return out


# -- gRPC: our front against the Java proxy -------------------------------------------------------

def _grpc_measure(endpoints: str, proc, trees: list[ProcessTree], seconds: float, min_s: float,
                  max_s: float) -> dict:
    """bench/grpc_bench.py's SendMessage driver against `endpoints`, warmed by the same rule as
    warm(); CPU-µs per message of every process in `trees` (the front or proxy first)."""
    from bench.driver import nothing
    from bench.grpc_bench import _drive

    def snap() -> dict:
        return {k: v for t in trees for k, v in t.snapshot().items()}
    rounds: list[float] = []
    jit: list[float] = []
    t0 = time.monotonic()
    while True:
        before = snap()
        n, _, dt, _ = _drive(endpoints, 64, WARM_ROUND_S, proc, nothing)
        jit.append(sum(v for k, v in cpu_seconds_by_label(before, snap()).items() if k.endswith("jit")))
        rounds.append(n / dt)
        spent = time.monotonic() - t0
        agreed = (len(rounds) >= 2 and abs(rounds[-1] - rounds[-2]) <= WARM_AGREE * max(rounds[-1], rounds[-2])
                  and jit[-1] < JIT_QUIET * WARM_ROUND_S)
        if spent >= max_s or (spent >= min_s and agreed):
            break
    before: dict = {}
    n, lat, dt, _ = _drive(endpoints, 64, seconds, proc, lambda: before.update(snap()))
    per = cpu_us_per_msg(before, snap(), n)
    lat.sort()
    return {"msgs_per_s": n / dt, "p50_us": lat[len(lat) // 2] / 1e3, "p99_us": lat[int(len(lat) * 0.99)] / 1e3,
            "msgs": n, "errors": 0, "error_codes": {}, "cpu_us_per_msg": per,
            "warmup": {"seconds": spent, "rounds": rounds, "jit_cpu_s": jit, "settled": agreed},
            "driver": "bench/grpc_bench.py's SendMessage driver (grpc.aio, 64 in flight, one channel)"}


def run_grpc(seconds: float, warm_s: tuple[float, float], workdir: str, progress=print) -> dict:
    from bench.driver import wait_for_route
    from bench.grpc_bench import FrontProcess
    from bench.processes import BrokerProcess, NamesrvProcess
    with NamesrvProcess() as ns, BrokerProcess("ASYNC_FLUSH", workdir, ns.addr) as b:
        asyncio.run(wait_for_route(ns.addr, b.addr))
        with FrontProcess(ns.addr, workdir) as front:
            o = _grpc_measure(front.endpoints, front, [ProcessTree(front.proc.pid, "front", "front/"),
                                                        ProcessTree(b.proc.pid)], seconds, 0,
                             min(warm_s[1], OURS_WARM_MAX_S))
    progress(f"    ours gRPC front: {_line(o)}")
    with JavaNameServer(workdir) as ns, \
            JavaBroker(workdir, "grpc", ns.addr, "flushDiskType=ASYNC_FLUSH\nbrokerRole=ASYNC_MASTER\nbrokerId=0\n",
                       SEGMENT) as b:
        asyncio.run(wait_for_route(ns.addr, b.addr))
        with JavaProxy(workdir, ns.addr) as proxy:
            j = _grpc_measure(proxy.endpoints, proxy, [JvmTree(proxy.pid, "proxy jvm"), JvmTree(b.pid, "jvm")],
                               seconds, *warm_s)
    progress(f"    Java proxy: {_line(j)}")
    settings = "flushDiskType=ASYNC_FLUSH, brokerRole=ASYNC_MASTER"
    p = _pair("gRPC front / proxy", "grpc_send", "gRPC SendMessage x64", o, j,
              {"ours": f"`broker proxy` + {settings}", "java": f"ProxyStartup -pm cluster + {settings}"})
    p["warmup"] = {"ours": o.pop("warmup"), "java": j.pop("warmup")}
    progress(f"  gRPC SendMessage x64: ours/Java {p['ratio']:.2f}x msgs/s, {p['cpu_ratio']:.2f}x CPU-us/msg")
    return p


# seconds of loadgen sends (x64) that fill a receive pair's side before it is warmed and measured:
# enough for its warm-up and clock (ours reads up to ~100k msgs/s for at most 10 + 5 s; the Java
# proxy, warmed, a few thousand for at most 60 + 5 s)
RECEIVE_FILL_S = {"ours": 10.0, "java": 20.0}
CALL_DEADLINE_S = 3.0  # the 5.x clients' request timeout: each call's grpc-timeout (the Java proxy needs one)
# each receive's long polling time: the Java proxy raises a shorter one to its
# grpcClientConsumerMinLongPollingTimeoutMillis (5 s) and refuses a receive whose deadline is shorter
LONG_POLL_S = 5.0


def _receive_measure(endpoints: str, topic: str, broker: str, trees: list[ProcessTree], seconds: float,
                     min_s: float, max_s: float) -> dict:
    """build/grpc_receive (ReceiveMessage of 32 + AckMessage of the batch, 8 loops on one
    connection, Telemetry settings first) against `endpoints`, warmed by warm()'s rule with the
    same consumer group (each round reads on from where the last stopped); CPU-µs per message of
    every process in `trees`."""
    from bench.grpc_bench import run_receive_driver

    def snap() -> dict:
        return {k: v for t in trees for k, v in t.snapshot().items()}
    group = f"bench_receive_{os.getpid()}_{int(time.time())}"
    rounds: list[float] = []
    jit: list[float] = []
    t0 = time.monotonic()
    while True:
        before = snap()
        r = run_receive_driver(endpoints, group, WARM_ROUND_S, 8, 32, warmup=0.2, topic=topic, broker=broker,
                               deadline=CALL_DEADLINE_S, long_poll=LONG_POLL_S)
        jit.append(sum(v for k, v in cpu_seconds_by_label(before, snap()).items() if k.endswith("jit")))
        rounds.append(r["msgs_per_s"])
        spent = time.monotonic() - t0
        agreed = (len(rounds) >= 2 and abs(rounds[-1] - rounds[-2]) <= WARM_AGREE * max(rounds[-1], rounds[-2])
                  and jit[-1] < JIT_QUIET * WARM_ROUND_S)
        if spent >= max_s or (spent >= min_s and agreed) or r["caught_up"]:
            break
    marks: dict = {}
    r = run_receive_driver(endpoints, group, seconds, 8, 32, lambda: marks.update(before=snap()),
                           lambda: marks.update(after=snap()), warmup=0.5, topic=topic, broker=broker,
                           deadline=CALL_DEADLINE_S, long_poll=LONG_POLL_S)
    n = r["msgs"]
    return {"msgs_per_s": r["msgs_per_s"], "p50_us": r["receive_p50_us"], "p99_us": r["receive_p99_us"],
            "msgs": n, "errors": 0, "error_codes": {},
            "cpu_us_per_msg": cpu_us_per_msg(marks["before"], marks.get("after") or snap(), n),
            "caught_up": r["caught_up"], "ack_p50_us": r["ack_p50_us"],
            "warmup": {"seconds": spent, "rounds": rounds, "jit_cpu_s": jit, "settled": agreed},
            "driver": "build/grpc_receive (libnghttp2 client, C): 8 loops of ReceiveMessage x32 + AckMessage"}


def run_grpc_receive(seconds: float, warm_s: tuple[float, float], workdir: str, progress=print) -> dict:
    """ReceiveMessage + AckMessage through ours (`broker proxy` before `broker serve`) and the Java
    proxy (cluster mode, before a Java broker), each filled by loadgen first (RECEIVE_FILL_S)."""
    from bench.driver import wait_for_route
    from bench.grpc_bench import FrontProcess
    from bench.processes import BrokerProcess, NamesrvProcess

    def fill(addr: str, side: str) -> None:
        loadgen.run("send", addr, topic=TOPIC, queues=4, body=BODY, in_flight=64, seconds=RECEIVE_FILL_S[side],
                    warmup=0, timeout=60)
    with NamesrvProcess() as ns, BrokerProcess("ASYNC_FLUSH", workdir, ns.addr) as b:
        asyncio.run(wait_for_route(ns.addr, b.addr))
        fill(b.addr, "ours")
        with FrontProcess(ns.addr, workdir) as front:
            o = _receive_measure(front.endpoints, TOPIC, "broker-a", [ProcessTree(front.proc.pid, "front", "front/"),
                                                                       ProcessTree(b.proc.pid)], seconds, 0,
                                 min(warm_s[1], OURS_WARM_MAX_S))
    progress(f"    ours gRPC front, receive+ack: {_line(o)}")
    with JavaNameServer(workdir) as ns, \
            JavaBroker(workdir, "grpc-receive", ns.addr, "flushDiskType=ASYNC_FLUSH\nbrokerRole=ASYNC_MASTER\n"
                       "brokerId=0\n", SEGMENT) as b:
        asyncio.run(wait_for_route(ns.addr, b.addr))
        fill(b.addr, "java")
        with JavaProxy(workdir, ns.addr) as proxy:
            j = _receive_measure(proxy.endpoints, TOPIC, "broker-java", [JvmTree(proxy.pid, "proxy jvm"),
                                                                          JvmTree(b.pid, "jvm")], seconds, *warm_s)
    progress(f"    Java proxy, receive+ack: {_line(j)}")
    settings = "flushDiskType=ASYNC_FLUSH, brokerRole=ASYNC_MASTER"
    p = _pair("gRPC front / proxy", "grpc_receive", "gRPC ReceiveMessage x32 + AckMessage, x8", o, j,
              {"ours": f"`broker proxy` + {settings}", "java": f"ProxyStartup -pm cluster + {settings}"})
    p["warmup"] = {"ours": o.pop("warmup"), "java": j.pop("warmup")}
    progress(f"  gRPC ReceiveMessage + AckMessage: ours/Java {p['ratio']:.2f}x msgs/s, {p['cpu_ratio']:.2f}x CPU-us/msg")
    return p


def run_all(quick: bool, workdir: str, seconds: float | None = None, modes: list[str] | None = None,
            shapes: list[str] | None = None, grpc: bool | None = None, warm_s: tuple[float, float] | None = None,
            progress=print) -> dict:
    jvm = check_available()
    seconds = seconds or (2.0 if quick else 5.0)
    modes = list(modes or (QUICK_MODES if quick else MODES))
    unknown = [m for m in modes if m not in MODES] + [x for x in shapes or () if x not in SHAPES]
    if unknown:
        raise ValueError(f"unknown mode(s)/shape(s) {unknown}; modes: {', '.join(MODES)}; shapes: {', '.join(SHAPES)}")
    shapes = list(shapes or SHAPES)
    warm_s = warm_s or ((10.0, 30.0) if quick else (20.0, 60.0))
    grpc = True if grpc is None else grpc
    os.makedirs(workdir, exist_ok=True)
    out: dict = {"java": f"Apache RocketMQ {version()} on {jvm}", "jvm_broker": " ".join(JavaBroker.jvm),
                 "seconds": seconds, "warm_min_max_s": list(warm_s), "cells": []}
    progress(f"  {out['java']}; broker JVM: {out['jvm_broker']}")
    with JavaNameServer(workdir) as ns:
        for mode in modes:
            out["cells"] += run_mode(mode, shapes, seconds, warm_s, workdir, ns.addr, progress)
    if grpc:
        out["cells"].append(run_grpc(seconds, warm_s, workdir, progress))
        out["cells"].append(run_grpc_receive(seconds, warm_s, workdir, progress))
    return out


def _fmt_cpu(per: dict) -> str:
    parts = [f"{k} {v:.1f}" for k, v in per.items() if k != "total" and v >= 0.05]
    return f"**{per.get('total', float('nan')):.1f}**" + (f" ({', '.join(parts)})" if len(parts) > 1 else "")


def markdown(J: dict) -> list[str]:
    """The side-by-side table of the report."""
    if not J or not J.get("cells"):
        return []
    lines = ["", "## Against Apache RocketMQ's Java broker", "",
             f"{J['java']}; broker JVM `{J['jvm_broker']}`. Same drivers, same broker.conf keys, 1 KiB bodies, "
             f"{J['seconds']:g} s per cell. Warm-up before each side's clock: loadgen sends x64 in 2 s rounds until "
             "two in a row agree within 5 % and the JVMs' C1/C2 compiler threads spent under 5 % of a core in the "
             f"last one (JVMs: at least {J['warm_min_max_s'][0]:g} s; at most {J['warm_min_max_s'][1]:g} s). "
             "CPU-us/msg: every process of the side over the cell's clock (/proc); the JVMs' by thread kind "
             "(jit: compiler threads, gc, netty, send, reput, flush, ha, allocate: the next commit-log file, "
             "jvm: the rest).", "",
             "| mode | shape | ours msgs/s | ours p50 / p99 us | ours CPU-us/msg | Java msgs/s | Java p50 / p99 us "
             "| Java CPU-us/msg | ours/Java msgs/s | ours/Java CPU |", "|---|---|---|---|---|---|---|---|---|---|"]
    settings: dict[str, dict] = {}
    for c in J["cells"]:
        o, j = c["ours"], c["java"]
        settings.setdefault(c["mode"], c["settings"])
        err = "".join(f" ({s['errors']:,} errors {s['error_codes']})" for s in (o, j) if s.get("errors"))
        lines.append(f"| {c['mode']} | {c['label']}{err} | {o['msgs_per_s']:,.0f} | {o['p50_us']:,.0f} / "
                     f"{o['p99_us']:,.0f} | {_fmt_cpu(o['cpu_us_per_msg'])} | {j['msgs_per_s']:,.0f} | "
                     f"{j['p50_us']:,.0f} / {j['p99_us']:,.0f} | {_fmt_cpu(j['cpu_us_per_msg'])} | "
                     f"**{c['ratio']:.2f}x** | {c['cpu_ratio']:.2f}x |")
    lines += ["", "Durability settings and warm-up of each side:", ""]
    warmups: dict[str, dict] = {}
    for c in J["cells"]:
        warmups.setdefault(c["mode"], c.get("warmup") or {})
    for mode, s in settings.items():
        w = warmups.get(mode, {})
        lines.append(f"- {mode}: ours {s['ours']}{_warm_note(w.get('ours'))}; Java {s['java']}{_warm_note(w.get('java'))}")
    return lines


def _warm_note(w: dict | None) -> str:
    if not w:
        return ""
    jit = w.get("jit_cpu_s") or []
    return (f" (warmed {w['seconds']:.0f} s, last round {w['rounds'][-1]:,.0f} msgs/s"
            + (f", compiler threads {jit[-1]:.2f} CPU-s in it" if jit and jit[-1] else "")
            + ("" if w.get("settled") else ", **not settled**: the cap ended it") + ")")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true")
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--modes", default=None, help=f"comma-separated, of: {', '.join(MODES)}")
    p.add_argument("--shapes", default=None, help=f"comma-separated, of: {', '.join(SHAPES)}")
    p.add_argument("--no-grpc", action="store_true")
    p.add_argument("--warm", type=float, nargs=2, default=None, metavar=("MIN_S", "MAX_S"))
    p.add_argument("--workdir", default=os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench", "work"))
    a = p.parse_args(argv)
    import json
    J = run_all(not a.full, a.workdir, a.seconds, a.modes.split(",") if a.modes else None,
                a.shapes.split(",") if a.shapes else None, False if a.no_grpc else None,
                tuple(a.warm) if a.warm else None)
    print("\n".join(markdown(J)))
    print(json.dumps(J, default=str)[:200])
    return 0


if __name__ == "__main__":
    sys.exit(main())
