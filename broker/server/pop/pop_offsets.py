"""PopOffsets: the groups' pop offsets as pops move them, published only once durable.

A pop reads from its group's pop offset and moves it past what it handed out at once, so the
group's next pop gets the next messages. But the offset table itself (store.consumer_offsets) is
what leaves this broker: consumerOffset.json persists it, and a slave or DLedger follower copies
it (SlaveSynchronize, GET_ALL_CONSUMER_OFFSET) and keeps it when it becomes the master. An
offset there past a popped range whose checkpoint the new master never got would make the new
master skip those messages for good: its replay of the revive log finds no checkpoint to revive
them from, and its pop offset says they were handed out.

So a move is published in the order of the revive log: the table takes it once the put of the
checkpoint written for it is durable at the group's replication level (the put future says so:
flushed under SYNC_FLUSH, copied by a slave under SYNC_MASTER, held by a majority in DLedger
mode). Until then pops read from the move held here (`query`). A move that wrote no record of its
own (messages filtered out, a queue whose offset left it) waits behind the moves before it on
the same queue. Records commit in log order, so a future done covers every put before it, and the
moves are published from the oldest on.

A put the store answered as not kept (a DLedger leader whose followers did not answer within
maxWaitAckTimeMs) publishes nothing yet, but its move still holds for pops (its checkpoint is in
flight here and may commit late): it is published with the next put that is kept, which covers
it, since a leader's log only grows while it leads. A broker that stops being the master drops
everything held (`reset`): the next master replays the checkpoints that were kept, and a move it
never hears of is at worst a pop delivered again. When the store answers puts at once (no
future: ASYNC_FLUSH on an ASYNC_MASTER) the table moves at once, as durable as the records are.
"""
from __future__ import annotations

from collections import deque

from broker.server.processor.send_processor import STORED_STATUSES

_Key = tuple  # (group, topic, queue_id)


class PopOffsets:
    def __init__(self, store):
        self.store = store
        self._ahead: dict[_Key, int] = {}  # the offset pops read from, while the table lags behind it
        self._pending: deque = deque()  # (put future, key, offset) in the order the moves were made
        self._unkept: dict[_Key, int] = {}  # moves whose put was not kept: out with the next one kept

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """Where the group's next pop of the queue reads from (-1: never committed)."""
        table = self.store.consumer_offsets.query(group, topic, queue_id)
        ahead = self._ahead
        if not ahead:  # (nothing held: the store answers puts at once, or every move is published)
            return table
        return max(ahead.get((group, topic, queue_id), -1), table)

    def advance(self, group: str, topic: str, queue_id: int, offset: int, put=None) -> None:
        """Move the group's pop offset to `offset`: at once for pops, into the table once `put`
        (the future of the checkpoint written for this move) is durable. Without `put` the move
        waits for the moves before it on this queue only (none held: the table takes it now)."""
        if put is None:
            ahead = self._ahead
            if not ahead or (group, topic, queue_id) not in ahead:  # (_publish's, nothing held for it)
                self.store.consumer_offsets.raise_to(group, topic, queue_id, offset)
                return
        key = (group, topic, queue_id)
        self._ahead[key] = max(self._ahead.get(key, -1), offset)
        if put is None and self._pending:
            put = self._pending[-1][0]  # the latest put covers this queue's earlier ones
        if put is None:  # only moves whose puts were not kept hold this queue: it waits with them
            self._unkept[key] = max(self._unkept.get(key, -1), offset)
            return
        self._pending.append((put, key, offset))
        put.add_done_callback(self._drain)

    def reset(self) -> None:
        """This broker stops being the master (or replays the revive log anew): nothing held is
        published; the next master's replay says where each group is."""
        self._ahead.clear()
        self._pending.clear()
        self._unkept.clear()

    def _drain(self, _fut=None) -> None:
        pending = self._pending
        while pending and pending[0][0].done():
            put, key, offset = pending.popleft()
            if not self._kept(put):
                self._unkept[key] = max(self._unkept.get(key, -1), offset)
                continue
            for k, o in self._unkept.items():  # earlier in the log than `put`: kept with it
                self._publish(k, o)
            self._unkept.clear()
            self._publish(key, offset)

    @staticmethod
    def _kept(put) -> bool:
        return not put.cancelled() and put.exception() is None and put.result() in STORED_STATUSES

    def _publish(self, key: _Key, offset: int) -> None:
        group, topic, queue_id = key
        table = self.store.consumer_offsets
        if offset > table.query(group, topic, queue_id):
            table.commit(group, topic, queue_id, offset)
        ahead = self._ahead
        if ahead and ahead.get(key, offset + 1) <= offset:
            del ahead[key]
