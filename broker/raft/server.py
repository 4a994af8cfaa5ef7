"""DLedgerServer: one member of a DLedger group, wired (DLedger's DLedgerServer).

    MemberState + LeaderElector      who leads which term (broker.raft.elector)
    DLedgerEntryStore                the Raft log in DLedger's files
    DLedgerEntryPusher               leader: an EntryDispatcher per follower
    QuorumAckChecker                 leader: water marks -> committed index -> appends answered
    EntryHandler                     follower: PUSH applied to the log
    EntryFlusher                     entries written back, checkpoint persisted
    ElectionServer                   one RemotingServer on the member's peer port: VOTE,
                                     HEART_BEAT and PUSH

`append(body)` is the leader's appendAsLeader + waitAck: the entry goes into this member's log,
the dispatchers are woken, and the call returns (index, pos) only once the committed index covers
the entry, i.e. a majority holds it (Raft's commit rule: see quorum). Otherwise it raises an
AppendError carrying DLedger's code: NOT_LEADER on a member that does not lead, LEADER_PENDING_FULL
past maxPendingRequestsNum waiting appends, WAIT_QUORUM_ACK_TIMEOUT after maxWaitAckTimeMs,
TERM_CHANGED when the member stops leading first (the moment the elector says so), NOT_LEADER when
it is stopped. `committed_index` and `wait_committed(index)` observe the committed index on any
member (a follower's follows the leader's, up to what it holds of the leader's log).

Role changes are the elector's handlers, called synchronously on the loop: becoming leader starts
fresh water marks and dispatchers for the term before anything else can run; leaving it stops the
dispatchers and fails the waiting appends in the same call.
"""
from __future__ import annotations

import asyncio
import logging

from broker.raft.append_errors import DiskError, NotLeader, TermChanged
from broker.raft.committed import CommittedIndex
from broker.raft.config import DLedgerConfig
from broker.raft.elector import LeaderElector
from broker.raft.entry_handler import EntryHandler
from broker.raft.entry_pusher import COMMIT_INTERVAL_MS, DLedgerEntryPusher, PushWindow
from broker.raft.entry_store import DLedgerEntryStore
from broker.raft.flusher import CHECKPOINT_INTERVAL_MS, FLUSH_INTERVAL_MS, EntryFlusher
from broker.raft.member_state import MemberState
from broker.raft.protocol import Role
from broker.raft.quorum import QuorumAckChecker
from broker.raft.rpc import ElectionServer, PeerClients

log = logging.getLogger("raft")


