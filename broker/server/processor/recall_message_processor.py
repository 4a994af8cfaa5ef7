"""RECALL_MESSAGE (RocketMQ 5.3's RecallMessageProcessor): a timer message taken back before its
time. The handle its send reply carried names the topic, this broker, the message's slot time and
its UNIQ_KEY; the recall stores a delete marker (TIMER_DEL_UNIQKEY = topic+UNIQ_KEY) in the timer
topic at that same time, and the timer service, reading the slot, delivers neither the marker nor
the message it names (broker.server.timer.timer_message_service). Refusals carry RocketMQ's codes
and words; a recall after the time has come is refused, as the message may be delivered already."""
from __future__ import annotations

import time

from broker.common.recall_handle import BadRecallHandle, RecallHandle, delete_key
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import RecallMessageRequestHeader, decode
from broker.server.processor.send_processor import born_host_of, reply_when_put
from broker.server.timer.timer_message_service import (TIMER_DEL_UNIQKEY, TIMER_DELIVER_MS, UNIQ_KEY, TimerRefused,
                                                        transform)
from broker.store.errors import ServiceUnavailable, StoreError
from broker.store.message import encode_properties
from broker.store.results import PutStatus

RECALL_MESSAGE_TAG = "_RECALL_TAG_"
_ANSWERED = (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
             PutStatus.SLAVE_NOT_AVAILABLE)


class RecallMessageProcessor:
    def __init__(self, sender, config, store_config):
        self.sender = sender  # SendMessageProcessor: the store, topics and timer a recall goes through
        self.config = config
        self.store_config = store_config

    def handlers(self) -> dict:
        return {codes.RECALL_MESSAGE: self.recall}

    def recall(self, cmd: RemotingCommand, conn):
        if not self.config.recallMessageEnable:
            return cmd.response(codes.NO_PERMISSION, remark="recall failed, operation is forbidden")
        store = self.sender.store
        if store.is_slave:
            return cmd.response(codes.SLAVE_NOT_AVAILABLE, remark="recall failed, broker service not available")
        h = decode(RecallMessageRequestHeader, cmd.ext)
        if self.sender.topics.get(h.topic) is None:
            return cmd.response(codes.TOPIC_NOT_EXIST, remark=f"recall failed, the topic[{h.topic}] not exist")
        try:
            handle = RecallHandle.decode(h.recallHandle)
        except BadRecallHandle as e:
            return cmd.response(codes.ILLEGAL_OPERATION, remark=str(e))
        if handle.topic != h.topic:
            return cmd.response(codes.ILLEGAL_OPERATION, remark="recall failed, topic not match")
        if handle.broker_name != self.config.brokerName:
            return cmd.response(codes.ILLEGAL_OPERATION, remark="recall failed, broker service not available")
        try:
            left = int(handle.timestamp) - int(time.time() * 1000)
        except ValueError:
            left = -1
        if left <= 0 or left >= self.store_config.timerMaxDelaySec * 1000:
            return cmd.response(codes.ILLEGAL_OPERATION, remark="recall failed, timestamp invalid")
        now = int(time.time() * 1000)
        props = {"TAGS": RECALL_MESSAGE_TAG, TIMER_DEL_UNIQKEY: delete_key(handle.topic, handle.message_id),
                 UNIQ_KEY: handle.message_id, TIMER_DELIVER_MS: handle.timestamp, "BORN_TIMESTAMP": str(now),
                 "TRACE_CONTEXT": ""}
        if h.producerGroup:
            props["PGROUP"] = h.producerGroup
        try:
            moved = transform(self.store_config, handle.topic, 0, props, now)
            if moved is None:  # timerWheelEnable with the time come: refused above; never stored as is
                return cmd.response(codes.ILLEGAL_OPERATION, remark="recall failed, timestamp invalid")
            topic, queue_id, props = moved
            result, flushed = store.append(topic, queue_id, b"0", encode_properties(props), born_timestamp=now,
                                           born_host=born_host_of(conn))
        except TimerRefused as e:
            return cmd.response(e.response_code, remark=str(e))
        except (StoreError, ServiceUnavailable) as e:
            return cmd.response(codes.SYSTEM_ERROR, remark=f"recall failed, execute error: {e}")
        if self.sender.timer is not None:
            self.sender.timer.arrived()
        ext = {"msgId": handle.message_id}
        if flushed is None:
            return cmd.response(codes.SUCCESS, ext)

        def answer(status, why):
            if status in _ANSWERED:
                return cmd.response(codes.SUCCESS, ext)
            return cmd.response(codes.SYSTEM_ERROR, remark="recall failed, execute error")
        return reply_when_put(flushed, answer)
