"""The queue-read kernel equals its twin (hypothesis): random consume-queue entries (records back
to back or not, in two segments or none, sizes past a segment's end or zero, tag codes), random
limits and filters; the same views byte for byte, counts, next index, status."""
from __future__ import annotations

import os
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels.queue_read import Collected, collect
from tests.twins import queue_read_twin as T

SEG = 4096


class Segment:
    def __init__(self, base: int):
        self.base = base
        self.mv = memoryview(os.urandom(SEG))


entry = st.tuples(st.integers(0, 3 * SEG), st.integers(-1, 900), st.sampled_from([0, 7, 9]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(entry | st.just(None), min_size=1, max_size=60), st.integers(1, 40), st.integers(1, 8000),
       st.sampled_from([None, {7}, {0, 9}]), st.booleans(), st.integers(0, 5))
def test_collect_same_as_the_twin(entries, max_msgs, max_bytes, tags, merge, first_index):
    segments = [Segment(SEG), Segment(2 * SEG)]  # [4096, 12288): no segment below or above
    cq = bytearray()
    phys = SEG
    for e in entries:
        if e is None:  # back to back with the previous record
            e = (phys, 100, 7)
        cq += struct.pack(">qiq", *e)
        phys = e[0] + max(e[1], 0)
    n = len(entries)
    start = first_index + n // 3
    k, t = Collected(start, not merge, merge), T.Collected(start, not merge, merge)
    sk = collect(k, bytes(cq), first_index, start, first_index + n, segments, SEG, max_msgs, max_bytes, tags)
    st_ = T.collect(t, bytes(cq), first_index, start, first_index + n, segments, SEG, max_msgs, max_bytes, tags)
    k.finish()
    assert sk == st_
    assert [bytes(v) for v in k.views] == t.views()
    assert (k.count, k.total, k.next_index, k.last_phys, k.queue_offsets) == \
        (t.count, t.total, t.next_index, t.last_phys, t.queue_offsets)
