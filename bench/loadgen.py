"""Runs build/loadgen (bench/loadgen.c, the C load generator) and reads the broker's CPU per
process over the same measured window.

    r = measure("send", "127.0.0.1:10911", broker_pid, in_flight=64, seconds=2, warmup=0.5)
    r["msgs_per_s"], r["p99_us"], r["cpu_us_per_msg"]        # loadgen's own figures (its JSON line)
    r["broker_cpu_us_per_msg"]    # {"broker": .., "flush": .., "reput": .., "ha": .., "clean": .., "total": ..}

loadgen writes "loadgen: window start" / "loadgen: window end" on stderr at the edges of the
window it counts; the broker's process tree is read at each (bench.proc_cpu), so the broker's
CPU and loadgen's figures cover the same time (to within the pipe's latency, ~0.1 ms).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(REPO, "bench", "loadgen.c")
BINARY = os.path.join(REPO, "build", "loadgen")
# the Makefile's rule, for a machine without make
CC = ["cc", "-O2", "-Wall", "-Wextra", "-o", BINARY, SOURCE]


class LoadgenError(RuntimeError):
    """loadgen exited non-zero (lost connection, stall, bad usage); the message has its stderr."""


def build() -> str:
    """build/loadgen, (re)built by `make build/loadgen` when missing or older than its source."""
    if os.path.exists(BINARY) and os.path.getmtime(BINARY) >= os.path.getmtime(SOURCE):
        return BINARY
    if shutil.which("make"):
        r = subprocess.run(["make", "-s", "build/loadgen"], cwd=REPO, capture_output=True, text=True)
    else:
        os.makedirs(os.path.dirname(BINARY), exist_ok=True)
        r = subprocess.run(CC, cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        raise LoadgenError(f"building {BINARY} failed: {r.stdout}{r.stderr}")
    return BINARY


def argv(mode: str, addr: str, **opts) -> list[str]:
    """The command line: keyword options become --options (in_flight=64 -> --in-flight 64)."""
    out = [build(), mode, "--addr", addr]
    for k, v in opts.items():
        if v is not None:
            out += [f"--{k.replace('_', '-')}", str(v)]
    return out


def _nothing() -> None:
    pass


def run(mode: str, addr: str, on_start=_nothing, on_end=_nothing, **opts) -> dict:
    """Run loadgen to completion; its JSON line as a dict. `on_start`/`on_end` are called at the
    edges of its measured window."""
    return run_driver(argv(mode, addr, **opts), "loadgen", on_start, on_end)


def run_driver(cmd: list[str], prog: str, on_start=_nothing, on_end=_nothing) -> dict:
    """One of the bench's C drivers (loadgen, grpc_receive) run to completion: its last stdout line,
    JSON, as a dict; `on_start`/`on_end` called as it prints "<prog>: window start/end" on stderr."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    other: list[str] = []
    try:
        for line in proc.stderr:  # the markers come as they happen; the JSON after the last
            if line.startswith(f"{prog}: window start"):
                on_start()
            elif line.startswith(f"{prog}: window end"):
                on_end()
            else:
                other.append(line)
        out = proc.stdout.read()
    finally:
        rc = proc.wait()
    if rc != 0:
        raise LoadgenError(f"{' '.join(cmd)} exited {rc}: {''.join(other).strip()[-1000:]}")
    return json.loads(out.strip().splitlines()[-1])


def measure(mode: str, addr: str, broker_pid: int, others: dict[str, int] | None = None, **opts) -> dict:
    """run() plus "broker_cpu_us_per_msg": CPU-µs per message of each process of the broker's
    tree (bench.proc_cpu labels) over loadgen's window. `others` adds more trees, labelled by
    their key ({"slave": pid} gives "slave", "slave/flush", ...)."""
    from bench.proc_cpu import ProcessTree, cpu_us_per_msg
    trees = [ProcessTree(broker_pid)] + [ProcessTree(pid, label, label + "/") for label, pid in (others or {}).items()]

    def snapshot() -> dict:
        out: dict = {}
        for t in trees:
            out.update(t.snapshot())
        return out
    snaps: dict = {}
    r = run(mode, addr, on_start=lambda: snaps.__setitem__("before", snapshot()),
            on_end=lambda: snaps.__setitem__("after", snapshot()), **opts)
    r["broker_cpu_us_per_msg"] = cpu_us_per_msg(snaps["before"], snaps["after"], r["msgs"])
    r["driver"] = f"build/loadgen {mode} ({' '.join(argv(mode, addr, **opts)[2:])})"
    return r


def cpu_line(per_msg: dict) -> str:
    """"broker 21.3, flush 0.0, reput 4.1, ..., total 25.9" (CPU-µs per message)."""
    return ", ".join(f"{k} {v:.1f}" for k, v in per_msg.items())
