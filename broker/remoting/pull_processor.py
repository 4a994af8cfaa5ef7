"""PullMessageProcessor: PULL_MESSAGE (11), with long polling and server-side tag filtering.

A FOUND response's body is the stored records themselves: views of the mapped commit log go to
the transport's writelines (one writev), never through a Python copy.
"""
from __future__ import annotations

import asyncio
import time

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.filter import tag_hashes_of
from broker.services.message_store import GetStatus

FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 1, 2, 4
MAX_TRANSFER_BYTES = 256 * 1024  # RocketMQ's maxTransferBytesOnMessageInMemory
MAX_TRANSFER_COUNT = 32

_MOVED_IF_NOT_ZERO = (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE)
_CODES = {GetStatus.FOUND: codes.SUCCESS, GetStatus.NO_MATCHED_MESSAGE: codes.PULL_RETRY_IMMEDIATELY,
          GetStatus.OFFSET_FOUND_NULL: codes.PULL_NOT_FOUND, GetStatus.OFFSET_OVERFLOW_BADLY: codes.PULL_OFFSET_MOVED,
          GetStatus.OFFSET_OVERFLOW_ONE: codes.PULL_NOT_FOUND, GetStatus.OFFSET_TOO_SMALL: codes.PULL_OFFSET_MOVED}


class PullMessageProcessor:
    def __init__(self, controller):
        self.c = controller
        self.store = controller.store

    def handlers(self) -> dict:
        return {codes.PULL_MESSAGE: self.pull}

    def pull(self, cmd: RemotingCommand, conn):
        group = cmd.get_str("consumerGroup")
        topic = cmd.get_str("topic")
        queue_id = cmd.get_int("queueId")
        offset = cmd.get_int("queueOffset")
        max_nums = max(1, min(cmd.get_int("maxMsgNums", MAX_TRANSFER_COUNT), 1024))
        sys_flag = cmd.get_int("sysFlag", 0)
        cfg = self.c.topics.get(topic)
        if cfg is None:
            return cmd.response(codes.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist, apply first please!")
        if queue_id < 0 or queue_id >= cfg.readQueueNums:
            return cmd.response(codes.SYSTEM_ERROR, remark=f"queueId[{queue_id}] is illegal, topic {topic} has "
                                                           f"{cfg.readQueueNums} read queues")
        if sys_flag & FLAG_COMMIT_OFFSET:
            commit = cmd.get_int("commitOffset", -1)
            if commit >= 0:
                self.store.consumer_offsets.commit(group, topic, queue_id, commit)
        if sys_flag & FLAG_SUBSCRIPTION:
            tags = tag_hashes_of(cmd.get_str("subscription", "*"))
        else:
            tags = self.c.consumers.tag_hashes(group, topic)
        hold = sys_flag & FLAG_SUSPEND and self.c.config.longPollingEnable
        suspend = min(cmd.get_int("suspendTimeoutMillis", 15000), self.c.config.brokerSuspendMaxTimeMillis) / 1000
        if self.store.queue_write_end(topic, queue_id) > self.store.offsets()["dispatched"]:
            # Messages of this queue are in the log but not yet in its consume queue: answer once
            # they are (read-your-writes), not with an offset the next moment makes valid.
            return self._hold(cmd, topic, queue_id, offset, max_nums, tags, time.monotonic() + suspend, hold)
        res = self._get(cmd, topic, queue_id, offset, max_nums, tags)
        if res.code != codes.PULL_NOT_FOUND or not hold:
            return res
        return self._hold(cmd, topic, queue_id, offset, max_nums, tags, time.monotonic() + suspend, True)

    def _get(self, cmd, topic, queue_id, offset, max_nums, tags) -> RemotingCommand:
        r = self.store.get(topic, queue_id, offset, max_nums, MAX_TRANSFER_BYTES, tags)
        if r.status in _MOVED_IF_NOT_ZERO:
            code = codes.PULL_OFFSET_MOVED if offset != 0 else codes.PULL_NOT_FOUND
        else:
            code = _CODES[r.status]
        ext = {"nextBeginOffset": r.next_offset, "minOffset": r.min_offset, "maxOffset": r.max_offset,
               "suggestWhichBrokerId": 0}
        return cmd.response(code, ext, r.messages if code == codes.SUCCESS else b"")

    async def _hold(self, cmd, topic, queue_id, offset, max_nums, tags, deadline, suspend) -> RemotingCommand:
        holds = self.c.holds
        while True:
            # a message appended before we looked but not dispatched yet: wait for it, not for the next
            end = self.store.queue_write_end(topic, queue_id)
            if end > self.store.offsets()["dispatched"]:
                try:
                    await self.store.wait_dispatched(end, max(deadline - time.monotonic(), 1.0))
                except asyncio.TimeoutError:
                    pass
                res = self._get(cmd, topic, queue_id, offset, max_nums, tags)
                if res.code != codes.PULL_NOT_FOUND or not suspend or time.monotonic() >= deadline:
                    return res
            left = deadline - time.monotonic()
            if left <= 0:
                return self._get(cmd, topic, queue_id, offset, max_nums, tags)
            fut = holds.hold(topic, queue_id)
            try:
                await asyncio.wait_for(fut, left)
            except asyncio.TimeoutError:
                return self._get(cmd, topic, queue_id, offset, max_nums, tags)
            finally:
                holds.release(topic, queue_id, fut)
