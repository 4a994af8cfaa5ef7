"""DLedgerEntryStore: one member's Raft log on disk, in DLedger 0.3.1.2's format
(DLedgerMmapFileStore), so DLedger's own tools read our files and we read theirs.

    dledger-<selfId>/data/<20-digit start offset>    entries (entry_format), mappedFileSizeForEntryData each
    dledger-<selfId>/index/<20-digit start offset>   32-byte index entries, entry i at i × 32
    dledger-<selfId>/checkpoint                      endIndex, committedIndex (entry_checkpoint)

Replication (broker.raft.entry_pusher / entry_handler) reads what a leader sends with `entry_span`
(views of the maps, no copy) and what leader and follower compare with `entry_header`; a follower
writes with `append_at(..., pos=, crc=)`, taking the leader's position and body CRC. A later step
makes each RocketMQ commit-log record the body of one entry (its physical offset is then the
entry's pos + 48).

What this adds to DLedger's store, and why:
- The layout is a function of the sequence of entries alone: an entry goes right after the
  previous one if it leaves 8 bytes in the file, else after a blank at the start of the next file;
  a truncation or a recovered crash puts the end right after the last kept entry (never after a
  blank), so every replica places entry i at the same position, which a follower checks against
  the position the leader sent (`append_at(..., pos=)`).
- Truncation is durable when it returns (the dropped bytes zeroed and written back, later files
  deleted and the directory synced): a follower that rejoins with an uncommitted tail drops it on
  disk before it acknowledges anything. DLedger only moves its write position, leaving the dropped
  entries' bytes in the file after the new end, where a later recovery may read them back.
- Recovery refuses to open a log whose entries at or below the checkpoint's committedIndex do not
  verify (CorruptStoreError), instead of cutting them off like a torn tail (entry_recovery).
- Entries carry a body CRC (entry_format), which recovery checks.

Not thread-safe: one writer (the member's event loop) calls everything; the only other thread is
the file list's, creating the next file ahead. One process opens a store at a time (DLedger keeps no
lock; the broker's lock on the store root, paths.lock_file, covers this folder). An Entry's body is a read-only view over the map,
valid until its entry is truncated away. Recovery reads entries in Python (about a microsecond or
few each): a kernel can take it over if start-up time over full 1 GiB files asks for it.
"""
from __future__ import annotations

import logging
import mmap
import os
from typing import NamedTuple

from broker.kernels.codec import MappedBuffer
from broker.kernels.entry_push import append_entries
from broker.raft.entry_checkpoint import load_checkpoint, persist_checkpoint
from broker.raft.entry_files import EntryFileList
from broker.raft.entry_format import (BLANK, BLANK_MAGIC, DEFAULT_DATA_FILE_SIZE, DEFAULT_INDEX_FILE_SIZE, HEADER,
                                      HEADER_SIZE, INDEX, INDEX_UNIT_SIZE, MAGIC_1, MIN_BLANK_LEN, Entry, Header,
                                      body_crc, byte_view)
from broker.raft.entry_recovery import RecoveredLog, recover
from broker.raft.errors import (OldCommitLogMismatch, EntryStoreDiskFailed, EntryTooLarge, InconsistentIndex,
                                InconsistentPos,
                                IndexOutOfRange, StoreClosed, TermRegression, TruncateCommitted)
from broker.store import paths
from broker.store.errors import CorruptStoreError, StoreConfigError

log = logging.getLogger("raft")

DATA_DIR = "data"
INDEX_DIR = "index"
JAVA_INT_MAX = (1 << 31) - 1  # DLedger's file sizes are Java ints
STAGE_BYTES = 4 << 20  # the leader's staging buffer (_stage_for): an entry opens a new one this often
STAGE_LEAD = 8  # the stage starts this far before the log's end (_stage_for)


class EntrySpan(NamedTuple):
    """Consecutive entries as they lie in the data files, for a push to a follower: `views` are
    read-only views of the maps holding headers and bodies (no copy), one per run of entries
    contiguous in one file (a blank closing a file splits the runs and is not included)."""
    first: int
    count: int
    pos: int            # the first entry's position
    nbytes: int         # the total of the views
    views: list

    @property
    def last(self) -> int:
        return self.first + self.count - 1


