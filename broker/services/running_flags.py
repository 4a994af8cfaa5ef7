"""Whether the store takes writes (RocketMQ's RunningFlags): the cleaner's DISK_FULL and the
reput's DISPATCH_BLOCKED, read from the offset table at every wake-up, each change logged once."""
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
        return None
