"""The compacted view of a topic queue (RocketMQ 5.1's CompactionLog files), on disk and mapped.

Layout, as RocketMQ's CompactionStore lays it out under the store root:

    compaction/compactionLog/<topic>/<queueId>/<20-digit base>   the kept records, whole, back to back
    compaction/compactionCq/<topic>/<queueId>/<20-digit base>    their sparse consume queue
    compaction/position-checkpoint                                {"queueOffsetMap": {"<topic>_<queueId>": last}}

A compaction-log file holds whole records (copies of the commit log's, byte for byte) and rolls
at compactionMappedFileSize; each has a consume-queue file of the same name. The consume queue is
RocketMQ's SparseConsumeQueue: BatchConsumeQueue's 46-byte units (position in the compaction log,
size, tags code, store time, queue offset, batch size 1, ...), one per kept record, in queue-offset
order with gaps where a newer message of the same key superseded one. The checkpoint holds the
last queue offset the view covers (CompactionPositionMgr); the view ends one past it.

A new view is written whole into `compacting/` sub-folders (RocketMQ's COMPACTING_SUB_FOLDER),
fsynced, and committed by one rename: the COMMITTED file naming its files and end. Installing it
(moving the files up, deleting the old ones, recording the end in the checkpoint) is redone from
that file after a crash; a `compacting/` without it is an unfinished compaction and is deleted.
So a kill -9 at any moment leaves the previous view or the new one, never a mix.
"""
from __future__ import annotations

import json
import mmap
import os
import re
import shutil

import numpy as np

from broker.store.durable import fsync_dir
from broker.store.errors import CorruptStoreError
from broker.store.mapped_file import offset_to_name

CLEANUP_POLICY = "cleanup.policy"  # TopicAttributes.CLEANUP_POLICY_ATTRIBUTE
COMPACTION_DIR, LOG_DIR, CQ_DIR = "compaction", "compactionLog", "compactionCq"
CHECKPOINT = "position-checkpoint"
COMPACTING = "compacting"
COMMITTED = "COMMITTED"
# BatchConsumeQueue.CQ_STORE_UNIT_SIZE: offset 8, size 4, tagsCode 8, storeTime 8, msgBaseOffset 8,
# batchSize 2, compactedOffset 4, reserved 4
SCQ_DTYPE = np.dtype([("pos", ">i8"), ("size", ">i4"), ("tag", ">i8"), ("store_time", ">i8"), ("offset", ">i8"),
                      ("batch", ">i2"), ("compacted", ">i4"), ("reserved", ">i4")])
assert SCQ_DTYPE.itemsize == 46
_NAME = re.compile(r"^\d{20}$")


def is_compaction(attributes: dict | None) -> bool:
    """CleanupPolicyUtils.isCompaction: the topic keeps only the newest message per key."""
    return bool(attributes) and attributes.get(CLEANUP_POLICY) == "COMPACTION"


def queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}_{queue_id}"  # CompactionPositionMgr's key


def log_dir(root: str, topic: str, queue_id: int) -> str:
    return os.path.join(root, COMPACTION_DIR, LOG_DIR, topic, str(queue_id))


def cq_dir(root: str, topic: str, queue_id: int) -> str:
    return os.path.join(root, COMPACTION_DIR, CQ_DIR, topic, str(queue_id))


def _write_file(path: str, data) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


# -- the position checkpoint ---------------------------------------------------------------------
def load_positions(root: str) -> dict[str, int]:
    path = os.path.join(root, COMPACTION_DIR, CHECKPOINT)
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read() or b"{}")
    except FileNotFoundError:
        return {}
    except ValueError as e:
        raise CorruptStoreError(path, 0, f"compaction position checkpoint is not JSON: {e}") from None
    return {k: int(v) for k, v in (data.get("queueOffsetMap") or {}).items()}


def _save_positions(root: str, positions: dict[str, int]) -> None:
    d = os.path.join(root, COMPACTION_DIR)
    tmp = os.path.join(d, CHECKPOINT + ".tmp")
    _write_file(tmp, json.dumps({"queueOffsetMap": positions}, sort_keys=True).encode())
    os.replace(tmp, os.path.join(d, CHECKPOINT))
    fsync_dir(d)


