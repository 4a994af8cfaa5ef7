"""The message type each topic takes (RocketMQ 5's `message.type` topic attribute), as the Java
proxy's MetadataService reads it: GET_TOPIC_CONFIG from a master of the topic, cached a few seconds.
A SendMessage of another type is refused MESSAGE_PROPERTY_CONFLICT_WITH_TYPE with the Java proxy's
words (enableTopicMessageTypeCheck), and QueryRoute lists the types a topic's queues accept. A topic
with no message.type (or one that cannot be asked) takes every type here (docs/compat.md)."""
from __future__ import annotations

import asyncio
import time

import msgspec

from broker.client.client_instance import MQClientInstance
from broker.common.topic_attributes import MESSAGE_TYPE, accepts, message_type_of
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.status import Code, ProxyError
from broker.remoting import codes
from broker.remoting.command import RemotingCommand

TTL_S = 5.0
_PB = {"NORMAL": [pb.NORMAL], "FIFO": [pb.FIFO], "DELAY": [pb.DELAY], "TRANSACTION": [pb.TRANSACTION]}
ALL_TYPES = [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
_SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%")  # topics every type may go to
_PLAIN: dict = {}  # the properties message_type_of reads, for a NORMAL message


class TopicTypes:
    def __init__(self, client: MQClientInstance, check: bool = True):
        self.client = client
        self.check = check  # enableTopicMessageTypeCheck
        self._cache: dict[str, tuple[float, str | None]] = {}
        self._normal: dict[str, float] = {}  # topic -> when its cached type, taking NORMAL, was read
        self._refreshing: dict = {}  # topic -> the task reading its expired type again (accepts_now)

    async def get(self, topic: str) -> str | None:
        hit = self._cache.get(topic)
        now = time.monotonic()
        if hit is not None and now - hit[0] < TTL_S:
            return hit[1]
        kind = None
        try:
            route = await self.client.routes.get(topic)
            addr = next(iter(route.broker_addrs().values()), None)
            if addr is not None:
                r = await self.client.invoke(addr, RemotingCommand.request(codes.GET_TOPIC_CONFIG, {"topic": topic}), 3)
                if r.code == codes.SUCCESS:
                    kind = (msgspec.json.decode(bytes(r.body)).get("attributes") or {}).get(MESSAGE_TYPE)
        except Exception:  # noqa: BLE001 - a topic that cannot be asked takes every type
            kind = None
        self._cache[topic] = (now, kind)
        return kind

    async def validate(self, topic: str, properties: dict) -> None:
        if not self.check or topic.startswith("%RETRY%") or topic.startswith("%DLQ%"):
            return
        expected = await self.get(topic)
        actual = message_type_of(properties)
        if not accepts(expected, actual):
            raise ProxyError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                             f"TopicMessageType validate failed, the expected type is {expected}, but actual type "
                             f"is {actual}")

    def accepts_now(self, topic: str, properties: dict) -> bool | None:
        """validate() without waiting: True when the message may go, None when the topic's type
        is not cached (or the message does not match: validate() then says why). A type cached
        longer than TTL_S still answers while one task reads it again, as a refresh-after-write
        cache does: the sends of that round trip do not each go the slow way and each ask the
        broker (64 GET_TOPIC_CONFIG at once, every TTL_S, under h2load's 64 streams)."""
        if not self.check or topic.startswith(_SYSTEM_PREFIXES):
            return True
        hit = self._cache.get(topic)
        if hit is None:
            return None
        if time.monotonic() - hit[0] >= TTL_S and not self._refresh_soon(topic):
            return None
        # an empty dict is the kernel's plain message (send_bytes_now): NORMAL without the lookups
        return True if accepts(hit[1], message_type_of(properties) if properties else "NORMAL") else None

    def takes_normal_now(self, topic: str) -> bool | None:
        """accepts_now(topic, {}) (a plain message, NORMAL) in one lookup while its type is fresh."""
        at = self._normal.get(topic)
        if at is not None and time.monotonic() - at < TTL_S:
            return True
        ok = self.accepts_now(topic, _PLAIN)
        hit = self._cache.get(topic)
        if ok and hit is not None:
            if len(self._normal) >= 4096:
                self._normal.clear()
            self._normal[topic] = hit[0]
        return ok

    def _refresh_soon(self, topic: str) -> bool:
        """The topic's type read again in a task (one at a time per topic); False outside a
        running loop (the caller then waits for get() itself)."""
        if topic not in self._refreshing:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return False
            self._refreshing[topic] = loop.create_task(self._refresh(topic))
        return True

    async def _refresh(self, topic: str) -> None:
        try:
            await self.get(topic)
        finally:
            self._refreshing.pop(topic, None)

    async def accepted(self, topic: str) -> list[int]:
        """QueryRoute's accept_message_types of the topic's queues."""
        return _PB.get(await self.get(topic) or "MIXED", ALL_TYPES)
