"""LeaderElector: DLedger's election state machine (DLedgerLeaderElector), on an asyncio loop.

The three roles, as the DLedger article (shared seeds) walks through them:
- LEADER sends a heartbeat to every peer each `heartBeatTimeIntervalMs`. A round with a quorum of
  SUCCESS (itself counted) keeps it leader; a quorum only with TERM_NOT_READY answers counted
  sends the next round at once; a higher term in an EXPIRED_TERM answer, or an
  INCONSISTENT_LEADER, makes it a candidate; so does `maxHeartBeatLeak` intervals without a
  quorum round: a leader cut off from the majority steps down.
- FOLLOWER becomes a candidate after `maxHeartBeatLeak` intervals without its leader's heartbeat.
- CANDIDATE asks every member (itself included) for its vote at `nextTimeToRequestVote`, waits
  for a quorum or every answer (at most 2 s + a random part of `maxVoteIntervalMs`), and parses
  the round (`tally`): PASSED makes it leader; REVOTE_IMMEDIATELY asks again at once;
  WAIT_TO_REVOTE waits a random 300..1000 ms in the same term; WAIT_TO_VOTE_NEXT does and then
  moves to the next term. The random waits keep two candidates from splitting every round.

Votes are granted only to a candidate whose ledger end (term, then index) is at least the voter's,
once per term; the vote is durable before the ACCEPT leaves (MemberState). A request from an
unknown member, from a peer using this member's own id, or for a stale term never changes the
term; a higher term makes this member a candidate that takes the term at its next turn
(DLedger's needIncreaseTermImmediately), not at once.

Departures from DLedger, each for a reason:
- No 10 ms polling loop (StateMaintainer): the elector sleeps until its role's next deadline or a
  wake-up from a handler that changed its role.
- A round's PASSED is applied only if this member is still a candidate in that term: a heartbeat
  of a new leader handled while the votes were outstanding wins.
- A follower whose leader's process is gone (the leader's heartbeat link closed and its peer port
  refuses connections) stands at once instead of after `maxHeartBeatLeak` intervals
  (`leader_gone`): with DLedger's defaults a kill -9 otherwise costs over 6 s of writes.
- Leadership transfer and preferred leaders (TakeLeadershipTask) are not implemented:
  `preferredLeaderId` is validated and otherwise ignored.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from broker.raft.member_state import MemberState
from broker.raft.protocol import (HeartBeatRequest, HeartBeatResponse, ParseResult, ResponseCode, Role,
                                  VoteRequest, VoteResponse, VoteResult)

log = logging.getLogger("raft")

VOTE_WAIT_BASE_MS = 2000  # DLedger: voteLatch.await(2000 + random.nextInt(maxVoteIntervalMs))
RESULT_WAIT_MS = 10  # DLedger: the heartbeat round's latch waits the interval less this


class ElectionRpc(Protocol):
    """How the elector reaches its peers; a failure raises (OSError, asyncio.TimeoutError, ...)."""

    async def vote(self, peer_id: str, request: VoteRequest, timeout: float) -> VoteResponse: ...

    async def heartbeat(self, peer_id: str, request: HeartBeatRequest, timeout: float) -> HeartBeatResponse: ...


@dataclass
class Tally:
    """One vote round's answers, counted as DLedger's maintainAsCandidate counts them."""
    all: int = 0
    valid: int = 0
    accepted: int = 0
    not_ready: int = 0
    bigger_ledger: int = 0
    already_has_leader: bool = False
    known_max_term: int = -1

    def add(self, response: VoteResponse | None) -> None:
        """A member's answer (None: no answer, an RPC failure)."""
        self.all += 1
        if response is None:
            return
        r = response.voteResult
        if r is not VoteResult.UNKNOWN:
            self.valid += 1
        if r is VoteResult.ACCEPT:
            self.accepted += 1
        elif r is VoteResult.REJECT_ALREADY_HAS_LEADER:
            self.already_has_leader = True
        elif r in (VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, VoteResult.REJECT_EXPIRED_VOTE_TERM):
            self.known_max_term = max(self.known_max_term, response.term)
        elif r in (VoteResult.REJECT_EXPIRED_LEDGER_TERM, VoteResult.REJECT_SMALL_LEDGER_END_INDEX):
            self.bigger_ledger += 1
        elif r is VoteResult.REJECT_TERM_NOT_READY:
            self.not_ready += 1

    def decided(self, is_quorum: Callable[[int], bool]) -> bool:
        """Whether waiting for the remaining answers could no longer change the outcome's kind."""
        return self.already_has_leader or is_quorum(self.accepted) or is_quorum(self.accepted + self.not_ready)

    def parse(self, term: int, is_quorum: Callable[[int], bool]) -> ParseResult:
        if self.known_max_term > term:
            return ParseResult.WAIT_TO_VOTE_NEXT
        if self.already_has_leader:
            return ParseResult.WAIT_TO_REVOTE
        if not is_quorum(self.valid):
            return ParseResult.WAIT_TO_REVOTE
        if not is_quorum(self.valid - self.bigger_ledger):
            return ParseResult.WAIT_TO_REVOTE
        if is_quorum(self.accepted):
            return ParseResult.PASSED
        if is_quorum(self.accepted + self.not_ready):
            return ParseResult.REVOTE_IMMEDIATELY
        return ParseResult.WAIT_TO_VOTE_NEXT


