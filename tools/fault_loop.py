"""Run the fault cells of tests/test_faults.py many times, outside `make test`, and count per cell.

    .venv/bin/python tools/fault_loop.py --runs 30                 # every cell, 30 times each
    .venv/bin/python tools/fault_loop.py --runs 30 -k disk-full    # the cells whose id has 'disk-full'

Each round is one pytest process over the chosen cells with a fresh FAULT_SEED (printed), so a
failing cell is replayed with `FAULT_SEED=<seed> pytest "tests/test_faults.py::test_fault_loop[<cell>]"`.
The table (cell, passed, failed, the failing seeds) is printed at the end and written to
build/fault-loop.md, each failure's report to build/fault-loop-failures/; the exit status is 1
when any run failed.
"""
from __future__ import annotations

import argparse
import collections
import os
import random
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "fault-loop.md"
FAILURES = REPO / "build" / "fault-loop-failures"  # <cell>-<seed>.txt: the failure and the test's output


def one_round(k: str | None, seed: int, xml: Path) -> dict[str, str]:
    """cell id -> 'passed' or 'failed' for one pytest run of the chosen cells."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
           "-o", "junit_logging=all",
           "tests/test_faults.py"]
    if k:
        cmd += ["-k", k]
    subprocess.run(cmd, cwd=REPO, env={**os.environ, "FAULT_SEED": str(seed)},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name", "")
        cell = name[name.find("[") + 1:-1] if "[" in name else name
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:  # keep the whole report: a timing failure may not come back with its seed
            FAILURES.mkdir(parents=True, exist_ok=True)
            (FAILURES / f"{cell}-{seed}.txt").write_text(f"{bad.get('message', '')}\n\n{bad.text or ''}"
                                                         f"\n\n{case.findtext('system-out') or ''}")
        results[cell] = "failed" if bad is not None else ("skipped" if case.find("skipped") is not None else "passed")
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("-k", default=None, help="pytest -k expression choosing cells")
    args = ap.parse_args()
    passed: dict[str, int] = collections.Counter()
    failed: dict[str, list[int]] = collections.defaultdict(list)
    xml = REPO / "build" / f"fault-loop-{os.getpid()}.xml"  # loops may run side by side
    xml.parent.mkdir(exist_ok=True)
    t0 = time.monotonic()
    for i in range(args.runs):
        seed = random.randrange(1 << 30)
        res = one_round(args.k, seed, xml)
        for cell, outcome in res.items():
            if outcome == "passed":
                passed[cell] += 1
            else:
                failed[cell].append(seed)
        bad = [c for c, o in res.items() if o != "passed"]
        print(f"round {i + 1}/{args.runs} FAULT_SEED={seed}: {len(res) - len(bad)} passed"
              + (f", failed: {', '.join(bad)}" if bad else "") + f" ({time.monotonic() - t0:.0f} s)", flush=True)
    cells = sorted(set(passed) | set(failed))
    lines = ["| cell | passed | failed | failing FAULT_SEEDs |", "|---|---|---|---|"]
    lines += [f"| {c} | {passed[c]} | {len(failed[c])} | {' '.join(map(str, failed[c]))} |" for c in cells]
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
