"""Messages between the two protocols: a v2 Message a 5.x producer sends → the remoting Message
the project's Producer sends (properties as SendMessageActivity.buildMessageProperty sets them,
with the same refusals), and a stored message (MessageExt) → the v2 Message a 5.x client is shown
(GrpcConverter.buildMessage)."""
from __future__ import annotations

import gzip
import hashlib
import re
import time
import zlib

from google.protobuf.timestamp_pb2 import Timestamp

from broker.client.message import Message, MessageExt
from broker.proxy.config import ProxyConfig
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.status import Code, ProxyError

# MessageConst names
UNIQ_KEY, KEYS = "UNIQ_KEY", "KEYS"
TRAN_MSG, PGROUP, CHECK_IMMUNITY = "TRAN_MSG", "PGROUP", "CHECK_IMMUNITY_TIME_IN_SECONDS"
SHARDING_KEY, TRACE_CONTEXT, BORN_TIMESTAMP = "__SHARDINGKEY", "TRACE_CONTEXT", "BORN_TIMESTAMP"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
# the producer's host, as its client names it (a 5.x message's born_host): the stored message's
# own born host is the front's connection to the broker
BORN_HOST = "__BORNHOST"
# MessageConst.STRING_HASH_SET: a user property may not take a system property's name
SYSTEM_PROPERTIES = frozenset((
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID",
    "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
    "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME",
    "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO",
    "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER",
    "MSG_TYPE", "TRACE_CONTEXT", "__SHARDINGKEY", "CHECK_IMMUNITY_TIME_IN_SECONDS", "SHARDING_KEY",
    "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS",
    "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "BORN_TIMESTAMP", "__BORNHOST",
    "bname", "INNER_BASE", "INNER_NUM", "__STARTDELIVERTIME"))


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _has_control(text: str) -> bool:
    # a regex, not a loop over the characters: it runs on every tag, key and property of every send
    return _CONTROL.search(text) is not None


def _delay_level(deliver_ms: int, now_ms: int, levels_ms: list[int]) -> int:
    """ProxyConfig.computeDelayLevel: the first level longer than the wait, else the last."""
    wait = deliver_ms - now_ms
    for i, level in enumerate(levels_ms, 1):
        if level > wait:
            return i
    return len(levels_ms)


