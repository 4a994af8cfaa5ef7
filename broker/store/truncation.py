"""Truncation of a closed store's commit log at an offset (controller mode: a returning broker cuts
the tail its new master never had before it follows; RocketMQ's AutoSwitchHAClient.doTruncate).

Every byte from the offset on is zeroed and later segments are deleted, all fsynced, before the
store starts again; the checkpoint's offsets are lowered to the cut and the abort file is made,
so that the start recovers as after a crash and drops the consume-queue entries past the cut.
RocketMQ #10666 cut the tail in memory only, and it came back after a crash.
"""
from __future__ import annotations

import logging
import os

from broker.store import paths
from broker.store.checkpoint import StoreCheckpoint
from broker.store.durable import fsync_dir
from broker.store.mapped_file import zero_torn_tail
from broker.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger("store")


def truncate_commit_log(config, offset: int) -> int:
    """Cut the log of the (closed) store at `offset`; returns about how many bytes were dropped
    (whole zeroed chunks)."""
    q = MappedFileQueue(config.commitlog_dir, config.mappedFileSizeCommitLog, writable=True, warm=False)
    q.load()
    try:
        dropped = 0
        for f in q.files:
            if f.base <= offset < f.end:  # the segment holding the cut; later ones are deleted
                # the log is written sequentially: zero_torn_tail stops after the first clean chunk
                hi = zero_torn_tail(f.mm, offset - f.base)
                if hi >= 0:
                    dropped += f.base + hi - offset
                    f.mm.flush()
        for f in [f for f in q.files if f.base > offset]:
            log.warning("truncation at %d deletes segment %s", offset, f.path)
        q.drop_after(offset)
        fsync_dir(config.commitlog_dir)
    finally:
        q.close()
    ckpt = StoreCheckpoint(paths.checkpoint(config.storePathRootDir))
    try:
        if ckpt.has_offsets:
            ckpt.set(flushedOffset=min(ckpt.get("flushedOffset"), offset),
                     cqFlushedOffset=min(ckpt.get("cqFlushedOffset"), offset), cleanOffset=-1)
            ckpt.flush()
    finally:
        ckpt.close()
    os.close(os.open(paths.abort_file(config.storePathRootDir), os.O_WRONLY | os.O_CREAT, 0o644))
    fsync_dir(config.storePathRootDir)
    log.warning("commit log truncated at %d (about %d bytes dropped); the next start recovers from there",
                offset, dropped)
    return dropped