def _check_sizes(data_file_size: int, index_file_size: int) -> None:
    if not HEADER_SIZE + MIN_BLANK_LEN <= data_file_size <= JAVA_INT_MAX:
        raise StoreConfigError("mappedFileSizeForEntryData",
                               f"{data_file_size} is not between {HEADER_SIZE + MIN_BLANK_LEN} and {JAVA_INT_MAX}")
    if not INDEX_UNIT_SIZE <= index_file_size <= JAVA_INT_MAX or index_file_size % INDEX_UNIT_SIZE:
        raise StoreConfigError("mappedFileSizeForEntryIndex", f"{index_file_size} is not a positive multiple "
                                                              f"of {INDEX_UNIT_SIZE} up to {JAVA_INT_MAX}")


class DLedgerEntryStore:
    def __init__(self, directory: str, data_file_size: int = DEFAULT_DATA_FILE_SIZE,
                 index_file_size: int = DEFAULT_INDEX_FILE_SIZE, warm: bool = True, floor: int = 0):
        _check_sizes(data_file_size, index_file_size)
        # where this member's own old commit log ends (0: none): an empty log never takes a
        # leader's first position below it (take_first_pos)
        self.floor = floor
        self.dir = str(directory)
        os.makedirs(self.dir, exist_ok=True)
        self.data = EntryFileList(os.path.join(self.dir, DATA_DIR), data_file_size, warm)
        self._pw_mf = None  # the data file the pushed runs are written to with pwrite, and its descriptor
        self._pw_fd = -1
        # the leader's Appender writes records here, `took` writes them into the data file
        self._stage: MappedBuffer | None = None
        self._staged = None  # (the Appender placed, the log position its stage starts at, the data file)
        # Index files are reserved (fallocate), never warmed: an entry writes 32 bytes of them, a
        # new page every 128 entries, so warming 160 MiB (DLedger's size) ahead saves nothing
        # measurable and cost 320 MiB of writes per member at start (the file and the one after)
        self.index = EntryFileList(os.path.join(self.dir, INDEX_DIR), index_file_size, warm=False)
        self.closed = False
        try:
            self.data.load()
            self.index.load()
            ckpt = load_checkpoint(self.dir)
            self.recovered: RecoveredLog = recover(self.data, self.index, ckpt.committed_index if ckpt else -1)
        except BaseException:
            self.data.close()
            self.index.close()
            raise
        r = self.recovered
        self._begin = r.begin_index
        if r.begin_index > 0:
            # the cleaner deleted the first data files; the index files below their entries go
            # here, also when the broker stopped between the two (they are of no use)
            self.index.delete_before(r.begin_index * INDEX_UNIT_SIZE)
        self._end_index = r.end_index
        self._end_term = r.end_term
        self._wrote = r.end_pos                      # data position of the next entry (or its blank)
        self._index_end = (r.end_index + 1) * INDEX_UNIT_SIZE if r.end_index >= 0 else 0
        self._data_flushed = self._wrote             # recovery wrote back everything it kept
        self._flushed_index = self._end_index        # the last entry written back whole
        self._index_flushed = self._index_end
        self._committed = -1
        self._truncations = 0  # a flush planned before one must not move the marks after it
        self.disk_failed: str | None = None  # why a write-back failed; then nothing is flushed again
        self._committed_pos = -1
        # fn(data durable up to, index durable up to), whenever those marks move (a write-back, a
        # truncation): the broker publishes them in its offset table
        self.on_durable: list = []
        if ckpt is not None and ckpt.committed_index >= 0:
            self.update_committed_index(ckpt.committed_index)
        # the files the next appends go to, made in the background rather than on the first append
        self.data.prepare_ahead()
        self.index.prepare_ahead()
        # No thread faults the data files in ahead of the writer, as the commit log's warm-ahead
        # does: a leader's runs of entries (the Appender's stage, `took`) and a follower's pushed
        # runs (append_pushed) are written with pwrite, which takes the pages into the page cache
        # itself; only an entry opening the next file is stored through the map
        self.data.advise_unwritten(self._wrote)
        self.index.advise_unwritten(self._index_end)

    @classmethod
    def open(cls, store_root: str, self_id: str, **kw) -> "DLedgerEntryStore":
        """The store of member `self_id` under a RocketMQ store root (DLedger's storeBaseDir)."""
        return cls(paths.dledger_dir(store_root, self_id), **kw)

    # -- state -----------------------------------------------------------------------------------
    @property
    def ledger_begin_index(self) -> int:
        return self._begin

    @property
    def ledger_end_index(self) -> int:
        return self._end_index

    @property
    def ledger_end_term(self) -> int:
        return self._end_term

    @property
    def committed_index(self) -> int:
        return self._committed

    @property
    def committed_pos(self) -> int:
        """The data position right after the last committed entry (DLedger's committedPos: what
        RocketMQ's DLedgerCommitLog reports as its max offset)."""
        return self._committed_pos

    @property
    def write_pos(self) -> int:
        return self._wrote

    @property
    def flushed_pos(self) -> int:
        return self._data_flushed

    @property
    def index_flushed_pos(self) -> int:
        """Where the index files are written back up to, in bytes."""
        return self._index_flushed

    @property
    def flushed_index(self) -> int:
        """The last entry written back, data and index (-1: none)."""
        return self._flushed_index

    def _check_open(self) -> None:
        if self.closed:
            raise StoreClosed(self.dir)

    # -- appends ---------------------------------------------------------------------------------
    def append(self, term: int, body) -> tuple[int, int]:
        """The leader's append (appendAsLeader): the entry takes the next index. Returns (index,
        pos); the body starts at pos + 48. Not durable until flush()."""
        index = self._end_index + 1
        return index, self._append(index, term, body, None)

    def next_pos(self, size: int) -> int:
        """Where the next entry of `size` bytes (header included) goes: right after the log's end
        if it leaves MIN_BLANK_LEN bytes in the file, else at the start of the next file. A leader
        that must write the position into the body (RocketMQ's PHYSICALOFFSET, pos + 48) asks
        this first, then appends with nothing in between."""
        wrote = self._wrote
        file_size = self.data.file_size
        room = file_size - wrote % file_size  # files start at multiples of their size
        # an entry always leaves room for a blank after it, so `room` is never 0 here
        return wrote if size + MIN_BLANK_LEN <= room else wrote + room

    def append_at(self, index: int, term: int, body, pos: int | None = None, crc: int | None = None) -> int:
        """A follower's append (appendAsFollower) of the entry the leader sent: it must be the next
        index (InconsistentIndex) and, when the leader's `pos` is given, land at the same position
        (InconsistentPos). Returns the position.

        `crc` is the bodyCrc of the leader's header, which the caller has checked against the body
        (0: the leader's entry carries none, as DLedger writes it): it is written as given, so the
        follower's header is the leader's byte for byte and the body's CRC is computed once per
        replica. None computes it here."""
        if index != self._end_index + 1 and (self._end_index >= 0 or pos is None):
            # an empty log takes any first entry the leader sends (with its position): the
            # leader's begin may be above 0 once its first data files expired
            self._check_open()
            raise InconsistentIndex(self._end_index + 1, index)
        return self._append(index, term, body, pos, crc)

    def append_pushed(self, body) -> int:
        """A follower's append of the entries of a push (checked by push_protocol.check_append),
        the first of which continues this log: it is the next index, or this log is empty and
        takes it at the leader's position (append_at). The entries of a push lie back to back as
        the leader's files hold them: each run continuing this log in one data file is copied by
        the entry_push kernel (one copy, the index units with it, no Python object per entry);
        an entry that opens the next file (after DLedger's blank), or that this log cannot take
        where the leader placed it, goes through append_at, which writes the blank or raises
        (InconsistentPos, TermRegression, EntryTooLarge, ...). Returns how many entries were
        appended; when one is refused, the ones before it stay appended.

        The runs are written with pwrite, not through the map: a write takes its pages into the
        page cache itself, which costs a third of faulting them in ahead and storing through the
        map (see pyx/entry_push.pyx)."""
        self._check_open()
        view = byte_view(body)
        n = len(view)
        at = 0
        done = 0
        while at < n:
            index = self._end_index + 1
            if self._end_index >= 0:  # an empty log's first entry sets where the log is (append_at)
                mf = self.data.file_for_write(self._wrote)
                imf = self.index.file_for_write(index * INDEX_UNIT_SIZE)
                k, at_after, wrote, term = append_entries(view, at, index, self._wrote, self._end_term,
                                                          mf.mv, mf.base, imf.mv, imf.base, self._pushed_fd(mf))
                if k:
                    at = at_after
                    done += k
                    self._wrote = wrote
                    self._end_index = index + k - 1
                    self._index_end = (index + k) * INDEX_UNIT_SIZE
                    self._end_term = term
                    if self._begin < 0:  # every entry was truncated away
                        self._begin = index
                    continue
            h = Header._make(HEADER.unpack_from(view, at))
            if h.size < HEADER_SIZE or h.size > n - at:  # a caller's bug: the push was checked
                raise ValueError(f"entry {h.index} of size {h.size} at {at} of a {n}-byte push")
            self.append_at(h.index, h.term, view[at + HEADER_SIZE:at + h.size], pos=h.pos, crc=h.body_crc)
            at += h.size
            done += 1
        return done

    def _pushed_fd(self, mf) -> int:
        """A descriptor of the data file `mf` maps, open for the pushed runs' pwrites; the one of
        the file before is closed when the writer moves on (a new MappedFile: a file rolled, or made
        again after a truncation deleted it)."""
        if self._pw_mf is not mf:
            self._close_pushed_fd()
            self._pw_fd = os.open(mf.path, os.O_WRONLY)
            self._pw_mf = mf
        return self._pw_fd

    def _close_pushed_fd(self) -> None:
        if self._pw_fd >= 0:
            os.close(self._pw_fd)
        self._pw_fd = -1
        self._pw_mf = None

    def _append(self, index: int, term: int, body, expect_pos: int | None, crc: int | None = None) -> int:
        self._check_open()
        view = byte_view(body)
        size = HEADER_SIZE + len(view)
        file_size = self.data.file_size
        if size + MIN_BLANK_LEN > file_size:
            raise EntryTooLarge(size, file_size)
        if term < self._end_term:
            raise TermRegression(index, term, self._end_term)
        wrote = self._wrote
        pos = self.next_pos(size)
        room = pos - wrote  # the blank closing the file, if the entry opens the next one
        if expect_pos is not None and (expect_pos != pos or index != self._end_index + 1):
            if self._end_index >= 0:
                raise InconsistentPos(index, pos, expect_pos)
            pos = wrote = self._take_first_pos(expect_pos, index)
            room = 0
        # the files first: if one cannot be made (a full disk), nothing has been written
        mf = self.data.file_for_write(pos)
        off = index * INDEX_UNIT_SIZE
        imf = self.index.file_for_write(off)
        if pos != wrote:
            prev = self.data.find(wrote)
            rel = wrote - prev.base
            BLANK.pack_into(prev.mv, rel, BLANK_MAGIC, room)
            prev.mm[rel + MIN_BLANK_LEN:] = 0  # as DLedger writes it (zero already: nothing follows the end)
        rel = pos - mf.base
        mv = mf.mv
        HEADER.pack_into(mv, rel, MAGIC_1, size, index, term, pos, 0, 0, body_crc(view) if crc is None else crc,
                         len(view))
        mv[rel + HEADER_SIZE:rel + size] = view  # the one copy of the body
        INDEX.pack_into(imf.mv, off - imf.base, MAGIC_1, pos, size, index, term)
        self._wrote = pos + size
        self._index_end = off + INDEX_UNIT_SIZE
        self._end_index = index
        self._end_term = term
        if self._begin < 0:
            self._begin = index
        return pos

    # The leader's appends in place: the commit log's Appender in entry mode (broker.kernels.codec)
    # writes header, body and index entry straight into the files attached here (the send kernel
    # does it for a whole read), and the log's end follows it afterwards (took).
    @property
    def truncations(self) -> int:
        """How many truncations this log has had (a writer placed before one is out of step)."""
        return self._truncations

    def place(self, app, term: int) -> None:
        """Put an entry-mode Appender at the log's end: the next entry's position, index and
        term, the data file holding that position and the index file holding its index entry.
        Where the next entry cannot go there (it opens the next data file, after a blank), the
        Appender declines it and this store's own append writes it; place again after."""
        self._check_open()
        if term < self._end_term:
            raise TermRegression(self._end_index + 1, term, self._end_term)
        index = self._end_index + 1
        mf = self.data.file_for_write(self._wrote)
        off = index * INDEX_UNIT_SIZE
        imf = self.index.file_for_write(off)
        app.place_entries(self._wrote, index, term)
        # the records go to a staging buffer standing for the data file from the log's end, and
        # `took` writes them into the file with one pwrite (see _stage_for)
        base = min(self._wrote - STAGE_LEAD, mf.end - STAGE_BYTES)
        app.attach(self._stage_buffer(), base)
        app.attach_index(imf.buf, imf.base)
        self._staged = (app, base, mf)

    def took(self, app) -> int:
        """The entries an Appender placed by `place` wrote in place since: the log now ends after
        them (as after as many appends). Returns how many there were."""
        first = self._end_index + 1
        n = app.entry_index - first
        if n <= 0:
            return 0
        staged = self._staged
        if staged is not None and staged[0] is app:  # else its caller attached it to the map itself
            self._write_staged(staged[1], staged[2], self._wrote, app.wrote)
        self._wrote = app.wrote
        self._index_end = app.entry_index * INDEX_UNIT_SIZE
        self._end_index = app.entry_index - 1
        self._end_term = app.term
        if self._begin < 0:
            self._begin = first
        return n

    def _stage_buffer(self) -> MappedBuffer:
        """The buffer an Appender placed at the log's end writes its records to. It stands for
        [base, base + STAGE_BYTES) of the data file `place` attaches it for, ending at most at the
        file's end, so the Appender declines an entry exactly where it would in the file (the one
        opening the next file), and earlier only where the stage ends (that entry then takes the
        store's own append, and the Appender is placed again after it). `base` is at least
        STAGE_LEAD bytes before the log's end, bytes the Appender never writes: at a segment's
        first byte it takes a record that does not fit for one no segment can hold
        (MessageIllegal), not for one to put in the next file.

        Why not the map: a leader's store through the map took a write fault per page (the
        page's first write, and again after each write-back made it clean: ext4's page_mkwrite,
        with TLB flushes on the other core), 11 % of a leader's loop under 1 KiB sends (perf),
        besides a warm-ahead thread faulting them in ahead (another 11 % of the process). A pwrite
        takes the pages into the page cache itself, as a follower's pushed runs do
        (pyx/entry_push.pyx); the write-back's fdatasync costs less too (no mapped pages to clean)."""
        if self._stage is None:  # anonymous memory, its pages taken once and reused
            self._stage = MappedBuffer(mmap.mmap(-1, STAGE_BYTES), True)
        return self._stage

    def _write_staged(self, base: int, mf, start: int, end: int) -> None:
        """Bytes [start, end) of the log, which the Appender wrote to the stage placed at `base`,
        into data file `mf` at their place: one pwrite (the map shows them: same page cache).
        A write that fails is done through the map instead, as before staging (a full disk is
        not one of its causes: the data files are reserved when made)."""
        if end <= start:
            return
        with memoryview(self._stage.obj) as stage:
            view = stage[start - base:end - base]
            try:
                fd = self._pushed_fd(mf)
                done = 0
                while done < len(view):
                    done += os.pwrite(fd, view[done:], start - mf.base + done)
            except OSError as e:
                log.warning("dledger: pwrite of entries [%d, %d) into %s failed (%s): written through the map",
                            start, end, mf.path, e)
                rel = start - mf.base
                mf.mv[rel:rel + len(view)] = view
            view.release()

    def _take_first_pos(self, pos: int, index: int = 0) -> int:
        """An empty log takes the leader's position for its first entry `index`: the leader's
        data files start at its divided offset (the end of its old commit log) or, once its first
        files expired, at its begin entry's file; a new or wiped member's at its own or at 0. The
        (empty) data files go and the list starts at `pos`; the index files go too, and the list
        starts with the file holding `index` (entry i at i x 32). A member with an old commit log
        takes only its own old log's end (else OldCommitLogMismatch: below it the entries would
        lie over old records, above it the member's queues would have a hole); off a file boundary
        (a different mappedFileSizeCommitLog) InconsistentPos."""
        if self.floor and pos != self.floor:
            raise OldCommitLogMismatch(pos, self.floor)
        if pos % self.data.file_size:
            raise InconsistentPos(index, self._wrote, pos)
        self._close_pushed_fd()  # of a file deleted here: its blocks are freed at once
        gone = self.data.drop_after(-1)
        gone_index = self.index.drop_after(-1) if index > 0 else []
        log.info("dledger: the log is empty and takes the leader's position %d for entry %d (its data files "
                 "started at %d; %d empty files deleted)", pos, index, self._wrote, len(gone) + len(gone_index))
        self._wrote = self._data_flushed = pos
        if index > 0:
            self._index_end = self._index_flushed = index * INDEX_UNIT_SIZE
        return pos

    def drop_before(self, min_offset: int) -> int:
        """The cleaner deleted the data files wholly below `min_offset` (broker.raft.dledger_clean):
        let go of their maps (a push still sending views of them keeps their pages until it is
        done: MappedFile.close never releases a view), move the log's begin to the first entry of
        the first remaining file (DLedger's reviseLedgerBeginIndex: read from its header), and
        delete the index files wholly below that entry. Returns how many data files went."""
        self._check_open()
        data = self.data
        if not data.files or data.files[0].end > min_offset:
            return 0
        if data.files[-1].end <= min_offset:
            raise CorruptStoreError(data.directory, min_offset, "the cleaner deleted every data file")
        n = data.drop_before(min_offset)
        first = data.files[0]
        h = Header._make(HEADER.unpack_from(first.mv, 0))
        if h.magic != MAGIC_1 or h.pos != first.base or h.index < self._begin:
            raise CorruptStoreError(first.path, first.base, f"the first remaining data file does not start with an "
                                                            f"entry (magic {h.magic}, pos {h.pos}, index {h.index})")
        self._begin = h.index
        gone = self.index.delete_before(h.index * INDEX_UNIT_SIZE)
        log.info("dledger: the cleaner deleted %d data files: the log begins at entry %d (position %d); "
                 "%d index files deleted", n, h.index, first.base, len(gone))
        return n

    # -- reads -----------------------------------------------------------------------------------
    def _index_entry(self, index: int) -> tuple[int, int, int, int, int]:
        self._check_open()
        if index < 0 or index < self._begin or index > self._end_index:
            raise IndexOutOfRange(index, self._begin, self._end_index)
        off = index * INDEX_UNIT_SIZE
        imf = self.index.find(off)
        if imf is None:
            raise CorruptStoreError(self.index.directory, off, f"no index file holds entry {index}")
        return INDEX.unpack_from(imf.mv, off - imf.base)

    def position(self, index: int) -> tuple[int, int]:
        """(pos, size) of entry `index`, from the index alone."""
        _, pos, size, _, _ = self._index_entry(index)
        return pos, size

    def entry_term(self, index: int) -> int:
        return self._index_entry(index)[4]

    def get(self, index: int) -> Entry:
        """Entry `index` with its body as a view over the map (no copy). IndexOutOfRange outside
        [ledger_begin_index, ledger_end_index]."""
        _, pos, size, _, _ = self._index_entry(index)
        mf = self.data.find(pos)
        if mf is None:
            raise CorruptStoreError(self.data.directory, pos, f"no data file holds entry {index}")
        rel = pos - mf.base
        _, hsize, hindex, term, hpos, _, _, _, _ = HEADER.unpack_from(mf.mv, rel)
        if (hsize, hindex, hpos) != (size, index, pos):
            raise CorruptStoreError(mf.path, pos, f"entry {index}: the data header (size {hsize}, index {hindex}, "
                                                  f"pos {hpos}) disagrees with the index (size {size}, pos {pos})")
        return Entry(index, term, pos, size, mf.mv[rel + HEADER_SIZE:rel + size].toreadonly())

    def _data_file(self, pos: int, index: int):
        mf = self.data.find(pos)
        if mf is None:
            raise CorruptStoreError(self.data.directory, pos, f"no data file holds entry {index}")
        return mf

    def entry_header(self, index: int) -> Header:
        """The data header of entry `index` (what a leader and a follower compare: equal headers
        mean the same index, term, position, size and body CRC)."""
        pos, _ = self.position(index)
        mf = self._data_file(pos, index)
        return Header._make(HEADER.unpack_from(mf.mv, pos - mf.base))

    def header_view(self, index: int) -> memoryview:
        """The 48 header bytes of entry `index`, as a read-only view of the map."""
        pos, _ = self.position(index)
        return self._data_file(pos, index).view(pos, pos + HEADER_SIZE).toreadonly()

    def entry_span(self, first: int, max_count: int, max_bytes: int) -> EntrySpan:
        """Entries from `first` on, as stored (header and body), for replication: at least one
        entry, then as many as keep within `max_count` entries and `max_bytes` bytes. The views are
        of the maps, so a leader hands its followers the bytes its own log holds without copying
        them; they stay valid until the entries are truncated away (then they read zeros)."""
        end = min(self._end_index, first + max_count - 1)
        pos, _ = self.position(first)
        views = []
        nbytes = 0
        i = first
        run_pos = pos
        while True:
            mf = self._data_file(run_pos, i)
            # entries lie back to back inside a file: a run is found with a few index lookups
            # (its last entry, or a binary search for it), not one per entry
            j = self._run_last(i, end, run_pos, mf.end, max_bytes - nbytes)
            if j < i:
                if i > first:
                    break
                j = i  # the first entry goes whatever its size
            p, s = self.position(j)
            views.append(mf.view(run_pos, p + s).toreadonly())
            nbytes += p + s - run_pos
            i = j + 1
            if i > end:
                break
            run_pos, _ = self.position(i)
        return EntrySpan(first, i - first, pos, nbytes, views)

    def _run_last(self, i: int, end: int, run_pos: int, file_end: int, budget: int) -> int:
        """The last entry j in [i, end] that lies in the file ending at file_end with the run from
        entry i (at run_pos) to it within `budget` bytes; i - 1 if entry i alone is not. Both
        conditions hold up to some j and not after it (positions grow with the index)."""
        p, s = self.position(end)
        if p < file_end and p + s - run_pos <= budget:
            return end
        lo, hi = i - 1, end - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            p, s = self.position(mid)
            if p < file_end and p + s - run_pos <= budget:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # -- truncation ------------------------------------------------------------------------------
    def truncate(self, from_index: int) -> None:
        """Drop every entry >= from_index, durably before returning: the dropped bytes of data and
        index are zeroed and written back (the files stay), the entries kept flushed, and the
        checkpoint rewritten with the new endIndex. The log then ends
        right after entry from_index - 1, where the leader's entry from_index will go."""
        self._check_open()
        self._check_disk()
        if from_index == self._end_index + 1:
            return
        if from_index <= self._committed:
            raise TruncateCommitted(from_index, self._committed)
        if from_index < 0 or from_index < self._begin or from_index > self._end_index:
            raise IndexOutOfRange(from_index, self._begin, self._end_index)
        if from_index > self._begin:
            prev_pos, prev_size = self.position(from_index - 1)
            cut = prev_pos + prev_size
            end_term = self.entry_term(from_index - 1)
        else:
            cut = self.position(from_index)[0]
            end_term = -1
        index_cut = from_index * INDEX_UNIT_SIZE
        # Zero what is dropped, the last file first (a crash midway leaves entries only up to a
        # zeroed point, a log that recovery ends there); the files stay, zeroed. They used to be
        # deleted and made again under the same names, and the reput process, which maps the
        # data files on its own, kept reading its maps of the deleted ones: zeros where the new
        # entries were, and it stopped (the fault loop's kill-leader cell, a restarted member).
        # A stale map could as well have shown the dropped entries themselves.
        try:
            self.data.zero_span(cut, self._wrote)
            self.index.zero_span(index_cut, self._index_end)
        except OSError as e:  # half zeroed: the restart's recovery cuts the log at the first zero
            raise self.write_back_failed("writing back the truncation", e) from None
        log.info("dledger truncate: entries [%d, %d] dropped, the log ends at %d", from_index, self._end_index, cut)
        self._wrote = cut
        self._index_end = index_cut
        self._end_index = from_index - 1
        self._end_term = end_term
        if from_index == self._begin:
            self._begin = -1
        self._data_flushed = min(self._data_flushed, cut)
        self._index_flushed = min(self._index_flushed, index_cut)
        self._flushed_index = min(self._flushed_index, from_index - 1)
        self._truncations += 1
        self.persist_checkpoint()

    # -- durability ------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write back every entry appended so far, data then index (msync of the dirty ranges)."""
        self._check_open()
        self._check_disk()
        try:
            self.data.flush_range(self._data_flushed, self._wrote)
        except OSError as e:
            raise self.write_back_failed("msync of the data files", e) from None
        self._data_flushed = self._wrote
        try:
            self.index.flush_range(self._index_flushed, self._index_end)
        except OSError as e:
            raise self.write_back_failed("msync of the index files", e) from None
        self._index_flushed = self._index_end
        self._flushed_index = self._end_index
        self._durable()

    def _check_disk(self) -> None:
        if self.disk_failed:
            raise EntryStoreDiskFailed(self.disk_failed)

    def write_back_failed(self, what: str, e: OSError) -> EntryStoreDiskFailed:
        """Record that a write-back failed (the first time, said once): from now on the flushed
        marks stay where the last good write-back left them. Returns the error to raise."""
        if not self.disk_failed:
            self.disk_failed = (f"{what} failed ({e}): entries past index {self._flushed_index} may not be on disk; "
                                f"this member takes and acknowledges no more entries until it is restarted")
            log.error("dledger store %s: %s (the restart recovers the log by CRC from what is on disk)", self.dir,
                      self.disk_failed)
        return EntryStoreDiskFailed(self.disk_failed)

    def _durable(self) -> None:
        for fn in self.on_durable:
            fn(self._data_flushed, self._index_flushed)

    # The flusher's write-back, off the loop: planned on it, done in a thread, settled on it.
    def flush_plan(self) -> tuple[int, int, int, int, int, int]:
        """What flush() would write back now: (data from, to, index from, to, the last entry,
        truncations so far)."""
        self._check_open()
        return (self._data_flushed, self._wrote, self._index_flushed, self._index_end, self._end_index,
                self._truncations)

    def write_back(self, plan: tuple[int, int, int, int, int, int]) -> None:
        """The plan's fdatasyncs, data then index; touches no state, so it may run in a thread."""
        d0, d1, i0, i1, _, _ = plan
        self.data.sync_range(d0, d1)
        self.index.sync_range(i0, i1)

    def written_back(self, plan: tuple[int, int, int, int, int, int]) -> None:
        """On the loop after write_back: the flushed marks move to the plan's ends, unless a
        truncation came in between (what it cut may have been written again since)."""
        _, d1, _, i1, end_index, truncations = plan
        if truncations == self._truncations and not self.closed and not self.disk_failed:
            self._data_flushed = max(self._data_flushed, d1)
            self._index_flushed = max(self._index_flushed, i1)
            self._flushed_index = max(self._flushed_index, end_index)
            self._durable()

    def settle(self) -> None:
        """Wait for the files being prepared ahead (tests look at the directories after it)."""
        self.data.settle()
        self.index.settle()

    def update_committed_index(self, index: int) -> int:
        """Move committedIndex forward (DLedger's updateCommittedIndex: never backwards, never below
        the log's begin, clamped to its end); returns the committed index."""
        self._check_open()
        if index < 0 or self._end_index < 0 or index <= self._committed:
            return self._committed
        if index < self._begin:
            log.warning("dledger: committedIndex %d below the log begin %d ignored", index, self._begin)
            return self._committed
        index = min(index, self._end_index)
        pos, size = self.position(index)
        self._committed = index
        self._committed_pos = pos + size
        return index

    def persist_checkpoint(self) -> None:
        """Flush the entries, then write the checkpoint: a committedIndex on disk never names an
        entry that is not on disk (recovery relies on it to tell corruption from a torn tail)."""
        self.flush()  # raises EntryStoreDiskFailed after a failed write-back: no checkpoint then
        persist_checkpoint(self.dir, self._end_index, self._committed)

    def close(self) -> None:
        if self.closed:
            return
        try:
            if not self.disk_failed:  # else the checkpoint on disk stays: the restart recovers by CRC
                self.persist_checkpoint()
        finally:
            self.closed = True
            self._close_pushed_fd()
            self.data.close()
            self.index.close()

    def __enter__(self) -> "DLedgerEntryStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"DLedgerEntryStore({self.dir!r}, entries [{self._begin}, {self._end_index}], "
                f"term {self._end_term}, committed {self._committed})")
