"""WarmAheadService: the commit log's next pages faulted into the page cache by a thread, ahead of
the single writer, so that its stores through the map find them there.

Why: a page the page cache takes from memory the machine never used before is expensive here
(~2.6 CPU-us per KiB: the VM's host backs it on first touch; `bench.limits` measures it). A
writer storing into unwritten, uncached pages of an ASYNC_FLUSH segment (fallocated, not warmed)
paid it inside each store: under batch sends half the broker's CPU was `__pi_memset` under
`filemap_fault` (perf, issue 16). Here a thread pays it, with the GIL released, on the other
core, and the event loop keeps handling requests.

Only reads are asked for (MADV_POPULATE_READ): no byte is written and no page dirtied, so the
flush service's fdatasync writes nothing extra, and the thread may run beside the writer.
SYNC_FLUSH segments are warmed whole when they are made (mapped_file.warm_file) and need none
of this.

The writer calls `note(wrote)` after its appends: one comparison, and a wake-up (an Event) only
when it has come within LOW_WATER of what is warmed. The thread then warms up to AHEAD past the
writer, a segment at a time; a segment not made yet (the allocation thread's) is warmed once the
writer rolls to it.

Behind the writer it lets go of the pages more than `keep` (commitLogCacheBytes) below
`floor()` (flushed and dispatched), so that the writer's next pages reuse their memory instead of
memory the VM's host must back anew (docs/store.md, "Pages behind").
"""
from __future__ import annotations

import errno
import logging
import mmap
import os
import threading

from broker.kernels.codec import populate_read
from broker.store.os_thread import name_os_thread

log = logging.getLogger("store")

AHEAD = 32 << 20  # warm up to this far past the writer
LOW_WATER = 24 << 20  # wake the thread when less than this is warmed past the writer
STEP = 4 << 20  # one madvise: bounded, so stop() waits for at most one
DROP_STEP = 64 << 20  # pages let go of at least this many bytes at a time (two syscalls per step)
DROP_PIECE = 16 << 20  # one madvise of the GIL-holding kind: ~0.3 ms
DROP_ALIGN = 2 << 20  # whole 2 MiB folios, so that they return to the allocator whole


class WarmAheadService:
    def __init__(self, find_segment, ahead: int = AHEAD, low_water: int = LOW_WATER, keep: int = -1):
        self._find = find_segment  # offset -> MappedFile holding it, or None
        self.ahead = ahead
        self.low_water = low_water
        self.warmed = 0  # pages below this are warmed (or written); read by the writer
        # Bytes kept cached below the floor (flushed and dispatched, see floor); < 0: none let go.
        self.keep = keep
        self.floor = None  # () -> offset below which every service is done with the log, or None
        self.dropped = 0  # pages below this were let go of (or never ours to let go of)
        self._target = 0
        self._from = 0  # where the writer was when it last woke the thread
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self, wrote: int) -> None:
        self._stopping = False
        self._wake.clear()
        self.warmed = self._target = self._from = wrote
        self.dropped = wrote - wrote % DROP_ALIGN  # older pages: a previous run's, the OS's to evict
        self._thread = threading.Thread(target=self._run, name="warm-ahead", daemon=True)
        self._thread.start()
        self.note(wrote)

    def note(self, wrote: int) -> None:
        """The writer is at `wrote`: wake the thread if less than low_water is warmed past it."""
        if wrote + self.low_water > self.warmed and self._target < wrote + self.low_water:
            self._from = wrote
            self._target = wrote + self.ahead
            self._wake.set()

    def stop(self) -> None:
        """Joined before the segments are unmapped."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        name_os_thread("warm-ahead")  # the benchmarks count this thread's CPU apart (bench.proc_cpu)
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            try:
                self._warm_to(self._target)
                if self.keep >= 0 and self.floor is not None:
                    self._let_go()
            except OSError as e:
                if e.errno == errno.EINVAL:  # a kernel before 5.14: the writer faults its own pages
                    log.info("the commit log is not warmed ahead of the writer: %s", e)
                    return
                # a segment unmapped under us (the store closing): nothing to warm there
                log.debug("warming ahead stopped at %d: %s", self.warmed, e)

    def _warm_to(self, target: int) -> None:
        pos = max(self.warmed, self._from)  # what the writer already wrote needs nothing
        while pos < target and not self._stopping:
            mf = self._find(pos)
            if mf is None:
                return  # the next segment is not in use yet: warmed once the writer rolls to it
            end = min(target, mf.end, pos + STEP)
            populate_read(mf.buf, pos - mf.base, end - mf.base)
            pos = self.warmed = end

    def _let_go(self) -> None:
        try:
            self._drop_below(self.floor() - self.keep)
        except OSError as e:  # never worth stopping the warming for: the OS evicts them instead
            log.warning("the commit log's pages behind %d are left to the OS: %s", self.dropped, e)
            self.keep = -1

    def _drop_below(self, end: int) -> None:
        """Let go of the pages of [dropped, end) (rounded down to whole folios): unmapped from this
        process (MADV_DONTNEED) and dropped from the page cache (POSIX_FADV_DONTNEED). Only
        flushed, dispatched bytes are given: clean pages, so nothing is written or lost, and a
        later read of them (a consumer far behind) reads the file. A page another process still
        maps stays cached (the fadvise skips it)."""
        end -= end % DROP_ALIGN
        pos = self.dropped
        if end - pos < DROP_STEP:
            return
        while pos < end and not self._stopping:
            mf = self._find(pos)
            mm = None if mf is None else mf.mm
            if mm is None:  # deleted (expired) or closing: its pages go with it
                self.dropped = end
                return
            hi = min(end, mf.end, pos + DROP_PIECE)
            unmap(mf, pos, hi)
            fd = os.open(mf.path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, pos - mf.base, hi - pos, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            pos = self.dropped = hi


def unmap(mf, lo: int, hi: int) -> None:
    """Drop this process's mapping of segment mf's absolute offsets [lo, hi) (MADV_DONTNEED; a
    later read faults them back from the page cache or the file): a page still mapped anywhere
    is one POSIX_FADV_DONTNEED cannot let go of. lo must be page-aligned."""
    # numpy's memmap keeps its mmap object: the one whose pages this process maps. That
    # madvise holds the GIL: callers keep each to a fraction of a millisecond (DROP_PIECE).
    mf.mm._mmap.madvise(mmap.MADV_DONTNEED, lo - mf.base, hi - lo)


class Unmapper:
    """A reader of the log that moves forward (the reput service) unmaps what it is done with,
    so that the writer's process can let go of those pages (WarmAheadService._drop_below)."""

    def __init__(self, find_segment, start: int):
        self._find = find_segment
        self.done = start - start % DROP_ALIGN

    def passed(self, offset: int) -> None:
        end = offset - offset % DROP_ALIGN
        if end - self.done < DROP_STEP or self.done < 0:
            return
        pos = self.done
        try:
            while pos < end:
                mf = self._find(pos)
                if mf is None or mf.mm is None:
                    break
                hi = min(end, mf.end, pos + DROP_PIECE)
                unmap(mf, pos, hi)
                pos = hi
        except OSError as e:  # not the reader's error (it would hold dispatching): stop unmapping
            log.warning("the commit log stays mapped behind %d: %s", pos, e)
            self.done = -1
            return
        self.done = end
