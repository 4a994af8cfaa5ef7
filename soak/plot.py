"""The soak's figure from a run's folder (matplotlib, Agg backend), faults marked on every panel:

- RssAnon (MiB) of each role's main process and of its largest service, over time (the project's
  processes; the Java consumer's JVM is in samples.csv);
- their descriptors other than the store's files (sockets, pipes...);
- p99 (and p50) of the acknowledged sends' latency per minute, per bulk topic, log scale;
- acknowledged sends per second, per minute, per bulk topic.

    python -m soak.plot <run folder> <png>"""
from __future__ import annotations

import collections
import csv
import json
import sys
from pathlib import Path

import matplotlib

from .trend import NOT_JUDGED

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"kill9": "red", "sigstop": "orange", "linkcut": "purple", "diskfull": "brown", "fsync": "black"}


def _series(run: Path, column: str):
    by = collections.defaultdict(list)
    with open(run / "samples.csv") as f:
        for r in csv.DictReader(f):
            by[r["role"], r["process"]].append((float(r["t_s"]) / 60, int(r[column])))
    return by


def _shown(by) -> list:
    """Each role's main process and its service with the most memory at the end (a few lines); the
    project's processes only (a client's JVM would flatten the scale)."""
    keys = []
    for role in sorted({k[0] for k in by} - set(NOT_JUDGED)):
        mine = [k for k in by if k[0] == role]
        keys += [k for k in mine if k[1] in ("main", "java")]
        services = [k for k in mine if k[1] not in ("main", "java")]
        if services:
            keys.append(max(services, key=lambda k: by[k][-1][1]))
    return keys


def _faults(ax, faults) -> None:
    for f in faults:
        ax.axvspan(f["start_s"] / 60, max(f["end_s"], f["start_s"] + 1) / 60, color=COLORS.get(f["kind"], "grey"),
                   alpha=0.15, lw=0)


def plot(run: Path, png: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    faults = summary["faults"]
    fig, axes = plt.subplots(4, 1, figsize=(12, 14), sharex=True, layout="constrained")
    rss = _series(run, "rss_anon")
    for k in _shown(rss):
        t, v = zip(*rss[k])
        axes[0].plot(t, [x / 2**20 for x in v], lw=0.9, label=f"{k[0]}/{k[1]}")
    axes[0].set_ylabel("RssAnon (MiB)")
    axes[0].legend(fontsize=7, ncol=3)
    fds = _series(run, "other_fds")
    for k in _shown(fds):
        t, v = zip(*fds[k])
        axes[1].plot(t, v, lw=0.9, label=f"{k[0]}/{k[1]}")
    axes[1].set_ylabel("descriptors (not the store's files)")
    minutes = collections.defaultdict(list)
    with open(run / "minutes.csv") as f:
        for r in csv.DictReader(f):
            minutes[r["topic"]].append(r)
    for topic, rows in minutes.items():
        rows = [r for r in rows if float(r["t_s"]) + 60 <= summary["settings"]["seconds"] + 1]  # whole minutes
        t = [float(r["t_s"]) / 60 for r in rows]
        axes[2].plot(t, [float(r["p99_ms"]) if r["p99_ms"] else float("nan") for r in rows], lw=1,
                     label=f"{topic} p99")
        axes[2].plot(t, [float(r["p50_ms"]) if r["p50_ms"] else float("nan") for r in rows], lw=0.7, ls="--",
                     label=f"{topic} p50")
        axes[3].plot(t, [int(r["acked"]) / 60 for r in rows], lw=1, label=topic)
    axes[2].set_yscale("log")
    axes[2].set_ylabel("send latency per minute (ms)")
    axes[2].legend(fontsize=7, ncol=2)
    axes[3].set_ylabel("acknowledged msgs/s")
    axes[3].set_xlabel("minutes (faults shaded: " + ", ".join(f"{k} {c}" for k, c in COLORS.items()) + ")")
    axes[3].legend(fontsize=7)
    for ax in axes:
        _faults(ax, faults)
        ax.grid(alpha=0.3)
    v = summary["verdict"]
    fig.suptitle(f"soak {summary['settings']['seconds'] / 3600:.2f} h: {summary['messages']['acked']:,} acknowledged, "
                 f"{v['acknowledged_lost']} lost, {len(faults)} faults\nstill growing at the end: "
                 f"{'none' if v['no_unbounded_growth'] else ', '.join(v['growing'])}", fontsize=10)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    plot(Path(sys.argv[1]), Path(sys.argv[2]))
