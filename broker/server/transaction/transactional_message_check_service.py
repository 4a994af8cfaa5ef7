"""TransactionalMessageCheckService: half messages left undecided are asked about.

Every transactionCheckInterval (a timer: nothing else can make a half message due sooner) the
half queue is read from the system group's offset, as RocketMQ's TransactionalMessageServiceImpl
.check does: a half message whose transaction ended is passed; one checked transactionCheckMax
times already is discarded (a log line); one younger than transactionTimeOut stops the pass (the
queue is in store order: the rest are younger still). Any other is renewed (written again at the
queue's end with TRANSACTION_CHECK_TIMES one higher and its original's offset, so that the offset
can pass it and the next pass finds the copy) and a live producer of its group gets a oneway
CHECK_TRANSACTION_STATE about the copy; the producer answers with END_TRANSACTION. The offset
persists with the consumer offsets: after a restart the pass resumes there, re-asking at worst
about a few half messages whose answers the transaction state dedups.

It runs on a master only (a slave's store takes no writes), in the broker process, the commit
log's only writer.
"""
from __future__ import annotations

import asyncio
import logging
import time

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.server.schedule.schedule_service import REAL_QID, REAL_TOPIC
from broker.server.tasks import cancel_and_wait
from broker.server.transaction import (HALF_TOPIC, PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_CHECK_TIMES,
                                         PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, PROPERTY_UNIQ_KEY)
from broker.server.transaction.transactional_message_bridge import encode_message_ext
from broker.server.transaction.transactional_message_service import original_of
from broker.store.errors import ServiceUnavailable, StoreError

log = logging.getLogger("transaction")

_YIELD_EVERY = 32  # half messages looked at between two turns of the event loop


class TransactionalMessageCheckService:
    def __init__(self, service, producers, config, file_reserved_hours: int):
        self.service = service  # TransactionalMessageService
        self.bridge = service.bridge
        self.producers = producers  # ProducerManager
        self.timeout_ms = config.transactionTimeOut
        self.check_max = config.transactionCheckMax
        self.interval = config.transactionCheckInterval / 1000
        self.reserved_ms = file_reserved_hours * 3600 * 1000
        self._task: asyncio.Task | None = None
        self.checks_sent = 0
        self.discarded = 0

    def set_checking(self, on: bool) -> None:
        """Start (a master, or a member that just became one: the state is read back first) or
        stop checking."""
        if on and self._task is None:
            self._task = asyncio.ensure_future(self._run())
        elif not on:
            self.service.ready.clear()  # read back again before the next END_TRANSACTION as master
            if self._task is not None:
                self._task.cancel()
                self._task = None

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.service.load()
                break
            except (StoreError, ServiceUnavailable) as e:
                log.error("transaction state not read back (%s): END_TRANSACTION waits; again in %gs", e,
                          self.interval)
                await asyncio.sleep(self.interval)
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check()
            except (StoreError, ServiceUnavailable) as e:  # a full disk, the store closing: next interval
                log.warning("transaction check stopped early: %s", e)

    async def check(self) -> None:
        """One pass over the half queue (RocketMQ's check(transactionTimeout, transactionCheckMax))."""
        bridge, service = self.bridge, self.service
        start_ms = int(time.time() * 1000)
        begin = bridge.fetch_offset(HALF_TOPIC)
        offset, seen = begin, 0
        for qo, msg in bridge.read(HALF_TOPIC, begin):
            seen += 1
            if seen % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
            if msg is not None and not self._look_at(qo, msg, start_ms):
                break
            offset = qo + 1
        if offset != begin:
            bridge.update_offset(HALF_TOPIC, offset)
        service.passed(offset)

    def _look_at(self, qo: int, msg, start_ms: int) -> bool:
        """One half message; False when the pass stops before it."""
        original = original_of(msg, qo)
        if self.service.ended(qo, original):
            return True
        try:
            times = int(msg.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0"))
        except ValueError:
            times = 0
        if times >= self.check_max:
            self.discarded += 1
            log.error("half message %s (topic %s, queue offset %d, original %d) has been checked %d times "
                      "(transactionCheckMax): discarded", msg.properties.get(PROPERTY_UNIQ_KEY, msg.msg_id),
                      msg.properties.get(REAL_TOPIC), qo, original, times)
            return True
        now = int(time.time() * 1000)
        if now - msg.born_timestamp > self.reserved_ms:
            log.info("half message %s is older than fileReservedTime: skipped", msg.msg_id)
            return True
        if msg.store_timestamp >= start_ms:
            return False  # stored during this pass (a copy made by it, or a new message): the next pass
        if 0 <= now - msg.born_timestamp < self.timeout_ms:
            return False  # not due yet, nor anything after it
        props = dict(msg.properties)
        props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(times + 1)
        props[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(original)
        copy = self.bridge.renew_half(msg, props)
        self.service.note_renewed(copy.queue_offset, original)
        self._ask(msg, props, copy)
        return True

    def _ask(self, msg, props: dict, copy) -> None:
        """sendCheckMessage: CHECK_TRANSACTION_STATE (oneway) about the copy, to one producer of
        the group; none connected is logged, and the copy is asked about at the next pass."""
        group = props.get(PROPERTY_PRODUCER_GROUP, "")
        conn = self.producers.available_channel(group)
        if conn is None:
            log.warning("check of half message %s: no producer of group %r is connected", copy.msg_id, group)
            return
        uniq = props.get(PROPERTY_UNIQ_KEY)
        ext = {"tranStateTableOffset": str(copy.queue_offset), "commitLogOffset": str(copy.physical_offset),
               "offsetMsgId": copy.msg_id}
        if uniq:
            ext["msgId"] = ext["transactionId"] = uniq
        try:
            queue_id = int(props.get(REAL_QID, "0"))
        except ValueError:
            queue_id = 0
        # the message as the producer sent it (its real topic and queue), at the copy's offsets
        record = self.bridge.store.record_view(msg.physical_offset)
        try:
            body = encode_message_ext(record, props.get(REAL_TOPIC, ""), queue_id, copy.queue_offset,
                                      copy.physical_offset, props)
        finally:
            record.release()
        conn.oneway(RemotingCommand.request(codes.CHECK_TRANSACTION_STATE, ext, body, oneway=True))
        self.checks_sent += 1
