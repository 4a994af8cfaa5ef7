# Well-formed UTF-8, as the Unicode standard defines it, in one place: the header parsers refuse a
# header that is not (naming the offset), the pulled-records kernel decodes what is not with
# replacement characters, and both ask this about each non-ASCII sequence.
from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcpy

cdef enum:
    UTF8_BAD_LEAD = -1    # a continuation or C0/C1 byte (overlong), or F5.. (beyond U+10FFFF)
    UTF8_TRUNCATED = -2   # the buffer ends inside the sequence
    UTF8_BAD_SEQUENCE = -3


cdef inline Py_ssize_t utf8_sequence(const uint8_t *p, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """The length of the sequence whose lead byte (>= 0x80) is at p[i], p holding n bytes; or a
    UTF8_* code. Refuses E0 below A0 and F0 below 90 (overlong), ED above 9F (a surrogate), F4
    above 8F (beyond U+10FFFF), and continuation bytes that are not 10xxxxxx."""
    cdef uint8_t c = p[i], lo = 0x80, hi = 0xBF
    cdef Py_ssize_t need, k
    if c < 0xC2:
        return UTF8_BAD_LEAD
    if c < 0xE0:
        need = 1
    elif c < 0xF0:
        need = 2
        if c == 0xE0:
            lo = 0xA0
        elif c == 0xED:
            hi = 0x9F
    elif c < 0xF5:
        need = 3
        if c == 0xF0:
            lo = 0x90
        elif c == 0xF4:
            hi = 0x8F
    else:
        return UTF8_BAD_LEAD
    if n - i <= need:
        return UTF8_TRUNCATED
    if p[i + 1] < lo or p[i + 1] > hi:
        return UTF8_BAD_SEQUENCE
    for k in range(2, need + 1):
        if (p[i + k] & 0xC0) != 0x80:
            return UTF8_BAD_SEQUENCE
    return need + 1


cdef inline bint valid_utf8(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    """Well-formed UTF-8 (no overlong forms, surrogates or code points above U+10FFFF), as Arrow,
    protobuf and Python's strict decoder require; ASCII runs are skipped eight bytes at a time."""
    cdef Py_ssize_t i = 0, k
    cdef uint64_t x
    while i < n:
        while n - i >= 8:
            memcpy(&x, p + i, 8)
            if x & 0x8080808080808080ULL:
                break
            i += 8
        if i >= n:
            break
        if p[i] < 0x80:
            i += 1
            continue
        k = utf8_sequence(p, n, i)
        if k < 0:
            return False
        i += k
    return True
