"""PopReviveService: what pop consumers have in flight, kept in the revive log, and the redelivery
of what they did not ack in time.

Every non-orderly pop writes a checkpoint ("ck", a PopCheckPoint) and every ack an "ack" (an
AckMsg) to rmq_sys_REVIVE_LOG_<brokerClusterName>, queue reviveQid (reviveQueueNum of them), as
RocketMQ does. RocketMQ delays both through its timer wheel and reads them back in time order; the
broker here is the log's only writer, so it also keeps the checkpoints in memory as it writes them
and reads the log back only at start (recovery). A checkpoint whose invisible time passed with
messages unacked is revived: each unacked message is re-stored in the pop retry topic
%RETRY%<group>_<topic> with reconsumeTimes + 1 (in %DLQ%<group> once it was retried
maxReconsumeTimes times), then dropped.

State that survives a kill -9: the revive log itself, and, in consumerOffset.json, the revive
offset of each revive queue (group CID_RMQ_SYS_REVIVE_GROUP: the position of its oldest checkpoint
still in flight) beside the groups' pop offsets. Both are in one file, written as one snapshot, so
a checkpoint before a persisted revive offset was done at the snapshot and its pop offset is in the
same snapshot; every later checkpoint is read again at start, with its acks (which follow it in
the same revive queue), and moves its group's pop offset past what it popped. Each message the
revive re-stores is then acked in the log too, so a restart does not re-store it again (its retry
copy may have been consumed and acked by then). So after a crash nothing popped and unacked is
lost (it is revived after its invisible time) and nothing acked is delivered again; only a message
re-stored whose ack had not been written when the broker died is re-stored twice (at least once).

It runs on the broker that takes writes only (RocketMQ's shouldRunPopRevive, brokerId 0), and
follows the role as the transaction check service does (PopService.set_serving): a broker that
stops being the master stops reviving and forgets what it held (`stop`); one that becomes the
master (a new DLedger leader, a controller-mode slave switched to master) replays the revive log
it replicated, from the revive offsets it copied from the old master (SlaveSynchronize), and
revives what the old master's consumers left unacked.
"""
from __future__ import annotations

import asyncio
import heapq
import logging
import time

from broker.remoting import codes
from broker.common.extra_info import pop_retry_topic
from broker.kernels.batch_ack import ack_record
from broker.kernels.pop_record import check_point_record
from broker.server.pop.pop_offsets import PopOffsets
from broker.server.pop.revive_log import ReviveLog
from broker.remoting.refusals import Refusal
from broker.server.tasks import cancel_and_wait
from broker.common.topic_validator import DLQ_PREFIX, PERM_READ, PERM_WRITE, RETRY_PREFIX
from broker.store.config_files import TopicConfig
from broker.store.errors import ServiceUnavailable, StoreError
from broker.store.message import decode_message, host_bytes
from broker.store.pop_check_point import (ACK_TAG, BATCH_ACK_TAG, CK_TAG, ORDER_ACK_TAG, ORDER_CK_TAG, AckMsg,
                                          BatchAckMsg, CheckPointFormatError,
                                          PopCheckPoint)
from broker.store.results import GetStatus

log = logging.getLogger("pop")

PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
# acked checkpoints' entries the due heap may hold beyond twice what is in flight (_compact_due)
DUE_SLACK = 1024


class NotInFlight(Refusal):
    """An ack or invisible-time change naming a message that is not in flight under that handle:
    never popped, acked already under another handle, or revived (its invisible time passed).
    NO_MESSAGE, as RocketMQ answers an ack outside the queue."""
    response_code = codes.NO_MESSAGE


def not_popped(ck: PopCheckPoint, offset: int) -> NotInFlight:
    """The refusal of an ack naming `offset` under a handle of `ck`, which did not pop it."""
    return NotInFlight(f"offset {offset} of {ck.topic}@{ck.queue_id} was not popped under this handle "
                       f"(it popped {ck.offsets()})")


# the diffs of a checkpoint whose messages are every one from its start (nothing filtered out): 0..n-1
_RANGES = [list(range(n)) for n in range(33)]


def contiguous_diffs(n: int) -> list[int]:
    """[0, 1, ..., n-1]: a new list (a checkpoint's diffs are its own), made from a kept one."""
    return _RANGES[n].copy() if n < len(_RANGES) else list(range(n))


def _key(group: str, topic: str, queue_id: int, start_offset: int, pop_time: int) -> tuple:
    return group, topic, queue_id, start_offset, pop_time


