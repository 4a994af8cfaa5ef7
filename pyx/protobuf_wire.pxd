# Protobuf's base-128 varints, read and sized in one place for the kernels that read and write
# gRPC messages by hand (send_request, ack_request, receive_reply): the wire format
# (https://protobuf.dev/programming-guides/encoding/), not any message's fields.
from libc.stdint cimport uint8_t, uint64_t


cdef inline Py_ssize_t pb_read_varint(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, uint64_t *out) noexcept nogil:
    """The varint at p[pos]: the position after it, or -1 (truncated, or over 64 bits)."""
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t b
    while pos < end:
        b = p[pos]
        pos += 1
        if shift == 63 and b > 1:
            return -1
        v |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            out[0] = v
            return pos
        shift += 7
        if shift > 63:
            return -1
    return -1


cdef inline Py_ssize_t pb_varint_len(uint64_t v) noexcept nogil:
    """How many bytes `v` takes as a varint."""
    cdef Py_ssize_t n = 1
    while v > 0x7F:
        v >>= 7
        n += 1
    return n
