"""EntryHandler: a follower's side of replication (DLedger's EntryHandler), one PUSH at a time.

DLedger queues pushes and applies them in index order in a thread. Here each push is applied
synchronously in the remoting handler, on the loop that owns the store: frames of one connection
are handled in the order they arrived, so a leader's pipelined pushes are applied in its order
with no queue, and the entry bodies are appended straight from the read buffer (valid only during
the call: nothing here awaits).

Order of the checks, so that a bad push changes nothing:
1. The push itself (extFields, every entry header, body CRCs): malformed -> UNEXPECTED_ARGUMENT,
   with a log line naming the peer. Nothing has been looked at in the member's state yet.
2. Group and addressee (UNKNOWN_GROUP, UNKNOWN_MEMBER), as ElectionServer checks them.
3. The leader and its term, by the heartbeat rule (LeaderElector.handle_heartbeat: a push is a
   heartbeat, as Raft's AppendEntries is): an unknown leader -> UNKNOWN_MEMBER; a lower term ->
   EXPIRED_TERM; another leader in this term -> INCONSISTENT_LEADER; a higher term -> the member
   takes it at its next turn (TERM_NOT_READY, the leader retries); the same term with no leader
   known -> the member follows the sender.
4. The push, against the log:
   COMPARE  SUCCESS if this log holds the leader's header at `index` byte for byte (index -1:
            always), else INCONSISTENT_STATE with localTerm, the term held there (leader skips back)
   TRUNCATE the log must hold the leader's entry `index`; everything after it is dropped, durably
            (DLedgerEntryStore.truncate syncs before it returns), and only then answered SUCCESS
   APPEND   entries must continue this log: the entry before the first has the leader's prevTerm
            (Raft's consistency check), an entry already held must be identical, the others are
            appended in bulk at the leader's positions with its CRCs (append_pushed: the kernel
            copies them, no Python object per entry); else INCONSISTENT_STATE, and the
            leader compares again. APPEND never truncates: only TRUNCATE does. An empty log takes
            the leader's position for entry 0 (its data files start at the leader's divided
            offset), unless this member has an old commit log ending elsewhere: refused then,
            logged once per leader and term naming both offsets (the old log is never cut).
   COMMIT   the commit index, and nothing else.

A member whose write-back failed (DLedgerEntryStore.disk_failed) refuses every push with
DISK_ERROR once the push passed as a heartbeat (so it goes on following its leader rather than
calling an election), and the SUCCESS answers waiting for that write-back (durable mode) are
answered DISK_ERROR instead: the leader never counts this member for entries the failed sync
covered, nor for any later one, until the member is restarted.

An APPEND from the leader this member already follows in this term (a push before it passed every
check above with that leader and term) takes a shorter path (`_fast_append`): the same checks in
the same order, read straight from the extFields with no request object, and the answer's fields
written as the strings the wire carries. Anything it does not take as it expects (another type, a
value it cannot read, a malformed body, another leader or term, a failed disk) goes down the full
path above, which decides and says why: the fast path changes nothing before it is sure.

The commit index the leader sends is applied only up to `matched`: the last index this log is
known, in this term and from this leader, to hold exactly as the leader does (set by COMPARE,
TRUNCATE and APPEND). A follower with a stale uncommitted tail never marks that tail committed,
so it can always be truncated.
"""
from __future__ import annotations

import asyncio
import errno
import logging
from typing import Callable

from broker.raft.committed import CommittedIndex
from broker.raft.elector import LeaderElector
from broker.raft.entry_store import DLedgerEntryStore
from broker.raft.errors import EntryStoreDiskFailed, EntryStoreError, OldCommitLogMismatch
from broker.raft.member_state import MemberState
from broker.raft.protocol import HeartBeatRequest, ProtocolError, ResponseCode
from broker.raft.entry_format import HEADER, Header
from broker.kernels.entry_push import PushBodyError, check_entries
from broker.raft.entry_format import byte_view
from broker.raft.push_protocol import PushEntryRequest, PushEntryResponse, PushType, check_append, parse_header
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import RemotingConnection

