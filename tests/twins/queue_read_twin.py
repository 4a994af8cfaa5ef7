"""Pure-Python twin of broker.kernels.queue_read (tests only), written from docs/formats.md §2 and
RocketMQ's getMessage rules: entries in order; one whose tag code is not wanted is skipped; a record
that would take the bytes past max_bytes stops the read unless it is the first; one that lies in
no mapped segment (or runs past its segment's end, or has no size) stops it too; max_msgs records
stop it. Views are of whole records, one per record, or with merge one per run of records back to
back in one segment. With an SQL92 program, a record whose stored properties do not match it is
skipped, once it is known to lie in a segment."""
from __future__ import annotations

import struct

from tests.twins import sql92_twin

END, FULL, NO_SEGMENT = 0, 1, 2
_ENTRY = struct.Struct(">qiq")


class Collected:
    def __init__(self, start_index: int, with_offsets: bool = False, merge: bool = False):
        self.spans: list[tuple[object, int, int]] = []  # (segment, start, end)
        self.queue_offsets = [] if with_offsets else None
        self.count = self.total = 0
        self.next_index = start_index
        self.last_phys = -1
        self.merge = merge

    def views(self) -> list[bytes]:
        return [bytes(seg.mv[a - seg.base:b - seg.base]) for seg, a, b in self.spans]


def collect(c: Collected, cq: bytes, first_index: int, start: int, stop: int, segments: list, segment_size: int,
            max_msgs: int, max_bytes: int, tags=None, sql=None) -> int:
    if sql is not None:
        sql92_twin.validate(bytes(sql))
    for i in range(start, stop):
        phys, size, tag = _ENTRY.unpack_from(cq, (i - first_index) * 20)
        if tags is not None and tag not in tags:
            c.next_index = i + 1
            continue
        if c.count and c.total + size > max_bytes:
            return FULL
        seg = next((s for s in segments if s.base <= phys < s.base + segment_size), None)
        if seg is None or size <= 0 or phys + size > seg.base + segment_size:
            return NO_SEGMENT
        if sql is not None and not sql92_twin.record_matches(sql, bytes(seg.mv[phys - seg.base:phys - seg.base + size])):
            c.next_index = i + 1
            continue
        if c.merge and c.spans and c.spans[-1][0] is seg and c.spans[-1][2] == phys:
            c.spans[-1] = (seg, c.spans[-1][1], phys + size)
        else:
            c.spans.append((seg, phys, phys + size))
        if c.queue_offsets is not None:
            c.queue_offsets.append(i)
        c.count += 1
        c.total += size
        c.last_phys = phys
        c.next_index = i + 1
        if c.count >= max_msgs:
            return FULL
    return END
