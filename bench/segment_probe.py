"""Folio size decides two costs of the commit log: probe both on segments warmed three ways.

On kernels with large folios (ext4, >= 6.16) the page cache keeps a file in folios whose size
depends on how the pages first came in: a buffered write of N bytes makes N-byte folios, a
sequential pass through a map (RocketMQ's warm-up: a zero per page) ramps them up to 2 MiB
through the fault read-around, and MADV_RANDOM makes 4 KiB ones. Then

  * writeback is per folio: SYNC_FLUSH's "dirty 4 KiB + fdatasync" writes the whole folio
    (the large-folio trap of machine-limits.md), and
  * a write fault maps a whole folio: the writer's sequential stores through its map fault
    once per folio, so 4 KiB folios make them several times slower.

For each way of warming this probe reports, at offsets >= 64 MiB (past a file's small-folio
head): the 4 KiB fdatasync latency and the bytes the device wrote per sync (from
/sys/class/block/<dev>/stat), and the bandwidth of sequential stores through a fresh map.
  * broker_sync / broker_async: broker.store.mapped_file.create_segment_file as the commit log
    calls it under SYNC_FLUSH (16 KiB pwrite chunks) and ASYNC_FLUSH (2 MiB chunks),
  * rocketmq_map_touch: a zero per page through the map,
  * madv_random_touch: the same with MADV_RANDOM on the map first.
"""
from __future__ import annotations

import mmap
import os
import time

import numpy as np

from broker.store.mapped_file import WARM_CHUNK_ASYNC_FLUSH, WARM_CHUNK_SYNC_FLUSH, create_segment_file

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


def _map_touch_warm(path: str, size: int, advise_random: bool) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE) as m:
            if advise_random:
                m.madvise(mmap.MADV_RANDOM)
            arr = np.frombuffer(m, dtype=np.uint8)
            arr[::PAGE] = 0
            del arr
        os.fsync(fd)
    finally:
        os.close(fd)


def _map_write_MiBps(path: str, size: int, start: int, length: int) -> float:
    """Sequential 256 KiB stores through a fresh map over clean cached pages: write-fault bound."""
    fd = os.open(path, os.O_RDWR)
    try:
        with mmap.mmap(fd, size) as m:
            arr = np.frombuffer(m, dtype=np.uint8)
            src = np.full(256 * 1024, 0x5A, np.uint8)
            t0 = time.perf_counter()
            for off in range(start, start + length, src.size):
                arr[off:off + src.size] = src
            el = time.perf_counter() - t0
            del arr
        return length / MiB / el
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
    """{variant: {p50_us, p99_us, per_s, device_KiB_per_sync, map_write_MiBps}} for the three warm-ups."""
    size = 128 * MiB
    start = 64 * MiB  # past the small-folio head of the file
    n = 100 if quick else 300
    stat_path = _dev_stat_path(device)
    out: dict = {"segment_MiB": size // MiB, "from_offset_MiB": start // MiB, "syncs": n}
    variants = (("broker_sync", lambda p: create_segment_file(p, size, True, WARM_CHUNK_SYNC_FLUSH)),
                ("broker_async", lambda p: create_segment_file(p, size, True, WARM_CHUNK_ASYNC_FLUSH)),
                ("rocketmq_map_touch", lambda p: _map_touch_warm(p, size, False)),
                ("madv_random_touch", lambda p: _map_touch_warm(p, size, True)))
    for name, make in variants:
        path = os.path.join(workdir, f"segment-probe-{name}")
        try:
            make(path)
            out[name] = _probe(path, size, start, n, stat_path)
            out[name]["map_write_MiBps"] = _map_write_MiBps(path, size, 0, start)
        finally:
            if os.path.exists(path):
                os.unlink(path)
    return out