# -- writing a new view ----------------------------------------------------------------------------
class ViewWriter:
    """Writes the records of a new view into the `compacting/` sub-folders, then commits it."""

    def __init__(self, root: str, topic: str, queue_id: int, file_size: int):
        self.root, self.topic, self.queue_id, self.file_size = root, topic, queue_id, file_size
        self.log_tmp = os.path.join(log_dir(root, topic, queue_id), COMPACTING)
        self.cq_tmp = os.path.join(cq_dir(root, topic, queue_id), COMPACTING)
        for d in (self.log_tmp, self.cq_tmp):
            shutil.rmtree(d, ignore_errors=True)  # an unfinished compaction of an earlier run
            os.makedirs(d)
        self.names: list[str] = []
        self._base = 0
        self._file = None
        self._at = 0
        self._units: list[tuple] = []

    def _roll(self) -> None:
        self._close_file()
        self._base = self._base + self.file_size if self.names else 0
        self._at = 0
        name = offset_to_name(self._base)
        self.names.append(name)
        self._file = open(os.path.join(self.log_tmp, name), "wb")

    def _close_file(self) -> None:
        if self._file is None:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        units = np.array(self._units, dtype=SCQ_DTYPE)
        _write_file(os.path.join(self.cq_tmp, self.names[-1]), units.tobytes())
        self._units = []
        self._file = None

    def append(self, record, queue_offset: int, tag: int, store_time: int) -> None:
        size = len(record)
        if size > self.file_size:
            raise ValueError(f"a record of {size} bytes does not fit compactionMappedFileSize {self.file_size}")
        if self._file is None or self._at + size > self.file_size:
            self._roll()
        self._file.write(record)
        self._units.append((self._base + self._at, size, tag, store_time, queue_offset, 1, 0, 0))
        self._at += size

    def commit(self, end: int) -> None:
        """Durable, then committed by the rename of COMMITTED: from here on the view is the new one
        (install() finishes the move, now or after a crash)."""
        self._close_file()
        fsync_dir(self.log_tmp)
        fsync_dir(self.cq_tmp)
        marker = os.path.join(self.log_tmp, COMMITTED)
        _write_file(marker + ".tmp", json.dumps({"end": end, "files": self.names}).encode())
        os.replace(marker + ".tmp", marker)
        fsync_dir(self.log_tmp)


def install(root: str, topic: str, queue_id: int) -> bool:
    """Finish installing a committed view (idempotent: redone after a crash at any step); drop an
    uncommitted one. Returns whether a committed view was installed."""
    ldir, cdir = log_dir(root, topic, queue_id), cq_dir(root, topic, queue_id)
    ltmp, ctmp = os.path.join(ldir, COMPACTING), os.path.join(cdir, COMPACTING)
    marker = os.path.join(ltmp, COMMITTED)
    try:
        with open(marker, "rb") as f:
            committed = json.loads(f.read())
    except FileNotFoundError:
        shutil.rmtree(ltmp, ignore_errors=True)
        shutil.rmtree(ctmp, ignore_errors=True)
        return False
    keep = set(committed["files"])
    for final, tmp in ((ldir, ltmp), (cdir, ctmp)):
        for name in os.listdir(final):
            if _NAME.match(name) and name not in keep:
                os.unlink(os.path.join(final, name))  # the old view's files (readers keep their maps)
        for name in committed["files"]:
            src = os.path.join(tmp, name)
            if os.path.exists(src):
                os.replace(src, os.path.join(final, name))
        fsync_dir(final)
    positions = load_positions(root)
    positions[queue_key(topic, queue_id)] = committed["end"] - 1
    _save_positions(root, positions)
    os.unlink(marker)  # only once everything above is durable
    shutil.rmtree(ltmp, ignore_errors=True)
    shutil.rmtree(ctmp, ignore_errors=True)
    return True


