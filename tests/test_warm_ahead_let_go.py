"""The warm-ahead thread lets go of the commit log's pages far below the flushed, dispatched
offset (commitLogCacheBytes): they leave the page cache, the file keeps every byte, and the pages
within the kept window and those another reader still maps stay cached (docs/store.md, "Pages
behind")."""
from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np
import pytest

from broker.store.config import MessageStoreConfig
from broker.store.mapped_file import MappedFile, create_segment_file
from broker.store.warm_ahead import DROP_STEP, Unmapper, WarmAheadService
from tests.helpers.procs import wait_until

MiB = 1 << 20
SIZE = 256 * MiB
WROTE = 192 * MiB
KEEP = 32 * MiB


def _residency(fd: int) -> np.ndarray:
    """mincore of a fresh map of the file: 1 per page in the page cache (mapped here or not).
    A read of the page would bring it back: asked this way, nothing is read."""
    mm = mmap.mmap(fd, SIZE, prot=mmap.PROT_READ)
    try:
        view = np.frombuffer(mm, dtype=np.uint8)
        vec = np.zeros(SIZE // 4096, dtype=np.uint8)
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(SIZE),
                          ctypes.c_void_p(vec.ctypes.data))
        assert rc == 0, os.strerror(ctypes.get_errno())
        del view
        return vec & 1
    finally:
        mm.close()


def _cached(fd: int, lo: int, hi: int) -> float:
    """The share of [lo, hi)'s pages in the page cache."""
    return float(_residency(fd)[lo // 4096:hi // 4096].mean())


@pytest.fixture
def segment(tmp_path):
    if os.major(os.stat(tmp_path).st_dev) == 0:
        pytest.skip(f"{tmp_path} is not on a block device (tmpfs, overlay): its pages cannot leave the cache")
    path = str(tmp_path / f"{0:020d}")
    create_segment_file(path, SIZE, warm=False)
    mf = MappedFile(path, SIZE, writable=True)
    for off in range(0, WROTE, MiB):  # a distinct byte per MiB: what is read back proves the content
        mf.mm[off:off + MiB] = (off // MiB) % 251 + 1
    mf.mm.flush()  # durable, as the flush service leaves what is below the floor
    fd = os.open(path, os.O_RDONLY)
    yield mf, fd
    os.close(fd)
    mf.close()


def _let_go(mf, floor: int) -> WarmAheadService:
    svc = WarmAheadService(lambda off: mf if mf.base <= off < mf.end else None, keep=KEEP)
    svc.floor = lambda: floor
    svc.start(0)
    svc.note(WROTE)  # the writer is there: the thread warms ahead, then lets go behind
    try:
        wait_until(lambda: svc.dropped >= floor - KEEP, 30, "the warm-ahead thread letting go")
    finally:
        svc.stop()
    return svc


def test_pages_below_the_kept_window_leave_the_cache_and_read_back_intact(segment):
    mf, fd = segment
    assert _cached(fd, 0, WROTE) == 1.0
    svc = _let_go(mf, WROTE)
    assert svc.dropped == WROTE - KEEP
    assert _cached(fd, 0, WROTE - KEEP) == 0.0, "every page below the window left the page cache"
    assert _cached(fd, WROTE - KEEP, WROTE) == 1.0, "the window stays cached"
    for off in range(0, WROTE, 8 * MiB):  # from the file, through the map and through pread
        want = (off // MiB) % 251 + 1
        assert mf.mm[off] == want and mf.mm[off + MiB - 1] == want
        assert os.pread(fd, 1, off + 4096) == bytes([want])


def test_pages_another_reader_maps_stay_until_it_passes_them(segment, tmp_path):
    mf, fd = segment
    reader = MappedFile(mf.path, SIZE, writable=False)  # the reput service's own map
    try:
        assert int(reader.mm[0:WROTE:4096].sum()) > 0  # it read everything: all of it mapped there
        mine = Unmapper(lambda off: reader if off < reader.end else None, 0)
        mine.passed(WROTE // 2)  # it dispatched half
        assert mine.done == WROTE // 2
        _let_go(mf, WROTE)
        assert _cached(fd, 0, WROTE // 2) == 0.0
        assert _cached(fd, WROTE // 2, WROTE - KEEP) == 1.0, "what the reader still maps is not let go of"
    finally:
        reader.close()


def test_unmapper_waits_for_a_whole_step():
    seen = []
    mine = Unmapper(lambda off: seen.append(off), 0)
    mine.passed(DROP_STEP - 4096)
    assert mine.done == 0 and seen == []


def test_commit_log_cache_bytes_resolves():
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert MessageStoreConfig().commit_log_cache_bytes == ram * 40 // 100  # accessMessageInMemoryMaxRatio
    assert MessageStoreConfig(commitLogCacheBytes=0).commit_log_cache_bytes == -1  # never let go
    assert MessageStoreConfig(commitLogCacheBytes=64 * MiB).commit_log_cache_bytes == 64 * MiB


def test_a_failure_to_let_go_leaves_the_pages_to_the_os_and_warming_goes_on(segment):
    mf, fd = segment
    os.unlink(mf.path)  # the map stays; opening the file for its fadvise now fails
    svc = WarmAheadService(lambda off: mf if mf.base <= off < mf.end else None, keep=KEEP)
    svc.floor = lambda: WROTE
    svc.start(0)
    try:
        svc.note(WROTE)
        wait_until(lambda: svc.keep == -1, 30, "the letting go to fail")
        svc.note(WROTE + 16 * MiB)  # the writer moves on: the thread still warms ahead of it
        wait_until(lambda: svc.warmed >= min(SIZE, WROTE + 16 * MiB + 24 * MiB), 30, "warming after the failure")
    finally:
        svc.stop()