RoleChangeHandler = Callable[[int, Role], None]


class LeaderElector:
    def __init__(self, state: MemberState, rpc: ElectionRpc, *, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None):
        cfg = state.config
        self.state = state
        self.rpc = rpc
        self.clock = clock
        self.rng = rng or random.Random()
        self.hb_ms = cfg.heartBeatTimeIntervalMs
        self.leak = cfg.maxHeartBeatLeak
        self.min_vote_ms = cfg.minVoteIntervalMs
        self.max_vote_ms = cfg.maxVoteIntervalMs
        self.last_leader_hb = -1.0  # ms on self.clock; -1: never (elapsed is then huge, as in DLedger)
        self.last_send_hb = -1.0
        self.last_succ_hb = -1.0
        self.next_vote_at = -1.0
        self.need_increase_term = False
        self.last_parse = ParseResult.WAIT_TO_REVOTE
        self.handlers: list[RoleChangeHandler] = []
        # whether this member may ask for votes: not once its log's write-back failed (it could
        # not append as leader; the server sets this), though it still votes for others
        self.may_stand: Callable[[], bool] = lambda: True
        self.peers_live: dict[str, bool] = {}
        self._wake = asyncio.Event()
        self._stopped = False
        self._task: asyncio.Task | None = None
        self._stray: set[asyncio.Task] = set()  # a round's late RPCs, kept referenced until they end

    def now_ms(self) -> float:
        return self.clock() * 1000.0

    def _elapsed(self, since: float) -> float:
        return self.now_ms() - since

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        st = self.state
        if st.led_term == st.term:
            # This member led its persisted term before it stopped. It stands in the next term,
            # never in that one again (DLedger stands in the same term first, and its voters
            # accept a candidate they already voted for): a leader that lost its log's unflushed
            # tail (a power cut) and led the same term again would write other entries under
            # (index, term) pairs its followers already hold, which they then take as matching.
            # Any other member stands in its term first, as DLedger's does, so a restarted
            # follower (even one that stood as candidate in that term) does not depose a live
            # leader by bringing a larger term.
            self.last_parse = ParseResult.WAIT_TO_VOTE_NEXT
            log.info("[%s] led term %d before this start: standing in term %d", st.self_id, st.term, st.term + 1)
        self._task = asyncio.get_running_loop().create_task(self.run(), name=f"elector-{self.state.self_id}")

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for t in list(self._stray):
            t.cancel()

    async def run(self) -> None:
        while not self._stopped:
            try:
                if self.state.is_leader:
                    await self._maintain_as_leader()
                elif self.state.is_follower:
                    self._maintain_as_follower()
                else:
                    await self._maintain_as_candidate()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not stop elections: log it and go on at the next deadline
                log.exception("[%s] election state machine failed", self.state.self_id)
            await self._sleep_until(self._next_deadline())

    def _next_deadline(self) -> float:
        if self.state.is_leader:
            return self.last_send_hb + self.hb_ms
        if self.state.is_follower:
            return self.last_leader_hb + self.leak * self.hb_ms + 1
        if self.need_increase_term:
            return self.now_ms()
        return self.next_vote_at

    async def _sleep_until(self, deadline_ms: float) -> None:
        delay = (deadline_ms - self.now_ms()) / 1000.0
        if delay <= 0 or self._stopped:
            return
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), delay)
        except asyncio.TimeoutError:
            pass

    def wakeup(self) -> None:
        self._wake.set()

    # -- role changes ----------------------------------------------------------------------------
    def _role_changed(self, term: int, role: Role) -> None:
        log.info("[%s] %s in term %d (leader %s)", self.state.self_id, role.value, term, self.state.leader_id)
        for handler in self.handlers:
            try:
                handler(term, role)
            except Exception:
                log.exception("[%s] role change handler failed (term %d, %s)", self.state.self_id, term, role.value)
        self.wakeup()

    def change_role_to_leader(self, term: int) -> None:
        if self.state.term != term:
            log.warning("[%s] not leader of term %d: the term is now %d", self.state.self_id, term, self.state.term)
            return
        self.state.change_to_leader(term)
        self.last_send_hb = -1.0
        self._role_changed(term, Role.LEADER)

    def change_role_to_candidate(self, term: int) -> None:
        if term < self.state.term:
            return
        was = self.state.role
        self.state.change_to_candidate(term)
        if was is not Role.CANDIDATE:
            self._role_changed(term, Role.CANDIDATE)

    def change_role_to_follower(self, term: int, leader_id: str) -> None:
        self.last_parse = ParseResult.WAIT_TO_REVOTE
        self.state.change_to_follower(term, leader_id)
        self.last_leader_hb = self.now_ms()
        self._role_changed(term, Role.FOLLOWER)

    # -- server side -----------------------------------------------------------------------------
    def handle_heartbeat(self, req: HeartBeatRequest) -> HeartBeatResponse:
        st = self.state
        if not st.is_peer(req.leaderId):
            log.warning("[%s] heartbeat from unknown member %r refused", st.self_id, req.leaderId)
            return HeartBeatResponse(term=st.term, code=ResponseCode.UNKNOWN_MEMBER)
        if req.leaderId == st.self_id:
            log.warning("[%s] heartbeat naming this member as its leader refused", st.self_id)
            return HeartBeatResponse(term=st.term, code=ResponseCode.UNEXPECTED_MEMBER)
        if req.term < st.term:
            return HeartBeatResponse(term=st.term, code=ResponseCode.EXPIRED_TERM)
        if req.term == st.term:
            if st.leader_id is None:
                self.change_role_to_follower(req.term, req.leaderId)
                return HeartBeatResponse(term=st.term)
            if req.leaderId == st.leader_id:
                self.last_leader_hb = self.now_ms()
                return HeartBeatResponse(term=st.term)
            log.error("[%s] term %d has leader %s, but %s sent a heartbeat as leader", st.self_id, st.term,
                      st.leader_id, req.leaderId)
            return HeartBeatResponse(term=st.term, code=ResponseCode.INCONSISTENT_LEADER)
        # a larger term: become a candidate that takes it at its next turn, then follow the leader
        # whose next heartbeat finds that term
        self.change_role_to_candidate(req.term)
        self.need_increase_term = True
        self.wakeup()
        return HeartBeatResponse(term=st.term, code=ResponseCode.TERM_NOT_READY)

    def handle_vote(self, req: VoteRequest, self_vote: bool = False) -> VoteResponse:
        st = self.state

        def answer(result: VoteResult, term: int | None = None) -> VoteResponse:
            return VoteResponse(group=req.group, leaderId=req.leaderId, term=st.term if term is None else term,
                                voteResult=result, remoteId=req.localId, localId=st.self_id)

        if not st.is_peer(req.leaderId):
            log.warning("[%s] vote request from unknown member %r refused", st.self_id, req.leaderId)
            return answer(VoteResult.REJECT_UNKNOWN_LEADER)
        if not self_vote and req.leaderId == st.self_id:
            log.warning("[%s] vote request from a peer using this member's id refused", st.self_id)
            return answer(VoteResult.REJECT_UNEXPECTED_LEADER)
        if req.ledgerEndTerm < st.ledger_end_term:
            return answer(VoteResult.REJECT_EXPIRED_LEDGER_TERM)
        if req.ledgerEndTerm == st.ledger_end_term and req.ledgerEndIndex < st.ledger_end_index:
            return answer(VoteResult.REJECT_SMALL_LEDGER_END_INDEX)
        if req.term < st.term:
            return answer(VoteResult.REJECT_EXPIRED_VOTE_TERM)
        if req.term == st.term:
            if st.vote_for is not None and st.vote_for != req.leaderId:
                if st.leader_id is not None:
                    return answer(VoteResult.REJECT_ALREADY_HAS_LEADER)
                return answer(VoteResult.REJECT_ALREADY_VOTED)
        else:
            # stepped down by a larger term: votes are only given in a term this member is in
            self.change_role_to_candidate(req.term)
            self.need_increase_term = True
            self.wakeup()
            return answer(VoteResult.REJECT_TERM_NOT_READY)
        if req.term < st.ledger_end_term:
            return answer(VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, st.ledger_end_term)
        st.set_vote_for(req.leaderId)  # durable before the ACCEPT leaves
        return answer(VoteResult.ACCEPT)

    # -- leader ----------------------------------------------------------------------------------
    async def _maintain_as_leader(self) -> None:
        if self._elapsed(self.last_send_hb) <= self.hb_ms:
            return
        term, leader_id = self.state.term, self.state.leader_id
        self.last_send_hb = self.now_ms()
        await self._send_heartbeats(term, leader_id)

    async def _gather(self, calls: dict[str, asyncio.Task], timeout_ms: float, count: Callable, done: Callable) -> None:
        """Feed each finished call's answer (None on failure) to `count` until `done()` or every
        call ended or the time is up; calls still running are left to finish on their own."""
        pending = set(calls.values())
        peer_of = {t: p for p, t in calls.items()}
        deadline = self.now_ms() + timeout_ms
        try:
            while pending and not done():
                left = (deadline - self.now_ms()) / 1000.0
                if left <= 0:
                    break
                finished, pending = await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                for t in finished:
                    try:
                        res = t.result()
                    except asyncio.CancelledError:
                        res = None
                    except Exception as e:
                        log.debug("[%s] no answer from %s: %s", self.state.self_id, peer_of[t], e)
                        res = None
                    count(peer_of[t], res)
        finally:  # also when stop() cancels the round: every call still out is kept and its end retrieved
            for t in pending:
                self._stray.add(t)
                t.add_done_callback(self._stray_done)

    def _stray_done(self, t: asyncio.Task) -> None:
        self._stray.discard(t)
        if not t.cancelled():
            t.exception()  # retrieved: a late failure is expected, not an unhandled error

    async def _send_heartbeats(self, term: int, leader_id: str) -> None:
        st = self.state
        n = {"succ": 1, "not_ready": 0, "max_term": -1, "inconsistent": False}
        loop = asyncio.get_running_loop()
        timeout = self.hb_ms / 1000.0
        calls = {}
        for peer in st.peers:
            if peer == st.self_id:
                continue
            req = HeartBeatRequest(group=st.group, leaderId=leader_id, term=term, remoteId=peer, localId=st.self_id)
            calls[peer] = loop.create_task(self.rpc.heartbeat(peer, req, timeout))

        def count(peer: str, res: HeartBeatResponse | None) -> None:
            self.peers_live[peer] = res is not None and res.code != ResponseCode.NETWORK_ERROR
            if res is None:
                return
            code = ResponseCode.of(res.code)
            if code is ResponseCode.SUCCESS:
                n["succ"] += 1
            elif code is ResponseCode.EXPIRED_TERM:
                n["max_term"] = max(n["max_term"], res.term)
            elif code is ResponseCode.INCONSISTENT_LEADER:
                n["inconsistent"] = True
            elif code is ResponseCode.TERM_NOT_READY:
                n["not_ready"] += 1

        await self._gather(calls, self.hb_ms - RESULT_WAIT_MS, count,
                           lambda: st.is_quorum(n["succ"]) or st.is_quorum(n["succ"] + n["not_ready"]))
        if not st.is_leader or st.term != term:
            return  # deposed while the round was out (a handler saw a larger term)
        if st.is_quorum(n["succ"]):
            self.last_succ_hb = self.now_ms()
            return
        if st.is_quorum(n["succ"] + n["not_ready"]):
            self.last_send_hb = -1.0  # peers are taking the term: beat again at once
        elif n["max_term"] > term:
            self.change_role_to_candidate(n["max_term"])
        elif n["inconsistent"]:
            self.change_role_to_candidate(term)
        elif self._elapsed(self.last_succ_hb) > self.leak * self.hb_ms:
            log.warning("[%s] no quorum heartbeat for %d ms in term %d: stepping down", st.self_id,
                        self.leak * self.hb_ms, term)
            self.change_role_to_candidate(term)

    # -- follower --------------------------------------------------------------------------------
    def _maintain_as_follower(self) -> None:
        if self._elapsed(self.last_leader_hb) > self.leak * self.hb_ms:
            log.info("[%s] no heartbeat from leader %s for %d ms: standing as candidate", self.state.self_id,
                     self.state.leader_id, self.leak * self.hb_ms)
            self.change_role_to_candidate(self.state.term)

    def leader_gone(self, term: int, leader_id: str) -> None:
        """Proof that the leader's process is gone (its peer port refuses connections: rpc's
        ElectionServer probes it when the leader's heartbeat link closes). Waiting out
        maxHeartBeatLeak heartbeats (6 s with DLedger's defaults) would only lengthen the write
        outage, so this follower stands at once, for the next term, after the usual random vote
        wait that keeps the survivors from splitting the vote. Raft's safety does not depend on
        when a member stands; a wrong call costs one election, never a write."""
        st = self.state
        if self._stopped or not st.is_follower or st.term != term or st.leader_id != leader_id:
            return
        log.warning("[%s] leader %s of term %d is gone (its peer port refuses connections): standing as "
                    "candidate without waiting %d ms of missed heartbeats", st.self_id, leader_id, term,
                    self.leak * self.hb_ms)
        self.next_vote_at = self._next_vote_time()
        self.change_role_to_candidate(term)
        self.last_parse = ParseResult.WAIT_TO_VOTE_NEXT  # its first round asks for the next term

    # -- candidate -------------------------------------------------------------------------------
    def _next_vote_time(self) -> float:
        return self.now_ms() + self.min_vote_ms + self.rng.randrange(self.max_vote_ms - self.min_vote_ms)

    async def _maintain_as_candidate(self) -> None:
        st = self.state
        if self.now_ms() < self.next_vote_at and not self.need_increase_term:
            return
        if not st.is_candidate:
            return
        if not self.may_stand():
            if self.need_increase_term:
                # the term a peer's vote request or heartbeat named, so that it is answered next
                # time; never a term of its own (that would depose a leader it cannot replace)
                st.next_term()
                self.need_increase_term = False
            self.next_vote_at = self._next_vote_time()  # looked at again then, never in a busy loop
            return
        if self.last_parse is ParseResult.WAIT_TO_VOTE_NEXT or self.need_increase_term:
            term = st.next_term()
            self.last_parse = ParseResult.WAIT_TO_REVOTE
        else:
            term = st.term
        if self.need_increase_term:
            # the term was taken from a peer: give its leader a chance to reach us before standing
            self.next_vote_at = self._next_vote_time()
            self.need_increase_term = False
            return
        end_index, end_term = st.ledger_end_index, st.ledger_end_term
        tally = Tally(known_max_term=term)
        loop = asyncio.get_running_loop()
        wait_ms = VOTE_WAIT_BASE_MS + self.rng.randrange(self.max_vote_ms)
        calls = {}
        for peer in st.peers:
            req = VoteRequest(group=st.group, leaderId=st.self_id, term=term, ledgerEndIndex=end_index,
                              ledgerEndTerm=end_term, remoteId=peer, localId=st.self_id)
            if peer == st.self_id:
                tally.add(self.handle_vote(req, self_vote=True))
            else:
                calls[peer] = loop.create_task(self.rpc.vote(peer, req, wait_ms / 1000.0))
        await self._gather(calls, wait_ms, lambda _peer, res: tally.add(res), lambda: tally.decided(st.is_quorum))
        result = tally.parse(term, st.is_quorum)
        if result is ParseResult.WAIT_TO_VOTE_NEXT and tally.known_max_term > term:
            self.next_vote_at = self._next_vote_time()
            self.change_role_to_candidate(tally.known_max_term)
        elif result is ParseResult.WAIT_TO_REVOTE:
            extra = self.hb_ms * self.leak if tally.already_has_leader else \
                self.max_vote_ms if st.is_quorum(tally.valid) else 0
            self.next_vote_at = self._next_vote_time() + extra
        elif result is ParseResult.WAIT_TO_VOTE_NEXT:
            self.next_vote_at = self._next_vote_time()
        self.last_parse = result
        log.info("[%s] vote round of term %d: %d answers, %d accepted, %d not ready, %d with a bigger ledger, "
                 "leader known: %s -> %s", st.self_id, term, tally.all, tally.accepted, tally.not_ready,
                 tally.bigger_ledger, tally.already_has_leader, result.value)
        if result is ParseResult.PASSED and st.is_candidate and st.term == term:
            self.change_role_to_leader(term)
