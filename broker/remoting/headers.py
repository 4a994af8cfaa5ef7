"""Typed request headers, one per request code: RocketMQ's *RequestHeader classes.

A header arrives as extFields, a map whose values clients send as strings, numbers or booleans
(client-protocol quirks); `decode` reads it as Java's header decoding does: Integer fields within
int32 and Long fields within int64 (a decimal string or a number), booleans true only for
"true" in any case (Boolean.parseBoolean), strings as given. A missing required field or one
that does not parse is a BadRequest naming the field and the value, answered SYSTEM_ERROR.
"""
from __future__ import annotations

from typing import Annotated, Any, get_args, get_origin, get_type_hints

import msgspec

from broker.remoting.refusals import BadRequest

Int32 = Annotated[int, "int32"]
Int64 = Annotated[int, "int64"]
_RANGES = {"int32": 32, "int64": 64}


def ext_string(value: Any) -> str:
    """A header value as Java's HashMap<String,String> would hold it (and clients sign it)."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    return str(value)


def _int(key: str, v: Any, bits: int) -> int:
    if isinstance(v, bool):
        return int(v)
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise BadRequest(f"{key} is {v!r}, not an integer") from None
    if not -(1 << (bits - 1)) <= n < 1 << (bits - 1):
        raise BadRequest(f"{key} is {v!r}, out of range for a {bits}-bit integer")
    return n


def _bool(v: Any) -> bool:
    return v if isinstance(v, bool) else ext_string(v).lower() == "true"


_NO_DEFAULT = msgspec.NODEFAULT


class _Field:
    __slots__ = ("name", "wire", "kind", "bits", "default")

    def __init__(self, name, wire, kind, bits, default):
        self.name, self.wire, self.kind, self.bits, self.default = name, wire, kind, bits, default


def _fields(cls) -> list[_Field]:
    cached = cls.__dict__.get("_decode_fields")
    if cached is not None:
        return cached
    hints = get_type_hints(cls, include_extras=True)
    info = msgspec.structs.fields(cls)
    out = []
    for f in info:
        t = hints[f.name]
        optional = False
        if get_origin(t) is not Annotated and type(None) in get_args(t):  # X | None
            t = next(a for a in get_args(t) if a is not type(None))
            optional = True
        if get_origin(t) is Annotated:
            kind, bits = "int", _RANGES[get_args(t)[1]]
        elif t is bool:
            kind, bits = "bool", 0
        elif t is str:
            kind, bits = "str", 0
        else:  # pragma: no cover - a header declared with a type we do not read
            raise TypeError(f"{cls.__name__}.{f.name}: unsupported header type {t}")
        default = f.default if f.default is not _NO_DEFAULT else (None if optional else _NO_DEFAULT)
        out.append(_Field(f.name, f.encode_name, kind, bits, default))
    setattr(cls, "_decode_fields", out)
    return out


def decode(cls, ext: dict):
    """The header `cls` read from a request's extFields (see the module doc)."""
    values = []
    for f in _fields(cls):
        v = ext.get(f.wire)
        if v is None or (v == "" and f.kind == "int"):
            if f.default is _NO_DEFAULT:
                raise BadRequest(f"the request has no {f.name}")
            values.append(f.default)
        elif f.kind == "str":
            values.append(ext_string(v))
        elif f.kind == "int":
            values.append(_int(f.name, v, f.bits))
        else:
            values.append(_bool(v))
    return cls(*values)


class _Header(msgspec.Struct, frozen=True):
    pass


class SendMessageRequestHeader(_Header):
    producerGroup: str
    topic: str
    defaultTopic: str = "TBW102"
    defaultTopicQueueNums: Int32 = 4
    queueId: Int32 = -1
    sysFlag: Int32 = 0
    bornTimestamp: Int64 = 0
    flag: Int32 = 0
    properties: str = ""
    reconsumeTimes: Int32 = 0
    unitMode: bool = False
    batch: bool = False
    maxReconsumeTimes: Int32 | None = None


class SendMessageRequestHeaderV2(_Header, rename={
        "producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d", "queueId": "e",
        "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j",
        "unitMode": "k", "maxReconsumeTimes": "l", "batch": "m"}):
    """SEND_MESSAGE_V2's one-letter keys (SendMessageRequestHeaderV2.java): the same fields."""
    producerGroup: str
    topic: str
    defaultTopic: str = "TBW102"
    defaultTopicQueueNums: Int32 = 4
    queueId: Int32 = -1
    sysFlag: Int32 = 0
    bornTimestamp: Int64 = 0
    flag: Int32 = 0
    properties: str = ""
    reconsumeTimes: Int32 = 0
    unitMode: bool = False
    maxReconsumeTimes: Int32 | None = None
    batch: bool = False


class PullMessageRequestHeader(_Header):
    consumerGroup: str
    topic: str
    queueId: Int32
    queueOffset: Int64
    maxMsgNums: Int32 = 32
    sysFlag: Int32 = 0
    commitOffset: Int64 = -1  # none: nothing committed even with the commit flag
    suspendTimeoutMillis: Int64 = 15000
    subscription: str = "*"
    subVersion: Int64 = 0
    expressionType: str = "TAG"


