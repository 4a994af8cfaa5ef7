"""Messages as a producer builds them and as a consumer receives them.

Properties travel as RocketMQ's `key\\x01value\\x02` string; TAGS, KEYS, DELAY, WAIT and UNIQ_KEY
are the well-known keys. A pulled FOUND body is the broker's stored records back to back; the
pulled-records kernel reads them into MessageExt views, and a body the producer compressed
(sysFlag bit value 1, zlib as Java's Deflater writes it) is inflated there, since compression is
end to end.
"""
from __future__ import annotations

import itertools
import os
import socket
import time
import zlib
from dataclasses import dataclass, field

from broker.client.errors import ClientError
from broker.kernels import client_codec as _codec
from broker.kernels import pulled as _pulled
from broker.store.message import decode_properties, encode_properties

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


# One pulled message: a view of the pulled bytes made by the pulled-records kernel (body made on
# first access, body_view without a copy, properties parsed on first use); MessageExt(topic,
# body, ...) builds one from fields.
MessageExt = _pulled.MessageExt


def decode_messages(body, broker_name: str = "") -> list[MessageExt]:
    """A PULL_MESSAGE FOUND body → its messages, bodies inflated when the producer compressed
    them. The records are read by the kernel (broker.kernels.pulled), one view each."""
    try:
        return _pulled.decode_records(body, broker_name)
    except _pulled.PulledRecordsError as e:
        raise MessageDecodeError(str(e)) from None


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
# the client kernel makes the keys (render_send sets UNIQ_KEY in C): one generator, one counter
_codec.uniq_key_setup(_ID_PREFIX, _START_MS)
new_uniq_key = _codec.new_uniq_key
