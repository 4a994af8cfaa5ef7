"""ProducerManager: which connections the producers of each group are on (from heartbeats'
producerDataSet), so that the broker can ask one of them about a transaction
(CHECK_TRANSACTION_STATE). A producer leaves its group by UNREGISTER_CLIENT, by its connection
closing, or after channelExpiredTimeout of silence, as RocketMQ's ClientHousekeepingService."""
from __future__ import annotations

import logging
import random
import time

log = logging.getLogger("producers")


class ProducerManager:
    def __init__(self, expire_after: float = 120.0):
        self.groups: dict[str, dict[str, tuple[object, float]]] = {}  # group -> clientID -> (connection, last beat)
        self.expire_after = expire_after
        # connection -> the (group, clientID) its heartbeats named: a closing connection finds its
        # producers here, not by a scan of every group (5,000 clients hanging up at once took the
        # broker 3 s of scans, answering nothing meanwhile). An entry may be stale (the client left,
        # or its id moved to another connection): it is checked against `groups` when used.
        self._by_conn: dict[object, set[tuple[str, str]]] = {}

    def heartbeat(self, data: dict, conn, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        client_id = str(data.get("clientID") or "")
        for pd in data.get("producerDataSet") or []:
            name = pd.get("groupName")
            if name:
                clients = self.groups.setdefault(name, {})
                if client_id not in clients:
                    log.info("producer %s joined group %s", client_id, name)
                clients[client_id] = (conn, now)
                if conn is not None:
                    self._by_conn.setdefault(conn, set()).add((name, client_id))

    def unregister(self, client_id: str, group: str | None) -> None:
        clients = self.groups.get(group or "")
        if clients is not None and clients.pop(client_id, None) is not None:
            log.info("producer %s left group %s", client_id, group)
            if not clients:
                del self.groups[group]

    def connection_closed(self, conn) -> None:
        for name, cid in self._by_conn.pop(conn, ()):
            clients = self.groups.get(name)
            member = clients.get(cid) if clients is not None else None
            if member is None or member[0] is not conn:
                continue  # left before, or its heartbeats come on another connection now
            del clients[cid]
            log.info("producer %s left group %s (connection closed)", cid, name)
            if not clients:
                del self.groups[name]

    def scan_expired(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for name in list(self.groups):
            clients = self.groups[name]
            for cid in [c for c, (_, t) in clients.items() if now - t > self.expire_after]:
                del clients[cid]
                log.warning("producer %s of group %s silent for %.0fs: removed", cid, name, self.expire_after)
            if not clients:
                del self.groups[name]

    def find_channel(self, client_id: str):
        """The live connection of the producer with this client id, in any group (RocketMQ's
        ProducerManager.findChannel: where a request-reply reply is pushed); None if none."""
        for clients in self.groups.values():
            member = clients.get(client_id)
            if member is not None and getattr(member[0], "transport", None) is not None:
                return member[0]
        return None

    def available_channel(self, group: str):
        """A live connection of one of the group's producers, picked at random as RocketMQ's
        getAvailableChannel spreads checks; None when the group has none."""
        live = [cn for cn, _ in (self.groups.get(group) or {}).values()
                if cn is not None and getattr(cn, "transport", None) is not None]
        return random.choice(live) if live else None
