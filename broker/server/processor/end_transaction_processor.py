"""EndTransactionProcessor: END_TRANSACTION (37), a producer's commit or rollback of a half
message, after its local transaction or when the check service asked (fromTransactionCheck).

A commit stores the real message (the half message's body and properties, its real topic and
queue restored, REAL_TOPIC / REAL_QID / TRAN_MSG removed, the COMMIT type in sysFlag; a delay
level still delays it, as RocketMQ's CommitLog does for a committed message); a commit or a
rollback then records the op (TransactionalMessageService.record_end). An END_TRANSACTION that
names no half message, another group's, a stale offset, or a transaction already ended is
answered SYSTEM_ERROR with a remark saying which, and stores nothing. A slave refuses it
(SLAVE_NOT_AVAILABLE), as RocketMQ's does; commitOrRollback 0 (UNKNOW) is answered with nothing.
"""
from __future__ import annotations

import logging

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import EndTransactionRequestHeader, decode
from broker.remoting.refusals import BadRequest
from broker.server.schedule.schedule_service import REAL_QID, REAL_TOPIC
from broker.server.processor.send_processor import STORED_STATUSES
from broker.server.transaction import (HALF_TOPIC, PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_PREPARED,
                                         TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE,
                                         reset_transaction_value)
from broker.server.transaction.transactional_message_service import original_of
from broker.store.errors import StoreError
from broker.store.message import encode_properties, host_bytes

log = logging.getLogger("transaction")

# sendFinalMessage: stored, if not yet as durable as asked


class EndTransactionProcessor:
    def __init__(self, store, topics, schedule, holds, service):
        self.store = store
        self.topics = topics
        self.schedule = schedule
        self.holds = holds
        self.service = service  # TransactionalMessageService

    def handlers(self) -> dict:
        return {codes.END_TRANSACTION: self.end}

    def end(self, cmd: RemotingCommand, conn):
        if self.store.is_slave:
            log.warning("END_TRANSACTION from %s refused: this broker is a slave", conn.peer)
            return cmd.response(codes.SLAVE_NOT_AVAILABLE,
                                remark="Message store is slave mode, so end transaction is forbidden.")
        h = decode(EndTransactionRequestHeader, cmd.ext)
        if h.commitOrRollback not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            raise BadRequest(f"commitOrRollback field wrong: {h.commitOrRollback} (8 commit, 12 rollback, 0 unknown)")
        if h.commitOrRollback == TRANSACTION_NOT_TYPE:
            log.info("producer %s ended half message %s as unknown%s: it will be checked", conn.peer, h.msgId,
                     " (answering a check)" if h.fromTransactionCheck else "")
            return None
        if not self.service.ready.is_set():  # the state is being read back (a start, a new master)
            return self._later(cmd, h)
        return self._end(cmd, h)

    async def _later(self, cmd: RemotingCommand, h):
        await self.service.ready.wait()
        reply = self._end(cmd, h)
        return reply if reply is None or isinstance(reply, RemotingCommand) else await reply

    def _error(self, cmd: RemotingCommand, h, remark: str):
        log.warning("END_TRANSACTION (%s, group %s, commit log offset %d) refused: %s",
                    "commit" if h.commitOrRollback == TRANSACTION_COMMIT_TYPE else "rollback", h.producerGroup,
                    h.commitLogOffset, remark)
        return None if cmd.is_oneway else cmd.response(codes.SYSTEM_ERROR, remark=remark)

    def _end(self, cmd: RemotingCommand, h):
        try:
            msg = self.store.lookup(h.commitLogOffset)
        except StoreError as e:
            return self._error(cmd, h, f"Find prepared transaction message failed: commit log offset "
                                       f"{h.commitLogOffset}: {e}")
        if msg.topic != HALF_TOPIC:
            return self._error(cmd, h, f"Find prepared transaction message failed: the message at commit log offset "
                                       f"{h.commitLogOffset} is in topic {msg.topic}, not a half message")
        # checkPrepareMessage
        if msg.properties.get(PROPERTY_PRODUCER_GROUP) != h.producerGroup:
            return self._error(cmd, h, f"The producer group wrong: the half message is of group "
                                       f"{msg.properties.get(PROPERTY_PRODUCER_GROUP)!r}")
        if msg.queue_offset != h.tranStateTableOffset:
            return self._error(cmd, h, f"The transaction state table offset wrong: the half message is at "
                                       f"{msg.queue_offset}, not {h.tranStateTableOffset}")
        original = original_of(msg, msg.queue_offset)
        why = self.service.refusal(msg.queue_offset, original)
        if why is not None:
            return self._error(cmd, h, why)
        flushed = None
        if h.commitOrRollback == TRANSACTION_COMMIT_TYPE:
            flushed = self._store_real(msg)  # a store refusal propagates: answered with its code, no op
        self.service.record_end(msg.queue_offset, original)
        log.debug("half message %d %s by %s", msg.queue_offset,
                  "committed" if h.commitOrRollback == TRANSACTION_COMMIT_TYPE else "rolled back", h.producerGroup)
        if flushed is None or cmd.is_oneway:
            # a rollback's reply keeps the remark RocketMQ's createResponseCommand starts with
            remark = None if h.commitOrRollback == TRANSACTION_COMMIT_TYPE else "not set any response code"
            return None if cmd.is_oneway else cmd.response(codes.SUCCESS, remark=remark)
        return self._after_flush(cmd, flushed)

    def _store_real(self, msg):
        """endMessageTransaction + sendFinalMessage: the committed message in its real queue."""
        props = dict(msg.properties)
        topic = props.pop(REAL_TOPIC, None)
        qid = props.pop(REAL_QID, "0")
        props.pop(PROPERTY_TRANSACTION_PREPARED, None)
        if not topic:
            raise BadRequest(f"the half message at commit log offset {msg.physical_offset} has no REAL_TOPIC")
        try:
            queue_id = int(qid)
        except ValueError:
            queue_id = 0
        cfg = self.topics.get_or_create(topic)
        if cfg is not None and queue_id >= cfg.writeQueueNums:
            queue_id = 0
        level = self.schedule.level_of(props)
        if level:
            topic, queue_id, props = self.schedule.divert(topic, queue_id, props, level)
        result, flushed = self.store.append(
            topic, queue_id, msg.body, encode_properties(props), flag=msg.flag,
            sys_flag=reset_transaction_value(msg.sys_flag, TRANSACTION_COMMIT_TYPE),
            born_timestamp=msg.born_timestamp, born_host=host_bytes(msg.born_host),
            reconsume_times=msg.reconsume_times)
        if level:
            self.schedule.arrived(level)
        else:
            self.holds.notify(topic, queue_id, result.end_offset)
        return flushed

    @staticmethod
    async def _after_flush(cmd: RemotingCommand, flushed):
        status = await flushed
        if status in STORED_STATUSES:
            return cmd.response(codes.SUCCESS)
        return cmd.response(codes.SYSTEM_ERROR, remark=status.name)
