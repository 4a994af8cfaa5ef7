"""The old commit log below the divided offset: DLedger mode over a store written without it
(RocketMQ's DLedgerCommitLog.recover and its dividedCommitlogOffset).

A store root whose `commitlog/` holds records from ordinary mode keeps them readable when DLedger
mode is turned on, as RocketMQ does:

- First start in DLedger mode (the member's DLedger data directory holds no file): the old commit
  log is recovered as the ordinary store would (clean stop or crash scan, torn tail zeroed), the
  segment holding its last record is sealed with a BLANK from the records' end to the file's end
  (unless one is there), written back, and segments after it (one prepared ahead, empty) are
  deleted. The divided offset is that segment's end, a file boundary; the first DLedger data file
  is made there, named by it, so entry 0 of the Raft log sits at the divided offset and physical
  offsets (entry pos + 48) continue above the old log's. RocketMQ takes its last mapped file,
  whatever it holds; here it is the file of the last record, so every replica of the same old log
  (a master and its caught-up slave) computes the same offset.
- Every later start: the divided offset is the first DLedger data file's base; the old segments
  all lie below it.
- An old log that holds no record at all (a broker started once in ordinary mode, nothing sent) is
  left alone and not read: nothing in it to keep.

Reads by physical offset go through DividedFileQueue: the old segments, then the DLedger data
files, as one list ordered by offset, which is what the readers (QueueReader, view by msgId) and
the queue-read kernel take from a MappedFileQueue (`files`, `file_size`, `find`, `min_offset`).
Both kinds are mappedFileSizeCommitLog long and the data files start where the old segments end,
so the list is contiguous, and one division finds a record's file in either range: an offset below
the divided offset is an ordinary record, one at or above it a record at entry pos + 48.

On that first start the member then writes entry 0 of its DLedger log, a marker (term 0, empty
body) at the divided offset (DLedgerMessageStore._mark_divide): the same bytes on every copy of the
old log, and a ledger end that outranks an empty member's in the vote, so a member without the old
log is never elected over members that hold it.

A member without an old log (a new one) takes the leader's position for entry 0 (its data files
then start there: DLedgerEntryStore._take_first_pos). A member whose old log ends anywhere else
than the leader's entry 0 refuses the leader's entries (OldCommitLogMismatch), naming both
offsets: below, DLedger entries would lie over its old records (never cut); above, it lacks old
records (a slave that had not copied everything) and its queues would have a hole in the middle,
whose end a leader it became would take for the queue's end and give offsets twice. An operator
copies the leader's old log to it, or moves its own out. A gap between the old segments and the
data files found on disk anyway is a Hole in the list (no map): a read there is refused, as for
any offset the log does not hold.

The consume queues are rebuilt at every start from the old records [old min, old end) with the
ordinary scan, then from the DLedger entries (broker.raft.dledger_reput), so queue offsets
continue densely across the divide and a new leader's next offsets (read from the consume queues)
follow the old log's.
"""
from __future__ import annotations

import logging
import os
import struct

from broker.kernels.codec import BLANK_MAGIC_CODE, write_blank
from broker.store import paths
from broker.store.checkpoint import StoreCheckpoint
from broker.store.commit_log import CommitLog
from broker.store.config import MessageStoreConfig
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.errors import CorruptStoreError
from broker.store.mapped_file import create_segment_file, offset_to_name
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.recovery import recover

log = logging.getLogger("store")
_MAGIC = struct.Struct(">i")


def _names(directory: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(directory) if n.isdigit() and len(n) == 20)
    except FileNotFoundError:
        return []


def holds_records(commitlog_dir: str) -> bool:
    """Whether the ordinary commit log holds a record: its first segment starts with one (a
    segment is written from its start; an unwritten one is zeros)."""
    names = _names(commitlog_dir)
    if not names:
        return False
    with open(os.path.join(commitlog_dir, names[0]), "rb") as f:
        return bool(f.read(8).strip(b"\0"))


def load_old(config: MessageStoreConfig) -> MappedFileQueue | None:
    """The old commit log, mapped read-only, if it holds records (else None: not read)."""
    if not holds_records(config.commitlog_dir):
        return None
    q = MappedFileQueue(config.commitlog_dir, config.mappedFileSizeCommitLog, writable=False)
    q.load()
    return q


