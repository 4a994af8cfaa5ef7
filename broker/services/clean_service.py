"""The cleaner as its own process (RocketMQ's CleanCommitLogService + CleanConsumeQueueService).

Every cleanResourceInterval, or at once when `broker admin clean` bumps Slot.MANUAL_CLEAN, it asks
CleanPolicy whether to delete, publishes the disk usage and the DISK_FULL flag the broker refuses
writes on, and deletes commit-log segments oldest first: never the one being written, never one
not yet flushed and dispatched, stopping at the first that is not expired, at most
deleteFileBatchMax per pass with deleteCommitLogFilesInterval between files. Then consume-queue
and index files wholly below the new minimum go too, and MIN_OFFSET moves in the offset table.

Deletion is unlink(2): a process still mapping a segment (a pull being sent, an HA transfer from
an open descriptor) keeps reading valid pages until it lets go, so no reader ever faults on a
vanished map or reads torn data; each process drops its maps below MIN_OFFSET when it sees it move.
"""
from __future__ import annotations

import logging
import os
import re

from broker.services.process import enter_service, notify, run_service
from broker.store.clean_policy import CleanPolicy, filesystem_usage
from broker.store.consume_queue import CQ_UNIT
from broker.store.durable import fsync_dir
from broker.store.index_service import delete_expired
from broker.store.offset_table import Slot, open_table

log = logging.getLogger("clean")
_NAME = re.compile(r"^\d{20}$")
MANUAL_ROUNDS = 20  # RocketMQ's MAX_MANUAL_DELETE_FILE_TIMES: a manual request lasts 20 passes


