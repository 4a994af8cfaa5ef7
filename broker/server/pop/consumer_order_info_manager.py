"""ConsumerOrderInfoManager: orderly pop (order=true). A queue's messages go out one batch at a
time: the group's offset stays at the batch's first unacked message until every message of it is
acked, and the queue is blocked while the batch is invisible. A batch not acked in time is popped
again from its first unacked message, each message's consumed count raised (returned in
orderCountInfo; the client makes it the reconsumeTimes).

RocketMQ writes no checkpoint for an orderly pop and keeps this table in consumerOrderInfo.json,
written every few seconds, so a kill -9 may hand an acked batch out again. Here each batch ("oCk",
a PopCheckPoint) and each ack ("oAck", an AckMsg) is a record of the revive log (revive queue 0),
held live until its batch is fully acked or popped again; a start replays them (through the
PopReviveService's reading of the log), so the table, the group's offset and the block survive a
crash as the non-orderly checkpoints do.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from broker.store.pop_check_point import ORDER_ACK_TAG, ORDER_CK_TAG, AckMsg, PopCheckPoint

ORDER_RQ = 0  # the revive queue the orderly records go to (the handles say 999, RocketMQ's marker)


@dataclass
class OrderInfo:
    pop_time: int
    invisible_time: int
    offsets: list[int]
    acked: int = 0  # bit i: offsets[i] acked (commitOffsetBit)
    consumed: dict[int, int] = field(default_factory=dict)  # offset -> times delivered before
    positions: list[int] = field(default_factory=list)  # its live records in the revive log
    attempt_id: str = ""  # the pop's attemptId: a receive retried with it gets this batch again

    def all_acked(self) -> bool:
        return self.acked == (1 << len(self.offsets)) - 1

    def next_offset(self) -> int:
        """The first unacked offset of the batch, or the one after it when all are acked."""
        for i, off in enumerate(self.offsets):
            if not self.acked >> i & 1:
                return off
        return self.offsets[-1] + 1


class ConsumerOrderInfoManager:
    def __init__(self, store, revive_log):
        self.store = store
        self.log = revive_log
        self.table: dict[tuple[str, str, int], OrderInfo] = {}  # (topic, group, queueId) -> the batch out

    def reset(self) -> None:
        """Forget every batch out (this broker stops being the master: the next one replays)."""
        self.table.clear()

    def get(self, topic: str, group: str, queue_id: int) -> OrderInfo | None:
        return self.table.get((topic, group, queue_id))

    def check_block(self, topic: str, group: str, queue_id: int, now_ms: int, attempt_id: str = "") -> bool:
        """A batch of the queue is out, unacked and still invisible, to another attempt than this
        one (a client retrying a receive with the same attemptId is given the batch again)."""
        info = self.get(topic, group, queue_id)
        if info is None or info.all_acked() or (attempt_id and attempt_id == info.attempt_id):
            return False
        return now_ms < info.pop_time + info.invisible_time

    # -- pop, ack, invisible time (each logged, then applied) ---------------------------------------
    def update(self, topic: str, group: str, queue_id: int, pop_time: int, invisible_time: int,
               offsets: list[int], attempt_id: str = "") -> dict[int, int]:
        """A batch popped: each offset's count of earlier deliveries (0 for a first delivery)."""
        ck = PopCheckPoint(offsets[0], pop_time, invisible_time, len(offsets), queue_id, topic, group,
                           diffs=[o - offsets[0] for o in offsets], attempt_id=attempt_id)
        pos = self.log.append(ORDER_RQ, ORDER_CK_TAG, f"{topic}@{queue_id}@{group}@{pop_time}@{ORDER_CK_TAG}",
                              ck.to_json())
        info = self._popped(ck, pos)
        return {off: info.consumed.get(off, 0) for off in offsets}

    def commit_and_next(self, topic: str, group: str, queue_id: int, offset: int, pop_time: int) -> int:
        """Ack `offset` of the batch popped at `pop_time`: the group's next offset, -1 when the
        batch has no such offset, -2 when the batch out now is another one (a stale handle)."""
        info = self.get(topic, group, queue_id)
        if info is None or not info.offsets:
            return -1
        if info.pop_time != pop_time:
            return -2
        if offset not in info.offsets:
            return -1
        a = AckMsg(offset, info.offsets[0], group, topic, queue_id, pop_time)
        self.log.append(ORDER_RQ, ORDER_ACK_TAG, f"{topic}@{queue_id}@{offset}@{group}@{pop_time}@{ORDER_ACK_TAG}",
                        a.to_json())
        return self._acked(a)

    def update_next_visible_time(self, topic: str, group: str, queue_id: int, pop_time: int,
                                 next_visible_ms: int) -> bool:
        info = self.get(topic, group, queue_id)
        if info is None or info.pop_time != pop_time:
            return False
        ck = PopCheckPoint(info.offsets[0], pop_time, next_visible_ms - pop_time, len(info.offsets), queue_id, topic,
                           group, diffs=[o - info.offsets[0] for o in info.offsets], attempt_id=info.attempt_id)
        pos = self.log.append(ORDER_RQ, ORDER_CK_TAG, f"{topic}@{queue_id}@{group}@{pop_time}@{ORDER_CK_TAG}",
                              ck.to_json())
        self._popped(ck, pos)
        return True

    # -- applying records (live and at replay) --------------------------------------------------------
    def _popped(self, ck: PopCheckPoint, pos: int) -> OrderInfo:
        key = (ck.topic, ck.group, ck.queue_id)
        offsets = ck.offsets()
        old = self.table.get(key)
        if old is not None and old.pop_time == ck.pop_time:  # the same batch, its invisible time changed
            old.invisible_time = ck.invisible_time
            old.positions.append(pos)
            self.log.hold(ORDER_RQ, pos)
            return old
        counts = {}
        if old is not None:
            # the same attempt retried is the same delivery; another one raises each count
            again = 0 if ck.attempt_id and ck.attempt_id == old.attempt_id else 1
            for off in offsets:
                if off in old.offsets:
                    counts[off] = old.consumed.get(off, 0) + again
            self._drop(old)
        info = self.table[key] = OrderInfo(ck.pop_time, ck.invisible_time, offsets, 0, counts, [pos], ck.attempt_id)
        self.log.hold(ORDER_RQ, pos)
        offsets_table = self.store.consumer_offsets  # the batch's first message: stays until acked
        offsets_table.commit(ck.group, ck.topic, ck.queue_id, max(offsets[0], offsets_table.query(
            ck.group, ck.topic, ck.queue_id)))
        return info

    def _acked(self, a: AckMsg) -> int:
        info = self.get(a.topic, a.group, a.queue_id)
        if info is None or info.pop_time != a.pop_time or a.ack_offset not in info.offsets:
            return -1
        info.acked |= 1 << info.offsets.index(a.ack_offset)
        nxt = info.next_offset()
        offsets = self.store.consumer_offsets
        if nxt > offsets.query(a.group, a.topic, a.queue_id):
            offsets.commit(a.group, a.topic, a.queue_id, nxt)
        if info.all_acked():
            self._drop(info)  # its offset is committed: its records are needed no more
        return nxt

    def _drop(self, info: OrderInfo) -> None:
        for pos in info.positions:
            self.log.release(ORDER_RQ, pos)
        info.positions = []

    def replay_popped(self, ck: PopCheckPoint, rq: int, pos: int) -> None:
        self._popped(ck, pos)

    def replay_acked(self, a: AckMsg) -> None:
        self._acked(a)


def now_ms() -> int:
    return int(time.time() * 1000)
