"""ReputMessageService as its own process: builds consume queues from the commit log.

Sleeps on the `wrote` futex; when it moves, the scan kernel walks the new records (no CRC: the
writer just computed it) and their entries go into the consume queues with one vectorized
write per queue. `dispatched` is published per batch. Consume queues are made durable every
flushIntervalConsumeQueue, and cqFlushedOffset recorded in the checkpoint, which is where
recovery re-dispatches from after a crash.
"""
from __future__ import annotations

import logging
import os
import time

import numpy as np

from broker.kernels.codec import SCAN_BLANK, SCAN_END, MappedBuffer, Scanner
from broker.kernels.cq_dispatch import CqDispatcher
from broker.services.build_index import BuildIndex
from broker.services.process import enter_service, notify, run_service
from broker.store import paths
from broker.store.checkpoint import StoreCheckpoint
from broker.store.consume_queue import ConsumeQueue, ConsumeQueueStore
from broker.store.delay_levels import deliver_timestamp, parse_delay_levels
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.warm_ahead import Unmapper
from broker.store.message import decode_message
from broker.store.offset_table import Slot, confirm_offset, open_table

log = logging.getLogger("reput")

SCHEDULE_TOPIC = b"SCHEDULE_TOPIC_XXXX"
BATCH = 8192


class Dispatcher:
    """Writes scanned records' entries into their consume queues and the index (reused by tests and tools).

    The entries go in one kernel pass (CqDispatcher) straight into the mapped files; the pass
    comes back here only when a queue needs its next file (or its first), which is made and
    registered, and the pass goes on. `on_new_queue` is called the first time a queue is written
    by this dispatcher.

    With the delay levels (`delays`, ms per level) a SCHEDULE_TOPIC_XXXX entry gets RocketMQ's
    tagsCode, the delivery time (broker.store.delay_levels), instead of the tag hash: a Java
    broker started on this store delivers each delayed message when it is due, not at once."""

    def __init__(self, cqs: ConsumeQueueStore, on_new_queue=None, index: BuildIndex | None = None,
                 delays: list[int] | None = None):
        self.cqs = cqs
        self.index = index
        self.kernel = CqDispatcher()
        self._queues: dict[int, ConsumeQueue] = {}
        self._on_new_queue = on_new_queue
        self.delays = delays
        self._scanner: Scanner | None = None
        self._schedule_idx = -1  # the schedule topic's index in the scanner's interned topics
        self._topics_seen = 0  # how many of them were looked at

    def dispatch(self, scanner: Scanner, count: int, buf: MappedBuffer | None = None, base: int | None = None,
                 span: int | None = None) -> None:
        """The consume-queue entries of the scanner's `count` records, then (with an index and the
        scanned buffer `buf`) their index entries. `base`: the commit-log offset of buf[0];
        `span`: how many bytes of buf the records take, when known."""
        if self.delays is not None and buf is not None and base is not None:
            self._deliver_times(scanner, count, buf, base)
        i = 0
        while True:
            i = self.kernel.dispatch(scanner, i, count)
            if i >= count:
                break
            self._open_file(scanner, self.kernel.missing_key, self.kernel.missing_offset)
        if self.index is not None and buf is not None:
            self.index.dispatch(scanner, buf, count, span)

    def _deliver_times(self, scanner: Scanner, count: int, buf: MappedBuffer, base: int) -> None:
        """tagsCode = delivery time for the batch's delayed messages (few: each is decoded here)."""
        if scanner is not self._scanner:
            self._scanner, self._schedule_idx, self._topics_seen = scanner, -1, 0
        if self._schedule_idx < 0:
            topics = scanner.topics  # interned and only appended to: each is looked at once
            for k in range(self._topics_seen, len(topics)):
                if topics[k] == SCHEDULE_TOPIC:
                    self._schedule_idx = k
                    break
            self._topics_seen = len(topics)
            if self._schedule_idx < 0:
                return
        entries = scanner.entries[:count]
        hits = np.flatnonzero(entries["topic_idx"] == self._schedule_idx)
        if hits.size == 0:
            return
        mv = memoryview(buf.obj).cast("B")
        tags = entries["tag_hash"]
        for i in hits:
            m = decode_message(mv, int(entries["phys_offset"][i]) - base)
            due = deliver_timestamp(self.delays, m.properties.get("DELAY"), int(entries["store_ts"][i]))
            if due is not None:
                tags[i] = due

    def _open_file(self, scanner: Scanner, key: int, offset: int) -> None:
        cq = self._queues.get(key)
        if cq is None:
            topic = scanner.topics[key >> 32].decode("utf-8", "replace")
            cq = self._queues[key] = self.cqs.get(topic, key & 0xFFFFFFFF)
            if self._on_new_queue is not None:
                self._on_new_queue()
        first, arr = cq.file_for(offset, create=True)  # OSError on a full disk: the reput holds
        replaced = self.kernel.register(key, MappedBuffer(arr.view(np.uint8), True), first, cq.per_file)
        if replaced >= 0:
            cq.dirty.add(replaced)

    def let_go_of_deleted(self) -> list[str]:
        """Queues whose directory is gone (deleteTopic): their maps closed, the kernel's too (it
        registers the live queues' files again as it meets them). Returns their topics."""
        self.kernel.forget()
        gone = []
        for key, cq in list(self._queues.items()):
            if not os.path.isdir(cq.directory):
                cq.close()
                del self._queues[key]
                self.cqs.queues.pop((cq.topic, cq.queue_id), None)
                gone.append(cq.topic)
        return sorted(set(gone))

    def mark_dirty(self) -> None:
        """Tell the queues which of their files the kernel wrote (before they are flushed)."""
        for key, first in self.kernel.take_dirty():
            self._queues[key].dirty.add(first)

    @property
    def last_store_ts(self) -> int:
        return self.kernel.last_store_ts


