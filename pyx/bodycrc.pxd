# The body CRC every kernel computes (crc32_fast.h: zlib's CRC-32, with PCLMULQDQ where the CPU
# has it): one definition, so the send path, the scanner and the client agree by construction.
from libc.stdint cimport uint8_t, uint32_t

cdef extern from "crc32_fast.h" nogil:
    bint crc32_hardware()
    uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n)
    uint32_t crc32_body(const uint8_t *p, size_t n)
