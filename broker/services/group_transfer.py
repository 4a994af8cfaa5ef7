"""GroupTransferService (SYNC_MASTER): a put is answered once a slave has acknowledged it.

The HA service (its own process) publishes the highest offset any slave confirmed in `acked`
and writes our eventfd. With no slave linked, or the best one haSlaveFallbehindMax or more
behind, the put is answered SLAVE_NOT_AVAILABLE at once, as RocketMQ's handleHA does; otherwise
FLUSH_SLAVE_TIMEOUT after syncFlushTimeout."""
from __future__ import annotations

import asyncio

from broker.services.offset_waiters import OffsetWaiters, Resolve
from broker.store.offset_table import Slot, slave_acks
from broker.store.results import PutStatus


class GroupTransferService:
    def __init__(self, table, loop: asyncio.AbstractEventLoop, timeout_ms: int, fall_behind_max: int):
        self.table = table
        self.fall_behind_max = fall_behind_max
        self.waiters = OffsetWaiters(loop, timeout_ms / 1000, PutStatus.FLUSH_SLAVE_TIMEOUT)

    def wait(self, end: int, resolve: Resolve, arg) -> None:
        t = self.table
        acked = t.load(Slot.ACKED)
        if acked >= end:
            resolve(arg, PutStatus.PUT_OK)
        elif not t.load(Slot.HA_SLAVES) or end - acked >= self.fall_behind_max:
            # no slave, or the best one too far behind to catch up within the timeout: say so now
            resolve(arg, PutStatus.SLAVE_NOT_AVAILABLE)
        else:
            self.waiters.add(end, resolve, arg)

    def confirmed(self) -> int:
        """The offset the slaves hold as this mode counts them: the best one's."""
        return self.table.load(Slot.ACKED)

    def on_wake(self) -> None:
        if self.waiters:
            self.waiters.complete(self.confirmed())

    def close(self) -> None:
        self.waiters.complete(self.confirmed())
        self.waiters.expire(force=True)
        self.waiters.close()


class SyncStateSetTransfer(GroupTransferService):
    """Controller mode (RocketMQ 5's AutoSwitch HA): a put is acknowledged once `inSyncReplicas`
    members of the SyncStateSet hold it, the master counting itself, or every member with
    allAckInSyncStateSet. The slaves' acknowledgements come per broker id (Slot.HA_SLAVE_BASE
    pairs). A member not linked holds nothing here, so the put waits, and times out with
    FLUSH_SLAVE_TIMEOUT unless the set shrinks first (the master asks the controller)."""

    def __init__(self, table, loop: asyncio.AbstractEventLoop, timeout_ms: int, config):
        super().__init__(table, loop, timeout_ms, config.haMaxGapNotInSync)
        self.all_ack = config.allAckInSyncStateSet
        self.in_sync_replicas = config.inSyncReplicas
        self.master_id = config.controllerBrokerId
        self.members: frozenset[int] = frozenset({self.master_id})

    def set_members(self, members) -> None:
        """The set a put needs acknowledgements from (while the set changes, the union of the old
        and the new: broker.server.controller.replicas_manager)."""
        self.members = frozenset(members) | {self.master_id}
        self.on_wake()

    def _slaves_needed(self) -> int:
        need = len(self.members) if self.all_ack else min(self.in_sync_replicas, len(self.members))
        return need - 1

    def confirmed(self) -> int:
        """The offset enough members hold (-1: none yet; a huge one when no slave is needed)."""
        need = self._slaves_needed()
        if need <= 0:
            return 2**63 - 1
        acks = slave_acks(self.table)
        held = sorted((acks.get(b, -1) for b in self.members if b != self.master_id), reverse=True)
        return held[need - 1] if len(held) >= need else -1

    def wait(self, end: int, resolve: Resolve, arg) -> None:
        if self.confirmed() >= end:
            resolve(arg, PutStatus.PUT_OK)
        else:
            self.waiters.add(end, resolve, arg)
