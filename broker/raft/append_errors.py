"""Why an append through DLedgerServer did not succeed, each with the DLedgerResponseCode DLedger
answers an AppendEntryRequest with in the same case (`code`), so that the broker maps it once
(DLedgerCommitLog: NOT_LEADER -> SERVICE_NOT_AVAILABLE, WAIT_QUORUM_ACK_TIMEOUT and
LEADER_PENDING_FULL -> OS_PAGECACHE_BUSY, ...).

An append that fails with TermChanged or WaitQuorumAckTimeout has an unknown outcome: the entry is
in this member's log and a later leader may still commit it (Raft never promises the opposite). A
caller that retries may then find it twice; it is never told "stored" for an entry a majority does
not hold.
"""
from __future__ import annotations

from broker.raft.protocol import ResponseCode


class AppendError(Exception):
    code = ResponseCode.UNKNOWN

    def __init__(self, message: str, index: int = -1):
        super().__init__(f"{self.code.name} ({int(self.code)}): {message}")
        self.index = index


class NotLeader(AppendError):
    """This member does not lead its group (or stopped): append on `leader_id`, if known."""

    code = ResponseCode.NOT_LEADER

    def __init__(self, message: str, leader_id: str | None = None, index: int = -1):
        super().__init__(message, index)
        self.leader_id = leader_id


class TermChanged(AppendError):
    """The leader was deposed while the entry waited for its quorum."""

    code = ResponseCode.TERM_CHANGED


class WaitQuorumAckTimeout(AppendError):
    """No majority held the entry within maxWaitAckTimeMs."""

    code = ResponseCode.WAIT_QUORUM_ACK_TIMEOUT


class DiskError(AppendError):
    """A write-back of this member's log failed (DLedgerEntryStore.disk_failed): it appends
    nothing more until it is restarted."""

    code = ResponseCode.DISK_ERROR


class LeaderPendingFull(AppendError):
    """maxPendingRequestsNum appends already wait for their quorum: the entry was not appended."""

    code = ResponseCode.LEADER_PENDING_FULL
