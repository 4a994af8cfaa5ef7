"""RocketMQ 5.1's CompactionStore / CompactionService: topics with `cleanup.policy=COMPACTION`
keep the newest message per key, and consumers read that compacted view of each queue.

Every compactionScheduleInternal ms (RocketMQ's key, spelled as RocketMQ spells it) each queue of
each compacted topic is compacted up to what its consume queue holds: the previous view's records
and the queue's newer messages (read from the commit log) go through an offset map of key -> newest
queue offset, and the records that are the newest of their key, with a body, are written as the
new view (broker.store.compaction_log: a compaction log and its sparse consume queue, swapped in
whole). The key is the message's KEYS property, whole (CompactionLog uses MessageExt.getKeys());
a message without one is not kept, and one with an empty body deletes its key (shouldRetainMsg).

A pull below a view's end reads the view (MessageStore.get): only the kept records, in queue
offset order, with nextBeginOffset stepping over the superseded offsets; from the view's end on,
the ordinary consume queue serves the tail. Queue offsets are the original ones throughout, and
the view keeps its records after the cleaner deleted their commit-log segments.

Why an asyncio task in the broker and a worker thread, not a service process as the flush, reput
and cleaner are: both ends of a compaction live in this process. What it reads is the topic
attributes (the broker's topic table) and the queue's messages up to what this process serves, and
what it makes is swapped into the pull path here; a separate process would need the topic table
and a "new view" signal carried through the offset table, for a job that runs once per interval.
The work that takes time (parsing keys, writing and fsyncing files) runs in a thread, off the
event loop; records are copied from the commit log on the loop, in chunks, so no other thread ever
touches the store's maps.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time

from broker.kernels.queue_read import Collected, collect
from broker.store import compaction_log as clog
from broker.store.compaction_log import CompactedView, ViewWriter, is_compaction
from broker.store.errors import StoreError
from broker.store.offset_table import Slot
from broker.store.message import decode_message
from broker.store.results import GetResult, GetStatus

log = logging.getLogger("compaction")
CHUNK = 1024  # records copied from the commit log per loop turn
# Tests widen the window in which a compaction is writing (to kill the broker inside it)
WRITE_DELAY_ENV = "BROKER_COMPACTION_WRITE_DELAY_MS"


class CompactionStopped(Exception):
    """The broker is stopping: the unfinished compaction is dropped (its view stays the old one)."""


class CompactionService:
    def __init__(self, store):
        self.s = store  # the MessageStore
        self.views: dict[tuple[str, int], CompactedView] = {}
        self.rounds = 0  # views installed since start
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._stopping = False

    @property
    def root(self) -> str:
        return self.s.config.storePathRootDir

    # -- lifecycle ------------------------------------------------------------------------------
    def load(self) -> None:
        """At start, before serving: finish or drop what a crash interrupted, map every view."""
        for topic, qid in clog.recover_all(self.root):
            log.warning("finished installing the compacted view of %s:%d a crash interrupted", topic, qid)
        positions = clog.load_positions(self.root)
        for key in positions:
            topic, _, qid = key.rpartition("_")
            if topic and qid.isdigit():
                view = clog.load_view(self.root, topic, int(qid), self.s.config.compactionMappedFileSize, positions)
                if view is not None:
                    self.views[(topic, int(qid))] = view
        if self.views:
            log.info("compacted views loaded: %s", ", ".join(f"{t}:{q} [{v.first}, {v.end}) {len(v.offsets)} kept"
                                                              for (t, q), v in sorted(self.views.items())))

    def start(self) -> None:
        # A slave serves its replicated consume queues as they are (RocketMQ's slave fetches the
        # compacted log from its master instead: docs/compat.md)
        if self.s.config.enableCompaction and not self.s.is_slave:
            self._stopping = False
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="compaction")

    async def stop(self) -> None:
        self._stopping = True
        if self.s.table is not None:
            self.s.table.store(Slot.COMPACTION_NEED, 0)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None

    def wake(self) -> None:
        """Compact now rather than at the next interval."""
        if self._wake is not None:
            self._wake.set()

    def forget(self, topic: str) -> None:
        """The topic was deleted: its views go."""
        for key in [k for k in self.views if k[0] == topic]:
            del self.views[key]
        clog.remove(self.root, topic)

    # -- the schedule -----------------------------------------------------------------------------
    async def _run(self) -> None:
        interval = self.s.config.compactionScheduleInternal / 1000
        self._publish_need(self._uncompacted())
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            # every record of a compacted queue dispatched by now is in its view once the round
            # compacted that queue: what the cleaner must keep is at or after this offset, or at
            # the first record of a queue the round failed on
            need = self.s.table.load(Slot.DISPATCHED)
            for topic, cfg in list(self.s.topic_config.topics.items()):
                if not is_compaction(cfg.attributes):
                    continue
                for qid in range(cfg.writeQueueNums):  # as scanAllTopicConfig
                    try:
                        await self.compact(topic, qid)
                    except (CompactionStopped, asyncio.CancelledError):
                        raise
                    except Exception:  # noqa: BLE001 - one queue's failure must not stop the others
                        log.exception("compaction of %s:%d failed; its previous view stays", topic, qid)
                        first = self._first_uncompacted(topic, qid)
                        need = need if first is None else min(need, first)
            self._publish_need(need)

    def _first_uncompacted(self, topic: str, queue_id: int) -> int | None:
        """The commit-log offset of the queue's first record not in its view (None: none)."""
        view = self.views.get((topic, queue_id))
        cq = self.s.reader.queue(topic, queue_id)
        if cq is None:
            return None
        i = max(view.end if view is not None else 0, cq.min_offset)
        if i >= self.s.max_offset(topic, queue_id):
            return None
        e = cq.entry(i)
        return e[0] if e is not None and e[1] > 0 else None

    def _uncompacted(self) -> int:
        """Where the records not yet compacted begin (at start: before the first round)."""
        need = self.s.table.load(Slot.DISPATCHED)
        for topic, cfg in list(self.s.topic_config.topics.items()):
            if is_compaction(cfg.attributes):
                for qid in range(cfg.writeQueueNums):
                    first = self._first_uncompacted(topic, qid)
                    need = need if first is None else min(need, first)
        return need

    def _publish_need(self, need: int) -> None:
        """The cleaner keeps every commit-log segment at or after `need` (Slot.COMPACTION_NEED):
        a compacted topic's records are copied into its view only when a round reaches them."""
        self.s.table.store(Slot.COMPACTION_NEED, need + 1)

    async def compact(self, topic: str, queue_id: int) -> bool:
        """Compact one queue up to what its consume queue holds now; True if a new view went in."""
        s = self.s
        end = s.max_offset(topic, queue_id)
        view = self.views.get((topic, queue_id))
        start = view.end if view is not None else 0
        if end <= start:
            return False
        cq = s.reader.queue(topic, queue_id)
        fresh: list[tuple[int, bytes, int]] = []  # (queue offset, record, tags code), in offset order
        i = start
        if cq is not None and cq.min_offset > start:
            log.warning("%s:%d: messages [%d, %d) were deleted from the commit log before they were compacted",
                        topic, queue_id, start, cq.min_offset)
            i = cq.min_offset
        while cq is not None and i < end:
            ents = cq.entries(i, min(CHUNK, end - i))
            if len(ents) == 0:
                break
            for k, (phys, size, tag) in enumerate(ents.tolist()):
                try:
                    fresh.append((i + k, bytes(s.record_view(phys)), tag))
                except StoreError:  # its segment was deleted meanwhile
                    pass
            i += len(ents)
            await asyncio.sleep(0)  # let the loop serve between chunks
        new = await asyncio.to_thread(self._write, topic, queue_id, view, fresh, end)
        self.views[(topic, queue_id)] = new
        self.rounds += 1
        log.info("compacted %s:%d up to %d: %d messages kept", topic, queue_id, end, len(new.offsets))
        return True

    # -- the worker thread ------------------------------------------------------------------------
    def _write(self, topic: str, queue_id: int, view: CompactedView | None, fresh: list, end: int) -> CompactedView:
        newest: dict[str, tuple[int, bytes, int, int, bool]] = {}  # the offset map: key -> newest record
        if view is not None:
            for n in range(len(view.offsets)):
                u = view.units[n]
                _keep(newest, int(u["offset"]), bytes(view.record(n)), int(u["tag"]))
        for offset, record, tag in fresh:
            _keep(newest, offset, record, tag)
        kept = sorted((v for v in newest.values() if v[4]), key=lambda v: v[0])
        delay = int(os.environ.get(WRITE_DELAY_ENV, "0") or 0) / 1000
        size = self.s.config.compactionMappedFileSize
        w = ViewWriter(self.root, topic, queue_id, size)
        for offset, record, tag, store_time, _ in kept:
            if self._stopping:
                raise CompactionStopped()
            w.append(record, offset, tag, store_time)
            if delay:
                time.sleep(delay)
        w.commit(end)
        clog.install(self.root, topic, queue_id)
        return clog.load_view(self.root, topic, queue_id, size)

    # -- the read side ----------------------------------------------------------------------------
    def view_for(self, topic: str, queue_id: int) -> CompactedView | None:
        view = self.views.get((topic, queue_id)) if self.views else None
        if view is None:
            return None
        cfg = self.s.topic_config.topics.get(topic)
        return view if cfg is not None and is_compaction(cfg.attributes) else None

    def get(self, view: CompactedView, offset: int, max_msgs: int, max_bytes: int, tag_hashes, spans: bool,
            sql, lo: int, hi: int) -> GetResult:
        """CompactionLog.getMessage: kept records from `offset` (below view.end), as the queue-read
        kernel collects them from the commit log, here from the compaction log."""
        n = len(view.offsets)
        i = view.index_of(offset)
        if i >= n:  # only superseded offsets left in the view: on to its end
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, view.end, lo, hi)
        filtered = tag_hashes is not None or sql is not None
        stop = min(n, i + (max(800, max_msgs * 20) if filtered else max_msgs))
        c = Collected(i, not spans, spans)
        collect(c, view.cq, 0, i, stop, view.segments, view.file_size, max_msgs, max_bytes, tag_hashes, sql)
        c.finish()
        j = c.next_index
        nxt = int(view.offsets[j]) if j < n else view.end
        if not c.count:
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, nxt, lo, hi)
        offsets = [int(view.offsets[k]) for k in c.queue_offsets] if c.queue_offsets else ()
        return GetResult(GetStatus.FOUND, nxt, lo, hi, c.views, offsets, c.total, c.count)


def _keep(newest: dict, offset: int, record: bytes, tag: int) -> None:
    msg = decode_message(record, 0)
    key = msg.properties.get("KEYS", "")
    if not key.strip():
        return  # "message has no keys": RocketMQ keeps none such in a compaction log
    newest[key] = (offset, record, tag, msg.store_timestamp, len(msg.body) > 0)

