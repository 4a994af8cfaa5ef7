"""PopCheckPoint and AckMsg: the bodies of the revive log's "ck" and "ack" messages, in RocketMQ's
JSON (fastjson's short names: store/pop/PopCheckPoint.java, AckMsg.java), so a revive topic
written here reads as RocketMQ's and the other way round."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import msgspec

# the records are written by msgspec (a tenth of json.dumps' time: a pop writes a checkpoint and an
# ack a batch-ack record per call); compact, keys in the order given, UTF-8 as fastjson writes it
_encode = msgspec.json.encode

CK_TAG, ACK_TAG, BATCH_ACK_TAG = "ck", "ack", "bAck"  # PopAckConstants
# an orderly pop's batch and its acks (ours: RocketMQ keeps them in consumerOrderInfo.json, which
# a kill -9 leaves up to flushConsumerOffsetInterval behind; a RocketMQ revive service skips them)
ORDER_CK_TAG, ORDER_ACK_TAG = "oCk", "oAck"


class CheckPointFormatError(ValueError):
    """A revive-log body that is not a checkpoint or ack (skipped by the revive service, logged)."""


@dataclass(slots=True)  # slots: made per pop and read per ack (attribute access without a dict)
class PopCheckPoint:
    start_offset: int
    pop_time: int
    invisible_time: int
    num: int
    queue_id: int
    topic: str
    group: str
    broker_name: str = ""
    diffs: list[int] = field(default_factory=list)  # each popped message's offset - start_offset
    bitmap: int = 0  # acked messages, by index into diffs (the JSON's "bm": always 0 when written)
    revive_offset: int = 0  # the ck message's offset in its revive queue (not in the JSON)
    rq: int = 0  # its revive queue (not in the JSON)
    attempt_id: str = ""  # an orderly pop's attemptId ("aid", ours: only in orderly records)

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    def offsets(self) -> list[int]:
        if not self.diffs:  # an old-format checkpoint: num consecutive offsets
            return [self.start_offset + i for i in range(self.num)]
        return [self.start_offset + d for d in self.diffs]

    def index_of(self, queue_offset: int) -> int:
        """indexOfAck: the message's index, -1 when this checkpoint did not pop it."""
        if queue_offset < self.start_offset:
            return -1
        if not self.diffs:
            d = queue_offset - self.start_offset
            return d if d < self.num else -1
        try:
            return self.diffs.index(queue_offset - self.start_offset)
        except ValueError:
            return -1

    def to_json(self) -> bytes:
        d = {"so": self.start_offset, "pt": self.pop_time, "it": self.invisible_time, "bm": 0, "n": self.num,
             "q": self.queue_id, "t": self.topic, "c": self.group, "ro": 0, "d": self.diffs, "bn": self.broker_name}
        if self.attempt_id:
            d["aid"] = self.attempt_id
        return _encode(d)

    @classmethod
    def from_json(cls, body: bytes) -> "PopCheckPoint":
        try:
            d = json.loads(body)
            return cls(int(d["so"]), int(d["pt"]), int(d["it"]), int(d["n"]), int(d["q"]), str(d["t"]), str(d["c"]),
                       str(d.get("bn") or ""), [int(x) for x in d.get("d") or []], attempt_id=str(d.get("aid") or ""))
        except (ValueError, KeyError, TypeError) as e:
            raise CheckPointFormatError(f"not a checkpoint: {e}") from None


@dataclass(slots=True)
class AckMsg:
    ack_offset: int
    start_offset: int
    group: str
    topic: str
    queue_id: int
    pop_time: int
    broker_name: str = ""

    def to_json(self) -> bytes:
        return _encode({"ao": self.ack_offset, "so": self.start_offset, "c": self.group, "t": self.topic,
                        "q": self.queue_id, "pt": self.pop_time, "bn": self.broker_name})

    @classmethod
    def from_json(cls, body: bytes) -> "AckMsg":
        try:
            d = json.loads(body)
            return cls(int(d["ao"]), int(d["so"]), str(d["c"]), str(d["t"]), int(d["q"]), int(d["pt"]),
                       str(d.get("bn") or ""))
        except (ValueError, KeyError, TypeError) as e:
            raise CheckPointFormatError(f"not an ack: {e}") from None


@dataclass(slots=True)
class BatchAckMsg:
    """Several acks of one checkpoint in one revive-log record (RocketMQ's BatchAckMsg, tag bAck):
    a batch of 32 popped messages acked together is one record, not 32."""
    ack_offsets: list[int]
    start_offset: int
    group: str
    topic: str
    queue_id: int
    pop_time: int
    broker_name: str = ""

    def to_json(self) -> bytes:
        return _encode({"aol": self.ack_offsets, "so": self.start_offset, "c": self.group, "t": self.topic,
                        "q": self.queue_id, "pt": self.pop_time, "bn": self.broker_name})

    @classmethod
    def from_json(cls, body: bytes) -> "BatchAckMsg":
        try:
            d = json.loads(body)
            offsets = d.get("aol", d.get("ackOffsetList"))
            if not isinstance(offsets, list):
                raise TypeError("no ackOffsetList")
            return cls([int(o) for o in offsets], int(d["so"]), str(d["c"]), str(d["t"]), int(d["q"]),
                       int(d["pt"]), str(d.get("bn") or ""))
        except (ValueError, KeyError, TypeError) as e:
            raise CheckPointFormatError(f"not a batch ack: {e}") from None

    def acks(self) -> list[AckMsg]:
        return [AckMsg(o, self.start_offset, self.group, self.topic, self.queue_id, self.pop_time, self.broker_name)
                for o in self.ack_offsets]
