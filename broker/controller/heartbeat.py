"""BrokerHeartbeatManager: which brokers are alive, from their BROKER_HEARTBEATs (RocketMQ's
DefaultBrokerHeartbeatManager).

Kept in memory on every controller, never replicated: brokers heartbeat to all the controllers
(as RocketMQ's brokers do), so a newly elected controller leader knows who lives without a log
entry per heartbeat. A broker is alive while its last heartbeat is younger than the timeout it
announced (heartbeatTimeoutMills, the broker's controllerHeartBeatTimeoutMills).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable


@dataclass
class BrokerLiveInfo:
    brokerName: str
    brokerId: int
    brokerAddr: str
    lastUpdate: float  # clock() seconds
    timeoutMs: int
    epoch: int = 0
    maxOffset: int = 0
    confirmOffset: int = 0
    electionPriority: int = 2**31 - 1  # RocketMQ's default: the lowest priority


class BrokerHeartbeatManager:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.live: dict[tuple[str, int], BrokerLiveInfo] = {}
        # the connection of each one's last heartbeat, and how many heartbeats it carried
        self.channels: dict[tuple[str, int], tuple[object, int]] = {}

    def on_heartbeat(self, info: BrokerLiveInfo, channel=None) -> None:
        key = info.brokerName, info.brokerId
        self.live[key] = info
        if channel is not None:
            c, n = self.channels.get(key, (None, 0))
            self.channels[key] = (channel, n + 1 if c is channel else 1)

    def on_channel_close(self, channel) -> list[tuple[str, int]]:
        """RocketMQ's onBrokerChannelClose: a broker whose heartbeat connection closed (its process
        died: the kernel closed the socket) is inactive at once, not a heartbeat timeout later.
        Only a connection that carried two heartbeats or more counts: a broker keeps its heartbeat
        connection open, while a tool that heartbeats once per connection closes each at once.
        Returns the (group, id) that went."""
        gone = [k for k, (c, n) in self.channels.items() if c is channel and n >= 2]
        for k in [k for k, (c, _) in self.channels.items() if c is channel]:
            del self.channels[k]
        for k in gone:
            info = self.live.get(k)
            if info is not None:
                info.lastUpdate = float("-inf")
        return gone

    def is_alive(self, broker_name: str, broker_id: int) -> bool:
        info = self.live.get((broker_name, broker_id))
        return info is not None and (self.clock() - info.lastUpdate) * 1000 < info.timeoutMs

    def alive_fn(self, broker_name: str) -> Callable[[int], bool]:
        return lambda broker_id: self.is_alive(broker_name, broker_id)

    def rank_fn(self, broker_name: str) -> Callable[[int], tuple]:
        """The elect policy's order (RocketMQ's DefaultElectPolicy comparator): the highest epoch,
        then the longest log, then the best (lowest) electionPriority; the id breaks ties."""
        def rank(broker_id: int) -> tuple:
            info = self.live.get((broker_name, broker_id))
            if info is None:
                return (1, 0, 0, 0, broker_id)
            return (0, -info.epoch, -info.maxOffset, info.electionPriority, broker_id)
        return rank

    def forget(self, broker_name: str, broker_ids=None) -> None:
        for key in [k for k in self.live if k[0] == broker_name and (broker_ids is None or k[1] in broker_ids)]:
            del self.live[key]
            self.channels.pop(key, None)
