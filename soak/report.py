"""The files a soak run writes into its output folder:

- samples.csv: t, role, process, pid, VmRSS, RssAnon, store / other descriptors, CPU seconds
  (one row per process per sample);
- minutes.csv: per minute and bulk topic, sends, acked, p50 / p99 of the acknowledged sends' latency;
- faults.csv: each fault, its target, start, end, note, error;
- summary.json: the run's settings, totals, p99 per hour, the history check, the memory verdicts."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from .load import OK
from .sampler import COLUMNS


def per_window(sender, window: float) -> list[dict]:
    """Per `window` seconds of send start: sends, acknowledged, and p50/p99 of the acked latency (ms)."""
    log = sender.log
    n = len(log)
    began = np.frombuffer(log.began, dtype=np.float64)[:n]
    lat = np.frombuffer(log.latency, dtype=np.float32)[:n]
    ok = np.frombuffer(log.outcome, dtype=np.int8)[:n] == OK
    if n == 0:
        return []
    idx = (began // window).astype(int)
    rows = []
    for w in range(int(idx.max()) + 1):
        sel = idx == w
        acked = lat[sel & ok] * 1000
        rows.append({"topic": sender.topic, "t_s": w * window, "sends": int(sel.sum()), "acked": int(acked.size),
                     "p50_ms": float(np.percentile(acked, 50)) if acked.size else None,
                     "p99_ms": float(np.percentile(acked, 99)) if acked.size else None})
    return rows


def cpu_share(samples, seconds: float) -> dict[str, float]:
    """Per role, the share of one core its processes used over the run (CPU seconds / seconds)."""
    span: dict[tuple[str, int], list[float]] = {}
    for r in samples:
        if r[8] >= 0:
            lo_hi = span.setdefault((r[1], r[3]), [r[8], r[8]])
            lo_hi[1] = r[8]
    out: dict[str, float] = {}
    for (role, _), (lo, hi) in span.items():
        out[role] = out.get(role, 0.0) + (hi - lo)
    return {role: round(v / max(1.0, seconds), 3) for role, v in sorted(out.items())}


def write(out: Path, settings: dict, samples, senders, faults, checks, trends, extra: dict) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "samples.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(samples)
    minutes = [r for s in senders for r in per_window(s, 60)]
    with open(out / "minutes.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["topic", "t_s", "sends", "acked", "p50_ms", "p99_ms"])
        w.writeheader()
        w.writerows(minutes)
    with open(out / "faults.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["n", "kind", "target", "start_s", "end_s", "note", "error"])
        w.writerows([(i, r.kind, r.target, round(r.start, 1), round(r.end, 1), r.note, r.error)
                     for i, r in enumerate(faults, 1)])
    hours = [r for s in senders for r in per_window(s, 3600)]
    lost = sum(c["lost"] for c in checks)
    summary = {
        "settings": settings,
        "messages": {"sent": sum(len(s.log) for s in senders) + sum(sum(c["sends"].values()) for c in checks
                                                                      if "Producer" not in c["source"]),
                     "acked": sum(c["acked"] for c in checks), "lost": lost,
                     "duplicates": sum(c["duplicates"] for c in checks)},
        "throughput_acked_per_s": {s.topic: round(s.log.outcome.count(OK) / max(1.0, settings["seconds"]), 1)
                                   for s in senders},
        "p99_ms_per_hour": hours,
        "cpu_share_of_a_core": cpu_share(samples, settings["seconds"]),
        "faults": [{"n": i, "kind": r.kind, "target": r.target, "start_s": round(r.start, 1), "end_s": round(r.end, 1),
                    "note": r.note, "error": r.error, **r.extra} for i, r in enumerate(faults, 1)],
        "checks": checks,
        "memory": trends,
        **extra,
    }
    summary["verdict"] = {
        "acknowledged_lost": lost,
        "no_unbounded_growth": not trends["growing"],
        "growing": trends["growing"],
        "pass": lost == 0 and not trends["growing"],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary
