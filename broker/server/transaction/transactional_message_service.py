"""TransactionalMessageService: which half messages are still pending.

A half message is ended when an op names its queue offset. The check service renews a half
message it asks about (a copy at the queue's end, TransactionalMessageBridge.renew_half), and the
producer may answer about either the copy (a check) or the original (its own END_TRANSACTION,
late): each copy carries its original's offset in TRAN_PREPARED_QUEUE_OFFSET, and ending one
writes an op for both, so that whichever answer comes second finds the transaction ended and
stores nothing (RocketMQ 4.x would store the message twice).

What is remembered is bounded by the check service's progress: `floor` is the lowest half offset
that may still be pending (the check offset, or the original of a copy the check has not passed).
Ops naming offsets below it are forgotten, the op queue's offset of the system group moves past
them, and an END_TRANSACTION for a half message below it is refused: it was ended, or discarded
after transactionCheckMax checks. After a restart the remembered state is read back from the op
queue (from the system group's op offset) and the half queue (from its check offset).
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque

from broker.server.transaction import HALF_TOPIC, OP_TOPIC, PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, REMOVE_TAG
from broker.store.message import StoredMessage

log = logging.getLogger("transaction")


def original_of(msg: StoredMessage, queue_offset: int) -> int:
    """The queue offset of the half message `msg` (at `queue_offset`) is a copy of, or its own."""
    try:
        return int(msg.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, queue_offset))
    except ValueError:
        return queue_offset


class TransactionalMessageService:
    def __init__(self, bridge):
        self.bridge = bridge
        self.done: set[int] = set()  # half offsets an op names, at or above the floor
        self._ops: deque[tuple[int, int]] = deque()  # (op queue offset, half offset), oldest first
        self._op_end = 0  # the op queue offset after the last op read or written
        self.copies: dict[int, int] = {}  # a copy's half offset -> its original's, while pending
        self.ready = asyncio.Event()  # set once the state is read back (END_TRANSACTION waits for it)

    async def load(self) -> None:
        """Read the state back from the queues (at start, or when this broker becomes master)."""
        self.ready.clear()
        self.done.clear()
        self._ops.clear()
        self.copies.clear()
        store = self.bridge.store
        await store.wait_dispatched(store.offsets()["wrote"])  # every op and half message written
        self._op_end = self.bridge.fetch_offset(OP_TOPIC)
        for qo, m in self.bridge.read(OP_TOPIC, self._op_end):
            self._op_end = qo + 1
            if m is None or m.tags != REMOVE_TAG:
                continue
            try:
                half = int(m.body)
            except ValueError:
                log.error("op message %d has the body %r, not a half offset; ignored", qo, m.body[:40])
                continue
            self.done.add(half)
            self._ops.append((qo, half))
        for qo, m in self.bridge.read(HALF_TOPIC, self.bridge.fetch_offset(HALF_TOPIC)):
            if m is not None and original_of(m, qo) != qo:
                self.copies[qo] = original_of(m, qo)
        log.info("transactions: %d ops read back, %d renewed half messages pending", len(self._ops), len(self.copies))
        self.ready.set()

    @property
    def floor(self) -> int:
        check = self.bridge.fetch_offset(HALF_TOPIC)
        return min(check, min(self.copies.values(), default=check))

    def ended(self, queue_offset: int, original: int) -> bool:
        return queue_offset in self.done or original in self.done

    def refusal(self, queue_offset: int, original: int) -> str | None:
        """Why an END_TRANSACTION for the half message at `queue_offset` must store nothing."""
        if self.ended(queue_offset, original):
            return (f"the transaction of half message {original} (queue offset {queue_offset}) was already "
                    f"committed or rolled back; nothing stored")
        if original < self.floor:
            return (f"half message {original} (queue offset {queue_offset}) is no longer pending: its "
                    f"transaction was committed or rolled back, or it was discarded after transactionCheckMax "
                    f"checks; nothing stored")
        return None

    def record_end(self, queue_offset: int, original: int) -> None:
        """The transaction ended: an op for the half message and for its original."""
        for off in dict.fromkeys((queue_offset, original)):
            if off not in self.done:
                self.done.add(off)
                op = self.bridge.put_op(off)
                self._ops.append((op, off))
                self._op_end = op + 1

    def note_renewed(self, copy_offset: int, original: int) -> None:
        self.copies[copy_offset] = original

    def passed(self, check_offset: int) -> None:
        """The check service's offset moved to `check_offset`: forget what is below the floor and
        move the op queue's offset past the ops that named only such half messages (as RocketMQ's
        calculateOpOffset, over the ops in the order they were written)."""
        for off in [c for c in self.copies if c < check_offset]:
            del self.copies[off]
        floor = self.floor
        while self._ops and self._ops[0][1] < floor:
            _, half = self._ops.popleft()
            self.done.discard(half)
        op_offset = self._ops[0][0] if self._ops else self._op_end
        if op_offset != self.bridge.fetch_offset(OP_TOPIC):
            self.bridge.update_offset(OP_TOPIC, op_offset)
