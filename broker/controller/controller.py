"""Controller: one member of the controllers' Raft group (RocketMQ's DLedgerController).

The state (ReplicasInfoManager) is what the committed entries of the Raft log say, applied in
index order on every member: at start every committed entry is replayed, then each advance of the
committed index applies the entries up to it (leader and followers alike). So a controller that
dies loses nothing a majority committed, and the next leader answers as the last one did.

Only the Raft leader answers requests (writes and reads of the replicas); the others refuse with
CONTROLLER_NOT_LEADER naming the leader's address. A write is checked against the state, its
event appended, and the answer sent once the event is committed and applied; a refused check
appends nothing. One write at a time (a lock): each check sees the state its event lands on.

A new leader first appends a Noop and waits for it to commit (the barrier): Raft commits the
entries of earlier terms only through one of the current term, and a check made before they are
applied would read a stale state. A write that timed out waiting for its quorum moves the barrier
to its entry: it may still be committed, and the next check must see it if it is.

Heartbeats are in memory (BrokerHeartbeatManager). Every scanInactiveMasterInterval the leader
elects a new master for each group whose master stopped heartbeating, through an ElectMaster
event like any other write.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, TypeVar

import msgspec

from broker.controller import codes
from broker.controller.codes import NOTIFY_BROKER_ROLE_CHANGED
from broker.controller.config import DEFAULT_HEARTBEAT_TIMEOUT_MS, ControllerConfig
from broker.controller.events import AnyEvent, NoopEvent, decode_event, encode_event
from broker.controller.heartbeat import BrokerHeartbeatManager, BrokerLiveInfo
from broker.controller.replicas_info import ControllerError, ReplicasInfoManager, SyncStateInfo
from broker.raft.append_errors import AppendError, WaitQuorumAckTimeout
from broker.raft.protocol import Role
from broker.raft.server import DLedgerServer
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.store.errors import StoreConfigError

log = logging.getLogger("controller")
encode_json = msgspec.json.encode

T = TypeVar("T")


class ControllerNotLeader(ControllerError):
    def __init__(self, message: str, leader_id: str | None, leader_addr: str | None):
        super().__init__(codes.CONTROLLER_NOT_LEADER, message)
        self.leader_id = leader_id
        self.leader_addr = leader_addr


class Controller:
    def __init__(self, config: ControllerConfig, clock: Callable[[], float] = time.monotonic):
        assert config.dledger is not None
        self.config = config
        self.clock = clock
        self.replicas = ReplicasInfoManager(config.enableElectUncleanMaster)
        self.heartbeats = BrokerHeartbeatManager(clock)
        self.server = DLedgerServer(config.dledger, config.controllerStorePath,
                                    store_options={"data_file_size": config.mappedFileSize, "warm": False},
                                    other=self._no_front)
        self.applied = -1
        self._barrier: tuple[int, int] = (-1, -1)  # (term, index) the leader waits on before a check
        self._lock = asyncio.Lock()
        self._scan: asyncio.Task | None = None
        self._started_at = clock()
        self._replay()
        self.server.committed.listeners.append(self._catch_up)
        self.server.elector.handlers.append(self._on_role_change)

    @staticmethod
    def _no_front(cmd, conn):
        return None if cmd.is_oneway else cmd.response(3, remark="the controller's request processor is not set")

    # -- the log, applied ------------------------------------------------------------------------
    def _replay(self) -> None:
        store = self.server.store
        if store.ledger_begin_index > 0:
            # no snapshot to start from: the state needs the log from its first entry
            raise StoreConfigError("controllerStorePath", f"the controller log there starts at entry "
                                   f"{store.ledger_begin_index}, not 0: its first entries are gone")
        self._catch_up()
        log.info("controller %s: %d entries replayed, %d broker group(s)", self.config.controllerDLegerSelfId,
                 self.applied + 1, len(self.replicas.replicas))

    def _catch_up(self, *_) -> None:
        target = self.server.committed_index
        while self.applied < target:
            i = self.applied + 1
            event = decode_event(self.server.store.get(i).body, i)
            self.replicas.apply(event)
            self.applied = i
            if not isinstance(event, NoopEvent):
                log.info("controller %s applied entry %d: %r", self.config.controllerDLegerSelfId, i, event)

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> "Controller":
        await self.server.start()
        self._scan = asyncio.get_running_loop().create_task(self._scan_inactive_masters())
        return self

    async def stop(self) -> None:
        if self._scan is not None:
            self._scan.cancel()
            try:
                await self._scan
            except asyncio.CancelledError:
                pass
            self._scan = None
        await self.server.stop()

    @property
    def addr(self) -> str:
        return self.config.self_addr

    # -- leadership ------------------------------------------------------------------------------
    def _on_role_change(self, term: int, role: Role) -> None:
        if role is Role.LEADER:
            # after the other handlers (the quorum's new term) have run
            asyncio.get_running_loop().call_soon(self._append_barrier, term)

    def _append_barrier(self, term: int) -> None:
        st = self.server.state
        if not st.is_leader or st.term != term:
            return
        try:
            index, _, fut = self.server.begin_append(encode_event(NoopEvent(leaderId=st.self_id)))
        except AppendError as e:
            log.warning("controller %s: no barrier entry in term %d: %s", st.self_id, term, e)
            return
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # the writes wait on the index
        self._barrier = (term, index)
        log.info("controller %s leads in term %d; barrier entry %d", st.self_id, term, index)

    def leader(self) -> tuple[str | None, str | None]:
        st = self.server.state
        lid = st.self_id if st.is_leader else st.leader_id
        peer = self.config.dledger.peers.get(lid) if lid else None
        return lid, peer.addr if peer else None

    def _not_leader(self, why: str = "") -> ControllerNotLeader:
        lid, addr = self.leader()
        me = self.config.controllerDLegerSelfId
        if lid == me:
            # The state still names this member: what failed is its own step (it is stopping, its
            # term moved on, its append was refused). Say that, not "the leader is <me>".
            st = self.server.state
            reason = why or (f"it leads term {st.term} but has not applied its barrier entry yet"
                             if st.is_leader else f"it no longer leads (term {st.term})")
            return ControllerNotLeader(f"controller {me} cannot act as the leader: {reason}", lid, addr)
        return ControllerNotLeader(f"controller {me} is not the leader; the leader is "
                                   f"{f'{lid} at {addr}' if addr else 'not known yet'}", lid, addr)

    async def _ready(self) -> None:
        """Return once this member leads and has applied everything up to its barrier."""
        st = self.server.state
        term, index = self._barrier
        if not st.is_leader or term != st.term:
            raise self._not_leader()
        if self.server.committed_index < index:
            try:
                await self.server.wait_committed(index, self.config.dledger.maxWaitAckTimeMs / 1000)
            except asyncio.TimeoutError:
                raise ControllerError(codes.SYSTEM_ERROR, f"controller {st.self_id} leads but entry {index} is not "
                                      "committed yet (no majority?); retry") from None
            if not st.is_leader or self._barrier[0] != st.term:
                raise self._not_leader()
        self._catch_up()

    async def _write(self, check: Callable[[], tuple[T, AnyEvent | None]]) -> T:
        """Check, append the check's event, wait for it to be committed and applied."""
        async with self._lock:
            await self._ready()
            result, event = check()
            if event is None:
                return result
            try:
                index, _, fut = self.server.begin_append(encode_event(event))
            except AppendError as e:
                raise self._not_leader(f"its append was refused: {e}") from e
            try:
                await fut
            except WaitQuorumAckTimeout:
                self._barrier = (self._barrier[0], index)  # it may still commit: the next check waits for it
                raise ControllerError(codes.SYSTEM_ERROR, f"entry {index} was not committed in time; "
                                      "it may still be: ask again") from None
            except AppendError as e:
                raise self._not_leader(f"its append was refused: {e}") from e
            self._catch_up()
            return result

    async def read(self) -> None:
        """Reads are answered by the leader only (RocketMQ's controller), once it has applied
        everything up to its barrier."""
        await self._ready()

    # -- requests --------------------------------------------------------------------------------
    async def apply_broker_id(self, cluster: str, name: str, address: str, applied_id: int | None = None) -> int:
        return await self._write(lambda: self.replicas.apply_broker_id(cluster, name, address, applied_id))

    async def elect_master(self, name: str, broker_id: int = -1, designate: bool = False) -> SyncStateInfo:
        def check():
            outcome = self.replicas.elect_master(name, broker_id, designate, self.heartbeats.alive_fn(name),
                                                 self.heartbeats.rank_fn(name))
            return None, outcome.event
        await self._write(check)
        self._notify_role_changed(name)
        return self.replicas.sync_states[name]

    async def alter_sync_state_set(self, name: str, master_id: int, master_epoch: int, new_set: set[int],
                                   sync_state_set_epoch: int) -> SyncStateInfo:
        await self._write(lambda: (None, self.replicas.alter_sync_state_set(
            name, master_id, master_epoch, new_set, sync_state_set_epoch, self.heartbeats.alive_fn(name))))
        return self.replicas.sync_states[name]

    async def clean_broker_data(self, name: str, broker_ids: list[int] | None, clean_living: bool) -> None:
        await self._write(lambda: (None, self.replicas.clean_broker_data(name, broker_ids, clean_living,
                                                                         self.heartbeats.alive_fn(name))))
        self.heartbeats.forget(name, broker_ids)

    def heartbeat(self, name: str, broker_id: int | None, address: str, timeout_ms: int | None, epoch: int,
                  max_offset: int, confirm_offset: int, priority: int | None, channel=None) -> None:
        """A broker's heartbeat, on any controller: refused (nothing kept) for an unknown group or
        an id the address does not hold."""
        info, _ = self.replicas.group(name)
        if broker_id is None or broker_id < 0:
            broker_id = info.id_of(address)
            if broker_id is None:
                raise ControllerError(codes.CONTROLLER_BROKER_ID_INVALID,
                                      f"{address} holds no broker id in group {name!r}: register first")
        self.replicas.check_owner(name, broker_id, address)
        self.heartbeats.on_heartbeat(BrokerLiveInfo(
            name, broker_id, address, self.clock(), timeout_ms if timeout_ms and timeout_ms > 0
            else DEFAULT_HEARTBEAT_TIMEOUT_MS, epoch, max_offset, confirm_offset,
            priority if priority is not None else 2**31 - 1), channel)

    def on_channel_close(self, channel) -> None:
        gone = self.heartbeats.on_channel_close(channel)
        if not gone:
            return
        log.info("controller %s: heartbeat connection of %s closed: inactive now", self.config.controllerDLegerSelfId,
                 ", ".join(f"{n}/{i}" for n, i in gone))
        # a master among them is replaced now, not at the next scan
        if any(self.replicas.sync_states.get(n) and self.replicas.sync_states[n].masterBrokerId == i for n, i in gone):
            asyncio.get_running_loop().create_task(self.scan_once())

    # -- NOTIFY_BROKER_ROLE_CHANGED ----------------------------------------------------------------
    def _notify_role_changed(self, name: str) -> None:
        """notifyBrokerRoleChanged: every broker of the group learns the new master at once (RocketMQ's
        DLedgerController sends NOTIFY_BROKER_ROLE_CHANGED oneway to each broker's address), rather
        than at its next syncBrokerMetadataPeriod poll."""
        if not self.config.notifyBrokerRoleChanged or name not in self.replicas.replicas:
            return
        info, st = self.replicas.group(name)
        ext = {"masterEpoch": str(st.masterEpoch), "syncStateSetEpoch": str(st.syncStateSetEpoch),
               "masterBrokerId": "" if st.masterBrokerId is None else str(st.masterBrokerId),
               "masterAddress": self.replicas.master_address(name) or ""}
        body = encode_json({"syncStateSet": sorted(st.syncStateSet), "syncStateSetEpoch": st.syncStateSetEpoch})
        for addr in set(info.brokerIdInfo.values()):
            asyncio.get_running_loop().create_task(self._notify_one(addr, ext, body))

    async def _notify_one(self, addr: str, ext: dict, body: bytes) -> None:
        host, _, port = addr.rpartition(":")
        try:
            conn = await asyncio.wait_for(connect(host, int(port)), 1.0)
        except (OSError, asyncio.TimeoutError, ValueError):
            return  # a broker that is down learns the master when it registers again
        try:
            conn.oneway(RemotingCommand.request(NOTIFY_BROKER_ROLE_CHANGED, ext, body, oneway=True))
        finally:
            conn.close()  # sends what is gathered first

    # -- the inactive-master scan -----------------------------------------------------------------
    def _master_inactive(self, name: str, master: int) -> bool:
        if self.heartbeats.is_alive(name, master):
            return False
        if (name, master) in self.heartbeats.live:
            return True  # it heartbeated here and stopped
        # never heard of here (this controller started a moment ago): give it one default
        # heartbeat timeout to show up before it is judged
        return (self.clock() - self._started_at) * 1000 >= DEFAULT_HEARTBEAT_TIMEOUT_MS

    async def scan_once(self) -> None:
        st = self.server.state
        if not st.is_leader or self._barrier[0] != st.term or self.server.committed_index < self._barrier[1]:
            return
        for name, sync in list(self.replicas.sync_states.items()):
            master = sync.masterBrokerId
            if master is None or not self._master_inactive(name, master):
                continue
            try:
                new = await self.elect_master(name)
                log.warning("controller %s: master %d of %r stopped heartbeating; elected %s (masterEpoch %d)",
                            st.self_id, master, name, new.masterBrokerId, new.masterEpoch)
            except ControllerError as e:
                log.warning("controller %s: master %d of %r stopped heartbeating; no election: %s",
                            st.self_id, master, name, e)

    async def _scan_inactive_masters(self) -> None:
        interval = self.config.scanInactiveMasterInterval / 1000
        while True:
            await asyncio.sleep(interval)  # a period, not a wait for something to happen
            try:
                await self.scan_once()
            except Exception:  # the scan must outlive one bad round
                log.exception("inactive-master scan failed")