def _seal(config: MessageStoreConfig) -> int | None:
    """First start: recover the old commit log, seal the segment of its last record with a blank,
    drop the segments after it; returns the divided offset (None: no record recovered)."""
    root = config.storePathRootDir
    cl = CommitLog(config, writable=True)
    cl.load()
    # DLedger mode rebuilds consume queues at every start (the directory is emptied first):
    # recovery finds none to cut
    cqs = ConsumeQueueStore(config.consumequeue_dir, config.mappedFileSizeConsumeQueue, writable=True)
    cqs.load()
    ckpt = StoreCheckpoint(paths.checkpoint(root))
    try:
        res = recover(cl, cqs, ckpt, not os.path.exists(paths.abort_file(root)), config.checkCRCOnRecover)
        q = cl.queue
        end = res.max_offset
        if end <= q.min_offset:
            return None
        size = q.file_size
        divided = -(-end // size) * size  # the end of the segment holding the last record
        q.drop_after(divided - 1)
        if end < divided:
            mf = q.find(end)
            rel = end - mf.base
            sealed = _MAGIC.unpack_from(mf.mv, rel + 4)[0] == BLANK_MAGIC_CODE
            if not sealed:
                write_blank(mf.buf, rel, divided - end)
                mf.mm.flush()  # msync: the seal is on disk before the first entry above it
            log.info("old commit log [%d, %d) recovered (%s); %s blank at %d closes segment %s",
                     q.min_offset, end, "clean stop" if res.clean else "after a crash",
                     "its" if sealed else "a", end, os.path.basename(mf.path))
        return divided
    finally:
        cl.close()
        cqs.close()
        ckpt.close()


def open_old_commit_log(config: MessageStoreConfig) -> MappedFileQueue | None:
    """At every start of DLedger mode, before the entry store opens: the old commit log below the
    divided offset, mapped read-only, or None when there is none to keep. On the first start the
    log is sealed and the first DLedger data file made at the divided offset (see the module's
    doc)."""
    if not holds_records(config.commitlog_dir):
        return None
    data_dir = config.dledger_data_dir
    data = _names(data_dir)
    if not data:
        divided = _seal(config)
        if divided is None:
            return None
        os.makedirs(data_dir, exist_ok=True)
        create_segment_file(os.path.join(data_dir, offset_to_name(divided)), config.mappedFileSizeCommitLog,
                            warm=False)
        log.info("DLedger mode over the commit log written without it: dividedCommitlogOffset %d (the old log "
                 "stays readable below it; the DLedger log starts there)", divided)
        first = divided
    else:
        first = int(data[0])
    old = load_old(config)
    end = old.files[-1].end
    if end > first:
        old.close()
        raise CorruptStoreError(os.path.join(data_dir, offset_to_name(first)), first,
                                f"the DLedger data files start inside the commit log written without DLedger, "
                                f"which ends at {end}: the two logs overlap (ordinary mode wrote after a DLedger "
                                f"log was begun?); move one of them out of storePathRootDir")
    log.info("old commit log [%d, %d) readable below the divided offset %d", old.min_offset, end, first)
    return old


class Hole:
    """Offsets between this member's old log's end and its DLedger data files (it took a leader's
    entry 0 above its own old log): no file, no map."""

    __slots__ = ("base", "end", "size", "path", "mv", "buf")

    def __init__(self, base: int, size: int):
        self.base, self.size, self.end = base, size, base + size
        self.path = f"<hole at {base}>"
        self.mv = self.buf = None


class DividedFileQueue:
    """The old segments, any holes, then the DLedger data files, as one read-only file list ordered
    by physical offset (see the module's doc). The data files are the entry store's own list,
    followed live (it grows, and an empty log may restart it at the leader's position); the old
    segments are this object's, closed with it."""

    def __init__(self, old: MappedFileQueue, data: MappedFileQueue):
        if old.file_size != data.file_size:
            raise CorruptStoreError(old.directory, 0, f"old segments of {old.file_size} bytes beside DLedger data "
                                                      f"files of {data.file_size}")
        self.old = old
        self.data = data
        self.file_size = data.file_size
        self.old_end = old.files[-1].end
        self._key = None
        self._files: list = []

    @property
    def writable(self) -> bool:
        return self.data.writable  # the broker's own data files: never to be refreshed by a reader

    @property
    def divided(self) -> int:
        """The divided offset: where the DLedger data files start (the old log's end before any)."""
        d = self.data.files
        return d[0].base if d else self.old_end

    @property
    def min_offset(self) -> int:
        # the cleaner deletes the old segments first: once all are gone the log starts at the data files
        return self.old.min_offset if self.old.files else self.data.min_offset

    def drop_before(self, offset: int) -> int:
        """Let go of the old segments the cleaner deleted (the data files are the entry store's,
        dropped by it: DLedgerEntryStore.drop_before)."""
        return self.old.drop_before(offset)

    @property
    def files(self) -> list:
        d = self.data.files
        key = (len(self.old.files), len(d), d[0].base if d else -1, d[-1].base if d else -1)
        if key != self._key:
            size = self.file_size
            holes = [Hole(b, size) for b in range(self.old_end, self.divided, size)]
            self._files = self.old.files + holes + list(d)
            self._key = key
        return self._files

    def find(self, offset: int):
        """The file holding `offset`: an old segment below the divided offset, a data file at or
        above it, None outside both (a Hole between them)."""
        if offset < self.divided:
            return self.old.find(offset)
        return self.data.find(offset)

    def refresh(self) -> None:
        """Nothing to map: the old segments never change, the data files are the broker's own."""

    def close(self) -> None:
        self.old.close()
