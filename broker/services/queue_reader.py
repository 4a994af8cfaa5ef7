"""The read side of the store (RocketMQ's DefaultMessageStore.getMessage and friends): a queue's
bounds and messages as zero-copy views of the mapped commit log, a record by physical offset.

On a master the end of a queue is what the reput has dispatched of what this process wrote; on
a slave nothing here writes, so a queue ends at its first unwritten consume-queue entry, and
segments the HA client made since the last look are mapped on demand. In DLedger mode queues end
as on a slave on every member (the reput dispatches committed entries only), and records are read
from the DLedger data files at their physical offsets (entry pos + 48), below the divided offset
from the commit log written before DLedger mode (the commit log's `queue` is then a
DividedFileQueue: broker.raft.divided_commit_log). A DLedger member without that old log has no
entries for its messages: its queues start after them (ConsumeQueue.skip_unwritten_head)."""
from __future__ import annotations

import os

import numpy as np

from broker.kernels.queue_read import COLLECT_END, COLLECT_NO_SEGMENT, Collected, collect
from broker.store.consume_queue import ConsumeQueue
from broker.store.errors import StoreError
from broker.store.message import StoredMessage, decode_message
from broker.store.offset_table import Slot
from broker.store.results import GetResult, GetStatus

_DISPATCHED = int(Slot.DISPATCHED)  # a plain int: read_run loads it per pop (an enum member's look-up ~0.15 us)


