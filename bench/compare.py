"""What moved between two `python -m bench` results files (`python -m bench --compare OLD.json [NEW.json]`).

Every headline numeric figure (throughput, latency percentiles, ratios, total CPU, the limits;
`all_figures` for every number) present in both files (nested keys joined with " > "; run bookkeeping such as
timings of the harness itself, settings and the targets' thresholds left out) is listed with its
old and new value and the % change, largest moves first; figures that moved less than the
threshold are counted, not listed.
"""
from __future__ import annotations

import json
import math
import sys

SKIP_TOP = {"meta"}
SKIP_KEYS = {"threshold", "rounds", "repeats", "seconds", "msgs", "bytes", "records", "_suite_s", "store_setup_s",
             "in_flight", "body", "cpu_count", "batch", "tasks"}


def flatten(d, prefix: str = "", out: dict | None = None) -> dict:
    out = {} if out is None else out
    if isinstance(d, dict):
        for k, v in d.items():
            if not prefix and k in SKIP_TOP:
                continue
            if k in SKIP_KEYS:
                continue
            flatten(v, f"{prefix} > {k}" if prefix else str(k), out)
    elif isinstance(d, list):
        for i, v in enumerate(d):
            key = v.get("target") if isinstance(v, dict) and "target" in v else str(i)
            flatten(v, f"{prefix} > {key}", out)
    elif isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d):
        out[prefix] = float(d)
    return out


# the figures a reader acts on; the rest (per-service CPU, % of limits, ...) only with all_figures
HEADLINE = {"msgs_per_s", "mb_per_s", "MBps", "records_per_s", "p50_us", "p99_us", "p999_us", "median_s",
            "throughput_ratio", "p50_ratio", "p99_ratio", "cpu_s_per_M_total_server", "server_cpu_s_per_M",
            "lag_p99_bytes", "memcpy_GiBps", "seq_durable_MBps", "loopback_GiBps", "loopback_rtt_p50_us",
            "fdatasync_p50_us", "fdatasync_p99_us", "value", "x_memcpy_bench", "sync_vs_async", "sync_added_p50_us",
            "outage_p50_s", "outage_max_s"}


def moved(old: dict, new: dict, threshold_pct: float = 5.0, all_figures: bool = False) -> tuple[list, int, int]:
    a, b = flatten(old), flatten(new)
    common = [k for k in a if k in b and (all_figures or k.rsplit(" > ", 1)[-1] in HEADLINE)]
    rows = []
    for k in common:
        o, n = a[k], b[k]
        pct = (n - o) / abs(o) * 100 if o else (0.0 if n == 0 else math.inf)
        if abs(pct) >= threshold_pct:
            rows.append((k, o, n, pct))
    rows.sort(key=lambda r: -abs(r[3]) if math.isfinite(r[3]) else -1e18)
    return rows, len(common), len(common) - len(rows)


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.3g}"


def report(old_path: str, new_path: str, threshold_pct: float = 5.0, all_figures: bool = False,
           max_rows: int = 80) -> str:
    with open(old_path) as f:
        old = json.load(f)
    with open(new_path) as f:
        new = json.load(f)
    rows, n_common, n_still = moved(old, new, threshold_pct, all_figures)
    om, nm = old.get("meta", {}), new.get("meta", {})
    lines = [f"## Compared with {old_path} ({om.get('started', '?')}) -> {new_path} ({nm.get('started', '?')})", "",
             f"{n_common} {'' if all_figures else 'headline '}figures in both; {len(rows)} moved by >= "
             f"{threshold_pct:g} %, {n_still} within it" + (f"; the {max_rows} largest moves shown" if len(rows) > max_rows
                                                           else "") + ".", "",
             "| figure | old | new | change |", "|---|---|---|---|"]
    for k, o, n, pct in rows[:max_rows]:
        lines.append(f"| {k} | {_fmt(o)} | {_fmt(n)} | {pct:+.1f} % |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    thr = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    print(report(sys.argv[1], sys.argv[2], thr))
