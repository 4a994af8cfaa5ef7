# cython: language_level=3
"""Splits TCP bytes into RocketMQ remoting frames without copying them, and builds frame prefixes.

`split_frames` walks a receive buffer and returns where each complete frame's header and body lie;
the caller decodes headers (msgspec) and hands bodies on as memoryviews. `reallocate` is RocketMQ's
reallocateByteBuffer: it moves the unparsed tail to the start of the buffer. Bad input raises
FrameError naming the offset; nothing is read outside the buffer.
"""
cimport cython
from buffers cimport Borrowed, borrow, check_range, give_back
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memmove

from bytesex cimport get_be32, put_be32

globals()["FRAME_PREFIX"] = FRAME_PREFIX
globals()["SERIALIZE_JSON"] = SERIALIZE_JSON
globals()["SERIALIZE_ROCKETMQ"] = SERIALIZE_ROCKETMQ
DEFAULT_MAX_FRAME = 16 * 1024 * 1024


class FrameError(ValueError):
    """A frame that cannot be valid: the connection that sent it must be closed."""

    def __init__(self, offset, reason):
        super().__init__(f"bad remoting frame at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


def split_frames(buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_frame=DEFAULT_MAX_FRAME):
    """Complete frames in buf[start:end]. Returns (frames, next_pos): each frame is a tuple
    (serialize_type, header_start, header_len, body_start, body_len) of positions in buf, and
    next_pos is where the first incomplete frame (or `end`) begins."""
    cdef Borrowed b
    borrow(buf, &b, False)
    cdef const uint8_t *p = b.ptr
    cdef Py_ssize_t pos = start
    cdef FrameSpan f
    cdef FrameStatus status
    frames = []
    try:
        check_range(start, end, b.size)
        while end - pos >= 4:
            status = frame_at(p, pos, end, max_frame, &f)
            if status == FRAME_INCOMPLETE:
                break  # wait for more bytes
            if status != FRAME_OK:
                raise_frame_error(status, pos, &f, max_frame)
            frames.append((f.serialize_type, f.header_start, f.header_len, f.body_start, f.body_len))
            pos = f.next
        return frames, pos
    finally:
        give_back(&b)


def reallocate(buf, Py_ssize_t start, Py_ssize_t end) -> int:
    """reallocateByteBuffer: move buf[start:end] to the front; returns its new end (end - start)."""
    cdef Borrowed b
    borrow(buf, &b, True)
    try:
        check_range(start, end, b.size)
        if start:
            memmove(b.ptr, b.ptr + start, end - start)
        return end - start
    finally:
        give_back(&b)


def frame_prefix(Py_ssize_t header_len, Py_ssize_t body_len, int serialize_type=SERIALIZE_JSON) -> bytes:
    """The 8 bytes before a header: total length and (type << 24 | header length)."""
    if header_len < 0 or header_len > 0xFFFFFF:
        raise ValueError(f"header length {header_len} outside 0..16777215")
    if body_len < 0 or 4 + header_len + body_len > 0x7FFFFFFF:
        raise ValueError(f"body length {body_len} makes the frame too long")
    if serialize_type != SERIALIZE_JSON and serialize_type != SERIALIZE_ROCKETMQ:
        raise ValueError(f"unknown serialize type {serialize_type}")
    out = PyBytes_FromStringAndSize(NULL, 8)
    cdef uint8_t *q = <uint8_t *> PyBytes_AS_STRING(out)
    put_be32(q, <uint32_t> (4 + header_len + body_len))
    put_be32(q + 4, (<uint32_t> serialize_type << 24) | <uint32_t> header_len)
    return out
