"""TransactionalMessageBridge: what the transaction code reads from and writes to the store (the
Java broker's class of that name): half messages in, renewed half messages, op messages, the
system group's offsets, and a half message re-encoded for a producer's check."""
from __future__ import annotations

import logging
import struct
import time
from typing import Iterator

from broker.kernels.codec import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from broker.server.schedule.schedule_service import REAL_QID, REAL_TOPIC
from broker.server.system_topic_reader import read_messages
from broker.common.topic_validator import PERM_READ, PERM_WRITE
from broker.store.config_files import TopicConfig
from broker.store.message import StoredMessage, encode_properties, host_bytes
from broker.server.transaction import (HALF_TOPIC, OP_TOPIC, REMOVE_TAG, SYS_GROUP, TRANSACTION_NOT_TYPE,
                                         reset_transaction_value)

log = logging.getLogger("transaction")



def encode_message_ext(record, topic: str, queue_id: int, queue_offset: int, physical_offset: int,
                       properties: dict) -> bytes:
    """A stored record as MessageDecoder.encode writes a MessageExt (the same layout), with
    another topic, queue, offsets and properties: the body of CHECK_TRANSACTION_STATE, which a
    producer reads as the message it sent. Everything else (hosts, times, body) is the record's."""
    mv = memoryview(record)
    sys_flag = int.from_bytes(mv[36:40], "big")
    body_at = 48 + (20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8) + 8 + (20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8) + 4 + 8
    body_end = body_at + 4 + int.from_bytes(mv[body_at:body_at + 4], "big")
    tb, pb = topic.encode(), encode_properties(properties)
    head = bytearray(mv[:body_end])
    struct.pack_into(">i", head, 0, body_end + 1 + len(tb) + 2 + len(pb))  # TOTALSIZE
    struct.pack_into(">i", head, 12, queue_id)
    struct.pack_into(">qq", head, 20, queue_offset, physical_offset)
    return b"".join((head, bytes((len(tb),)), tb, struct.pack(">h", len(pb)), pb))


class TransactionalMessageBridge:
    def __init__(self, store, topics):
        self.store = store
        self.topics = topics

    def ensure_topics(self) -> None:
        """The half and op topics, one queue each, created on first use as RocketMQ's
        selectTopicConfig does (whatever autoCreateTopicEnable says: the broker writes them)."""
        for name in (HALF_TOPIC, OP_TOPIC):
            if self.topics.get(name) is None:
                self.topics.create(TopicConfig(name, 1, 1, PERM_READ | PERM_WRITE))

    # -- writes ----------------------------------------------------------------------------------
    def put_half(self, topic: str, queue_id: int, body, props: dict, *, flag: int, sys_flag: int,
                 born_timestamp: int, born_host: bytes, reconsume_times: int):
        """parseHalfMessageInner + putHalfMessage: the message kept in the half topic, its real
        topic and queue in REAL_TOPIC / REAL_QID, its transaction type reset to NOT_TYPE (so
        that a copy of its record is never mistaken for a prepared one). Returns store.append's."""
        self.ensure_topics()
        props = dict(props)
        props[REAL_TOPIC] = topic
        props[REAL_QID] = str(queue_id)
        return self.store.append(HALF_TOPIC, 0, body, encode_properties(props), flag=flag,
                                 sys_flag=reset_transaction_value(sys_flag, TRANSACTION_NOT_TYPE),
                                 born_timestamp=born_timestamp, born_host=born_host,
                                 reconsume_times=reconsume_times)

    def renew_half(self, msg: StoredMessage, props: dict):
        """renewHalfMessageInner: the half message written again at the queue's end (same body,
        born time and host; the properties given), so that the check service's offset can pass
        it. Returns the PutResult."""
        result, _ = self.store.append(HALF_TOPIC, 0, msg.body, encode_properties(props), flag=msg.flag,
                                      sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
                                      born_host=host_bytes(msg.born_host), reconsume_times=msg.reconsume_times,
                                      wait=False)
        return result

    def put_op(self, half_offset: int) -> int:
        """addRemoveTagInTransactionOp: tag "d", body the half message's queue offset. Returns the
        op's own queue offset."""
        self.ensure_topics()
        result, _ = self.store.append(OP_TOPIC, 0, str(half_offset).encode(), {"TAGS": REMOVE_TAG, "WAIT": "true"},
                          born_timestamp=int(time.time() * 1000), born_host=self.store.commit_log.store_host,
                          wait=False)
        return result.queue_offset

    # -- the system group's offsets ------------------------------------------------------------------
    def fetch_offset(self, topic: str) -> int:
        """fetchConsumeOffset: the committed offset of CID_RMQ_SYS_TRANS, else the queue's minimum."""
        off = self.store.consumer_offsets.query(SYS_GROUP, topic, 0)
        return off if off >= 0 else max(self.store.min_offset(topic, 0), 0)

    def update_offset(self, topic: str, offset: int) -> None:
        self.store.consumer_offsets.commit(SYS_GROUP, topic, 0, offset)

    # -- reads -------------------------------------------------------------------------------------
    def read(self, topic: str, offset: int, batch: int = 32) -> Iterator[tuple[int, StoredMessage | None]]:
        """(queue offset, message) of queue 0 from `offset` to its dispatched end; a hole gives None
        for its message, so the caller steps over."""
        return read_messages(self.store, topic, 0, offset, batch)
