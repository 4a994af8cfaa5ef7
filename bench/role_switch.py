"""A controller-mode master kill under CPU load: how long the new master's role switch takes and the
write outage a sender sees.

A group of two brokers, three controllers and a name server (tests/helpers/controller_mode, real
processes on loopback, allAckInSyncStateSet), a sender writing without pause (8 in flight), and
`--load` Python busy loops beside them (no stress-ng here) to push the load average up. Each of
`--kills` rounds waits for both brokers in the SyncStateSet, kills -9 the master, and reads:
- switch: the new master's own figure, its log line "... (switched in X s)";
- outage: from the kill to the first SEND_OK of a send made after the kill (the sender is pointed
  at the surviving broker right after the kill, so no route lookup is counted; an answer of the dead
  master read after the kill does not count).
The killed broker is started again (a slave) before the next round.

    PYTHONPATH=$PWD .venv/bin/python -m bench.role_switch --kills 5 --load 8
"""
from __future__ import annotations

import argparse
import ctypes
import multiprocessing
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from broker.remoting import codes
from tests.conftest import wait_for
from tests.helpers.controller_mode import ControllerModeGroup
from tests.helpers.history import History, Workload

TOPIC = "SwitchTopic"
SWITCHED = re.compile(r"master of \S+ at master epoch (\d+) \(switched in ([0-9.]+) s\)")


def _spin() -> None:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: never outlive the bench
    while True:
        pass


def switch_time(stderr: str, epoch: int) -> float | None:
    for e, s in SWITCHED.findall(stderr):
        if int(e) == epoch:
            return float(s)
    return None


def run(kills: int, load: int, root: Path) -> list[tuple[float, float]]:
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(load)]
    for p in busy:
        p.start()
    if load:  # the load average is a minute's mean: let it climb first
        try:
            wait_for(lambda: os.getloadavg()[0] >= 0.75 * load, 120, f"load average {0.75 * load:.0f}")
        except AssertionError:
            print(f"load average only {os.getloadavg()[0]:.1f}", flush=True)
    g = ControllerModeGroup(root, extra="allAckInSyncStateSet=true\n").start()
    history = History()
    port = [1]
    work = Workload(history, lambda: port[0], TOPIC,
                    reconnect_on=frozenset({codes.SYSTEM_BUSY, codes.SERVICE_NOT_AVAILABLE}))
    out = []
    try:
        m = g.master()
        port[0] = m.port
        work.start()
        for i in range(kills):
            g.wait_in_sync(m, 2)
            before = work.acked()
            wait_for(lambda: work.acked() >= before + 50, 60, "50 sends acknowledged")
            epoch = int(g.role(m).get("masterEpoch") or 0)
            other = next(b for b in g.brokers.values() if b is not m)
            t0 = time.monotonic()
            m.kill9()
            n0 = work.next_id  # sends from here on went out after the kill: an ok among them is the new master's
            port[0] = other.port
            work.redirect()
            wait_for(lambda: [i for i in work.acked_since(t0) if i >= n0], 60, "a send acknowledged by the new master")
            with history.lock:
                first = min(s.at for i, s in history.sends.items() if s.outcome == "ok" and i >= n0)
            outage = first - t0
            took = wait_for(lambda: switch_time(other.stderr(), epoch + 1), 30, "the new master's switch line")
            load_avg = os.getloadavg()[0]
            print(f"kill {i + 1}: switched in {took:.2f} s, outage {outage:.2f} s (load average {load_avg:.1f})",
                  flush=True)
            out.append((took, outage))
            m.start()
            m = other
        work.stop()
    finally:
        if work.thread.is_alive():
            work.stop_event.set()
        g.stop()
        for p in busy:
            p.kill()
            p.join()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--load", type=int, default=8, help="Python busy loops beside the group")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="role-switch-") as d:
        res = run(a.kills, a.load, Path(d))
    sw, ou = [r[0] for r in res], [r[1] for r in res]
    print(f"switch s: median {statistics.median(sw):.2f} max {max(sw):.2f}; "
          f"outage s: median {statistics.median(ou):.2f} max {max(ou):.2f} ({len(res)} kills, load {a.load})")


if __name__ == "__main__":
    sys.exit(main())
