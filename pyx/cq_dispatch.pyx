# cython: language_level=3
"""The reput's dispatch loop: consume-queue entries of scanned records written in one C pass.

A Scanner fills dispatch entries; `CqDispatcher.dispatch` writes each one's 20 bytes (commit-log
offset, size, tag hash; big-endian) at its queue offset in the mapped consume-queue file that
holds it. Files are registered by the Python side (which makes them): the loop finds a queue's
file through a small open-addressing table keyed by (topic index, queue id), and stops at the
first entry whose file is not registered, saying which queue and offset it needs. Nothing here
creates a Python object per entry; a pass over any number of records costs one call.

Every write is checked against its registered file's bounds; an entry outside them is never
written (it stops the loop like a missing file does).
"""
cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memset

from broker.kernels.codec cimport DispatchEntry, MappedBuffer, Scanner
from record cimport CQ_UNIT
from bytesex cimport put_be32, put_be64


cdef struct Target:
    int64_t key          # topic index << 32 | queue id; -1: empty slot
    uint8_t *ptr         # the mapped consume-queue file
    int64_t first        # logical offset of its first entry
    int64_t count        # entries it holds
    int32_t dirty        # written since the last take_dirty
    int32_t slot         # index into _keep


cdef inline uint64_t mix(int64_t key) noexcept nogil:
    cdef uint64_t h = <uint64_t> key
    h ^= h >> 33
    h *= 0xff51afd7ed558ccdULL
    h ^= h >> 33
    return h


@cython.final
cdef class CqDispatcher:
    cdef Target *_t
    cdef Py_ssize_t _cap        # a power of two
    cdef Py_ssize_t _used
    cdef list _keep             # the MappedBuffers whose pointers the table holds
    cdef readonly int64_t missing_key       # set when dispatch stops: the queue it needs a file for
    cdef readonly int64_t missing_offset    # and the logical offset that file must hold
    cdef readonly int64_t last_store_ts     # store timestamp of the last entry written

    def __cinit__(self, Py_ssize_t capacity=64):
        cdef Py_ssize_t cap = 16
        while cap < capacity * 2:
            cap *= 2
        self._t = <Target *> PyMem_Malloc(cap * sizeof(Target))
        if self._t == NULL:
            raise MemoryError()
        self._cap = cap
        self._used = 0
        self._clear_slots(self._t, cap)
        self._keep = []
        self.missing_key = -1
        self.missing_offset = -1
        self.last_store_ts = 0

    def __dealloc__(self):
        if self._t != NULL:
            PyMem_Free(self._t)
            self._t = NULL

    cdef void _clear_slots(self, Target *t, Py_ssize_t n) noexcept:
        cdef Py_ssize_t i
        memset(t, 0, n * sizeof(Target))
        for i in range(n):
            t[i].key = -1

    cdef Target *_find(self, int64_t key) noexcept nogil:
        cdef Py_ssize_t mask = self._cap - 1
        cdef Py_ssize_t i = <Py_ssize_t> (mix(key) & mask)
        while True:
            if self._t[i].key == key:
                return &self._t[i]
            if self._t[i].key == -1:
                return NULL
            i = (i + 1) & mask

    cdef int _grow(self) except -1:
        cdef Py_ssize_t old_cap = self._cap, i, j, mask
        cdef Target *old = self._t
        cdef Target *t = <Target *> PyMem_Malloc(old_cap * 2 * sizeof(Target))
        if t == NULL:
            raise MemoryError()
        self._clear_slots(t, old_cap * 2)
        mask = old_cap * 2 - 1
        for i in range(old_cap):
            if old[i].key != -1:
                j = <Py_ssize_t> (mix(old[i].key) & mask)
                while t[j].key != -1:
                    j = (j + 1) & mask
                t[j] = old[i]
        self._t = t
        self._cap = old_cap * 2
        PyMem_Free(old)
        return 0

    def register(self, int64_t key, MappedBuffer buf not None, int64_t first, int64_t count) -> int:
        """The file holding entries [first, first + count) of queue `key`; replaces the queue's
        previous one (a queue writes one file at a time, in order). Returns the first offset of
        the file it replaced if that one was written since take_dirty (it needs a flush), else -1."""
        cdef int64_t replaced = -1
        if key < 0:
            raise ValueError(f"queue key {key} is negative")
        if first < 0 or count <= 0 or count * CQ_UNIT > buf.size:
            raise ValueError(f"a file of {buf.size} bytes cannot hold entries [{first}, {first + count})")
        cdef Target *t = self._find(key)
        cdef Py_ssize_t mask, i
        if t == NULL:
            if (self._used + 1) * 2 > self._cap:
                self._grow()
            mask = self._cap - 1
            i = <Py_ssize_t> (mix(key) & mask)
            while self._t[i].key != -1:
                i = (i + 1) & mask
            t = &self._t[i]
            t.key = key
            t.slot = len(self._keep)
            self._keep.append(buf)
            self._used += 1
        else:
            if t.dirty:
                replaced = t.first
            self._keep[t.slot] = buf
        t.ptr = buf.ptr
        t.first = first
        t.count = count
        t.dirty = 0
        return replaced

    def dispatch(self, Scanner scanner not None, Py_ssize_t start, Py_ssize_t end) -> int:
        """Write the entries [start, end) of the scanner's last scan; returns the index of the
        first one not written (end when all were): its queue has no registered file holding its
        offset, see missing_key and missing_offset."""
        if start < 0 or end > scanner._cap or start > end:
            raise ValueError(f"entries [{start}, {end}) outside a scan of {scanner._cap}")
        cdef DispatchEntry *e
        cdef Target *t = NULL
        cdef int64_t key, last_key = -1, rel
        cdef Py_ssize_t i = start
        cdef uint8_t *p
        with nogil:
            while i < end:
                e = &scanner._out[i]
                key = (<int64_t> e.topic_idx << 32) | <int64_t> (<uint64_t> <uint32_t> e.queue_id)
                if key != last_key:
                    t = self._find(key)
                    last_key = key
                if t == NULL:
                    break
                rel = e.queue_offset - t.first
                if rel < 0 or rel >= t.count:
                    break
                p = t.ptr + rel * CQ_UNIT
                put_be64(p, <uint64_t> e.phys_offset)
                put_be32(p + 8, <uint32_t> e.size)
                put_be64(p + 12, <uint64_t> e.tag_hash)
                t.dirty = 1
                self.last_store_ts = e.store_ts
                i += 1
        if i < end:
            e = &scanner._out[i]
            self.missing_key = (<int64_t> e.topic_idx << 32) | <int64_t> (<uint64_t> <uint32_t> e.queue_id)
            self.missing_offset = e.queue_offset
        else:
            self.missing_key = self.missing_offset = -1
        return i

    def take_dirty(self) -> list:
        """(key, first) of every file written since the last call (they need a flush)."""
        out = []
        cdef Py_ssize_t i
        for i in range(self._cap):
            if self._t[i].key != -1 and self._t[i].dirty:
                out.append((self._t[i].key, self._t[i].first))
                self._t[i].dirty = 0
        return out

    def forget(self) -> None:
        """Drop every registration (files deleted under us: the next dispatch registers anew)."""
        self._clear_slots(self._t, self._cap)
        self._used = 0
        self._keep = []
