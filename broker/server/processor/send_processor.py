"""SendMessageProcessor: SEND_MESSAGE (10, the C++ client), SEND_MESSAGE_V2 (310, ali-ons: the same
header with one-letter keys) and SEND_BATCH_MESSAGE (320).

`route` is the policy (the topic's config, auto-creation, permission, the queue, a retry past
its limit diverted to the dead letters); the store does the append. The body goes from the
connection's receive buffer straight into the mapped commit log (the append kernel copies it
once); nothing here copies message bytes.
"""
from __future__ import annotations

import asyncio
import random
import socket

from broker.kernels.send_path import stored_properties
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2, decode
from broker.remoting.message_batch import decode_batch
from broker.remoting.refusals import BadRequest, InvalidParameter, NoPermission, Refusal, TopicNotExist, response_code
from broker.common.topic_attributes import is_compaction
from broker.common.topic_validator import DLQ_PREFIX, PERM_WRITE, RETRY_PREFIX, not_sendable
from broker.common.recall_handle import RecallHandle
from broker.server.timer.timer_message_service import REAL_TOPIC, TIMER_OUT_MS, UNIQ_KEY
from broker.server.timer.timer_message_service import transform as transform_timer
from broker.server.transaction import PROPERTY_TRANSACTION_PREPARED, TRANSACTION_TYPE_MASK, is_half
from broker.store.errors import MessageIllegal
from broker.store.message import decode_properties, encode_properties
from broker.store.results import PutStatus

# what a 4.9 broker adds to every send reply (BrokerConfig.regionId, traceOn)
REPLY_EXT = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}

STATUS_CODES = {PutStatus.PUT_OK: codes.SUCCESS, PutStatus.FLUSH_DISK_TIMEOUT: codes.FLUSH_DISK_TIMEOUT,
                PutStatus.FLUSH_SLAVE_TIMEOUT: codes.FLUSH_SLAVE_TIMEOUT,
                PutStatus.SLAVE_NOT_AVAILABLE: codes.SLAVE_NOT_AVAILABLE,
                PutStatus.SERVICE_NOT_AVAILABLE: codes.SERVICE_NOT_AVAILABLE,
                # DLedger mode (RocketMQ's handlePutMessageResult): retryable by every client
                PutStatus.OS_PAGECACHE_BUSY: codes.SYSTEM_ERROR, PutStatus.UNKNOWN_ERROR: codes.SYSTEM_ERROR}
# a put answered with these is in this broker's log (a send so answered was stored)
STORED_STATUSES = (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                   PutStatus.SLAVE_NOT_AVAILABLE)
# the remarks RocketMQ answers those with (a reply that is not SUCCESS carries one)
STATUS_REMARKS = {PutStatus.SERVICE_NOT_AVAILABLE: "service not available now",
                  PutStatus.OS_PAGECACHE_BUSY: "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
                  PutStatus.UNKNOWN_ERROR: "UNKNOWN_ERROR"}


_TRAN_MSG = PROPERTY_TRANSACTION_PREPARED + "\x01"
# SendMessageProcessor's answer to a body over maxMessageSize (checkMessage in 5.x's
# AbstractSendMessageProcessor), word for word
_TOO_LARGE = ("the message is illegal, maybe msg body or properties length not matched. msg body length limit {}B, "
              "msg properties length limit 32KB.")


def perm_string(perm: int) -> str:
    """PermName.perm2String: R, W, X (inherit) or '-' each."""
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-") + ("X" if perm & 1 else "-")


def topic_config_string(name: str, cfg) -> str:
    """TopicConfig.toString, as RocketMQ's remarks quote it."""
    return (f"TopicConfig [topicName={name}, readQueueNums={cfg.readQueueNums}, writeQueueNums={cfg.writeQueueNums}, "
            f"perm={perm_string(cfg.perm)}, topicFilterType={cfg.topicFilterType}, topicSysFlag={cfg.topicSysFlag}, "
            f"order={str(bool(cfg.order)).lower()}, attributes={{}}]")


