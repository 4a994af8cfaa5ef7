"""The revive topic (rmq_sys_REVIVE_LOG_<brokerClusterName>) as the pop state's log: records are
appended to one of its reviveQueueNum queues; each record still needed after a crash is held
live by its position; the revive offset of a queue (the consumer offset of CID_RMQ_SYS_REVIVE_GROUP
on it, in consumerOffset.json) is its oldest live position, or its end when none is. A start reads
every queue again from its revive offset (`read`).

A request that wrote records is answered once the last of them is as durable as a sent message
(`durable_since`): under SYNC_FLUSH once flushed, under SYNC_MASTER once a slave has it, in
DLedger mode once a majority of the group holds it. Records commit in the order they are
appended, so the last put's future covers every earlier one. Only then may a new master (a new
DLedger leader, a controller-mode slave switched to master) be counted on to replay them.

For the same reason a position is let go (`release`: its checkpoint acked, revived or replaced)
only once the record that finished it is that durable: the revive offset, which a slave or
follower copies and a new master replays from, never passes a checkpoint whose ack, or the
retry message its revive re-stored (put before the revive's ack), the new master may not have."""
from __future__ import annotations

import asyncio
import bisect
import functools
import logging
from collections import deque

from broker.server.processor.send_processor import STORED_STATUSES
from broker.server.system_topic_reader import read_messages

log = logging.getLogger("pop")

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"  # PopAckConstants.REVIVE_TOPIC
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"  # PopAckConstants.REVIVE_GROUP
# how long a queue's revive offset may lag its end when a release would need the end looked up:
# one look per queue in this time, not one per release
END_LOOK_DELAY = 0.1  # seconds


class LivePositions:
    """The positions of one revive queue still needed, the lowest found in O(1) amortized (a min()
    over the set cost a release time in proportion to what is in flight). Positions are held in
    the order they come, which is ascending (a queue's appends, its replay; one out of order is put
    in its place all the same), and let go in any order; the order's first live one is the lowest.
    Positions let go behind a long-lived lowest one are dropped from the order once it is more
    than twice the live ones (and 1,024)."""
    __slots__ = ("_live", "_order")

    def __init__(self):
        self._live: set[int] = set()
        self._order: deque[int] = deque()

    def add(self, pos: int) -> None:
        live = self._live
        if pos in live:
            return
        live.add(pos)
        order = self._order
        if order and pos < order[-1]:
            bisect.insort(order, pos)
        else:
            order.append(pos)

    def discard(self, pos: int) -> None:
        live = self._live
        if pos in live:
            live.remove(pos)
            if len(self._order) > 2 * len(live) + 1024:
                self._order = deque(sorted(live))

    def discard_low(self, pos: int) -> int | None:
        """discard(pos), then low(): in one call (a batch ack finishing a checkpoint)."""
        live = self._live
        if pos in live:
            live.remove(pos)
            if len(self._order) > 2 * len(live) + 1024:
                self._order = deque(sorted(live))
        order = self._order
        while order and order[0] not in live:
            order.popleft()
        return order[0] if order else None

    def low(self) -> int | None:
        """The lowest position still live, None when none is."""
        order, live = self._order, self._live
        while order and order[0] not in live:
            order.popleft()
        return order[0] if order else None

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, pos: int) -> bool:
        return pos in self._live


