# Interface of the shared-memory offset table: 64-byte slots, one int64 counter each,
# written by exactly one process (store-release) and read by any (load-acquire).
#
#  slot layout (64 bytes, one cache line, so writers in different processes never share a line)
#    +0  value    int64   the counter; its low 32 bits double as the futex word (little-endian)
#    +8  waiters  int32   processes sleeping on this slot; the writer skips the wake syscall at 0
#    +12 unused

from libc.stdint cimport int32_t, int64_t, uint8_t

cdef enum:
    SLOT_SIZE = 64


cdef class OffsetTable:
    cdef object _mm
    cdef Py_buffer _view
    cdef uint8_t *_base
    cdef readonly int nslots
    cdef readonly str path
    cdef int64_t *_value(self, int slot) except NULL
    cpdef int64_t load(self, int slot) except? -1
    cpdef void store(self, int slot, int64_t value) except *
    cpdef void publish(self, int slot, int64_t value) except *
    cpdef void wake(self, int slot) except *
    cpdef int64_t wait_until_ge(self, int slot, int64_t target, double timeout) except? -1
    cpdef int64_t wait_change(self, int slot, int64_t seen, double timeout) except? -1
    cdef int64_t _wait(self, int slot, int64_t arg, int mode, double timeout) except? -1
