from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "bytesex.h" nogil:
    void put_be16(uint8_t *p, uint16_t v)
    void put_be32(uint8_t *p, uint32_t v)
    void put_be64(uint8_t *p, uint64_t v)
    uint16_t get_be16(const uint8_t *p)
    uint32_t get_be32(const uint8_t *p)
    uint64_t get_be64(const uint8_t *p)