def stored(props: bytes, cluster: bytes) -> tuple[bytes, bool]:
    """The properties as RocketMQ stores them (CLUSTER=<brokerClusterName>; the send kernel's
    stored_props) and whether the producer waits for the store
    (WAIT, true unless "false"). An empty cluster keeps them as sent (the processor unit tests)."""
    if not cluster:
        return props, b"WAIT\x01false" not in props
    r = stored_properties(props, cluster)
    if r is None:
        raise MessageIllegal(f"the message properties length {len(props)} with CLUSTER is over 32767")
    return r


def born_host_of(conn) -> bytes:
    """BORNHOST as stored: the producer's IPv4 address and port, from its connection."""
    bh = conn.attrs.get("born_host")
    if bh is None:
        host, _, port = conn.peer.rpartition(":")
        try:
            bh = socket.inet_aton(host) + int(port).to_bytes(4, "big")
        except (OSError, ValueError):
            bh = bytes(8)
        conn.attrs["born_host"] = bh
    return bh


def send_header(cmd: RemotingCommand) -> SendMessageRequestHeader | SendMessageRequestHeaderV2:
    return decode(SendMessageRequestHeader if cmd.code == codes.SEND_MESSAGE else SendMessageRequestHeaderV2, cmd.ext)


def reply_when_put(put: asyncio.Future, answer) -> asyncio.Future:
    """A future of `answer(status, why)` once the put future `put` is done (`why`: its remark, if
    any): chained to it, where a coroutine would cost a task per request; a cancelled or failed
    put cancels or fails the reply."""
    reply = put.get_loop().create_future()

    def done(f: asyncio.Future) -> None:
        if reply.done():
            return
        if f.cancelled():
            reply.cancel()
        elif f.exception() is not None:
            reply.set_exception(f.exception())
        else:
            reply.set_result(answer(f.result(), getattr(f, "remark", None)))
    put.add_done_callback(done)
    return reply


