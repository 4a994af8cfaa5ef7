"""Messages as a producer builds them and as a consumer receives them.

Properties travel as RocketMQ's `key\\x01value\\x02` string; TAGS, KEYS, DELAY, WAIT and UNIQ_KEY
are the well-known keys. A pulled FOUND body is the broker's stored records back to back; they
are decoded by the store's own record decoder, and a body the producer compressed (sysFlag bit
value 1, zlib as Java's Deflater writes it) is inflated here, since compression is end to end.
"""
from __future__ import annotations

import itertools
import os
import socket
import time
import zlib
from dataclasses import dataclass, field

from broker.client.errors import ClientError
from broker.store.errors import StoreError
from broker.store.message import decode_message, decode_properties, encode_properties

COMPRESSED_FLAG = 0x1  # MessageSysFlag.COMPRESSED_FLAG
PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_DELAY = "TAGS", "KEYS", "DELAY"
PROPERTY_WAIT, PROPERTY_UNIQ_KEY = "WAIT", "UNIQ_KEY"
PROPERTY_RETRY_TOPIC, PROPERTY_ORIGIN_MESSAGE_ID = "RETRY_TOPIC", "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"


class MessageDecodeError(ClientError):
    """A pulled body that is not a run of whole stored records."""


@dataclass
class Message:
    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    flag: int = 0

    def wire_properties(self) -> dict[str, str]:
        """The properties as sent: the user's plus TAGS/KEYS/DELAY/WAIT (the user's win no clash
        with these, as in Java where setTags/setKeys write the same map)."""
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            props[PROPERTY_KEYS] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_level > 0:
            props[PROPERTY_DELAY] = str(self.delay_level)
        props.setdefault(PROPERTY_WAIT, "true")
        return props


@dataclass
class MessageExt:
    """One pulled message. `msg_id` is the broker's offsetMsgId (store host, port, commit-log
    offset as 32 hex digits); the producer's id is `uniq_key`."""
    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    msg_id: str
    properties: dict[str, str]
    reconsume_times: int = 0
    born_timestamp: int = 0
    store_timestamp: int = 0
    born_host: str = ""
    store_host: str = ""
    sys_flag: int = 0
    flag: int = 0
    broker_name: str = ""

    @property
    def offset_msg_id(self) -> str:
        return self.msg_id

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def retry_topic(self) -> str | None:
        return self.properties.get(PROPERTY_RETRY_TOPIC)


def decode_messages(body, broker_name: str = "") -> list[MessageExt]:
    """A PULL_MESSAGE FOUND body → its messages, bodies inflated when the producer compressed them."""
    out = []
    pos, n = 0, len(body)
    while pos < n:
        try:
            m = decode_message(body, pos)
        except StoreError as e:
            raise MessageDecodeError(f"pulled body is corrupt at byte {pos}: {e}") from None
        data = m.body
        if m.sys_flag & COMPRESSED_FLAG:
            try:
                data = zlib.decompress(data)
            except zlib.error as e:
                raise MessageDecodeError(f"message {m.msg_id} is flagged compressed but does not inflate: {e}") from None
        out.append(MessageExt(m.topic, data, m.queue_id, m.queue_offset, m.physical_offset, m.msg_id, m.properties,
                              m.reconsume_times, m.born_timestamp, m.store_timestamp, m.born_host, m.store_host,
                              m.sys_flag, m.flag, broker_name))
        pos += m.size
    return out


def properties_string(props: dict[str, str]) -> str:
    return encode_properties(props).decode()


def parse_properties(text: str) -> dict[str, str]:
    return decode_properties(text.encode())


# -- unique ids (MessageClientIDSetter: ip, pid, a per-process random, time since start, counter) --
def _local_ip() -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return socket.inet_aton("127.0.0.1")


_ID_PREFIX = (_local_ip() + (os.getpid() & 0xFFFF).to_bytes(2, "big") + os.urandom(4)).hex().upper()
_START_MS = int(time.time() * 1000)
_counter = itertools.count()


def new_uniq_key() -> str:
    """32 hex digits, unique per process and ms-ordered, as Java's producer sets UNIQ_KEY."""
    t = (int(time.time() * 1000) - _START_MS) & 0xFFFFFFFF
    return _ID_PREFIX + f"{t:08X}{next(_counter) & 0xFFFF:04X}"
