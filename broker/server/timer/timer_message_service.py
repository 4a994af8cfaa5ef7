"""TimerMessageStore as RocketMQ 5 runs it: timer messages at any delivery time, not the next
delay level.

The put side (`transform`, HookUtils.handleScheduleMessage): a message with TIMER_DELIVER_MS,
TIMER_DELAY_SEC or TIMER_DELAY_MS whose time is ahead is stored in rmq_sys_wheel_timer queue 0,
its time (rounded down to timerPrecisionMs, as RocketMQ rounds it) in TIMER_OUT_MS and its
destination in REAL_TOPIC / REAL_QID. A message with a delay level keeps the level and loses its
timer properties; one whose time has come is stored as it is; one beyond timerMaxDelaySec is
refused MESSAGE_ILLEGAL, and every one when timerWheelEnable=false SYSTEM_ERROR, with RocketMQ's
remarks.

The service (the broker process: it is the commit log's only writer):
- enqueue: the timer topic's new entries, in queue order; each becomes a 52-byte unit appended to
  the timer log, linked into its slot's list in the timer wheel (broker.store.timer_files), for
  runs of records, in one call each to the kernel broker.kernels.timer_wheel. A time
  beyond timerRollWindowSlot slots is parked at the window's edge as a roll unit and stored in
  the timer topic again when reached, as RocketMQ rolls it. Woken by a send that stored a timer
  message, and by the dispatch of the queue.
- dequeue: at each slot's time (a timer, not a poll), the slot's units in the order they came,
  each message copied to its real topic (REAL_* dropped, TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS
  added), never before its time.
- the checkpoint (config/timercheck): every timerFlushIntervalMs the timer log and the wheel are
  flushed first, then the read time, the flushed log end, the next queue offset and the commit
  log's end at that moment. A restart cuts the timer log at the checkpoint, unlinks the wheel's
  units past it, enqueues again from the checkpoint's queue offset, and dequeues again from its
  read time; messages delivered after the checkpoint (found in the commit log past its offset,
  by UNIQ_KEY and TIMER_OUT_MS) are not delivered twice. So after a kill -9 a timer message is
  delivered once, at or after its time.
A slave builds a wheel of its own from the replicated timer topic, as RocketMQ's does: it
enqueues (never delivers) up to the queue offset its master's checkpoint names, and keeps the
master's read time, both copied by SlaveSynchronize (GET_TIMER_CHECK_POINT) with the commit-log
offset of that checkpoint. A slave made master (DLedger, controller mode) goes on from there: it
reads the wheel from the master's read time, enqueues the rest of the topic, and skips what the
old master delivered after its checkpoint (found in the replicated log, as after a restart). So a
takeover delivers neither early nor twice what the old master delivered.
"""
from __future__ import annotations

import asyncio
import logging
import os
import struct
import time

from broker.common.topic_validator import PERM_READ, PERM_WRITE, SYSTEM_TOPIC_PREFIX
from broker.kernels.timer_wheel import ENQ_PYTHON, enqueue_records
from broker.remoting import codes
from broker.remoting.refusals import Refusal
from broker.server.tasks import cancel_and_wait
from broker.services.message_store import GetStatus
from broker.store.errors import ServiceUnavailable, StoreError
from broker.server.schedule.delivery import append_copy, destination
from broker.store.message import decode_message
from broker.store.timer_files import (MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL, SLOTS_TOTAL, TimerCheckpoint, TimerLog, TimerWheel,
                                      java_hash)

log = logging.getLogger("timer")

TIMER_TOPIC = SYSTEM_TOPIC_PREFIX + "wheel_timer"
TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS = "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"
TIMER_OUT_MS, TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS = "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES, TIMER_DEL_UNIQKEY = "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY"
REAL_TOPIC, REAL_QID, DELAY, UNIQ_KEY = "REAL_TOPIC", "REAL_QID", "DELAY", "UNIQ_KEY"
TIMER_BLANK_SLOTS = 60
ENQUEUE_BATCH = 8192  # timer-topic records read at a time: the kernel takes each run of them in one call
_NEVER = (1 << 63) - 1


