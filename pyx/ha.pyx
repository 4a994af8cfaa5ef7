# cython: language_level=3
"""RocketMQ's HAClient.dispatchReadRequest and reallocateByteBuffer for the slave's HA reader.

`dispatch_read_request` walks the receive buffer and returns where each complete transfer frame's
data lies, checking that every frame continues the slave's log exactly; the caller copies each
frame's data into the mapped commit log (its one copy). `reallocate_byte_buffer` (the remoting
kernel's `reallocate`, re-exported) moves the unparsed tail to the buffer's start. Bad input raises HAFrameError naming the stream offset;
nothing is read outside the buffer.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport INT64_MAX, int32_t, int64_t, uint8_t, uint64_t

from buffers cimport Borrowed, borrow, check_range, give_back
from bytesex cimport get_be32, get_be64, put_be64
from record cimport RECORD_BLANK_MAGIC

# RocketMQ's reallocateByteBuffer, one kernel for both readers: the remoting frame reader's
from broker.kernels.remoting import reallocate as reallocate_byte_buffer  # noqa: F401

globals()["HA_HEADER"] = HA_HEADER
globals()["HA_REPORT"] = HA_REPORT


class HAFrameError(ValueError):
    """A transfer frame that cannot be valid: the link must be dropped and re-established."""

    def __init__(self, pos, reason):
        super().__init__(f"bad HA frame at buffer position {pos}: {reason}")
        self.pos = pos
        self.reason = reason


def dispatch_read_request(buf, Py_ssize_t start, Py_ssize_t end, int64_t expected, Py_ssize_t max_body):
    """Complete frames in buf[start:end]. `expected` is the slave's max offset (-1: an empty slave,
    which takes the first frame's offset). Returns (frames, next_pos, expected, mismatch):
    frames are (phy_offset, data_pos, size) for frames with data (heartbeats are checked and
    skipped), next_pos where the first incomplete or mismatching frame begins, expected the
    offset after the last frame, and mismatch the phyOffset of a frame that does not continue
    the log (-1 if none): parsing stops before it."""
    cdef Borrowed b
    borrow(buf, &b, False)
    cdef const uint8_t *p = b.ptr
    cdef Py_ssize_t pos = start
    cdef int64_t phy, mismatch = -1
    cdef int32_t size
    frames = []
    try:
        check_range(start, end, b.size)
        while end - pos >= HA_HEADER:
            phy = <int64_t> get_be64(p + pos)
            size = <int32_t> get_be32(p + pos + 8)
            if phy < 0:
                raise HAFrameError(pos, f"negative phyOffset {phy}")
            if size < 0 or size > max_body:
                raise HAFrameError(pos, f"bodySize {size} outside 0..{max_body}")
            if phy > INT64_MAX - size:
                # found by checking against the twin: phy + size wrapped negative (C signed
                # overflow) and became the slave's next expected offset
                raise HAFrameError(pos, f"phyOffset {phy} + bodySize {size} overflows a 64-bit offset")
            if end - pos - HA_HEADER < size:
                break  # incomplete: wait for the rest
            if expected >= 0 and phy != expected:
                mismatch = phy
                break
            if size:
                frames.append((phy, pos + HA_HEADER, size))
            expected = phy + size
            pos += HA_HEADER + size
        return frames, pos, expected, mismatch
    finally:
        give_back(&b)




def record_boundary(seg, Py_ssize_t pos, Py_ssize_t end):
    """The slave publishes only whole records: from a record start `pos` in a segment's map, the
    end of the last record wholly inside seg[:end] (a closing blank counts up to the segment's
    end). Raises ValueError naming the position of a record size that cannot be valid."""
    cdef Borrowed view
    borrow(seg, &view, False)
    cdef const uint8_t *p = view.ptr
    cdef int64_t size
    try:
        if pos < 0 or end > view.size or pos > end:
            raise ValueError(f"range [{pos}, {end}) outside a segment of {view.size}")
        while end - pos >= 8:
            size = <int32_t> get_be32(p + pos)
            if get_be32(p + pos + 4) == RECORD_BLANK_MAGIC:
                if pos + size != view.size:
                    raise ValueError(f"blank record at {pos} of size {size} does not close the segment of {view.size}")
                if end == view.size:
                    pos = end
                break
            if size < 8 or pos + size > view.size:
                raise ValueError(f"record at {pos} has size {size}, which cannot be valid here")
            if pos + size > end:
                break
            pos += size
        return pos
    finally:
        give_back(&view)


def frame_header(int64_t phy, Py_ssize_t size) -> bytes:
    """The master's 12-byte header before `size` bytes of the log from `phy`."""
    if phy < 0 or size < 0 or size > 0x7FFFFFFF:
        raise ValueError(f"bad header phyOffset {phy} bodySize {size}")
    out = PyBytes_FromStringAndSize(NULL, HA_HEADER)
    cdef uint8_t *q = <uint8_t *> PyBytes_AS_STRING(out)
    put_be64(q, <uint64_t> phy)
    q[8] = (size >> 24) & 0xFF
    q[9] = (size >> 16) & 0xFF
    q[10] = (size >> 8) & 0xFF
    q[11] = size & 0xFF
    return out


def last_report(buf, Py_ssize_t start, Py_ssize_t end):
    """The master's read side: the last complete 8-byte offset report in buf[start:end] (as Java
    takes only the newest), or -1, and where the incomplete rest begins."""
    cdef Borrowed b
    borrow(buf, &b, False)
    cdef Py_ssize_t n
    cdef int64_t value = -1
    try:
        check_range(start, end, b.size)
        n = (end - start) // HA_REPORT
        if n:
            value = <int64_t> get_be64(b.ptr + start + (n - 1) * HA_REPORT)
        return value, start + n * HA_REPORT
    finally:
        give_back(&b)
