# cython: language_level=3
"""Shared-memory offset table with acquire/release counters and futex wake-ups across processes.

Every process maps the same small file MAP_SHARED. A writer advances its counter with a
store, then wakes sleepers only if some are registered; a waiter registers, re-reads the
counter and sleeps on the futex only if it has not moved (FUTEX_WAIT compares the word, so
a store that lands between the check and the sleep makes the sleep return at once): no
wake-up is lost and nothing polls.
"""
import mmap
import os
import sys

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.exc cimport PyErr_CheckSignals
from libc.errno cimport EAGAIN, EINTR, ETIMEDOUT, errno
from libc.stdint cimport int32_t, int64_t, uint32_t, uint8_t

if sys.byteorder != "little":
    raise ImportError("the offset table's futex word is the low half of an int64: little-endian only")

cdef extern from "<linux/futex.h>":
    enum:
        FUTEX_WAIT
        FUTEX_WAKE

cdef extern from "<sys/syscall.h>":
    enum:
        SYS_futex

from clock cimport monotonic, time_t, timespec

cdef extern from "<unistd.h>" nogil:
    long syscall(long number, ...)

cdef extern from *:
    """
    #define ATOMIC_LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
    #define ATOMIC_LOAD_SC(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
    #define ATOMIC_STORE_SC(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
    #define ATOMIC_ADD_SC(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
    """
    int64_t ATOMIC_LOAD_ACQ(int64_t *p) nogil
    int64_t ATOMIC_LOAD_SC(int64_t *p) nogil
    int32_t ATOMIC_LOAD_SC32 "ATOMIC_LOAD_SC"(int32_t *p) nogil
    void ATOMIC_STORE_SC(int64_t *p, int64_t v) nogil
    int32_t ATOMIC_ADD_SC32 "ATOMIC_ADD_SC"(int32_t *p, int32_t v) nogil
    int64_t ATOMIC_ADD_SC(int64_t *p, int64_t v) nogil

globals()["SLOT_SIZE"] = SLOT_SIZE


cdef inline double now() noexcept nogil:
    return monotonic()


cdef class OffsetTable:
    """`OffsetTable(path, nslots, create=False)`; create=True makes (or resets) the file."""

    def __cinit__(self, str path, int nslots, bint create=False):
        if nslots <= 0:
            raise ValueError("nslots must be positive")
        size = nslots * SLOT_SIZE
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            if create:
                os.ftruncate(fd, 0)
                os.ftruncate(fd, size)
            elif os.fstat(fd).st_size < size:
                raise ValueError(f"offset table {path} is smaller than {nslots} slots")
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        PyObject_GetBuffer(self._mm, &self._view, PyBUF_WRITABLE)
        self._base = <uint8_t *> self._view.buf
        self.nslots = nslots
        self.path = path

    def __dealloc__(self):
        if self._base != NULL:
            PyBuffer_Release(&self._view)
            self._base = NULL

    def close(self):
        if self._base != NULL:
            PyBuffer_Release(&self._view)
            self._base = NULL
            self._mm.close()

    cdef int64_t *_value(self, int slot) except NULL:
        if self._base == NULL:
            raise ValueError("offset table is closed")
        if slot < 0 or slot >= self.nslots:
            raise IndexError(f"slot {slot} outside 0..{self.nslots - 1}")
        return <int64_t *> (self._base + slot * SLOT_SIZE)

    cpdef int64_t load(self, int slot) except? -1:
        return ATOMIC_LOAD_ACQ(self._value(slot))

    cpdef void store(self, int slot, int64_t value) except *:
        """Publish a new value and wake every sleeper on the slot."""
        cdef int64_t *v = self._value(slot)
        ATOMIC_STORE_SC(v, value)
        if ATOMIC_LOAD_SC32(<int32_t *> (v + 1)) > 0:
            syscall(SYS_futex, <int32_t *> v, FUTEX_WAKE, 0x7FFFFFFF, NULL, NULL, 0)

    cpdef void publish(self, int slot, int64_t value) except *:
        """Store a new value without waking anyone: readers see it at once, sleepers at the next
        wake(). Lets a writer that stores many times per event-loop turn wake once per turn."""
        ATOMIC_STORE_SC(self._value(slot), value)

    cpdef void wake(self, int slot) except *:
        """Wake every sleeper on the slot (no syscall when there is none)."""
        cdef int64_t *v = self._value(slot)
        if ATOMIC_LOAD_SC32(<int32_t *> (v + 1)) > 0:
            syscall(SYS_futex, <int32_t *> v, FUTEX_WAKE, 0x7FFFFFFF, NULL, NULL, 0)

    def add(self, int slot, int64_t delta) -> int:
        """Atomic add (for counters several processes bump, such as restart counts)."""
        cdef int64_t *v = self._value(slot)
        cdef int64_t r = ATOMIC_ADD_SC(v, delta)
        if ATOMIC_LOAD_SC32(<int32_t *> (v + 1)) > 0:
            syscall(SYS_futex, <int32_t *> v, FUTEX_WAKE, 0x7FFFFFFF, NULL, NULL, 0)
        return r

    def waiters(self, int slot) -> int:
        return ATOMIC_LOAD_SC32(<int32_t *> (self._value(slot) + 1))

    cpdef int64_t wait_until_ge(self, int slot, int64_t target, double timeout) except? -1:
        """Sleep until the slot's value >= target or `timeout` seconds pass (negative: forever).
        Returns the last value seen; the caller compares it with target."""
        return self._wait(slot, target, 0, timeout)

    cpdef int64_t wait_change(self, int slot, int64_t seen, double timeout) except? -1:
        """Sleep until the slot's value != seen or the timeout passes; returns the value."""
        return self._wait(slot, seen, 1, timeout)

    cdef int64_t _wait(self, int slot, int64_t arg, int mode, double timeout) except? -1:
        cdef int64_t *v = self._value(slot)
        cdef int32_t *waiters = <int32_t *> (v + 1)
        cdef int64_t cur
        cdef double deadline = now() + timeout if timeout >= 0 else -1.0
        cdef double left
        cdef timespec ts
        cdef long rc
        cdef int err
        ATOMIC_ADD_SC32(waiters, 1)
        try:
            while True:
                cur = ATOMIC_LOAD_SC(v)
                if (mode == 0 and cur >= arg) or (mode == 1 and cur != arg):
                    return cur
                # A handler may be pending from a signal that reached us outside the sleep (or
                # reached another thread): run it now rather than sleep through it.
                PyErr_CheckSignals()
                # A signal interrupts the sleep with EINTR (Python installs its handlers without
                # SA_RESTART), so a forever-wait in a main thread still answers Ctrl-C at once.
                if deadline >= 0:
                    left = deadline - now()
                    if left <= 0:
                        return cur
                    ts.tv_sec = <time_t> left
                    ts.tv_nsec = <long> ((left - ts.tv_sec) * 1e9)
                    with nogil:
                        rc = syscall(SYS_futex, <int32_t *> v, FUTEX_WAIT, <uint32_t> cur, &ts, NULL, 0)
                        err = errno
                else:
                    with nogil:
                        rc = syscall(SYS_futex, <int32_t *> v, FUTEX_WAIT, <uint32_t> cur, NULL, NULL, 0)
                        err = errno
                if rc != 0 and err == EINTR:
                    PyErr_CheckSignals()
                elif rc != 0 and err != EAGAIN and err != ETIMEDOUT:
                    raise OSError(err, os.strerror(err))
        finally:
            ATOMIC_ADD_SC32(waiters, -1)
