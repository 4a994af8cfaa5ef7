"""The revive topic (rmq_sys_REVIVE_LOG_<brokerClusterName>) as the pop state's log: records are
appended to one of its reviveQueueNum queues; each record still needed after a crash is held
live by its position; the revive offset of a queue (the consumer offset of CID_RMQ_SYS_REVIVE_GROUP
on it, in consumerOffset.json) is its oldest live position, or its end when none is. A start reads
every queue again from its revive offset (`read`)."""
from __future__ import annotations

import logging

from broker.remoting.system_topic_reader import read_messages

log = logging.getLogger("pop")

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"  # PopAckConstants.REVIVE_TOPIC
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"  # PopAckConstants.REVIVE_GROUP


class ReviveLog:
    def __init__(self, store, cluster_name: str, queue_num: int):
        self.store = store
        self.topic = REVIVE_TOPIC_PREFIX + cluster_name
        self.queue_num = queue_num
        self._live: list[set[int]] = [set() for _ in range(queue_num)]
        # while the log is replayed the live sets are incomplete (records not read yet): the revive
        # offsets are committed once, after the replay
        self.replaying = False

    def append(self, rq: int, tag: str, uniq: str, body: bytes) -> int:
        """Append a record; its position in the revive queue."""
        return self.append_durable(rq, tag, uniq, body, False)[0]

    def append_durable(self, rq: int, tag: str, uniq: str, body: bytes, wait: bool = True):
        """Append a record; its position and, under SYNC_FLUSH / SYNC_MASTER, the future of its
        final put status (an ack is answered once it is as durable as a sent message)."""
        result, flushed = self.store.append(self.topic, rq, body, {"TAGS": tag, "UNIQ_KEY": uniq}, wait=wait)
        return result.queue_offset, flushed

    def hold(self, rq: int, pos: int) -> None:
        self._live[rq].add(pos)

    def release(self, rq: int, pos: int) -> None:
        self._live[rq].discard(pos)
        if not self.replaying:
            self._commit(rq, pos + 1)

    def replayed(self) -> None:
        self.replaying = False
        for rq in range(self.queue_num):
            self._commit(rq, 0)

    def _commit(self, rq: int, at_least: int) -> None:
        live = self._live[rq]
        new = min(live) if live else max(self.store.max_offset(self.topic, rq), at_least)
        offsets = self.store.consumer_offsets
        if new > offsets.query(REVIVE_GROUP, self.topic, rq):
            offsets.commit(REVIVE_GROUP, self.topic, rq, new)

    def read(self, rq: int):
        """(position, tag, body) of each record of the queue from its revive offset on; a hole or an
        unreadable record is stepped over (logged), never the end of the replay."""
        offset = max(self.store.consumer_offsets.query(REVIVE_GROUP, self.topic, rq), 0)
        for qo, msg in read_messages(self.store, self.topic, rq, offset, 256, 4 << 20):
            if msg is not None:
                yield qo, msg.tags, msg.body
