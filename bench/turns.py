"""Whether a network cell's driver and broker run at once or take turns: `perf sched` over a
window of the cell's clock, the CPU each process ran on and how long both ran at the same time.

    python -m bench.turns [client_send] [--seconds 8] [--window 1.0] [--workdir DIR]

Runs `python -m bench.network_bench <cell>` (its driver is that process), and, `--seconds` / 2 into
it, `perf sched record -a` for `--window` seconds; then reads `perf sched timehist` (needs perf
and the rights to trace the scheduler: root, or kernel.perf_event_paranoid <= -1). Prints, for the
driver and the broker's main process: milliseconds run on each CPU, and milliseconds both ran
at once. Two processes that take turns on one core (both at once near 0, each mostly on the same
CPU) are bound by the sum of their CPU per message, not by the larger one: on loopback, TCP wakes
a reader as a sync wakeup, and the scheduler's wake-affine placement puts it on the writer's CPU.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time

_LINE = re.compile(r"\s*([\d.]+)\s+\[(\d+)\]\s+\S+\[(\d+)(?:/\d+)?\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")


def run_intervals(timehist: str, pids: set[int]) -> dict[int, list[tuple[float, float, int]]]:
    """pid -> its runs (start s, end s, cpu) from `perf sched timehist` output."""
    out: dict[int, list] = collections.defaultdict(list)
    for line in timehist.splitlines():
        m = _LINE.match(line)
        if m and int(m.group(3)) in pids:
            end, run = float(m.group(1)), float(m.group(6)) / 1000
            out[int(m.group(3))].append((end - run, end, int(m.group(2))))
    return out


def both_at_once(a: list[tuple[float, float, int]], b: list[tuple[float, float, int]]) -> float:
    """Seconds during which a run of `a` and a run of `b` overlap (each list in time order)."""
    total, j = 0.0, 0
    for s, e, _ in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            total += min(e, b[k][1]) - max(s, b[k][0])
            k += 1
    return total


def _broker_pid(parent: int, deadline: float) -> int:
    while time.monotonic() < deadline:
        r = subprocess.run(["pgrep", "-P", str(parent), "-f", "broker.cli serve"], capture_output=True, text=True)
        if r.stdout.split():
            return int(r.stdout.split()[0])
        time.sleep(0.1)
    raise RuntimeError("the cell's broker did not start")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cell", nargs="?", default="client_send")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--window", type=float, default=1.0)
    p.add_argument("--workdir", default=tempfile.gettempdir() + "/bench-turns")
    a = p.parse_args(argv)
    cell = subprocess.Popen([sys.executable, "-m", "bench.network_bench", a.cell, "--seconds", str(a.seconds),
                             "--workdir", a.workdir], stdout=subprocess.PIPE, text=True)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            broker = _broker_pid(cell.pid, time.monotonic() + 30)
            time.sleep(a.seconds / 2)  # the broker's start, the route and the warm-up are behind
            data = os.path.join(tmp, "sched.data")
            subprocess.run(["perf", "sched", "record", "-o", data, "--", "sleep", str(a.window)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            hist = subprocess.run(["perf", "sched", "timehist", "-i", data], capture_output=True, text=True,
                                  check=True).stdout
        finally:
            line = cell.communicate()[0].strip().splitlines()
    runs = run_intervals(hist, {cell.pid, broker})
    print(line[-1] if line else f"(the cell printed nothing; exit {cell.returncode})")
    for name, pid in (("driver", cell.pid), ("broker", broker)):
        per_cpu = collections.Counter()
        for s, e, cpu in runs[pid]:
            per_cpu[cpu] += e - s
        print(f"{name} (pid {pid}): " + ", ".join(f"cpu{c} {1e3 * t:.0f} ms" for c, t in sorted(per_cpu.items())))
    print(f"both at once: {1e3 * both_at_once(runs[cell.pid], runs[broker]):.0f} ms of a {a.window:g} s window")
    return 0


if __name__ == "__main__":
    sys.exit(main())
