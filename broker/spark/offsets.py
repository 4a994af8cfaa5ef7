"""Where reading starts and ends, per queue.

A queue is named "brokerName:queueId" (a topic's queues are numbered per broker, so the broker
name is part of the name). The startingOffsets / endingOffsets options take "earliest",
"latest", or JSON in the shape of Kafka's, one object per topic:

    {"TopicA": {"broker-a:0": 1200, "broker-a:1": -2, "broker-b:0": -1}}

An offset is a queue offset (the next message to read; the end is exclusive), or -2 for the
queue's earliest and -1 for its latest offset. Queues the JSON leaves out start at earliest
and end at latest. A streaming offset (what Spark checkpoints) is the plain object
{"broker-a:0": 1200, ...}: every queue's next offset to read.
"""
from __future__ import annotations

import json

from broker.client.route import MessageQueue
from broker.spark.errors import RocketMQOptionError, RocketMQSourceError

EARLIEST, LATEST = -2, -1


def queue_key(mq: MessageQueue) -> str:
    return f"{mq.broker_name}:{mq.queue_id}"


def parse_queue_key(key: str, option: str = "offset") -> tuple[str, int]:
    broker, sep, qid = key.rpartition(":")
    if not sep or not broker or not qid.isdigit():
        raise RocketMQOptionError(option, f"queue {key!r} is not brokerName:queueId (e.g. broker-a:0)")
    return broker, int(qid)


def parse_spec(option: str, text: str | None, topic: str, default: int) -> int | dict[str, int]:
    """EARLIEST, LATEST or {queue key: offset or EARLIEST/LATEST}; errors name the option."""
    if text is None:
        return default
    t = text.strip()
    if t.lower() == "earliest":
        return EARLIEST
    if t.lower() == "latest":
        return LATEST
    try:
        doc = json.loads(t)
    except ValueError as e:
        raise RocketMQOptionError(option, f"not earliest, latest or JSON ({e}): {text!r}") from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise RocketMQOptionError(option, 'JSON must look like {"<topic>": {"<brokerName>:<queueId>": offset}}')
    if set(doc) != {topic}:
        raise RocketMQOptionError(option, f"JSON names topic(s) {sorted(doc)}, the query reads {topic!r}")
    out = {}
    for key, off in doc[topic].items():
        parse_queue_key(key, option)
        if isinstance(off, bool) or not isinstance(off, int) or off < EARLIEST:
            raise RocketMQOptionError(option, f"offset of {key} must be an integer >= -2 (-2 earliest, -1 latest), "
                                              f"got {off!r}")
        out[key] = off
    return out


def resolve(option: str, spec: int | dict[str, int], queues: list[MessageQueue], mins: dict[str, int],
            maxs: dict[str, int], default: int) -> dict[str, int]:
    """The concrete offset of every queue. A queue the spec names but the topic lacks is an error
    (a typo would otherwise read nothing)."""
    keys = [queue_key(mq) for mq in queues]
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(keys))
        if unknown:
            raise RocketMQOptionError(option, f"queue(s) {unknown} are not queues of the topic (it has {keys})")
    out = {}
    for k in keys:
        off = spec.get(k, default) if isinstance(spec, dict) else spec
        out[k] = mins[k] if off == EARLIEST else maxs[k] if off == LATEST else off
    return out


def clamp(option: str, offsets: dict[str, int], mins: dict[str, int], maxs: dict[str, int],
          fail_on_data_loss: bool) -> dict[str, int]:
    """Offsets outside [min, max] of their queue: below min the messages are gone (data loss),
    above max they do not exist yet."""
    out = {}
    for k, off in offsets.items():
        if off < mins[k]:
            if fail_on_data_loss:
                raise RocketMQSourceError(f"{option}: queue {k} starts at {mins[k]} (older messages were deleted), "
                                          f"offset {off} is gone; set failOnDataLoss=false to skip ahead")
            off = mins[k]
        out[k] = min(off, maxs[k])
    return out


def decode_stream_offset(offset: dict | str) -> dict[str, int]:
    """A streaming offset as Spark hands it back (a dict, or its JSON after a restart)."""
    doc = json.loads(offset) if isinstance(offset, str) else offset
    if not isinstance(doc, dict):
        raise RocketMQSourceError(f"unreadable streaming offset {offset!r}: expected {{queue: offset}}")
    return {str(k): int(v) for k, v in doc.items()}
