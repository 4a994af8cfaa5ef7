"""The reput service of DLedger mode (its own process, as the ordinary one): consume queues from
the committed entries of the DLedger data files, after the records of the commit log written
before DLedger mode, if the store has one (below the divided offset: broker.raft.divided_commit_log),
which go through the ordinary scan first, so queue offsets continue across the divide.

The broker publishes DLedger's committed position (where the last committed entry ends) in the
offset table's WROTE slot, on the leader and on followers alike, so this process never sees an
entry a majority does not hold. It walks the entries from DISPATCHED: a blank (magic -1) closes
a file, an entry with an empty body (the no-op a new leader appends) is stepped over, and the
RocketMQ record of any other entry (its body, at pos + 48) goes through the ordinary scan kernel
and dispatcher, so consume-queue entries point at pos + 48 and carry the queue offset the leader
wrote into the record.

The scan kernel walks the entries itself (Scanner.scan_entries: each record must fill its
entry's body exactly) and the dispatcher takes a whole run of them per call: one call per entry
from Python cost ~4.5 CPU-us per message on every member (the three members' reputs were a quarter
of the group's CPU under 1 KiB sends).
"""
from __future__ import annotations

import logging

from broker.kernels.codec import SCAN_BLANK, SCAN_END, SCAN_ZERO
from broker.raft.divided_commit_log import load_old
from broker.services.process import enter_service, notify
from broker.services.reput_service import ReputService
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.offset_table import Slot

log = logging.getLogger("reput")


class DLedgerReputService(ReputService):
    def __init__(self, config, notify_fd: int):
        super().__init__(config, notify_fd)
        self.log = MappedFileQueue(config.dledger_data_dir, config.mappedFileSizeCommitLog, writable=False)
        # the commit log written before DLedger mode (the broker sealed it before starting us)
        self.old = load_old(config)
        self.old_end = self.old.files[-1].end if self.old is not None else 0

    def _segment(self, offset: int):
        mf = self._segment_of(self.log, offset)
        if mf is None or not mf.base <= offset < mf.end:
            self._remap()
            mf = self.log.find(offset)
        return mf

    def _remap(self) -> None:
        """Map the data files again from the directory: files are only ever added at the end,
        except when an empty log takes the leader's position for entry 0, which replaces them
        all (DLedgerEntryStore.take_first_pos), leaving this process with maps of deleted files."""
        self.log.close()
        self.log.load()

    def _stop(self, at: int, why: str) -> int:
        # The broker publishes only positions right after committed entries: anything else here
        # is a bug or corruption under a live store. Say where, and wait for the next wake.
        log.error("[BUG] DLedger reput stopped at data position %d: %s", at, why)
        self.table.store(Slot.DISPATCHED, at)
        return at

    def reput(self, dispatched: int, wrote: int) -> int:
        """Dispatch the entries in [dispatched, wrote); returns the new dispatched position."""
        t = self.table
        scanner = self.scanner
        if dispatched < self.old_end:  # the old commit log first, with the ordinary scan
            dispatched = self.scan_log(self.old, dispatched, min(wrote, self.old_end))
            if dispatched < self.old_end:
                return dispatched
        if self.old is not None and self.old.files:
            # read once per start: let go of the maps, so the cleaner's deletion of the old
            # segments frees their space while this process runs
            self.old.close()
        while dispatched < wrote:
            if dispatched < self.log.min_offset:
                dispatched = self.log.min_offset
            mf = self._segment(dispatched)
            if mf is None:
                log.error("no DLedger data file holds position %d (committed %d)", dispatched, wrote)
                return dispatched
            end = min(wrote, mf.end) - mf.base
            count, nxt, status = scanner.scan_entries(mf.buf, dispatched - mf.base, end, mf.base, False)
            if count:
                self.dispatcher.dispatch(scanner, count, mf.buf, mf.base)
            dispatched = mf.base + nxt
            if status == SCAN_BLANK:
                dispatched = mf.end
            elif status == SCAN_ZERO and dispatched == self.log.min_offset:
                # nothing where the data files start, below a committed entry: they were started
                # again at the leader's position for entry 0 (see _remap)
                self._remap()
                if self.log.min_offset <= dispatched:
                    return self._stop(dispatched, "zeros where the data files start")
                dispatched = self.log.min_offset
            elif status != SCAN_END:
                return self._stop(dispatched, f"scan status {status} {scanner.reason}")
            t.store(Slot.DISPATCHED, dispatched)
        self.last_store_ts = self.dispatcher.last_store_ts
        t.store(Slot.DISPATCHED, dispatched)
        if t.load(Slot.WANT_DISPATCH):
            notify(self.notify_fd)
        return dispatched


def main() -> None:
    args, config = enter_service("reput")
    DLedgerReputService(config, args.notify_fd).run()


if __name__ == "__main__":
    main()
