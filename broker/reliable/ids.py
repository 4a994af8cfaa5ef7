"""The business id that keys idempotency.

The client's UNIQ_KEY (msgId) is new on every send, so a producer resend would look like a new
message; the outbox therefore puts its own id, stable across resends, in the user property
RELIABLE_ID (and in KEYS, so the broker's query-by-key finds every copy)."""
from __future__ import annotations

import uuid

from broker.client.message import Message, MessageExt

PROPERTY_RELIABLE_ID = "RELIABLE_ID"


def new_id() -> str:
    return uuid.uuid4().hex


def stamp(msg: Message, rid: str) -> Message:
    """A copy of `msg` carrying `rid` as RELIABLE_ID and among its keys (the caller's object is
    left alone: it may be reused for another send)."""
    props = dict(msg.properties)
    props[PROPERTY_RELIABLE_ID] = rid
    keys = msg.keys.split() if isinstance(msg.keys, str) else list(msg.keys or [])
    if rid not in keys:
        keys.append(rid)
    return Message(msg.topic, msg.body, tags=msg.tags, keys=keys, properties=props, delay_level=msg.delay_level,
                   flag=msg.flag)


def reliable_id(msg: MessageExt) -> str | None:
    return msg.properties.get(PROPERTY_RELIABLE_ID)
