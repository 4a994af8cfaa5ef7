"""ChangeInvisibleTimeProcessor: CHANGE_MESSAGE_INVISIBLETIME (200053). The message gets a
checkpoint of its own (popTime now, the new invisible time) and its old one is acked, both in the
revive log (appendCheckPointThenAckOrigin); the response's popTime / invisibleTime / reviveQid make
its new handle. For an orderly batch the batch's invisible time moves. The answer waits until the
records are durable (pop_role.reply_when_durable): the new handle must name a checkpoint a new
master would replay."""
from __future__ import annotations

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import ChangeInvisibleTimeRequestHeader, decode
from broker.server.processor.ack_message_processor import checked_handle
from broker.server.pop.consumer_order_info_manager import now_ms
from broker.server.processor.pop_message_processor import InvalidParameter
from broker.server.pop.pop_revive_service import NotInFlight
from broker.server.pop.pop_role import reply_when_durable
from broker.store.pop_check_point import PopCheckPoint


class ChangeInvisibleTimeProcessor:
    def __init__(self, store, topics, revive, order_info):
        self.store = store
        self.topics = topics
        self.revive = revive
        self.order_info = order_info

    def handlers(self) -> dict:
        return {codes.CHANGE_MESSAGE_INVISIBLETIME: self.change}

    def change(self, cmd: RemotingCommand, conn):
        h = decode(ChangeInvisibleTimeRequestHeader, cmd.ext)
        if h.invisibleTime < 0:
            raise InvalidParameter(f"invisibleTime {h.invisibleTime} must not be negative (ms)")
        info = checked_handle(self.store, self.topics, h.topic, h.queueId, h.offset, h.extraInfo)
        mark = self.revive.log.appended
        return reply_when_durable(cmd, self._change(cmd, h, info), self.revive.log.durable_since(mark))

    def _change(self, cmd: RemotingCommand, h, info) -> RemotingCommand:
        now = now_ms()
        if info.is_order:
            if h.offset < self.store.consumer_offsets.query(h.consumerGroup, h.topic, h.queueId) or \
                    not self.order_info.update_next_visible_time(h.topic, h.consumerGroup, h.queueId, info.pop_time,
                                                                 now + h.invisibleTime):
                raise NotInFlight(f"offset {h.offset} of {h.topic}@{h.queueId} is not in the orderly batch out "
                                  f"for {h.consumerGroup} popped at {info.pop_time}")
            return cmd.response(codes.SUCCESS, {"popTime": info.pop_time,
                                                "invisibleTime": now + h.invisibleTime - info.pop_time,
                                                "reviveQid": info.revive_qid})
        ck, i = self.revive.find(h.consumerGroup, h.topic, h.queueId, info.ck_offset, info.pop_time, h.offset,
                                 info.revive_qid)
        if ck.bitmap >> i & 1:
            raise NotInFlight(f"offset {h.offset} of {h.topic}@{h.queueId} was acked already")
        new = PopCheckPoint(h.offset, now, h.invisibleTime, 1, h.queueId, h.topic, h.consumerGroup, diffs=[0])
        self.revive.add_check_point(new, info.revive_qid)  # first the new checkpoint, then the ack of the old
        self.revive.ack(ck, i)
        return cmd.response(codes.SUCCESS, {"popTime": new.pop_time, "invisibleTime": h.invisibleTime,
                                            "reviveQid": info.revive_qid})