async def _first(*aws) -> None:
    """Until the first of `aws` is done; the others are cancelled."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


class TimerRefused(Refusal):
    """A timer message the put side refuses, with RocketMQ's response code and remark."""

    def __init__(self, code: int, remark: str):
        super().__init__(remark)
        self.response_code = code


def is_timer(properties: dict) -> bool:
    return TIMER_DELIVER_MS in properties or TIMER_DELAY_SEC in properties or TIMER_DELAY_MS in properties


def transform(config, topic: str, queue_id: int, props: dict, now_ms: int | None = None
              ) -> tuple[str, int, dict] | None:
    """Where a message with timer properties is stored (HookUtils.transformTimerMessage), or None to
    store it as it is; TimerRefused for one RocketMQ refuses. `props` is changed in place."""
    if topic == TIMER_TOPIC or TIMER_OUT_MS in props:
        return None  # a timer message rolled or delivered by the service itself
    if props.get(DELAY, "0") not in ("", "0"):
        for k in (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS):
            props.pop(k, None)  # a delay level wins (checkIfTimerMessage)
        return None
    if not is_timer(props):
        if TIMER_DEL_UNIQKEY in props:  # a recall's marker with no time (HookUtils: WHEEL_TIMER_MSG_ILLEGAL)
            raise TimerRefused(codes.MESSAGE_ILLEGAL, "timer message illegal, a delete marker needs a delivery time")
        return None
    if not config.timerWheelEnable:
        raise TimerRefused(codes.SYSTEM_ERROR, "accurate timer message is not enabled, timerWheelEnable is false")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    illegal = TimerRefused(codes.MESSAGE_ILLEGAL, f"timer message illegal, the delay time should not be bigger than "
                                                  f"the max delay {config.timerMaxDelaySec * 1000}ms; or if set del "
                                                  f"msg, the delay time should be bigger than the current time")
    try:
        if TIMER_DELAY_SEC in props:
            deliver = now_ms + int(props[TIMER_DELAY_SEC]) * 1000
        elif TIMER_DELAY_MS in props:
            deliver = now_ms + int(props[TIMER_DELAY_MS])
        else:
            deliver = int(props[TIMER_DELIVER_MS])
    except ValueError:
        raise illegal from None
    if deliver <= now_ms:
        if TIMER_DEL_UNIQKEY in props:
            raise illegal
        return None
    if deliver - now_ms > config.timerMaxDelaySec * 1000:
        raise illegal
    precision = config.timerPrecisionMs
    deliver = deliver - precision if deliver % precision == 0 else deliver // precision * precision
    props[TIMER_OUT_MS] = str(deliver)
    props[REAL_TOPIC] = topic
    props[REAL_QID] = str(queue_id)
    return TIMER_TOPIC, 0, props


