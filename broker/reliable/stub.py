"""The message stub (the seed's 消息存根): what the outbox writes before it sends, and the states
it goes through.

    unconfirmed --(a consumer's handler committed)----------------> confirmed
    unconfirmed --(sends used up, consumer past it, unconfirmed)--> manual
    manual      --(a late consumer success / confirm())-----------> confirmed
    manual, voided --(requeue(): count back to 0, due now)--------> unconfirmed
    unconfirmed, manual --(void())--------------------------------> voided

`count` is how many times the stub reached the broker; `queue`/`queue_offset` are those of the
latest send (from its SendResult); `next_resend_at` is when the resend worker looks at it next.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from broker.client.message import Message

UNCONFIRMED, CONFIRMED, VOIDED, MANUAL = "unconfirmed", "confirmed", "voided", "manual"
STATUSES = (UNCONFIRMED, CONFIRMED, VOIDED, MANUAL)

# operator transitions: wanted status -> the statuses it may come from
TRANSITIONS = {
    CONFIRMED: (UNCONFIRMED, MANUAL),
    VOIDED: (UNCONFIRMED, MANUAL),
    UNCONFIRMED: (MANUAL, VOIDED),  # requeue
}


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Stub:
    id: str
    outbox: str  # the producer group whose resend worker owns it
    topic: str
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)  # the user's, RELIABLE_ID included
    tags: str | None = None
    keys: str | None = None
    flag: int = 0
    delay_level: int = 0
    count: int = 0
    status: str = UNCONFIRMED
    broker_name: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    next_resend_at: int = 0
    created_at: int = 0
    updated_at: int = 0
    confirmed_at: int | None = None
    last_error: str | None = None

    COLUMNS = ("id", "outbox", "topic", "body", "properties", "tags", "keys", "flag", "delay_level", "count",
               "status", "broker_name", "queue_id", "queue_offset", "next_resend_at", "created_at", "updated_at",
               "confirmed_at", "last_error")

    @classmethod
    def from_message(cls, rid: str, outbox: str, msg: Message, next_resend_at: int) -> Stub:
        keys = msg.keys if isinstance(msg.keys, str) or msg.keys is None else " ".join(msg.keys)
        t = now_ms()
        return cls(rid, outbox, msg.topic, bytes(msg.body), dict(msg.properties), msg.tags, keys, msg.flag,
                   msg.delay_level, next_resend_at=next_resend_at, created_at=t, updated_at=t)

    def message(self) -> Message:
        return Message(self.topic, self.body, tags=self.tags, keys=self.keys, properties=dict(self.properties),
                       delay_level=self.delay_level, flag=self.flag)

    def row(self) -> tuple:
        return (self.id, self.outbox, self.topic, self.body, json.dumps(self.properties), self.tags, self.keys,
                self.flag, self.delay_level, self.count, self.status, self.broker_name, self.queue_id,
                self.queue_offset, self.next_resend_at, self.created_at, self.updated_at, self.confirmed_at,
                self.last_error)

    @classmethod
    def from_row(cls, row) -> Stub:
        values = list(row)
        values[3] = bytes(values[3])
        values[4] = json.loads(values[4])
        return cls(*values)
