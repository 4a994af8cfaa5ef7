"""The cleaner of DLedger mode (its own process, as the ordinary one): RocketMQ's DLedgerCommitLog
hands its store config to DLedger, whose CleanSpaceService deletes expired data files; here the
ordinary CleanService's policy, disk-usage reports (DISK_USAGE, DISK_FULL: the broker refuses
writes on a full disk in this mode too) and manual clean run unchanged, and only what a pass
deletes differs. Oldest first:

1. the segments of the commit log written before DLedger mode (below the divided offset: they
   are the oldest records), by fileReservedTime as the ordinary cleaner reads it;
2. then DLedger data files, kept fileReservedTime + 1 hours (RocketMQ passes fileReservedHours =
   fileReservedTime + 1 to DLedger; so fileReservedTime=-1 expires them at once, as 0 does the
   ordinary segments), by mtime as DLedger does.

Made safe where DLedger is not: never the last data file, and never a file not wholly below
min(FLUSHED (where the entry data is on disk), DISPATCHED (the reput), WROTE (the committed
position), FOLLOWERS_NEED). FOLLOWERS_NEED is the broker's: on the leader the position of the
lowest follower's match entry (the entry a COMPARE asks it for first), on a follower its committed
position; so a live follower that lags is never left behind the leader's begin. A forcible clean
(disk above diskSpaceCleanForciblyRatio with cleanFileForciblyEnable, DLedger's
isNeedForceClean) ignores that pin: a dead follower must not fill the leader's disk; a follower
left behind is then told by the leader's dispatcher (entry_pusher) to be rebuilt.

Then consume-queue files below the new minimum go, MIN_OFFSET moves, and the broker is woken: it
drops its maps, moves its log's begin index to the first remaining file's first entry and
deletes the index files below it (DLedgerEntryStore.drop_before); the reput drops its maps.
"""
from __future__ import annotations

import logging
import os
import re

from broker.services.clean_service import CleanService
from broker.services.process import enter_service, notify
from broker.store.durable import fsync_dir
from broker.store.offset_table import Slot

log = logging.getLogger("clean")
_NAME = re.compile(r"^\d{20}$")


def _names(directory: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(directory) if _NAME.match(n))
    except FileNotFoundError:
        return []


class DLedgerCleanService(CleanService):
    def safe_end(self, forcibly: bool) -> int:
        t = self.table
        end = min(t.load(Slot.FLUSHED), t.load(Slot.DISPATCHED), t.load(Slot.WROTE))
        return end if forcibly else min(end, t.load(Slot.FOLLOWERS_NEED))

    def delete_commit_log(self, forcibly: bool, reason: str) -> list[int]:
        cfg, t = self.config, self.table
        seg = cfg.mappedFileSizeCommitLog
        safe_end = self.safe_end(forcibly)
        deleted: list[int] = []
        old_dir, data_dir = cfg.commitlog_dir, cfg.dledger_data_dir
        old = _names(old_dir)
        data = _names(data_dir)
        # the old segments all lie below the first data file; every one of them may go
        plan = [(old_dir, n, None) for n in old]
        plan += [(data_dir, n, cfg.fileReservedTime + 1) for n in data[:-1]]  # never the last data file
        touched = set()
        for directory, name, hours in plan:
            base = int(name)
            if base + seg > safe_end:
                break
            path = os.path.join(directory, name)
            try:
                mtime = os.stat(path).st_mtime
            except FileNotFoundError:
                continue
            if not self.policy.expired(mtime, forcibly, hours):
                break
            os.unlink(path)
            touched.add(directory)
            deleted.append(base)
            t.add(Slot.DELETED_FILES, 1)
            log.info("deleted %s %s (%s)", "DLedger data file" if hours is not None else "old commit-log segment",
                     name, reason)
            if len(deleted) >= cfg.deleteFileBatchMax:
                break
            self._pause(cfg.deleteCommitLogFilesInterval)
        if deleted:
            for directory in touched:
                fsync_dir(directory)
            left = _names(old_dir) or _names(data_dir)
            t.store(Slot.MIN_OFFSET, int(left[0]) if left else deleted[-1] + seg)
            notify(self.notify_fd)  # the broker drops its maps and moves its log's begin
        return deleted


def main() -> None:
    args, config = enter_service("clean")
    DLedgerCleanService(config, args.notify_fd).run()


if __name__ == "__main__":
    main()
