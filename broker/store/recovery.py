"""Recovery of the commit log and consume queues at start (RocketMQ's recoverNormally/Abnormally).

After a clean stop the checkpoint's cleanOffset is trusted (checked cheaply); after a clean stop
of a broker that wrote no cleanOffset (Apache RocketMQ's) the end is found by scanning the last
three segments, as RocketMQ's recoverNormally does. After a crash the
log is scanned with CRC from the segment holding min(flushedOffset, cqFlushedOffset): below
flushedOffset every byte was durable, so a bad record there is real corruption and the store
refuses to start, naming the offset; at or past it a bad record is the torn tail of the crash,
which is zeroed on disk and fsynced. Consume-queue entries past the end are dropped, and the
reput service re-dispatches from the scan start (its writes are idempotent).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import numpy as np

from broker.kernels.codec import SCAN_BLANK, SCAN_CORRUPT, SCAN_END, SCAN_PARTIAL, Scanner
from broker.store.checkpoint import StoreCheckpoint
from broker.store.commit_log import CommitLog
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.errors import CorruptStoreError
from broker.store.mapped_file import MappedFile, zero_torn_tail

log = logging.getLogger(__name__)


@dataclass
class RecoveryResult:
    max_offset: int
    dispatch_from: int
    clean: bool
    queue_offsets: dict[tuple[bytes, int], int] = field(default_factory=dict)
    truncated_at: int | None = None
    scanned_bytes: int = 0


def recover(commit_log: CommitLog, cqs: ConsumeQueueStore, ckpt: StoreCheckpoint, clean: bool,
            check_crc: bool = True) -> RecoveryResult:
    files = commit_log.queue.files
    if not files:
        for cq in cqs.queues.values():
            cq.truncate_phys(0)
        return RecoveryResult(0, 0, clean)
    if clean and ckpt.has_offsets:
        res = _recover_clean(commit_log, cqs, ckpt)
        if res is not None:
            return res
        log.warning("checkpoint of the clean stop does not match the commit log: scanning as after a crash")
    elif clean:
        # stopped cleanly by a broker that keeps none of our offsets in the checkpoint (Apache
        # RocketMQ's: an operator's migration): as its recoverNormally, the end of the log is found
        # by scanning from the third-last segment; the consume queues and index it left are whole
        return _recover_crash(commit_log, cqs, ckpt, check_crc, foreign_clean=True)
    return _recover_crash(commit_log, cqs, ckpt, check_crc)


def _queue_offsets_from_cqs(cqs: ConsumeQueueStore) -> dict[tuple[bytes, int], int]:
    return {(topic.encode(), qid): cq.max_offset_on_disk() for (topic, qid), cq in cqs.queues.items()}


def _recover_clean(commit_log: CommitLog, cqs: ConsumeQueueStore, ckpt: StoreCheckpoint) -> RecoveryResult | None:
    end = ckpt.get("cleanOffset")
    q = commit_log.queue
    last = q.files[-1]
    if not (q.min_offset <= end <= last.end):
        return None
    mf = q.find(end)
    if mf is not None and end < mf.end:
        head = mf.mm[end - mf.base:min(end - mf.base + 8, mf.size)]
        if np.any(head):  # past a clean end there must be unwritten space
            return None
    if any(cq.max_phys_end() > end for cq in cqs.queues.values()):
        return None
    return RecoveryResult(end, min(end, max(ckpt.get("cqFlushedOffset"), q.min_offset)), True,
                          _queue_offsets_from_cqs(cqs))


def _recover_crash(commit_log: CommitLog, cqs: ConsumeQueueStore, ckpt: StoreCheckpoint,
                   check_crc: bool, foreign_clean: bool = False) -> RecoveryResult:
    q = commit_log.queue
    durable = ckpt.get("flushedOffset") if ckpt.has_offsets else 0
    start = min(durable, ckpt.get("cqFlushedOffset")) if ckpt.has_offsets else q.min_offset
    if foreign_clean:
        start = q.files[max(0, len(q.files) - 3)].base
    start = max(start, q.min_offset)
    mf = q.find(start) or q.files[-1]
    start = mf.base
    scanner = Scanner(8192)
    seen: dict[tuple[bytes, int], int] = {}
    pos = start
    end = None
    truncated = None
    while end is None:
        count, nxt, status = scanner.scan(mf.buf, pos - mf.base, mf.size, mf.base, check_crc)
        if count:
            _note_queue_offsets(scanner, count, seen)
        pos = mf.base + nxt
        if status == SCAN_END and pos < mf.end:
            continue  # the scanner's batch was full
        if status == SCAN_BLANK or (status == SCAN_END and pos == mf.end):
            nmf = q.find(mf.end)
            if nmf is None:
                end = mf.end
            else:
                mf, pos = nmf, nmf.base
            continue
        # SCAN_ZERO, SCAN_PARTIAL or SCAN_CORRUPT: the log ends here
        if status in (SCAN_CORRUPT, SCAN_PARTIAL) and pos < durable:
            raise CorruptStoreError(mf.path, pos, scanner.reason or "record incomplete below the flushed offset")
        if status in (SCAN_CORRUPT, SCAN_PARTIAL):
            log.warning("torn record at commit-log offset %d (%s): truncating the tail of the crash",
                        pos, scanner.reason or "incomplete")
            truncated = pos
        end = pos
    _check_nothing_after(q, mf, end)
    if _zero_tail(mf, end) and truncated is None:
        truncated = end
    q.drop_after(end)
    for cq in cqs.queues.values():
        cq.truncate_phys(end)
    offsets = _queue_offsets_from_cqs(cqs)
    for key, nxt in seen.items():
        if nxt > offsets.get(key, 0):
            offsets[key] = nxt
    log.info("recovered commit log %s: scanned %d bytes from %d, end at %d",
             "after another broker's clean stop" if foreign_clean else "after a crash", end - start, start, end)
    return RecoveryResult(end, start, foreign_clean, offsets, truncated, end - start)


def _note_queue_offsets(scanner: Scanner, count: int, seen: dict[tuple[bytes, int], int]) -> None:
    e = scanner.entries[:count]
    keys = (e["topic_idx"].astype(np.int64) << 32) | e["queue_id"].astype(np.int64)
    # last occurrence of each queue holds its highest queue offset (offsets grow along the log)
    _, idx = np.unique(keys[::-1], return_index=True)
    for i in (count - 1 - idx):
        key = (scanner.topics[int(e["topic_idx"][i])], int(e["queue_id"][i]))
        seen[key] = max(seen.get(key, 0), int(e["queue_offset"][i]) + 1)


def _check_nothing_after(q, mf: MappedFile, end: int) -> None:
    """A later segment that starts with a valid record means the gap is not a crash's tail."""
    nmf = q.find(mf.end)
    if nmf is None:
        return
    s = Scanner(1)
    count, _, _ = s.scan(nmf.buf, 0, nmf.size, nmf.base, True)
    if count:
        raise CorruptStoreError(mf.path, end, f"log stops here but segment {os.path.basename(nmf.path)} holds valid records")


def _zero_tail(mf: MappedFile, end: int) -> bool:
    """Zero whatever a torn write left after `end` in its segment and make that durable."""
    touched = zero_torn_tail(mf.mm, end - mf.base) >= 0
    if touched:
        mf.mm.flush()  # msync: the zeroed tail is on disk before anything is appended after it
    return touched