def recover_all(root: str) -> list[tuple[str, int]]:
    """At start: every queue's interrupted install finished or its unfinished compaction dropped."""
    base = os.path.join(root, COMPACTION_DIR, LOG_DIR)
    done = []
    for topic in sorted(os.listdir(base)) if os.path.isdir(base) else ():
        for qid in sorted(os.listdir(os.path.join(base, topic))):
            if qid.isdigit() and os.path.isdir(os.path.join(base, topic, qid, COMPACTING)):
                os.makedirs(cq_dir(root, topic, int(qid)), exist_ok=True)
                if install(root, topic, int(qid)):
                    done.append((topic, int(qid)))
    return done


def remove(root: str, topic: str) -> None:
    """A deleted topic's views go with it."""
    for d in (LOG_DIR, CQ_DIR):
        shutil.rmtree(os.path.join(root, COMPACTION_DIR, d, topic), ignore_errors=True)
    positions = load_positions(root)
    left = {k: v for k, v in positions.items() if not k.startswith(topic + "_") or not k[len(topic) + 1:].isdigit()}
    if left != positions:
        _save_positions(root, left)


# -- reading a view --------------------------------------------------------------------------------
class _Segment:
    """A mapped compaction-log file as the queue-read kernel takes segments (.base, .mv)."""

    __slots__ = ("base", "mv", "_map")

    def __init__(self, path: str, base: int):
        self.base = base
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        self.mv = memoryview(self._map)


class CompactedView:
    """One queue's installed view: kept records [queue offsets in `offsets`], ending at `end`.
    Its maps are never closed explicitly: a pull's reply may still hold views of them after a newer
    view replaced this one; they go when the last reference does."""

    def __init__(self, end: int, segments: list[_Segment], units: np.ndarray, file_size: int):
        self.end = end
        self.segments = segments
        self.units = units
        self.file_size = file_size
        self.offsets = units["offset"].astype(np.int64)
        # the 20-byte consume-queue entries the queue-read kernel walks (index i = i-th kept record)
        cq = np.zeros(len(units), dtype=[("offset", ">i8"), ("size", ">i4"), ("tag", ">i8")])
        cq["offset"], cq["size"], cq["tag"] = units["pos"], units["size"], units["tag"]
        self.cq = cq

    @property
    def first(self) -> int:
        return int(self.offsets[0]) if len(self.offsets) else self.end

    def index_of(self, offset: int) -> int:
        """Index of the first kept record at or after `offset`."""
        return int(np.searchsorted(self.offsets, offset, side="left"))

    def record(self, i: int) -> memoryview:
        u = self.units[i]
        pos, size = int(u["pos"]), int(u["size"])
        seg = self.segments[(pos - self.segments[0].base) // self.file_size]
        at = pos - seg.base
        return seg.mv[at:at + size]


def load_view(root: str, topic: str, queue_id: int, file_size: int, positions: dict[str, int] | None = None
              ) -> CompactedView | None:
    positions = load_positions(root) if positions is None else positions
    last = positions.get(queue_key(topic, queue_id))
    if last is None:
        return None
    ldir, cdir = log_dir(root, topic, queue_id), cq_dir(root, topic, queue_id)
    names = sorted(n for n in os.listdir(ldir) if _NAME.match(n)) if os.path.isdir(ldir) else []
    segments, parts = [], []
    for name in names:
        cq_path = os.path.join(cdir, name)
        if not os.path.exists(cq_path):  # TopicPartitionLog.sanityCheck
            raise CorruptStoreError(cq_path, 0, "compaction log file without its consume-queue file")
        raw = open(cq_path, "rb").read()
        if len(raw) % SCQ_DTYPE.itemsize:
            raise CorruptStoreError(cq_path, 0, f"{len(raw)} bytes is not whole 46-byte units")
        parts.append(np.frombuffer(raw, dtype=SCQ_DTYPE))
        if os.path.getsize(os.path.join(ldir, name)):
            segments.append(_Segment(os.path.join(ldir, name), int(name)))
    units = np.concatenate(parts) if parts else np.empty(0, SCQ_DTYPE)
    return CompactedView(last + 1, segments, units, file_size)
