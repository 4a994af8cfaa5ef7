"""HA benchmark: a master and a slave (`broker serve`, their HA services) on loopback.

  - produce throughput and latency with 64 sends in flight (1 KiB) under ASYNC_MASTER and
    SYNC_MASTER (a SEND_OK then waits for the slave's acknowledgement), then with 1 in flight;
    each with the CPU-µs per message of every process of the master and of the slave over the
    clock (bench.proc_cpu);
  - replication lag under that load: master `wrote` minus slave `received`, sampled from the
    two offset tables every 10 ms;
  - catch-up of a fresh slave: the master preloaded, then a new slave started; MB/s from its
    first replicated byte to the master's end, beside loopback TCP bandwidth of the same run.

    python -m bench.ha_bench [--seconds S] [--preload-mib N] [--batch-kib K]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from bench.limits import loopback_tcp
from bench.proc_cpu import ProcessTree, cpu_us_per_msg
from bench.driver import NetResult, bench_batch, bench_send
from bench.processes import free_port, stop_process, wait_for_line
from broker.store.offset_table import Slot, open_table

SEGMENT = 256 << 20


class Node:
    """One `broker serve` (master or slave) in a fresh store directory; its offset table is open
    for sampling while it runs. Used by this benchmark and by the mode matrix (bench/matrix.py)."""

    def __init__(self, workdir: str, role: str, ha_port: int | None = None, master_ha: str = "",
                 batch: int = 32 * 1024, broker_id: int = 0, flush: str = "ASYNC_FLUSH", namesrv: str = ""):
        self.port = free_port()
        self.ha_port = ha_port or free_port()
        self.role = role
        self.root = tempfile.mkdtemp(prefix=f"ha-{flush.lower()}-{role.lower()}-", dir=workdir)
        self.store = os.path.join(self.root, "store")
        self.conf = os.path.join(self.root, "broker.conf")
        with open(self.conf, "w") as f:
            f.write(f"brokerIP1=127.0.0.1\nlistenPort={self.port}\nhaListenPort={self.ha_port}\nbrokerRole={role}\n"
                    f"brokerId={broker_id}\nstorePathRootDir={self.store}\nmappedFileSizeCommitLog={SEGMENT}\n"
                    f"flushDiskType={flush}\nhaTransferBatchSize={batch}\nnamesrvAddr={namesrv}\n"
                    + (f"haMasterAddress={master_ha}\n" if master_ha else ""))
        self.proc: subprocess.Popen | None = None
        self.table = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "Node":
        env = dict(os.environ, BROKER_LOG_LEVEL="WARNING")
        self.proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "-c", self.conf,
                                      "--status-interval", "3600"], stdout=subprocess.PIPE, env=env, text=True)
        try:
            wait_for_line(self.proc, "listening on", "broker")
            threading.Thread(target=lambda: self.proc.stdout.read(), daemon=True).start()  # drain
            self.table = open_table(self.store)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.table is not None:
            self.table.close()
            self.table = None
        stop_process(self.proc)
        shutil.rmtree(self.root, ignore_errors=True)


def _lag_sampler(master: Node, slave: Node, stop: threading.Event, out: list[int]) -> None:
    while not stop.wait(0.01):  # a measurement of two other processes: sampling, not a wake-up
        out.append(master.table.load(Slot.WROTE) - slave.table.load(Slot.HA_RECEIVED))


def _pct(values: list[int], q: float) -> float:
    s = sorted(values)
    return float(s[min(len(s) - 1, int(q * len(s)))]) if s else float("nan")


async def _send_with_cpu(master: Node, slave: Node, seconds: float, in_flight: int) -> NetResult:
    """bench_send against the master, with the CPU-µs per message of every process of the master
    (broker, flush, reput, ha, ...) and of the slave ("slave", "slave/ha", ...) over its clock."""
    trees = (ProcessTree(master.proc.pid), ProcessTree(slave.proc.pid, "slave", "slave/"))

    def snapshot() -> dict:
        return {k: v for t in trees for k, v in t.snapshot().items()}

    before: dict = {}
    r = await bench_send(master.port, seconds, in_flight, on_start=lambda: before.update(snapshot()))
    per = cpu_us_per_msg(before, snapshot(), r.msgs)
    r.broker_cpu_s = per.get("broker", float("nan")) * r.msgs / 1e6
    r.extra["cpu_us_per_msg_by_process"] = per
    return r


async def produce_cell(role: str, seconds: float, workdir: str, progress) -> dict:
    ha_port = free_port()
    with Node(workdir, role, ha_port) as master, \
            Node(workdir, "SLAVE", free_port(), f"127.0.0.1:{ha_port}", broker_id=1) as slave:
        deadline = time.monotonic() + 30
        while not master.table.load(Slot.HA_SLAVES):  # the slave links in a few ms
            if time.monotonic() > deadline:
                raise RuntimeError("the slave did not link")
            await asyncio.sleep(0.01)
        lags: list[int] = []
        stop = threading.Event()
        sampler = threading.Thread(target=_lag_sampler, args=(master, slave, stop, lags), daemon=True)
        sampler.start()
        try:
            r = await _send_with_cpu(master, slave, seconds, 64)
        finally:
            stop.set()
            sampler.join()
        r.name = f"{role} send 1 KiB x64 in flight"
        progress(r.line())
        out = r.as_dict()
        # one in flight: the latency a send pays for the copy, without queueing behind 63 others
        one = await _send_with_cpu(master, slave, min(seconds, 2.0), 1)
        one.name = f"{role} send 1 KiB x1 in flight"
        progress(one.line())
        out.update(one_p50_us=one.pct_us(0.5), one_p99_us=one.pct_us(0.99), one_msgs_per_s=one.msgs_per_s,
                   one_cpu_us_per_msg_by_process=one.extra["cpu_us_per_msg_by_process"])
        out.update(lag_p50_bytes=_pct(lags, 0.5), lag_p99_bytes=_pct(lags, 0.99), lag_max_bytes=max(lags or [0]))
        progress(f"  replication lag: p50 {out['lag_p50_bytes'] / 1024:,.1f} KiB, p99 "
                 f"{out['lag_p99_bytes'] / 1024:,.1f} KiB, max {out['lag_max_bytes'] / 1024:,.1f} KiB")
        return out


async def catch_up_cell(preload: int, batch: int, workdir: str, progress) -> dict:
    ha_port = free_port()
    with Node(workdir, "ASYNC_MASTER", ha_port, batch=batch) as master:
        while master.table.load(Slot.WROTE) < preload:
            await bench_batch(master.port, 1.0)
        end = master.table.load(Slot.WROTE)
        with Node(workdir, "SLAVE", free_port(), f"127.0.0.1:{ha_port}", batch=batch, broker_id=1) as slave:
            t = slave.table
            await asyncio.to_thread(t.wait_until_ge, Slot.HA_RECEIVED, 1, 60.0)  # woken by the HA client
            t0, first = time.monotonic(), t.load(Slot.HA_RECEIVED)
            got = await asyncio.to_thread(t.wait_until_ge, Slot.HA_RECEIVED, end, 600.0)
            secs = time.monotonic() - t0
            if got < end:
                raise RuntimeError(f"the slave reached only {got} of {end}")
    mbps = (end - first) / secs / 1e6
    progress(f"catch-up of a fresh slave ({batch // 1024} KiB frames): {end / 2**20:,.0f} MiB in {secs:.2f} s = "
             f"{mbps:,.0f} MB/s")
    return {"bytes": end, "seconds": secs, "MBps": mbps, "batch": batch}


def fresh_file_write(workdir: str, size: int = 256 << 20) -> float:
    """MB/s of pwrite(1 MiB) into a new, reserved file: what a slave receiving a log it never had
    pays per byte before any protocol (ext4 converts the reserved blocks as they are written)."""
    path = os.path.join(workdir, "fresh-write.probe")
    buf = os.urandom(1 << 20)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        t0 = time.monotonic()
        for off in range(0, size, len(buf)):
            os.pwrite(fd, buf, off)
        return size / (time.monotonic() - t0) / 1e6
    finally:
        os.close(fd)
        os.unlink(path)


async def run_all(seconds: float, preload: int, batches: list[int], workdir: str, progress=print) -> dict:
    os.makedirs(workdir, exist_ok=True)
    lo = loopback_tcp(quick=True)
    progress(f"loopback TCP (same run): {lo['loopback_GiBps']:.2f} GiB/s, RTT p50 {lo['loopback_rtt_p50_us']:.0f} us")
    lo["fresh_file_write_MBps"] = fresh_file_write(workdir)
    progress(f"pwrite into a fresh reserved file (same run): {lo['fresh_file_write_MBps']:,.0f} MB/s")
    figs = {"loopback": lo}
    for role in ("ASYNC_MASTER", "SYNC_MASTER"):
        figs[role] = await produce_cell(role, seconds, workdir, progress)
    a, s = figs["ASYNC_MASTER"], figs["SYNC_MASTER"]
    figs["sync_vs_async"] = s["msgs_per_s"] / a["msgs_per_s"]
    figs["sync_added_p50_us"] = s["p50_us"] - a["p50_us"]
    figs["sync_added_p50_us_one"] = s["one_p50_us"] - a["one_p50_us"]
    progress(f"SYNC_MASTER / ASYNC_MASTER throughput: {figs['sync_vs_async']:.2f} (target >= 0.50); "
             f"added p50 {figs['sync_added_p50_us']:,.0f} us with 64 in flight, "
             f"{figs['sync_added_p50_us_one']:,.0f} us with 1 (target <= 300)")
    figs["catch_up"] = [await catch_up_cell(preload, b, workdir, progress) for b in batches]
    best = max(c["MBps"] for c in figs["catch_up"])
    progress(f"catch-up best {best:,.0f} MB/s = {best / (lo['loopback_GiBps'] * 1073.741824):.2f} of loopback "
             f"(target >= 1000 MB/s)")
    return figs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--preload-mib", type=int, default=512)
    p.add_argument("--batch-kib", type=int, nargs="*", default=[32, 1024])
    p.add_argument("--workdir", default=os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench", "work"))
    a = p.parse_args(argv)
    import uvloop
    uvloop.run(run_all(a.seconds, a.preload_mib << 20, [k * 1024 for k in a.batch_kib], a.workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
