# cython: language_level=3
"""The reput's index building (RocketMQ's CommitLogDispatcherBuildIndex + IndexFile.putKey) in one
C pass over a Scanner's records.

An IndexFile (docs/formats.md §2.1) is a 40-byte header, `hashSlotNum` 4-byte slots and
`indexNum` 20-byte entries, all big-endian:

    header  beginTimestamp 8, endTimestamp 8, beginPhyOffset 8, endPhyOffset 8,
            hashSlotCount 4, indexCount 4 (the next entry's number; starts at 1, entry 0 is unused)
    slot    number of the newest entry whose key hashes to it (0: none)
    entry   keyHash 4, phyOffset 8, timeDiff 4 (seconds after beginTimestamp), prevIndex 4 (chain)

Each record of a NOT_TYPE or COMMIT transaction type gets one entry for `topic#UNIQ_KEY` and one
per space-separated token of KEYS, the key hashed as Java's String.hashCode (UTF-16 code units)
made non-negative as IndexFile.indexKeyHashMethod (Math.abs; Integer.MIN_VALUE becomes 0).

The file being written is registered by the Python side (which makes the files); the header is
kept here and written through on every entry, entry before slot before count, so a reader of the
same map never follows a slot to an entry not yet written. A pass stops when the file is full,
possibly in the middle of a record's keys: the next registered file takes the rest of them.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, INT32_MAX

from broker.kernels.codec cimport DispatchEntry, MappedBuffer, Scanner, java_hash_from, java_hash_ptr
from bytesex cimport get_be32, get_be64, put_be32, put_be64

DEF PENDING = 32
DEF HEADER = 40
DEF SLOT = 4
DEF ENTRY = 20

INDEX_HEADER_SIZE = HEADER
HASH_SLOT_SIZE = SLOT
INDEX_ENTRY_SIZE = ENTRY

# transaction type bits of SYSFLAG (MessageSysFlag): 0x4 prepared, 0xC rollback are not indexed
DEF TX_MASK = 0xC
DEF TX_PREPARED = 0x4
DEF TX_ROLLBACK = 0xC


cdef extern from *:
    """
    static inline void prefetch_rw(const void *p) { __builtin_prefetch(p, 1, 0); }
    """
    void prefetch_rw(const void *p) nogil


cdef struct Pending:
    uint32_t hash
    int64_t phys
    int64_t ts
    Py_ssize_t entry
    int32_t ordinal


def index_file_size(int64_t slots, int64_t num) -> int:
    """Bytes of an index file: header + slots + entries (IndexFile.fileTotalSize)."""
    return HEADER + slots * SLOT + num * ENTRY


@cython.final
cdef class IndexDispatcher:
    cdef MappedBuffer _file
    cdef uint8_t *_p
    cdef int64_t _slots, _num
    cdef int64_t _begin_ts, _end_ts, _begin_phy, _end_phy
    cdef int32_t _slot_count, _count
    cdef int64_t *_prefix           # per scanner topic index: hash of "topic#" (-1: not yet known)
    cdef Py_ssize_t _prefix_cap
    cdef object _prefix_scanner     # the scanner whose topic indexes _prefix caches
    cdef int64_t _resume_phys       # record cut short by a full file (-1: none) ...
    cdef int32_t _resume_key        # ... and the ordinal of its first key not yet indexed
    cdef readonly int64_t keys_indexed
    cdef Pending _pending[PENDING]  # keys hashed, their slots prefetched, not yet put
    cdef int _npending

    def __cinit__(self):
        self._p = NULL
        self._prefix = NULL
        self._prefix_cap = 0
        self._resume_phys = -1
        self._resume_key = 0
        self.keys_indexed = 0

    def __dealloc__(self):
        if self._prefix != NULL:
            PyMem_Free(self._prefix)
            self._prefix = NULL

    def register(self, MappedBuffer buf not None, int64_t slots, int64_t num) -> None:
        """The index file entries go into from now on (its header is read from it)."""
        if slots <= 0 or num <= 1:
            raise ValueError(f"an index file needs slots > 0 and entries > 1, not {slots} and {num}")
        if not buf.writable or buf.size < HEADER + slots * SLOT + num * ENTRY:
            raise ValueError(f"a {'writable ' if not buf.writable else ''}buffer of {buf.size} bytes cannot "
                             f"hold an index file of {slots} slots and {num} entries")
        self._file = buf
        self._p = buf.ptr
        self._slots, self._num = slots, num
        self._begin_ts = <int64_t> get_be64(self._p)
        self._end_ts = <int64_t> get_be64(self._p + 8)
        self._begin_phy = <int64_t> get_be64(self._p + 16)
        self._end_phy = <int64_t> get_be64(self._p + 24)
        self._slot_count = <int32_t> get_be32(self._p + 32)
        self._count = <int32_t> get_be32(self._p + 36)
        if self._count <= 0:  # IndexHeader.load
            self._count = 1

    def release(self) -> None:
        """Let go of the registered file (before it is unmapped)."""
        self._file = None
        self._p = NULL

    @property
    def full(self) -> bool:
        return self._p != NULL and self._count >= self._num

    @property
    def end_phy_offset(self) -> int:
        return self._end_phy

    @property
    def end_timestamp(self) -> int:
        return self._end_ts

    @property
    def index_count(self) -> int:
        return self._count

    cdef int64_t _topic_prefix(self, Scanner scanner, int32_t idx) except? -1:
        cdef Py_ssize_t n, i
        cdef int64_t *grown
        if scanner is not self._prefix_scanner:
            for i in range(self._prefix_cap):
                self._prefix[i] = -1
            self._prefix_scanner = scanner
        if idx >= self._prefix_cap:
            n = max(idx + 1, self._prefix_cap * 2, 16)
            grown = <int64_t *> PyMem_Realloc(self._prefix, n * sizeof(int64_t))
            if grown == NULL:
                raise MemoryError()
            for i in range(self._prefix_cap, n):
                grown[i] = -1
            self._prefix, self._prefix_cap = grown, n
        if self._prefix[idx] < 0:
            topic = scanner.topics[idx]
            self._prefix[idx] = <uint32_t> (<uint32_t> java_hash_ptr(<const uint8_t *> PyBytes_AS_STRING(topic),
                                                                     PyBytes_GET_SIZE(topic)) * 31 + 35)  # '#'
        return self._prefix[idx]

    cdef inline void _put(self, uint32_t h, int64_t phys, int64_t ts) noexcept:
        cdef int32_t key_hash = <int32_t> h, slot_value
        cdef int64_t time_diff
        cdef uint8_t *sp
        cdef uint8_t *ep
        cdef uint8_t *p = self._p
        if key_hash < 0:
            key_hash = -key_hash if key_hash != -2147483648 else 0
        sp = p + HEADER + (key_hash % self._slots) * SLOT
        slot_value = <int32_t> get_be32(sp)
        if slot_value <= 0 or slot_value > self._count:
            slot_value = 0
        if self._begin_ts <= 0:
            time_diff = 0
        else:
            time_diff = (ts - self._begin_ts) // 1000 if ts >= self._begin_ts else 0
            if time_diff > INT32_MAX:
                time_diff = INT32_MAX
        ep = p + HEADER + self._slots * SLOT + <int64_t> self._count * ENTRY
        put_be32(ep, <uint32_t> key_hash)
        put_be64(ep + 4, <uint64_t> phys)
        put_be32(ep + 12, <uint32_t> <int32_t> time_diff)
        put_be32(ep + 16, <uint32_t> slot_value)
        put_be32(sp, <uint32_t> self._count)
        if self._count <= 1:
            self._begin_phy, self._begin_ts = phys, ts
            put_be64(p, <uint64_t> ts)
            put_be64(p + 16, <uint64_t> phys)
        if slot_value == 0:
            self._slot_count += 1
            put_be32(p + 32, <uint32_t> self._slot_count)
        self._end_phy, self._end_ts = phys, ts
        put_be64(p + 8, <uint64_t> ts)
        put_be64(p + 24, <uint64_t> phys)
        self._count += 1
        put_be32(p + 36, <uint32_t> self._count)
        self.keys_indexed += 1

    cdef inline uint32_t _hash(self, uint32_t prefix, const uint8_t *k, Py_ssize_t n) except? 0xFFFFFFFF:
        cdef uint32_t h = prefix
        cdef Py_ssize_t j
        for j in range(n):
            if k[j] >= 0x80:
                return <uint32_t> java_hash_from(prefix, k, n)  # UTF-16 units, as Java hashes
            h = h * 31 + k[j]
        return h

    cdef inline void _queue(self, uint32_t h, DispatchEntry *e, Py_ssize_t i, int32_t ordinal) noexcept:
        cdef Pending *q = &self._pending[self._npending]
        cdef int32_t kh = <int32_t> h
        if kh < 0:
            kh = -kh if kh != -2147483648 else 0
        q.hash, q.phys, q.ts, q.entry, q.ordinal = h, e.phys_offset, e.store_ts, i, ordinal
        # the slot is a cache miss (a random 4 bytes of 20 MB by default): asked for now, read when
        # the queue is drained, so the misses of PENDING keys overlap
        prefetch_rw(self._p + HEADER + (kh % self._slots) * SLOT)
        self._npending += 1

    cdef Py_ssize_t _drain(self) noexcept:
        """Put the queued keys in order; -1, or the queue position of the first that found the file full."""
        cdef int n = self._npending, j
        self._npending = 0
        for j in range(n):
            if self._count >= self._num:
                return j
            self._put(self._pending[j].hash, self._pending[j].phys, self._pending[j].ts)
        return -1

    def dispatch(self, Scanner scanner not None, MappedBuffer buf not None, Py_ssize_t start, Py_ssize_t end) -> int:
        """Index the keys of the entries [start, end) of the scanner's last scan of `buf`; returns
        the index of the first entry not wholly indexed (end when all were): the file is full,
        register the next one and call again from there.

        Keys are hashed into a small queue whose slots are prefetched, and put in order when it is
        full: the same writes in the same order as putting each at once. A record found already
        indexed is so whatever the queue holds (the queue only holds records before it)."""
        if self._p == NULL:
            raise ValueError("no index file registered")
        if start < 0 or end > scanner._cap or start > end:
            raise ValueError(f"entries [{start}, {end}) outside a scan of {scanner._cap}")
        cdef DispatchEntry *e
        cdef Py_ssize_t i, cut, most
        cdef int32_t skip
        cdef int tx
        cdef const uint8_t *base = buf.ptr
        cdef Py_ssize_t size = buf.size
        self._npending = 0
        for i in range(start, end):
            e = &scanner._out[i]
            if e.uniq_pos < 0 and e.keys_pos < 0:
                continue
            tx = e.sys_flag & TX_MASK
            if tx == TX_PREPARED or tx == TX_ROLLBACK:
                continue
            if e.phys_offset == self._resume_phys:
                skip = self._resume_key
                self._resume_phys = -1
            else:
                # already indexed (a re-dispatch after recovery starts before the index's end)
                if e.phys_offset < self._end_phy or (e.phys_offset == self._end_phy
                                                     and (self._count > 1 or self._end_phy > 0)):
                    continue
                skip = 0
            if (e.uniq_pos >= 0 and e.uniq_pos + e.uniq_len > size) or (e.keys_pos >= 0 and e.keys_pos + e.keys_len > size):
                self._npending = 0
                raise ValueError(f"keys of the record at {e.phys_offset} outside the buffer of {size} bytes")
            most = 1 + e.keys_len // 2 + 1  # UNIQ_KEY + at most one token per two bytes of KEYS
            if self._npending + most > PENDING:
                cut = self._drain()
                if cut >= 0:
                    return self._cut_at(cut)
            # a record with more keys than the queue holds has them put one by one
            cut = self._keys(scanner, e, i, base, skip, most > PENDING)
            if cut >= 0:
                return cut
        cut = self._drain()
        if cut >= 0:
            return self._cut_at(cut)
        return end

    cdef Py_ssize_t _keys(self, Scanner scanner, DispatchEntry *e, Py_ssize_t i, const uint8_t *base, int32_t skip,
                          bint direct) except? -2:
        """The record's keys from the `skip`th on (UNIQ_KEY, then each non-empty KEYS token): queued,
        or with `direct` put at once; -1, or `i` when the file filled up before one of them."""
        cdef Py_ssize_t a, b, kend
        cdef int32_t ordinal = 0
        cdef uint32_t prefix = <uint32_t> self._topic_prefix(scanner, e.topic_idx)
        if e.uniq_pos >= 0 and e.uniq_len > 0:
            if self._key(prefix, base + e.uniq_pos, e.uniq_len, e, i, ordinal, skip, direct) < 0:
                return i
            ordinal += 1
        if e.keys_pos >= 0:
            a = e.keys_pos
            kend = a + e.keys_len
            while a < kend:
                b = a
                while b < kend and base[b] != 32:  # KEY_SEPARATOR " "
                    b += 1
                if b > a:
                    if self._key(prefix, base + a, b - a, e, i, ordinal, skip, direct) < 0:
                        return i
                    ordinal += 1
                a = b + 1
        return -1

    cdef inline int _key(self, uint32_t prefix, const uint8_t *k, Py_ssize_t n, DispatchEntry *e, Py_ssize_t i,
                         int32_t ordinal, int32_t skip, bint direct) except? -2:
        if ordinal < skip:
            return 0
        if not direct:
            self._queue(self._hash(prefix, k, n), e, i, ordinal)
        elif self._count >= self._num:
            self._cut(i, e.phys_offset, ordinal)
            return -1
        else:
            self._put(self._hash(prefix, k, n), e.phys_offset, e.store_ts)
        return 0

    cdef Py_ssize_t _cut_at(self, Py_ssize_t j) noexcept:
        return self._cut(self._pending[j].entry, self._pending[j].phys, self._pending[j].ordinal)

    cdef Py_ssize_t _cut(self, Py_ssize_t i, int64_t phys, int32_t ordinal) noexcept:
        # by offset, not entry number: the rest may come in a later scan (after a failed file creation)
        self._resume_phys = phys
        self._resume_key = ordinal
        return i
