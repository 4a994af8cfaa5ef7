"""ConsumerManager: who is in which consumer group (from heartbeats), for rebalancing (the
producer groups are broker.server.client.producer_manager's).

A client is keyed by its clientID within a group and tied to the connection its heartbeat came
on: the connection closing or 120 s of silence removes it, as RocketMQ's ClientHousekeepingService.
"""
from __future__ import annotations

import logging
import time

from broker.server.filter.expression_filter import tag_hashes_of

log = logging.getLogger("consumers")


class ConsumerGroupInfo:
    __slots__ = ("group", "clients", "subscriptions", "consume_from_where", "message_model", "consume_type")

    def __init__(self, group: str):
        self.group = group
        self.clients: dict[str, tuple[object, float]] = {}  # clientID -> (connection, last heartbeat)
        self.subscriptions: dict[str, dict] = {}  # topic -> SubscriptionData
        self.consume_from_where = None
        self.message_model = None
        self.consume_type = None


class ConsumerManager:
    def __init__(self, expire_after: float = 120.0):
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self.expire_after = expire_after
        # connection -> the (group, clientID) its heartbeats named, so that a closing connection
        # costs its own members, not a scan of every group (see ProducerManager._by_conn)
        self._by_conn: dict[object, set[tuple[str, str]]] = {}

    def heartbeat(self, data: dict, conn, now: float | None = None) -> list[str]:
        """Register a HeartbeatData; returns the groups whose membership changed."""
        now = time.monotonic() if now is None else now
        client_id = str(data.get("clientID") or "")
        changed = []
        for cd in data.get("consumerDataSet") or []:
            name = cd.get("groupName")
            if not name:
                continue
            g = self.groups.get(name)
            if g is None:
                g = self.groups[name] = ConsumerGroupInfo(name)
            if client_id not in g.clients:
                changed.append(name)
                log.info("consumer %s joined group %s", client_id, name)
            g.clients[client_id] = (conn, now)
            if conn is not None:
                self._by_conn.setdefault(conn, set()).add((name, client_id))
            g.consume_from_where = cd.get("consumeFromWhere")
            g.message_model = cd.get("messageModel")
            g.consume_type = cd.get("consumeType")
            for sd in cd.get("subscriptionDataSet") or []:
                if sd.get("topic"):
                    g.subscriptions[sd["topic"]] = sd
        if conn is not None:
            conn.attrs.setdefault("client_ids", set()).add(client_id)
        return changed

    def unregister(self, client_id: str, consumer_group: str | None) -> None:
        if consumer_group and consumer_group in self.groups:
            g = self.groups[consumer_group]
            if g.clients.pop(client_id, None) is not None:
                log.info("consumer %s left group %s", client_id, consumer_group)
            if not g.clients:
                del self.groups[consumer_group]

    def connection_closed(self, conn) -> list[str]:
        """Forget the clients of a closed connection; returns the groups that still have members
        and lost some (they are told to rebalance)."""
        changed = []
        for name, cid in sorted(self._by_conn.pop(conn, ())):
            g = self.groups.get(name)
            member = g.clients.get(cid) if g is not None else None
            if member is None or member[0] is not conn:
                continue  # left before, or its heartbeats come on another connection now
            del g.clients[cid]
            log.info("consumer %s left group %s (connection closed)", cid, name)
            if not g.clients:
                del self.groups[name]
                if name in changed:
                    changed.remove(name)
            elif name not in changed:
                changed.append(name)
        return changed

    def scan_expired(self, now: float | None = None) -> list[str]:
        """Forget clients silent for expire_after; returns the groups that still have members and
        lost some."""
        now = time.monotonic() if now is None else now
        changed = []
        for name in list(self.groups):
            g = self.groups[name]
            gone = [c for c, (_, t) in g.clients.items() if now - t > self.expire_after]
            for cid in gone:
                del g.clients[cid]
                log.warning("consumer %s of group %s silent for %.0fs: removed", cid, name, self.expire_after)
            if not g.clients:
                del self.groups[name]
            elif gone:
                changed.append(name)
        return changed

    def client_ids(self, group: str) -> list[str]:
        g = self.groups.get(group)
        return sorted(g.clients) if g else []

    def subscription(self, group: str, topic: str) -> dict | None:
        """The SubscriptionData the group's heartbeat registered for a topic, if any."""
        g = self.groups.get(group)
        return g.subscriptions.get(topic) if g else None

    def tag_hashes(self, group: str, topic: str) -> set[int] | None:
        """The group's tag filter for a topic from its heartbeat (None: every message). Only for a
        TAG subscription: the pull refuses any other type first (expression_type.registered_filter)."""
        sd = self.subscription(group, topic)
        if not sd:
            return None
        sub = str(sd.get("subString") or "*").strip()
        if sub in ("", "*"):
            return None
        code_set = sd.get("codeSet")
        if code_set:
            return {int(c) for c in code_set}
        return tag_hashes_of(sub)
