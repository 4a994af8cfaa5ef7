"""SendMessageProcessor: SEND_MESSAGE (10, the C++ client), SEND_MESSAGE_V2 (310, ali-ons: the same
header with one-letter keys) and SEND_BATCH_MESSAGE (320).

The body goes from the connection's receive buffer straight into the mapped commit log (the
append kernel copies it once); nothing here copies message bytes.
"""
from __future__ import annotations

import asyncio
import random
import socket

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.message_batch import decode_batch
from broker.remoting.topic_manager import DLQ_PREFIX, PERM_WRITE, RETRY_PREFIX, TopicError
from broker.services.message_store import PutStatus
from broker.store.errors import MessageIllegal
from broker.store.message import decode_properties, encode_properties

# SendMessageRequestHeaderV2's letters (SendMessageRequestHeaderV2.java)
V2_KEYS = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
           "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
           "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName"}

STATUS_CODES = {PutStatus.PUT_OK: codes.SUCCESS, PutStatus.FLUSH_DISK_TIMEOUT: codes.FLUSH_DISK_TIMEOUT,
                PutStatus.FLUSH_SLAVE_TIMEOUT: codes.FLUSH_SLAVE_TIMEOUT,
                PutStatus.SLAVE_NOT_AVAILABLE: codes.SLAVE_NOT_AVAILABLE,
                PutStatus.SERVICE_NOT_AVAILABLE: codes.SERVICE_NOT_AVAILABLE}


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


class SendMessageProcessor:
    def __init__(self, controller):
        self.c = controller
        self.store = controller.store
        self.topics = controller.topics

    def handlers(self) -> dict:
        return {codes.SEND_MESSAGE: self.send, codes.SEND_MESSAGE_V2: self.send, codes.SEND_BATCH_MESSAGE: self.send_batch}

    def _target(self, cmd: RemotingCommand):
        """The topic and queue a send goes to, or the error response (shared by 10, 310 and 320)."""
        if cmd.code != codes.SEND_MESSAGE:
            cmd.ext = {V2_KEYS.get(k, k): v for k, v in cmd.ext.items()}
        topic = cmd.get_str("topic")
        queue_id = cmd.get_int("queueId", -1)
        try:
            cfg = self.topics.get_or_create(topic, cmd.get_int("defaultTopicQueueNums", 0) or None)
        except TopicError as e:
            return cmd.response(codes.SYSTEM_ERROR, remark=str(e))
        if cfg is None:
            return cmd.response(codes.TOPIC_NOT_EXIST,
                                remark=f"topic[{topic}] not exist, apply first please! (autoCreateTopicEnable=false)")
        if not cfg.perm & PERM_WRITE:
            return cmd.response(codes.NO_PERMISSION, remark=f"the topic[{topic}] sending message is forbidden")
        if queue_id < 0:
            queue_id = random.randrange(cfg.writeQueueNums)
        if queue_id >= cfg.writeQueueNums:
            return cmd.response(codes.SYSTEM_ERROR, remark=f"request queueId[{queue_id}] is illegal, topic {topic} "
                                                           f"has {cfg.writeQueueNums} write queues")
        return topic, queue_id

    def send(self, cmd: RemotingCommand, conn):
        target = self._target(cmd)
        if type(target) is not tuple:
            return target
        topic, queue_id = target
        sys_flag = cmd.get_int("sysFlag", 0)
        reconsume_times = cmd.get_int("reconsumeTimes", 0)
        properties = cmd.get_str("properties", "")
        if topic.startswith(RETRY_PREFIX):
            # A client re-publishing a failed message itself (ali-ons when send-back failed):
            # past maxReconsumeTimes it goes to the group's dead letters (handleRetryAndDLQ).
            max_times = cmd.get_int("maxReconsumeTimes", self.c.config.maxReconsumeTimes)
            if reconsume_times > max_times:
                topic = DLQ_PREFIX + topic[len(RETRY_PREFIX):]
                self.topics.get_or_create(topic)
                queue_id = 0
        level = 0
        props_bytes = properties.encode()
        if "DELAY\x01" in properties and not topic.startswith(DLQ_PREFIX):
            # a producer-set delay level: kept in the schedule topic until due (CommitLog.putMessage)
            schedule = self.c.schedule
            props = decode_properties(props_bytes)
            level = schedule.level_of(props)
            if level:
                topic, queue_id, props = schedule.divert(topic, queue_id, props, level)
                props_bytes = encode_properties(props)
        try:
            result, flushed = self.store.append(
                topic, queue_id, cmd.body, props_bytes, flag=cmd.get_int("flag", 0), sys_flag=sys_flag,
                born_timestamp=cmd.get_int("bornTimestamp", 0), born_host=born_host_of(conn),
                reconsume_times=reconsume_times)
        except MessageIllegal as e:
            return cmd.response(codes.MESSAGE_ILLEGAL, remark=str(e))
        if level:
            self.c.schedule.arrived(level)
        else:
            self.c.holds.notify(topic, queue_id, result.end_offset)
        ext = {"msgId": result.msg_id, "queueId": queue_id, "queueOffset": result.queue_offset}
        if "UNIQ_KEY" in properties:
            ext["transactionId"] = decode_properties(properties.encode()).get("UNIQ_KEY", "")
        if flushed is None:
            return cmd.response(codes.SUCCESS, ext)
        return self._after_flush(cmd, ext, flushed)

    def send_batch(self, cmd: RemotingCommand, conn):
        """SEND_BATCH_MESSAGE: every message of the body into one queue, in one kernel call per
        segment; the reply's msgId is the comma-joined ids, queueOffset the first one's."""
        target = self._target(cmd)
        if type(target) is not tuple:
            return target
        topic, queue_id = target
        if topic.startswith(RETRY_PREFIX):
            return cmd.response(codes.MESSAGE_ILLEGAL, remark="batch messages cannot be sent to a retry topic")
        bodies, props, flags = decode_batch(cmd.body)  # CommandError → SYSTEM_ERROR naming the offset
        flag = flags[0]
        if any(f != flag for f in flags):
            return cmd.response(codes.MESSAGE_ILLEGAL, remark="the messages of a batch must share one flag")
        try:
            result, flushed = self.store.append_batch(
                topic, queue_id, bodies, props, flag=flag, sys_flag=cmd.get_int("sysFlag", 0),
                born_timestamp=cmd.get_int("bornTimestamp", 0), born_host=born_host_of(conn))
        except MessageIllegal as e:
            return cmd.response(codes.MESSAGE_ILLEGAL, remark=str(e))
        self.c.holds.notify(topic, queue_id, result.end_offset)
        ext = {"msgId": ",".join(result.msg_ids()), "queueId": queue_id, "queueOffset": result.queue_offset}
        if flushed is None:
            return cmd.response(codes.SUCCESS, ext)
        return self._after_flush(cmd, ext, flushed)

    @staticmethod
    def _after_flush(cmd: RemotingCommand, ext: dict, flushed: asyncio.Future) -> asyncio.Future:
        """The reply once the flush covered the message: a future chained to the flush's (a
        coroutine would cost a task per SYNC_FLUSH send)."""
        reply = flushed.get_loop().create_future()

        def done(f: asyncio.Future) -> None:
            if reply.done():
                return
            if f.cancelled():
                reply.cancel()
            elif f.exception() is not None:
                reply.set_exception(f.exception())
            else:
                reply.set_result(cmd.response(STATUS_CODES[f.result()], ext))
        flushed.add_done_callback(done)
        return reply