class PopReviveService:
    def __init__(self, store, topics, revive_log: ReviveLog, order_info, broker_name: str,
                 max_reconsume_times: int, on_put=None, groups=None):
        self.store = store
        self.topics = topics
        self.log = revive_log
        self.order_info = order_info  # ConsumerOrderInfoManager: its records are replayed here too
        self.topic = revive_log.topic
        self.broker_name = broker_name
        self.queue_num = revive_log.queue_num
        self.max_reconsume_times = max_reconsume_times
        self.groups = groups  # SubscriptionGroupManager: a group's retryMaxTimes over the broker's
        self.on_put = on_put  # (topic, queue_id, end_offset): wakes held pulls and pops
        self.pop_offsets = PopOffsets(store)  # the moves pops made, published once their checkpoints are durable
        self.inflight: dict[tuple, PopCheckPoint] = {}
        self._due: list[tuple[int, int, tuple]] = []  # (revive time, tie-break, key)
        self._seq = 0
        self._next_qid = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None

    # -- start and recovery -------------------------------------------------------------------------
    @property
    def serving(self) -> bool:
        """Reviving as the master (started and not stopped, and the store still takes writes)."""
        return self._task is not None and not self.store.is_slave

    async def start(self) -> None:
        """Make the revive topic, replay the revive log (checkpoints, acks, orderly batches), then
        revive as checkpoints come due."""
        self.stop()
        cfg = self.topics.get(self.topic)
        if cfg is None or cfg.readQueueNums < self.queue_num:
            self.topics.create(TopicConfig(self.topic, self.queue_num, self.queue_num, PERM_READ | PERM_WRITE))
        await self.store.wait_dispatched(self.store.offsets()["wrote"])
        self.log.replaying = True
        for rq in range(self.queue_num):
            self._recover(rq)
        self.log.replayed()
        if self.inflight:
            log.info("pop: %d checkpoints in flight recovered from %s", len(self.inflight), self.topic)
        self._task = asyncio.ensure_future(self._run())

    def _recover(self, rq: int) -> None:
        acks: list[AckMsg] = []
        for pos, tag, body in self.log.read(rq):
            try:
                if tag == CK_TAG:
                    ck = PopCheckPoint.from_json(body)
                    ck.revive_offset = pos
                    self._register(ck, rq)
                    self._advance_pop_offset(ck)
                elif tag == ACK_TAG:
                    acks.append(AckMsg.from_json(body))
                elif tag == BATCH_ACK_TAG:
                    acks.extend(BatchAckMsg.from_json(body).acks())
                elif tag == ORDER_CK_TAG:
                    self.order_info.replay_popped(PopCheckPoint.from_json(body), rq, pos)
                elif tag == ORDER_ACK_TAG:
                    self.order_info.replay_acked(AckMsg.from_json(body))
            except CheckPointFormatError as e:
                log.error("revive queue %d offset %d: %s; skipped", rq, pos, e)
        for a in acks:  # an ack always follows its checkpoint; applied once all are known
            ck = self.inflight.get(_key(a.group, a.topic, a.queue_id, a.start_offset, a.pop_time))
            if ck is not None:
                i = ck.index_of(a.ack_offset)
                if i >= 0:
                    self._ack_index(ck, i)

    def _advance_pop_offset(self, ck: PopCheckPoint) -> None:
        end = max(ck.offsets(), default=ck.start_offset - 1) + 1
        offsets = self.store.consumer_offsets
        if offsets.query(ck.group, ck.topic, ck.queue_id) < end:
            offsets.commit(ck.group, ck.topic, ck.queue_id, end)

    def stop(self) -> None:
        """No longer the master: stop reviving and forget every checkpoint and orderly batch held
        (the log holds them; the next master replays it)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.inflight.clear()
        self._due.clear()
        self.log.reset()
        self.pop_offsets.reset()
        self.order_info.reset()

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    # -- checkpoints and acks -----------------------------------------------------------------------
    def next_revive_qid(self) -> int:
        self._next_qid = (self._next_qid + 1) % self.queue_num
        return self._next_qid

    def add_check_point(self, ck: PopCheckPoint, rq: int):
        """Write the checkpoint of a pop and hold it in flight (RocketMQ's appendCheckPoint); the
        future of its put (None when the store answers puts at once)."""
        bn = ck.broker_name = ck.broker_name or self.broker_name
        inflight = self.inflight
        key = (ck.group, ck.topic, ck.queue_id, ck.start_offset, ck.pop_time)  # _key
        while key in inflight:
            ck.pop_time += 1  # a message's invisible time changed twice within a millisecond: keys stay unique
            key = (ck.group, ck.topic, ck.queue_id, ck.start_offset, ck.pop_time)
        # the ck record (its body and properties in one kernel call), its put kept for durable_since
        rec = None
        if not ck.attempt_id and type(ck.diffs) is list:
            rec = check_point_record(ck.start_offset, ck.pop_time, ck.invisible_time, ck.num, ck.queue_id, ck.topic,
                                     ck.group, bn, ck.diffs)
        if rec is not None:
            ck.revive_offset = self.log.append_encoded(rq, rec[0], rec[1])  # (ackc's, the batch ack's too)
        else:  # (a name JSON escapes: the kernel declines) the same record by to_json and an f-string
            # the UNIQ_KEY (RocketMQ's genCkUniqueId): topic@queue@start@group@popTime@broker@ck
            uniq = f"{ck.topic}@{ck.queue_id}@{ck.start_offset}@{ck.group}@{ck.pop_time}@{bn}@{CK_TAG}"
            ck.revive_offset = self.log.append(rq, CK_TAG, uniq, ck.to_json())
        self._register(ck, rq, key)  # the key made unique above
        return self.log.last_put

    def add_check_point_values(self, start_offset: int, pop_time: int, invisible_time: int, num: int, queue_id: int,
                               topic: str, group: str, diffs: list, rq: int):
        """add_check_point of PopCheckPoint(start_offset, pop_time, invisible_time, num, queue_id,
        topic, group, "", diffs) (a pop's: no attempt id), the record written from the values
        before the checkpoint is made: the same record, registration and future."""
        inflight = self.inflight
        key = (group, topic, queue_id, start_offset, pop_time)  # _key
        if key in inflight:  # (rare: add_check_point makes the key unique)
            return self.add_check_point(PopCheckPoint(start_offset, pop_time, invisible_time, num, queue_id, topic,
                                                      group, "", diffs), rq)
        bn = self.broker_name
        rec = check_point_record(start_offset, pop_time, invisible_time, num, queue_id, topic, group, bn, diffs)
        if rec is None:
            return self.add_check_point(PopCheckPoint(start_offset, pop_time, invisible_time, num, queue_id, topic,
                                                      group, "", diffs), rq)
        # the record appended and its position held (log.append_held: append_encoded and hold in one
        # call), then _register's other lines inline (the key is new: looked up above)
        pos, put = self.log.append_held(rq, rec[0], rec[1])
        inflight[key] = PopCheckPoint(start_offset, pop_time, invisible_time, num, queue_id, topic, group, bn, diffs,
                                      0, pos, rq)
        seq = self._seq = self._seq + 1
        # the revive loop sleeps until the earliest due time: woken only when this one comes sooner
        due = self._due
        revive_time = pop_time + invisible_time
        if not due or revive_time < due[0][0]:
            self._changed.set()
        heapq.heappush(due, (revive_time, seq, key))
        return put

    def _register(self, ck: PopCheckPoint, rq: int, key: tuple | None = None) -> None:
        if key is None:
            key = _key(ck.group, ck.topic, ck.queue_id, ck.start_offset, ck.pop_time)
        if key in self.inflight:  # a checkpoint written twice (never by this broker): the first holds
            return
        ck.rq = rq
        self.inflight[key] = ck
        self.log.hold(rq, ck.revive_offset)
        self._seq += 1
        # the revive loop sleeps until the earliest due time: woken only when this one comes sooner
        # (a pop's checkpoint is nearly always due after those in flight; a wake per pop cost a task)
        due = self._due
        revive_time = ck.pop_time + ck.invisible_time
        if not due or revive_time < due[0][0]:
            self._changed.set()
        heapq.heappush(due, (revive_time, self._seq, key))

    def find(self, group: str, topic: str, queue_id: int, ck_offset: int, pop_time: int, offset: int,
             rq: int) -> tuple[PopCheckPoint, int]:
        """The in-flight checkpoint a handle names and the message's index in it, or NotInFlight."""
        ck = self.checkpoint(group, topic, queue_id, ck_offset, pop_time, rq)
        i = ck.index_of(offset)
        if i < 0:
            raise not_popped(ck, offset)
        return ck, i

    def checkpoint(self, group: str, topic: str, queue_id: int, ck_offset: int, pop_time: int,
                   rq: int) -> PopCheckPoint:
        """The in-flight checkpoint a handle names, or NotInFlight."""
        ck = self.inflight.get(_key(group, topic, queue_id, ck_offset, pop_time))
        if ck is None or ck.rq != rq:
            raise NotInFlight(f"no message of {group} in flight under this handle ({topic}@{queue_id}, checkpoint "
                              f"offset {ck_offset}, pop time {pop_time}, revive queue {rq}): never popped, "
                              f"already acked, or redelivered after its invisible time")
        return ck

    def inflight_counts(self) -> dict[tuple[str, str, int], int]:
        """Messages popped and not acked, per (group, topic, queue id): RocketMQ's
        PopInflightMessageCounter, counted from the checkpoints in flight when asked (a scrape),
        not kept up per pop and ack."""
        out: dict[tuple[str, str, int], int] = {}
        for ck in self.inflight.values():
            left = (len(ck.diffs) if ck.diffs else ck.num) - bin(ck.bitmap).count("1")
            if left > 0:
                key = (ck.group, ck.topic, ck.queue_id)
                out[key] = out.get(key, 0) + left
        return out

    def ack(self, ck: PopCheckPoint, index: int) -> None:
        """Write the ack and mark the message (a second ack of it is a no-op)."""
        if ck.bitmap >> index & 1:
            return
        a = AckMsg(ck.offsets()[index], ck.start_offset, ck.group, ck.topic, ck.queue_id, ck.pop_time, ck.broker_name)
        uniq = "@".join(map(str, (a.topic, a.queue_id, a.ack_offset, a.group, a.pop_time, a.broker_name, ACK_TAG)))
        self.log.append(ck.rq, ACK_TAG, uniq, a.to_json())
        self._ack_index(ck, index)

    def ack_many(self, ck: PopCheckPoint, indexes: list[int]) -> None:
        """Acks of several messages of one checkpoint: one record (BatchAckMsg), not one per message."""
        bitmap = ck.bitmap
        todo = sorted(set(indexes) if not bitmap else {i for i in indexes if not bitmap >> i & 1})
        if len(todo) <= 1:
            if todo:
                self.ack(ck, todo[0])
            return
        so, diffs = ck.start_offset, ck.diffs
        acked = ([so + diffs[i] for i in todo] if diffs else [so + i for i in todo])  # ck.offsets() at todo
        # the bAck record (BatchAckMsg's JSON) and its UNIQ_KEY (RocketMQ's genBatchAckUniqueId:
        # topic@queue@[offsets]@group@popTime@broker@bAck, the list as Java's List.toString)
        body = BatchAckMsg(acked, so, ck.group, ck.topic, ck.queue_id, ck.pop_time, ck.broker_name).to_json()
        uniq = f"{ck.topic}@{ck.queue_id}@{acked}@{ck.group}@{ck.pop_time}@{ck.broker_name}@{BATCH_ACK_TAG}"
        self.log.append(ck.rq, BATCH_ACK_TAG, uniq, body)
        n = len(diffs) if diffs else ck.num
        full = (1 << n) - 1  # every message of ck.offsets() acked
        if not bitmap and len(todo) == n and todo[0] == 0 and todo[-1] == n - 1:  # the whole batch at once
            bitmap = full
        else:
            for i in todo:
                bitmap |= 1 << i
        ck.bitmap = bitmap
        if bitmap == full:
            self._finish(ck)

    def ack_offsets(self, ck: PopCheckPoint, offsets: list[int], key: tuple | None = None) -> list[int] | None:
        """The acks of `offsets` (queue offsets) on `ck` as ack_many makes them for their indexes
        (index_of's), in one kernel call (broker.kernels.batch_ack: the indexes, the bitmap, the
        BatchAckMsg record's body and properties): the offsets `ck` did not pop (nothing done for
        them), or None when the kernel declines (then nothing is done at all: see ack_many).
        `key`: ck's in-flight key when the caller has it (the batch ack's look-up)."""
        got = ack_record(offsets, ck.start_offset, ck.diffs, ck.num, ck.bitmap, ck.topic, ck.queue_id, ck.group,
                         ck.pop_time, ck.broker_name)
        if got is None:
            return None
        bitmap, full, body, props, single, missing = got
        if body is not None:
            inflight = self.inflight
            if full and key is not None and inflight.get(key) is ck:
                # the record finishes ck: appended and its position released in one call, as
                # append_encoded then _finish (the in-flight entry dropped, then release) would
                self.log.append_releasing(ck.rq, body, props, ck.revive_offset)
                ck.bitmap = bitmap
                del inflight[key]
                if len(self._due) > 2 * len(inflight) + DUE_SLACK:
                    self._compact_due()
            else:
                self.log.append_encoded(ck.rq, body, props)
                ck.bitmap = bitmap
                if full:
                    self._finish(ck)
        elif single >= 0:
            self.ack(ck, single)
        return missing

    def _ack_index(self, ck: PopCheckPoint, index: int) -> None:
        ck.bitmap |= 1 << index
        if ck.bitmap == (1 << len(ck.offsets())) - 1:
            self._finish(ck)

    def _finish(self, ck: PopCheckPoint) -> None:
        if self.inflight.pop((ck.group, ck.topic, ck.queue_id, ck.start_offset, ck.pop_time), None) is not None:
            self.log.release(ck.rq, ck.revive_offset)
            if len(self._due) > 2 * len(self.inflight) + DUE_SLACK:
                self._compact_due()

    def _compact_due(self) -> None:
        """Drop the due entries of checkpoints no longer in flight. An acked checkpoint's entry
        otherwise stays in the heap until its revive time (invisibleTime after its pop: 30 s of
        pops at the clients' default), every push and pop paying for the heap's depth, and the
        revive loop woken at each acked checkpoint's revive time to find nothing to do. Made when
        the heap is more than twice what is in flight (and DUE_SLACK more), so a pop pays for it
        about one entry's look."""
        inflight = self.inflight
        due = self._due
        due[:] = [e for e in due if e[2] in inflight]  # (in place: _run may be iterating it)
        heapq.heapify(due)

    # -- revive -------------------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            self._changed.clear()
            now = int(time.time() * 1000)
            while self._due and self._due[0][0] <= now:
                _, _, key = heapq.heappop(self._due)
                ck = self.inflight.get(key)
                if ck is None or ck.revive_time > now:
                    continue  # acked, or revived already
                try:
                    done = self._revive(ck)
                except (StoreError, ServiceUnavailable) as e:  # the revive log refused the ack
                    log.warning("pop revive of %s: %s", key, e)
                    done = False
                if not done:
                    self._seq += 1
                    heapq.heappush(self._due, (now + 1000, self._seq, key))  # the store refused: again in 1 s
            wait = (self._due[0][0] - now) / 1000 if self._due else None
            try:
                await asyncio.wait_for(self._changed.wait(), wait)
            except asyncio.TimeoutError:
                pass

    def _revive(self, ck: PopCheckPoint) -> bool:
        """Re-store each unacked message of `ck` for redelivery; False when the store refused one
        (the checkpoint stays in flight, the ones re-stored are acked so they are not doubled)."""
        for i, offset in enumerate(ck.offsets()):
            if ck.bitmap >> i & 1:
                continue
            r = self.store.get(ck.topic, ck.queue_id, offset, 1)
            try:
                if r.status != GetStatus.FOUND:
                    log.warning("pop revive: %s@%d offset %d is gone (%s); not redelivered", ck.topic, ck.queue_id,
                                offset, r.status.name)
                    msg = None
                else:
                    msg = decode_message(r.messages[0])
            finally:
                r.release()
            if msg is not None and not self._put_retry(ck, msg):
                return False
            # acked in the log as well: a restart before the revive offset passes this checkpoint
            # does not re-store it again (its retry copy may have been consumed and acked by then);
            # the revive offset passes it once this ack, and so the retry copy before it, is durable
            self.ack(ck, i)
        self._finish(ck)
        return True

    def _put_retry(self, ck: PopCheckPoint, msg) -> bool:
        props = dict(msg.properties)
        if msg.reconsume_times == 0 or PROPERTY_FIRST_POP_TIME not in props:
            props[PROPERTY_FIRST_POP_TIME] = str(ck.pop_time)
        limit = self.groups.retry_max_times(ck.group) if self.groups is not None else self.max_reconsume_times
        if msg.reconsume_times >= limit:
            topic = DLQ_PREFIX + ck.group  # retried maxReconsumeTimes times already (as a send-back)
        elif ck.topic.startswith(RETRY_PREFIX):
            topic = ck.topic
        else:
            topic = pop_retry_topic(ck.topic, ck.group)
        props.setdefault("RETRY_TOPIC", msg.topic)  # the first revive's message is of the topic itself
        props["ORIGIN_MESSAGE_ID"] = props.get("ORIGIN_MESSAGE_ID") or msg.msg_id
        try:
            self.topics.get_or_create(topic)
            result, _ = self.store.append(topic, 0, msg.body, props, flag=msg.flag, sys_flag=msg.sys_flag,
                                          born_timestamp=msg.born_timestamp, born_host=host_bytes(msg.born_host),
                                          reconsume_times=msg.reconsume_times + 1, wait=False)
        except (StoreError, ServiceUnavailable) as e:
            log.warning("pop revive: could not re-store %s of %s in %s: %s", msg.msg_id, ck.group, topic, e)
            return False
        log.info("pop revive: %s of %s to %s (reconsumeTimes %d)", msg.msg_id, ck.group, topic,
                 msg.reconsume_times + 1)
        if self.on_put is not None:
            self.on_put(topic, 0, result.end_offset)
        return True
