"""ConsumeQueue: per (topic, queueId) index into the commit log, RocketMQ's 20-byte entries.

    entry = commitLogOffset int64 | size int32 | tagsCode int64   (big-endian)
    files = consumequeue/<topic>/<queueId>/<20-digit byte offset>, mappedFileSizeConsumeQueue bytes each

Only the reput service writes consume queues; the broker maps them read-only to serve pulls.
"""
from __future__ import annotations

import logging
import os
import re

import numpy as np

from broker.kernels.codec import CQ_UNIT_SIZE
from broker.store.errors import CorruptStoreError
from broker.store.mapped_file import create_segment_file, offset_to_name

log = logging.getLogger(__name__)

CQ_UNIT = CQ_UNIT_SIZE
CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tag", ">i8")])
assert CQ_DTYPE.itemsize == CQ_UNIT
_NAME = re.compile(r"^\d{20}$")


class ConsumeQueue:
    def __init__(self, root: str, topic: str, queue_id: int, file_size: int, writable: bool):
        self.topic = topic
        self.queue_id = queue_id
        self.directory = os.path.join(root, topic, str(queue_id))
        self.file_size = file_size
        self.per_file = file_size // CQ_UNIT
        self.writable = writable
        self.files: dict[int, np.memmap] = {}  # first logical offset of the file -> entries
        self.dirty: set[int] = set()
        self.min_logic = 0  # first entry whose message the commit log still holds (read side)
        if writable:
            os.makedirs(self.directory, exist_ok=True)
        self.load()

    def _path(self, first: int) -> str:
        return os.path.join(self.directory, offset_to_name(first * CQ_UNIT))

    def _map(self, first: int) -> np.memmap:
        path = self._path(first)
        actual = os.path.getsize(path)
        if actual != self.file_size:
            raise CorruptStoreError(path, 0, f"consume-queue file is {actual} bytes, expected {self.file_size}")
        return np.memmap(path, dtype=CQ_DTYPE, mode="r+" if self.writable else "r", shape=(self.per_file,))

    def load(self) -> None:
        if not os.path.isdir(self.directory):
            return
        for n in sorted(os.listdir(self.directory)):
            if n.endswith(".tmp") and self.writable:
                os.unlink(os.path.join(self.directory, n))
            elif _NAME.match(n):
                first = int(n) // CQ_UNIT
                if first not in self.files:
                    self.files[first] = self._map(first)

    def file_for(self, index: int, create: bool) -> tuple[int, np.memmap | None]:
        """The file holding logical offset `index`: (its first offset, its entries), made if asked."""
        return self._file_for(index, create)

    def _file_for(self, index: int, create: bool) -> tuple[int, np.memmap | None]:
        first = index - index % self.per_file
        arr = self.files.get(first)
        if arr is None:
            if os.path.exists(self._path(first)):
                arr = self.files[first] = self._map(first)
            elif create:
                create_segment_file(self._path(first), self.file_size, warm=True)
                arr = self.files[first] = self._map(first)
        return first, arr

    # -- write side (reput) -------------------------------------------------------------------
    def put(self, queue_offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray) -> None:
        """Write entries at their queue offsets. Idempotent: rewriting an entry writes the same bytes."""
        n = len(queue_offsets)
        i = 0
        while i < n:
            first, arr = self._file_for(int(queue_offsets[i]), create=True)
            # the run of entries that falls in this file
            j = i + int(np.searchsorted(queue_offsets[i:], first + self.per_file))
            pos = queue_offsets[i:j] - first
            if pos[-1] - pos[0] == j - i - 1:  # consecutive: slice assignment
                sl = slice(int(pos[0]), int(pos[-1]) + 1)
                arr["offset"][sl] = phys[i:j]
                arr["size"][sl] = sizes[i:j]
                arr["tag"][sl] = tags[i:j]
            else:
                arr["offset"][pos] = phys[i:j]
                arr["size"][pos] = sizes[i:j]
                arr["tag"][pos] = tags[i:j]
            self.dirty.add(first)
            i = j

    def flush(self) -> None:
        for first in self.dirty:
            arr = self.files.get(first)
            if arr is not None:
                arr.flush()
        self.dirty.clear()

    # -- read side ----------------------------------------------------------------------------
    def refresh(self) -> None:
        if not self.writable:
            self.load()

    @property
    def min_offset(self) -> int:
        first = min(self.files) if self.files else 0
        return max(first, self.min_logic)

    def correct_min(self, phys_min: int) -> None:
        """Read side, after the cleaner moved the commit log's minimum: forget files it deleted and
        start the queue at its first entry whose message still exists (RocketMQ's correctMinOffset),
        so a consumer behind it is told to move (PULL_OFFSET_MOVED) instead of waiting on a hole."""
        for first in [f for f in self.files if not os.path.exists(self._path(f))]:
            del self.files[first]
        # The first entry at or above phys_min, file after file: the cleaner deletes the files
        # wholly below it only after it has published the new minimum, so a file we still see
        # may hold nothing that survives (the queue's start is then in a later one).
        start = None
        for first in sorted(self.files):
            arr = self.files[first]
            # the search over the written entries only: the zeros after them are not sorted with
            # them, and a search over a file mostly unwritten (the usual 300 000-entry file) ended
            # past every entry, putting the queue's minimum at its end
            nz = np.flatnonzero(arr["size"] == 0)
            n = int(nz[0]) if len(nz) else len(arr)
            start = first + int(np.searchsorted(arr["offset"][:n].astype(np.int64), phys_min))
            if start < first + len(arr):
                break  # a surviving entry here, or the next one to be written
        if start is not None:
            self.min_logic = max(self.min_logic, start)

    def skip_unwritten_head(self, phys_min: int) -> None:
        """Read side, DLedger mode: a queue whose entries at its start were never written here (a
        member without the commit log below the divided offset, or old segments the cleaner had
        deleted) starts at its first written entry, if that one's message is at or above the
        log's minimum `phys_min`: its end is then found past the hole, and a new leader's next
        offset continues the group's (instead of restarting at the hole)."""
        if not self.files:
            return
        first = min(self.files)
        arr = self.files[first]
        lo = max(self.min_offset - first, 0)
        if lo >= len(arr) or arr["size"][lo]:
            return
        written = np.flatnonzero(arr["size"][lo:] != 0)
        if len(written) and int(arr["offset"][lo + int(written[0])]) >= phys_min:
            self.min_logic = first + lo + int(written[0])

    def max_offset_on_disk(self) -> int:
        """One past the last entry with a size (what recovery trusts)."""
        for first in sorted(self.files, reverse=True):
            nz = np.flatnonzero(self.files[first]["size"])
            if len(nz):
                return first + int(nz[-1]) + 1
        return self.min_offset

    def max_phys_end(self) -> int:
        """End offset in the commit log of the last entry (0 if none)."""
        last = self.max_offset_on_disk() - 1
        if last < 0 or last < self.min_offset:
            return 0
        e = self.entry(last)
        return 0 if e is None else e[0] + e[1]

    def entry(self, index: int) -> tuple[int, int, int] | None:
        first, arr = self._file_for(index, create=False)
        if arr is None:
            return None
        e = arr[index - first]
        return int(e["offset"]), int(e["size"]), int(e["tag"])

    def entries(self, start: int, count: int) -> np.ndarray:
        """Entries [start, start+count) that lie in one file (the caller loops for more)."""
        first, arr = self._file_for(start, create=False)
        if arr is None:
            return np.empty(0, CQ_DTYPE)
        end = min(start + count, first + self.per_file)
        return arr[start - first:end - first]

    # -- recovery -----------------------------------------------------------------------------
    def truncate_phys(self, phys_end: int) -> int:
        """Zero entries pointing at or past `phys_end` in the commit log; returns how many."""
        dropped = 0
        for first in sorted(self.files, reverse=True):
            arr = self.files[first]
            bad = np.flatnonzero((arr["size"] > 0) & (arr["offset"].astype(np.int64) + arr["size"] > phys_end))
            if len(bad):
                arr[bad] = np.zeros(1, CQ_DTYPE)
                arr.flush()
                dropped += len(bad)
            elif np.any(arr["size"] > 0):
                break  # older files point even lower
        if dropped:
            log.warning("consume queue %s/%d: dropped %d entries past commit-log offset %d",
                        self.topic, self.queue_id, dropped, phys_end)
        return dropped

    def close(self) -> None:
        self.files.clear()