class SendMessageProcessor:
    def __init__(self, store, topics, schedule, holds, max_reconsume_times: int, transactions=None,
                 reject_transactions: bool = False, cluster: str = "", timer=None, broker_name: str = ""):
        self.store = store
        self.broker_name = broker_name  # what a timer message's recall handle names
        self.timer = timer  # TimerMessageService: where messages with a delivery time wait
        self.cluster = cluster.encode()  # brokerClusterName: every message's CLUSTER property
        self.topics = topics
        self.schedule = schedule
        self.holds = holds
        self.max_reconsume_times = max_reconsume_times
        self.transactions = transactions  # TransactionalMessageBridge: where half messages go
        self.reject_transactions = reject_transactions  # rejectTransactionMessage

    def handlers(self) -> dict:
        return {codes.SEND_MESSAGE: self._refusing(self.send), codes.SEND_MESSAGE_V2: self._refusing(self.send),
                codes.SEND_BATCH_MESSAGE: self._refusing(self.send_batch)}

    @staticmethod
    def _refusing(fn):
        """`fn`, with its refusals answered as RocketMQ answers a refused send: the code and
        remark, and the region and trace flags it adds to every send reply before checking."""
        def send(cmd: RemotingCommand, conn):
            try:
                return fn(cmd, conn)
            except BadRequest:
                raise  # a header it cannot read: answered before any of that (SYSTEM_ERROR)
            except (Refusal, MessageIllegal) as e:
                return cmd.response(response_code(e), dict(REPLY_EXT), remark=str(e))
        return send

    def route(self, h, conn=None) -> tuple[str, int]:
        """The topic and queue a send goes to (msgCheck and handleRetryAndDLQ of RocketMQ's
        SendMessageProcessor), or a refusal."""
        topic = h.topic
        if not_sendable(topic):  # TopicValidator.isNotAllowedSendTopic: the broker's own
            raise NoPermission(f"Sending message to topic[{topic}] is forbidden.")
        cfg = self.topics.get_or_create(topic, h.defaultTopicQueueNums or None)
        if cfg is None:
            raise TopicNotExist(f"topic[{topic}] not exist, apply first please! (autoCreateTopicEnable=false)")
        if not cfg.perm & PERM_WRITE:
            raise NoPermission(f"the topic[{topic}] sending message is forbidden")
        queue_id = h.queueId
        if queue_id < 0:
            queue_id = random.randrange(cfg.writeQueueNums)
        if queue_id >= cfg.writeQueueNums:
            raise InvalidParameter(f"request queueId[{queue_id}] is illegal, {topic_config_string(topic, cfg)} "
                                   f"Producer: {conn.peer if conn is not None else ''}")
        if topic.startswith(RETRY_PREFIX):
            # A client re-publishing a failed message itself (ali-ons when send-back failed):
            # past maxReconsumeTimes it goes to the group's dead letters.
            limit = h.maxReconsumeTimes if h.maxReconsumeTimes is not None else self.max_reconsume_times
            if h.reconsumeTimes > limit:
                topic = DLQ_PREFIX + topic[len(RETRY_PREFIX):]
                self.topics.get_or_create(topic)
                queue_id = 0
        return topic, queue_id

    def send(self, cmd: RemotingCommand, conn):
        h = send_header(cmd)
        topic, queue_id = self.route(h, conn)
        if len(cmd.body) > self.store.config.maxMessageSize:
            raise MessageIllegal(_TOO_LARGE.format(self.store.config.maxMessageSize))
        properties = h.properties
        props_bytes, wait = stored(properties.encode(), self.cluster)
        cfg = self.topics.get(topic)
        if cfg is not None and is_compaction(cfg.attributes) and not decode_properties(props_bytes).get("KEYS", "").strip():
            # a compacted topic keeps the newest message per key: a message must have one
            raise MessageIllegal("Required message key is missing")
        level = 0
        props = None
        asked = queue_id  # a delayed message's reply names it, not the schedule queue (as RocketMQ's)
        # a half message (the send kernel hands every transaction type here; TRAN_MSG alone too)
        if (h.sysFlag & TRANSACTION_TYPE_MASK or _TRAN_MSG in properties) and self.transactions is not None:
            props = decode_properties(props_bytes)
            if is_half(h.sysFlag, props):
                return self._send_half(cmd, conn, h, topic, queue_id, props, wait)
        timed = False
        if "TIMER_" in properties and not topic.startswith(DLQ_PREFIX):
            # a delivery time (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS): the timer topic
            # until due (HookUtils.handleScheduleMessage), or refused as RocketMQ refuses it
            props = props or decode_properties(props_bytes)
            before = len(props)
            moved = transform_timer(self.store.config, topic, queue_id, props)
            if moved is not None:
                topic, queue_id, props = moved
                timed = True
            if moved is not None or len(props) != before:
                props_bytes = encode_properties(props)
        if "DELAY\x01" in properties and not topic.startswith(DLQ_PREFIX):
            # a producer-set delay level: kept in the schedule topic until due (CommitLog.putMessage)
            props = props or decode_properties(props_bytes)
            level = self.schedule.level_of(props)
            if level:
                topic, queue_id, props = self.schedule.divert(topic, queue_id, props, level)
                props_bytes = encode_properties(props)
        result, flushed = self.store.append(
            topic, queue_id, cmd.body, props_bytes, flag=h.flag, sys_flag=h.sysFlag,
            born_timestamp=h.bornTimestamp, born_host=born_host_of(conn), reconsume_times=h.reconsumeTimes)
        if level:
            self.schedule.arrived(level)
        elif timed:
            if self.timer is not None:
                self.timer.arrived()
        else:
            self.holds.notify(topic, queue_id, result.end_offset)
        ext = {"msgId": result.msg_id, "queueId": asked, "queueOffset": result.queue_offset, **REPLY_EXT}
        if timed and not props[REAL_TOPIC].startswith(RETRY_PREFIX) and props.get(UNIQ_KEY):
            # SendMessageProcessor.attachRecallHandle: TIMER_OUT_MS + 1, a time in the message's slot
            ext["recallHandle"] = RecallHandle(props[REAL_TOPIC], self.broker_name, str(int(props[TIMER_OUT_MS]) + 1),
                                               props[UNIQ_KEY]).encode()
        if flushed is None or not wait:
            return cmd.response(codes.SUCCESS, ext)
        return self._after_flush(cmd, ext, flushed)

    def _send_half(self, cmd: RemotingCommand, conn, h, topic: str, queue_id: int, props: dict, wait: bool):
        """A half message into the half topic (TransactionalMessageBridge.put_half); the reply
        names the queue asked for and the half message's queue offset and offsetMsgId, which the
        producer's END_TRANSACTION gives back (RocketMQ's reply to a half message)."""
        if self.reject_transactions:
            raise NoPermission(f"the broker[{self.store.config.brokerIP1}] sending transaction message is forbidden")
        result, flushed = self.transactions.put_half(
            topic, queue_id, cmd.body, props, flag=h.flag, sys_flag=h.sysFlag, born_timestamp=h.bornTimestamp,
            born_host=born_host_of(conn), reconsume_times=h.reconsumeTimes)
        ext = {"msgId": result.msg_id, "queueId": queue_id, "queueOffset": result.queue_offset, **REPLY_EXT}
        if props.get("UNIQ_KEY"):
            # RocketMQ 5's reply names the transaction by the message's unique key: the Java
            # client's TransactionSendResult.getTransactionId(), the id its check-backs carry
            ext["transactionId"] = props["UNIQ_KEY"]
        if flushed is None or not wait:
            return cmd.response(codes.SUCCESS, ext)
        return self._after_flush(cmd, ext, flushed)

    def send_batch(self, cmd: RemotingCommand, conn):
        """SEND_BATCH_MESSAGE: every message of the body into one queue, in one kernel call per
        segment; the reply's msgId is the comma-joined ids, queueOffset the first one's."""
        h = send_header(cmd)
        topic, queue_id = self.route(h, conn)
        if topic.startswith(RETRY_PREFIX):
            raise MessageIllegal("batch messages cannot be sent to a retry topic")
        bodies, props, flags = decode_batch(cmd.body)  # BadRequest naming the offset
        # as a 4.9 broker stores them (MessageExtBatchEncoder): each message with its own flag, and its
        # own properties followed by the batch's (a separator added when they do not end with one);
        # no CLUSTER, which Apache RocketMQ 5.5.0 adds to single messages only
        batch_props = h.properties.encode()
        wait = b"WAIT\x01false" not in batch_props
        if batch_props:
            props = [bytes(p) + (b"\x02" if p and p[-1] != 2 else b"") + batch_props for p in props]
        result, flushed = self.store.append_batch(
            topic, queue_id, bodies, props, flag=flags, sys_flag=h.sysFlag, born_timestamp=h.bornTimestamp,
            born_host=born_host_of(conn))
        self.holds.notify(topic, queue_id, result.end_offset)
        ext = {"msgId": ",".join(result.msg_ids()), "queueId": queue_id, "queueOffset": result.queue_offset,
               **REPLY_EXT}
        if flushed is None or not wait:
            return cmd.response(codes.SUCCESS, ext)
        return self._after_flush(cmd, ext, flushed)

    @staticmethod
    def _after_flush(cmd: RemotingCommand, ext: dict, flushed: asyncio.Future) -> asyncio.Future:
        """The reply once the flush covered the message."""
        def answer(status, why):  # why: a PutFuture's reason, after RocketMQ's words
            remark = STATUS_REMARKS.get(status)
            if why:
                remark = f"{remark}: {why}" if remark else why
            return cmd.response(STATUS_CODES[status], ext, remark=remark)
        return reply_when_put(flushed, answer)
