"""IndexService: the store's index files, oldest first (RocketMQ's IndexService, store side).

- `recover_index` runs at start, before the reput: a file of the wrong size (cut short by a
  crash) is an error naming it, and after a crash a file whose endTimestamp is past the
  checkpoint's indexMsgTimestamp holds entries that were never flushed (RocketMQ deletes those
  too). Such a file and every later one are deleted, and the caller re-dispatches the commit
  log from where the last file kept ends, so the index is rebuilt whole: nothing is lost
  (RocketMQ only rebuilds this far with messageIndexSafe; here it always does).
- `query_offset` answers QUERY_MESSAGE (IndexService.queryOffset): newest file first, walking
  the files whose time range meets [begin, end].
- `delete_expired` is the cleaner's: files wholly below the commit log's minimum offset go,
  never the last one (IndexService.deleteExpiredFile).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from broker.store import paths
from broker.store.durable import fsync_dir
from broker.store.errors import CorruptStoreError
from broker.store.index_file import IndexFile, index_key_hash, is_index_file_name

log = logging.getLogger("store")


@dataclass
class QueryOffsetResult:
    phy_offsets: list[int] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


def index_names(directory: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(directory) if is_index_file_name(n))
    except FileNotFoundError:
        return []


def recover_index(config, index_msg_timestamp: int, clean: bool) -> int | None:
    """Delete what cannot be trusted; returns the commit-log offset to re-dispatch from so that the
    index is whole again, or None when it is whole already."""
    directory = paths.index_dir(config.storePathRootDir)
    names = index_names(directory)
    keep_end = 0
    for i, name in enumerate(names):
        path = os.path.join(directory, name)
        try:
            f = IndexFile(path, config.maxHashSlotNum, config.maxIndexNum)
            h = f.header()
            f.close()
        except CorruptStoreError as e:
            log.error("%s: deleting it and any later index file; the index is rebuilt from commit-log offset %d",
                      e, keep_end)
        else:
            if clean or h.end_timestamp <= index_msg_timestamp:
                keep_end = h.end_phy_offset
                continue
            log.warning("index file %s has entries stored after the checkpoint's indexMsgTimestamp %d (not flushed "
                        "before the crash): deleting it and any later one; the index is rebuilt from commit-log "
                        "offset %d", path, index_msg_timestamp, keep_end)
        for later in names[i:]:
            os.unlink(os.path.join(directory, later))
        fsync_dir(directory)
        return keep_end
    return None


class IndexService:
    """Read-only maps of the index files, for queries (the reput service writes them)."""

    def __init__(self, config):
        self.dir = paths.index_dir(config.storePathRootDir)
        self.slots, self.num = config.maxHashSlotNum, config.maxIndexNum
        self.files: list[IndexFile] = []
        self._unreadable: set[str] = set()  # said once each, not at every query

    def refresh(self) -> None:
        """Follow the directory: files the reput made since, files the cleaner deleted."""
        names = [n for n in index_names(self.dir) if n not in self._unreadable]
        if [f.name for f in self.files] == names:
            return
        have = {f.name: f for f in self.files}
        files = []
        for name in names:
            f = have.pop(name, None)
            if f is None:
                try:
                    f = IndexFile(os.path.join(self.dir, name), self.slots, self.num)
                except FileNotFoundError:  # deleted meanwhile
                    continue
                except CorruptStoreError as e:  # recovery deletes it at the next start
                    log.error("index file %s not readable: %s", name, e)
                    self._unreadable.add(name)
                    continue
            files.append(f)
        for f in have.values():
            f.close()
        self.files = files

    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        self.refresh()
        res = QueryOffsetResult()
        key_hash = index_key_hash(topic, key)
        for i in range(len(self.files) - 1, -1, -1):
            f = self.files[i]
            h = f.header()
            if i == len(self.files) - 1:
                res.index_last_update_timestamp = h.end_timestamp
                res.index_last_update_phyoffset = h.end_phy_offset
            if f.is_time_matched(begin, end, h):
                f.select_phy_offsets(res.phy_offsets, key_hash, max_num, begin, end, h)
            if h.begin_timestamp < begin or len(res.phy_offsets) >= max_num:
                break
        return res

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []


def delete_expired(config, min_offset: int) -> list[str]:
    """Index files whose endPhyOffset is below the commit log's minimum, oldest first, stopping at
    the first that is not (never the last file, which the reput writes); returns their names."""
    directory = paths.index_dir(config.storePathRootDir)
    names = index_names(directory)
    gone = []
    for name in names[:-1]:
        path = os.path.join(directory, name)
        try:
            f = IndexFile(path, config.maxHashSlotNum, config.maxIndexNum)
        except (FileNotFoundError, CorruptStoreError):
            break
        end = f.header().end_phy_offset
        f.close()
        if end >= min_offset:
            break
        os.unlink(path)
        gone.append(name)
    if gone:
        fsync_dir(directory)
    return gone
