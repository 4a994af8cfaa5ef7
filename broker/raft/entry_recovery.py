"""Recovery of DLedger's entry log at open (DLedgerMmapFileStore.recover, made strict).

1. Where to scan from: as DLedger, the third file from the end; its first entry must verify and
   agree with its index entry (which shows the index below it is sound), else one file earlier,
   down to the first file (then the whole index is rebuilt).
2. The scan walks entries in order, checking each one as DLedger does (magic, size, pos equal to
   its position, bodySize + 48 == size, index dense, term never decreasing) and the body CRC when
   the entry carries one (entry_format). A blank `[-1][rest of file]` moves to the next file. An
   index entry that is missing or disagrees with its data entry is rewritten.
3. Where the scan stops: on 8 zero bytes (the clean end), on a blank closing the last file, or on
   the first entry that does not verify. If the entry that should have been there is at or below
   the checkpoint's committedIndex, committed data is damaged: CorruptStoreError naming the file
   and the position, and the store does not open (DLedger logs and cuts it). Otherwise it is the
   torn tail of a crash and is cut: like a follower's truncation, the log ends right after its
   last entry (a blank closing that entry's file is cut too, so the layout of what is appended
   next is the same as on every replica), later files are deleted, what the torn write left is
   zeroed, and the index is cut at the next index. All of that, and the entries found, are
   written back before the store takes an append.

Entries in files before the scan start are not re-read (DLedger and RocketMQ do the same): they
were durable before the files after them existed.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from broker.raft.entry_files import EntryFileList
from broker.raft.entry_format import (BLANK, BLANK_MAGIC, HEADER, HEADER_SIZE, INDEX, INDEX_UNIT_SIZE, MAGIC_1,
                                      MIN_BLANK_LEN, Header, body_crc, header_problem)
from broker.store.errors import CorruptStoreError
from broker.store.mapped_file import MappedFile

log = logging.getLogger("raft")
SCAN_LAST_FILES = 3  # DLedger's recover starts at mappedFiles.size() - 3


@dataclass
class RecoveredLog:
    begin_index: int          # -1: empty
    end_index: int            # -1: empty
    end_term: int             # -1: empty
    end_pos: int              # where the next entry goes: right after the last one
    scanned_from: int         # the data position the scan started at
    cut_at: int | None        # the position of the torn entry that was cut, if one was
    zeroed: bool              # bytes past the end (a torn write, a blank closing the last file) were zeroed
    index_rewritten: int      # index entries written because they were missing or wrong


def read_header(mf: MappedFile, rel: int) -> Header | None:
    if mf.size - rel < HEADER_SIZE:
        return None
    return Header._make(HEADER.unpack_from(mf.mv, rel))


def index_agrees(index: EntryFileList, h: Header) -> bool:
    off = h.index * INDEX_UNIT_SIZE
    imf = index.find(off)
    if imf is None:
        return False
    return INDEX.unpack_from(imf.mv, off - imf.base) == (h.magic, h.pos, h.size, h.index, h.term)


def write_index(index: EntryFileList, i: int, pos: int, size: int, term: int) -> None:
    off = i * INDEX_UNIT_SIZE
    imf = index.file_for_write(off)
    INDEX.pack_into(imf.mv, off - imf.base, MAGIC_1, pos, size, i, term)


def entry_problem(mf: MappedFile, rel: int, h: Header | None, room: int) -> str | None:
    """Why the entry at `rel` of `mf` does not verify on its own (the sequence is the caller's)."""
    if h is None:
        return "header cut off by the end of the file"
    problem = header_problem(h, mf.base + rel, room)
    if problem is None and h.body_crc != 0:
        crc = body_crc(mf.mv[rel + HEADER_SIZE:rel + h.size])
        if crc != h.body_crc:
            problem = f"body CRC {crc} != bodyCrc {h.body_crc}"
    return problem


def _scan_start(data: EntryFileList, index: EntryFileList) -> tuple[int, Header | None]:
    """(file number, its first entry) to scan from; (0, None) if no file's first entry verifies.
    A file whose first entry does not verify is not a start: the scan then goes through the
    file before it, so that the log is cut right after that file's last entry, not after its blank."""
    files = data.files
    for s in range(max(0, len(files) - SCAN_LAST_FILES), -1, -1):
        mf = files[s]
        h = read_header(mf, 0)
        problem = entry_problem(mf, 0, h, mf.size)
        if problem is not None:
            if h is not None and (h.magic, h.size) != (0, 0):  # not merely a file with no entry yet
                log.warning("dledger recovery: the first entry of %s does not verify (%s); starting a file earlier",
                            mf.path, problem)
            continue
        if index_agrees(index, h):
            return s, h
        if s == 0:
            return 0, h  # a sound first entry whose index entry is missing: rebuild from it
        log.warning("dledger recovery: the index disagrees with the first entry of %s; starting a file earlier",
                    mf.path)
    return 0, None


def recover(data: EntryFileList, index: EntryFileList, committed: int) -> RecoveredLog:
    if not data.files:
        if committed >= 0:
            raise CorruptStoreError(data.directory, 0,
                                    f"no data file, but the checkpoint's committedIndex is {committed}")
        index.drop_after(-1)
        return RecoveredLog(-1, -1, -1, 0, 0, None, False, 0)

    s, first = _scan_start(data, index)
    mf = data.files[s]
    rel = 0
    start = mf.base
    expected = first.index if first is not None else None  # the index the next entry must carry
    first_index = last_index = last_term = -1
    end_pos = mf.base
    rewritten = 0
    reason = None
    while True:
        room = mf.size - rel
        if room < MIN_BLANK_LEN:
            reason = f"{room} bytes left at the end of the file, fewer than a blank"
            break
        magic, size = BLANK.unpack_from(mf.mv, rel)
        if magic == BLANK_MAGIC:
            if size != room:
                reason = f"blank of size {size} with {room} bytes left in the file"
                break
            nxt = data.find(mf.end)
            if nxt is None:
                break
            mf, rel = nxt, 0
            continue
        if magic == 0 and size == 0:
            break
        h = read_header(mf, rel)
        at = mf.base + rel
        reason = entry_problem(mf, rel, h, room)
        if reason is None and expected is not None and h.index != expected:
            reason = f"index {h.index} where {expected} comes next"
        if reason is None and h.term < last_term:
            reason = f"term {h.term} after term {last_term}"
        if reason is not None:
            break
        if not index_agrees(index, h):
            write_index(index, h.index, at, h.size, h.term)
            rewritten += 1
        if first_index < 0:
            first_index = h.index
        last_index, last_term, expected = h.index, h.term, h.index + 1
        end_pos = at + h.size
        rel += h.size

    stop = mf.base + rel
    if expected is None:
        if committed >= 0:
            raise CorruptStoreError(mf.path, stop, f"no entry verifies where the log begins ({reason}), "
                                                   f"but the checkpoint's committedIndex is {committed}")
    elif expected <= committed:
        raise CorruptStoreError(mf.path, stop, f"entry {expected}, at or below committedIndex {committed}: "
                                               f"{reason or 'missing (the log ends before it)'}")
    if reason is not None:
        log.warning("dledger recovery: torn entry at %d in %s (%s): the log ends at %d after entry %d",
                    stop, mf.path, reason, end_pos, last_index)

    # Cut the tail: the data after the last entry, then the index after its index entry. Files go
    # first, then the zeroing: a crash in between still leaves a log that ends where this one does.
    dropped = data.drop_after(end_pos)
    zeroed = data.zero_tail(end_pos)
    index_end = (last_index + 1) * INDEX_UNIT_SIZE if last_index >= 0 else (index.min_offset if index.files else 0)
    dropped += index.drop_after(index_end)
    zeroed = index.zero_tail(index_end) or zeroed
    if dropped:  # usually a file prepared ahead, still empty
        log.log(logging.WARNING if reason is not None else logging.INFO,
                "dledger recovery: deleted %s past the end of the log", ", ".join(dropped))
    # What the scan found was in the page cache, maybe not yet on disk (the process was killed,
    # not the machine): write it back before anything is appended or acknowledged after it.
    data.flush_range(start, end_pos)
    if last_index >= 0:
        index.flush_range(first_index * INDEX_UNIT_SIZE, index_end)

    begin = -1
    if last_index >= 0:
        begin = first_index if s == 0 else _first_index(data)
    log.info("dledger recovery: entries [%d, %d] (last term %d), scanned from %d, end at %d, "
             "%d index entries rewritten", begin, last_index, last_term, start, end_pos, rewritten)
    return RecoveredLog(begin, last_index, last_term, end_pos, start, stop if reason is not None else None,
                        zeroed, rewritten)


def _first_index(data: EntryFileList) -> int:
    """The index of the log's first entry (reviseLedgerBeginIndex), which the scan may not reach."""
    mf = data.files[0]
    h = read_header(mf, 0)
    problem = "header cut off" if h is None else header_problem(h, mf.base, mf.size)
    if problem is not None:
        raise CorruptStoreError(mf.path, mf.base, f"the log's first entry: {problem}")
    return h.index
