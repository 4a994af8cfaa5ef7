"""Does a process's memory (or its count of open files) level off? For each process (role and
label) the samples of its latest incarnation (a restart by a fault starts a new one) are split in
halves and a line fitted to the last half: growth that goes on there, above a floor that noise and
caches stay under, is "grows"; else "levels off". A last incarnation too short for that (under 12
samples, or a last half under 15 minutes) says "too short"; a restarted process also shows each
incarnation's peak. The real clients' processes are shown, not judged.

Judged: RssAnon and the descriptors other than the store's files (sockets, pipes...). VmRSS and the
store's descriptors grow with the log kept, by design, and are fitted and shown only.
Floors: 2 MiB/h or 2 %/h of the level for memory, 2 descriptors/h or 5 %/h for descriptors."""
from __future__ import annotations

import collections

import numpy as np

MIN_SAMPLES = 12
MIN_HALF_SPAN_S = 900  # the fitted half must span a quarter of an hour: a restart's warm-up is not a trend
# the real clients' processes are sampled and shown, not judged: a JVM's heap grows to its -Xmx
NOT_JUDGED = ("java-consumer",)


def incarnations(rows, column: int) -> dict[tuple[str, str], list[list[tuple[float, int, int]]]]:
    """(role, label) -> its incarnations in order, each the (t, value, pid) samples of one pid."""
    out: dict[tuple[str, str], list[list]] = collections.defaultdict(list)
    for r in rows:
        runs = out[r[1], r[2]]
        if not runs or runs[-1][-1][2] != r[3]:
            runs.append([])
        runs[-1].append((r[0], r[column], r[3]))
    return out


def fit(samples, per_hour_floor: float, rel_floor: float) -> dict:
    t = np.array([x[0] for x in samples], dtype=float)
    v = np.array([x[1] for x in samples], dtype=float)
    first = {"first": float(v[0]), "last": float(v[-1]), "samples": len(v), "span_s": float(t[-1] - t[0])}
    half = len(v) // 2
    if len(v) < MIN_SAMPLES or t[-1] - t[half] < MIN_HALF_SPAN_S:
        return {**first, "verdict": "too short"}
    slope = np.polyfit(t[half:] / 3600, v[half:], 1)[0] if t[-1] > t[half] else 0.0
    early = np.polyfit(t[:half] / 3600, v[:half], 1)[0] if t[half - 1] > t[0] else 0.0
    level = float(np.mean(v[half:]))
    floor = max(per_hour_floor, rel_floor * level)
    return {**first, "slope_first_half_per_h": float(early), "slope_last_half_per_h": float(slope),
            "level": level, "floor_per_h": floor, "verdict": "grows" if slope > floor else "levels off"}


def verdicts(rows) -> dict:
    """{"rss_anon": {role/label: fit of its last incarnation, with "peaks": each incarnation's
    maximum when it was restarted}, "vm_rss", "store_fds", "other_fds": likewise, "growing": [...]}."""
    out: dict = {"not_judged": list(NOT_JUDGED)}
    for kind, column, per_hour, rel in (("rss_anon", 5, 2 << 20, 0.02), ("vm_rss", 4, 2 << 20, 0.02),
                                        ("store_fds", 6, 2, 0.05), ("other_fds", 7, 2, 0.05)):
        out[kind] = {}
        for (role, label), runs in sorted(incarnations(rows, column).items()):
            f = fit(runs[-1], per_hour, rel)
            if len(runs) > 1:
                f["peaks"] = [max(x[1] for x in run) for run in runs]
            out[kind][f"{role}/{label}"] = f
    # VmRSS and the store's descriptors grow with the log kept, by design: fitted and shown only
    out["growing"] = sorted(f"{kind}: {name}" for kind in ("rss_anon", "other_fds")
                            for name, f in out[kind].items()
                            if f["verdict"] == "grows" and name.split("/")[0] not in NOT_JUDGED)
    return out
