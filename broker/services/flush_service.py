"""FlushCommitLogService as its own process: makes the commit log durable and publishes `flushed`.

SYNC_FLUSH is group commit: sleep on the `wrote` futex; when it moves, one fdatasync covers
everything written so far, `flushed` is published and the broker's eventfd completes every
producer up to it. ASYNC_FLUSH flushes every flushIntervalCommitLog when at least
flushCommitLogLeastPages are dirty, and everything every flushCommitLogThoroughInterval.

fdatasync on the segment file writes back pages dirtied through the broker's own mapping, so
this process needs no mapping of the log. A failed fdatasync is never reported as success:
after one, `flushed` never advances again in this broker's life (the kernel may have dropped
the dirty pages, so a later successful call proves nothing), the broker refuses writes
(RunningFlags) and SYNC_FLUSH producers waiting get FLUSH_DISK_TIMEOUT at once.
"""
from __future__ import annotations

import logging
import os
import time

from broker.services.process import enter_service, notify, run_service
from broker.store import paths
from broker.store.checkpoint import StoreCheckpoint
from broker.store.config import SYNC_FLUSH
from broker.store.mapped_file import offset_to_name
from broker.store.offset_table import FLUSH_BUCKETS, Slot, open_table

log = logging.getLogger("flush")
PAGE = 4096
CKPT_SYNC_INTERVAL = 1.0  # seconds


class FlushService:
    def __init__(self, config, notify_fd: int):
        self.config = config
        self.table = open_table(config.storePathRootDir)
        self.ckpt = StoreCheckpoint(paths.checkpoint(config.storePathRootDir))
        self.notify_fd = notify_fd
        self.seg = config.mappedFileSizeCommitLog
        self.fds: dict[int, int] = {}
        self.failed = False
        self._ckpt_synced = 0.0

    def _fd(self, base: int) -> int | None:
        fd = self.fds.get(base)
        if fd is None:
            try:
                fd = os.open(os.path.join(self.config.commitlog_dir, offset_to_name(base)), os.O_RDWR)
            except FileNotFoundError:
                return None  # deleted by the cleaner: nothing left to make durable there
            self.fds[base] = fd
        return fd

    def _observe(self, ns: int) -> None:
        """The flush-latency histogram lives in the offset table: the broker's /metrics reads it."""
        t = self.table
        t.add(Slot.FLUSH_COUNT, 1)
        t.add(Slot.FLUSH_NS, ns)
        secs = ns / 1e9
        t.add(Slot.FLUSH_BUCKET0 + next(i for i, b in enumerate(FLUSH_BUCKETS) if secs <= b), 1)

    def flush_to(self, flushed: int, target: int) -> int:
        """fdatasync every segment holding bytes in [flushed, target); returns the new flushed offset."""
        if target <= flushed or self.failed:
            return flushed
        base = flushed - flushed % self.seg
        t0 = time.perf_counter_ns()
        try:
            while base < target:
                fd = self._fd(base)
                if fd is not None:
                    os.fdatasync(fd)
                base += self.seg
        except OSError as e:
            self.failed = True
            self.table.add(Slot.FLUSH_ERRORS, 1)
            log.error("fdatasync failed (%s): the commit log is not durable past %d; writes are refused and "
                      "SYNC_FLUSH sends waiting for this flush answered FLUSH_DISK_TIMEOUT until the broker "
                      "restarts", e, flushed)
            notify(self.notify_fd)  # the broker learns it now, not at its next wake-up
            return flushed
        self._observe(time.perf_counter_ns() - t0)
        # close descriptors of segments wholly behind us
        for b in [b for b in self.fds if b + self.seg <= target - target % self.seg]:
            os.close(self.fds.pop(b))
        # The checkpoint is written through its map first (a kill -9 cannot lose that) but made
        # durable at most once per CKPT_SYNC_INTERVAL, after the producers waiting for this flush
        # are released: a second sync per group commit would double SYNC_FLUSH's latency
        # (RocketMQ too syncs the checkpoint on its own timer). After a power loss it may lag the
        # log by that much, which only makes recovery scan and CRC-check a little more.
        self.ckpt.set(flushedOffset=target, physicMsgTimestamp=int(time.time() * 1000))
        self.table.store(Slot.FLUSHED, target)
        notify(self.notify_fd)
        now = time.monotonic()
        if now - self._ckpt_synced >= CKPT_SYNC_INTERVAL:
            self.ckpt.flush()
            self._ckpt_synced = now
        return target

    def run(self) -> None:
        t = self.table
        if t.load(Slot.FLUSH_ERRORS):
            self.failed = True  # an earlier incarnation of this service saw fdatasync fail
        sync = self.config.flushDiskType == SYNC_FLUSH
        interval = self.config.flushIntervalCommitLog / 1000
        thorough = self.config.flushCommitLogThoroughInterval / 1000
        least = self.config.flushCommitLogLeastPages

        def main_loop() -> None:
            # Everything from here on runs under run_service: a SIGTERM landing while we sync a
            # backlog still ends in final()'s flush, never in a traceback that skips it.
            t.store(Slot.FLUSH_PID, os.getpid())
            notify(self.notify_fd)  # ready: the broker may now stop us with SIGTERM
            # Whatever a predecessor published was synced; from there on, sync once at start.
            flushed = self.flush_to(t.load(Slot.FLUSHED), t.load(Slot.WROTE))
            last_thorough = time.monotonic()
            while not t.load(Slot.SHUTDOWN):
                if sync:
                    wrote = t.wait_until_ge(Slot.WROTE, flushed + 1, -1)
                    flushed = self.flush_to(flushed, wrote)
                    continue
                if interval > 0:
                    t.wait_change(Slot.SHUTDOWN, 0, interval)  # RocketMQ's timed flush; wakes at once on shutdown
                else:
                    # flushIntervalCommitLog <= 0: no pause, so flush as soon as `least` pages are
                    # dirty, woken by the writer rather than spinning as RocketMQ's loop does
                    if t.load(Slot.WROTE) <= flushed:
                        t.wait_until_ge(Slot.WROTE, flushed + 1, -1)
                    else:
                        t.wait_until_ge(Slot.WROTE, (flushed // PAGE + max(least, 1)) * PAGE,
                                        max(thorough - (time.monotonic() - last_thorough), 0.001))
                wrote = t.load(Slot.WROTE)
                now = time.monotonic()
                if now - last_thorough >= thorough:
                    flushed = self.flush_to(flushed, wrote)
                    last_thorough = now
                elif wrote // PAGE - flushed // PAGE >= least:
                    flushed = self.flush_to(flushed, wrote)

        def final() -> None:
            # Everything written gets flushed before we go (RocketMQ retries this on shutdown too).
            self.flush_to(t.load(Slot.FLUSHED), t.load(Slot.WROTE))
            self.ckpt.flush()
            t.store(Slot.FLUSH_PID, 0)
            notify(self.notify_fd)
            log.info("flush service stopped at %d", t.load(Slot.FLUSHED))

        run_service(main_loop, final)


def main() -> None:
    args, config = enter_service("flush")
    FlushService(config, args.notify_fd).run()


if __name__ == "__main__":
    main()
