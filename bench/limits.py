"""This machine's own ceilings, measured in the same run as the benchmarks.

Run-to-run noise on the project's VMs is 10-30 %, so a broker figure is only
meaningful beside limits taken back to back with it (machine-limits.md).
Each function returns a plain dict of figures and cleans up after itself;
``quick=True`` shrinks every size so the whole set runs in a few seconds.

    python -m bench.limits          # prints measure_all() as a table
"""
from __future__ import annotations

import math
import mmap
import os
import platform
import socket
import tempfile
import threading
import time

import numpy as np

MiB = 1 << 20
PAGE = 4096


def _percentile_us(sorted_ns: list[int], q: float) -> float:
    """Nearest-rank percentile of sorted nanosecond samples, in microseconds."""
    rank = max(1, math.ceil(q * len(sorted_ns)))
    return sorted_ns[rank - 1] / 1e3


# --------------------------------------------------------------------- memory

def memcpy_bandwidth(size: int = 256 * MiB, quick: bool = False) -> dict[str, float]:
    """Best-of-5 numpy copy between two pre-faulted buffers."""
    if quick:
        size = min(size, 32 * MiB)
    src = np.empty(size, dtype=np.uint8)
    dst = np.empty(size, dtype=np.uint8)
    # Touch both first: np.empty only reserves address space, and the first
    # copy would otherwise time page faults, not memory bandwidth.
    src.fill(1)
    dst.fill(0)
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return {"memcpy_GiBps": size / best / (1 << 30)}


# ----------------------------------------------------------------------- disk

def fdatasync_latency(workdir: str, n: int = 2000, quick: bool = False) -> dict[str, float]:
    """Latency of "dirty 4 KiB through the mmap, then fdatasync" - the broker's
    SYNC_FLUSH path - on a segment pre-allocated the way the broker does it."""
    if quick:
        n = min(n, 200)
    size = 64 * MiB
    path = os.path.join(workdir, "limits-fdatasync.seg")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    samples: list[int] = []
    try:
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size, flags=mmap.MAP_SHARED,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE) as mm:
            # Warm up through the map, one zero byte per page (as RocketMQ
            # does). Prefilling with big write()s instead would put the file in
            # 2 MiB folios on kernel >= 6.16, and every 4 KiB sync below would
            # then write back a whole folio: 25-30x slower (large-folio trap).
            for off in range(0, size, PAGE):
                mm[off] = 0
            os.fdatasync(fd)  # so the first samples don't flush the warm-up
            payload = b"\xa5" * PAGE
            pages = size // PAGE
            for i in range(n):
                off = (i % pages) * PAGE  # wrap: rewrites are still 4 KiB dirty
                mm[off:off + PAGE] = payload
                t0 = time.perf_counter_ns()
                os.fdatasync(fd)
                samples.append(time.perf_counter_ns() - t0)
    finally:
        os.close(fd)
        os.unlink(path)
    samples.sort()
    p50 = _percentile_us(samples, 0.50)
    return {
        "fdatasync_p50_us": p50,
        "fdatasync_p99_us": _percentile_us(samples, 0.99),
        "fdatasync_p999_us": _percentile_us(samples, 0.999),
        # Sustained one-thread rate, from the mean (p50 would hide the tail).
        "fdatasync_per_s": len(samples) / (sum(samples) / 1e9),
    }


def sequential_durable_write(workdir: str, size: int = 512 * MiB,
                             quick: bool = False) -> dict[str, float]:
    """1 MiB write()s then one fdatasync, timed together (dd conv=fdatasync)."""
    if quick:
        size = min(size, 64 * MiB)
    chunk = memoryview(os.urandom(MiB))  # incompressible, in case the disk cares
    path = os.path.join(workdir, "limits-seq.dat")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        left = size
        while left > 0:
            left -= os.write(fd, chunk[:min(left, MiB)])
        os.fdatasync(fd)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return {"seq_durable_MBps": size / elapsed / 1e6}


# -------------------------------------------------------------------- network

def _listener() -> socket.socket:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))  # loopback only, ephemeral port
    srv.listen(1)
    srv.settimeout(10.0)  # accept() must not hang if the client side fails
    return srv


def _recv_exact(sock: socket.socket, buf: memoryview) -> None:
    got = 0
    while got < len(buf):
        k = sock.recv_into(buf[got:])
        if k == 0:
            raise ConnectionError("peer closed mid-message")
        got += k


def _loopback_bandwidth(size: int) -> float:
    """GiB/s of 64 KiB sendall()s, timed at the receiver from its first byte."""
    chunk = memoryview(b"\x5a" * (64 * 1024))
    result: dict[str, float] = {}
    errors: list[BaseException] = []
    srv = _listener()

    def serve() -> None:
        try:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(None)  # plain blocking recv, no poll() per call
                buf = memoryview(bytearray(256 * 1024))
                first = conn.recv_into(buf)
                # Start the clock after the first recv so connection set-up
                # and thread start-up are not counted.
                t0 = time.perf_counter()
                got = 0
                while first + got < size:
                    k = conn.recv_into(buf)
                    if k == 0:
                        raise ConnectionError("sender closed early")
                    got += k
                result["bps"] = got / (time.perf_counter() - t0)
        except BaseException as e:  # surfaced in the caller's thread
            errors.append(e)

    t = threading.Thread(target=serve, name="limits-bw-server", daemon=True)
    t.start()
    try:
        with socket.create_connection(srv.getsockname(), timeout=10.0) as cli:
            cli.settimeout(None)
            left = size
            while left > 0:
                n = min(left, len(chunk))
                cli.sendall(chunk[:n])
                left -= n
    finally:
        srv.close()
        t.join(30.0)
    if errors:
        raise errors[0]
    return result["bps"] / (1 << 30)


