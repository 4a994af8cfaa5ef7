"""Does a process's memory (or its count of open files) level off? For each process (role and
label) the samples of its latest incarnation (a restart by a fault starts a new one) are split in
halves and a line fitted to the last half: growth that goes on there, above a floor that noise and
caches stay under, is "grows"; else "levels off". Too few samples in the last incarnation says so.

Judged: RssAnon and the descriptors other than the store's files (sockets, pipes...). VmRSS and the
store's descriptors grow with the log kept, by design, and are fitted and shown only.
Floors: 2 MiB/h or 2 %/h of the level for memory, 2 descriptors/h or 5 %/h for descriptors."""
from __future__ import annotations

import collections

import numpy as np

MIN_SAMPLES = 12


def incarnations(rows, column: int) -> dict[tuple[str, str], list[tuple[float, int, int]]]:
    """(role, label) -> the last incarnation's (t, value, pid) samples."""
    series: dict[tuple[str, str], list] = collections.defaultdict(list)
    for r in rows:
        series[r[1], r[2]].append((r[0], r[column], r[3]))
    out = {}
    for k, s in series.items():
        last_pid = s[-1][2]
        start = max(i for i, x in enumerate(s) if i == 0 or (x[2] == last_pid and s[i - 1][2] != last_pid))
        out[k] = s[start:]
    return out


def fit(samples, per_hour_floor: float, rel_floor: float) -> dict:
    t = np.array([x[0] for x in samples], dtype=float)
    v = np.array([x[1] for x in samples], dtype=float)
    first = {"first": float(v[0]), "last": float(v[-1]), "samples": len(v), "span_s": float(t[-1] - t[0])}
    if len(v) < MIN_SAMPLES:
        return {**first, "verdict": "too short"}
    half = len(v) // 2
    slope = np.polyfit(t[half:] / 3600, v[half:], 1)[0] if t[-1] > t[half] else 0.0
    early = np.polyfit(t[:half] / 3600, v[:half], 1)[0] if t[half - 1] > t[0] else 0.0
    level = float(np.mean(v[half:]))
    floor = max(per_hour_floor, rel_floor * level)
    return {**first, "slope_first_half_per_h": float(early), "slope_last_half_per_h": float(slope),
            "level": level, "floor_per_h": floor, "verdict": "grows" if slope > floor else "levels off"}


def verdicts(rows) -> dict:
    """{"rss_anon": {role/label: fit}, "open_files": {...}, "growing": [...]}."""
    out = {"rss_anon": {}, "vm_rss": {}, "other_fds": {}, "store_fds": {}}
    for (role, label), s in sorted(incarnations(rows, 5).items()):
        out["rss_anon"][f"{role}/{label}"] = fit(s, 2 << 20, 0.02)
    for (role, label), s in sorted(incarnations(rows, 4).items()):
        out["vm_rss"][f"{role}/{label}"] = {k: v for k, v in fit(s, 2 << 20, 0.02).items()}
    for (role, label), s in sorted(incarnations(rows, 6).items()):
        out["store_fds"][f"{role}/{label}"] = fit(s, 2, 0.05)  # grows with the log kept: shown, not judged
    for (role, label), s in sorted(incarnations(rows, 7).items()):
        out["other_fds"][f"{role}/{label}"] = fit(s, 2, 0.05)
    out["growing"] = sorted({f"{kind}: {name}" for kind in ("rss_anon", "other_fds")
                             for name, f in out[kind].items() if f["verdict"] == "grows"})
    return out
