"""ReplicasInfoManager: the controller's state machine (RocketMQ's impl/manager/ReplicasInfoManager).

Per broker group (brokerName, a "broker set" in RocketMQ 5):
- BrokerReplicaInfo: its cluster, the broker ids handed out and each one's address, the next id;
- SyncStateInfo: masterBrokerId and masterEpoch, the SyncStateSet and syncStateSetEpoch.

Two halves, as in RocketMQ:
- the checks (`apply_broker_id`, `elect_master`, `alter_sync_state_set`, `clean_broker_data`)
  run on the Raft leader before anything is appended: they read the state, refuse with a
  ControllerError carrying RocketMQ's response code, or return the event that records the
  decision. A refused request appends nothing, so it never changes any controller's state.
- `apply(event)` changes the state; it decides nothing (no clock, no liveness), so every
  controller that applies the same log holds the same state.

The leader runs one check-append-commit-apply at a time (controller.py), so a check always sees
the state its event will be applied to. Liveness (heartbeats) is the caller's: the checks take an
`alive(brokerId)` predicate and a `rank(brokerId)` sort key, never read a clock.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from broker.controller import codes
from broker.controller.events import (AlterSyncStateSetEvent, AnyEvent, ApplyBrokerIdEvent, CleanBrokerDataEvent,
                                      ElectMasterEvent, NoopEvent)

log = logging.getLogger("controller")

FIRST_BROKER_ID = 1  # RocketMQ 5.1 hands out ids from 1; 0 is no longer "the master"

Alive = Callable[[int], bool]


class ControllerError(Exception):
    """A refused request: `code` is RocketMQ's ResponseCode, the message says why."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class BrokerReplicaInfo:
    clusterName: str
    brokerName: str
    nextAssignBrokerId: int = FIRST_BROKER_ID
    brokerIdInfo: dict[int, str] = field(default_factory=dict)  # id -> address

    def id_of(self, address: str) -> int | None:
        for bid, addr in self.brokerIdInfo.items():
            if addr == address:
                return bid
        return None


@dataclass
class SyncStateInfo:
    masterBrokerId: int | None = None
    masterEpoch: int = 0
    syncStateSet: set[int] = field(default_factory=set)
    syncStateSetEpoch: int = 0

    @property
    def first_time_for_elect(self) -> bool:
        return self.masterEpoch == 0


@dataclass
class ElectOutcome:
    """What elect_master decided: `event` is None when nothing is to change (the master stays)."""
    event: ElectMasterEvent | None
    masterBrokerId: int | None


