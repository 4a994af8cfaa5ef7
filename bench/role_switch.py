"""A controller-mode master kill under CPU load: how long the new master's role switch takes, and
the write outage the project's client sees.

bench/controller_bench.py's group (two brokers, allAckInSyncStateSet=true, three controllers, a
name server; its "short" intervals unless told), its outage cell (four senders through the
project's client, which finds the new master through the name server's route; kill -9 of the
master, restart, the next kill once the group is whole), and `--load` Python busy loops beside them
(stress-ng is not installed here) to push the load average up first. Per kill:
- switch: the new master's own figure, its log line "... master of <group> at master epoch E
  (switched in X s)" (a role switch restarted the store's service processes before issue 34; in
  place now);
- outage: from the last SEND_OK before the kill to the first SEND_OK the new master stored, and
  from the kill itself.

    PYTHONPATH=$PWD .venv/bin/python -m bench.role_switch --kills 10 --load 8
"""
from __future__ import annotations

import asyncio
import ctypes
import multiprocessing
import os
import re
import signal
import statistics
import sys
import time

from bench import controller_bench, failover
from bench.processes import NamesrvProcess

TOPIC = "RoleSwitchBench"
SWITCHED = re.compile(r"master of \S+ at master epoch \d+ \(switched in ([0-9.]+) s\)")


def _spin() -> None:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: never outlive the bench
    while True:
        pass


def _switches(m: failover.Member) -> list[float]:
    try:
        with open(os.path.join(m.root, "broker.err"), errors="replace") as f:
            return [float(x) for x in SWITCHED.findall(f.read())]
    except FileNotFoundError:
        return []


async def run(workdir: str, kills: int, load: int, config: str) -> dict:
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(load)]
    for p in busy:
        p.start()
    try:
        deadline = time.monotonic() + 120  # the load average is a minute's mean: let it climb first
        while load and os.getloadavg()[0] < 0.75 * load and time.monotonic() < deadline:
            await asyncio.sleep(1)
        with NamesrvProcess() as ns:
            g = controller_bench.Group(workdir, ns.addr, config)
            for m in g.members:
                m.log_level = "INFO"  # the switch's own line
            with g:
                from broker.client.admin import Admin
                async with Admin(ns.addr) as admin:
                    await g.ready(admin)  # the first election's switch is not a kill's
                seen = {m.label: len(_switches(m)) for m in g.members}
                took: list[float] = []
                loads: list[float] = []

                def progress(line: str) -> None:
                    new = []
                    for m in g.members:
                        s = _switches(m)
                        new += s[seen[m.label]:]
                        seen[m.label] = len(s)
                    took.extend(new)
                    loads.append(os.getloadavg()[0])
                    print(f"{line}; switched in {', '.join(f'{x:.2f}' for x in new) or '?'} s "
                          f"(load average {loads[-1]:.1f})", flush=True)

                o = await failover.outage_cell(ns.addr, g, kills, TOPIC, "role_switch_bench", progress)
    finally:
        for p in busy:
            p.kill()
            p.join()
    o.update(switch_s=took, load_avg=loads)
    return o


def main(argv: list[str] | None = None) -> int:
    def more(ap):
        ap.add_argument("--load", type=int, default=8, help="Python busy loops beside the group")
        ap.add_argument("--config", default="short", choices=list(controller_bench.CONFIGS))

    _, a = failover.cli(__doc__.split("\n\n")[0], argv, more)

    async def go(workdir: str) -> None:
        o = await run(workdir, a.kills, a.load, a.config)
        sw = o["switch_s"]
        print(f"switch: p50 {statistics.median(sw):.2f} s, max {max(sw):.2f} s; outage: "
              f"{failover.outage_line(o)}; load average {min(o['load_avg']):.1f}-{max(o['load_avg']):.1f} "
              f"({a.load} busy loops, {a.config} intervals)")

    return failover.run_in_workdir("role-switch-", a.workdir, go)


if __name__ == "__main__":
    sys.exit(main())