class QueueReader:
    def __init__(self, store):
        self.s = store  # the MessageStore: its commit log, consume queues, table and write side
        self._slave_max: dict[tuple[str, int], int] = {}  # slave: consumable end of each queue
        self.memory_share = (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                             * store.config.accessMessageInMemoryMaxRatio // 100)
        self.get_msgs = self.get_bytes = 0

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        cqs = self.s.cqs
        return cqs.find(topic, queue_id) if cqs is not None else None

    def forget_ends(self) -> None:
        """Segments were deleted: queue ends must be found again."""
        self._slave_max.clear()

    # -- bounds ---------------------------------------------------------------------------------
    def max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last consumable (dispatched) message of the queue."""
        s = self.s
        if s.reads_dispatched_only:
            return self._slave_max_offset(topic, queue_id)
        tb = s.topic_bytes(topic)
        app = s.commit_log.appender
        nxt = app.next_offset(tb, queue_id)
        d = s.table.load(Slot.DISPATCHED)
        if app.last_end(tb, queue_id) <= d:
            return nxt
        cq = self.queue(topic, queue_id)
        if cq is None:
            return 0
        return first_undispatched(cq.entry, cq.min_offset, nxt, d)

    def _slave_max_offset(self, topic: str, queue_id: int) -> int:
        """On a slave nothing here appends: a queue ends at its first unwritten consume-queue
        entry (the reput writes entries in order and only for whole replicated records)."""
        cq = self.queue(topic, queue_id)
        if cq is None:
            return 0
        key = (topic, queue_id)
        end = max(self._slave_max.get(key, 0), cq.min_offset)
        if end == cq.min_offset and self.s.queue_heads_may_be_unwritten:
            cq.skip_unwritten_head(self.s.commit_log.min_offset)
            end = cq.min_offset
        while True:
            ents = cq.entries(end, 4096)
            if len(ents) == 0:
                break
            zero = np.flatnonzero(ents["size"] == 0)
            if len(zero):
                end += int(zero[0])
                break
            end += len(ents)
        self._slave_max[key] = end
        return end

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queue(topic, queue_id)
        if cq is None:
            return 0
        if self.s.queue_heads_may_be_unwritten:
            self.max_offset(topic, queue_id)  # finds where the queue starts too
        return cq.min_offset

    # -- messages -------------------------------------------------------------------------------
    def get(self, topic: str, queue_id: int, offset: int, max_msgs: int = 32, max_bytes: int = 256 * 1024,
            tag_hashes: set[int] | None = None, spans: bool = False, sql: bytes | None = None,
            merge: bool = False) -> GetResult:
        """Messages of one queue from `offset` as zero-copy views of their stored records, with
        each one's queue offset. spans=True (a pull's body): one view for records that lie back
        to back in the log, and no offsets (GetResult.count says how many records there are).
        merge=True (a pop's body): such views, and each record's queue offset all the same.
        `sql`: an SQL92 program (broker.server.filter.sql92) the records' properties must match.
        Statuses and next offsets follow RocketMQ's DefaultMessageStore.getMessage."""
        if max_msgs <= 0 or max_bytes <= 0:
            raise ValueError("max_msgs and max_bytes must be positive")
        cq = self.queue(topic, queue_id)
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0 if offset == 0 else offset, 0, 0)
        hi = self.max_offset(topic, queue_id)
        lo = cq.min_offset  # after the end: finding it may move the start (skip_unwritten_head)
        if hi <= lo:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0 if offset == 0 else lo, lo, hi)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        # Unfiltered reads stop at max_msgs entries; filtered ones may skip entries, but scan at
        # most as far as RocketMQ does (16000 bytes of consume queue, or 20 per wanted message).
        filtered = tag_hashes is not None or sql is not None
        stop = min(hi, offset + (max(800, max_msgs * 20) if filtered else max_msgs))
        c = Collected(offset, not spans, spans or merge)
        segments = self.s.commit_log.queue
        refreshed = False
        i = offset
        while i < stop:
            first, entries = cq.file_for(i, create=False)
            if entries is None:
                break
            end = min(stop, first + cq.per_file)
            status = collect(c, entries, first, i, end, segments.files, segments.file_size, max_msgs, max_bytes,
                             tag_hashes, sql)
            if status == COLLECT_NO_SEGMENT and not segments.writable and not refreshed:
                segments.refresh()  # a segment the HA client made since we looked
                refreshed = True
                i = c.next_index
                continue
            if status != COLLECT_END:
                break
            i = end
        c.finish()
        nxt = c.next_index
        if not c.count:
            status = GetStatus.NO_MATCHED_MESSAGE if nxt > offset else GetStatus.OFFSET_FOUND_NULL
            return GetResult(status, nxt, lo, hi)
        r = GetResult(GetStatus.FOUND, nxt, lo, hi, c.views, c.queue_offsets or (), c.total, c.count)
        self.get_msgs += c.count
        self.get_bytes += c.total
        r.suggest_slave = self.s.table.load(Slot.WROTE) - c.last_phys > self.memory_share
        return r

    def read_run(self, topic: str, queue_id: int, offset: int, max_msgs: int, max_bytes: int,
                 tag_hashes: set[int] | None = None, sql: bytes | None = None):
        """get(merge=True) for a pop, its usual answer without a GetResult: (views, queue offsets,
        next offset, the queue's max offset) when records were found from `offset` in a queue of
        this store's own log (a master's), else get's GetResult (any status, found on a slave too).
        The same records, offsets and counts as get."""
        s = self.s
        cqs = s.cqs
        cq = cqs.queues.get((topic, queue_id)) if cqs is not None else None  # (cqs.find's usual case)
        if cq is None:
            cq = cqs.find(topic, queue_id) if cqs is not None else None
        if cq is None or s.reads_dispatched_only or max_msgs <= 0 or max_bytes <= 0:
            return self.get(topic, queue_id, offset, max_msgs, max_bytes, tag_hashes, False, sql, True)
        # max_offset's master branch (the queue's min read once: a min() over its files)
        tb = s._topics.get(topic) or topic.encode()  # (s.topic_bytes, inline)
        cl = s.commit_log
        app = cl._app  # (cl.appender, without the property's frame)
        hi = app.next_offset(tb, queue_id)
        d = s.table.load(_DISPATCHED)
        files = cq.files
        lo = min(files) if files else 0  # (cq.min_offset, inline)
        if lo < cq.min_logic:
            lo = cq.min_logic
        if app.last_end(tb, queue_id) > d:
            hi = first_undispatched(cq.entry, lo, hi, d)
        if not lo <= offset < hi:  # (get's statuses)
            return self.get(topic, queue_id, offset, max_msgs, max_bytes, tag_hashes, False, sql, True)
        if tag_hashes is None and sql is None:
            stop = offset + max_msgs
            if stop > hi:
                stop = hi
        else:
            stop = min(hi, offset + max(800, max_msgs * 20))
        per_file = cq.per_file
        first = offset - offset % per_file  # (cq.file_for's, inline: a file not mapped yet goes through it)
        entries = files.get(first)
        if entries is None:
            first, entries = cq.file_for(offset, create=False)
        if entries is None or first + per_file < stop:  # a read across two consume-queue files: get's loop
            return self.get(topic, queue_id, offset, max_msgs, max_bytes, tag_hashes, False, sql, True)
        c = Collected(offset, True, True)
        segments = cl.queue
        status = collect(c, entries, first, offset, stop, segments.files, segments.file_size, max_msgs, max_bytes,
                         tag_hashes, sql)
        n = c.count
        if not n or (status == COLLECT_NO_SEGMENT and not segments.writable):  # (get says what, or maps more)
            return self.get(topic, queue_id, offset, max_msgs, max_bytes, tag_hashes, False, sql, True)
        c.finish()
        self.get_msgs += n
        self.get_bytes += c.total
        return c.views, c.queue_offsets, c.next_index, hi

    def record_view(self, physical_offset: int) -> memoryview:
        """Zero-copy view of the whole stored record at a physical offset (RocketMQ's
        selectOneMessageByOffset). On a slave the HA client may have made the segment since this
        process last looked, so the segments are looked for again before giving up."""
        s = self.s
        segments = s.commit_log.queue
        mf = segments.find(physical_offset)
        if mf is None and not segments.writable:
            segments.refresh()
            mf = segments.find(physical_offset)
        wrote = s.table.load(Slot.WROTE)
        if mf is None or mf.mv is None or not 0 <= physical_offset < wrote:
            raise StoreError(f"no message at physical offset {physical_offset}: the commit log holds "
                             f"[{s.commit_log.min_offset}, {wrote})")
        at = physical_offset - mf.base
        size = int.from_bytes(mf.mv[at:at + 4], "big")
        if not 0 < size <= mf.size - at:
            raise StoreError(f"no record starts at physical offset {physical_offset} (size word {size})")
        return mf.mv[at:at + size]

    def lookup(self, physical_offset: int) -> StoredMessage:
        """Decode the record at a physical offset (RocketMQ's lookMessageByOffset / view by msgId)."""
        view = self.record_view(physical_offset)
        try:
            return decode_message(view, 0)
        except StoreError as e:
            raise StoreError(f"no message at physical offset {physical_offset}: {e}") from None

    def queue_counts(self) -> dict[str, int]:
        """Each topic that has consume queues on disk, with one more than its highest queue id:
        what the log itself says exists, whatever any topic config says."""
        out: dict[str, int] = {}
        root = self.s.config.consumequeue_dir
        try:
            topics = os.listdir(root)
        except FileNotFoundError:
            return out
        for topic in topics:
            try:
                ids = [int(q) for q in os.listdir(os.path.join(root, topic)) if q.isdigit()]
            except (NotADirectoryError, FileNotFoundError):  # a file, or a topic deleted meanwhile
                continue
            if ids:
                out[topic] = max(ids) + 1
        return out


def first_undispatched(entry, lo: int, hi: int, dispatched: int) -> int:
    """The first queue index in [lo, hi) whose entry (`entry(i)`: (commit log offset, size, ...)
    or None) the reput has not dispatched yet, given its position `dispatched`; hi when none.
    The dispatched entries are a prefix. What is not dispatched is the tail the reput has not
    reached (a millisecond's appends, such as the revive log's while pops and acks write it):
    looked for back from the end, doubling the step, then searched between, not across the
    whole queue every time."""
    def done(i: int) -> bool:
        e = entry(i)
        return e is not None and e[1] > 0 and e[0] + e[1] <= dispatched
    step = 1
    while hi - step > lo:
        if done(hi - step):
            lo = hi - step + 1
            break
        hi -= step
        step *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if done(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo
