"""The SYNC_FLUSH limit on a segment made the way the broker makes it.

bench.limits' fdatasync probe warms a 64 MiB file and dirties only its first ~8 MiB, where
folios are still small. The broker warms whole 1 GiB segments through the map
(broker.store.mapped_file.create_segment_file -> warm_pages), and the fault read-around of that
sequential warm-up ramps the page cache's folios up to 2 MiB a few MiB into the file (ext4,
kernel >= 6.16). block_page_mkwrite then dirties a whole folio for a 4 KiB store, so every
4 KiB fdatasync writes back up to 2 MiB: the large-folio trap of machine-limits.md, hit by the
broker's own warm-up. This probe measures "dirty 4 KiB through the map + fdatasync" at offsets
>= 64 MiB of

  * a segment made by the broker's create_segment_file (what the store syncs), and
  * the same warm-up with MADV_RANDOM on the map first (no read-around: order-0 folios),

and reports the bytes the device wrote per sync (from /sys/class/block/<dev>/stat).
"""
from __future__ import annotations

import mmap
import os
import time

import numpy as np

from broker.kernels.codec import MappedBuffer, warm_pages
from broker.store.mapped_file import create_segment_file

MiB = 1 << 20
PAGE = 4096


def _dev_stat_path(device: str) -> str | None:
    p = os.path.join("/sys/class/block", os.path.basename(device), "stat")
    return p if os.path.exists(p) else None


def _written_sectors(stat_path: str | None) -> int | None:
    if stat_path is None:
        return None
    with open(stat_path) as f:
        return int(f.read().split()[6])  # sectors written (512 B)


def _make_random_warm(path: str, size: int) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        m.madvise(mmap.MADV_RANDOM)
        arr = np.frombuffer(m, dtype=np.uint8)
        buf = MappedBuffer(arr)
        warm_pages(buf)
        buf.release()
        del arr
        m.close()
        os.fsync(fd)
    finally:
        os.close(fd)


def _probe(path: str, size: int, start: int, n: int, stat_path: str | None) -> dict:
    fd = os.open(path, os.O_RDWR)
    samples: list[int] = []
    try:
        with mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE) as mm:
            os.fdatasync(fd)
            payload = b"\xa5" * PAGE
            w0 = _written_sectors(stat_path)
            off = start
            for _ in range(n):
                mm[off:off + PAGE] = payload
                t0 = time.perf_counter_ns()
                os.fdatasync(fd)
                samples.append(time.perf_counter_ns() - t0)
                off += PAGE
                if off + PAGE > size:
                    off = start
            w1 = _written_sectors(stat_path)
    finally:
        os.close(fd)
    samples.sort()
    out = {
        "p50_us": samples[len(samples) // 2] / 1e3,
        "p99_us": samples[max(0, -(-99 * len(samples) // 100) - 1)] / 1e3,
        "per_s": len(samples) / (sum(samples) / 1e9),
    }
    if w0 is not None and w1 is not None:
        out["device_KiB_per_sync"] = (w1 - w0) * 512 / 1024 / n  # includes anything else writing meanwhile
    return out


def measure(workdir: str, device: str, quick: bool = False) -> dict:
    """{'broker_warm': {...}, 'madv_random_warm': {...}}; each p50/p99 us, syncs/s, KiB written per sync."""
    size = 128 * MiB
    start = 64 * MiB  # past the small-folio head of the file
    n = 100 if quick else 300
    stat_path = _dev_stat_path(device)
    out: dict = {"segment_MiB": size // MiB, "from_offset_MiB": start // MiB, "syncs": n}
    for name, make in (("broker_warm", lambda p: create_segment_file(p, size, True)),
                       ("madv_random_warm", lambda p: _make_random_warm(p, size))):
        path = os.path.join(workdir, f"segment-probe-{name}")
        try:
            make(path)
            out[name] = _probe(path, size, start, n, stat_path)
        finally:
            if os.path.exists(path):
                os.unlink(path)
    return out