class TimerMessageService:
    def __init__(self, store, topics, on_delivered=None):
        self.store = store
        self.topics = topics
        self.config = store.config
        self.precision = self.config.timerPrecisionMs
        self.roll_window = min(self.config.timerRollWindowSlot, SLOTS_TOTAL - TIMER_BLANK_SLOTS)
        self.on_delivered = on_delivered  # (topic, queue_id, end_offset): wakes held pulls
        root = self.config.storePathRootDir
        self.log_dir = os.path.join(root, "timerlog")
        self.wheel_path = os.path.join(root, "timerwheel")
        self.ckpt_path = os.path.join(root, "config", "timercheck")
        self.timer_log: TimerLog | None = None
        self.wheel: TimerWheel | None = None
        self.ckpt: TimerCheckpoint | None = None
        self.queue_offset = 0  # next entry of the timer topic to enqueue
        self.read_ms = 0  # the next slot to deliver
        self._delivered_since: set[tuple[str, str]] = set()  # (UNIQ_KEY, TIMER_OUT_MS) past the checkpoint
        self._arrived = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        # a slave: the master's checkpoint as last copied (SlaveSynchronize), None on a master
        # (last_read_ms, master_queue_offset, commit_log_offset); the enqueue stops at its offset
        self._following: tuple[int, int, int] | None = None
        self._dequeue: asyncio.Task | None = None
        # after a takeover: (the old master's queue offset, its read time) as last copied: a timer
        # below the one, due before the other, was delivered by it
        self._past: tuple[int, int] = (0, 0)
        self._scan_from: int | None = None  # a takeover before the files were open: where _open looks
        self.enqueued = self.delivered = self.rolled = self.recalled = 0
        self._pending = 0  # timer messages appended (arrived()) and not enqueued yet, as far as known
        self.delivery_lateness_ms: list[int] = []  # recent deliveries' lateness (bounded), for tests and metrics

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self, deliver: bool = True) -> None:
        if not self.config.timerWheelEnable:
            return
        if self.topics.get(TIMER_TOPIC) is None:  # a system topic of one queue, as RocketMQ makes it
            from broker.store.config_files import TopicConfig
            self.topics.create(TopicConfig(TIMER_TOPIC, 1, 1, PERM_READ | PERM_WRITE))
        if deliver:
            self.set_delivering(True)
        else:
            self.follow()

    def set_delivering(self, on: bool) -> None:
        """on: a master's wheel (enqueue, deliver, checkpoint), taking over where the copied
        checkpoint of the master it followed left off; off: nothing runs (a switch in progress)."""
        if on:
            if self._following is not None:
                self._take_over()
            if not self._tasks and self.config.timerWheelEnable:
                self._tasks = [asyncio.ensure_future(self._run())]
            elif self._tasks and self._dequeue is None and self.timer_log is not None:
                self._start_dequeue()
        elif self._tasks:
            for t in self._tasks:
                t.cancel()
            self._tasks, self._dequeue = [], None
            self._checkpoint()

    def follow(self) -> None:
        """A slave's wheel: enqueue up to the master's checkpoint, never deliver."""
        self.set_delivering(False)
        self._following = self._following or (0, 0, 0)
        if self.config.timerWheelEnable:
            self._tasks = [asyncio.ensure_future(self._run())]

    def sync_from_master(self, last_read_ms: int, master_queue_offset: int, commit_log_offset: int) -> None:
        """SlaveSynchronize's copy of the master's timer checkpoint (syncTimerCheckPoint). Taken
        only once this log holds the master's log up to that checkpoint (its commit_log_offset):
        the deliveries its read time counts as done are then here too, and none is skipped."""
        if self._following is None:
            return  # a master's own
        if commit_log_offset and self.store.offsets()["wrote"] < commit_log_offset:
            return  # not replicated that far yet: the last copy stands
        f = self._following
        self._following = (max(f[0], last_read_ms), max(f[1], master_queue_offset), commit_log_offset or f[2])
        self.read_ms = max(self.read_ms, self._following[0])  # syncLastReadTimeMs
        if self._following[1] > self.queue_offset:
            self._arrived.set()

    def _take_over(self) -> None:
        """From a slave to a master: go on from the master's copied checkpoint. Timers below its
        queue offset whose time is before its read time were delivered by the old master: not
        again; the old master's deliveries after its checkpoint are found in the log."""
        last_read_ms, master_queue_offset, cl_offset = self._following
        self._following = None
        self._past = (master_queue_offset, last_read_ms)
        # never copied: whatever the replicated log shows delivered, from its start
        self._scan_from = (cl_offset or None) if last_read_ms else self.store.offsets()["min"]
        if self.timer_log is not None:
            if not last_read_ms:
                self.read_ms = max(self.read_ms, int(time.time() * 1000) // self.precision * self.precision)
            self._delivered_since = self._deliveries_after(self._scan_from) if self._scan_from is not None else set()
            self._scan_from = None
            log.info("timer: taking over the master's wheel: reading from %d, enqueuing from %d, %d deliveries "
                     "of the old master after its checkpoint found", self.read_ms, self.queue_offset,
                     len(self._delivered_since))
        self._arrived.set()

    def _start_dequeue(self) -> None:
        self._dequeue = asyncio.ensure_future(self._dequeue_loop())
        self._tasks.append(self._dequeue)

    def _has_timers(self) -> bool:
        return os.path.exists(self.ckpt_path) or self.store.max_offset(TIMER_TOPIC, 0) > 0 or \
            (self._following is not None and self._following[1] > 0)

    async def _run(self) -> None:
        """The files are made when the first timer message is stored (the wheel is 38 MiB of disk a
        broker that never sees one need not give), then enqueue, dequeue and checkpoint run."""
        if not self._has_timers():
            await self._arrived.wait()  # a send stored a timer message (its queue entry may lag)
        self._open()
        if self._following is None:
            self._start_dequeue()
        await asyncio.gather(self._enqueue_loop(), self._flush_loop())

    async def close(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks, self._dequeue = [], None
        if self.timer_log is not None:
            self._checkpoint()
            self.timer_log.close()
            self.wheel.close()
            self.ckpt.close()
            self.timer_log = self.wheel = self.ckpt = None

    def arrived(self, n: int = 1) -> None:
        """`n` timer messages were appended to the timer topic (a send, a roll, a recall)."""
        self._pending += n
        self._arrived.set()

    # -- recovery -------------------------------------------------------------------------------------
    def _open(self) -> None:
        if self.timer_log is not None:
            return
        self.ckpt = TimerCheckpoint(self.ckpt_path)
        self.wheel = TimerWheel(self.wheel_path, self.precision)
        self.timer_log = TimerLog(self.log_dir, self.config.mappedFileSizeTimerLog)
        now = int(time.time() * 1000) // self.precision * self.precision
        if not self.ckpt.existed:
            self.timer_log.load()
            if self.timer_log.wrote:  # files without a checkpoint: start over from the topic
                self.timer_log.truncate(0)
            self.wheel.reset()
            self.queue_offset, self.read_ms, cl_offset = 0, now, None
            if self._following is not None:  # a slave reads nothing: the master's read time, once copied
                self.read_ms = self._following[0]
        else:
            flush_pos = self.ckpt.flush_pos
            self.timer_log.load(end=None)
            self._unlink_past(flush_pos)
            self.timer_log.truncate(flush_pos)
            self.queue_offset = self.ckpt.queue_offset
            self.read_ms = max(self.ckpt.last_read_ms,
                               now - (SLOTS_TOTAL - TIMER_BLANK_SLOTS) * self.precision)
            # 0: a checkpoint Apache RocketMQ wrote (it keeps no such offset): nothing to look for
            cl_offset = self.ckpt.commit_log_offset or None
            if self._following is not None:  # a slave's checkpoint holds its master's, as last copied
                f = self._following
                self._following = (max(f[0], self.ckpt.last_read_ms), max(f[1], self.ckpt.master_queue_offset),
                                   f[2] or self.ckpt.commit_log_offset)
                cl_offset = None
        if self._scan_from is not None:  # a takeover came first: the old master's deliveries
            cl_offset, self._scan_from = self._scan_from, None
        self._delivered_since = self._deliveries_after(cl_offset) if cl_offset is not None else set()
        log.info("timer: recovered, next queue offset %d, reading from %d (%d deliveries after the checkpoint "
                 "found)", self.queue_offset, self.read_ms, len(self._delivered_since))

    def _unlink_past(self, end: int) -> None:
        """Slots whose list reaches units at or past `end` (written after the checkpoint): their
        lists are cut back to the last unit before it, or emptied."""
        import numpy as np
        slots = self.wheel.slots
        hit = np.nonzero((slots["last"] >= end) & (slots["time"] != 0))[0]
        for i in hit:
            s = slots[i]
            pos, first = int(s["last"]), int(s["first"])
            num = int(s["num"])
            while pos >= end:
                try:
                    u = self.timer_log.unit(pos)
                except StoreError:
                    pos = -1
                    break
                if int(u["size"]) != 52:
                    pos = -1  # torn: what remains below is found no more, enqueued again instead
                    break
                pos = int(u["prev"])
                num -= 1
            if pos < 0 or first >= end:
                slots[i] = (0, -1, -1, 0, 0)
            else:
                slots[i] = (int(s["time"]), first, pos, max(num, 0), int(s["magic"]))

    def _deliveries_after(self, offset: int) -> set[tuple[str, str]]:
        """(UNIQ_KEY, TIMER_OUT_MS) of the timer messages delivered past commit-log `offset`."""
        out: set[tuple[str, str]] = set()
        wrote = self.store.offsets()["wrote"]
        pos = offset
        while pos < wrote:
            try:
                view = self.store.record_view(pos)
            except Exception:  # noqa: BLE001 - a blank at a segment's end: go to the next one
                seg = self.config.mappedFileSizeCommitLog
                pos = (pos // seg + 1) * seg
                continue
            size = int.from_bytes(view[:4], "big")
            if size <= 0:
                seg = self.config.mappedFileSizeCommitLog
                pos = (pos // seg + 1) * seg
                continue
            if bytes(view[:size]).find(b"TIMER_DEQUEUE_MS") >= 0:
                m = decode_message(view)
                if m.topic != TIMER_TOPIC and UNIQ_KEY in m.properties:
                    out.add((m.properties[UNIQ_KEY], m.properties.get(TIMER_OUT_MS, "")))
            pos += size
        return out

    # -- enqueue --------------------------------------------------------------------------------------
    async def _enqueue_loop(self) -> None:
        while True:
            self._arrived.clear()
            n = self._enqueue_some()
            if n:
                self._pending = max(0, self._pending - n)
                continue
            if self._following is not None:
                await self._arrived.wait()  # the next copy of the master's checkpoint
                continue
            await self.store.wait_dispatched(self.store.offsets()["wrote"])
            if self.store.max_offset(TIMER_TOPIC, 0) > self.queue_offset:
                continue
            if self._pending:
                # appended, not readable yet, and `wrote` may not count it (DLedger publishes its
                # committed end): the next dispatch, or the next arrival
                await _first(self._arrived.wait(), self.store.wait_dispatched(self.store.offsets()["dispatched"] + 1))
            else:
                self._pending = 0
                await self._arrived.wait()

    def _enqueue_some(self) -> int:
        batch = ENQUEUE_BATCH
        if self._following is not None:  # a slave: no further than its master's checkpoint
            batch = min(batch, self._following[1] - self.queue_offset)
            if batch <= 0:
                return 0
        r = self.store.get(TIMER_TOPIC, 0, self.queue_offset, max_msgs=batch, max_bytes=16 << 20, spans=True)
        try:
            if r.status == GetStatus.OFFSET_OVERFLOW_BADLY and r.next_offset < self.queue_offset:
                # the queue's end read below what was enqueued already: moving back would enqueue
                # those timers twice. Only when everything written is dispatched is that end the
                # truth (the queue was cut, e.g. a slave's diverged tail), and only then go back.
                o = self.store.offsets()
                if o["dispatched"] < o["wrote"]:
                    return 0
            if r.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
                log.warning("timer: queue offset %d outside [%d, %d], moving to %d", self.queue_offset,
                            r.min_offset, r.max_offset, r.next_offset)
                self.queue_offset = r.next_offset
                return 1
            if r.status != GetStatus.FOUND:
                return 0
            write_ms = int(time.time() * 1000) // self.precision * self.precision
            self._enqueue_spans(r.messages, write_ms)
            return r.count
        finally:
            r.release()

    def _enqueue_spans(self, spans, write_ms: int) -> None:
        """Runs of the timer topic's records, as they lie in the commit log, into the wheel: the
        kernel (enqueue_records) takes each run as far as it can; a record it leaves is taken
        here, and a full timer log segment is rolled here. A slave's rule (_enqueue_record) in
        the kernel's terms: a time its master read already is skipped whatever its queue offset,
        and nothing is due now (a slave never delivers)."""
        wheel, tl = self.wheel, self.timer_log
        if self._following is None:
            past_qo, past_ms, read_ms = self._past[0], self._past[1], self.read_ms
        else:
            past_qo, past_ms, read_ms = _NEVER, self._following[0], -_NEVER
        for span in spans:
            pos, end = 0, len(span)
            while pos < end:
                seg = tl.room()
                status, pos, n, nxt, tl.wrote = enqueue_records(
                    span, pos, wheel.slots, wheel.n, self.precision, seg.mm, seg.base, tl.wrote, tl.file_size,
                    write_ms, read_ms, past_qo, past_ms, self.roll_window)
                self.enqueued += n
                if nxt >= 0:
                    self.queue_offset = nxt
                if status == ENQ_PYTHON:
                    size = int.from_bytes(span[pos:pos + 4], "big")
                    view = span[pos:pos + size]
                    self._enqueue_record(view, decode_message(view).queue_offset, write_ms)
                    pos += size

    def _enqueue_record(self, view, qo: int, write_ms: int) -> None:
        m = decode_message(view)
        try:
            delayed = int(m.properties[TIMER_OUT_MS])
        except (KeyError, ValueError):
            log.error("timer: message at %d of %s has no TIMER_OUT_MS; skipped", qo, TIMER_TOPIC)
            self.queue_offset = qo + 1
            return
        if self._following is not None:
            # a slave: a time its master read already was delivered there; the rest waits
            if delayed >= self._following[0]:
                self._enqueue(m.physical_offset, len(view), delayed, write_ms,
                              m.properties.get(REAL_TOPIC, ""), TIMER_DEL_UNIQKEY in m.properties)
        elif qo < self._past[0] and delayed < self._past[1]:
            pass  # the master this one took over from delivered it
        elif delayed < self.read_ms:  # its slot was read already: due now
            self._deliver(m, delayed, -1, False)
        else:
            self._enqueue(m.physical_offset, len(view), delayed, write_ms, m.properties.get(REAL_TOPIC, ""),
                          TIMER_DEL_UNIQKEY in m.properties)
        self.enqueued += 1
        self.queue_offset = qo + 1

    def _enqueue(self, offset_py: int, size_py: int, delayed: int, write_ms: int, real_topic: str,
                 delete: bool = False) -> None:
        magic = MAGIC_DEFAULT | (MAGIC_DELETE if delete else 0)
        if delayed - write_ms >= self.roll_window * self.precision:
            magic |= MAGIC_ROLL
            if delayed - write_ms - self.roll_window * self.precision < self.roll_window // 3 * self.precision:
                delayed = write_ms + self.roll_window // 2 * self.precision
            else:
                delayed = write_ms + self.roll_window * self.precision
        first, last, num = self.wheel.get(delayed)
        pos = self.timer_log.append(last, magic, write_ms, delayed - write_ms, offset_py, size_py,
                                    java_hash(real_topic))
        self.wheel.put(delayed, pos if first == -1 else first, pos, num + 1)

    # -- dequeue --------------------------------------------------------------------------------------
    async def _dequeue_loop(self) -> None:
        while True:
            # a slot holds the times [t, t + precision) rounded down to t: it is read once all of
            # them have come, so that no message leaves before its time
            now = int(time.time() * 1000)
            due = self.read_ms + self.precision
            if due > now:
                await asyncio.sleep((due - now) / 1000)  # the clock is what wakes this
                continue
            if not self._deliver_slot(self.read_ms):
                await asyncio.sleep(1.0)  # the store refused a write: this slot again shortly
                continue
            self.read_ms += self.precision

    def _deliver_slot(self, slot_ms: int) -> bool:
        first, last, num = self.wheel.get(slot_ms)
        if last < 0:
            return True
        units = []
        pos = last
        while pos >= 0:
            u = self.timer_log.unit(pos)
            if int(u["size"]) != 52:
                log.error("timer: unit at %d of the slot %d is torn; the rest of the slot is lost", pos, slot_ms)
                break
            units.append((int(u["offset_py"]), int(u["magic"]), int(u["write_ms"])))
            pos = int(u["prev"])
        # a recall's delete marker (MAGIC_DELETE, not rolling) takes its message out of the slot,
        # whichever of the two came first; the marker itself is never delivered
        msgs, deleted = [], set()
        for offset_py, magic, write_ms in reversed(units):
            try:
                m = self.store.lookup(offset_py)
            except Exception as e:  # noqa: BLE001 - the record expired with its segment
                log.error("timer: the message at commit-log offset %d is gone (%s); not delivered", offset_py, e)
                continue
            roll = bool(magic & MAGIC_ROLL)
            if magic & MAGIC_DELETE and not roll:
                deleted.add(m.properties.get(TIMER_DEL_UNIQKEY, ""))
            else:
                msgs.append((m, write_ms, roll))
        for m, write_ms, roll in msgs:
            if deleted and not roll and \
                    f"{m.properties.get(REAL_TOPIC, '')}+{m.properties.get(UNIQ_KEY, '')}" in deleted:
                self.recalled += 1
                continue
            if not self._deliver(m, int(m.properties.get(TIMER_OUT_MS, slot_ms)), write_ms, roll):
                return False
        self.wheel.clear(slot_ms)
        return True

    def _deliver(self, m, delayed: int, enqueue_ms: int, roll: bool) -> bool:
        props = dict(m.properties)
        if not roll and TIMER_DEL_UNIQKEY in props:
            return True  # a recall's marker whose slot was read already: nothing left to take back
        key = (props.get(UNIQ_KEY, ""), props.get(TIMER_OUT_MS, ""))
        if not roll and key[0] and key in self._delivered_since:
            self._delivered_since.discard(key)
            return True  # delivered before the restart, after the checkpoint
        if enqueue_ms != -1:
            props[TIMER_ENQUEUE_MS] = str(enqueue_ms)
        props[TIMER_DEQUEUE_MS] = str(int(time.time() * 1000))
        if roll:
            props[TIMER_ROLL_TIMES] = str(int(props.get(TIMER_ROLL_TIMES, "0") or 0) + 1)
            topic, queue_id = TIMER_TOPIC, 0
        else:
            where = destination(self.topics, props, drop=True)
            if where is None:
                log.error("timer: message %s has no REAL_TOPIC; dropped", m.msg_id)
                return True
            topic, queue_id = where
        try:
            result = append_copy(self.store, topic, queue_id, m, props)
        except (StoreError, ServiceUnavailable) as e:
            log.warning("timer: could not deliver %s to %s: %s", m.msg_id, topic, e)
            return False
        if roll:
            self.rolled += 1
            self.arrived()
        else:
            self.delivered += 1
            late = int(time.time() * 1000) - delayed
            self.delivery_lateness_ms.append(late)
            if len(self.delivery_lateness_ms) > 100_000:
                del self.delivery_lateness_ms[:50_000]
            if self.on_delivered is not None:
                self.on_delivered(topic, queue_id, result.end_offset)
        return True

    # -- the checkpoint a slave copies -----------------------------------------------------------------
    def handlers(self) -> dict:
        return {codes.GET_TIMER_CHECK_POINT: self._checkpoint_request}

    def _checkpoint_request(self, cmd, conn):
        """GET_TIMER_CHECK_POINT: the last checkpoint written, in TimerCheckpoint.encode's 56 bytes
        (read time, timer log flush position, queue offset, master queue offset, data version),
        then the commit log's end when it was written (ours: a Java slave reads the 56 only)."""
        values = [0] * 8
        if self.ckpt is not None:
            values = [getattr(self.ckpt, f) for f in TimerCheckpoint.FIELDS]
        return cmd.response(codes.SUCCESS, body=struct.pack(">8q", *values))

    # -- checkpoint -----------------------------------------------------------------------------------
    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.timerFlushIntervalMs / 1000)  # RocketMQ's timerFlushIntervalMs
            self._checkpoint()

    def _checkpoint(self) -> None:
        if self.timer_log is None:
            return
        self.timer_log.flush()
        self.wheel.flush()
        if self._following is not None:  # a slave keeps its master's, to go on from after a restart
            master_queue_offset, cl_offset = self._following[1], self._following[2]
        else:
            master_queue_offset, cl_offset = self.queue_offset, self.store.offsets()["wrote"]
        self.ckpt.set(last_read_ms=self.read_ms, flush_pos=self.timer_log.wrote, queue_offset=self.queue_offset,
                      master_queue_offset=master_queue_offset, timestamp=int(time.time() * 1000),
                      commit_log_offset=cl_offset)
        self.ckpt.flush()