class CleanService:
    def __init__(self, config, notify_fd: int, policy: CleanPolicy | None = None, table=None):
        self.config = config
        self.table = table if table is not None else open_table(config.storePathRootDir)
        self.notify_fd = notify_fd
        self.policy = policy or CleanPolicy(config, lambda: filesystem_usage(config.storePathRootDir))
        self.manual_rounds = 0
        self.seen_manual = self.table.load(Slot.MANUAL_CLEAN)
        self.kept_for_compaction = -1  # the COMPACTION_NEED last logged as holding a segment back

    def _pause(self, ms: int) -> None:
        if ms > 0:
            self.table.wait_change(Slot.SHUTDOWN, 0, ms / 1000)  # a shutdown cuts the pause short

    def pass_once(self) -> list[int]:
        """One pass; returns the base offsets of the commit-log segments it deleted."""
        t = self.table
        manual = t.load(Slot.MANUAL_CLEAN)
        if manual != self.seen_manual:
            self.seen_manual = manual
            self.manual_rounds = MANUAL_ROUNDS
            log.info("manual clean requested: expired files go at once for the next %d passes", MANUAL_ROUNDS)
        d = self.policy.decide(self.manual_rounds > 0)
        t.store(Slot.DISK_USAGE, int(d.usage * 1_000_000))
        if d.disk_full != bool(t.load(Slot.DISK_FULL)):
            t.store(Slot.DISK_FULL, int(d.disk_full))
            if d.disk_full:
                log.error("disk usage %.1f%% is above diskSpaceWarningLevelRatio %g%%: the broker refuses writes",
                          100 * d.usage, self.config.diskSpaceWarningLevelRatio)
            else:
                log.warning("disk usage %.1f%% is back under diskSpaceWarningLevelRatio: writes accepted again",
                            100 * d.usage)
            notify(self.notify_fd)
        if not d.delete:
            return []
        if self.manual_rounds:
            self.manual_rounds -= 1
        deleted = self.delete_commit_log(d.forcibly, d.reason)
        if deleted:
            self.delete_consume_queues(t.load(Slot.MIN_OFFSET))
            self.delete_index_files(t.load(Slot.MIN_OFFSET))
        return deleted

    def delete_commit_log(self, forcibly: bool, reason: str) -> list[int]:
        cfg, t = self.config, self.table
        directory = cfg.commitlog_dir
        names = sorted(n for n in os.listdir(directory) if _NAME.match(n))
        seg = cfg.mappedFileSizeCommitLog
        # Never what the flush or the reput still needs (nor, through them, the segment being written).
        safe_end = min(t.load(Slot.FLUSHED), t.load(Slot.DISPATCHED))
        # nor, unless forced (the disk is full), a compacted topic's records not yet in its view
        need = t.load(Slot.COMPACTION_NEED) - 1
        deleted: list[int] = []
        for name in names[:-1]:
            base = int(name)
            path = os.path.join(directory, name)
            if base + seg > safe_end:
                break
            if 0 <= need < base + seg:
                if not forcibly:
                    if need != self.kept_for_compaction:  # said once per position, not every pass
                        self.kept_for_compaction = need
                        log.info("commit-log segment %s kept: compacted topics' records from offset %d are not in "
                                 "their compacted views yet", name, need)
                    break
                log.warning("deleting commit-log segment %s (%s) though compacted topics' records from offset %d "
                            "are not in their compacted views yet: those are lost", name, reason, need)
            try:
                mtime = os.stat(path).st_mtime
            except FileNotFoundError:
                continue
            if not self.policy.expired(mtime, forcibly):
                break
            os.unlink(path)
            deleted.append(base)
            t.add(Slot.DELETED_FILES, 1)
            log.info("deleted commit-log segment %s (%s)", name, reason)
            if len(deleted) >= cfg.deleteFileBatchMax:
                break
            self._pause(cfg.deleteCommitLogFilesInterval)
        if deleted:
            fsync_dir(directory)
            left = sorted(n for n in os.listdir(directory) if _NAME.match(n))
            t.store(Slot.MIN_OFFSET, int(left[0]) if left else deleted[-1] + seg)
            notify(self.notify_fd)  # the broker drops its maps and corrects queue minimums
        return deleted

    def delete_consume_queues(self, min_offset: int) -> int:
        """Consume-queue files whose last entry points below the commit log's minimum."""
        root = self.config.consumequeue_dir
        count = 0
        for topic in sorted(os.listdir(root)):
            try:
                qids = sorted(os.listdir(os.path.join(root, topic)))
            except (FileNotFoundError, NotADirectoryError):  # deleted meanwhile (deleteTopic)
                continue
            for qid in qids:
                qdir = os.path.join(root, topic, qid)
                try:
                    names = sorted(n for n in os.listdir(qdir) if _NAME.match(n))
                except FileNotFoundError:
                    continue
                dropped = False
                for name in names[:-1]:  # the last file is the one the reput writes
                    path = os.path.join(qdir, name)
                    with open(path, "rb") as f:
                        f.seek(-CQ_UNIT, os.SEEK_END)
                        last = f.read(CQ_UNIT)
                    phys, size = int.from_bytes(last[:8], "big"), int.from_bytes(last[8:12], "big")
                    if size == 0 or phys + size > min_offset:
                        break
                    os.unlink(path)
                    dropped = True
                    count += 1
                if dropped:
                    fsync_dir(qdir)
                    log.info("deleted consume-queue files of %s/%s below commit-log offset %d", topic, qid, min_offset)
                    self._pause(self.config.deleteConsumeQueueFilesInterval)
        return count

    def delete_index_files(self, min_offset: int) -> list[str]:
        """Index files whose every entry points below the commit log's minimum (never the last)."""
        gone = delete_expired(self.config, min_offset)
        if gone:
            log.info("deleted index files %s below commit-log offset %d", ", ".join(gone), min_offset)
        return gone

    def run(self) -> None:
        t = self.table
        interval = self.config.cleanResourceInterval / 1000

        def main_loop() -> None:
            self.pass_once()  # before ready: the broker starts knowing whether the disk is full
            t.store(Slot.CLEAN_PID, os.getpid())
            notify(self.notify_fd)
            while not t.load(Slot.SHUTDOWN):
                t.wait_change(Slot.MANUAL_CLEAN, self.seen_manual, interval)  # `broker admin clean` wakes us
                self.pass_once()

        def final() -> None:
            t.store(Slot.CLEAN_PID, 0)
            notify(self.notify_fd)
            log.info("cleaner stopped")

        run_service(main_loop, final)


def main() -> None:
    args, config = enter_service("clean")
    CleanService(config, args.notify_fd).run()


if __name__ == "__main__":
    main()
