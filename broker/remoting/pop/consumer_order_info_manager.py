"""ConsumerOrderInfoManager: orderly pop (order=true). A queue's messages go out one batch at a
time: the group's offset stays at the batch's first message until every message of it is acked,
and the queue is blocked while the batch is invisible. A batch not acked in time is popped again
from its first unacked message, each message's consumed count raised (RocketMQ
returns it in orderCountInfo; the client makes it the reconsumeTimes).

RocketMQ writes no checkpoint for an orderly pop; the state is this table (consumerOrderInfo.json)
and the group's offset. Both are persisted every flushConsumerOffsetInterval: after a kill -9 a
batch acked within that interval may be delivered again (the offset is the only truth), never lost.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field

from broker.store.config_files import WRITER, read_with_backup, write_atomic

log = logging.getLogger("pop")


@dataclass
class OrderInfo:
    pop_time: int
    invisible_time: int
    offsets: list[int]
    acked: int = 0  # bit i: offsets[i] acked (commitOffsetBit)
    consumed: dict[int, int] = field(default_factory=dict)  # offset -> times delivered before

    def all_acked(self) -> bool:
        return self.acked == (1 << len(self.offsets)) - 1

    def next_offset(self) -> int:
        """The first unacked offset of the batch, or the one after it when all are acked."""
        for i, off in enumerate(self.offsets):
            if not self.acked >> i & 1:
                return off
        return self.offsets[-1] + 1

    def to_dict(self) -> dict:
        return {"popTime": self.pop_time, "invisibleTime": self.invisible_time, "offsetList": self.offsets,
                "commitOffsetBit": self.acked, "offsetConsumedCount": {str(k): v for k, v in self.consumed.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "OrderInfo":
        return cls(int(d["popTime"]), int(d["invisibleTime"]), [int(x) for x in d["offsetList"]],
                   int(d.get("commitOffsetBit", 0)),
                   {int(k): int(v) for k, v in (d.get("offsetConsumedCount") or {}).items()})


class ConsumerOrderInfoManager:
    def __init__(self, config_dir: str):
        self.path = os.path.join(config_dir, "consumerOrderInfo.json")
        self.table: dict[str, dict[int, OrderInfo]] = {}  # "topic@group" -> queueId -> OrderInfo
        self._dirty = False

    def load(self) -> None:
        data = read_with_backup(self.path) or {}
        for key, queues in (data.get("table") or {}).items():
            try:
                self.table[key] = {int(q): OrderInfo.from_dict(d) for q, d in queues.items()}
            except (KeyError, TypeError, ValueError) as e:
                log.error("%s: entry %s unreadable (%s); its queues start unblocked", self.path, key, e)

    def get(self, topic: str, group: str, queue_id: int) -> OrderInfo | None:
        return self.table.get(f"{topic}@{group}", {}).get(queue_id)

    def check_block(self, topic: str, group: str, queue_id: int, now_ms: int) -> bool:
        """A batch of the queue is out, unacked and still invisible."""
        info = self.get(topic, group, queue_id)
        return info is not None and not info.all_acked() and now_ms < info.pop_time + info.invisible_time

    def update(self, topic: str, group: str, queue_id: int, pop_time: int, invisible_time: int,
               offsets: list[int]) -> dict[int, int]:
        """A batch popped: each offset's count of earlier deliveries (0 for a first delivery)."""
        old = self.get(topic, group, queue_id)
        counts: dict[int, int] = {}
        if old is not None:
            for off in offsets:
                if off in old.offsets:
                    counts[off] = old.consumed.get(off, 0) + 1
        self.table.setdefault(f"{topic}@{group}", {})[queue_id] = OrderInfo(pop_time, invisible_time, list(offsets),
                                                                           0, counts)
        self._dirty = True
        return {off: counts.get(off, 0) for off in offsets}

    def commit_and_next(self, topic: str, group: str, queue_id: int, offset: int, pop_time: int) -> int:
        """Ack `offset` of the batch popped at `pop_time`: the group's next offset, -1 when the
        batch has no such offset, -2 when the batch out now is another one (a stale handle)."""
        info = self.get(topic, group, queue_id)
        if info is None or not info.offsets:
            return -1
        if info.pop_time != pop_time:
            return -2
        try:
            i = info.offsets.index(offset)
        except ValueError:
            return -1
        info.acked |= 1 << i
        self._dirty = True
        return info.next_offset()

    def update_next_visible_time(self, topic: str, group: str, queue_id: int, pop_time: int,
                                 next_visible_ms: int) -> bool:
        info = self.get(topic, group, queue_id)
        if info is None or info.pop_time != pop_time:
            return False
        info.invisible_time = next_visible_ms - info.pop_time
        self._dirty = True
        return True

    def _text(self) -> str:
        return json.dumps({"table": {k: {str(q): i.to_dict() for q, i in v.items()} for k, v in self.table.items()}})

    def persist(self) -> None:
        if self._dirty:
            try:
                write_atomic(self.path, self._text())
                self._dirty = False
            except OSError as e:
                log.error("could not persist %s: %s", self.path, e)

    def persist_soon(self) -> None:
        if self._dirty:
            WRITER.submit(self.path, self._text())
            self._dirty = False


def now_ms() -> int:
    return int(time.time() * 1000)
