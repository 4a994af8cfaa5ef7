"""Whether the store takes writes (RocketMQ's RunningFlags): the cleaner's DISK_FULL, the reput's
DISPATCH_BLOCKED and the flush service's FLUSH_ERRORS, read from the offset table at every
wake-up, each change logged once.

A failed fdatasync stops writes for the rest of the broker's life. After one, the kernel may have
marked the dirty pages clean and dropped them (PostgreSQL's "fsyncgate", 2018), so a later
fdatasync that succeeds proves nothing about the bytes the failed one covered: nothing appended
from then on could be acknowledged as durable either. RocketMQ logs the failure and goes on
taking writes; here the broker refuses them until it is restarted, and the restart recovers from
what is on disk, checking each record's CRC past the last successful flush."""
from __future__ import annotations

import logging
import os

from broker.store.offset_table import Slot

log = logging.getLogger("store")


class RunningFlags:
    def __init__(self, table, config):
        self.table = table
        self.config = config
        self.disk_full = 0  # DISK_FULL as last seen
        self.dispatch_blocked = 0  # DISPATCH_BLOCKED as last seen: the errno the reput is stuck on
        self.flush_failed = 0  # FLUSH_ERRORS as last seen: failed fdatasync calls of the commit log

    def on_wake(self) -> None:
        t = self.table
        full = t.load(Slot.DISK_FULL)
        if full != self.disk_full:
            self.disk_full = full
            log.log(logging.ERROR if full else logging.WARNING, "%s", "disk full: refusing writes" if full
                    else "disk usage back under diskSpaceWarningLevelRatio: accepting writes")
        blocked = t.load(Slot.DISPATCH_BLOCKED)
        if blocked != self.dispatch_blocked:
            self.dispatch_blocked = blocked
            if blocked:
                log.error("consume queues cannot be written (%s): refusing writes", os.strerror(blocked))
            else:
                log.warning("consume queues are written again: accepting writes")
        failed = t.load(Slot.FLUSH_ERRORS)
        if failed and not self.flush_failed:
            log.error("the commit log's fdatasync failed: refusing writes until the broker is restarted "
                      "(it then recovers from what is on disk; nothing the failed sync covered was acknowledged "
                      "as flushed)")
        self.flush_failed = failed

    def why_not_writable(self) -> tuple[str, str] | None:
        """(a short reason for the log, the message for the client), or None when writable."""
        if self.disk_full:
            return "disk full", (f"disk full: usage {self.table.load(Slot.DISK_USAGE) / 10_000:.1f}% is above "
                                 f"diskSpaceWarningLevelRatio {self.config.diskSpaceWarningLevelRatio:g}%; writes are "
                                 f"refused until expired files are deleted")
        if self.dispatch_blocked:
            # RocketMQ's logicsQueueError: messages appended now would not reach their queues
            return "consume queues cannot be written", (
                f"consume queues cannot be written ({os.strerror(self.dispatch_blocked)}); writes are refused "
                f"until they can")
        if self.flush_failed:
            return "the commit log's fdatasync failed", (
                "the commit log's fdatasync failed: this broker refuses writes until it is restarted and has "
                "recovered from what is on disk")
        return None
