"""Pure-Python twin of broker.kernels.cq_dispatch (tests only), written from docs/formats.md §2:
each dispatched record's consume-queue entry is 20 big-endian bytes (commit-log offset int64,
size int32, tag code int64) at byte (queue offset - the file's first offset) * 20 of the file
registered for its queue. A pass stops at the first record whose queue has no registered file
holding its offset."""
from __future__ import annotations

import struct

CQ_UNIT = 20
_ENTRY = struct.Struct(">qiq")


class CqDispatcher:
    def __init__(self):
        self.files: dict[int, tuple[bytearray, int, int]] = {}  # key -> (file, first, count)
        self.missing_key = self.missing_offset = -1
        self.last_store_ts = 0

    def register(self, key: int, buf: bytearray, first: int, count: int) -> None:
        if key < 0 or first < 0 or count <= 0 or count * CQ_UNIT > len(buf):
            raise ValueError("bad registration")
        self.files[key] = (buf, first, count)

    def dispatch(self, entries, start: int, end: int) -> int:
        """entries: rows with topic_idx, queue_id, queue_offset, phys_offset, size, tag_hash, store_ts."""
        for i in range(start, end):
            e = entries[i]
            key = (int(e["topic_idx"]) << 32) | (int(e["queue_id"]) & 0xFFFFFFFF)
            f = self.files.get(key)
            rel = int(e["queue_offset"]) - f[1] if f is not None else -1
            if f is None or not 0 <= rel < f[2]:
                self.missing_key, self.missing_offset = key, int(e["queue_offset"])
                return i
            _ENTRY.pack_into(f[0], rel * CQ_UNIT, int(e["phys_offset"]), int(e["size"]), int(e["tag_hash"]))
            self.last_store_ts = int(e["store_ts"])
        self.missing_key = self.missing_offset = -1
        return end
