"""A timer message's recall handle (RocketMQ 5.3's RecallMessageHandle.HandleV1): the URL-safe
base64 of "v1 <topic> <brokerName> <timestamp> <UNIQ_KEY>", where timestamp is the message's
TIMER_OUT_MS + 1 (a time in the slot it waits in). The broker's send reply carries it; a
RECALL_MESSAGE (or the gRPC RecallMessage) gives it back to take the message back."""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

VERSION_1 = "v1"


class BadRecallHandle(ValueError):
    """A handle that is not one a broker made; the words are RocketMQ's."""

    def __init__(self) -> None:
        super().__init__("recall handle is invalid")


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    timestamp: str
    message_id: str

    def encode(self) -> str:
        raw = " ".join((VERSION_1, self.topic, self.broker_name, self.timestamp, self.message_id))
        return base64.urlsafe_b64encode(raw.encode()).decode()

    @staticmethod
    def decode(handle: str) -> "RecallHandle":
        if not handle:
            raise BadRecallHandle()
        try:
            # padded or not: Java's URL decoder takes both
            raw = base64.urlsafe_b64decode(handle.encode() + b"=" * (-len(handle) % 4)).decode()
        except (binascii.Error, UnicodeError, ValueError):
            raise BadRecallHandle() from None
        items = raw.split(" ")
        if items[0] != VERSION_1 or len(items) < 5:
            raise BadRecallHandle()
        return RecallHandle(items[1], items[2], items[3], items[4])


def delete_key(real_topic: str, uniq_key: str) -> str:
    """TimerMessageStore.buildDeleteKey: what a recall's TIMER_DEL_UNIQKEY names."""
    return f"{real_topic}+{uniq_key}"
