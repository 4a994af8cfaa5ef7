"""EntryFileList: DLedger's MmapFileList for one of its two logs (`data/` or `index/`).

The commit log's MappedFileQueue already is that list (fixed-size files named by their 20-digit
start offset, mapped with numpy.memmap, created atomically, the next one prepared in a background
thread); this adds what a Raft log needs on top: growing to a given offset, cutting the tail off
durably (a follower truncating an uncommitted tail), zeroing what a torn write left, and msync of a
byte range across files.

Invariant kept by every writer of these files: every byte past the log's end is zero (files are
created zero-filled, truncation and recovery zero what they drop). So the bytes after the last
entry are a clean end, and a later crash can never find an older entry beyond it and revive it.
"""
from __future__ import annotations

import logging
import mmap
import os

from broker.kernels.codec import advise_random
from broker.store.durable import fsync_dir
from broker.store.errors import CorruptStoreError
from broker.store.mapped_file import MappedFile, zero_torn_tail
from broker.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger("raft")


def msync(mf: MappedFile, lo: int, hi: int) -> None:
    """Write back the absolute range [lo, hi) of one file (msync wants a page-aligned start)."""
    lo = max(lo, mf.base) - mf.base
    hi = min(hi, mf.end) - mf.base
    if hi <= lo:
        return
    lo -= lo % mmap.ALLOCATIONGRANULARITY
    mf.mm.base.flush(lo, hi - lo)


class EntryFileList(MappedFileQueue):
    def __init__(self, directory: str, file_size: int, warm: bool = True):
        super().__init__(directory, file_size, writable=True, warm=warm)
        self._advised = -1  # the base of the file the writer was last given

    def settle(self) -> None:
        """Wait for the file being prepared ahead, so that what is on disk is known before files
        are deleted (a file created after a cut would leave a gap in the names)."""
        if self._ahead is not None:
            self._ahead.join()
            self._ahead = None
            self._ahead_error = None

    def file_for_write(self, offset: int) -> MappedFile:
        """The file holding `offset`, creating the files up to it (each after the last one)."""
        if not self.files:
            self.roll(offset - offset % self.file_size)
        if offset < self.files[0].base:
            raise CorruptStoreError(self.files[0].path, offset,
                                    f"offset {offset} falls before the first file of {self.directory}")
        while offset >= self.files[-1].end:
            self.roll(self.files[-1].end)
        return self.advise_unwritten(offset)

    # As the commit log's writer (CommitLog._attach): the unwritten pages the writer goes to (and
    # the warm-ahead thread before it) come in 4 KiB folios, not in the read-around's folios of up
    # to 2 MiB, which the flusher's fdatasync every 10 ms would write back whole for every few KiB
    # appended (a group of three wrote 10 KiB to the disk per 1 KiB message, and each member's
    # warm-ahead thread spent 5 CPU-us per message, not 1). Pages already cached keep their folios.
    def advise_unwritten(self, offset: int) -> MappedFile | None:
        """MADV_RANDOM from `offset`, where the writer is, to the end of its file (once per file)."""
        mf = self.find(offset)
        if mf is not None and mf.base != self._advised:
            self._advised = mf.base
            advise_random(mf.buf, offset - mf.base)
        return mf

    def roll(self, base: int) -> MappedFile:
        """As MappedFileQueue.roll, the new file advised before the next one is prepared (starting
        that thread may hand the warm-ahead thread the GIL, and it would find this file unadvised)."""
        ahead, self.ahead = self.ahead, False
        try:
            mf = super().roll(base)
        finally:
            self.ahead = ahead
        self._advised = mf.base
        advise_random(mf.buf, 0)
        if self.ahead:
            self.prepare_ahead()
        return mf

    def flush_range(self, lo: int, hi: int) -> None:
        """msync every file's share of [lo, hi): the blank closing a file is written back with it."""
        if hi <= lo or not self.files:
            return
        mf = self.find(lo) or self.files[0]
        i = self.files.index(mf)
        for mf in self.files[i:]:
            if mf.base >= hi:
                break
            msync(mf, lo, hi)

    def sync_range(self, lo: int, hi: int) -> None:
        """fdatasync every file holding bytes of [lo, hi): the pages stored through the maps are
        written back as msync would, but the GIL is released (mmap.flush keeps it), so this may
        run in a thread beside the loop. A file deleted meanwhile (a truncation) is skipped."""
        if hi <= lo:
            return
        for mf in list(self.files):
            if mf.end <= lo or mf.base >= hi:
                continue
            try:
                fd = os.open(mf.path, os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)

    def zero_span(self, lo: int, hi: int) -> None:
        """Zero [lo, hi) across files, durably, the last file first; the files stay (see
        DLedgerEntryStore.truncate for why)."""
        for mf in reversed(list(self.files)):
            if mf.end > lo and mf.base < hi:
                self.zero(max(lo, mf.base), min(hi, mf.end))

    def zero(self, lo: int, hi: int) -> None:
        """Zero [lo, hi) inside the one file holding lo, and write it back."""
        mf = self.find(lo)
        if mf is None or hi <= lo:
            return
        hi = min(hi, mf.end)
        mf.mm[lo - mf.base:hi - mf.base] = 0
        msync(mf, lo, hi)

    def zero_tail(self, offset: int) -> bool:
        """Zero whatever a torn write left after `offset` in its file; True if anything was there.
        Writes are sequential, so past one clean chunk the file is untouched (the commit log's
        recovery relies on the same)."""
        mf = self.find(offset)
        if mf is None:
            return False
        dirty_hi = zero_torn_tail(mf.mm, offset - mf.base)
        if dirty_hi >= 0:
            msync(mf, offset, mf.base + dirty_hi)
        return dirty_hi >= 0

    def drop_after(self, offset: int) -> list[str]:
        """Delete, durably, every file that starts after `offset` (the ones on disk but not mapped,
        like a file prepared ahead, too); returns the deleted paths."""
        self.settle()
        gone = []
        keep = []
        for mf in self.files:
            if mf.base > offset:
                mf.close()
                gone.append(mf.path)
            else:
                keep.append(mf)
        self.files = keep
        mapped = {mf.path for mf in keep}
        for name in self.segment_names():
            path = os.path.join(self.directory, name)
            if int(name) > offset and path not in gone and path not in mapped:
                gone.append(path)
        for path in sorted(gone, reverse=True):  # from the end: a crash midway leaves no gap
            os.unlink(path)
        if gone:
            fsync_dir(self.directory)
        return gone

    def delete_before(self, offset: int) -> list[str]:
        """Delete, durably, every file wholly below `offset` (the index files below a log's begin
        once the cleaner deleted the data files of those entries); returns the deleted paths.
        Their maps are let go as MappedFileQueue.drop_before does: a view still held keeps its pages."""
        gone = [mf.path for mf in self.files if mf.end <= offset]
        self.drop_before(offset)
        mapped = {mf.path for mf in self.files}
        for name in self.segment_names():
            path = os.path.join(self.directory, name)
            if int(name) + self.file_size <= offset and path not in gone and path not in mapped:
                gone.append(path)
        for path in sorted(gone):  # from the start: a crash midway leaves no gap
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        if gone:
            fsync_dir(self.directory)
        return gone