class QueueHeader(_Header):
    """GET_MAX_OFFSET, GET_MIN_OFFSET (GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader)."""
    topic: str
    queueId: Int32


class SearchOffsetRequestHeader(_Header):
    topic: str
    queueId: Int32
    timestamp: Int64


class QueryConsumerOffsetRequestHeader(_Header):
    consumerGroup: str
    topic: str
    queueId: Int32


class UpdateConsumerOffsetRequestHeader(_Header):
    consumerGroup: str
    topic: str
    queueId: Int32
    commitOffset: Int64


class ConsumerSendMsgBackRequestHeader(_Header):
    offset: Int64
    group: str
    delayLevel: Int32 = 0
    originMsgId: str = ""
    originTopic: str = ""
    unitMode: bool = False
    maxReconsumeTimes: Int32 | None = None


class GetConsumerListByGroupRequestHeader(_Header):
    consumerGroup: str


class ResetOffsetRequestHeader(_Header):
    """INVOKE_BROKER_TO_RESET_OFFSET: timestamp -1 is each queue's end."""
    group: str
    topic: str
    timestamp: Int64
    isForce: bool = False
    queueId: Int32 = -1
    offset: Int64 | None = None


class GetConsumerRunningInfoRequestHeader(_Header):
    consumerGroup: str
    clientId: str
    jstackEnable: bool = False


class GetProducerConnectionListRequestHeader(_Header):
    producerGroup: str


class UnregisterClientRequestHeader(_Header):
    clientID: str = ""
    producerGroup: str = ""
    consumerGroup: str = ""


class CreateTopicRequestHeader(_Header):
    topic: str
    defaultTopic: str = "TBW102"
    readQueueNums: Int32 = 4
    writeQueueNums: Int32 = 4
    perm: Int32 = 6
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: Int32 = 0
    order: bool = False
    attributes: str | None = None  # RocketMQ 5: "+message.type=FIFO,-key" (broker.common.topic_attributes)


class ViewBrokerStatsDataRequestHeader(_Header):
    """VIEW_BROKER_STATS_DATA (mqadmin statsAll): a stats name (TOPIC_PUT_NUMS, ...) and its key."""
    statsName: str
    statsKey: str


class TopicHeader(_Header):
    """GET_TOPIC_STATS_INFO, DELETE_TOPIC_IN_BROKER, DELETE_TOPIC_IN_NAMESRV (one `topic` field each)."""
    topic: str


class GetConsumeStatsRequestHeader(_Header):
    """GET_CONSUME_STATS: `topicList` (5.x) is the topics joined by ';'."""
    consumerGroup: str
    topic: str = ""
    topicList: str = ""


class GetConsumeStatsInBrokerHeader(_Header):
    isOrder: bool = False


class ViewMessageRequestHeader(_Header):
    offset: Int64


class EndTransactionRequestHeader(_Header):
    producerGroup: str
    tranStateTableOffset: Int64
    commitLogOffset: Int64
    commitOrRollback: Int32  # 8 commit, 12 rollback, 0 unknown (MessageSysFlag's transaction types)
    msgId: str
    fromTransactionCheck: bool = False
    transactionId: str = ""


class RecallMessageRequestHeader(_Header):
    topic: str
    recallHandle: str
    producerGroup: str = ""


UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # MixAll: in QUERY_MESSAGE's ext, the key is a client msgId (UNIQ_KEY)


class QueryMessageRequestHeader(_Header):
    """QUERY_MESSAGE (QueryMessageRequestHeader.java: every field required)."""
    topic: str
    key: str
    maxNum: Int32
    beginTimestamp: Int64
    endTimestamp: Int64


class PopMessageRequestHeader(_Header):
    """POP_MESSAGE (PopMessageRequestHeader.java). queueId -1: every queue of the topic; initMode
    0 (MIN) starts a group with no offset at the queue's first message, 1 (MAX) at its last."""
    consumerGroup: str
    topic: str
    queueId: Int32
    maxMsgNums: Int32
    invisibleTime: Int64
    pollTime: Int64
    bornTime: Int64
    initMode: Int32
    expType: str = "TAG"
    exp: str = ""
    order: bool = False
    attemptId: str = ""


class AckMessageRequestHeader(_Header):
    """ACK_MESSAGE (AckMessageRequestHeader.java): extraInfo is the popped message's POP_CK."""
    consumerGroup: str
    topic: str
    queueId: Int32
    extraInfo: str
    offset: Int64


class ChangeInvisibleTimeRequestHeader(_Header):
    """CHANGE_MESSAGE_INVISIBLETIME (ChangeInvisibleTimeRequestHeader.java)."""
    consumerGroup: str
    topic: str
    queueId: Int32
    extraInfo: str
    offset: Int64
    invisibleTime: Int64
