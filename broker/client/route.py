"""Topic routes: TopicRouteData as the name server answers GET_ROUTEINFO_BY_TOPIC (105), the
message queues it implies, and a cache that refetches a route every 30 s and at once when a send
through it failed (RocketMQ's MQClientInstance.updateTopicRouteInfoFromNameServer)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Awaitable, Callable

import msgspec

from broker.client.errors import RouteNotFound

PERM_READ, PERM_WRITE = 4, 2
MASTER_ID = "0"
ROUTE_TTL = 30.0


@dataclass(frozen=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


class _QueueData(msgspec.Struct):
    brokerName: str
    readQueueNums: int = 0
    writeQueueNums: int = 0
    perm: int = 6


class _BrokerData(msgspec.Struct):
    brokerName: str
    cluster: str = ""
    brokerAddrs: dict[str, str] = {}


class TopicRoute(msgspec.Struct):
    queueDatas: list[_QueueData] = []
    brokerDatas: list[_BrokerData] = []

    def master_addr(self, broker_name: str) -> str | None:
        for bd in self.brokerDatas:
            if bd.brokerName == broker_name:
                return bd.brokerAddrs.get(MASTER_ID)
        return None

    def broker_addrs(self) -> dict[str, str]:
        """brokerName → master address, for every broker of the route that has one."""
        return {bd.brokerName: bd.brokerAddrs[MASTER_ID] for bd in self.brokerDatas if MASTER_ID in bd.brokerAddrs}

    def write_queues(self, topic: str) -> list[MessageQueue]:
        """Queues a producer may send to: writable, on a broker with a master (sorted, as Java's
        topicRouteData2TopicPublishInfo sorts queueDatas by broker name)."""
        masters = self.broker_addrs()
        return [MessageQueue(topic, qd.brokerName, i)
                for qd in sorted(self.queueDatas, key=lambda q: q.brokerName)
                if qd.perm & PERM_WRITE and qd.brokerName in masters for i in range(qd.writeQueueNums)]

    def read_queues(self, topic: str) -> list[MessageQueue]:
        return sorted(MessageQueue(topic, qd.brokerName, i)
                      for qd in self.queueDatas if qd.perm & PERM_READ for i in range(qd.readQueueNums))

    def to_json(self) -> dict:
        return msgspec.to_builtins(self)


def parse_route(topic: str, body) -> TopicRoute:
    try:
        return msgspec.json.decode(bytes(body), type=TopicRoute)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise RouteNotFound(topic, f"unreadable TopicRouteData: {e}") from None


def single_broker_route(broker_name: str, addr: str, read: int, write: int, perm: int = 6) -> TopicRoute:
    """The route of a topic served by one broker given by address (no name server)."""
    return TopicRoute([_QueueData(broker_name, read, write, perm)], [_BrokerData(broker_name, "", {MASTER_ID: addr})])


class RouteCache:
    """topic → (route, fetched at); `fetch` asks the name server (or the broker) for one route."""

    def __init__(self, fetch: Callable[[str], Awaitable[TopicRoute]], ttl: float = ROUTE_TTL):
        self.fetch = fetch
        self.ttl = ttl
        # entries are replaced or dropped, the dict never: a producer's FastTopic keeps it and its entry
        self.routes: dict[str, tuple[TopicRoute, float]] = {}

    async def get(self, topic: str, refresh: bool = False) -> TopicRoute:
        hit = self.routes.get(topic)
        if hit is not None and not refresh and time.monotonic() - hit[1] < self.ttl:
            return hit[0]
        route = await self.fetch(topic)
        self.routes[topic] = (route, time.monotonic())
        return route

    def peek(self, topic: str) -> TopicRoute | None:
        """The cached route while it is fresh, without waiting (a send's fast path); None otherwise."""
        hit = self.routes.get(topic)
        if hit is not None and time.monotonic() - hit[1] < self.ttl:
            return hit[0]
        return None

    def invalidate(self, topic: str) -> None:
        """After a failed send: the next use refetches (a broker may have gone or moved)."""
        self.routes.pop(topic, None)

    def known_broker_addrs(self) -> set[str]:
        return {a for route, _ in self.routes.values() for a in route.broker_addrs().values()}
