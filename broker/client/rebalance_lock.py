"""RebalanceLock: an orderly consumer's broker locks on its queues (RebalanceImpl.lock, lockAll,
unlock), through LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42).

In clustering mode an orderly consumer takes a queue only once the queue's broker has locked it to
this client (so two members never consume one queue, even while their rebalances disagree), renews
every lock it holds every 20 s, and releases a queue's lock as soon as it has committed the offset
of what it consumed there. A lock the broker refuses or that could not be renewed leaves the
queue's ProcessQueue unlocked: its worker consumes nothing until a later lock succeeds.
"""
from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Awaitable, Callable

from broker.client import api
from broker.client.client_instance import MQClientInstance
from broker.client.errors import ClientError
from broker.client.process_queue import REBALANCE_LOCK_INTERVAL, ProcessQueue
from broker.client.route import MessageQueue

log = logging.getLogger("client.consumer")

FIRST_LOCK_ALL_DELAY = 1.0  # s: ConsumeMessageOrderlyService.start schedules lockMQPeriodically at 1 s


class RebalanceLock:
    def __init__(self, client: MQClientInstance, group: str, addr_of: Callable[[MessageQueue], Awaitable[str]],
                 interval: float = REBALANCE_LOCK_INTERVAL):
        self.client = client
        self.group = group
        self.addr_of = addr_of
        self.interval = interval

    async def lock(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Lock one queue; True when the broker granted it (a failure to ask counts as refused)."""
        try:
            granted = await api.lock_batch_mq(self.client, await self.addr_of(mq), self.group, [mq])
        except ClientError as e:
            log.warning("%s: lock of %s failed: %s", self.group, mq, e)
            return False
        if mq in granted:
            pq.lock_granted()
            return True
        log.info("%s: %s is locked by another member", self.group, mq)
        return False

    async def lock_all(self, table: dict[MessageQueue, ProcessQueue]) -> None:
        """Renew the locks of every queue held, one request per broker; a queue left out of the
        answer is no longer ours to consume."""
        by_broker: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq, pq in list(table.items()):
            if not pq.dropped:
                by_broker[mq.broker_name].append(mq)
        for mqs in by_broker.values():
            try:
                granted = await api.lock_batch_mq(self.client, await self.addr_of(mqs[0]), self.group, mqs)
            except ClientError as e:  # the grants age meanwhile: past their live time the queues pause
                log.warning("%s: renewing the locks of %s failed: %s", self.group, mqs[0].broker_name, e)
                continue
            for mq in mqs:
                pq = table.get(mq)
                if pq is None:
                    continue
                if mq in granted:
                    pq.lock_granted()
                elif pq.locked:
                    pq.locked = False
                    log.warning("%s: the lock of %s was refused at renewal", self.group, mq)

    async def unlock(self, mq: MessageQueue) -> None:
        try:
            await api.unlock_batch_mq(self.client, await self.addr_of(mq), self.group, [mq])
        except ClientError as e:  # the broker lets the lock expire instead
            log.warning("%s: unlock of %s failed: %s", self.group, mq, e)

    async def run(self, table: dict[MessageQueue, ProcessQueue]) -> None:
        """lockMQPeriodically: renew the locks 1 s after start, then every `interval`."""
        await asyncio.sleep(min(FIRST_LOCK_ALL_DELAY, self.interval))
        while True:
            await self.lock_all(table)
            await asyncio.sleep(self.interval)
