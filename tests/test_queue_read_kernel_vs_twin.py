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


PROGRAMS = ["a > 5", "a IS NULL OR b = 'x'", "TAGS = 't' AND NOT (a BETWEEN 1 AND 3)", "TRUE"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["1", "7", "x", "2.5", None]), st.sampled_from(["x", "y", None]),
                          st.integers(0, 60)), min_size=1, max_size=12),
       st.lists(st.tuples(st.integers(0, 11), st.integers(-200, 50)), min_size=1, max_size=30),
       st.sampled_from(PROGRAMS), st.integers(1, 40), st.integers(1, 8000), st.booleans(), st.integers(0, 8191))
def test_collect_with_sql_same_as_the_twin(records, picks, expr, max_msgs, max_bytes, merge, noise):
    """Records with properties in a segment (and bytes that are no record): the SQL92 filter reads
    each one's properties in place, as the twin does; an entry into garbage or past a record's
    end (a wrong size) must neither crash nor be read past its segment."""
    from broker.server.filter.sql92 import compile_sql92
    from tests.twins import codec_twin as C
    host = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
    seg = bytearray(os.urandom(SEG))
    at, starts = 0, []
    for a, b, body_len in records:
        props = "".join(f"{k}\x01{v}\x02" for k, v in (("a", a), ("b", b), ("TAGS", "t")) if v is not None).encode()
        n = C.record_length(body_len, 5, len(props))
        if at + n > SEG:
            break
        rec = bytearray(n)
        C.encode_record(rec, 0, SEG + at, len(starts), 0, b"Topic", 0, b"z" * body_len, props, 0, 0, 0, host, host, 0, 0)
        seg[at:at + n] = rec
        starts.append((at, n))
        at += n
    segment = Segment(SEG)
    segment.mv = memoryview(bytes(seg))
    cq = bytearray()
    for which, delta in picks:
        if which < len(starts):
            pos, n = starts[which]
            cq += struct.pack(">qiq", SEG + pos, max(1, n + delta), 7)  # a size off by delta: past or short of the record
        else:
            cq += struct.pack(">qiq", SEG + noise % SEG, 1 + noise % 300, 7)
    prog = compile_sql92(expr)
    n = len(picks)
    k, t = Collected(0, not merge, merge), T.Collected(0, not merge, merge)
    sk = collect(k, bytes(cq), 0, 0, n, [segment], SEG, max_msgs, max_bytes, None, prog)
    st_ = T.collect(t, bytes(cq), 0, 0, n, [segment], SEG, max_msgs, max_bytes, None, prog)
    k.finish()
    assert sk == st_
    assert [bytes(v) for v in k.views] == t.views()
    assert (k.count, k.total, k.next_index, k.last_phys, k.queue_offsets) == \
        (t.count, t.total, t.next_index, t.last_phys, t.queue_offsets)
