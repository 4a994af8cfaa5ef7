"""RouteInfoManager: what the name server knows — clusters, brokers, their topics' queues, and
which brokers are alive (RocketMQ namesrv/routeinfo/RouteInfoManager.java, 4.x).

Pure bookkeeping: no sockets. A broker's "channel" is whatever object the processor binds it to
(its registering connection); the clock is injectable so that the 120 s expiry can be tested
without waiting two minutes.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

log = logging.getLogger("namesrv")

MASTER_ID = 0
BROKER_EXPIRED_SECONDS = 120.0  # RocketMQ's BROKER_CHANNEL_EXPIRED_TIME: 4 missed 30 s registrations
DEFAULT_TOPIC = "TBW102"  # brokers with autoCreateTopicEnable register it; new topics inherit from it
RETRY_PREFIX = "%RETRY%"
PERM_READ, PERM_WRITE = 4, 2


class RouteError(ValueError):
    """A registration the name server cannot take (bad address, id, queue counts)."""


class TopicQueues(NamedTuple):
    """One topic as a broker registers it (the part of its TopicConfig a route needs)."""
    readQueueNums: int
    writeQueueNums: int
    perm: int
    topicSysFlag: int = 0


@dataclass
class QueueData:
    brokerName: str
    readQueueNums: int
    writeQueueNums: int
    perm: int
    topicSysFlag: int = 0


@dataclass
class BrokerData:
    cluster: str
    brokerName: str
    brokerAddrs: dict[int, str] = field(default_factory=dict)  # brokerId -> "ip:port"; 0 = master


@dataclass
class BrokerLiveInfo:
    last_update: float
    ha_server_addr: str
    channel: object | None  # removal when it closes; None: known by its registrations alone


class RegisterResult(NamedTuple):
    """What a registering slave learns: its master and the master's HA address (None for a master)."""
    master_addr: str | None
    ha_server_addr: str | None


def check_addr(addr: str, what: str) -> None:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RouteError(f"{what} {addr!r} is not host:port")


