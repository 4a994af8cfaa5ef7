"""RocketMQ 5's topic attributes (TopicAttributes, AttributeParser): UPDATE_AND_CREATE_TOPIC's
`attributes` header ("+message.type=FIFO", "-message.type", comma-separated), and the topic message
types a 5.x producer's messages are checked against (TopicMessageType).

Served: `message.type`, and `cleanup.policy` (DELETE, the default, or COMPACTION: a compacted
topic, broker.services.compaction_service). As in RocketMQ's TopicAttributes, cleanup.policy is not
changeable: it is set when the topic is created, and an update that adds, changes or removes it is
refused. Any other key is refused naming it, as RocketMQ refuses a key it does not know
(queue.type names a feature this broker lacks).
A topic with no message.type accepts every type here; RocketMQ reads it as NORMAL and its proxy
refuses FIFO, DELAY and TRANSACTION messages to it (docs/compat.md)."""
from __future__ import annotations

from broker.store.compaction_log import CLEANUP_POLICY, is_compaction  # noqa: F401 - the store reads it too

MESSAGE_TYPE = "message.type"
TOPIC_MESSAGE_TYPES = ("UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
CLEANUP_POLICIES = ("DELETE", "COMPACTION")  # CleanupPolicy; DELETE is the default
_VALUES = {MESSAGE_TYPE: TOPIC_MESSAGE_TYPES, CLEANUP_POLICY: CLEANUP_POLICIES}
_UNCHANGEABLE = {CLEANUP_POLICY}


class AttributeError_(ValueError):
    """An attributes text that cannot be applied; the message is RocketMQ's."""


def apply_attributes(current: dict, text: str | None, create: bool = True) -> dict:
    """`current` with the changes of an `attributes` header applied (a new dict). `create`: the
    topic does not exist yet (AttributeUtil.alterCurrentAttributes: only then may an unchangeable
    attribute be given)."""
    out = dict(current)
    if not text or not text.strip():
        return out
    for item in (x.strip() for x in text.split(",") if x.strip()):
        if item[0] not in "+-":
            raise AttributeError_(f"attribute format is illegal: {item} (each is +key=value or -key)")
        if item[0] == "-":
            key = item[1:]
            if "=" in key:
                raise AttributeError_(f"attribute format is illegal: {item} (a removal names the key alone)")
            _check_key(key)
            _check_changeable(key, create)
            out.pop(key, None)
            continue
        key, sep, value = item[1:].partition("=")
        if not sep:
            raise AttributeError_(f"attribute format is illegal: {item} (+key=value)")
        _check_key(key)
        _check_changeable(key, create)
        if value not in _VALUES[key]:  # EnumAttribute.verify
            raise AttributeError_(f"value is not in set: {sorted(_VALUES[key])} (key: {key}, value: {value})")
        out[key] = value
    return out


def _check_key(key: str) -> None:
    if key not in _VALUES:
        raise AttributeError_(f"unsupported key: {key}")


def _check_changeable(key: str, create: bool) -> None:
    if key in _UNCHANGEABLE and not create:
        raise AttributeError_(f"attempt to update an unchangeable attribute. key: {key}")


def message_type_of(properties: dict) -> str:
    """TopicMessageType.parseFromMessageProperty."""
    if properties.get("TRAN_MSG") == "true":
        return "TRANSACTION"
    if ("DELAY" in properties or "TIMER_DELIVER_MS" in properties or "TIMER_DELAY_SEC" in properties
            or "TIMER_DELAY_MS" in properties):  # not any() over a generator: every gRPC send asks
        return "DELAY"
    if "__SHARDINGKEY" in properties:
        return "FIFO"
    return "NORMAL"


def accepts(topic_type: str | None, message_type: str) -> bool:
    """DefaultTopicMessageTypeValidator, except that a topic with no type takes every one."""
    if topic_type is None or topic_type == "MIXED":
        return True
    return topic_type == message_type
