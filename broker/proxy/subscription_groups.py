"""The consumer groups' configs as the brokers keep them (GET_SUBSCRIPTIONGROUP_CONFIG, 352), for
the Java proxy's two uses: a FIFO group (consumeMessageOrderly) is answered fifo=true in its
clients' Settings, with max attempts retryMaxTimes + 1, and popped in order. Each answer is kept
a few seconds (the Java proxy caches its metadata too), so a receive costs no extra round trip;
a group changed with `broker admin updateSubGroup` reaches the front within that time."""
from __future__ import annotations

import logging
import time

from broker.client.admin import Admin
from broker.client.client_instance import MQClientInstance

log = logging.getLogger("proxy")
CACHE_SECONDS = 5.0
NOT_CACHED = object()  # peek: nothing fresh is known of the group


class SubscriptionGroups:
    def __init__(self, client: MQClientInstance, ttl: float = CACHE_SECONDS):
        self.admin = Admin(client=client)
        self.ttl = ttl
        self._cache: dict[tuple[str, str], tuple[float, dict | None]] = {}

    async def get(self, addr: str, group: str) -> dict | None:
        """The group's SubscriptionGroupConfig on the broker at `addr`, None when it has none (a
        group made on first use is RocketMQ's default: not FIFO) or cannot say."""
        now = time.monotonic()
        hit = self._cache.get((addr, group))
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            cfg = await self.admin.sub_group(addr, group)
        except Exception as e:  # noqa: BLE001 - an older broker, or one unreachable: not FIFO
            log.info("no subscription group config of %s from %s: %s", group, addr, e)
            cfg = None
        self._cache[(addr, group)] = (now + self.ttl, cfg)
        return cfg

    def peek(self, addr: str, group: str):
        """get's answer while it is cached and fresh, without waiting (a receive's fast path): the
        config or None; NOT_CACHED otherwise."""
        hit = self._cache.get((addr, group))
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        return NOT_CACHED

    async def of_topic(self, group: str, topic: str) -> dict | None:
        """The group's config on the first master of `topic`'s route (a client's Settings name
        the topics it subscribes, not a broker)."""
        try:
            route = await self.admin.client.routes.get(topic)
            addrs = sorted(route.broker_addrs().values())
        except Exception as e:  # noqa: BLE001 - no route yet: the defaults
            log.info("no route of %s for the settings of %s: %s", topic, group, e)
            return None
        return await self.get(addrs[0], group) if addrs else None


def orderly(cfg: dict | None) -> bool:
    return bool(cfg and cfg.get("consumeMessageOrderly"))
