# cython: language_level=3
"""The read side's inner loop: a queue's messages as zero-copy views of the mapped commit log.

`collect` walks consume-queue entries (20 bytes each: commit-log offset int64, size int32, tag
code int64; big-endian, docs/formats.md §2) of one mapped consume-queue file, applies the tag
filter, stops at the message count and byte limits as RocketMQ's getMessage does, finds each
record's segment, and appends memoryviews of the records to the caller's list, one view for
records that lie back to back in one segment (a producer sending to one queue writes them so),
so the transport's writev gets as few pieces as the data allows (when asked to merge; otherwise
one view per record). No Python object is made per
record; every entry is checked against its segment's bounds before a view of it is taken.
"""
cimport cython
from buffers cimport Borrowed, borrow, give_back
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

from record cimport CQ_UNIT
from bytesex cimport get_be32, get_be64
from sql92_eval cimport record_properties, sql_matches, sql_valid


# why a collect stopped (Python decides what follows)
COLLECT_END = 0        # reached `stop` (the entries given, or the queue's end)
COLLECT_FULL = 1       # the message count or byte limit
COLLECT_NO_SEGMENT = 2 # an entry points into a segment this process has not mapped (a slave: refresh)


@cython.final
cdef class Collected:
    """What collect gathered so far over one request (it may be called once per consume-queue file)."""
    cdef public list views            # memoryviews of the records, back-to-back ones merged
    cdef public list queue_offsets    # each record's queue offset, when asked for
    cdef public int64_t count         # records
    cdef public int64_t total         # bytes
    cdef public int64_t next_index    # the queue offset to read from next
    cdef public int64_t last_phys     # commit-log offset of the last record taken (-1: none)
    cdef object _seg                  # the segment of the span being gathered (None: no span open)
    cdef object _seg_mv               # its memoryview, and its base: read once per segment, not per record
    cdef int64_t _seg_base
    cdef int64_t _span_start, _span_end   # that span: records back to back in it
    cdef bint _merge                  # one view per span (a pull's body), else one per record

    def __cinit__(self, int64_t start_index, bint with_offsets=False, bint merge=False):
        self._merge = merge
        self.views = []
        self.queue_offsets = [] if with_offsets else None
        self.count = self.total = 0
        self.next_index = start_index
        self.last_phys = -1
        self._seg = None
        self._span_start = self._span_end = -1

    cdef int _close_span(self) except -1:
        if self._seg is not None:
            self.views.append(self._seg_mv[self._span_start - self._seg_base:self._span_end - self._seg_base])
            self._seg = None
        return 0

    def finish(self):
        """Close the last span (its view joins `views`); call once collecting is over."""
        self._close_span()
        return self


def collect(Collected c not None, cq, int64_t first_index, Py_ssize_t start, Py_ssize_t stop, list segments not None,
            int64_t segment_size, Py_ssize_t max_msgs, Py_ssize_t max_bytes, tags=None, sql=None) -> int:
    """Entries [start, stop) (queue offsets) of the consume-queue file `cq` (bytes-like, its
    first entry is queue offset first_index) into `c` (call c.finish() once done). `segments` are the mapped commit-log
    segments in order (objects with .base and .mv), `segment_size` their size. `tags`: a set of
    tag codes to keep, or None for all. `sql`: an SQL92 program (broker.server.filter.sql92) each
    record's stored properties must match, or None. Returns COLLECT_END, COLLECT_FULL or
    COLLECT_NO_SEGMENT."""
    cdef Borrowed view, prog, segbuf
    cdef bint has_sql = sql is not None, seg_borrowed = False
    cdef const uint8_t *props
    cdef Py_ssize_t props_n
    cdef int64_t at
    if has_sql:
        borrow(sql, &prog, False)
        if not sql_valid(prog.ptr, prog.size):
            give_back(&prog)
            raise ValueError("malformed SQL92 program")
    try:
        borrow(cq, &view, False)
    except BaseException:
        if has_sql:
            give_back(&prog)
        raise
    cdef const uint8_t *p = view.ptr
    cdef Py_ssize_t n_entries = view.size // CQ_UNIT, i, si, nseg = len(segments)
    cdef int64_t phys, tag, base0, rel, merged_end
    cdef int32_t size
    cdef object seg, last_seg = None, last_mv = None
    cdef int64_t last_base = 0
    cdef int status = COLLECT_END
    try:
        if start < first_index or stop > first_index + n_entries or start > stop:
            raise ValueError(f"entries [{start}, {stop}) outside the file's [{first_index}, {first_index + n_entries})")
        if segment_size <= 0 or max_msgs <= 0 or max_bytes <= 0:
            raise ValueError("segment_size, max_msgs and max_bytes must be positive")
        base0 = (<int64_t> segments[0].base) if nseg else 0
        i = start
        while i < stop:
            rel = (i - first_index) * CQ_UNIT
            phys = <int64_t> get_be64(p + rel)
            size = <int32_t> get_be32(p + rel + 8)
            if tags is not None:
                tag = <int64_t> get_be64(p + rel + 12)
                if tag not in tags:
                    i += 1
                    c.next_index = i
                    continue
            if c.count and c.total + size > max_bytes:
                status = COLLECT_FULL
                break
            # the record's segment: they are contiguous, so one division finds it
            si = -1 if phys < base0 or size <= 0 else <Py_ssize_t> ((phys - base0) // segment_size)
            if si < 0 or si >= nseg:
                status = COLLECT_NO_SEGMENT
                break
            seg = segments[si]
            if seg is not last_seg:  # a segment's attributes are read when it changes
                last_seg, last_mv, last_base = seg, seg.mv, seg.base
            if phys + size > last_base + segment_size or last_mv is None:
                status = COLLECT_NO_SEGMENT
                break
            if has_sql:  # the record's own properties, read in place in the mapped segment
                if not seg_borrowed or segbuf.view.obj is not <object> last_mv:
                    if seg_borrowed:
                        give_back(&segbuf)
                        seg_borrowed = False
                    borrow(last_mv, &segbuf, False)
                    seg_borrowed = True
                at = phys - last_base
                if at + size > segbuf.size or not record_properties(segbuf.ptr + at, size, &props, &props_n) \
                        or not sql_matches(prog.ptr, prog.size, props, props_n):
                    i += 1
                    c.next_index = i
                    continue
            if c._merge and c._seg is seg and phys == c._span_end:
                c._span_end = phys + size  # back to back with the span: widen it
            else:
                c._close_span()
                c._seg, c._seg_mv, c._seg_base = seg, last_mv, last_base
                c._span_start, c._span_end = phys, phys + size
            if c.queue_offsets is not None:
                c.queue_offsets.append(i)
            c.count += 1
            c.total += size
            c.last_phys = phys
            i += 1
            c.next_index = i
            if c.count >= max_msgs:
                status = COLLECT_FULL
                break
        return status
    finally:
        give_back(&view)
        if seg_borrowed:
            give_back(&segbuf)
        if has_sql:
            give_back(&prog)
