"""PullMessageProcessor: PULL_MESSAGE (11), with long polling and server-side filtering by tags, or
by SQL92 over the message properties with enablePropertyFilter=true (another expression type is
refused: broker.server.filter.expression_type).

A FOUND response's body is the stored records themselves: views of the mapped commit log go to
the transport's writelines (one writev), never through a Python copy.
"""
from __future__ import annotations

import asyncio
import time

from broker.common.faq_url import suggest_todo
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.server.filter.expression_type import MessageFilter, pull_filter, registered_filter
from broker.remoting.headers import PullMessageRequestHeader, decode
from broker.remoting.refusals import BadRequest, TopicNotExist
from broker.store.results import GetStatus

FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 1, 2, 4
MAX_TRANSFER_BYTES = 256 * 1024  # RocketMQ's maxTransferBytesOnMessageInMemory
MAX_TRANSFER_COUNT = 32

_MOVED_IF_NOT_ZERO = (GetStatus.NO_MATCHED_LOGIC_QUEUE, GetStatus.NO_MESSAGE_IN_QUEUE)
_CODES = {GetStatus.FOUND: codes.SUCCESS, GetStatus.NO_MATCHED_MESSAGE: codes.PULL_RETRY_IMMEDIATELY,
          GetStatus.OFFSET_FOUND_NULL: codes.PULL_NOT_FOUND, GetStatus.OFFSET_OVERFLOW_BADLY: codes.PULL_OFFSET_MOVED,
          GetStatus.OFFSET_OVERFLOW_ONE: codes.PULL_NOT_FOUND, GetStatus.OFFSET_TOO_SMALL: codes.PULL_OFFSET_MOVED}

_REMARKS = {GetStatus.NO_MATCHED_LOGIC_QUEUE: GetStatus.NO_MESSAGE_IN_QUEUE.name}