MAX_RETRY_WAIT = 5.0  # seconds between attempts while consume queues cannot be written


class ReputService:
    def __init__(self, config, notify_fd: int):
        self.config = config
        self.table = open_table(config.storePathRootDir)
        self.ckpt = StoreCheckpoint(paths.checkpoint(config.storePathRootDir))
        self.log = MappedFileQueue(config.commitlog_dir, config.mappedFileSizeCommitLog, writable=False)
        self.cqs = ConsumeQueueStore(config.consumequeue_dir, config.mappedFileSizeConsumeQueue, writable=True)
        self.scanner = Scanner(BATCH)
        # A slave learns its topics from here: it holds no config for a topic until its master's
        # is copied, and a topic made seconds before the master died never would be.
        self.dispatcher = Dispatcher(self.cqs, on_new_queue=self._announce_queue,
                                     index=BuildIndex(config) if config.messageIndexEnable else None,
                                     delays=parse_delay_levels(config.messageDelayLevel))
        self.notify_fd = notify_fd
        self.last_store_ts = 0
        self._retry_wait = 0.0

    def _announce_queue(self) -> None:
        self.table.add(Slot.QUEUES_SEEN, 1)
        notify(self.notify_fd)

    def _blocked(self, err: OSError) -> None:
        """A consume-queue file could not be made or written (a full disk, most often). Dying
        would only restart us into the same error, so dispatching holds here instead: the slot
        tells the broker, which refuses writes meanwhile (RocketMQ's logicsQueueError), and we
        try again when the cleaner's next reading of the disk usage differs (space freed),
        or after a back-off, since space can come back without the cleaner seeing it move."""
        t = self.table
        if t.load(Slot.DISPATCH_BLOCKED) == 0:
            t.store(Slot.DISPATCH_BLOCKED, err.errno or -1)
            log.error("cannot write consume queues at commit-log offset %d: %s; dispatching holds and the "
                      "broker refuses writes until it can", t.load(Slot.DISPATCHED), err)
            notify(self.notify_fd)
        self._retry_wait = min(MAX_RETRY_WAIT, max(0.05, self._retry_wait * 2))
        t.wait_change(Slot.DISK_USAGE, t.load(Slot.DISK_USAGE), self._retry_wait)

    def _unblocked(self) -> None:
        t = self.table
        self._retry_wait = 0.0
        if t.load(Slot.DISPATCH_BLOCKED):
            t.store(Slot.DISPATCH_BLOCKED, 0)
            log.warning("consume queues written again from commit-log offset %d", t.load(Slot.DISPATCHED))
            notify(self.notify_fd)

    @staticmethod
    def _segment_of(segments: MappedFileQueue, offset: int):
        mf = segments.find(offset)
        if mf is None:
            segments.refresh()
            mf = segments.find(offset)
        return mf

    def _segment(self, offset: int):
        return self._segment_of(self.log, offset)

    def reput(self, dispatched: int, wrote: int) -> int:
        """Dispatch records in [dispatched, wrote); returns the new dispatched offset."""
        return self.scan_log(self.log, dispatched, wrote)

    def scan_log(self, segments: MappedFileQueue, dispatched: int, wrote: int) -> int:
        """Dispatch the records of a commit log's `segments` in [dispatched, wrote) (DLedger mode
        uses it for the old commit log below its divided offset); returns the new dispatched offset."""
        while dispatched < wrote:
            if dispatched < segments.min_offset:
                dispatched = segments.min_offset  # expired data was deleted under us
            mf = self._segment_of(segments, dispatched)
            if mf is None:
                log.error("no commit-log segment holds offset %d (wrote %d)", dispatched, wrote)
                return dispatched
            end = min(wrote, mf.end) - mf.base
            start = dispatched - mf.base
            count, nxt, status = self.scanner.scan(mf.buf, start, end, mf.base, False)
            if count:
                self.dispatcher.dispatch(self.scanner, count, mf.buf, mf.base, nxt - start)
                self.last_store_ts = self.dispatcher.last_store_ts
            dispatched = mf.base + nxt
            if status == SCAN_BLANK:
                dispatched = mf.end
            elif status != SCAN_END:
                # The single writer published `wrote` only after whole records; anything else is a bug
                # or corruption under a live store. Say where, and wait for the writer to move.
                log.error("[BUG] reput stopped at commit-log offset %d: scan status %d %s",
                          dispatched, status, self.scanner.reason)
                self.table.store(Slot.DISPATCHED, dispatched)
                return dispatched
            self.table.store(Slot.DISPATCHED, dispatched)
            if self.table.load(Slot.WANT_DISPATCH):
                notify(self.notify_fd)
        return dispatched

    def flush_queues(self, dispatched: int) -> None:
        self.dispatcher.mark_dirty()
        self.cqs.flush()
        if self.dispatcher.index is not None:
            self.dispatcher.index.flush(self.ckpt)
        self.ckpt.set(cqFlushedOffset=dispatched, logicsMsgTimestamp=self.last_store_ts)
        self.ckpt.flush()

    def run(self) -> None:
        t = self.table
        interval = self.config.flushIntervalConsumeQueue / 1000
        loaded = False

        def main_loop() -> None:
            nonlocal loaded
            # Set-up runs under run_service too: a SIGTERM during it still ends in final().
            self.log.load()
            self.cqs.load()
            loaded = True
            t.store(Slot.REPUT_PID, os.getpid())
            notify(self.notify_fd)  # ready: the broker may now stop us with SIGTERM
            dispatched = t.load(Slot.DISPATCHED)
            last_flush = time.monotonic()
            flushed_at = dispatched
            # what the broker lets go of behind us must not stay mapped here (store.warm_ahead)
            unmapper = (Unmapper(self.log.find, dispatched)
                        if not self.config.warm_segments and self.config.commit_log_cache_bytes >= 0 else None)
            seen_min = t.load(Slot.MIN_OFFSET)
            # a deletion our predecessor did not acknowledge is ours to acknowledge (after the checkpoint)
            seen_deleted = t.load(Slot.TOPICS_DELETED_ACK)
            if t.load(Slot.DISPATCH_BLOCKED):  # our predecessor was blocked: the first success clears it
                self._retry_wait = 0.05
            while True:
                m = t.load(Slot.MIN_OFFSET)
                if m != seen_min:  # the cleaner deleted files: let go of their maps
                    seen_min = m
                    self.log.drop_before(m)
                    self.cqs.correct_min(m)
                # The wake generation first, then wrote: a write after this load is followed by a
                # bump of the generation, so the wait below returns at once rather than missing it.
                gen = t.load(Slot.REPUT_WAKE)
                # after the wake generation, as wrote: a deletion signalled after this load wakes
                # the wait below, one before it is seen here
                deleted = t.load(Slot.TOPICS_DELETED)
                if deleted != seen_deleted:
                    # the broker waited for every record of the deleted topics to be dispatched:
                    # checkpoint past them (what a crash re-dispatches from), then drop their maps
                    seen_deleted = deleted
                    self.flush_queues(dispatched)
                    flushed_at, last_flush = dispatched, time.monotonic()
                    gone = self.dispatcher.let_go_of_deleted()
                    log.info("consume queues of deleted topics closed: %s", ", ".join(gone) or "none open")
                    t.store(Slot.TOPICS_DELETED_ACK, deleted)
                    notify(self.notify_fd)
                # controller mode: only what the SyncStateSet holds (a master cut off from it must
                # not show consumers messages a new master will not have)
                wrote = confirm_offset(t, t.load(Slot.WROTE))
                try:
                    if dispatched < wrote:
                        dispatched = self.reput(dispatched, wrote)
                        if unmapper is not None:
                            unmapper.passed(dispatched)
                    elif t.load(Slot.SHUTDOWN):
                        return
                    if flushed_at != dispatched and time.monotonic() - last_flush >= interval:
                        self.flush_queues(dispatched)
                        flushed_at, last_flush = dispatched, time.monotonic()
                except OSError as e:
                    # entries are idempotent: the batch that failed is written again from the
                    # last published offset
                    dispatched = t.load(Slot.DISPATCHED)
                    self._blocked(e)
                    continue
                if self._retry_wait:
                    # Before sleeping: the broker refuses writes while the hold stands, so no
                    # writer's wake would come to end a sleep taken with it still set.
                    self._unblocked()
                # one pass per wake: new records found right after a pass wait for the writer's
                # next wake (within a millisecond) and go in the same pass as what follows them
                timeout = interval if flushed_at != dispatched else -1
                t.wait_change(Slot.REPUT_WAKE, gen, timeout)

        def final() -> None:
            if not loaded:  # stopped while loading: nothing of ours to finish
                self.log.load()
                self.cqs.load()
            try:
                dispatched = self.reput(t.load(Slot.DISPATCHED), confirm_offset(t, t.load(Slot.WROTE)))
                self.flush_queues(dispatched)
            except OSError as e:  # the next start re-dispatches from the checkpoint
                dispatched = t.load(Slot.DISPATCHED)
                log.error("could not finish consume queues at shutdown: %s", e)
            t.store(Slot.REPUT_PID, 0)
            notify(self.notify_fd)
            log.info("reput service stopped at %d", dispatched)

        run_service(main_loop, final)


def main() -> None:
    args, config = enter_service("reput")
    ReputService(config, args.notify_fd).run()


if __name__ == "__main__":
    main()
