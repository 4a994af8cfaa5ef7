"""ProcessQueue: what a push consumer knows of one queue it holds (RocketMQ's noun).

`dropped` says the queue went to another member (or the consumer is stopping): its worker takes
no new message. For an orderly consumer it also carries the queue's broker lock as this client
last saw it: `locked` and when it was last granted. The broker keeps a lock for 60 s after its
last renewal (RebalanceLockManager); the client renews every 20 s and trusts a grant for only
30 s (ProcessQueue.REBALANCE_LOCK_MAX_LIVE_TIME), so a client cut off from its broker stops
consuming well before the broker could hand the queue to another member. `consume_lock` is held
while the listener has a message of this queue in hand: a rebalance that takes the queue away
waits on it, so that message is finished and its offset counted before the offset is committed
and the lock released.
"""
from __future__ import annotations

import asyncio
import time

REBALANCE_LOCK_MAX_LIVE_TIME = 30.0  # s: rocketmq.client.rebalance.lockMaxLiveTime
REBALANCE_LOCK_INTERVAL = 20.0  # s: rocketmq.client.rebalance.lockInterval


class ProcessQueue:
    __slots__ = ("dropped", "locked", "last_lock_timestamp", "consume_lock")

    def __init__(self) -> None:
        self.dropped = False
        self.locked = False
        self.last_lock_timestamp = 0.0  # time.monotonic() of the last grant
        self.consume_lock = asyncio.Lock()

    def lock_granted(self) -> None:
        self.locked = True
        self.last_lock_timestamp = time.monotonic()

    def is_lock_expired(self, max_live_time: float = REBALANCE_LOCK_MAX_LIVE_TIME) -> bool:
        return time.monotonic() - self.last_lock_timestamp > max_live_time

    def may_consume(self, max_live_time: float = REBALANCE_LOCK_MAX_LIVE_TIME) -> bool:
        """Locked, and the grant recent enough to still be this client's at the broker."""
        return self.locked and not self.is_lock_expired(max_live_time)