class ReplicasInfoManager:
    def __init__(self, enable_elect_unclean_master: bool = False):
        self.enable_elect_unclean_master = enable_elect_unclean_master
        self.replicas: dict[str, BrokerReplicaInfo] = {}
        self.sync_states: dict[str, SyncStateInfo] = {}

    # -- reading ---------------------------------------------------------------------------------
    def group(self, broker_name: str, code: int = codes.CONTROLLER_BROKER_METADATA_NOT_EXIST
              ) -> tuple[BrokerReplicaInfo, SyncStateInfo]:
        info = self.replicas.get(broker_name)
        if info is None:
            raise ControllerError(code, f"unknown broker group {broker_name!r}: no broker of it has registered")
        return info, self.sync_states[broker_name]

    def check_owner(self, broker_name: str, broker_id: int, broker_address: str) -> None:
        """The broker at `broker_address` holds `broker_id` in its group, or ControllerError."""
        info, _ = self.group(broker_name)
        owner = info.brokerIdInfo.get(broker_id)
        if owner is None:
            raise ControllerError(codes.CONTROLLER_BROKER_ID_INVALID,
                                  f"broker id {broker_id} was never handed out in group {broker_name!r}")
        if owner != broker_address:
            raise ControllerError(codes.CONTROLLER_BROKER_ID_INVALID, f"broker id {broker_id} of group {broker_name!r} "
                                  f"belongs to {owner}, not {broker_address}")

    def master_address(self, broker_name: str) -> str | None:
        info, st = self.group(broker_name)
        return None if st.masterBrokerId is None else info.brokerIdInfo.get(st.masterBrokerId)

    def snapshot(self) -> dict:
        """The whole state as plain data (tests compare replicas and replays with it)."""
        return {name: {"clusterName": info.clusterName, "nextAssignBrokerId": info.nextAssignBrokerId,
                       "brokers": dict(sorted(info.brokerIdInfo.items())),
                       "masterBrokerId": self.sync_states[name].masterBrokerId,
                       "masterEpoch": self.sync_states[name].masterEpoch,
                       "syncStateSet": sorted(self.sync_states[name].syncStateSet),
                       "syncStateSetEpoch": self.sync_states[name].syncStateSetEpoch}
                for name, info in sorted(self.replicas.items())}

    # -- checks: on the leader, before an event is appended ---------------------------------------
    def next_broker_id(self, broker_name: str) -> int:
        info = self.replicas.get(broker_name)
        return FIRST_BROKER_ID if info is None else info.nextAssignBrokerId

    def apply_broker_id(self, cluster_name: str, broker_name: str, broker_address: str,
                        applied_id: int | None = None) -> tuple[int, ApplyBrokerIdEvent | None]:
        """(brokerId, event): the id the broker at `broker_address` holds or is handed now. An
        address keeps its id for good (a restarted broker gets it back); `applied_id` (RocketMQ
        5.1's APPLY_BROKER_ID) must be that id, or the next free one for a new address."""
        if not cluster_name or not broker_name or not broker_address:
            raise ControllerError(codes.CONTROLLER_INVALID_REQUEST,
                                  "clusterName, brokerName and brokerAddress must all be set")
        if applied_id is not None and applied_id < 0:
            applied_id = None
        info = self.replicas.get(broker_name)
        if info is not None and info.clusterName != cluster_name:
            raise ControllerError(codes.CONTROLLER_INVALID_REQUEST, f"broker group {broker_name!r} is in cluster "
                                  f"{info.clusterName!r}, not {cluster_name!r}")
        held = info.id_of(broker_address) if info is not None else None
        if held is not None:
            if applied_id is not None and applied_id != held:
                raise ControllerError(codes.CONTROLLER_BROKER_ID_INVALID, f"{broker_address} holds broker id {held} "
                                      f"in group {broker_name!r}, not {applied_id}")
            return held, None
        next_id = self.next_broker_id(broker_name)
        if applied_id is not None and applied_id != next_id:
            owner = info.brokerIdInfo.get(applied_id) if info is not None else None
            why = f"belongs to {owner}" if owner else f"is not the next free id ({next_id})"
            raise ControllerError(codes.CONTROLLER_BROKER_ID_INVALID,
                                  f"broker id {applied_id} of group {broker_name!r} {why}")
        return next_id, ApplyBrokerIdEvent(clusterName=cluster_name, brokerName=broker_name,
                                           brokerAddress=broker_address, brokerId=next_id)

    def elect_master(self, broker_name: str, broker_id: int = -1, designate: bool = False,
                     alive: Alive = lambda _id: True, rank: Callable[[int], tuple] = lambda i: (i,)) -> ElectOutcome:
        """A new master for the group, from its SyncStateSet (from every live broker of it only
        with enableElectUncleanMaster). `broker_id` -1 is the controller's own election (the
        master stopped heartbeating); a broker id is a broker asking, or with `designate` an
        operator naming the master. The lowest `rank` among the live candidates wins."""
        info, st = self.group(broker_name, codes.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED)
        if broker_id != -1 and broker_id not in info.brokerIdInfo:
            raise ControllerError(codes.CONTROLLER_BROKER_ID_INVALID,
                                  f"broker id {broker_id} was never handed out in group {broker_name!r}")
        old = st.masterBrokerId
        new: int | None = None
        if st.first_time_for_elect and broker_id != -1:
            new = broker_id  # no master ever: the first to ask is the first master (RocketMQ)
        elif designate and broker_id != -1:
            if broker_id not in st.syncStateSet and not self.enable_elect_unclean_master:
                raise ControllerError(codes.CONTROLLER_ELECT_MASTER_FAILED, f"broker {broker_id} is not in the "
                                      f"SyncStateSet {sorted(st.syncStateSet)} of {broker_name!r} and "
                                      "enableElectUncleanMaster is false")
            if not alive(broker_id):
                raise ControllerError(codes.CONTROLLER_BROKER_NOT_ALIVE, f"broker {broker_id} of {broker_name!r} "
                                      "is not alive (no recent heartbeat)")
            new = broker_id
        else:
            candidates = [b for b in st.syncStateSet if alive(b)]
            if not candidates and self.enable_elect_unclean_master:
                candidates = [b for b in info.brokerIdInfo if alive(b)]
            if old is not None and old in candidates:
                new = old
            elif candidates:
                new = min(candidates, key=rank)
        if new is not None and new == old:
            raise ControllerError(codes.CONTROLLER_MASTER_STILL_EXIST,
                                  f"master {old} of {broker_name!r} is alive: no new master elected")
        if new is not None:
            return ElectOutcome(ElectMasterEvent(brokerName=broker_name, newMasterBrokerId=new), new)
        if broker_id == -1 and old is not None:
            # the master is gone and nobody can replace it: record that the group has no master
            # (masterEpoch + 1), so that the old master, if it comes back, is fenced by the epoch
            return ElectOutcome(ElectMasterEvent(brokerName=broker_name, newMasterBrokerId=None), None)
        code = codes.CONTROLLER_MASTER_NOT_AVAILABLE if broker_id == -1 else codes.CONTROLLER_ELECT_MASTER_FAILED
        raise ControllerError(code, f"no live broker of {broker_name!r} can be master: SyncStateSet "
                              f"{sorted(st.syncStateSet)}, enableElectUncleanMaster="
                              f"{str(self.enable_elect_unclean_master).lower()}")

    def alter_sync_state_set(self, broker_name: str, master_id: int, master_epoch: int, new_set: set[int],
                             sync_state_set_epoch: int, alive: Alive = lambda _id: True) -> AlterSyncStateSetEvent:
        """Only the current master, at the current masterEpoch and syncStateSetEpoch, changes its
        SyncStateSet, and only to live registered brokers that include itself."""
        info, st = self.group(broker_name, codes.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED)
        if st.masterBrokerId is None or st.masterBrokerId != master_id:
            raise ControllerError(codes.CONTROLLER_INVALID_MASTER, f"broker {master_id} is not the master of "
                                  f"{broker_name!r} (the master is {st.masterBrokerId})")
        if master_epoch != st.masterEpoch:
            raise ControllerError(codes.CONTROLLER_FENCED_MASTER_EPOCH, f"masterEpoch {master_epoch} is stale: "
                                  f"{broker_name!r} is at {st.masterEpoch}")
        if sync_state_set_epoch != st.syncStateSetEpoch:
            raise ControllerError(codes.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH, f"syncStateSetEpoch "
                                  f"{sync_state_set_epoch} is stale: {broker_name!r} is at {st.syncStateSetEpoch}")
        if new_set == st.syncStateSet:
            raise ControllerError(codes.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                                  f"the SyncStateSet of {broker_name!r} is already {sorted(new_set)}")
        for b in sorted(new_set):
            if b not in info.brokerIdInfo:
                raise ControllerError(codes.CONTROLLER_INVALID_REPLICAS,
                                      f"broker {b} was never handed out in group {broker_name!r}")
            if not alive(b):
                raise ControllerError(codes.CONTROLLER_BROKER_NOT_ALIVE,
                                      f"broker {b} of {broker_name!r} is not alive (no recent heartbeat)")
        if master_id not in new_set:
            raise ControllerError(codes.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                                  f"the new SyncStateSet {sorted(new_set)} leaves out the master {master_id}")
        return AlterSyncStateSetEvent(brokerName=broker_name, syncStateSet=sorted(new_set))

    def clean_broker_data(self, broker_name: str, broker_ids: list[int] | None = None, clean_living: bool = False,
                          alive: Alive = lambda _id: True) -> CleanBrokerDataEvent:
        info, _ = self.group(broker_name, codes.CONTROLLER_INVALID_CLEAN_BROKER_METADATA)
        ids = list(info.brokerIdInfo) if broker_ids is None else broker_ids
        for b in ids:
            if b not in info.brokerIdInfo:
                raise ControllerError(codes.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                      f"broker id {b} was never handed out in group {broker_name!r}")
            if not clean_living and alive(b):
                raise ControllerError(codes.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, f"broker {b} of "
                                      f"{broker_name!r} is alive; clean it with isCleanLivingBroker=true")
        return CleanBrokerDataEvent(brokerName=broker_name, brokerIds=None if broker_ids is None else sorted(ids))

    # -- apply: on every controller, in log order -------------------------------------------------
    def apply(self, event: AnyEvent) -> None:
        if isinstance(event, NoopEvent):
            return
        if isinstance(event, ApplyBrokerIdEvent):
            info = self.replicas.get(event.brokerName)
            if info is None:
                info = self.replicas[event.brokerName] = BrokerReplicaInfo(event.clusterName, event.brokerName)
                self.sync_states[event.brokerName] = SyncStateInfo()
            info.brokerIdInfo[event.brokerId] = event.brokerAddress
            info.nextAssignBrokerId = max(info.nextAssignBrokerId, event.brokerId + 1)
            return
        if event.brokerName not in self.replicas:
            # the checks never let such an event in; a log that has one is applied the same way
            # everywhere (ignored), as RocketMQ does
            log.error("event for unknown broker group %r ignored: %r", event.brokerName, event)
            return
        st = self.sync_states[event.brokerName]
        if isinstance(event, ElectMasterEvent):
            st.masterBrokerId = event.newMasterBrokerId
            st.masterEpoch += 1
            if event.newMasterBrokerId is not None:
                st.syncStateSet = {event.newMasterBrokerId}
                st.syncStateSetEpoch += 1
        elif isinstance(event, AlterSyncStateSetEvent):
            st.syncStateSet = set(event.syncStateSet)
            st.syncStateSetEpoch += 1
        elif isinstance(event, CleanBrokerDataEvent):
            if event.brokerIds is None:
                del self.replicas[event.brokerName]
                del self.sync_states[event.brokerName]
                return
            info = self.replicas[event.brokerName]
            for b in event.brokerIds:
                info.brokerIdInfo.pop(b, None)
                st.syncStateSet.discard(b)
                if st.masterBrokerId == b:
                    st.masterBrokerId = None
            if not info.brokerIdInfo:
                del self.replicas[event.brokerName]
                del self.sync_states[event.brokerName]
