"""RebalanceLockManager: which client of a consumer group holds which queue (RocketMQ's noun),
for orderly consumers (LOCK_BATCH_MQ 41 / UNLOCK_BATCH_MQ 42).

A lock is the client's until `max_live_time` after its last grant or renewal (60 s, Java's
rocketmq.broker.rebalance.lockMaxLiveTime, broker.conf rebalanceLockMaxLiveTime here): a client
asking again renews it, and anyone may take a lock left that long, so a consumer killed without
unlocking holds its queues no longer than that. Its clients renew every 20 s and stop consuming
30 s after their last grant, well inside the broker's 60 s. Locks live in memory only, as Java's:
a restarted broker starts with none, and the clients' next renewal takes them again.
"""
from __future__ import annotations

import logging
import time

log = logging.getLogger("consumers")

REBALANCE_LOCK_MAX_LIVE_TIME = 60.0  # s


class RebalanceLockManager:
    def __init__(self, max_live_time: float = REBALANCE_LOCK_MAX_LIVE_TIME):
        self.max_live_time = max_live_time
        # group -> (topic, queueId) -> (clientId, monotonic time of the last grant); the queue is this
        # broker's, whatever brokerName a client calls it

        self.table: dict[str, dict[tuple[str, int], tuple[str, float]]] = {}

    def try_lock_batch(self, group: str, mqs: list[tuple[str, int]], client_id: str, now: float | None = None) -> list[tuple[str, int]]:
        """The queues of `mqs` now locked to `client_id`: its own (renewed), free ones and expired
        ones (taken over); a queue another client holds unexpired is left out."""
        now = time.monotonic() if now is None else now
        locks = self.table.setdefault(group, {})
        granted = []
        for mq in mqs:
            holder = locks.get(mq)
            if holder is not None and holder[0] != client_id:
                if now - holder[1] <= self.max_live_time:
                    continue
                log.warning("lock of %s in group %s expired from %s: now %s's", mq, group, holder[0], client_id)
            locks[mq] = (client_id, now)
            granted.append(mq)
        return granted

    def unlock_batch(self, group: str, mqs: list[tuple[str, int]], client_id: str) -> None:
        """Release the queues `client_id` holds; another client's lock is left alone."""
        locks = self.table.get(group)
        if not locks:
            return
        for mq in mqs:
            holder = locks.get(mq)
            if holder is not None and holder[0] == client_id:
                del locks[mq]
        if not locks:
            del self.table[group]