def _loopback_rtt(rounds: int) -> list[int]:
    """64-byte ping-pong over blocking TCP_NODELAY sockets; RTTs in ns."""
    msg = 64
    errors: list[BaseException] = []
    srv = _listener()

    def echo() -> None:
        try:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(None)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                buf = memoryview(bytearray(msg))
                for _ in range(rounds):
                    _recv_exact(conn, buf)
                    conn.sendall(buf)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=echo, name="limits-rtt-server", daemon=True)
    t.start()
    samples: list[int] = []
    try:
        with socket.create_connection(srv.getsockname(), timeout=10.0) as cli:
            # Blocking mode: a timeout would add a poll() before every recv.
            cli.settimeout(None)
            cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            out = b"\x01" * msg
            buf = memoryview(bytearray(msg))
            for _ in range(rounds):
                t0 = time.perf_counter_ns()
                cli.sendall(out)
                _recv_exact(cli, buf)
                samples.append(time.perf_counter_ns() - t0)
    finally:
        srv.close()
        t.join(30.0)
    if errors:
        raise errors[0]
    return samples


def loopback_tcp(size: int = 256 * MiB, rounds: int = 2000,
                 quick: bool = False) -> dict[str, float]:
    """Loopback TCP bandwidth and small-message round-trip time."""
    if quick:
        size, rounds = min(size, 32 * MiB), min(rounds, 200)
    gibps = _loopback_bandwidth(size)
    rtt = sorted(_loopback_rtt(rounds))
    return {
        "loopback_GiBps": gibps,
        "loopback_rtt_p50_us": _percentile_us(rtt, 0.50),
        "loopback_rtt_p99_us": _percentile_us(rtt, 0.99),
    }


# ------------------------------------------------------------------------ all

def page_cache_first_touch(workdir: str, size: int = 512 * MiB, quick: bool = False) -> dict[str, float]:
    """CPU per KiB of storing through a map into a new (fallocated) file's pages, first while
    the page cache grows into memory, then over the same pages again.

    Why: on a VM whose host backs guest memory on first touch (and takes back what the guest
    frees, free page reporting), a page the page cache takes from never-used memory costs far
    more than the store itself: 2-2.6 CPU-us per KiB on the project's VMs against ~0.2 reused.
    Every broker that writes a new log pays it while its page cache grows (the commit log,
    Redis's AOF), so a CPU-per-message figure is read beside it."""
    if quick:
        size = 128 * MiB
    fd, path = tempfile.mkstemp(dir=workdir, prefix="first-touch-")
    try:
        os.posix_fallocate(fd, 0, size)
        mm = mmap.mmap(fd, size)
        a = np.frombuffer(mm, dtype=np.uint8)
        try:
            times = []
            for value in (1, 2):
                t = time.thread_time()
                for off in range(0, size, MiB):
                    a[off:off + MiB] = value
                times.append(time.thread_time() - t)
        finally:
            del a
            mm.close()
    finally:
        os.close(fd)
        os.unlink(path)
    kib = size / 1024
    return {"first_touch_us_per_KiB": times[0] / kib * 1e6, "touched_us_per_KiB": times[1] / kib * 1e6}


def measure_all(workdir: str, quick: bool = False) -> dict[str, float | int | str]:
    """Every limit above plus what is needed to tell machines apart."""
    workdir = os.fspath(workdir)
    out: dict[str, float | int | str] = {
        "cpu_count": os.cpu_count() or 0,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }
    out.update(memcpy_bandwidth(quick=quick))
    out.update(fdatasync_latency(workdir, quick=quick))
    out.update(sequential_durable_write(workdir, quick=quick))
    out.update(page_cache_first_touch(workdir, quick=quick))
    out.update(loopback_tcp(quick=quick))
    return out


def format_table(figures: dict[str, float | int | str]) -> str:
    """Names left-aligned, values right-aligned, floats to two decimals."""
    shown = {k: f"{v:.2f}" if isinstance(v, float) else str(v) for k, v in figures.items()}
    kw = max(map(len, shown))
    vw = max(map(len, shown.values()))
    return "\n".join(f"{k:<{kw}}  {v:>{vw}}" for k, v in shown.items())


if __name__ == "__main__":
    import sys

    quick = "--quick" in sys.argv[1:]
    # Default to the system temp dir; pass a directory to measure that
    # filesystem instead (e.g. the broker's store directory).
    base = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    with tempfile.TemporaryDirectory(prefix="limits-", dir=base) as d:
        print(format_table(measure_all(d, quick=quick)))
