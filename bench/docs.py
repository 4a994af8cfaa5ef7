"""The report a user reads, published by every `make bench`: docs/bench/latest.md and its plots
(throughput.png, latency.png, peers.png, limits.png), written at the end of a run of every section
so that the figures in docs/ are always the last run's (its date, commit and machine limits are in
the report's header and first rows).

A plot this run did not draw (its section failed or had nothing to show) is removed rather than
left from an older run beside a newer report.
"""
from __future__ import annotations

import os
import shutil

PLOTS = ("throughput", "latency", "peers", "limits")


def publish(report: str, plot_files: list[str], docs_dir: str) -> list[str]:
    """Copy the run's plots to `docs_dir`/<what>.png and write `docs_dir`/latest.md (the report with
    the plots shown under it); the paths written."""
    os.makedirs(docs_dir, exist_ok=True)
    drawn = {}
    for path in plot_files:  # bench-<stamp>-<what>.png
        what = os.path.splitext(os.path.basename(path))[0].rsplit("-", 1)[-1]
        if what in PLOTS:
            drawn[what] = path
    written = []
    for what in PLOTS:
        target = os.path.join(docs_dir, f"{what}.png")
        if what in drawn:
            shutil.copyfile(drawn[what], target)
            written.append(target)
        elif os.path.exists(target):
            os.unlink(target)
    md = report
    if drawn:
        md += "\n## Plots\n\n" + "".join(f"![{what}]({what}.png)\n" for what in PLOTS if what in drawn)
    target = os.path.join(docs_dir, "latest.md")
    with open(target, "w") as f:
        f.write(md)
    return [target, *written]