class ReviveLog:
    def __init__(self, store, cluster_name: str, queue_num: int):
        self.store = store
        self.topic = REVIVE_TOPIC_PREFIX + cluster_name
        self.queue_num = queue_num
        self._live = [LivePositions() for _ in range(queue_num)]
        # while the log is replayed the live sets are incomplete (records not read yet): the revive
        # offsets are committed once, after the replay
        self.replaying = False
        self.appended = 0  # records appended so far (a request's mark for durable_since)
        self.last_put = None  # the future of the last record's put status, if the store gives one
        self._unkept: list[tuple[int, int]] = []  # released behind a put not kept: out with the next kept
        self._generation = 0  # bumped by reset: a release finishing later belongs to a past mastership
        # each queue's end as _commit last read it: a queue's dispatched end only grows while this
        # broker is the master, so a live position at or below it is the revive offset without
        # asking the store again (whose tail search ran on every release: the tail is the revive
        # records just appended); forgotten on reset and after a replay. When the end is needed
        # (no live position, or the oldest past it) the offset goes to the end as last read, and
        # one look at the store per queue follows within END_LOOK_DELAY (`_looks`: queues with
        # one scheduled)
        self._ends = [0] * queue_num
        self._looks: set[int] = set()

    def append(self, rq: int, tag: str, uniq: str, body: bytes) -> int:
        """Append a record; its position in the revive queue. Its put's future is kept for
        durable_since and release."""
        # read back only at a start (and its queue's end within END_LOOK_DELAY): no prompt dispatch.
        # The properties as encode_properties({"TAGS": tag, "UNIQ_KEY": uniq}) writes them, without
        # a dict and a generator per record
        qo, fut = self.store.append_record(self.topic, rq, body, f"TAGS\x01{tag}\x02UNIQ_KEY\x01{uniq}".encode())
        self.appended += 1
        self.last_put = fut
        return qo

    def append_encoded(self, rq: int, body: bytes, properties: bytes) -> int:
        """append with the properties already encoded as append encodes them (TAGS, UNIQ_KEY): the
        batch ack's record, which the batch_ack kernel renders whole (PopReviveService.ack_offsets)."""
        qo, fut = self.store.append_record(self.topic, rq, body, properties)
        self.appended += 1
        self.last_put = fut
        return qo

    def append_held(self, rq: int, body: bytes, properties: bytes) -> tuple:
        """append_encoded, then hold(rq, its position): a pop's checkpoint record, held live until
        its acks or its revive release it (PopReviveService.add_check_point_values), in one call.
        (position, the put's future or None)."""
        qo, fut = self.store.append_record(self.topic, rq, body, properties)
        self.appended += 1
        self.last_put = fut
        positions = self._live[rq]  # (positions.add(qo), inline: a new record's position is the highest)
        live = positions._live
        if qo not in live:
            live.add(qo)
            order = positions._order
            if order and qo < order[-1]:
                bisect.insort(order, qo)
            else:
                order.append(qo)
        return qo, fut

    def append_releasing(self, rq: int, body: bytes, properties: bytes, pos: int) -> int:
        """append_encoded, then release(rq, pos): the batch ack's record that finishes the
        checkpoint at `pos` (PopReviveService.ack_offsets), in one call. The usual case (the put
        answered at once, none unkept, not replaying) is release's and _commit's own, inline."""
        qo, fut = self.store.append_record(self.topic, rq, body, properties)
        self.appended += 1
        self.last_put = fut
        if fut is not None or self._unkept or self.replaying:
            self.release(rq, pos)
            return qo
        # _commit(rq) after the discard, its two usual cases inline: the lowest live position at or
        # below the queue's end as last read is the revive offset; else (none live, or past it) the
        # end as last read while a look at the store is scheduled already
        low = self._live[rq].discard_low(pos)
        end = self._ends[rq]
        if low is not None and low <= end:
            new = low
        elif rq in self._looks:
            new = end  # (min(low, end) when low is past it)
        else:
            self._commit(rq)
            return qo
        # (query then commit in one call, one key made: raise_to commits only past what is there)
        self.store.consumer_offsets.raise_to(REVIVE_GROUP, self.topic, rq, new)
        return qo

    def durable_since(self, mark: int):
        """The future that covers every record appended since `appended` was `mark`, or None (none
        appended, or the store answers puts at once: ASYNC_FLUSH on an ASYNC_MASTER)."""
        return self.last_put if self.appended != mark else None

    def reset(self) -> None:
        """Forget the live positions (this broker stops being the master: the next one replays)."""
        self._live = [LivePositions() for _ in range(self.queue_num)]
        self.replaying = False
        self._unkept.clear()
        self._generation += 1
        self._ends = [0] * self.queue_num
        self._looks.clear()

    def hold(self, rq: int, pos: int) -> None:
        self._live[rq].add(pos)

    def release(self, rq: int, pos: int) -> None:
        """The record at `pos` is needed no more, once the last record appended (the one that
        finished it) is durable; at once while the log is replayed (what it reads is)."""
        if self.replaying:
            self._live[rq].discard(pos)
            return
        put = self.last_put
        if put is None and not self._unkept:  # (answered at once: _durable's usual case, without its call)
            self._live[rq].discard(pos)
            self._commit(rq)
        elif put is None or put.done():
            self._durable(rq, pos, self._generation, put)
        else:
            put.add_done_callback(functools.partial(self._durable, rq, pos, self._generation))

    def _durable(self, rq: int, pos: int, generation: int, f=None) -> None:
        """release's second half: the put that finished `pos` is done (`f`; None: answered at once)."""
        if generation != self._generation:
            return  # no longer the master since: the next one replays
        if f is not None and (f.cancelled() or f.exception() is not None or f.result() not in STORED_STATUSES):
            self._unkept.append((rq, pos))  # a later put kept covers it (a leader's log only grows)
            return
        if not self._unkept:  # (the usual case: one position, one queue)
            self._live[rq].discard(pos)
            self._commit(rq)
            return
        for q, p in self._unkept + [(rq, pos)]:
            self._live[q].discard(p)
        moved = {q for q, _ in self._unkept} | {rq}
        self._unkept.clear()
        for q in moved:
            self._commit(q)

    def replayed(self) -> None:
        self.replaying = False
        self._ends = [0] * self.queue_num
        for rq in range(self.queue_num):
            self._commit(rq, exact=True)

    def _look_later(self, rq: int) -> bool:
        """A look at queue `rq`'s end scheduled (or one is already); False without a running loop."""
        if rq in self._looks:
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._looks.add(rq)
        loop.call_later(END_LOOK_DELAY, self._look, rq, self._generation)
        return True

    def _look(self, rq: int, generation: int) -> None:
        if generation != self._generation:
            return  # no longer the master since (reset cleared _looks)
        self._looks.discard(rq)
        if self.replaying:
            return
        try:
            self._commit(rq, exact=True)
        except Exception:  # noqa: BLE001 - e.g. the store closed meanwhile: the next release looks again
            log.debug("revive offset of queue %d not looked up", rq, exc_info=True)

    def _commit(self, rq: int, exact: bool = False) -> None:
        live = self._live[rq]
        # never past what is dispatched: in DLedger mode a position is assigned before its entry
        # is committed, and an entry never committed is gone after a failover (another record
        # takes its position). Lagging is harmless: a replay reads a finished checkpoint and its
        # acks again and finishes it again.
        low = live.low()
        end = self._ends[rq]
        if low is not None and low <= end:
            new = low  # min(low, end): the end is at least what it was
        elif exact or not self._look_later(rq):
            end = self._ends[rq] = self.store.max_offset(self.topic, rq)
            new = end if low is None else min(low, end)
        else:
            new = end if low is None else min(low, end)  # behind the true one until the look
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
