"""ScheduleMessageService: delay levels as RocketMQ implements them.

A message with a delay level (the producer's DELAY property, or a send-back's level) is stored in
SCHEDULE_TOPIC_XXXX, queue level-1, with its real topic and queue in REAL_TOPIC / REAL_QID. Every
message of one level waits equally long, so each level's queue is in due order and only its head
needs watching: one task per level sleeps until the head is due (a timer, not a poll) or until a
new message arrives, then writes a copy to the real topic and advances the level's offset. The copy
keeps DELAY, REAL_TOPIC and REAL_QID, as RocketMQ's does (its messageTimeup clears DELAY only after
the properties string it stores was made): a Java consumer's getDelayTimeLevel() reads the level. Offsets persist in config/delayOffset.json (RocketMQ's format)
every flushConsumerOffsetInterval and on shutdown: after a crash a delayed message may be delivered
twice, never lost — RocketMQ's guarantee too.

It runs in the broker process because that process is the commit log's only writer.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time

from broker.server.broker_config import parse_delay_levels
from broker.server.tasks import cancel_and_wait
from broker.common.topic_validator import SCHEDULE_TOPIC
from broker.services.message_store import GetStatus
from broker.store.config_files import WRITER, read_with_backup, write_atomic
from broker.store.errors import ServiceUnavailable, StoreError
from broker.server.schedule.delivery import append_copy, destination
from broker.store.message import decode_message

log = logging.getLogger("schedule")

DELAY, REAL_TOPIC, REAL_QID = "DELAY", "REAL_TOPIC", "REAL_QID"



class ScheduleMessageService:
    def __init__(self, store, topics, levels_text: str, on_delivered=None):
        self.store = store
        self.topics = topics
        self.delays = parse_delay_levels(levels_text)
        self.on_delivered = on_delivered  # (topic, queue_id, end_offset): wakes held pulls
        self.path = os.path.join(store.config.config_dir, "delayOffset.json")
        self.offsets: dict[int, int] = {}
        self._arrived: dict[int, asyncio.Event] = {}
        self._tasks: list[asyncio.Task] = []
        self._dirty = False

    @property
    def max_level(self) -> int:
        return len(self.delays)

    # -- the write side: where a delayed message goes ------------------------------------------------
    def level_of(self, properties: dict) -> int:
        """The delay level a message asks for, capped at the highest level (0 = none)."""
        try:
            level = int(properties.get(DELAY, 0))
        except ValueError:
            return 0
        return min(level, self.max_level) if level > 0 else 0

    def divert(self, topic: str, queue_id: int, properties: dict, level: int) -> tuple[str, int, dict]:
        """The schedule queue a message of `level` is stored in, with its destination recorded."""
        props = dict(properties)
        props[DELAY] = str(level)
        props[REAL_TOPIC] = topic
        props[REAL_QID] = str(queue_id)
        return SCHEDULE_TOPIC, level - 1, props

    def arrived(self, level: int) -> None:
        ev = self._arrived.get(level)
        if ev is not None:
            ev.set()

    # -- the delivery side -------------------------------------------------------------------------
    def start(self, deliver: bool = True) -> None:
        """Load the levels' offsets and, on a master, start delivering (a slave only keeps the
        offsets it copies from its master, for the day it is made master)."""
        data = read_with_backup(self.path) or {}
        for k, v in (data.get("offsetTable") or {}).items():
            self.offsets[int(k)] = int(v)
        if deliver:
            self.set_delivering(True)

    def set_delivering(self, on: bool) -> None:
        """Start or stop delivering (DLedger mode: only the member serving as master delivers,
        and one that stops leading stops at once; what it delivered is in its offsets)."""
        if on and not self._tasks:
            for level in range(1, self.max_level + 1):
                self._arrived[level] = asyncio.Event()
                self._tasks.append(asyncio.ensure_future(self._run_level(level)))
        elif not on:
            for t in self._tasks:
                t.cancel()
            self._tasks.clear()

    async def close(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        self.persist()

    def merge(self, offsets: dict[int, int]) -> None:
        """Offsets copied from the master: never moved back (RocketMQ #1094)."""
        for level, off in offsets.items():
            if off > self.offsets.get(level, -1):
                self.offsets[level] = off
                self._dirty = True

    def _text(self) -> str:
        return json.dumps({"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}})

    def persist(self) -> None:
        """Write now (shutdown)."""
        if not self._dirty:
            return
        try:
            write_atomic(self.path, self._text())
            self._dirty = False
        except OSError as e:
            log.error("could not persist %s: %s", self.path, e)

    def persist_soon(self) -> None:
        """Write from the background writer (every flushConsumerOffsetInterval, off the event loop)."""
        if self._dirty:
            WRITER.submit(self.path, self._text())
            self._dirty = False

    async def _run_level(self, level: int) -> None:
        qid = level - 1
        delay = self.delays[level - 1]
        arrived = self._arrived[level]
        while True:
            offset = self.offsets.get(level, 0)
            r = self.store.get(SCHEDULE_TOPIC, qid, offset, max_msgs=32)
            try:
                if r.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
                    log.warning("delay level %d: offset %d outside [%d, %d], moving to %d", level, offset,
                                r.min_offset, r.max_offset, r.next_offset)
                    self._advance(level, r.next_offset)
                    continue
                if r.status == GetStatus.OFFSET_FOUND_NULL:
                    log.error("delay level %d: entry %d points outside the commit log; skipped", level, offset)
                    self._advance(level, offset + 1)
                    continue
                if r.status != GetStatus.FOUND:
                    r.release()
                    # Cleared before looking again: a message appended after this line sets the
                    # event; one appended before it is in the queue once the reput caught up.
                    arrived.clear()
                    await self.store.wait_dispatched(self.store.offsets()["wrote"])
                    if self.store.max_offset(SCHEDULE_TOPIC, qid) <= offset:
                        await arrived.wait()
                    continue
                wait_s = 0.0
                for view, qo in zip(r.messages, r.queue_offsets):
                    msg = decode_message(view)
                    due_ms = msg.store_timestamp + delay - int(time.time() * 1000)
                    if due_ms > 0:
                        wait_s = due_ms / 1000
                        break
                    if not self._deliver(msg, level):
                        wait_s = 1.0  # the store refused the write: try this message again shortly
                        break
                    self._advance(level, qo + 1)
            finally:
                r.release()
            if wait_s > 0:
                await asyncio.sleep(wait_s)

    def _advance(self, level: int, offset: int) -> None:
        self.offsets[level] = offset
        self._dirty = True

    def _deliver(self, msg, level: int) -> bool:
        props = msg.properties
        where = destination(self.topics, props)
        if where is None:
            log.error("delay level %d: message %s has no REAL_TOPIC; dropped from the schedule", level, msg.msg_id)
            return True
        topic, queue_id = where
        try:
            result = append_copy(self.store, topic, queue_id, msg, props)
        except (StoreError, ServiceUnavailable) as e:
            log.warning("delay level %d: could not deliver %s to %s: %s", level, msg.msg_id, topic, e)
            return False
        if self.on_delivered is not None:
            self.on_delivered(topic, queue_id, result.end_offset)
        return True
