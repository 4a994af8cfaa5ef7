"""The soak harness (soak/, `make soak`) kept from rotting: a short run of the real thing
(both groups, the project's Producer, one kill -9 of the DLedger leader, the drain and the check,
the files and the figure), and its checker and memory verdict on histories made up to fail."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

from soak import check, trend
from soak.cluster import SHIM_SRC
from soak.faults import FaultRecord
from tests.helpers.procs import REPO


def test_a_short_soak_with_one_kill_9_loses_nothing_and_writes_its_files(tmp_path):
    out, png = tmp_path / "out", tmp_path / "soak.png"
    env = {**os.environ, "PYTHONPATH": str(REPO), "SOAK_SECONDS": "30", "SOAK_FAULT_EVERY": "8", "SOAK_HOLD": "4",
           "SOAK_FAULTS": "kill9", "SOAK_CLIENTS": "", "SOAK_RATE": "50", "SOAK_OUT": str(out),
           "SOAK_PLOT": str(png), "SOAK_ROOT": str(tmp_path / "stores")}
    p = subprocess.run([sys.executable, "-m", "soak"], env=env, cwd=str(REPO), capture_output=True, text=True,
                       timeout=150)
    assert p.returncode in (0, 1), p.stdout + p.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    faults = summary["faults"]
    assert [f["kind"] for f in faults] == ["kill9"] and not faults[0]["error"], faults
    assert faults[0]["target"].startswith("broker-a leader")
    bulk = {c["source"].split()[0]: c for c in summary["checks"]}
    assert set(bulk) == {"SoakD", "SoakM"}
    for c in bulk.values():
        assert c["acked"] > 300 and c["lost"] == 0 and c["misplaced"] == 0, c
    assert summary["verdict"]["acknowledged_lost"] == 0
    # the leader's kill shows: some sends to broker-a went unanswered or refused meanwhile
    assert set(bulk["SoakD"]["sends"]) - {"ok"}, bulk["SoakD"]["sends"]
    with open(out / "samples.csv") as f:
        roles = {r["role"] for r in csv.DictReader(f)}
    assert {"namesrv", "dledger-n0", "dledger-n1", "dledger-n2", "ms-master", "ms-slave", "grpc-front"} <= roles
    assert png.stat().st_size > 10_000
    assert SHIM_SRC.exists()  # the fsync fault's shim, which the full rotation builds
    # nothing of the run is left running (every broker's config lies under SOAK_ROOT)
    assert subprocess.run(["pgrep", "-f", str(tmp_path / "stores")], capture_output=True).returncode == 1


class _Log:
    began = [1.0, 2.0, 50.0, 3.0]
    outcome = [0, 0, 0, 2]
    queue = [0, 1, 0, -1]
    offset = [5, 0, 9, -1]

    def __len__(self):
        return 4


class _Sender:
    topic, log = "T", _Log()

    def key(self, i):
        return b"k%d" % i


def test_the_checker_finds_a_lost_ack_a_duplicate_by_fault_and_tells_reclaimed_from_lost():
    stored = check.Stored()
    stored.where[b"k0"] += [("g", 0, 5), ("g", 0, 6)]  # stored twice
    stored.where[b"k3"] += [("g", 2, 0)]                # refused, yet stored
    stored.mins["g", "T", 1] = 3                        # queue 1's offsets below 3 were deleted
    faults = [FaultRecord("kill9", "x", 0.5, 1.5)]
    row = check.check_bulk(_Sender(), "g", stored, faults, grace=10).row()
    assert row["lost"] == 1 and row["lost_examples"][0]["key"] == "k2"   # acked at 50 s, found nowhere
    assert row["reclaimed"] == 1                                          # k1: offset 0 < minimum 3
    assert row["duplicates"] == 1 and row["duplicates_by_fault"] == {"1 kill9 x": 1}
    assert row["failed_but_stored"] == 1


def test_the_memory_verdict_tells_growth_that_goes_on_from_growth_that_levels_off():
    rows = []
    for i in range(60):
        t = i * 60.0
        rows.append((t, "a", "main", 1, 0, (100 if i > 20 else 50 + i) << 20, 0, 10, 0))  # levels off
        rows.append((t, "b", "main", 2, 0, (50 << 20) + i * (1 << 20), 0, 10 + i, 0))  # 60 MiB/h, +60 fds/h
        rows.append((t, "c", "main", 3 if i < 40 else 4, 0, (200 - i) << 20 if i < 40 else 80 << 20, 0, 5, 0))
    v = trend.verdicts(rows)
    assert v["rss_anon"]["a/main"]["verdict"] == "levels off"
    assert v["rss_anon"]["b/main"]["verdict"] == "grows" and v["other_fds"]["b/main"]["verdict"] == "grows"
    # the restarted process: its last incarnation only (too short to judge), and each one's peak
    c = v["rss_anon"]["c/main"]
    assert c["samples"] == 20 and c["verdict"] == "too short" and c["peaks"] == [200 << 20, 80 << 20]
    assert v["growing"] == ["other_fds: b/main", "rss_anon: b/main"]
    # a real client's JVM is shown, not judged
    jvm = [(i * 60.0, "java-consumer", "java", 9, 0, (70 + i) << 20, 0, 30, 0) for i in range(60)]
    v = trend.verdicts(jvm)
    assert v["rss_anon"]["java-consumer/java"]["verdict"] == "grows" and v["growing"] == []
