"""QuorumAckChecker: the leader's water marks and its appends waiting for a majority.

As DLedger's QuorumAckChecker: in each term the leader keeps every member's water mark (itself
included: its ledger end), the highest index that member is known to hold exactly as the leader
does. Sorted descending, element [n / 2] is the index a majority holds (the quorum index).

The commit rule is Raft's, not DLedger 0.3.1.2's: DLedger commits the quorum index whatever the
term of its entry; Raft (§5.4.2) commits it only when that entry is of the leader's current term,
so an entry of an earlier term is committed only by the commit of a later entry of this term.
Otherwise an entry a majority holds could still be replaced by another leader (Raft's figure 8),
after its append was acknowledged. The committed index never goes backwards (the store refuses).

Each append waits on a future, completed with (index, pos) when the committed index reaches its
entry. The waits are a FIFO in index order, and so in deadline order: one timer, set for the oldest
wait's deadline, fails the waits older than maxWaitAckTimeMs with WAIT_QUORUM_ACK_TIMEOUT (the
entry stays in the log: it may still be committed). A new term, or a leader that stops leading,
fails every wait at once (TERM_CHANGED / NOT_LEADER): a deposed leader never acknowledges a write
it can no longer commit.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Callable, NamedTuple

from broker.raft.append_errors import AppendError, LeaderPendingFull, TermChanged, WaitQuorumAckTimeout
from broker.raft.committed import CommittedIndex
from broker.raft.config import DLedgerConfig
from broker.raft.entry_store import DLedgerEntryStore

log = logging.getLogger("raft")


class PendingAppend(NamedTuple):
    index: int
    pos: int
    deadline: float  # loop time
    future: asyncio.Future


class QuorumAckChecker:
    def __init__(self, config: DLedgerConfig, store: DLedgerEntryStore, committed: CommittedIndex,
                 on_commit: Callable[[int], None] | None = None):
        self.self_id = config.dLegerSelfId
        self.peers = list(config.peers)
        self.store = store
        self.committed = committed
        self.on_commit = on_commit
        self.wait_ms = config.maxWaitAckTimeMs
        self.max_pending = config.maxPendingRequestsNum
        # durable (flushDiskType=SYNC_FLUSH): every mark, the leader's own included, is of
        # entries written back to disk, so a majority's power cut loses nothing acknowledged
        self.durable = False
        self.term = -1  # the term this member leads in; -1: it does not lead
        self.water_marks: dict[str, int] = {}
        self.pending: deque[PendingAppend] = deque()
        self._timer: asyncio.TimerHandle | None = None

    # -- terms -----------------------------------------------------------------------------------
    def begin_term(self, term: int) -> None:
        """This member leads `term`: fresh water marks (its own is its ledger end; the followers'
        are unknown until each dispatcher has compared logs in this term)."""
        self.end_term(lambda i: TermChanged(f"term {term} began before entry {i} was committed", i))
        self.term = term
        self.water_marks = {p: -1 for p in self.peers}
        self.water_marks[self.self_id] = self.store.flushed_index if self.durable else self.store.ledger_end_index

    def end_term(self, error: Callable[[int], AppendError]) -> None:
        """This member no longer leads: every wait fails at once, with `error(index)`."""
        self.term = -1
        pending, self.pending = self.pending, deque()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if pending:
            log.info("[%s] %d appends waiting for their quorum failed: %s", self.self_id, len(pending),
                     error(pending[0].index))
        for p in pending:
            if not p.future.done():
                p.future.set_exception(error(p.index))

    # -- appends ---------------------------------------------------------------------------------
    def check_room(self) -> None:
        """LEADER_PENDING_FULL before an entry is appended, not after."""
        if len(self.pending) >= self.max_pending:
            raise LeaderPendingFull(f"{len(self.pending)} appends already wait for their quorum "
                                    f"(maxPendingRequestsNum {self.max_pending})")

    def wait_ack(self, index: int, pos: int) -> asyncio.Future:
        """A future for the entry the leader just appended at `index`: (index, pos) once committed."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        deadline = loop.time() + self.wait_ms / 1000.0
        self.pending.append(PendingAppend(index, pos, deadline, fut))
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire)
        if not self.durable:  # else the flusher moves the leader's own mark (server._flushed)
            self.update_water_mark(self.term, self.self_id, index)
        return fut

    def _expire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        pending = self.pending
        while pending and pending[0].deadline <= now:
            p = pending.popleft()
            if not p.future.done():
                p.future.set_exception(WaitQuorumAckTimeout(
                    f"entry {p.index} was not held by a majority within {self.wait_ms} ms "
                    f"(maxWaitAckTimeMs); committed index {self.store.committed_index}", p.index))
        if pending:
            self._timer = loop.call_at(pending[0].deadline, self._expire)

    # -- acknowledgements ------------------------------------------------------------------------
    def update_water_mark(self, term: int, peer_id: str, index: int) -> None:
        """`peer_id` holds the leader's log up to `index`, as learnt in `term` (an answer from an
        earlier term says nothing about this one's log and is ignored)."""
        if term != self.term or index <= self.water_marks.get(peer_id, index):
            return
        self.water_marks[peer_id] = index
        self._check()

    def quorum_index(self) -> int:
        marks = sorted(self.water_marks.values(), reverse=True)
        return marks[len(marks) // 2]

    def _check(self) -> None:
        store = self.store
        q = self.quorum_index()
        if q <= store.committed_index:
            return
        if store.entry_term(q) != self.term:
            return  # Raft: an earlier term's entry is committed by a later entry of this term only
        committed = store.update_committed_index(q)
        self.committed.advance(committed)
        pending = self.pending
        while pending and pending[0].index <= committed:
            p = pending.popleft()
            if not p.future.done():
                p.future.set_result((p.index, p.pos))
        if self.on_commit is not None:
            self.on_commit(committed)

    def describe(self) -> dict:
        return {"term": self.term, "waterMarks": dict(self.water_marks), "pending": len(self.pending),
                "committedIndex": self.store.committed_index}