log = logging.getLogger("raft")
_INT64 = 1 << 63
_SUCCESS = str(int(ResponseCode.SUCCESS))


def _fast_int(v) -> int:
    """An extFields number as push_protocol._int reads it, for the values it reads the same way
    (a str or an int, not a bool); anything else raises TypeError (the full path then decides)."""
    t = type(v)
    if t is str or t is int:
        return int(v)
    raise TypeError(v)


class Refused(Exception):
    """A push this log cannot take; answered with `code` and logged at `level`."""

    def __init__(self, code: ResponseCode, why: str, local_term: int = -1, level: int = logging.INFO):
        super().__init__(why)
        self.code = code
        self.local_term = local_term
        self.level = level


class EntryHandler:
    def __init__(self, state: MemberState, store: DLedgerEntryStore, elector: LeaderElector,
                 committed: CommittedIndex, on_ledger_change: Callable[[], None], durable: bool = False):
        self.state = state
        self.store = store
        self.elector = elector
        self.committed = committed
        self.on_ledger_change = on_ledger_change
        self.leader: tuple[int, str] | None = None  # (term, leader id) `matched` is about
        self.matched = -1
        self._below_said: tuple[int, str] | None = None  # the leader last refused for OldCommitLogMismatch
        # durable (flushDiskType=SYNC_FLUSH): a SUCCESS naming entries not yet written back waits
        # for the flusher (`flushed`), so the leader counts this member only for what its disk holds
        self.durable = durable
        self._unflushed: list[tuple[int, RemotingCommand, asyncio.Future]] = []

    def flushed(self, index: int) -> None:
        """The flusher wrote back every entry up to `index`: the answers waiting for it leave."""
        if not self._unflushed:
            return
        keep = []
        for waiting in self._unflushed:
            if waiting[0] <= index:
                if not waiting[2].done():
                    waiting[2].set_result(waiting[1])
            else:
                keep.append(waiting)
        self._unflushed = keep

    def disk_failed(self) -> None:
        """The store's write-back failed: the answers waiting for it say DISK_ERROR, not SUCCESS."""
        waiting, self._unflushed = self._unflushed, []
        for _, answer, fut in waiting:
            if not fut.done():
                fut.set_result(self._refuse_answer(answer))

    @staticmethod
    def _refuse_answer(answer: RemotingCommand) -> RemotingCommand:
        """A SUCCESS answer made DISK_ERROR, its other fields (term, index, ends) kept."""
        answer.ext["code"] = int(ResponseCode.DISK_ERROR)
        return answer

    def _after_flush(self, answer: RemotingCommand, index: int) -> RemotingCommand | asyncio.Future:
        if not self.durable or index <= self.store.flushed_index:
            return answer
        fut = asyncio.get_running_loop().create_future()
        self._unflushed.append((index, answer, fut))
        return fut

    def _truncated(self, end: int) -> None:
        """Answers waiting for entries a truncation dropped are not sent (their pushes were of an
        earlier term, or the leader compares again): the connection's later answers go on."""
        gone = [w for w in self._unflushed if w[0] > end]
        if gone:
            self._unflushed = [w for w in self._unflushed if w[0] <= end]
            for _, _, fut in gone:
                fut.cancel()

    def handle(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand | asyncio.Future:
        if self.leader is not None:
            res = self._fast_append(cmd)
            if res is not None:
                return res
        st = self.state
        me = st.self_id
        req = None
        try:
            req = PushEntryRequest.from_ext(cmd.ext)
            if req.type is PushType.APPEND:
                entries = check_append(req, cmd.body)
                header = None
            else:
                entries = None
                header = parse_header(cmd.body) if req.type in (PushType.COMPARE, PushType.TRUNCATE) else None
                if len(cmd.body) and req.type is PushType.COMMIT:
                    raise ProtocolError(f"a COMMIT with a {len(cmd.body)}-byte body")
                if (header is None) != (req.index == -1) or (header is not None and header.index != req.index):
                    raise ProtocolError(f"{req.type.value} of index {req.index} carrying the header of entry "
                                        f"{None if header is None else header.index}")
        except ProtocolError as e:
            log.warning("[%s] malformed PUSH from %s refused: %s", me, conn.peer, e)
            return self._answer(cmd, req, ResponseCode.UNEXPECTED_ARGUMENT)
        if req.group != st.group:
            log.warning("[%s] PUSH for group %r from %s refused: this member is in %r", me, req.group, conn.peer,
                        st.group)
            return self._answer(cmd, req, ResponseCode.UNKNOWN_GROUP)
        if req.remote_id is not None and req.remote_id != me:
            log.warning("[%s] PUSH addressed to %r from %s refused", me, req.remote_id, conn.peer)
            return self._answer(cmd, req, ResponseCode.UNKNOWN_MEMBER)
        if not st.is_peer(req.leader_id) or req.leader_id == me:
            log.warning("[%s] PUSH from %s naming %r as leader refused: %s", me, conn.peer, req.leader_id,
                        "this member's own id" if req.leader_id == me else "not a peer of this member")
            return self._answer(cmd, req, ResponseCode.UNEXPECTED_MEMBER if req.leader_id == me
                                else ResponseCode.UNKNOWN_MEMBER)
        beat = self.elector.handle_heartbeat(HeartBeatRequest(group=req.group, leaderId=req.leader_id, term=req.term))
        if beat.code != ResponseCode.SUCCESS:
            log.info("[%s] %s of term %d from %s (%s) refused: %s in term %d", me, req.type.value, req.term,
                     req.leader_id, conn.peer, ResponseCode.of(beat.code).name, st.term)
            return self._answer(cmd, req, ResponseCode.of(beat.code))
        if self.leader != (req.term, req.leader_id):
            self.leader = (req.term, req.leader_id)
            self.matched = -1
        if self.store.disk_failed:
            log.debug("[%s] %s of index %d from %s refused: %s", me, req.type.value, req.index, req.leader_id,
                      self.store.disk_failed)  # said once, as an error, by the store
            return self._answer(cmd, req, ResponseCode.DISK_ERROR)
        try:
            if req.type is PushType.APPEND:
                index = self._append(req, entries)
            elif req.type is PushType.COMPARE:
                index = self._compare(req, header)
            elif req.type is PushType.TRUNCATE:
                index = self._truncate(req, header)
            else:
                index = req.index
        except Refused as e:
            log.log(e.level, "[%s] %s of index %d from %s in term %d refused (%s): %s", me, req.type.value,
                    req.index, req.leader_id, req.term, e.code.name, e)
            return self._answer(cmd, req, e.code, local_term=e.local_term)
        commit = min(req.commit_index, self.matched)
        if commit > self.store.committed_index:
            self.committed.advance(self.store.update_committed_index(commit))
        return self._after_flush(self._answer(cmd, req, ResponseCode.SUCCESS, index=index), index)

    def _fast_append(self, cmd: RemotingCommand) -> RemotingCommand | asyncio.Future | None:
        """handle() for an APPEND from the leader this member follows in the term it was last
        matched in (self.leader): what the full path would answer, or None to leave the push to
        it. Every check of the full path holds here, in its order: the extFields (read without a
        PushEntryRequest), the body (check_entries), the group and addressee, the heartbeat rule
        (same term, the leader this member follows: SUCCESS, the heartbeat time noted), the disk,
        the log (_append_run). Nothing changes before the push is known to be one the full path
        would take as a heartbeat: a refusal by the log is answered here as there."""
        ext = cmd.ext
        if ext.get("type") != "APPEND":
            return None
        st = self.state
        term_leader = self.leader
        leader = ext.get("leaderId")
        if leader != term_leader[1] or leader != st.leader_id or leader == st.self_id:
            return None
        try:
            term = _fast_int(ext["term"])
            index = _fast_int(ext["index"])
            pos = _fast_int(ext["pos"])
            count = _fast_int(ext["count"])
            v = ext.get("prevTerm")
            prev_term = -1 if v is None else _fast_int(v)
            v = ext.get("commitIndex")
            commit_index = -1 if v is None else _fast_int(v)
        except (KeyError, TypeError, ValueError):
            return None
        if (term != term_leader[0] or term != st.term or not 0 < count < _INT64 or not 0 <= index < _INT64
                or not 0 <= pos < _INT64 or not -1 <= commit_index < _INT64 or not -1 <= prev_term < _INT64):
            return None
        group = ext.get("group")
        remote = ext.get("remoteId")
        if type(group) is not str or group != st.group or (remote is not None and remote != st.self_id):
            return None
        if self.store.disk_failed:
            return None
        view = byte_view(cmd.body)
        try:
            check_entries(view, index, pos, count, term)
        except PushBodyError:
            return None
        elector = self.elector
        elector.last_leader_hb = elector.now_ms()  # the heartbeat rule's SUCCESS
        try:
            last = self._append_run(index, prev_term, count, view)
        except Refused as e:
            log.log(e.level, "[%s] APPEND of index %d from %s in term %d refused (%s): %s", st.self_id, index,
                    leader, term, e.code.name, e)
            return self._reply(cmd, int(e.code), index, e.local_term)
        commit = min(commit_index, self.matched)
        if commit > self.store.committed_index:
            self.committed.advance(self.store.update_committed_index(commit))
        return self._after_flush(self._reply(cmd, _SUCCESS, last), last)

    # -- the log ---------------------------------------------------------------------------------
    def _holds(self, index: int, header) -> tuple[bool, int]:
        """(whether this log holds `header` at `index`, the term it holds there or -1)."""
        store = self.store
        if index < 0:
            return True, -1
        if index > store.ledger_end_index or index < store.ledger_begin_index:
            return False, -1
        local = store.entry_header(index)
        return local == header, local.term

    def _compare(self, req: PushEntryRequest, header) -> int:
        same, local_term = self._holds(req.index, header)
        if not same:
            raise Refused(ResponseCode.INCONSISTENT_STATE, f"this log ends at {self.store.ledger_end_index}"
                          + (f" and holds entry {req.index} of term {local_term}" if local_term >= 0 else ""),
                          local_term)
        self.matched = req.index
        return req.index

    def _truncate(self, req: PushEntryRequest, header) -> int:
        store = self.store
        same, local_term = self._holds(req.index, header)
        if not same:
            raise Refused(ResponseCode.INCONSISTENT_STATE, f"entry {req.index} is not the leader's here "
                          f"(term {local_term}, log end {store.ledger_end_index}): nothing truncated",
                          local_term, logging.WARNING)
        if req.index < store.ledger_end_index:
            dropped = (req.index + 1, store.ledger_end_index)
            try:
                store.truncate(req.index + 1)
            except EntryStoreDiskFailed as e:  # its write-back failed: the flusher stops the member
                raise Refused(ResponseCode.DISK_ERROR, str(e), level=logging.ERROR) from None
            except EntryStoreError as e:  # below the committed index: never in a correct group
                raise Refused(ResponseCode.INCONSISTENT_STATE, str(e), level=logging.ERROR) from None
            finally:
                self.on_ledger_change()
                self._truncated(store.ledger_end_index)
            # committed entries are never truncated (the store refuses): these were acknowledged to
            # nobody, and an operator reading a deposed leader's log learns how many writes it lost
            log.warning("[%s] truncated %d uncommitted entries from index %d (log end was %d): the leader %s of "
                        "term %d does not hold them", self.state.self_id, dropped[1] - dropped[0] + 1, dropped[0],
                        dropped[1], req.leader_id, req.term)
        self.matched = req.index
        return req.index

    def _append(self, req: PushEntryRequest, entries) -> int:
        return self._append_run(req.index, req.prev_term, req.count, entries)

    def _append_run(self, first: int, prev_term: int, count: int, entries) -> int:
        """The APPEND of `count` checked entries from index `first`, the leader's term of entry
        first - 1 being `prev_term`: the index of the last one, or Refused."""
        store = self.store
        end = store.ledger_end_index
        # An empty log takes the leader's first entry where the leader's log begins (above 0 once
        # its first data files expired: append_at places it at the leader's position). Only that
        # entry: the leader sends prevTerm -1 for it alone (nothing before it in its log); a push
        # continuing from an entry the leader believes held here (prevTerm >= 0) finding this log
        # empty means this member lost its log (wiped, or a power cut), and taking it would leave
        # a hole before it.
        if first > end + 1 and (end >= 0 or prev_term != -1):
            raise Refused(ResponseCode.INCONSISTENT_STATE, f"the push starts at {first}, this log ends at {end}")
        prev = first - 1
        if end >= 0 and prev >= store.ledger_begin_index and prev >= 0:
            held_term = store.entry_term(prev)
            if held_term != prev_term:
                raise Refused(ResponseCode.INCONSISTENT_STATE, f"entry {prev} is of term {held_term} here, of term "
                              f"{prev_term} on the leader", held_term)
        try:
            # entries this log already holds (a push sent again after a COMPARE) must be the
            # leader's; the others are appended in bulk (DLedgerEntryStore.append_pushed)
            at = 0
            index = first
            while index <= store.ledger_end_index and at < len(entries):
                h = Header._make(HEADER.unpack_from(entries, at))
                if store.entry_header(index) != h:
                    raise Refused(ResponseCode.INCONSISTENT_STATE, f"entry {index} differs from the leader's "
                                  f"(the leader must compare and truncate)", store.entry_term(index))
                at += h.size
                index += 1
            if at < len(entries):
                store.append_pushed(entries[at:])
        except OldCommitLogMismatch as e:
            # the leader retries every few tens of ms: said loudly once per leader and term
            loud = self._below_said != self.leader
            self._below_said = self.leader
            raise Refused(ResponseCode.INCONSISTENT_STATE, f"{type(e).__name__}: {e}",
                          level=logging.ERROR if loud else logging.DEBUG) from None
        except EntryStoreError as e:
            raise Refused(ResponseCode.INCONSISTENT_STATE, f"{type(e).__name__}: {e}", level=logging.WARNING) from None
        except OSError as e:  # a data or index file that could not be made (a full disk)
            raise Refused(ResponseCode.DISK_FULL if e.errno == errno.ENOSPC else ResponseCode.DISK_ERROR,
                          f"the entry could not be written: {e}", level=logging.ERROR) from None
        finally:
            if store.ledger_end_index != end:  # some appended, maybe not all
                self.on_ledger_change()
        last = first + count - 1
        self.matched = last
        return last

    # -- answers ---------------------------------------------------------------------------------
    def _reply(self, cmd: RemotingCommand, code, index: int, local_term: int = -1) -> RemotingCommand:
        """_answer's response, its extFields written as the strings the wire carries (what
        RemotingCommand.header_bytes would make of PushEntryResponse.ext())."""
        st, store = self.state, self.store
        ext = {"code": str(code), "term": str(st.term), "index": str(index),
               "beginIndex": str(store.ledger_begin_index), "endIndex": str(store.ledger_end_index),
               "localTerm": str(local_term)}
        if st.leader_id is not None:
            ext["leaderId"] = st.leader_id
        ext["group"] = st.group
        return cmd.response(codes.SUCCESS, ext=ext)

    def _answer(self, cmd: RemotingCommand, req: PushEntryRequest | None, code: ResponseCode, index: int | None = None,
                local_term: int = -1) -> RemotingCommand:
        st, store = self.state, self.store
        if index is None:
            index = req.index if req is not None else -1
        res = PushEntryResponse(code=int(code), term=st.term, index=index, begin_index=store.ledger_begin_index,
                                end_index=store.ledger_end_index, local_term=local_term, leader_id=st.leader_id,
                                group=st.group)
        return cmd.response(codes.SUCCESS, ext=res.ext())
