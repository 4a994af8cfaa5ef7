"""Typed errors of DLedger's entry store.

Each carries the DLedgerResponseCode DLedger answers with in the same situation (`code`), so the
replication step can turn a refused append into the peer's reply without a table of its own, and
a message that names what the operator or the caller needs: the index, the position, the file.
Corruption of durable data is not one of these: it is `broker.store.errors.CorruptStoreError`
(path, offset, reason), as everywhere else in the store, and stops the store from opening.
"""
from __future__ import annotations

from broker.raft.protocol import ResponseCode
from broker.store.errors import StoreError


class EntryStoreError(StoreError):
    """Base of the entry store's refusals: the log is unchanged when one is raised."""

    code = ResponseCode.INTERNAL_ERROR


class EntryStoreDiskFailed(EntryStoreError):
    """A write-back (fdatasync or msync) of this member's entry files failed. The kernel may have
    dropped the pages it covered, so a later write-back that succeeds proves nothing: the flushed
    marks never move again, and the member takes and acknowledges nothing more until it is
    restarted and has recovered its log by CRC from what is on disk."""

    code = ResponseCode.DISK_ERROR


class InconsistentIndex(EntryStoreError):
    """A follower was handed an entry that is not the next one of its log (appendAsFollower)."""

    code = ResponseCode.INCONSISTENT_INDEX

    def __init__(self, expected: int, got: int):
        super().__init__(f"entry index {got} is not the next index {expected} of the log")
        self.expected = expected
        self.got = got


class InconsistentPos(EntryStoreError):
    """The leader placed the entry at another position than this log would: the two logs' data
    files disagree (different file sizes, or a diverged layout). DLedger reports DISK_ERROR."""

    code = ResponseCode.DISK_ERROR

    def __init__(self, index: int, expected: int, got: int):
        super().__init__(f"entry {index} lands at position {expected} here, the leader has it at {got}")
        self.index = index
        self.expected = expected
        self.got = got


class OldCommitLogMismatch(InconsistentPos):
    """The leader's entry 0 is not where this member's own old commit log (the log written before
    DLedger mode, read below the divided offset) ends. Below it, taking it would put DLedger entries
    over old records; above it, this member lacks the old records in between and would serve its
    queues with a hole in the middle (a queue's end found at the hole, and offsets used twice by a
    leader it became). Refused; the old data is never truncated, an operator decides."""

    def __init__(self, got: int, old_end: int):
        if got < old_end:
            why = (f"below the end {old_end} of this member's own old commit log: refused, the old log is never cut "
                   f"(this member's old log holds more than the leader's)")
        else:
            why = (f"above the end {old_end} of this member's own old commit log: refused, this member lacks the "
                   f"leader's old records in [{old_end}, {got}) and would serve its queues with a hole (copy the "
                   f"leader's commitlog to this member, or move this member's out, and start it again)")
        EntryStoreError.__init__(self, f"the leader's entry 0 is at position {got}, {why}")
        self.index = 0
        self.expected = old_end
        self.got = got


class TermRegression(EntryStoreError):
    """An entry whose term is below the last entry's: recovery rejects such a log, so it is never
    written (terms never decrease along a Raft log)."""

    code = ResponseCode.INCONSISTENT_TERM

    def __init__(self, index: int, term: int, end_term: int):
        super().__init__(f"entry {index} of term {term} after an entry of term {end_term}")
        self.index = index
        self.term = term
        self.end_term = end_term


class IndexOutOfRange(EntryStoreError):
    """A read of an index the log does not hold (below its begin or past its end)."""

    def __init__(self, index: int, begin: int, end: int):
        below = 0 <= index < begin
        super().__init__(f"index {index} is {'below the log begin' if below else 'outside the log'} "
                         f"[{begin}, {end}]")
        self.code = ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN if below else ResponseCode.INDEX_OUT_OF_RANGE
        self.index = index
        self.begin = begin
        self.end = end


class TruncateCommitted(EntryStoreError):
    """A truncation that would drop a committed entry: Raft never takes one back."""

    code = ResponseCode.INCONSISTENT_STATE

    def __init__(self, from_index: int, committed: int):
        super().__init__(f"truncating from index {from_index} would drop committed entries "
                         f"(committedIndex {committed})")
        self.from_index = from_index
        self.committed = committed


class EntryTooLarge(EntryStoreError):
    """An entry that cannot fit a data file even alone (it and the 8-byte blank minimum)."""

    code = ResponseCode.UNEXPECTED_ARGUMENT

    def __init__(self, size: int, file_size: int):
        super().__init__(f"an entry of {size} bytes does not fit a {file_size}-byte data file "
                         f"(mappedFileSizeForEntryData) with its 8-byte end-of-file blank")
        self.size = size
        self.file_size = file_size


class StoreClosed(EntryStoreError):
    code = ResponseCode.DISK_ERROR

    def __init__(self, path: str):
        super().__init__(f"the entry store in {path} is closed")
        self.path = path


class DLedgerBusy(StoreError):
    """DLedger mode: maxPendingRequestsNum appends already wait for their quorum, so this one was
    not appended (RocketMQ's OS_PAGECACHE_BUSY: a SYSTEM_ERROR reply, which clients retry)."""

    def __init__(self, why: str):
        super().__init__(f"[PC_SYNCHRONIZED]broker busy, start flow control for a while: {why}")
