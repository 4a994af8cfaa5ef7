"""A disk that fails its fdatasync (PostgreSQL's "fsyncgate", 2018): after a failed call the kernel
may have marked the dirty pages clean and dropped them, so a later call that succeeds proves
nothing. The broker must never acknowledge as flushed what a failed sync covered, must stop
taking writes, and must come back after a restart from what is on disk, checked by CRC.

The failures are real system-call failures: tests/faults/fsync_fault.c, an LD_PRELOAD shim built
here with gcc, makes fdatasync/fsync on the commit log's files fail with EIO (once, or always)
in the broker and its service processes, as its control file says. Apache RocketMQ logs a failed
force() and goes on acknowledging writes; the refusal here is ours (docs/compat.md)."""
from __future__ import annotations

import os
import re
import time
import urllib.request
from pathlib import Path

import pytest

from broker.remoting import codes
from tests.conftest import free_port
from tests.helpers.fault_shim import build_shim
from tests.helpers.ha_cluster import Broker
from tests.helpers.procs import wait_until
from tests.helpers.raw_wire import RawConn, bodies, pull, send_message

TOPIC = "FsyncFault"


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    return build_shim(tmp_path_factory.mktemp("shim"))


def _broker(tmp_path: Path, shim: Path, flush: str) -> tuple[Broker, Path, int]:
    ctl = tmp_path / "fsync.ctl"
    ctl.write_text("")
    metrics = free_port()
    env = {**os.environ, "LD_PRELOAD": str(shim), "FSYNC_FAULT_CTL": str(ctl)}
    b = Broker(tmp_path, "b", "", "ASYNC_MASTER", 0, env=env,
               extra=f"flushDiskType={flush}\nmetricsPort={metrics}\nsyncFlushTimeout=30000\n")
    return b, ctl, metrics


