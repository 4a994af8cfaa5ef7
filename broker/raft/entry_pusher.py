"""DLedgerEntryPusher: a leader's side of replication, one EntryDispatcher per follower.

Each term this member leads, every follower gets an EntryDispatcher (an asyncio task, cancelled
the moment the member stops leading) that walks DLedger's states:

    COMPARE   from the leader's last entry backwards, ask whether the follower holds the same
              entry (its 48-byte header, byte for byte). A refusal carries the follower's end and
              the term it holds at that index, so the leader skips back to the last of its own
              entries whose term is not above that (a binary search over its index: a follower
              with a long stale tail costs one round trip per term, not per entry; the last
              matching entry is never skipped, since terms never decrease along a log).
    TRUNCATE  the follower holds the leader's entry `index` but more after it: it drops the rest,
              durably, before answering.
    APPEND    the follower's log equals the leader's up to `match` (its water mark in this term):
              stream the entries after it, several pushes in flight, bounded by a window of
              pushes and bytes. Each push is one or several consecutive entries as the leader's
              data files hold them, handed to the transport as views of the maps (no copy on the
              leader), with Raft's prevTerm. Answers arrive in order; each moves the water mark,
              which the QuorumAckChecker turns into the committed index.
    COMMIT    when nothing is in flight: COMMIT_DELAY_MS after the last push if the committed
              index moved past what the follower was told, else once per COMMIT_INTERVAL_MS
              (DLedger: a second), so a follower's committed index follows the leader's without
              waiting for more appends. Not at once: under load the next APPEND, a round trip
              later, carries the committed index anyway; a COMMIT sent the moment an APPEND's
              answer moved it was a push (a wake-up of the follower, a round of Python on both
              sides) for every APPEND: the client's 64 sends in flight travel as one APPEND per
              round, answered, committed, then told in a COMMIT before the next round's sends.

Once this leader's first data files expired (broker.raft.dledger_clean) its log begins above 0:
an empty follower (a new or wiped member) is streamed from that begin, and takes the first entry at
this leader's position; a follower whose log ends below the begin (down longer than the reserved
time, or passed by a forcible clean) cannot be brought up to date: FollowerBehindBegin, logged once
at ERROR naming it and what to do (wipe its dledger-<id> directory), then compared again now and
then, without a traceback loop.

A refusal or a failed push sends the dispatcher back to COMPARE: INCONSISTENT_STATE at once if
the previous pass made progress, anything else (no connection, TERM_NOT_READY, no progress)
after a pause. An answer with a higher term deposes this leader (Raft's rule for every answer;
DLedger leaves it to the heartbeats). Wake-ups, not polling: a dispatcher sleeps on an event set
by a new entry, an answer, a commit, and the COMMIT timer.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from broker.raft.config import DLedgerConfig
from broker.raft.elector import LeaderElector
from broker.raft.entry_store import DLedgerEntryStore
from broker.raft.member_state import MemberState
from broker.raft.protocol import ProtocolError, ResponseCode, Role
from broker.raft.push_protocol import PushEntryRequest, PushEntryResponse, PushType
from broker.raft.quorum import QuorumAckChecker
from broker.raft.rpc import PeerClients
from broker.remoting import codes
from broker.remoting.command import RemotingCommand

log = logging.getLogger("raft")

COMMIT_INTERVAL_MS = 1000     # DLedger's doCommit: a COMMIT push after a second without pushes
COMMIT_DELAY_MS = 10          # a moved committed index is told in a COMMIT after this long without pushes
TIMER_SLACK_S = 0.001         # uvloop rounds a timer's delay to the millisecond
COMPARE_TIMEOUT_MS = 3000     # DLedger waits 3 s for a COMPARE or TRUNCATE answer
RETRY_CAP_MS = 1000
STOP_WAIT_S = 5.0


@dataclass(frozen=True)
class PushWindow:
    """How much one dispatcher sends ahead of the follower's answers. A push holds at most
    `push_bytes` (a single larger entry goes alone; the follower's frame limit is 16 MiB) and
    `push_entries`; at most `pushes` pushes and `window_bytes` bytes are in flight."""
    push_bytes: int = 1 << 20
    push_entries: int = 4096
    pushes: int = 16
    window_bytes: int = 8 << 20


class Rejected(Exception):
    """A push answered with another code than SUCCESS."""

    def __init__(self, kind: PushType, index: int, res: PushEntryResponse):
        super().__init__(f"{kind.value} of index {index} answered {res.response_code.name} "
                         f"(term {res.term}, log [{res.begin_index}, {res.end_index}])")
        self.kind = kind
        self.res = res
        self.code = res.response_code


class FollowerBehindBegin(Exception):
    """The follower's log ends below this leader's begin (its first data files expired while the
    follower was away longer than the reserved time): the entries it needs next are gone here."""

    def __init__(self, peer_id: str, follower_end: int, begin: int):
        super().__init__(f"{peer_id}'s log ends at entry {follower_end}, below this leader's first entry {begin} "
                         f"(the entries between expired here)")
        self.peer_id = peer_id
        self.follower_end = follower_end
        self.begin = begin


class FollowerRegressed(Exception):
    """The follower's log ends below what it had acknowledged: compare again."""

    def __init__(self, peer_id: str, match: int, end: int):
        super().__init__(f"{peer_id}'s log ends at entry {end}, below the {match} it had acknowledged (it restarted "
                         f"without its log's tail)")


class InFlight(NamedTuple):
    kind: PushType
    last: int         # the last entry index the push carries (-1: a COMMIT)
    nbytes: int
    commit: int       # the commit index the push told
    task: asyncio.Task


def _settle(task: asyncio.Task) -> None:
    """Drop a push whose answer is no longer wanted, retrieving a failure so none is reported."""
    if task.done():
        if not task.cancelled():
            task.exception()
    else:
        task.cancel()


class WakeUp:
    """asyncio.Event's set, clear and wait for the one task that waits on it, without the Event's
    running-loop lookup at every wait (a getpid system call in Python 3.11): a dispatcher waits
    once per turn, several turns per push (py-spy: getpid 5 % of a leader's loop under sends)."""

    __slots__ = ("_flag", "_fut")

    def __init__(self):
        self._flag = False
        self._fut: asyncio.Future | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    def clear(self) -> None:
        self._flag = False

    async def wait(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._flag:
            return
        fut = self._fut = loop.create_future()
        try:
            await fut
        finally:
            self._fut = None


class EntryDispatcher:
    def __init__(self, pusher: "DLedgerEntryPusher", peer_id: str, term: int):
        self.pusher = pusher
        self.peer_id = peer_id
        self.term = term
        self.store = pusher.store
        self.self_id = pusher.state.self_id
        self.group = pusher.state.group
        self.type = PushType.COMPARE
        self.match = -1
        self.task: asyncio.Task | None = None
        # Set by halt() besides the task's cancellation, which alone is not enough: a cancellation
        # can be swallowed (Python 3.11's wait_for, in code this calls), and a dispatcher of a past
        # term must never go on pushing.
        self.halted = False
        self._halt = asyncio.Event()
        self._wake = WakeUp()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._progress = False
        self._failing = False
        self._behind_said = False

    def wake(self) -> None:
        self._wake.set()

    def halt(self) -> None:
        self.halted = True
        self._halt.set()
        self._wake.set()
        if self.task is not None:
            self.task.cancel()

    def describe(self) -> dict:
        return {"peer": self.peer_id, "term": self.term, "type": self.type.value, "match": self.match}

    # -- the state machine -----------------------------------------------------------------------
    async def run(self) -> None:
        while not self.halted:
            self._progress = False
            try:
                self.type = PushType.COMPARE
                match = await self._compare()
                await self._append(match)
            except asyncio.CancelledError:
                raise
            except FollowerRegressed as e:
                log.warning("[%s] replication to %s in term %d: %s; comparing again", self.self_id, self.peer_id,
                            self.term, e)
            except FollowerBehindBegin as e:
                # said once (it lasts until an operator acts), then compared again now and then:
                # a member wiped meanwhile comes back empty and is rebuilt from this log's begin
                log.log(logging.DEBUG if self._behind_said else logging.ERROR,
                        "[%s] %s cannot be brought up to date in term %d: %s. Wipe that member's dledger-%s "
                        "directory (stopped) and start it again: it then rebuilds from entry %d", self.self_id,
                        self.peer_id, self.term, e, self.peer_id, e.begin)
                self._behind_said = True
                await self._pause(self.pusher.retry_ms * 4)
            except Rejected as e:
                res = e.res
                if self.halted:
                    return
                if e.code is ResponseCode.EXPIRED_TERM and res.term > self.term:
                    log.info("[%s] %s is in term %d, past this leader's %d: stepping down", self.self_id,
                             self.peer_id, res.term, self.term)
                    self.pusher.elector.change_role_to_candidate(res.term)
                    return
                if e.code is ResponseCode.INCONSISTENT_STATE and self._progress:
                    log.info("[%s] push to %s: %s; comparing again", self.self_id, self.peer_id, e)
                    continue
                self._log_failure(f"{e}")
                await self._pause(self.pusher.retry_ms / 4)
            except (ConnectionError, OSError, asyncio.TimeoutError, ProtocolError) as e:
                self._log_failure(f"{type(e).__name__}: {e}")
                await self._pause(self.pusher.retry_ms)
            except Exception:  # a bug must not end replication to this peer for the whole term
                log.exception("[%s] dispatcher to %s failed in term %d", self.self_id, self.peer_id, self.term)
                await self._pause(self.pusher.retry_ms)

    def _log_failure(self, why: str) -> None:
        level = logging.DEBUG if self._failing else logging.WARNING
        log.log(level, "[%s] replication to %s in term %d (%s, match %d) paused: %s", self.self_id, self.peer_id,
                self.term, self.type.value, self.match, why)
        self._failing = True

    async def _pause(self, ms: float) -> None:
        """Wait before trying again, or until halted."""
        try:
            async with asyncio.timeout(ms / 1000.0):
                await self._halt.wait()
        except TimeoutError:
            pass

    # -- one push --------------------------------------------------------------------------------
    def _request(self, kind: PushType, index: int, **kw) -> PushEntryRequest:
        return PushEntryRequest(group=self.group, leader_id=self.self_id, term=self.term, type=kind,
                                commit_index=self.store.committed_index, index=index, remote_id=self.peer_id, **kw)

    async def _push(self, cmd: RemotingCommand, timeout_ms: float) -> PushEntryResponse:
        reply = await self.pusher.clients.request(self.peer_id, cmd, timeout_ms / 1000.0)
        if reply.code != codes.SUCCESS:
            raise ProtocolError(f"{self.peer_id} answered PUSH with remoting code {reply.code}: {reply.remark}")
        return PushEntryResponse.from_ext(reply.ext)

    async def _call(self, kind: PushType, index: int) -> PushEntryResponse:
        body = self.store.header_view(index) if index >= 0 else b""
        res = await self._push(self._request(kind, index).command(body), COMPARE_TIMEOUT_MS)
        if res.code not in (ResponseCode.SUCCESS, ResponseCode.INCONSISTENT_STATE) or (
                kind is PushType.TRUNCATE and res.code != ResponseCode.SUCCESS):
            raise Rejected(kind, index, res)
        return res

    # -- COMPARE / TRUNCATE ----------------------------------------------------------------------
    async def _compare(self) -> int:
        """The last index at which the follower's log equals this leader's, its tail after it
        truncated: the follower's water mark to append from."""
        store = self.store
        index = store.ledger_end_index
        while not self.halted:
            res = await self._call(PushType.COMPARE, index)
            log.debug("[%s] COMPARE of %d with %s: %s (its log [%d, %d], term %d there)", self.self_id, index,
                      self.peer_id, ResponseCode.of(res.code).name, res.begin_index, res.end_index, res.local_term)
            if res.code == ResponseCode.SUCCESS:
                if res.end_index != index:
                    self.type = PushType.TRUNCATE
                    await self._call(PushType.TRUNCATE, index)
                    log.info("[%s] %s truncated its log after entry %d (it ended at %d)", self.self_id,
                             self.peer_id, index, res.end_index)
                return index
            if res.end_index < index:
                index = res.end_index
            else:
                index = self._last_index_of_term_at_most(index - 1, res.local_term)
            begin = store.ledger_begin_index
            if begin > 0 and index < begin and (index >= 0 or res.end_index >= 0):
                # the entry to compare (or the follower's whole log) lies below this log's begin;
                # only an empty follower (index -1) can take this log from its begin
                raise FollowerBehindBegin(self.peer_id, res.end_index, begin)
        raise asyncio.CancelledError()  # halted mid-compare: this dispatcher's term is over

    def _last_index_of_term_at_most(self, hi: int, term: int) -> int:
        """The last index <= hi whose entry's term is <= term (-1 if none): terms never decrease
        along a log, so a binary search over the index."""
        store = self.store
        lo = store.ledger_begin_index
        if hi < lo or lo < 0 or store.entry_term(lo) > term:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if store.entry_term(mid) <= term:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # -- APPEND / COMMIT -------------------------------------------------------------------------
    async def _append(self, match: int) -> None:
        pusher, store, win = self.pusher, self.store, self.pusher.window
        quorum = pusher.quorum
        self.type = PushType.APPEND
        self.match = match
        quorum.update_water_mark(self.term, self.peer_id, match)
        loop = self._loop = asyncio.get_running_loop()
        # an empty follower (match -1) takes this log from its begin, above 0 once files expired
        next_index = max(match + 1, store.ledger_begin_index)
        told = -1  # the commit index the follower was last told, as far as answers show
        inflight: deque[InFlight] = deque()
        in_bytes = 0
        last_push = loop.time()
        commit_s = pusher.commit_interval_ms / 1000.0
        delay_s = min(COMMIT_DELAY_MS, pusher.commit_interval_ms) / 1000.0
        try:
            while not self.halted:
                self._wake.clear()
                while inflight and inflight[0].task.done():
                    f = inflight.popleft()
                    in_bytes -= f.nbytes
                    res = f.task.result()  # no answer raises
                    if res.code != ResponseCode.SUCCESS:
                        raise Rejected(f.kind, f.last, res)
                    if res.end_index < self.match:
                        # the follower holds less than it acknowledged: it came back without its
                        # log's tail (wiped, a power cut) between two pushes, and a COMMIT it
                        # answered would otherwise keep this dispatcher believing it matched
                        raise FollowerRegressed(self.peer_id, self.match, res.end_index)
                    told = max(told, f.commit)
                    if f.kind is PushType.APPEND:
                        if res.index != f.last:
                            raise ProtocolError(f"{self.peer_id} answered the push up to {f.last} with index "
                                                f"{res.index}")
                        self.match = f.last
                        self._progress = True
                        self._failing = False
                        quorum.update_water_mark(self.term, self.peer_id, f.last)
                end = store.ledger_end_index
                if next_index < store.ledger_begin_index:  # a forcible clean went past this follower
                    raise FollowerBehindBegin(self.peer_id, next_index - 1, store.ledger_begin_index)
                while next_index <= end and len(inflight) < win.pushes and in_bytes < win.window_bytes:
                    span = store.entry_span(next_index, win.push_entries, win.push_bytes)
                    prev = next_index - 1
                    prev_term = store.entry_term(prev) if prev >= max(store.ledger_begin_index, 0) else -1
                    req = self._request(PushType.APPEND, span.first, pos=span.pos, count=span.count,
                                        prev_term=prev_term)
                    task = self._send(req.command(span.views, span.nbytes), pusher.push_timeout_ms)
                    inflight.append(InFlight(PushType.APPEND, span.last, span.nbytes, req.commit_index, task))
                    in_bytes += span.nbytes
                    next_index = span.last + 1
                    last_push = loop.time()
                if not inflight:
                    quiet = loop.time() - last_push + TIMER_SLACK_S  # a timer may fire a little early
                    if quiet >= commit_s or (store.committed_index > told and quiet >= delay_s):
                        req = self._request(PushType.COMMIT, -1)
                        task = self._send(req.command(), pusher.push_timeout_ms)
                        inflight.append(InFlight(PushType.COMMIT, -1, 0, req.commit_index, task))
                        last_push = loop.time()
                timer = None if inflight else loop.call_at(
                    last_push + (delay_s if store.committed_index > told else commit_s), self._wake.set)
                try:
                    await self._wake.wait(loop)
                finally:
                    if timer is not None:
                        timer.cancel()
        finally:
            for f in inflight:
                _settle(f.task)

    def _send(self, cmd: RemotingCommand, timeout_ms: float) -> asyncio.Task:
        task = self._loop.create_task(self._push(cmd, timeout_ms))
        task.add_done_callback(self._answered)
        return task

    def _answered(self, _task: asyncio.Task) -> None:
        self._wake.set()


class DLedgerEntryPusher:
    def __init__(self, config: DLedgerConfig, state: MemberState, store: DLedgerEntryStore,
                 quorum: QuorumAckChecker, elector: LeaderElector, clients: PeerClients,
                 window: PushWindow | None = None, commit_interval_ms: int = COMMIT_INTERVAL_MS):
        self.config = config
        self.state = state
        self.store = store
        self.quorum = quorum
        self.elector = elector
        self.clients = clients
        self.window = window or PushWindow()
        self.commit_interval_ms = commit_interval_ms
        self.push_timeout_ms = config.maxPushTimeOutMs
        self.retry_ms = min(config.heartBeatTimeIntervalMs, RETRY_CAP_MS)
        self.dispatchers: dict[str, EntryDispatcher] = {}
        self._ending: set[asyncio.Task] = set()

    def on_role_change(self, term: int, role: Role) -> None:
        """Dispatchers for every follower when this member leads `term`; none otherwise."""
        self.halt()
        if role is not Role.LEADER:
            return
        loop = asyncio.get_running_loop()
        for peer_id in self.state.peers:
            if peer_id == self.state.self_id:
                continue
            d = self.dispatchers[peer_id] = EntryDispatcher(self, peer_id, term)
            d.task = loop.create_task(d.run(), name=f"dispatcher-{self.state.self_id}-{peer_id}-{term}")

    def halt(self) -> None:
        """Stop every dispatcher now. Their connections are aborted, not closed: what is still
        unsent is views of this log, which a member that no longer leads may be told to truncate."""
        if not self.dispatchers:
            return
        for d in self.dispatchers.values():
            d.halt()
            self._ending.add(d.task)
            d.task.add_done_callback(self._ending.discard)
        self.dispatchers = {}
        self.clients.close(abort=True)

    def wake(self, *_args) -> None:
        """A new entry, or a new committed index: every dispatcher looks at what it can send."""
        for d in self.dispatchers.values():
            d.wake()

    async def stop(self) -> None:
        self.halt()
        ending = list(self._ending)
        if ending:
            _, late = await asyncio.wait(ending, timeout=STOP_WAIT_S)
            if late:  # a bug: said, and not waited for forever
                log.error("[%s] %d dispatchers still running %g s after they were halted: %s", self.state.self_id,
                          len(late), STOP_WAIT_S, ", ".join(t.get_name() for t in late))
            for t in ending:
                if t.done() and not t.cancelled():
                    t.exception()
        self.clients.close(abort=True)

    def describe(self) -> list[dict]:
        return [d.describe() for d in self.dispatchers.values()]