class RouteInfoManager:
    def __init__(self, clock: Callable[[], float] = time.monotonic, auto_create_topic: bool = True,
                 default_topic_queue_nums: int = 4, expire_after: float = BROKER_EXPIRED_SECONDS):
        self.clock = clock
        self.auto_create_topic = auto_create_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self.expire_after = expire_after
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}  # topic -> brokerName -> queues
        self.broker_addr_table: dict[str, BrokerData] = {}  # brokerName -> its addresses by id
        self.cluster_addr_table: dict[str, set[str]] = {}  # cluster -> brokerNames
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}  # brokerAddr -> liveness

    # -- brokers coming and going ------------------------------------------------------------------
    def register_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int,
                        ha_server_addr: str = "", topics: dict[str, TopicQueues] | None = None,
                        channel: object | None = None) -> RegisterResult:
        """A broker's registration (first, or its 30 s heartbeat). `topics` None leaves its topics
        as they were (an empty body); a dict is its whole topic table, as the broker sends it."""
        if not cluster or not broker_name:
            raise RouteError("a registration needs clusterName and brokerName")
        check_addr(broker_addr, "brokerAddr")
        if broker_id < 0:
            raise RouteError(f"brokerId {broker_id} is negative")
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        data = self.broker_addr_table.get(broker_name)
        if data is None:
            data = self.broker_addr_table[broker_name] = BrokerData(cluster, broker_name)
        data.cluster = cluster
        # A slave promoted to master (or the reverse) comes back under a new id from the same
        # address: the old id must go, or the route would list one broker twice.
        for other_id in [i for i, a in data.brokerAddrs.items() if a == broker_addr and i != broker_id]:
            del data.brokerAddrs[other_id]
        first = data.brokerAddrs.get(broker_id) != broker_addr
        data.brokerAddrs[broker_id] = broker_addr
        if topics is not None and broker_id == MASTER_ID:  # a master's table is its broker name's queues
            self._replace_topics(broker_name, topics)
        elif topics is not None:
            # RocketMQ ignores a slave's topics. Here they fill in what the master never registered
            # (it died first): every topic the slave replicated stays routable without it.
            self._add_missing_topics(broker_name, topics)
        if first or broker_addr not in self.broker_live_table:
            log.info("broker %s (%s, id %d, cluster %s) registered with %d topics", broker_name, broker_addr,
                     broker_id, cluster, len(topics or {}))
        self.broker_live_table[broker_addr] = BrokerLiveInfo(self.clock(), ha_server_addr, channel)
        if broker_id != MASTER_ID:
            master = data.brokerAddrs.get(MASTER_ID)
            live = self.broker_live_table.get(master) if master else None
            if live is not None:
                return RegisterResult(master, live.ha_server_addr)
        return RegisterResult(None, None)

    def _replace_topics(self, broker_name: str, topics: dict[str, TopicQueues]) -> None:
        for topic, q in topics.items():
            self.topic_queue_table.setdefault(topic, {})[broker_name] = QueueData(
                broker_name, q.readQueueNums, q.writeQueueNums, q.perm, q.topicSysFlag)
        # the registration carries the broker's whole table: a topic it no longer has loses its queues
        for topic in [t for t, by in self.topic_queue_table.items() if broker_name in by and t not in topics]:
            self._drop_queues(topic, broker_name)

    def _add_missing_topics(self, broker_name: str, topics: dict[str, TopicQueues]) -> None:
        for topic, q in topics.items():
            by_broker = self.topic_queue_table.setdefault(topic, {})
            if broker_name not in by_broker:
                by_broker[broker_name] = QueueData(broker_name, q.readQueueNums, q.writeQueueNums, q.perm,
                                                   q.topicSysFlag)
                log.info("topic %s routed to %s from a slave's registration", topic, broker_name)

    def _drop_queues(self, topic: str, broker_name: str) -> None:
        by_broker = self.topic_queue_table.get(topic)
        if by_broker is not None:
            by_broker.pop(broker_name, None)
            if not by_broker:
                del self.topic_queue_table[topic]

    def delete_topic(self, topic: str, cluster: str = "") -> None:
        """DELETE_TOPIC_IN_NAMESRV (mqadmin deleteTopic, after the brokers deleted it): the topic's
        queues on the cluster's brokers leave its route; no cluster named: the whole route goes."""
        if not cluster:
            self.topic_queue_table.pop(topic, None)
            return
        for broker_name in self.cluster_addr_table.get(cluster, ()):
            self._drop_queues(topic, broker_name)

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> bool:
        """UNREGISTER_BROKER (a broker shutting down). False when it was not registered."""
        data = self.broker_addr_table.get(broker_name)
        known = self.broker_live_table.pop(broker_addr, None) is not None
        if data is not None and data.brokerAddrs.get(broker_id) == broker_addr:
            del data.brokerAddrs[broker_id]
            known = True
        if data is not None and not data.brokerAddrs:
            self._remove_broker_name(broker_name)
        if known:
            log.info("broker %s (%s, id %d, cluster %s) unregistered", broker_name, broker_addr, broker_id, cluster)
        return known

    def _remove_broker_name(self, broker_name: str) -> None:
        """The last address of a broker name is gone: its queues leave every route."""
        data = self.broker_addr_table.pop(broker_name, None)
        if data is not None:
            names = self.cluster_addr_table.get(data.cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[data.cluster]
        for topic in [t for t, by in self.topic_queue_table.items() if broker_name in by]:
            self._drop_queues(topic, broker_name)

    def _remove_addr(self, broker_addr: str, why: str) -> None:
        self.broker_live_table.pop(broker_addr, None)
        for name, data in list(self.broker_addr_table.items()):
            for bid in [i for i, a in data.brokerAddrs.items() if a == broker_addr]:
                del data.brokerAddrs[bid]
                log.warning("broker %s (%s, id %d) removed: %s", name, broker_addr, bid, why)
            if not data.brokerAddrs:
                self._remove_broker_name(name)

    def connection_closed(self, channel: object) -> None:
        """The connection a broker registered on closed (it died, or its host did)."""
        for addr in [a for a, live in self.broker_live_table.items() if live.channel is channel]:
            self._remove_addr(addr, "its connection closed")

    def scan_not_active_brokers(self) -> list[str]:
        """Removes brokers silent for `expire_after` seconds; returns their addresses."""
        deadline = self.clock() - self.expire_after
        gone = [a for a, live in self.broker_live_table.items() if live.last_update < deadline]
        for addr in gone:
            self._remove_addr(addr, f"no registration for {self.expire_after:g} s")
        return gone

    # -- what clients ask ---------------------------------------------------------------------------
    def pickup_topic_route(self, topic: str) -> dict | None:
        """TopicRouteData for GET_ROUTEINFO_BY_TOPIC, or None (TOPIC_NOT_EXIST)."""
        queues = self.topic_queue_table.get(topic)
        if not queues:
            queues = self._default_route(topic)
        if not queues:
            return None
        names = sorted(n for n in queues if n in self.broker_addr_table)
        if not names:
            return None
        # the shape of docs/formats.md §5; both clients sort by brokerName, so do we
        return {  # no orderTopicConf: RocketMQ's name server leaves it out (fastjson skips nulls)
            "queueDatas": [_queue_json(queues[n]) for n in names],
            "brokerDatas": [_broker_json(self.broker_addr_table[n]) for n in names],
            "filterServerTable": {},
        }

    def _default_route(self, topic: str) -> dict[str, QueueData]:
        """A route for a topic no broker has yet, so that a client's first send works: ali-ons
        throws out of send() on TOPIC_NOT_EXIST instead of falling back to TBW102 as Java and
        C++ do. It names the masters that would create the topic on that send (those holding
        TBW102) with defaultTopicQueueNums queues, capped by TBW102's as the Java client caps
        them. A consumer's %RETRY%<group> gets 1 queue on every master: brokers create retry
        topics themselves, whatever autoCreateTopicEnable says."""
        masters = {n: d for n, d in self.broker_addr_table.items() if MASTER_ID in d.brokerAddrs}
        if topic.startswith(RETRY_PREFIX):
            return {n: QueueData(n, 1, 1, PERM_READ | PERM_WRITE) for n in masters}
        if not self.auto_create_topic:
            return {}
        out = {}
        for name, tbw in self.topic_queue_table.get(DEFAULT_TOPIC, {}).items():
            if name in masters:
                n = min(self.default_topic_queue_nums, tbw.readQueueNums)
                if n > 0:
                    out[name] = QueueData(name, n, n, PERM_READ | PERM_WRITE)
        return out

    def cluster_info(self) -> dict:
        """ClusterInfo for GET_BROKER_CLUSTER_INFO."""
        return {"brokerAddrTable": {n: _broker_json(d) for n, d in sorted(self.broker_addr_table.items())},
                "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.cluster_addr_table.items())}}

    def topic_list(self) -> list[str]:
        return sorted(self.topic_queue_table)


def _queue_json(q: QueueData) -> dict:
    # topicSysFlag is the reference's (and RocketMQ 5's) name; 4.x Java reads topicSynFlag. No
    # client we serve reads either, and each Java version ignores the other's key, so both go out.
    return {"brokerName": q.brokerName, "readQueueNums": q.readQueueNums, "writeQueueNums": q.writeQueueNums,
            "perm": q.perm, "topicSysFlag": q.topicSysFlag, "topicSynFlag": q.topicSysFlag}


def _broker_json(d: BrokerData) -> dict:
    # quoted "0" keys, not fastjson's {0:...}: ali-ons' JSON2 and C++'s jsoncpp read both (§5)
    return {"cluster": d.cluster, "brokerName": d.brokerName,
            "brokerAddrs": {str(i): a for i, a in sorted(d.brokerAddrs.items())},
            # RocketMQ 5's slave-acting-master flag: this name server has no acting masters
            "enableActingMaster": False}
