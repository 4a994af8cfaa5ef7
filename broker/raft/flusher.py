"""EntryFlusher: writes a member's new entries back and its checkpoint out (DLedger's
FlushDataService and its checkpoint timer), on the member's loop.

DLedger acknowledges an entry once a majority has it in memory and flushes every
flushFileInterval (10 ms); so do we: a replica killed with -9 keeps its page cache, and an
acknowledged entry is only lost if a majority loses power within that interval. The flush waits for
a wake-up (an append, on either side), then the interval (so one msync covers every entry of a
burst), with fdatasync in a thread so that the loop goes on meanwhile. The checkpoint (the
committed index, flushed entries first) is written every
checkPointInterval when the committed index moved, and by the store when it closes.

A write-back that fails is never retried: after a failed fdatasync or msync the kernel may have
dropped the dirty pages it covered ("fsyncgate"), so a later call that succeeds proves nothing.
The store records the failure (DLedgerEntryStore.disk_failed), its flushed marks never move
again, and `on_disk_failed` tells the member, which then takes and acknowledges no more entries
until it is restarted; the restart recovers the log by CRC from what is on disk.
"""
from __future__ import annotations

import asyncio
import logging

from broker.raft.entry_store import DLedgerEntryStore
from broker.raft.errors import EntryStoreDiskFailed

log = logging.getLogger("raft")

FLUSH_INTERVAL_MS = 10        # DLedgerConfig.flushFileInterval
CHECKPOINT_INTERVAL_MS = 3000  # DLedgerConfig.checkPointInterval


class EntryFlusher:
    def __init__(self, store: DLedgerEntryStore, flush_interval_ms: int = FLUSH_INTERVAL_MS,
                 checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS, name: str = "", durable: bool = False):
        self.store = store
        # durable (the group's flushDiskType=SYNC_FLUSH): appends wait for the write-back, so it
        # starts as soon as there is something to write (group commit: what arrives during one
        # fdatasync goes in the next) instead of after the interval
        self.durable = durable
        self.flush_s = 0.0 if durable else flush_interval_ms / 1000.0
        self.on_flushed: list = []  # fn(flushed index), after each write-back
        self.on_disk_failed: list = []  # fn(), once, when a write-back failed
        self.checkpoint_s = checkpoint_interval_ms / 1000.0
        self.name = name
        self._dirty = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._persisted = store.committed_index

    def wake(self) -> None:
        self._dirty.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"flusher-{self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def _disk_failed(self) -> None:
        """Said by the store; the member stops taking and acknowledging entries, and nothing is
        written back again in its life (see the module's doc)."""
        for fn in self.on_disk_failed:
            fn()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_checkpoint = loop.time() + self.checkpoint_s
        while True:
            timer = loop.call_at(next_checkpoint, self._dirty.set)
            try:
                await self._dirty.wait()
            finally:
                timer.cancel()
            self._dirty.clear()
            if self.flush_s:
                await asyncio.sleep(self.flush_s)
            if self.store.disk_failed:  # failed elsewhere: a truncation's or close's msync
                self._disk_failed()
                return
            try:
                if self.store.flushed_pos < self.store.write_pos:
                    # fdatasync in a thread: an msync (mmap.flush) keeps the GIL, and every 10 ms
                    # it stopped the leader's loop for ~2 ms (cProfile, issue 17's bench)
                    plan = self.store.flush_plan()
                    try:
                        await loop.run_in_executor(None, self.store.write_back, plan)
                    except OSError as e:
                        raise self.store.write_back_failed("fdatasync of the entry files", e) from None
                    self.store.written_back(plan)
                    for fn in self.on_flushed:
                        fn(self.store.flushed_index)
                if loop.time() >= next_checkpoint:
                    next_checkpoint = loop.time() + self.checkpoint_s
                    if self.store.committed_index != self._persisted:
                        self._persisted = self.store.committed_index
                        self.store.persist_checkpoint()
            except EntryStoreDiskFailed:
                self._disk_failed()
                return
            except Exception:  # not the disk (the store closed under us, a bug): said, tried again at the next wake-up
                log.exception("[%s] flushing the entry store failed", self.name)
