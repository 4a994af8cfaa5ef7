"""The memory verdict of a finished run judged again from its samples.csv (after a change to
trend.py, without running the soak again), summary.json updated and the figure drawn again:

    python -m soak.rejudge <run folder> <png>"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from . import plot, trend


def rows_of(run: Path) -> list[tuple]:
    with open(run / "samples.csv") as f:
        return [(float(r["t_s"]), r["role"], r["process"], int(r["pid"]), int(r["vm_rss"]), int(r["rss_anon"]),
                 int(r["store_fds"]), int(r["other_fds"]), float(r["cpu_s"])) for r in csv.DictReader(f)]


def rejudge(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    trends = trend.verdicts(rows_of(run))
    summary["memory"] = trends
    v = summary["verdict"]
    v.update(no_unbounded_growth=not trends["growing"], growing=trends["growing"],
             **{"pass": v["acknowledged_lost"] == 0 and not trends["growing"]})
    (run / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary


if __name__ == "__main__":
    s = rejudge(Path(sys.argv[1]))
    plot.plot(Path(sys.argv[1]), Path(sys.argv[2]))
    print(s["verdict"])
