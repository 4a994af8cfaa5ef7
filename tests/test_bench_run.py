"""`python -m bench` (make bench) as a user runs it: a section that fails loses nothing of the
others, the report a user reads is published to docs/bench by the run itself, and the HA cells
read the CPU of the master's and the slave's processes."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from bench import docs
from tests.helpers.procs import REPO, async_wait_until


def test_a_failed_section_is_reported_and_the_others_figures_are_written(tmp_path):
    """psycopg shadowed by a package that cannot be imported (a checkout set up by `make install`
    alone): the reliable section fails with that reason; the limits and the kernels, measured
    before it, are in the report all the same, and the run exits 1."""
    fake = tmp_path / "fake" / "psycopg"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n")
    out, published = tmp_path / "out", tmp_path / "docs"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), str(REPO)]))
    p = subprocess.run([sys.executable, "-m", "bench", "--only", "kernels,reliable", "--out", str(out),
                        "--docs", str(published), "--no-plots"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    figs = json.loads((out / "latest.json").read_text())
    assert figs["meta"]["failed"] == {"reliable": "ModuleNotFoundError: No module named 'psycopg'"}
    assert figs["limits"]["memcpy_GiBps"] > 0 and figs["kernels"]["test_encode_record_1k"]["median_s"] > 0
    assert figs["reliable"] == {}
    md = (out / "latest.md").read_text()
    assert "| reliable | ModuleNotFoundError: No module named 'psycopg' |" in md
    assert "| encode_record 1 KiB |" in md
    assert "psycopg" in (out / "failed-reliable.txt").read_text()  # the traceback, beside the report
    assert not published.exists()  # not every section ran: docs/bench keeps the last whole run


def test_publish_writes_the_report_and_its_plots_and_drops_a_stale_plot(tmp_path):
    out, published = tmp_path / "out", tmp_path / "docs"
    out.mkdir()
    published.mkdir()
    (published / "peers.png").write_bytes(b"an older run's")
    (published / "latest.md").write_text("# Benchmark 2026-11-23 (full)\n")
    plots = []
    for what in ("throughput", "latency", "limits"):
        plots.append(str(out / f"bench-20261128-101010-quick-{what}.png"))
        with open(plots[-1], "wb") as f:
            f.write(what.encode())
    written = docs.publish("# Benchmark 2026-11-28 10:10:10 (quick)\n", plots, str(published))
    assert sorted(os.path.basename(w) for w in written) == ["latency.png", "latest.md", "limits.png", "throughput.png"]
    assert (published / "latency.png").read_bytes() == b"latency"
    assert not (published / "peers.png").exists()  # this run drew none: no older one beside the new report
    md = (published / "latest.md").read_text()
    assert md.startswith("# Benchmark 2026-11-28 10:10:10 (quick)\n")
    assert "![throughput](throughput.png)" in md and "peers.png" not in md


def test_ha_cells_read_the_cpu_of_master_and_slave(tmp_path):
    """The HA send cells read the CPU of every process of both brokers over their clock (they
    printed `broker CPU 0.00 us/msg`: nothing was read)."""
    from bench import ha_bench
    from bench.processes import free_port
    from broker.store.offset_table import Slot

    async def cell():
        ha_port = free_port()
        with ha_bench.Node(str(tmp_path), "SYNC_MASTER", ha_port) as master, \
                ha_bench.Node(str(tmp_path), "SLAVE", free_port(), f"127.0.0.1:{ha_port}", broker_id=1) as slave:
            await async_wait_until(lambda: master.table.load(Slot.HA_SLAVES), 30, "the slave to link")
            return await ha_bench._send_with_cpu(master, slave, 1.0, 8)

    r = asyncio.run(cell())
    per = r.extra["cpu_us_per_msg_by_process"]
    assert r.msgs > 0 and r.broker_cpu_s > 0
    assert {"broker", "ha", "slave/ha", "total"} <= set(per), per
    # SYNC_MASTER: the master's HA service ships every message, the slave's HA client takes it in
    assert per["broker"] > 0 and per["ha"] > 0 and per["slave/ha"] > 0
    assert per["total"] >= per["broker"] + per["ha"] + per["slave/ha"]
    assert "broker CPU-us/msg broker " in r.line()


def _java_missing() -> str:
    from bench.java_peer import JavaUnavailable, check_available
    try:
        check_available()
    except JavaUnavailable as e:
        return str(e)
    return ""


@pytest.mark.skipif(bool(_java_missing()), reason=_java_missing() or "java and the jars are there")
def test_java_peer_cells_drive_both_brokers_with_the_same_loadgen_and_read_every_process(tmp_path):
    """A tiny version of the `java` section: ASYNC_FLUSH, one send shape and the pull, on our broker
    and on Apache RocketMQ's; both answer every request, the JVM's CPU is read (split by thread kind),
    the pull reads from the Java broker (it needs the subscription in the request), and the report
    has the side-by-side row with ours/Java."""
    from bench import java_bench
    J = java_bench.run_all(True, str(tmp_path), seconds=1.0, modes=["ASYNC_FLUSH"], shapes=["send64", "pull"],
                           grpc=False, warm_s=(0.0, 2.0), progress=lambda _: None)
    assert J["java"].startswith("Apache RocketMQ 5.5.0 on ")
    assert [(c["mode"], c["shape"]) for c in J["cells"]] == [("ASYNC_FLUSH", "send64"), ("ASYNC_FLUSH", "pull")]
    for c in J["cells"]:
        o, j = c["ours"], c["java"]
        assert o["msgs"] > 0 and j["msgs"] > 0 and o["errors"] == 0, c
        assert j["errors"] <= j["msgs"] // 100, c  # SYSTEM_BUSY: its send queue's 200 ms wait, on a loaded machine
        assert "broker" in o["cpu_us_per_msg"] and {"jvm", "jvm/jit", "jvm/gc"} <= set(j["cpu_us_per_msg"])
        assert c["ratio"] == pytest.approx(o["msgs_per_s"] / j["msgs_per_s"])
        assert c["settings"]["java"] == "flushDiskType=ASYNC_FLUSH, brokerRole=ASYNC_MASTER"
    send = J["cells"][0]
    assert send["ours"]["cpu_us_per_msg"]["total"] > 0 and send["java"]["cpu_us_per_msg"]["jvm"] > 0
    assert send["warmup"]["java"]["rounds"]  # the JVM was warmed before its clock
    md = "\n".join(java_bench.markdown(J))
    assert "## Against Apache RocketMQ's Java broker" in md
    assert f"| ASYNC_FLUSH | send x64 pipelined | {J['cells'][0]['ours']['msgs_per_s']:,.0f} |" in md
    assert not list(tmp_path.glob("java-*"))  # every JVM's directory gone: stopped and cleaned


def test_turns_reads_each_process_runs_and_how_long_two_ran_at_once():
    """bench.turns on `perf sched timehist` lines (end time, cpu, task[tid/pid], wait, delay, run
    in ms): a run ends at its time; a thread of another process and other tasks are not counted."""
    from bench.turns import both_at_once, run_intervals
    hist = """           time    cpu  task name                       wait time  sch delay   run time
   100.001000 [0000]  python[11]                          0.000      0.000      1.000
   100.001500 [0001]  python[22]                          0.000      0.000      1.000
   100.002000 [0000]  warm-ahead[23/22]                   0.000      0.000      0.500
   100.003000 [0000]  python[11]                          1.000      0.000      0.500
   100.003000 [0001]  loadgen[99]                         0.000      0.000      2.000
   100.004000 [0000]  python[22]                          0.000      0.000      1.000
"""
    runs = run_intervals(hist, {11, 22})
    assert [(round(s, 4), round(e, 4), cpu) for s, e, cpu in runs[11]] == [(100.0, 100.001, 0), (100.0025, 100.003, 0)]
    assert [(round(s, 4), round(e, 4), cpu) for s, e, cpu in runs[22]] == [(100.0005, 100.0015, 1), (100.003, 100.004, 0)]
    assert round(both_at_once(runs[11], runs[22]), 6) == 0.0005, "only the first runs overlap, by 0.5 ms"
    assert both_at_once(runs[11], []) == 0.0