class ConsumeQueueStore:
    """All consume queues under consumequeue/, created on first use."""

    def __init__(self, root: str, file_size: int, writable: bool):
        self.root = root
        self.file_size = file_size
        self.writable = writable
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.phys_min = 0  # read side: the commit log's minimum, applied to queues as they load
        os.makedirs(root, exist_ok=True)

    def load(self) -> None:
        for topic in sorted(os.listdir(self.root)):
            tdir = os.path.join(self.root, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in os.listdir(tdir):
                if qid.isdigit():
                    self.get(topic, int(qid))

    def get(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = self.queues[(topic, queue_id)] = ConsumeQueue(self.root, topic, queue_id, self.file_size, self.writable)
            if self.phys_min and not self.writable:
                cq.correct_min(self.phys_min)
        return cq

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """Read side: the queue if it exists on disk (no directories made for unknown topics)."""
        cq = self.queues.get((topic, queue_id))
        # Hostile input (issue 7): read requests name topics unchecked (GET_MIN_OFFSET, QUERY_CONSUMER_OFFSET):
        # "T/../T", "T/./../T", ... each resolved to T's directory and mapped it once more, cached under
        # its own name: memory and mappings grew without bound. A topic is one path component.
        if cq is None and "/" not in topic and "\0" not in topic and topic not in ("", ".", "..") \
                and os.path.isdir(os.path.join(self.root, topic, str(queue_id))):
            cq = self.get(topic, queue_id)
        return cq

    def correct_min(self, phys_min: int) -> None:
        self.phys_min = phys_min
        for cq in self.queues.values():
            cq.correct_min(phys_min)

    def flush(self) -> None:
        for cq in self.queues.values():
            if cq.dirty:
                cq.flush()

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.queues.clear()