class PullMessageProcessor:
    def __init__(self, store, topics, consumers, holds, config, groups=None, stats=None):
        self.groups = groups  # SubscriptionGroupManager: consumeEnable
        self.stats = stats  # BrokerStatsManager: what each group got
        self.store = store
        self.topics = topics
        self.consumers = consumers
        self.holds = holds
        self.long_polling = config.longPollingEnable
        self.property_filter = config.enablePropertyFilter
        self.suspend_max_ms = config.brokerSuspendMaxTimeMillis

    def handlers(self) -> dict:
        return {codes.PULL_MESSAGE: self.pull}

    def pull(self, cmd: RemotingCommand, conn):
        h = decode(PullMessageRequestHeader, cmd.ext)
        group, topic, queue_id, offset, sys_flag = h.consumerGroup, h.topic, h.queueId, h.queueOffset, h.sysFlag
        max_nums = max(1, min(h.maxMsgNums, 1024))
        if self.groups is not None:  # before the topic, as RocketMQ checks
            self.groups.check_consumable(group)
        cfg = self.topics.get(topic)
        if cfg is None:
            raise TopicNotExist(suggest_todo(f"topic[{topic}] not exist, apply first please! "))
        # A slave serves whatever its replicated queues hold: a queue its config does not count
        # (yet) is one with nothing in it, not an error (the route may come from the master's config)
        if queue_id < 0 or queue_id >= cfg.readQueueNums and not self.store.is_slave:
            raise BadRequest(f"queueId[{queue_id}] is illegal, topic {topic} has {cfg.readQueueNums} read queues")
        # The filter is settled before anything moves: a subscription we cannot filter by is
        # refused with the consumer's offset where it was.
        if sys_flag & FLAG_SUBSCRIPTION:
            flt = pull_filter(h.subscription, h.expressionType, self.property_filter)
        else:
            sub = self.consumers.subscription(group, topic)
            flt = registered_filter(sub, self.property_filter) if sub is not None else None
            if flt is None:
                flt = MessageFilter(self.consumers.tag_hashes(group, topic), None)
        if sys_flag & FLAG_COMMIT_OFFSET and not self.store.is_slave:  # as Java: commits ride pulls on masters
            if h.commitOffset >= 0:
                self.store.consumer_offsets.commit(group, topic, queue_id, h.commitOffset)
        hold = sys_flag & FLAG_SUSPEND and self.long_polling
        suspend = min(h.suspendTimeoutMillis, self.suspend_max_ms) / 1000
        if self.store.queue_write_end(topic, queue_id) > self.store.dispatched():
            # Messages of this queue are in the log but not yet in its consume queue: answer once
            # they are (read-your-writes), not with an offset the next moment makes valid.
            return self._hold(cmd, topic, queue_id, offset, max_nums, flt, time.monotonic() + suspend, hold)
        res = self._get(cmd, topic, queue_id, offset, max_nums, flt)
        if res.code != codes.PULL_NOT_FOUND or not hold:
            return res
        return self._hold(cmd, topic, queue_id, offset, max_nums, flt, time.monotonic() + suspend, True)

    def _get(self, cmd, topic, queue_id, offset, max_nums, flt) -> RemotingCommand:
        store = self.store
        r = store.get(topic, queue_id, offset, max_nums, MAX_TRANSFER_BYTES, flt.tags, spans=True, sql=flt.sql)
        if r.status in _MOVED_IF_NOT_ZERO:
            code = codes.PULL_OFFSET_MOVED if offset != 0 else codes.PULL_NOT_FOUND
        else:
            code = _CODES[r.status]
        nxt = r.next_offset
        if code == codes.PULL_OFFSET_MOVED and store.is_slave:
            # a slave may lag its master: it never tells a consumer to move its offset (Java's
            # offsetCheckInSlave=false), it asks it to come again
            code, nxt = codes.PULL_RETRY_IMMEDIATELY, offset
        # suggestWhichBrokerId (seed 004): with slaveReadEnable, a master whose unread backlog no
        # longer fits the memory share sends the consumer to slave 1; otherwise, and on a slave,
        # consumers are sent (back) to the master
        suggest = 1 if r.suggest_slave and store.config.slaveReadEnable and not store.is_slave else 0
        # topicSysFlag/groupSysFlag: RocketMQ 5 names the flags of the topic and group (no flags here)
        ext = {"nextBeginOffset": nxt, "minOffset": r.min_offset, "maxOffset": r.max_offset,
               "suggestWhichBrokerId": suggest, "topicSysFlag": 0, "groupSysFlag": 0}
        # the remark is the store's GetMessageStatus by name, as RocketMQ's (whose consume queues
        # exist for every queue of a topic: a queue never written is NO_MESSAGE_IN_QUEUE there)
        remark = _REMARKS.get(r.status, r.status.name)
        if code != codes.SUCCESS:
            return cmd.response(code, ext, remark=remark)
        res = cmd.response(code, ext, r.messages, remark=remark)
        res.body_len = r.total_bytes
        if self.stats is not None:
            self.stats.group_get(cmd.ext.get("consumerGroup", ""), topic, r.count or 0, r.total_bytes, queue_id, nxt)
        return res

    async def _hold(self, cmd, topic, queue_id, offset, max_nums, flt, deadline, suspend) -> RemotingCommand:
        if self.store.reads_dispatched_only:
            return await self._hold_on_slave(cmd, topic, queue_id, offset, max_nums, flt, deadline)
        holds = self.holds
        store = self.store
        while True:
            # Every hold is registered in the same loop turn as the look that found nothing: a
            # send handled in any turn before (while this task waited to start, or to resume
            # after a dispatch) is either seen by that look or waited for here; one after it
            # resolves the hold. A message appended but not dispatched yet is waited for first.
            end = store.queue_write_end(topic, queue_id)
            if end > store.dispatched():
                try:  # read-your-writes even for a pull that may not be held (dispatch takes ~1 ms)
                    await store.wait_dispatched(end, max(deadline - time.monotonic(), 1.0))
                except asyncio.TimeoutError:
                    return self._get(cmd, topic, queue_id, offset, max_nums, flt)
                continue
            res = self._get(cmd, topic, queue_id, offset, max_nums, flt)
            left = deadline - time.monotonic()
            if res.code != codes.PULL_NOT_FOUND or not suspend or left <= 0:
                return res
            fut = holds.hold(topic, queue_id)
            try:
                await asyncio.wait_for(fut, left)
            except asyncio.TimeoutError:
                return self._get(cmd, topic, queue_id, offset, max_nums, flt)
            finally:
                holds.release(topic, queue_id, fut)

    async def _hold_on_slave(self, cmd, topic, queue_id, offset, max_nums, flt, deadline) -> RemotingCommand:
        """On a slave no send tells us which queue grew: every dispatch the reput publishes
        wakes the held pulls, and each looks at its own queue again."""
        store = self.store
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return self._get(cmd, topic, queue_id, offset, max_nums, flt)
            try:
                await store.wait_dispatched(store.dispatched() + 1, left)
            except asyncio.TimeoutError:
                return self._get(cmd, topic, queue_id, offset, max_nums, flt)
            res = self._get(cmd, topic, queue_id, offset, max_nums, flt)
            if res.code != codes.PULL_NOT_FOUND:
                return res
