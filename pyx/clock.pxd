# The clocks the kernels read, declared once (py-pgproto shares its helpers through .pxd files the
# same way): wall-clock milliseconds for the stored records' born/store timestamps and msgIds, as
# Java's System.currentTimeMillis, and monotonic seconds for waits.
from libc.stdint cimport int64_t

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    struct timespec:
        time_t tv_sec
        long tv_nsec
    enum:
        CLOCK_REALTIME
        CLOCK_MONOTONIC
    int clock_gettime(int clk, timespec *ts)


cdef inline int64_t now_ms() noexcept nogil:
    """Milliseconds since the epoch."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t> ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef inline double monotonic() noexcept nogil:
    """Seconds on the monotonic clock."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9