class DLedgerServer:
    def __init__(self, config: DLedgerConfig, store_root: str, *, store_options: dict | None = None,
                 window: PushWindow | None = None, commit_interval_ms: int = COMMIT_INTERVAL_MS,
                 flush_interval_ms: int = FLUSH_INTERVAL_MS, checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS,
                 host: str | None = None, port: int | None = None, durable: bool = False, other=None):
        self.config = config
        self.self_id = config.dLegerSelfId
        self.state = MemberState(config, str(store_root))
        self.store = DLedgerEntryStore.open(str(store_root), self.self_id, **(store_options or {}))
        # durable: an append is answered once a majority has it on disk, not only in memory
        # (flushDiskType=SYNC_FLUSH; DLedger itself acknowledges from memory and flushes every 10 ms)
        self.durable = durable
        self.flusher = EntryFlusher(self.store, flush_interval_ms, checkpoint_interval_ms, self.self_id, durable)
        self.ledger_changed()
        self.committed = CommittedIndex(self.store.committed_index)
        self.elector = LeaderElector(self.state, PeerClients(config))
        self.elector.may_stand = lambda: not self.store.disk_failed
        self.quorum = QuorumAckChecker(config, self.store, self.committed)
        self.quorum.durable = durable
        self.pusher = DLedgerEntryPusher(config, self.state, self.store, self.quorum, self.elector,
                                         PeerClients(config), window, commit_interval_ms)
        self.quorum.on_commit = self.pusher.wake
        self.handler = EntryHandler(self.state, self.store, self.elector, self.committed, self.ledger_changed,
                                    durable)
        self.flusher.on_flushed.append(self._flushed)
        self.flusher.on_disk_failed.append(self._disk_failed)
        self.remoting = ElectionServer(config, self.elector, host, port, push=self.handler.handle,
                                       other=other)  # the controller's requests share the peer port
        self.elector.handlers.append(self._on_role_change)
        self._stopped = False

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> "DLedgerServer":
        await self.remoting.start()
        self.flusher.start()
        self.elector.start()
        return self

    async def stop(self) -> None:
        """Stop answering, fail the waiting appends (NOT_LEADER), write back the log and persist
        the checkpoint (the store's close)."""
        if self._stopped:
            return
        self._stopped = True
        await self.elector.stop()
        await self.remoting.close()
        await self.pusher.stop()
        self.quorum.end_term(lambda i: NotLeader(f"{self.self_id} stopped before entry {i} was committed",
                                                 None, i))
        self.elector.rpc.close()
        await self.flusher.stop()
        self.store.close()

    # -- role changes ----------------------------------------------------------------------------
    def _on_role_change(self, term: int, role: Role) -> None:
        if role is Role.LEADER:
            self.quorum.begin_term(term)
        else:
            self.quorum.end_term(lambda i: TermChanged(
                f"{self.self_id} became {role.value} in term {term} before entry {i} was committed", i))
        self.pusher.on_role_change(term, role)

    def ledger_changed(self) -> None:
        """The elector's votes compare ledger ends: keep MemberState's in step with the log
        (after every change to it: the handler's appends and truncations, the leader's appends)."""
        self.state.update_ledger(self.store.ledger_end_index, self.store.ledger_end_term)
        self.flusher.wake()

    def _flushed(self, index: int) -> None:
        """The flusher wrote back up to `index`: in durable mode the leader's own water mark, and
        a follower's answers waiting for it."""
        if self.durable:
            if self.state.is_leader:
                self.quorum.update_water_mark(self.quorum.term, self.self_id, index)
            self.handler.flushed(index)

    def _disk_failed(self) -> None:
        """The flusher's write-back failed (the store said why): a follower's answers waiting for
        it say DISK_ERROR, and a leader steps down, as it could append nothing more (check_leading)
        while a member whose disk works can lead; it asks for no votes (elector.may_stand)."""
        self.handler.disk_failed()
        st = self.state
        if st.is_leader:
            log.error("[%s] stepping down from leading term %d: this member's log cannot be written back", st.self_id,
                      st.term)
            self.elector.change_role_to_candidate(st.term)

    # -- the leader's append ---------------------------------------------------------------------
    def begin_append(self, body) -> tuple[int, int, "asyncio.Future"]:
        """The synchronous half of append(): the entry is in this member's log when this returns
        (index, pos, future), the future giving (index, pos) once a majority holds it or failing
        with an AppendError. Appends made one after another from the loop take consecutive
        indexes in that order (the broker relies on it: its queue offsets follow entry order)."""
        self.check_leading()
        index, pos = self.store.append(self.state.term, body)
        return index, pos, self.appended(index, pos)

    def check_leading(self) -> None:
        """What an append checks before writing: NotLeader unless this member leads in the term
        its quorum counts, LeaderPendingFull when too many appends wait for their quorum."""
        st = self.state
        if not self.leading:
            raise NotLeader(f"{self.self_id} is {'stopped' if self._stopped else st.role.value} in term {st.term}",
                            None if self._stopped else st.leader_id)
        if self.store.disk_failed:
            raise DiskError(self.store.disk_failed)
        self.quorum.check_room()

    @property
    def leading(self) -> bool:
        """This member leads, and its quorum counts water marks in its term."""
        st = self.state
        return not self._stopped and st.is_leader and self.quorum.term == st.term

    def appended(self, index: int, pos: int) -> "asyncio.Future":
        """Entry `index` (at `pos`) was appended to this member's log by its leader's writer,
        after check_leading: the bookkeeping of begin_append (votes see the new ledger end, the
        leader's own water mark, the dispatchers woken) and the future of its quorum."""
        self.ledger_changed()
        fut = self.quorum.wait_ack(index, pos)
        self.pusher.wake()
        return fut

    def appended_in_place(self, last: int) -> None:
        """Entries up to `last` were written in place by the commit log's Appender (the send
        kernel, entry mode) in this term, after check_leading: as appended() for each, without
        a future per entry (wait_entry gives one for many)."""
        self.ledger_changed()
        if not self.durable:  # else the flusher moves the leader's own mark (_flushed)
            self.quorum.update_water_mark(self.quorum.term, self.self_id, last)
        self.pusher.wake()

    def wait_entry(self, index: int) -> "asyncio.Future":
        """A future for entry `index` of this member's log, appended in this term: (index, pos)
        once a majority holds it; an AppendError (NotLeader when this member no longer leads)."""
        loop = asyncio.get_running_loop()
        store = self.store
        if index <= store.committed_index:
            fut = loop.create_future()
            fut.set_result((index, store.position(index)[0]))
            return fut
        if not self.leading:
            fut = loop.create_future()
            st = self.state
            fut.set_exception(NotLeader(f"{self.self_id} is {'stopped' if self._stopped else st.role.value} in "
                                        f"term {st.term}: entry {index} not committed", st.leader_id))
            return fut
        return self.quorum.wait_ack(index, store.position(index)[0])

    async def append(self, body) -> tuple[int, int]:
        """Append `body` as the next entry of the group's log; (index, pos) once a majority holds
        it. The body starts at pos + 48 in every member's data files."""
        return await self.begin_append(body)[2]

    @property
    def term(self) -> int:
        return self.state.term

    # -- observation -----------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.state.is_leader

    @property
    def committed_index(self) -> int:
        return self.committed.value

    async def wait_committed(self, index: int, timeout: float | None = None) -> int:
        """The committed index once it reaches `index` (asyncio.TimeoutError after `timeout` s)."""
        return await self.committed.wait_for(index, timeout)

    def describe(self) -> dict:
        return {**self.state.describe(), "committedIndex": self.store.committed_index,
                "quorum": self.quorum.describe(), "dispatchers": self.pusher.describe()}

    def __repr__(self) -> str:
        st = self.state
        return (f"DLedgerServer({self.self_id}, {st.role.value}, term {st.term}, "
                f"log end {self.store.ledger_end_index}, committed {self.store.committed_index})")
