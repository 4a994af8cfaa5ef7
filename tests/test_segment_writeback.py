"""SYNC_FLUSH must write back what it dirtied, not a 2 MiB folio around it.

On kernels with large folios (ext4, >= 6.16), pages faulted in by a sequential pass through a
map are grouped into folios of up to 2 MiB by the fault read-around, and writeback is per
folio: 4 KiB dirtied + fdatasync then costs a 2 MiB device write (1.3 ms instead of 0.09 ms
here). The store's own warm-up and the writer's faults after a restart are both sequential
passes: the warm-up writes SYNC_FLUSH segments in 16 KiB chunks (kernels.codec.warm_file) and
the writer advises its unwritten pages MADV_RANDOM (kernels.codec.advise_random).

The figure asserted is bytes written back per sync, not time: the bytes this process made dirty
(write_bytes of /proc/self/io, which the kernel accounts per folio as it is dirtied, so a 4 KiB
store into a 2 MiB folio counts 2 MiB). Only this process's writes count: the block device's
own counter, used before, also counted every other process writing to the disk meanwhile (a
loaded `make test` once read 154 KiB per sync where this process dirtied 4). On a kernel without large file folios the control below does not amplify either, and
these tests then check only that nothing else regressed; the control's figure is printed.
"""
from __future__ import annotations

import asyncio
import mmap
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from broker.services.message_store import MessageStore
from broker.store.config import MessageStoreConfig
from broker.store.commit_log import warm_chunk_for
from broker.store.config import SYNC_FLUSH
from broker.store.mapped_file import create_segment_file

_REPO_BUILD = Path(__file__).resolve().parents[1] / "build"

MiB = 1 << 20
SYNCS = 40
# A SYNC_FLUSH segment is warmed into 16 KiB folios; the trap is 64 KiB to 2 MiB per sync.
MAX_KIB_PER_SYNC = 32


def _on_block_device(path: str) -> bool:
    """Whether `path` is on a filesystem backed by a block device (a tmpfs has no writeback to count)."""
    path = os.path.realpath(path)
    best, dev = "", None
    with open("/proc/self/mounts") as f:
        for line in f:
            d, mnt = line.split()[:2]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, dev = mnt, d
    return bool(dev and dev.startswith("/dev/") and os.path.exists(os.path.join("/sys/class/block", os.path.basename(dev))))


def _dirtied_kib() -> float:
    """KiB this process has caused to be written back (dirtied), whole folios at a time."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("/proc/self/io has no write_bytes (kernel without task I/O accounting)")


@pytest.fixture
def disk(tmp_path):
    """A fresh directory on a block device: the pytest tmp dir when it is on one; otherwise one under
    the checkout's build/, which usually is (a tmpfs or overlay /tmp alone does not skip these tests)."""
    if _on_block_device(str(tmp_path)):
        yield tmp_path
        return
    _REPO_BUILD.mkdir(exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="writeback-", dir=_REPO_BUILD))
    if not _on_block_device(str(d)):
        shutil.rmtree(d)
        pytest.skip(f"neither {tmp_path} nor {_REPO_BUILD} is on a block device: no writeback to count")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _kib_per_sync(path: str, size: int, start: int) -> float:
    """Dirty 4 KiB at a time from `start` through a fresh map, fdatasync each; KiB written back per sync.
    The probe's map is MADV_RANDOM so that a page it faults itself comes in alone: the folios
    measured are the ones whoever cached the pages before made."""
    fd = os.open(path, os.O_RDWR)
    try:
        with mmap.mmap(fd, size) as m:
            m.madvise(mmap.MADV_RANDOM)
            os.fdatasync(fd)
            w0 = _dirtied_kib()
            for i in range(SYNCS):
                off = start + i * 4096
                m[off:off + 4096] = b"\xa5" * 4096
                os.fdatasync(fd)
            return (_dirtied_kib() - w0) / SYNCS
    finally:
        os.close(fd)


