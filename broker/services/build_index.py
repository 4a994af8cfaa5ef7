"""BuildIndex: the reput's index dispatcher (RocketMQ's CommitLogDispatcherBuildIndex), beside the
consume queues. The per-record work (finding KEYS and UNIQ_KEY, hashing, slot and entry writes) is
one kernel pass (broker.kernels.index_dispatch); this side makes the files: the last one is
written on from where it stands, and when it fills up a new one starts where it ended.

Durability: `flush` (with the consume queues', every flushIntervalConsumeQueue) msyncs the files
written since the last one and records the last file's endTimestamp as the checkpoint's
indexMsgTimestamp; after a crash recovery deletes any file with entries past it and the reput
re-indexes from there (broker.store.index_service.recover_index).
"""
from __future__ import annotations

import logging
import os

from broker.kernels.codec import MappedBuffer, Scanner
from broker.kernels.index_dispatch import IndexDispatcher
from broker.store.checkpoint import StoreCheckpoint
from broker.store.index_file import IndexFile
from broker.store.index_service import index_names

log = logging.getLogger("reput")


class BuildIndex:
    def __init__(self, config):
        self.dir = config.index_dir
        self.slots, self.num = config.maxHashSlotNum, config.maxIndexNum
        self.kernel = IndexDispatcher()
        self.current: IndexFile | None = None
        self.rolled: list[IndexFile] = []  # filled since the last flush

    def _open_last(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        names = index_names(self.dir)
        if names:
            self._use(IndexFile(os.path.join(self.dir, names[-1]), self.slots, self.num, writable=True))
        else:
            self._use(IndexFile.create(self.dir, self.slots, self.num, 0, 0))

    def _use(self, f: IndexFile) -> None:
        self.kernel.register(f.buf, self.slots, self.num)
        self.current = f

    def _roll(self) -> None:
        """The current file is full: the next starts at its end (IndexService.getAndCreateLastIndexFile)."""
        full = self.current
        # OSError (a full disk) goes up to the reput, which holds and retries from DISPATCHED: the
        # kernel skips what is indexed already and resumes the record it cut short
        nxt = IndexFile.create(self.dir, self.slots, self.num, self.kernel.end_phy_offset, self.kernel.end_timestamp)
        self._use(nxt)
        self.rolled.append(full)
        log.info("index file %s is full: indexing goes on in %s", full.name, nxt.name)

    def dispatch(self, scanner: Scanner, buf: MappedBuffer, count: int, span: int | None = None) -> None:
        """Index the keys of the scanner's `count` records, scanned from `buf` (`span` bytes of
        it, when the caller knows)."""
        if self.current is None:
            self._open_last()
        # Blocks for every entry this may write are reserved first: at most one UNIQ_KEY and one
        # KEYS token per two bytes of KEYS per record. The records' bytes bound their KEYS bytes:
        # when that looser bound is reserved already (most passes: RESERVE_CHUNK at a time), the
        # exact one (a numpy pass over the entries, ~10 us: as much as a small pass's dispatch)
        # is not needed.
        most = None
        if span is None or not self.current.reserved_for(self.kernel.index_count, 2 * count + span // 2):
            most = self._most(scanner, count)
        i = 0
        while True:
            if most is not None:
                self.current.reserve_entries(self.kernel.index_count, most)
            i = self.kernel.dispatch(scanner, buf, i, count)
            if i >= count:
                return
            self._roll()
            if most is None:
                most = self._most(scanner, count)

    @staticmethod
    def _most(scanner: Scanner, count: int) -> int:
        return count + int((scanner.entries["keys_len"][:count] // 2 + 1).sum())

    def flush(self, ckpt: StoreCheckpoint) -> None:
        """Make the entries durable, then say so in the checkpoint (the caller flushes it)."""
        for f in self.rolled:
            f.flush()
            f.close()
        self.rolled = []
        if self.current is not None:
            self.current.flush()
            if self.kernel.end_timestamp > 0:
                ckpt.set(indexMsgTimestamp=self.kernel.end_timestamp)

    def close(self) -> None:
        self.kernel.release()
        for f in self.rolled + ([self.current] if self.current is not None else []):
            f.close()
        self.rolled, self.current = [], None
