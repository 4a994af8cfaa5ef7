"""GrpcChannelManager: the Telemetry streams of connected 5.x clients, by client id, with the
Settings each declared. A producer's stream is how the front reaches it unasked: the broker's
CHECK_TRANSACTION_STATE for a half message becomes a recover_orphaned_transaction_command on the
stream of a client that publishes the message's topic."""
from __future__ import annotations

import asyncio
import itertools
import logging

from broker.proxy.protocol import service_pb2 as spb

log = logging.getLogger("proxy")


class GrpcClientChannel:
    def __init__(self, client_id: str):
        self.client_id = client_id
        self.settings = None  # the client's Settings, as it last sent them
        self.out: asyncio.Queue = asyncio.Queue()  # TelemetryCommands to write on the stream

    @property
    def publishing_topics(self) -> set[str]:
        s = self.settings
        if s is None or not s.HasField("publishing"):
            return set()
        return {t.name for t in s.publishing.topics}

    def write(self, command: spb.TelemetryCommand) -> None:
        self.out.put_nowait(command)


class GrpcChannelManager:
    def __init__(self):
        self.channels: dict[str, GrpcClientChannel] = {}
        self._rr = itertools.count()

    def open(self, client_id: str) -> GrpcClientChannel:
        ch = self.channels[client_id] = GrpcClientChannel(client_id)
        return ch

    def close(self, channel: GrpcClientChannel) -> None:
        if self.channels.get(channel.client_id) is channel:
            del self.channels[channel.client_id]

    def end_all(self) -> None:
        """Shutdown: every Telemetry stream ends now (a None on its queue), so the server's grace
        period waits for calls in progress, not for idle streams that would last it out."""
        for ch in self.channels.values():
            ch.out.put_nowait(None)

    def drop(self, client_id: str) -> None:
        self.channels.pop(client_id, None)

    def publisher_of(self, topic: str) -> GrpcClientChannel | None:
        """A client publishing `topic`, round-robin among them (each check goes to one producer,
        as the broker's own check picks one channel of the group)."""
        found = [ch for ch in self.channels.values() if topic in ch.publishing_topics]
        if not found:
            return None
        return found[next(self._rr) % len(found)]

    def topics_published(self) -> set[str]:
        out: set[str] = set()
        for ch in self.channels.values():
            out |= ch.publishing_topics
        return out