def to_remoting(m: pb.Message, topic: str, config: ProxyConfig, peer: str = "") -> Message:
    """One v2 Message as the remoting Message to store (ProxyError for what the Java proxy refuses);
    `peer`: the sending client's host, the born host of a message that names none."""
    if m.topic.name != topic:
        raise ProxyError(Code.MESSAGE_CORRUPTED, "topic in message is not same")
    sp = m.system_properties
    body = m.body
    if sp.body_encoding == pb.GZIP:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as e:
            raise ProxyError(Code.MESSAGE_CORRUPTED, f"body declared GZIP does not inflate: {e}") from None
    if not body:
        raise ProxyError(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if 0 < config.maxMessageSize < len(body):
        raise ProxyError(Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {config.maxMessageSize}")
    user = dict(m.user_properties)
    if len(user) > config.userPropertyMaxNum:
        raise ProxyError(Code.MESSAGE_PROPERTIES_TOO_LARGE, f"too many user properties, max is {config.userPropertyMaxNum}")
    size = 0
    for k, v in user.items():
        if k in SYSTEM_PROPERTIES:
            raise ProxyError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {k}")
        if not k or _has_control(k):
            raise ProxyError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the key of property cannot be empty or contain control character")
        if _has_control(v):
            raise ProxyError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the value of property cannot contain control character")
        size += len(k.encode()) + len(v.encode())
    tag = sp.tag if sp.HasField("tag") else ""
    if tag and (not tag.strip() or "|" in tag or _has_control(tag)):
        raise ProxyError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is blank or holds '|' or a control character")
    size += len(tag.encode())
    for key in sp.keys:
        if not key.strip() or _has_control(key):
            raise ProxyError(Code.ILLEGAL_MESSAGE_KEY, "key cannot be blank or contain control character")
        size += len(key.encode())
    if size > config.maxUserPropertySize:
        raise ProxyError(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                         f"the total size of user property is too large, max is {config.maxUserPropertySize}")
    if not sp.message_id.strip():
        raise ProxyError(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    props = user
    props[UNIQ_KEY] = sp.message_id
    if sp.message_type == pb.TRANSACTION:
        props[TRAN_MSG] = "true"
        if sp.HasField("orphaned_transaction_recovery_duration"):
            seconds = sp.orphaned_transaction_recovery_duration.seconds
            if not 0 <= seconds <= config.maxTransactionRecoverySecond:
                raise ProxyError(Code.BAD_REQUEST, f"transaction recovery time must be within 0 and "
                                                   f"{config.maxTransactionRecoverySecond} s, not {seconds}")
            props[CHECK_IMMUNITY] = str(seconds)
    # here the topic is the producer group, as the Java proxy's: the broker's transaction check
    # then reaches whichever front serves a producer of the topic
    props[PGROUP] = topic
    delay_level = 0
    if sp.HasField("delivery_timestamp"):
        if sp.message_type == pb.TRANSACTION:
            raise ProxyError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a transactional message cannot be delayed")
        # read by hand: ToMilliseconds raises on a timestamp out of protobuf's range, which is what
        # rocketmq-python-client 5.1.2 sends for a delivery time given in ms (it fills `seconds`)
        deliver_ms = sp.delivery_timestamp.seconds * 1000 + sp.delivery_timestamp.nanos // 1_000_000
        now_ms = int(time.time() * 1000)
        if deliver_ms - now_ms > config.maxDelayTimeMills:
            raise ProxyError(Code.ILLEGAL_DELIVERY_TIME, f"the max delay time of message is too large, max is "
                                                         f"{config.maxDelayTimeMills} ms")
        if deliver_ms > now_ms and config.useDelayLevel:
            delay_level = _delay_level(deliver_ms, now_ms, config.delay_levels_ms)
        props[TIMER_DELIVER_MS] = str(deliver_ms)
    if sp.HasField("message_group") and sp.message_group:
        group = sp.message_group
        if not group.strip() or _has_control(group):
            raise ProxyError(Code.ILLEGAL_MESSAGE_GROUP, "message group cannot be blank or contain control character")
        if len(group.encode()) >= config.maxMessageGroupSize:
            raise ProxyError(Code.ILLEGAL_MESSAGE_GROUP, f"message group exceed the max size {config.maxMessageGroupSize}")
        props[SHARDING_KEY] = group
    if sp.HasField("trace_context") and sp.trace_context:
        props[TRACE_CONTEXT] = sp.trace_context
    if sp.born_host or peer:
        props[BORN_HOST] = sp.born_host or peer
    if sp.HasField("born_timestamp"):
        props[BORN_TIMESTAMP] = str(sp.born_timestamp.seconds * 1000 + sp.born_timestamp.nanos // 1_000_000)
    return Message(topic, body, tags=tag or None, keys=list(sp.keys) or None, properties=props,
                   delay_level=delay_level)


def _ts(ms: int) -> Timestamp:
    t = Timestamp()
    t.FromMilliseconds(ms)
    return t


def to_proto(msg: MessageExt, topic: str | None = None) -> pb.Message:
    """A stored message as a 5.x client sees it: user properties apart from the system ones."""
    props = msg.properties
    sp = pb.SystemProperties(message_id=props.get(UNIQ_KEY) or msg.msg_id, body_encoding=pb.IDENTITY,
                             queue_id=msg.queue_id, queue_offset=msg.queue_offset,
                             born_host=props.get(BORN_HOST) or (msg.born_host.rpartition(":")[0] if msg.born_host else ""),
                             store_host=msg.store_host or "")
    if msg.tags:
        sp.tag = msg.tags
    if props.get(KEYS):
        sp.keys.extend(k for k in props[KEYS].split(" ") if k)
    born = props.get(BORN_TIMESTAMP)
    sp.born_timestamp.CopyFrom(_ts(int(born) if born and born.isdigit() else msg.born_timestamp))
    sp.store_timestamp.CopyFrom(_ts(msg.store_timestamp))
    if props.get(SHARDING_KEY):
        sp.message_group = props[SHARDING_KEY]
        sp.message_type = pb.FIFO
    elif props.get(TRAN_MSG) == "true":
        sp.message_type = pb.TRANSACTION
    elif props.get(TIMER_DELIVER_MS, "").isdigit():
        sp.message_type = pb.DELAY
        sp.delivery_timestamp.CopyFrom(_ts(int(props[TIMER_DELIVER_MS])))
    else:
        sp.message_type = pb.NORMAL
    if props.get(TRACE_CONTEXT):
        sp.trace_context = props[TRACE_CONTEXT]
    # MD5, not the Java proxy's CRC32: the clients agree on MD5's text (upper-case hex) but not on
    # CRC32's (the Node.js client 1.0.8 prints it in decimal, so it found every message corrupted
    # and its PushConsumer nacked each one for ever)
    body = msg.body
    sp.body_digest.type = pb.MD5
    sp.body_digest.checksum = hashlib.md5(body).hexdigest().upper()
    # every system property stays out, as the Java proxy's buildMessage does: the pop's POP_CK and
    # 1ST_POP_TIME are no user's
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES}
    return pb.Message(topic=pb.Resource(name=topic or msg.topic), user_properties=user, system_properties=sp, body=body)
