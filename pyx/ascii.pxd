# Numbers as the ASCII text RocketMQ's headers, properties and msgIds carry, in one place (the send
# kernel's replies and timer properties, the client kernel's requests, the pulled-records kernel's
# msgIds, the timer wheel's TIMER_OUT_MS).
from libc.stdint cimport int64_t, uint8_t, uint64_t


cdef inline Py_ssize_t ascii_int(int64_t v, uint8_t *out) noexcept nogil:
    """Decimal digits of v into out (room for 20); returns the length. The magnitude is taken in
    unsigned arithmetic: -INT64_MIN does not fit an int64."""
    cdef uint8_t tmp[20]
    cdef Py_ssize_t n = 0, i = 0
    cdef uint64_t u = (<uint64_t> 0 - <uint64_t> v) if v < 0 else <uint64_t> v
    while True:
        tmp[n] = <uint8_t> (48 + u % 10)
        n += 1
        u //= 10
        if u == 0:
            break
    if v < 0:
        out[0] = 45
        i = 1
    while n > 0:
        n -= 1
        out[i] = tmp[n]
        i += 1
    return i


cdef inline bint ascii_parse_int(const uint8_t *v, Py_ssize_t n, Py_ssize_t max_digits, int64_t *out) noexcept nogil:
    """int() of an optional '-' and 1 to max_digits (at most 18: no overflow) decimal digits;
    False for anything else, which the caller hands to Python to read."""
    cdef Py_ssize_t i = 0
    cdef int64_t r = 0
    cdef bint neg = False
    if n > 0 and v[0] == 45:
        neg = True
        i = 1
    if i >= n or n - i > max_digits:
        return False
    while i < n:
        if v[i] < 48 or v[i] > 57:
            return False
        r = r * 10 + (v[i] - 48)
        i += 1
    out[0] = -r if neg else r
    return True


cdef inline Py_ssize_t msg_id_hex(const uint8_t *host, Py_ssize_t host_len, int64_t phys, uint8_t *out) noexcept nogil:
    """offsetMsgId (MessageDecoder.createMessageId): upper-case hex of the store host (ip + port,
    8 or 20 bytes) then the physical offset; out has room for 2 * (host_len + 8). Returns the length."""
    cdef const char *hexd = b"0123456789ABCDEF"
    cdef Py_ssize_t i, n = 0
    cdef uint64_t u = <uint64_t> phys
    if host_len > 20:  # a host is 8 or 20 bytes; the bound lets the compiler see out's 56 suffice
        host_len = 20
    for i in range(host_len):
        out[n] = hexd[host[i] >> 4]
        out[n + 1] = hexd[host[i] & 15]
        n += 2
    for i in range(7, -1, -1):
        out[n] = hexd[(u >> (i * 8 + 4)) & 15]
        out[n + 1] = hexd[(u >> (i * 8)) & 15]
        n += 2
    return n
