"""What a new page of an ASYNC_FLUSH commit log costs, by folio size and by where its memory
comes from: `python -m bench.page_reuse_probe [--mib 2048] [--workdir DIR] [modes]`.

Each mode writes a fresh fallocated file sequentially through a map in 256 KiB stores, with a
MADV_POPULATE_READ 32 MiB ahead in 4 MiB calls (the warm-ahead thread's pattern) and an
`fdatasync` every 128 MiB (the flush service's), and reports thread CPU per 4 KiB page for the
populate (warm), the stores, the syncs and the letting go, and how much memory the kernel
reported to the host meanwhile (free page reporting, when the guest has it). Modes:
  * small: MADV_RANDOM on the map first (4 KiB folios: the commit log by default);
  * large: no advice (the fault read-around's folios, up to 2 MiB);
  * small_drop / large_drop: the same, and the pages more than 256 MiB behind are let go of after
    each sync (MADV_DONTNEED, POSIX_FADV_DONTNEED), so that the next ones reuse their memory.
Run the modes interleaved and more than once: a page cut from memory freed just before is cheap,
one the host must back anew is not, and which one a mode gets depends on what ran before it.
See docs/store.md, "Pages behind".
"""
from __future__ import annotations

import argparse
import mmap
import os
import sys
import time

import numpy as np

MiB = 1 << 20
AHEAD, STEP, STORE, SYNC_EVERY, BEHIND = 32 * MiB, 4 * MiB, 256 << 10, 128 * MiB, 256 * MiB
MADV_POPULATE_READ = 22
REPORTED = "/sys/module/page_reporting/parameters/reported_kib"
MODES = ("small", "large", "small_drop", "large_drop")


def _reported_kib() -> int:
    try:
        with open(REPORTED) as f:
            return int(f.read())
    except OSError:
        return 0


def run(mode: str, workdir: str, size: int) -> dict[str, float]:
    path = os.path.join(workdir, f"page-reuse-{mode}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        os.fsync(fd)
        mm = mmap.mmap(fd, size)
        a = np.frombuffer(mm, dtype=np.uint8)
        if mode.startswith("small"):
            mm.madvise(mmap.MADV_RANDOM)
        warmed = dropped = last_sync = 0
        cpu = dict.fromkeys(("warm", "store", "sync", "drop"), 0.0)
        r0 = _reported_kib()
        for off in range(0, size, STORE):
            if warmed < min(size, off + AHEAD - 8 * MiB):
                t = time.thread_time()
                while warmed < min(size, off + AHEAD):
                    mm.madvise(MADV_POPULATE_READ, warmed, min(STEP, size - warmed))
                    warmed += STEP
                cpu["warm"] += time.thread_time() - t
            t = time.thread_time()
            a[off:off + STORE] = 7
            cpu["store"] += time.thread_time() - t
            if off - last_sync >= SYNC_EVERY:
                t = time.thread_time()
                os.fdatasync(fd)
                cpu["sync"] += time.thread_time() - t
                last_sync = off
                if mode.endswith("_drop") and off - BEHIND > dropped:
                    t = time.thread_time()
                    mm.madvise(mmap.MADV_DONTNEED, dropped, off - BEHIND - dropped)
                    os.posix_fadvise(fd, dropped, off - BEHIND - dropped, os.POSIX_FADV_DONTNEED)
                    cpu["drop"] += time.thread_time() - t
                    dropped = off - BEHIND
        t = time.thread_time()
        os.fdatasync(fd)
        cpu["sync"] += time.thread_time() - t
        del a
        mm.close()
    finally:
        os.close(fd)
        os.unlink(path)
    pages = size / 4096
    out = {k: v / pages * 1e6 for k, v in cpu.items()}
    out["total"] = sum(out.values())
    out["reported_MiB"] = (_reported_kib() - r0) / 1024
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("modes", nargs="*", default=[*MODES, *MODES])
    p.add_argument("--mib", type=int, default=2048)
    p.add_argument("--workdir", default=".")
    a = p.parse_args(argv)
    for mode in a.modes:
        if mode not in MODES:
            p.error(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
        r = run(mode, a.workdir, a.mib * MiB)
        print(f"{mode:11s} CPU-us per 4 KiB: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items() if k != "reported_MiB")
              + f"; reported to the host meanwhile {r['reported_MiB']:.0f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
