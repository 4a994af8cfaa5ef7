"""EpochFile: the epochs a controller-mode commit log was written in (RocketMQ 5's EpochFileCache
over `{storePathRootDir}/epochFileCheckpoint`).

Each entry is (epoch, startOffset): from startOffset on, the log was written by the master of
that epoch, up to the next entry's startOffset (the last entry: up to the log's end). A master
appends <its epoch, its log end> before it takes its first write; a slave holds its master's
entries. Two members' logs are equal up to where their epochs agree, which is how a returning
broker finds where its log diverged from the new master's (`truncation_point`).

The file is RocketMQ's text format (CheckpointFile): the number of entries, the CRC32 of the
entry lines (masked to 31 bits, as UtilAll.crc32), then one `epoch-startOffset` line per entry.
It is replaced atomically and fsynced: an entry is durable before the write it announces.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

from broker.store import paths
from broker.store.durable import fsync_dir
from broker.store.errors import CorruptStoreError


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    startOffset: int


class EpochFile:
    def __init__(self, root: str):
        self.path = paths.epoch_file(root)
        self.entries: list[EpochEntry] = []

    def load(self) -> "EpochFile":
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            self.entries = []
            return self
        self.entries = parse(text, self.path)
        return self

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def end_of(self, i: int, log_end: int) -> int:
        """Where entry i's range ends in a log ending at `log_end`."""
        nxt = self.entries[i + 1].startOffset if i + 1 < len(self.entries) else log_end
        return min(nxt, log_end)

    def replace(self, entries: list[EpochEntry]) -> None:
        check_order(entries, self.path)
        self.entries = list(entries)
        self._write()

    def append(self, epoch: int, start: int, log_end: int) -> None:
        """A master of `epoch` takes over a log ending at `log_end`: entries past the end (a
        slave's copy of its master's entries it never received the data of) go, then
        <epoch, start> is written, durably. A master restarted in the epoch it already led (back
        before the controller replaced it) continues that epoch's range: nothing changes."""
        if self.entries and self.entries[-1].epoch == epoch and self.entries[-1].startOffset <= log_end:
            return
        kept = [e for e in self.entries if e.startOffset <= log_end and e.epoch < epoch]
        # an epoch whose range is empty says nothing: the new one starts where it started
        while kept and kept[-1].startOffset >= start:
            kept.pop()
        self.replace(kept + [EpochEntry(epoch, start)])

    def _write(self) -> None:
        lines = "".join(f"{e.epoch}-{e.startOffset}\n" for e in self.entries)
        crc = zlib.crc32(lines.encode()) & 0x7FFFFFFF
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"{len(self.entries)}\n{crc}\n{lines}")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(os.path.dirname(self.path) or ".")

    def as_json(self, log_end: int) -> list[dict]:
        """RocketMQ's EpochEntry list (GET_BROKER_EPOCH_CACHE): each with its endOffset."""
        return [{"epoch": e.epoch, "startOffset": e.startOffset, "endOffset": self.end_of(i, log_end)}
                for i, e in enumerate(self.entries)]


def parse(text: str, where: str) -> list[EpochEntry]:
    lines = text.splitlines()
    try:
        count, crc = int(lines[0]), int(lines[1])
        body = lines[2:2 + count]
        entries = [EpochEntry(*(int(x) for x in line.split("-", 1))) for line in body]
    except (IndexError, ValueError) as e:
        raise CorruptStoreError(where, 0, f"not an epoch file (count, crc, epoch-startOffset lines): {e}") from None
    if len(entries) != count:
        raise CorruptStoreError(where, 0, f"says {count} entries but holds {len(entries)}")
    actual = zlib.crc32("".join(f"{line}\n" for line in body).encode()) & 0x7FFFFFFF
    if actual != crc:
        raise CorruptStoreError(where, 0, f"CRC32 {actual} of the entries is not the recorded {crc}")
    check_order(entries, where)
    return entries


def check_order(entries: list[EpochEntry], where: str) -> None:
    for a, b in zip(entries, entries[1:]):
        if not (a.epoch < b.epoch and a.startOffset <= b.startOffset):
            raise CorruptStoreError(where, b.startOffset, f"epoch entries out of order: {a} then {b}")


def truncation_point(local: list[EpochEntry], local_end: int, master: list[EpochEntry], master_end: int) -> int | None:
    """Where a log with `local` epochs (ending at local_end) must be cut to continue the master's
    log (RocketMQ's AutoSwitchHAClient.doTruncate / EpochFileCache.findConsistentPoint): the
    newest local epoch the master also has with the same start is where both were written by
    the same master; they agree up to the end of that epoch's range in the shorter of the two.
    None: no epoch in common (the logs agree on nothing).

    What a log holds before its first entry was written before controller mode (a master/slave
    pair upgraded, or an empty log): it counts as epoch 0 from offset 0 on both sides."""
    if local_end == 0:
        return 0
    local, master = _with_epoch_zero(local), _with_epoch_zero(master)
    by_epoch = {e.epoch: (i, e) for i, e in enumerate(master)}
    for i in range(len(local) - 1, -1, -1):
        e = local[i]
        m = by_epoch.get(e.epoch)
        if m is None or m[1].startOffset != e.startOffset:
            continue
        j = m[0]
        local_stop = min(local[i + 1].startOffset if i + 1 < len(local) else local_end, local_end)
        master_stop = min(master[j + 1].startOffset if j + 1 < len(master) else master_end, master_end)
        return min(local_stop, master_stop)
    return None


def _with_epoch_zero(entries: list[EpochEntry]) -> list[EpochEntry]:
    if entries and entries[0].startOffset == 0:
        return entries
    return [EpochEntry(0, 0)] + [e for e in entries if e.epoch > 0]
