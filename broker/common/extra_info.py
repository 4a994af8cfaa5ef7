"""ExtraInfoUtil: the receipt handle of a popped message (its POP_CK property), RocketMQ's format.

    "<ckQueueOffset> <popTime> <invisibleTime> <reviveQid> <retryFlag> <brokerName> <queueId> <queueOffset>"

space separated (MessageConst.KEY_SEPARATOR): the checkpoint's first queue offset, the pop time
and invisible time in ms, the revive queue (999 = an orderly pop), 0 for the topic itself or 1
for its pop retry topic %RETRY%<group>_<topic>, the broker, the queue and the message's offset.
The POP_MESSAGE response carries startOffsetInfo / msgOffsetInfo / orderCountInfo, from which the
client builds each message's handle (MQClientAPIImpl.processPopResponse).
"""
from __future__ import annotations

from typing import NamedTuple

from broker.remoting.refusals import BadRequest
from broker.common.topic_validator import RETRY_PREFIX

SEP = " "
POP_ORDER_REVIVE_QUEUE = 999  # KeyBuilder.POP_ORDER_REVIVE_QUEUE
NORMAL_TOPIC, RETRY_TOPIC, RETRY_TOPIC_V2 = "0", "1", "2"


class ExtraInfoError(BadRequest):
    """A receipt handle that does not parse (answered SYSTEM_ERROR naming what is wrong)."""


def pop_retry_topic(topic: str, group: str) -> str:
    """KeyBuilder.buildPopRetryTopicV1: RocketMQ 5's default (enableRetryTopicV2=false)."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def retry_flag(topic: str) -> str:
    if topic.startswith(RETRY_PREFIX):
        return RETRY_TOPIC_V2 if "+" in topic else RETRY_TOPIC
    return NORMAL_TOPIC


def real_topic(topic: str, group: str, flag: str) -> str:
    """The topic a handle's message was popped from, given the topic the consumer asked for."""
    if flag == NORMAL_TOPIC:
        return topic
    if flag == RETRY_TOPIC:
        return pop_retry_topic(topic, group)
    if flag == RETRY_TOPIC_V2:
        return f"{RETRY_PREFIX}{group}+{topic}"
    raise ExtraInfoError(f"retry flag {flag!r} is not 0, 1 or 2")


def build(ck_offset: int, pop_time: int, invisible_time: int, revive_qid: int, topic: str, broker_name: str,
          queue_id: int, queue_offset: int) -> str:
    return SEP.join(map(str, (ck_offset, pop_time, invisible_time, revive_qid, retry_flag(topic), broker_name,
                              queue_id, queue_offset)))


class ExtraInfo(NamedTuple):  # a tuple: made per handle a front or broker reads, twice per acked message
    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: str
    broker_name: str
    queue_id: int
    queue_offset: int | None  # absent in a 7-field handle (the request's offset names the message)

    @property
    def is_order(self) -> bool:
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE


def _int(name: str, text: str, lo: int, hi: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ExtraInfoError(f"extraInfo {name} {text!r} is not an integer") from None
    if not lo <= v <= hi:
        raise ExtraInfoError(f"extraInfo {name} {v} is out of range")
    return v


_I64 = (1 << 63) - 1


def parse(text: str) -> ExtraInfo:
    """A handle as ExtraInfoUtil reads it; 7 or 8 fields (a gRPC receipt handle appends the commit
    log offset as a 9th, which is ignored here)."""
    parts = text.split(SEP)
    if len(parts) < 7:
        raise ExtraInfoError(f"extraInfo {text[:200]!r} has {len(parts)} fields, not at least 7")
    if parts[4] not in (NORMAL_TOPIC, RETRY_TOPIC, RETRY_TOPIC_V2):
        raise ExtraInfoError(f"extraInfo retry flag {parts[4]!r} is not 0, 1 or 2")
    # every field at once (a front parses one per message it acks); anything off is read again
    # below, field by field, for the error that names it
    try:
        ck, pt, it, rq, qid = int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), int(parts[6])
        qo = int(parts[7]) if len(parts) > 7 else 0
    except ValueError:
        ck = -1
    if 0 <= ck <= _I64 and 0 <= pt <= _I64 and 0 <= it <= _I64 and 0 <= rq <= 1 << 31 and 0 <= qid <= 1 << 31 \
            and 0 <= qo <= _I64:
        return ExtraInfo(ck, pt, it, rq, parts[4], parts[5], qid, qo if len(parts) > 7 else None)
    return ExtraInfo(_int("ckQueueOffset", parts[0], 0, _I64), _int("popTime", parts[1], 0, _I64),
                     _int("invisibleTime", parts[2], 0, _I64), _int("reviveQid", parts[3], 0, 1 << 31),
                     parts[4], parts[5], _int("queueId", parts[6], 0, 1 << 31),
                     _int("queueOffset", parts[7], 0, _I64) if len(parts) > 7 else None)


# -- the POP_MESSAGE response's offset infos ("flag queueId value;flag queueId value...") ---------
def start_offset_entry(topic: str, queue_id: int, start_offset: int) -> str:
    return f"{retry_flag(topic)}{SEP}{queue_id}{SEP}{start_offset}"


def msg_offset_entry(topic: str, queue_id: int, offsets: list[int]) -> str:
    return f"{retry_flag(topic)}{SEP}{queue_id}{SEP}{','.join(map(str, offsets))}"


def order_count_entry(topic: str, key: str, count: int) -> str:
    """key: a queue id, or "qo<queueId>%<queueOffset>" for one message."""
    return f"{retry_flag(topic)}{SEP}{key}{SEP}{count}"


def _entries(info: str | None):
    if not info:
        return
    for one in info.split(";"):
        f = one.split(SEP)
        if len(f) != 3:
            raise ExtraInfoError(f"offset info entry {one!r} is not 'flag queueId value'")
        yield f"{f[0]}@{f[1]}", f[2]


def parse_start_offset_info(info: str | None) -> dict[str, int]:
    return {k: int(v) for k, v in _entries(info)}


def parse_order_count_info(info: str | None) -> dict[str, int]:
    return {k: int(v) for k, v in _entries(info)}


def queue_key(topic: str, queue_id: int) -> str:
    return f"{retry_flag(topic)}@{queue_id}"


def queue_offset_key(topic: str, queue_id: int, queue_offset: int) -> str:
    return f"{retry_flag(topic)}@qo{queue_id}%{queue_offset}"
