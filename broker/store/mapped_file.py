"""MappedFile: one fixed-size segment file, named by its 20-digit start offset, mapped with numpy.memmap."""
from __future__ import annotations

import errno
import os

import numpy as np

from broker.kernels.codec import MappedBuffer, warm_file
from broker.store.durable import fsync_dir
from broker.store.errors import CorruptStoreError


def offset_to_name(offset: int) -> str:
    return f"{offset:020d}"


# Zeros are written in chunks of this size, which becomes the page cache's folio size for the
# segment (see kernels.codec.warm_file). SYNC_FLUSH's every 4 KiB fdatasync writes back a whole
# folio, so it gets small ones (16 KiB: +20-40 us per sync; stores through the map ~3 GiB/s).
# ASYNC_FLUSH writes back in bulk every 500 ms, where a whole folio costs nothing extra, and
# takes the biggest (2 MiB: put_batch of 1 KiB bodies 1.4-1.5 M/s against 0.9-1.2 M/s with
# 256 KiB, python -m bench.store_bench put_batch).
WARM_CHUNK_SYNC_FLUSH = 16 << 10
WARM_CHUNK_ASYNC_FLUSH = 2 << 20


def create_segment_file(path: str, size: int, warm: bool = True, warm_chunk: int = WARM_CHUNK_ASYNC_FLUSH,
                        reserve: int | None = None) -> None:
    """Create a full-size segment atomically: a temp file is sized, warmed (zeros written), fsynced
    and renamed, so a crash never leaves a short or half-made segment under its final name.
    reserve: not warmed, only its first `reserve` bytes reserved (an index file: its writer
    reserves the rest as it goes, see broker.services.build_index)."""
    # Asked before a byte is written: a segment that cannot fit fails at once, naming the room it
    # lacks, instead of filling the disk to the brim and freeing it again. Each such try moved the
    # disk usage the cleaner publishes, which is what wakes the reput to try again: on a full
    # disk the reput cycled through 6 MB consume-queue files, and the cleaner, catching the disk
    # full mid-try, flapped the broker's DISK_FULL.
    st = os.statvfs(os.path.dirname(path) or ".")
    free = st.f_bavail * st.f_frsize
    need = size if reserve is None else reserve
    if free < need:
        raise OSError(errno.ENOSPC, f"No space left on device (creating a {size}-byte segment, {free} bytes free)",
                      path)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        if warm and reserve is None:
            # not RocketMQ's touch through a map: that leaves 2 MiB folios (see warm_file)
            warm_file(fd, 0, size, warm_chunk)
        elif need:
            # Blocks reserved, not written: a full disk fails here, naming the file, instead of as
            # a SIGBUS on a later store through a map; and pwrite into reserved blocks runs at
            # 4.2 GB/s against 0.6 GB/s into a sparse file (ext4, this machine).
            reserve_blocks(fd, 0, need)
        os.fsync(fd)
    except BaseException as e:
        # A half-warmed temp file would hold the very space whose lack made this fail: every
        # retry on a full disk would then find less room than the one before.
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and e.errno is not None:
            raise OSError(e.errno, f"{e.strerror} (creating a {size}-byte segment)", path) from e
        raise
    os.close(fd)
    os.rename(tmp, path)
    fsync_dir(os.path.dirname(path))


def reserve_blocks(fd: int, offset: int, length: int) -> None:
    """posix_fallocate where the filesystem has it (ENOSPC raised; elsewhere nothing reserved)."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise


# Torn tails are zeroed in chunks of this size; a clean chunk ends the search (see zero_torn_tail).
ZERO_CHUNK = 4 * 1024 * 1024


def zero_torn_tail(mm, start: int) -> int:
    """Zero whatever a torn write left in mm[start:] (a segment's map); returns the end of the
    zeroed range, or -1 when nothing was there. Writers write sequentially, so past one clean
    chunk the file is untouched. The caller makes the zeroed range durable (msync)."""
    size = len(mm)
    pos, dirty_hi = start, -1
    while pos < size:
        hi = min(size, (pos // ZERO_CHUNK + 1) * ZERO_CHUNK)
        chunk = mm[pos:hi]
        if chunk.any():
            chunk[:] = 0
            dirty_hi = hi
        elif pos - start > ZERO_CHUNK:
            break
        pos = hi
    return dirty_hi


class MappedFile:
    """A segment: `base` is its first offset, `buf` the kernels' handle on its map."""

    __slots__ = ("path", "base", "size", "writable", "mm", "buf", "end", "mv")

    def __init__(self, path: str, size: int, writable: bool):
        actual = os.path.getsize(path)
        if actual != size:
            raise CorruptStoreError(path, 0, f"segment is {actual} bytes, expected {size} (mappedFileSize)")
        self.path = path
        self.base = int(os.path.basename(path))
        self.size = size
        self.end = self.base + size
        self.writable = writable
        self.mm = np.memmap(path, dtype=np.uint8, mode="r+" if writable else "r", shape=(size,))
        self.buf = MappedBuffer(self.mm, writable)
        # one buffer export of the whole map; readers slice it (exporting numpy's buffer per
        # record costs a microsecond, a slice a tenth of that)
        self.mv = memoryview(self.mm)

    def view(self, start: int, end: int) -> memoryview:
        """Zero-copy view of absolute offsets [start, end) inside this segment."""
        return self.mv[start - self.base:end - self.base]

    def close(self) -> None:
        if self.buf is not None:
            self.buf.release()
            self.buf = None
        self.mv = None
        # The map itself goes when the last view of it does: a reader still holding a
        # memoryview keeps its pages, so closing never leaves anyone reading unmapped memory.
        self.mm = None

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r})"