def _scrape(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def _send(conn: RawConn, i: int):
    conn.sock.settimeout(60)
    return send_message(conn, TOPIC, b"m%05d" % i)


def _stored(port: int) -> list[bytes]:
    conn = RawConn(port)
    try:
        out, offset = [], 0
        while True:
            r = pull(conn, TOPIC, 0, offset)
            got = bodies(r)
            if not got:
                return out
            out += got
            offset += len(got)
    finally:
        conn.close()


def test_a_failed_fdatasync_is_never_acknowledged_stops_writes_and_a_restart_recovers(tmp_path, shim):
    b, ctl, metrics = _broker(tmp_path, shim, "SYNC_FLUSH")
    b.start()
    try:
        conn = RawConn(b.port)
        acked = []
        for i in range(20):
            r = _send(conn, i)
            assert r.code == codes.SUCCESS, r.remark
            acked.append(b"m%05d" % i)
        ctl.write_text("eio")
        # the send whose flush fails is answered at once, not as flushed and not after syncFlushTimeout
        t0 = time.monotonic()
        r = _send(conn, 20)
        assert r.code == codes.FLUSH_DISK_TIMEOUT, (r.code, r.remark)
        assert time.monotonic() - t0 < 15, "answered only at syncFlushTimeout (30 s)"
        assert "fdatasync" in Path(f"{ctl}.log").read_text()
        # then writes are refused, naming why, even once fdatasync works again: a later success
        # proves nothing about the pages the failed one dropped
        ctl.write_text("")
        for i in (21, 22):
            r = _send(conn, i)
            assert r.code == codes.SERVICE_NOT_AVAILABLE and "fdatasync failed" in r.remark, (r.code, r.remark)
        assert _scrape(metrics, "rocketmq_flush_errors") >= 1
        assert _scrape(metrics, "rocketmq_writes_refused_total") >= 2
        log = b.stderr()
        assert "fdatasync failed" in log and "refusing writes until the broker is restarted" in log
        # reads still work: what was acknowledged is served
        assert _stored(b.port)[:20] == acked
        conn.close()
        b.stop()
        assert "next start recovers" in b.stderr()  # not marked clean: the restart scans by CRC
        b.start()
        assert re.search(r"recovered commit log .* scanned [1-9]", b.stderr().split("listening on")[-2])
        conn = RawConn(b.port)
        r = _send(conn, 23)
        assert r.code == codes.SUCCESS, r.remark  # the restarted broker takes writes again
        conn.close()
        stored = _stored(b.port)
        assert stored[:20] == acked and stored[-1] == b"m00023"
        assert set(stored) <= set(acked) | {b"m00020", b"m00023"}  # nothing refused was stored
    finally:
        b.stop()


def test_an_async_flush_that_fails_once_stops_writes_and_a_kill_9_then_restart_keeps_every_ok(tmp_path, shim):
    b, ctl, metrics = _broker(tmp_path, shim, "ASYNC_FLUSH")
    b.start()
    try:
        conn = RawConn(b.port)
        ctl.write_text("eio-once")
        acked, i = [], 0

        def refused() -> bool:
            nonlocal i
            r = _send(conn, i)
            i += 1
            if r.code == codes.SUCCESS:
                acked.append(b"m%05d" % (i - 1))
                return False
            assert r.code == codes.SERVICE_NOT_AVAILABLE and "fdatasync failed" in r.remark, (r.code, r.remark)
            return True
        # the timed flush (every 500 ms once 4 pages are dirty) meets the failure while we send
        wait_until(refused, 30, "writes refused after the failed flush")
        assert Path(f"{ctl}.log").read_text().count("\n") == 1 and ctl.read_text() == ""  # failed once only
        assert refused()  # still refused though fdatasync works again
        assert _scrape(metrics, "rocketmq_flush_errors") == 1
        conn.close()
        b.kill9()
        b.start()
        stored = _stored(b.port)
        assert stored == acked  # every SEND_OK is there after the crash, nothing refused is
    finally:
        b.stop()


async def _timed_sends(port: int, n: int, in_flight: int) -> list[tuple[float, float, int]]:
    """n SEND_MESSAGE_V2 on one connection, `in_flight` at a time: (sent at, answered at, code) each."""
    import asyncio

    from broker.remoting.command import RemotingCommand
    from broker.remoting.connection import connect
    conn = await connect("127.0.0.1", port)
    sem = asyncio.Semaphore(in_flight)

    async def one(i: int):
        async with sem:
            ext = {"a": "pg", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
                   "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false"}
            t0 = time.monotonic()
            r = await conn.request(RemotingCommand.request(codes.SEND_MESSAGE_V2, ext, b"s%05d" % i), 60)
            return t0, time.monotonic(), r.code
    try:
        return await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        conn.close()


def test_a_slow_disk_keeps_group_commit_times_out_sends_and_never_answers_ok_before_the_sync(tmp_path, shim):
    import asyncio
    b, ctl, metrics = _broker(tmp_path, shim, "SYNC_FLUSH")
    b.conf.write_text(b.conf.read_text().replace("syncFlushTimeout=30000", "syncFlushTimeout=1000"))
    b.start()
    try:
        syncs0 = _scrape(metrics, "rocketmq_flush_seconds_count")
        # every fdatasync takes 200 ms: slower than the sends come, faster than syncFlushTimeout
        ctl.write_text("delay 200")
        answers = asyncio.run(_timed_sends(b.port, 400, 64))
        assert all(code == codes.SUCCESS for _, _, code in answers)
        syncs = _scrape(metrics, "rocketmq_flush_seconds_count") - syncs0
        assert syncs * 8 <= len(answers), f"{syncs:.0f} syncs for {len(answers)} sends: group commit stopped grouping"
        assert all(t1 - t0 >= 0.2 for t0, t1, _ in answers)  # none answered before a sync could finish
        # every fdatasync takes 1.5 s, longer than syncFlushTimeout: the sends are answered
        # FLUSH_DISK_TIMEOUT after about a second, none SEND_OK; the broker's memory stays flat
        # while producers keep sending
        ctl.write_text("delay 1500")
        from bench.crowd import rss_bytes
        rss = []
        for _ in range(3):
            answers = asyncio.run(_timed_sends(b.port, 200, 64))
            assert {code for _, _, code in answers} <= {codes.FLUSH_DISK_TIMEOUT, codes.SUCCESS}
            late = [t1 - t0 for t0, t1, code in answers if code == codes.FLUSH_DISK_TIMEOUT]
            assert len(late) >= len(answers) // 2 and min(late) >= 0.9
            assert all(t1 - t0 >= 1.5 for t0, t1, code in answers if code == codes.SUCCESS)
            rss.append(rss_bytes(b.child.proc.pid))
        assert max(rss) - min(rss) < 64 << 20, f"RSS grew {rss}"
        ctl.write_text("")  # the disk is fast again: once the sync under way ends, sends are SEND_OK again
        wait_until(lambda: asyncio.run(_timed_sends(b.port, 1, 1))[0][2] == codes.SUCCESS, 30, "a SEND_OK again")
        assert all(code == codes.SUCCESS for _, _, code in asyncio.run(_timed_sends(b.port, 50, 16)))
    finally:
        b.stop()


def test_a_pwrite_that_writes_nothing_fails_the_segment_warm_up_instead_of_spinning(tmp_path, shim):
    """A new SYNC_FLUSH segment is warmed by pwrite of zeros (codec.warm_file), which continues
    short writes; a pwrite returning 0 (no byte, no error) must end it with an error naming the
    offset, not loop forever. The shim's zero-pwrite mode, in a process of its own."""
    import subprocess
    import sys

    from tests.helpers.fault_shim import faults_logged, shim_env
    from tests.helpers.procs import REPO
    ctl = tmp_path / "ctl"
    env = shim_env(shim, ctl, match="/warm-target")
    ctl.write_text("zero-pwrite")
    code = ("import os; from broker.kernels.codec import warm_file; "
            f"fd = os.open({str(tmp_path / 'warm-target')!r}, os.O_RDWR | os.O_CREAT); "
            "warm_file(fd, 0, 1 << 16, 16384)")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode != 0 and "pwrite wrote no byte" in r.stderr and "warming at offset 0" in r.stderr, r.stderr
    assert faults_logged(ctl) and faults_logged(ctl)[0].startswith("zero-pwrite")
