# Interface of the RocketMQ remoting frame codec (4.x, NettyDecoder / RemotingCommand).
#
#   int32  L          length of what follows = 4 + H + B            (big-endian)
#   int32  T<<24 | H  serialize type (0 JSON, 1 ROCKETMQ) and header length H
#   H      header     JSON (UTF-8) or ROCKETMQ binary
#   B      body       L - 4 - H bytes, possibly none
#
# Frames longer than max_frame (16 MiB by default, as Java's) are refused.

from libc.stdint cimport int64_t, uint8_t

cdef enum:
    FRAME_PREFIX = 8
    SERIALIZE_JSON = 0
    SERIALIZE_ROCKETMQ = 1


# One frame's prefix read and checked, in one place: split_frames, the broker's send kernel and the
# client's reply reader all walk a read with it. `frame_at` needs 4 bytes at pos (the caller checks
# end - pos >= 4) and returns FRAME_OK (the frame's geometry in *f), FRAME_INCOMPLETE (wait for
# more bytes) or a refusal, which `raise_frame_error` turns into FrameError naming the offset.
from libc.stdint cimport int32_t, uint32_t
from bytesex cimport get_be32

cdef enum FrameStatus:
    FRAME_OK = 0
    FRAME_INCOMPLETE = 1
    FRAME_SHORT = 2           # length below 4
    FRAME_TOO_LONG = 3        # length over max_frame
    FRAME_HEADER_TOO_LONG = 4  # header length over the frame length
    FRAME_BAD_TYPE = 5        # serialize type neither JSON nor ROCKETMQ


cdef struct FrameSpan:
    int64_t length            # the prefix's L (what follows it)
    int serialize_type
    Py_ssize_t header_start
    Py_ssize_t header_len
    Py_ssize_t body_start
    Py_ssize_t body_len
    Py_ssize_t next           # where the next frame starts


cdef inline FrameStatus frame_at(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t max_frame,
                                 FrameSpan *f) noexcept nogil:
    cdef uint32_t word
    f.header_len = 0  # named by a refusal's message before they are read
    f.serialize_type = 0
    f.length = <int32_t> get_be32(p + pos)
    if f.length < 4:
        return FRAME_SHORT
    if f.length > max_frame:
        return FRAME_TOO_LONG
    if end - pos - 4 < f.length:
        return FRAME_INCOMPLETE
    word = get_be32(p + pos + 4)
    f.header_len = word & 0xFFFFFF
    if f.header_len > f.length - 4:
        return FRAME_HEADER_TOO_LONG
    f.serialize_type = word >> 24
    if f.serialize_type > SERIALIZE_ROCKETMQ:
        return FRAME_BAD_TYPE
    f.header_start = pos + 8
    f.body_start = f.header_start + f.header_len
    f.body_len = f.length - 4 - f.header_len
    f.next = pos + 4 + f.length
    return FRAME_OK


cdef inline int raise_frame_error(FrameStatus status, Py_ssize_t pos, FrameSpan *f, Py_ssize_t max_frame) except -1:
    from broker.kernels.remoting import FrameError
    if status == FRAME_SHORT:
        raise FrameError(pos, f"length {f.length} is below 4")
    if status == FRAME_TOO_LONG:
        raise FrameError(pos, f"length {f.length} exceeds the limit of {max_frame} bytes")
    if status == FRAME_HEADER_TOO_LONG:
        raise FrameError(pos, f"header length {f.header_len} exceeds the frame length {f.length}")
    raise FrameError(pos, f"unknown serialize type {f.serialize_type}")