def _plain_sequential_warm(path: str, size: int) -> None:
    """The control: RocketMQ's warm-up (a zero per page, in order) without MADV_RANDOM."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as m:
            a = np.frombuffer(m, dtype=np.uint8)
            a[::4096] = 0
            del a
        os.fsync(fd)
    finally:
        os.close(fd)


def test_a_segment_the_store_creates_for_sync_flush_syncs_4k_without_folio_writeback(disk):
    tmp_path = disk
    size = 32 * MiB
    ours = str(tmp_path / "00000000000000000000")
    cfg = MessageStoreConfig(storePathRootDir=str(tmp_path), flushDiskType=SYNC_FLUSH)
    create_segment_file(ours, size, True, warm_chunk_for(cfg))
    control = str(tmp_path / "control")
    _plain_sequential_warm(control, size)
    got = _kib_per_sync(ours, size, 16 * MiB)
    baseline = _kib_per_sync(control, size, 16 * MiB)
    print(f"KiB written back per 4 KiB sync: store's segment {got:.1f}, plain sequential warm-up {baseline:.1f}")
    assert got <= MAX_KIB_PER_SYNC, f"{got:.0f} KiB written back per 4 KiB sync (large folios)"


def test_writer_after_restart_with_a_cold_page_cache_syncs_4k_without_folio_writeback(disk):
    """After a reboot the current segment's unwritten pages are no longer cached: the writer's
    own sequential faults must not bring them back in large folios."""
    tmp_path = disk
    size = 64 * MiB
    cfg = MessageStoreConfig(storePathRootDir=str(tmp_path / "store"), mappedFileSizeCommitLog=size,
                             flushDiskType=SYNC_FLUSH)
    body = b"b" * 1000

    async def fill():
        async with MessageStore(cfg) as s:
            r = await s.put("Cold", 0, body)
            return r.end_offset

    first_end = asyncio.run(fill())
    segment = os.path.join(cfg.commitlog_dir, "%020d" % 0)
    fd = os.open(segment, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # what a reboot leaves: nothing cached
    finally:
        os.close(fd)

    async def write_on():
        async with MessageStore(cfg) as s:
            assert s.recovery.clean and s.recovery.max_offset == first_end
            end = first_end
            while end < 40 * MiB:  # the writer faults its way sequentially through 40 MiB
                end = (await s.put_batch("Cold", 0, [body] * 256)).end_offset
            await s.wait_flushed(end, 30)
            return end

    end = asyncio.run(write_on())
    assert end > 40 * MiB
    # Sync 4 KiB at a time just past the write position: pages a read-around of the writer's last
    # faults would have cached in its folios; with MADV_RANDOM they are not cached at all yet.
    got = _kib_per_sync(segment, size, end - end % 4096 + 4096)
    print(f"KiB written back per 4 KiB sync past the writer's position: {got:.1f}")
    assert got <= MAX_KIB_PER_SYNC, f"{got:.0f} KiB written back per 4 KiB sync (large folios)"


@pytest.mark.parametrize("side", ["leader", "follower"])
def test_dledger_entry_files_sync_4k_without_folio_writeback(disk, side):
    """DLedger's data and index files (broker.raft.entry_store), written by a leader's appends
    or a follower's pushes (both written with pwrite now; no thread faults the data files in
    ahead): the pages the writer goes to must come in 4 KiB folios. They came in large ones (16
    KiB in this probe, more as the read-around ramps up over a 1 GiB file), and the flusher's
    fdatasync every 10 ms wrote back whole folios for every few KiB appended: a group of three
    wrote 10 KiB to the disk per 1 KiB message (4.8 KiB with the advice), each member's
    warm-ahead thread 5 CPU-us/msg (1)."""
    from broker.raft.entry_store import DLedgerEntryStore

    size, index_size = 64 * MiB, 4 * MiB
    leader = DLedgerEntryStore(str(disk / "leader"), data_file_size=size, index_file_size=index_size, warm=False)
    store = leader
    try:
        body = os.urandom(1000)
        for _ in range(8 * 1024):  # 8 MiB, faulted in sequentially by the writer
            leader.append(1, body)
        if side == "follower":
            store = DLedgerEntryStore(str(disk / "follower"), data_file_size=size, index_file_size=index_size,
                                      warm=False)
            first = 0
            while first <= leader.ledger_end_index:
                span = leader.entry_span(first, 64, 1 << 20)
                store.append_pushed(b"".join(bytes(v) for v in span.views))
                first = span.last + 1
        store.flush()
        end, index_end = store.write_pos, (store.ledger_end_index + 1) * 32
        data_file = os.path.join(store.dir, "data", "%020d" % 0)
        index_file = os.path.join(store.dir, "index", "%020d" % 0)
        # the worst of a few places ahead of the writer, the page holding its end too: the folio
        # the next append or push continues
        aheads = (0, 4096, 1 * MiB)
        data_kib = max(_kib_per_sync(data_file, size, end - end % 4096 + ahead) for ahead in aheads)
        index_kib = _kib_per_sync(index_file, index_size, index_end - index_end % 4096 + 4096)
        print(f"KiB written back per 4 KiB sync past the {side}'s end: data {data_kib:.1f}, index {index_kib:.1f}")
        # 4 KiB folios (MADV_RANDOM): 4 KiB a sync; without the advice 16 KiB to 2 MiB
        assert data_kib <= 8, f"{data_kib:.0f} KiB written back per 4 KiB sync (large folios)"
        assert index_kib <= 8, f"{index_kib:.0f} KiB written back per 4 KiB sync (large folios)"
    finally:
        leader.close()
        if store is not leader:
            store.close()
