# cython: language_level=3
"""Commit-log record codec: encode records straight into a mapped segment, scan them back.

The layout is documented once, in codec.pxd. Every read of outside data is bounds-checked
before it happens; bad data gives a status (scan) or a typed exception, never a wild read.
"""
cimport cython
cimport numpy as cnp
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.errno cimport EINTR, errno
from libc.string cimport memcmp, memcpy

from bodycrc cimport crc32_body, crc32_hardware
from buffers cimport Borrowed, borrow, give_back
from bytesex cimport get_be16, get_be32, get_be64, put_be16, put_be32, put_be64
from record cimport (CQ_UNIT, RECORD_BLANK_MAGIC, RECORD_END_FILE_MIN_BLANK, RECORD_FIXED_LEN_V4,
                     RECORD_MAX_PROPS_LEN, RECORD_MAX_TOPIC_LEN, RECORD_MESSAGE_MAGIC, RECORD_SYSFLAG_BORNHOST_V6,
                     RECORD_SYSFLAG_STOREHOST_V6, RECORD_SYSFLAG_TRANSACTION, record_length_of)

import errno as errno_
import os

import numpy as np

cnp.import_array()


# The layout's constants for the Python side (broker.store.message, the topic checks, the
# consume queues): the values record.h gives every kernel.
MESSAGE_MAGIC_CODE = RECORD_MESSAGE_MAGIC
BLANK_MAGIC_CODE = RECORD_BLANK_MAGIC
FIXED_LEN_V4 = RECORD_FIXED_LEN_V4
END_FILE_MIN_BLANK_LENGTH = RECORD_END_FILE_MIN_BLANK
SYSFLAG_BORNHOST_V6 = RECORD_SYSFLAG_BORNHOST_V6
SYSFLAG_STOREHOST_V6 = RECORD_SYSFLAG_STOREHOST_V6
SYSFLAG_TRANSACTION = RECORD_SYSFLAG_TRANSACTION
MAX_TOPIC_LEN = RECORD_MAX_TOPIC_LEN
MAX_PROPS_LEN = RECORD_MAX_PROPS_LEN
CQ_UNIT_SIZE = CQ_UNIT
globals()["SCAN_END"] = SCAN_END
globals()["SCAN_BLANK"] = SCAN_BLANK
globals()["SCAN_PARTIAL"] = SCAN_PARTIAL
globals()["SCAN_ZERO"] = SCAN_ZERO
globals()["SCAN_CORRUPT"] = SCAN_CORRUPT

DISPATCH_DTYPE = np.dtype([
    ("phys_offset", "<i8"), ("queue_offset", "<i8"), ("tag_hash", "<i8"), ("store_ts", "<i8"),
    ("keys_pos", "<i8"), ("uniq_pos", "<i8"),
    ("size", "<i4"), ("queue_id", "<i4"), ("sys_flag", "<i4"), ("topic_idx", "<i4"),
    ("keys_len", "<i4"), ("uniq_len", "<i4"),
])
assert DISPATCH_DTYPE.itemsize == sizeof(DispatchEntry)


class MessageIllegal(ValueError):
    """A message the store refuses (RocketMQ's MESSAGE_ILLEGAL): topic or properties too long, bad host."""


class EncodeOverflow(ValueError):
    """The record does not fit in the buffer at the given position."""


# ---------------------------------------------------------------------------------------------
# Buffers

cdef enum:
    # DLedger 0.3.1.2's entry layout (broker/raft/entry_format.py)
    DLEDGER_HEADER = 48
    DLEDGER_INDEX_UNIT = 32
    DLEDGER_MAGIC = 1


@cython.final
cdef class MappedBuffer:
    def __cinit__(self, obj, bint writable=True):
        flags = PyBUF_SIMPLE | (PyBUF_WRITABLE if writable else 0)
        PyObject_GetBuffer(obj, &self.view, flags)
        self.ptr = <uint8_t *> self.view.buf
        self.size = self.view.len
        self.writable = writable
        self.obj = obj

    def __dealloc__(self):
        if self.ptr != NULL:
            PyBuffer_Release(&self.view)
            self.ptr = NULL

    def release(self):
        """Drop the buffer now (before unmapping the file underneath)."""
        if self.ptr != NULL:
            PyBuffer_Release(&self.view)
            self.ptr = NULL
            self.size = 0
            self.obj = None


cdef struct Buf:
    uint8_t *ptr
    Py_ssize_t size
    bint owned          # True when we borrowed a buffer that must be given back
    Borrowed borrowed


cdef int acquire(object obj, Buf *b, bint writable) except -1:
    """Pointer and size of `obj`: a MappedBuffer without any call, bytes directly, else the buffer protocol."""
    if type(obj) is MappedBuffer:
        if (<MappedBuffer> obj).ptr == NULL:
            raise ValueError("MappedBuffer was released")
        if writable and not (<MappedBuffer> obj).writable:
            raise ValueError("MappedBuffer is read-only")
        b.ptr = (<MappedBuffer> obj).ptr
        b.size = (<MappedBuffer> obj).size
        b.owned = False
        return 0
    if not writable and PyBytes_CheckExact(obj):
        b.ptr = <uint8_t *> PyBytes_AS_STRING(obj)
        b.size = PyBytes_GET_SIZE(obj)
        b.owned = False
        return 0
    borrow(obj, &b.borrowed, writable)
    b.ptr = b.borrowed.ptr
    b.size = b.borrowed.size
    b.owned = True
    return 0


cdef inline void release(Buf *b) noexcept:
    if b.owned:
        give_back(&b.borrowed)
        b.owned = False


# ---------------------------------------------------------------------------------------------
# Small helpers

cpdef uint32_t crc32(const uint8_t[::1] data) noexcept:
    """zlib CRC32 with the sign bit cleared, as RocketMQ's UtilAll.crc32."""
    if data.shape[0] == 0:
        return 0
    return body_crc(&data[0], data.shape[0])


cdef inline uint32_t body_crc(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    return crc32_body(p, <size_t> n)


def crc32_in_hardware() -> bool:
    """Whether body CRCs use PCLMULQDQ here (crc32_fast.h), not zlib's tables."""
    return crc32_hardware()


cdef int64_t java_hash_ptr(const uint8_t *p, Py_ssize_t n) except? -1:
    """Java String.hashCode of UTF-8 bytes: over UTF-16 code units, int32 wrap-around."""
    return java_hash_from(0, p, n)


cdef int64_t java_hash_from(uint32_t seed, const uint8_t *p, Py_ssize_t n) except? -1:
    """Java's hash of a string whose hash is `seed`, with the UTF-8 bytes `p` appended to it:
    the index's "topic#key" hashes carry on from the topic prefix's hash."""
    cdef uint32_t h = seed
    cdef Py_ssize_t i = 0
    cdef uint32_t c, cp
    cdef int extra
    while i < n:
        c = p[i]
        if c < 0x80:
            h = h * 31 + c
            i += 1
            continue
        # Multi-byte sequence; anything malformed goes to Python's decoder, which replaces
        # bad sequences like Java's String(byte[], UTF_8) does.
        if c >= 0xF0 and c < 0xF5:
            extra = 3
            cp = c & 0x07
        elif c >= 0xE0 and c < 0xF0:
            extra = 2
            cp = c & 0x0F
        elif c >= 0xC2 and c < 0xE0:
            extra = 1
            cp = c & 0x1F
        else:
            return _java_hash_slow(seed, p, n)
        if i + extra >= n:
            return _java_hash_slow(seed, p, n)
        for k in range(1, extra + 1):
            if (p[i + k] & 0xC0) != 0x80:
                return _java_hash_slow(seed, p, n)
            cp = (cp << 6) | (p[i + k] & 0x3F)
        if (extra == 2 and (cp < 0x800 or (cp >= 0xD800 and cp <= 0xDFFF))) or \
           (extra == 3 and (cp < 0x10000 or cp > 0x10FFFF)):
            return _java_hash_slow(seed, p, n)
        if cp >= 0x10000:
            cp -= 0x10000
            h = h * 31 + (0xD800 + (cp >> 10))
            h = h * 31 + (0xDC00 + (cp & 0x3FF))
        else:
            h = h * 31 + cp
        i += extra + 1
    return <int64_t> <int32_t> h


cdef int64_t _java_hash_slow(uint32_t seed, const uint8_t *p, Py_ssize_t n) except? -1:
    units = PyBytes_FromStringAndSize(<char *> p, n).decode("utf-8", "replace").encode("utf-16-le")
    cdef const uint8_t *u = <const uint8_t *> PyBytes_AS_STRING(units)
    cdef Py_ssize_t m = PyBytes_GET_SIZE(units)
    cdef uint32_t h = seed
    cdef Py_ssize_t i
    for i in range(0, m, 2):
        h = h * 31 + (u[i] | (<uint32_t> u[i + 1] << 8))
    return <int64_t> <int32_t> h


cpdef int64_t java_string_hash(const uint8_t[::1] s) except? -1:
    if s.shape[0] == 0:
        return 0
    return java_hash_ptr(&s[0], s.shape[0])


cdef inline bint key_is(const uint8_t *k, Py_ssize_t klen, const char *name, Py_ssize_t nlen) noexcept nogil:
    return klen == nlen and memcmp(k, name, nlen) == 0


cdef struct PropHits:
    Py_ssize_t tags_pos
    Py_ssize_t tags_len
    Py_ssize_t keys_pos
    Py_ssize_t keys_len
    Py_ssize_t uniq_pos
    Py_ssize_t uniq_len


cdef void find_props(const uint8_t *base, Py_ssize_t start, Py_ssize_t n, PropHits *h) noexcept nogil:
    """Locate TAGS, KEYS and UNIQ_KEY values in `k\\x01v\\x02k\\x01v` properties (trailing \\x02 optional),
    as RocketMQ 4.9.1+'s string2messageProperties: a piece counts only with a non-empty key and value,
    the last duplicate wins. Positions are relative to `base`."""
    h.tags_pos = h.keys_pos = h.uniq_pos = -1
    h.tags_len = h.keys_len = h.uniq_len = 0
    cdef Py_ssize_t i = start, end = start + n, piece, sep, j
    while i < end:
        piece = i
        sep = -1
        j = i
        while j < end and base[j] != 2:
            if sep < 0 and base[j] == 1:
                sep = j
            j += 1
        # piece = [piece, j); RocketMQ ignores pieces without a separator
        if sep >= 0 and j - sep - 1 > 0:
            if key_is(base + piece, sep - piece, b"TAGS", 4):
                h.tags_pos = sep + 1
                h.tags_len = j - sep - 1
            elif key_is(base + piece, sep - piece, b"KEYS", 4):
                h.keys_pos = sep + 1
                h.keys_len = j - sep - 1
            elif key_is(base + piece, sep - piece, b"UNIQ_KEY", 8):
                h.uniq_pos = sep + 1
                h.uniq_len = j - sep - 1
        i = j + 1


def tag_hash(properties) -> int:
    """tagsCode of a record: Java hash of the TAGS property, 0 when there is none."""
    cdef Buf b
    cdef PropHits h
    acquire(properties, &b, False)
    try:
        find_props(b.ptr, 0, b.size, &h)
        if h.tags_pos < 0 or h.tags_len == 0:
            return 0
        return java_hash_ptr(b.ptr + h.tags_pos, h.tags_len)
    finally:
        release(&b)


def record_length(Py_ssize_t body_len, Py_ssize_t topic_len, Py_ssize_t props_len,
                  bint born_v6=False, bint store_v6=False) -> int:
    return record_length_of(20 if born_v6 else 8, 20 if store_v6 else 8, body_len, topic_len, props_len)


def msg_id(store_host, int64_t physical_offset) -> str:
    """offsetMsgId: upper-case hex of store ip + port + physical offset (32 chars for IPv4)."""
    cdef bytes h = bytes(store_host)
    if len(h) != 8 and len(h) != 20:
        raise MessageIllegal(f"store host must be 8 or 20 bytes, got {len(h)}")
    cdef uint8_t off[8]
    put_be64(off, <uint64_t> physical_offset)
    return (h + PyBytes_FromStringAndSize(<char *> off, 8)).hex().upper()


# ---------------------------------------------------------------------------------------------
# Encode

cdef struct Fixed:
    # What a batch shares; body, properties and offsets vary per record.
    const uint8_t *topic
    Py_ssize_t topic_len
    const uint8_t *born_host
    Py_ssize_t born_len
    const uint8_t *store_host
    Py_ssize_t store_len
    int32_t queue_id
    int32_t flag
    int32_t sys_flag
    int64_t born_ts
    int64_t store_ts
    int32_t reconsume_times
    int64_t prepared_tx_offset


cdef int check_fixed(Fixed *f, Py_ssize_t props_len) except -1:
    if f.topic_len <= 0 or f.topic_len > RECORD_MAX_TOPIC_LEN:
        raise MessageIllegal(f"topic length {f.topic_len} outside 1..{RECORD_MAX_TOPIC_LEN} bytes")
    if props_len > RECORD_MAX_PROPS_LEN:
        raise MessageIllegal(f"properties length {props_len} exceeds {RECORD_MAX_PROPS_LEN} bytes")
    if f.born_len != 8 and f.born_len != 20:
        raise MessageIllegal(f"born host must be 8 or 20 bytes, got {f.born_len}")
    if f.store_len != 8 and f.store_len != 20:
        raise MessageIllegal(f"store host must be 8 or 20 bytes, got {f.store_len}")
    return 0


cdef inline Py_ssize_t rec_len(Fixed *f, Py_ssize_t body_len, Py_ssize_t props_len) noexcept nogil:
    return record_length_of(f.born_len, f.store_len, body_len, f.topic_len, props_len)


cdef Py_ssize_t put_record(uint8_t *p, Fixed *f, const uint8_t *body, Py_ssize_t body_len,
                           const uint8_t *props, Py_ssize_t props_len,
                           int64_t queue_offset, int64_t phys_offset) noexcept nogil:
    """Write one record at p (room already checked); returns its length."""
    cdef Py_ssize_t total = rec_len(f, body_len, props_len)
    cdef int32_t sys_flag = f.sys_flag & ~(RECORD_SYSFLAG_BORNHOST_V6 | RECORD_SYSFLAG_STOREHOST_V6)
    if f.born_len == 20:
        sys_flag |= RECORD_SYSFLAG_BORNHOST_V6
    if f.store_len == 20:
        sys_flag |= RECORD_SYSFLAG_STOREHOST_V6
    put_be32(p, <uint32_t> total)
    put_be32(p + 4, RECORD_MESSAGE_MAGIC)
    put_be32(p + 8, body_crc(body, body_len))
    put_be32(p + 12, <uint32_t> f.queue_id)
    put_be32(p + 16, <uint32_t> f.flag)
    put_be64(p + 20, <uint64_t> queue_offset)
    put_be64(p + 28, <uint64_t> phys_offset)
    put_be32(p + 36, <uint32_t> sys_flag)
    put_be64(p + 40, <uint64_t> f.born_ts)
    cdef uint8_t *q = p + 48
    memcpy(q, f.born_host, f.born_len)
    q += f.born_len
    put_be64(q, <uint64_t> f.store_ts)
    q += 8
    memcpy(q, f.store_host, f.store_len)
    q += f.store_len
    put_be32(q, <uint32_t> f.reconsume_times)
    put_be64(q + 4, <uint64_t> f.prepared_tx_offset)
    put_be32(q + 12, <uint32_t> body_len)
    q += 16
    if body_len:
        memcpy(q, body, body_len)
    q += body_len
    q[0] = <uint8_t> f.topic_len
    memcpy(q + 1, f.topic, f.topic_len)
    q += 1 + f.topic_len
    put_be16(q, <uint16_t> props_len)
    if props_len:
        memcpy(q + 2, props, props_len)
    return total


cdef int fill_fixed(Fixed *f, bytes topic, int32_t queue_id, int32_t flag, int32_t sys_flag,
                    int64_t born_ts, bytes born_host, int64_t store_ts, bytes store_host,
                    int32_t reconsume_times, int64_t prepared_tx_offset) except -1:
    f.topic = <const uint8_t *> PyBytes_AS_STRING(topic)
    f.topic_len = PyBytes_GET_SIZE(topic)
    f.born_host = <const uint8_t *> PyBytes_AS_STRING(born_host)
    f.born_len = PyBytes_GET_SIZE(born_host)
    f.store_host = <const uint8_t *> PyBytes_AS_STRING(store_host)
    f.store_len = PyBytes_GET_SIZE(store_host)
    f.queue_id = queue_id
    f.flag = flag
    f.sys_flag = sys_flag
    f.born_ts = born_ts
    f.store_ts = store_ts
    f.reconsume_times = reconsume_times
    f.prepared_tx_offset = prepared_tx_offset
    return 0


def encode_record(buf, Py_ssize_t pos, int64_t physical_offset, int64_t queue_offset, int64_t store_ts,
                  bytes topic not None, int32_t queue_id, body, properties, int32_t flag, int32_t sys_flag,
                  int64_t born_ts, bytes born_host not None, bytes store_host not None,
                  int32_t reconsume_times=0, int64_t prepared_tx_offset=0) -> int:
    """Encode one record at buf[pos:]; returns its length. Raises MessageIllegal, EncodeOverflow."""
    cdef Fixed f
    cdef Buf out, b, pr
    cdef Py_ssize_t total
    fill_fixed(&f, topic, queue_id, flag, sys_flag, born_ts, born_host, store_ts, store_host,
               reconsume_times, prepared_tx_offset)
    acquire(body, &b, False)
    try:
        acquire(properties, &pr, False)
        try:
            check_fixed(&f, pr.size)
            total = rec_len(&f, b.size, pr.size)
            if total > 0x7FFFFFFF:
                raise MessageIllegal(f"record length {total} exceeds 2 GiB")
            acquire(buf, &out, True)
            try:
                if pos < 0 or total > out.size - pos:
                    raise EncodeOverflow(f"record of {total} bytes does not fit at {pos} in a buffer of {out.size}")
                return put_record(out.ptr + pos, &f, b.ptr, b.size, pr.ptr, pr.size, queue_offset, physical_offset)
            finally:
                release(&out)
        finally:
            release(&pr)
    finally:
        release(&b)


def write_blank(buf, Py_ssize_t pos, Py_ssize_t remaining) -> None:
    """End-of-segment marker: [remaining][BLANK_MAGIC_CODE]."""
    cdef Buf out
    acquire(buf, &out, True)
    try:
        if remaining < RECORD_END_FILE_MIN_BLANK or remaining > 0x7FFFFFFF:
            raise ValueError(f"blank of {remaining} bytes outside {RECORD_END_FILE_MIN_BLANK}..2^31-1")
        if pos < 0 or out.size - pos < RECORD_END_FILE_MIN_BLANK:
            raise EncodeOverflow(f"no room for a blank marker at {pos} in a buffer of {out.size}")
        put_be32(out.ptr + pos, <uint32_t> remaining)
        put_be32(out.ptr + pos + 4, RECORD_BLANK_MAGIC)
    finally:
        release(&out)


def encode_batch(buf, Py_ssize_t pos, Py_ssize_t limit, int64_t physical_base, int64_t queue_offset,
                 int64_t store_ts, bytes topic not None, int32_t queue_id, list bodies not None, properties,
                 flag, int32_t sys_flag, int64_t born_ts, bytes born_host not None,
                 bytes store_host not None):
    """Encode bodies[i] as consecutive records from pos while each still leaves room for the
    8-byte blank before `limit`. `properties` is one bytes object for all or a list, one per body;
    `flag` one int for all or a list (a 4.9 broker keeps each batched message's own flag).
    Returns (count encoded, end position). The record at pos gets physical_base and queue_offset."""
    cdef Fixed f
    cdef Buf out, b, pr
    cdef Py_ssize_t n = PyList_GET_SIZE(bodies), i, cur = pos, total
    cdef bint per_msg_props = type(properties) is list
    cdef bint per_msg_flag = type(flag) is list
    cdef object body_obj, prop_obj
    if per_msg_props and PyList_GET_SIZE(properties) != n:
        raise ValueError("properties list must have one entry per body")
    if per_msg_flag and PyList_GET_SIZE(flag) != n:
        raise ValueError("flag list must have one entry per body")
    fill_fixed(&f, topic, queue_id, 0 if per_msg_flag else flag, sys_flag, born_ts, born_host, store_ts, store_host,
               0, 0)
    # Validate the whole batch first: a refused batch writes nothing, so no valid-looking record is
    # ever left past the write position for a crash recovery to bring back.
    if per_msg_props:
        for i in range(n):
            check_fixed(&f, len(<object> PyList_GET_ITEM(properties, i)))
    else:
        check_fixed(&f, len(properties))
    acquire(buf, &out, True)
    try:
        if pos < 0 or limit > out.size:
            raise EncodeOverflow(f"limit {limit} beyond a buffer of {out.size}")
        if not per_msg_props:
            acquire(properties, &pr, False)
        try:
            for i in range(n):
                if per_msg_props:
                    prop_obj = <object> PyList_GET_ITEM(properties, i)
                    acquire(prop_obj, &pr, False)
                body_obj = <object> PyList_GET_ITEM(bodies, i)
                acquire(body_obj, &b, False)
                try:
                    total = rec_len(&f, b.size, pr.size)
                    if total + RECORD_END_FILE_MIN_BLANK > limit - cur:
                        return i, cur
                    if per_msg_flag:
                        f.flag = <int32_t> (<object> PyList_GET_ITEM(flag, i))
                    put_record(out.ptr + cur, &f, b.ptr, b.size, pr.ptr, pr.size,
                               queue_offset + i, physical_base + (cur - pos))
                    cur += total
                finally:
                    release(&b)
                    if per_msg_props:
                        release(&pr)
            return n, cur
        finally:
            if not per_msg_props:
                release(&pr)
    finally:
        release(&out)


# ---------------------------------------------------------------------------------------------
# Scan

@cython.final
cdef class Scanner:
    """Walks records and fills a reusable array of dispatch entries (DISPATCH_DTYPE).

    Topics are interned: entries carry topic_idx into `topics`, so a scan creates no
    Python object per record (only one per topic it has not seen before)."""

    def __cinit__(self, Py_ssize_t max_records=4096):
        if max_records <= 0:
            raise ValueError("max_records must be positive")
        self._topic_ids = {}
        self.topics = []
        self.entries = np.zeros(max_records, dtype=DISPATCH_DTYPE)
        self._out = <DispatchEntry *> cnp.PyArray_DATA(self.entries)
        self._cap = max_records
        self.reason = ""
        self._last_topic = NULL
        self._last_topic_len = -1
        self._last_topic_idx = -1

    cdef int32_t _intern_topic(self, const uint8_t *p, int n) except -1:
        if self._last_topic != NULL and n == self._last_topic_len and memcmp(p, self._last_topic, n) == 0:
            return self._last_topic_idx
        key = PyBytes_FromStringAndSize(<char *> p, n)
        idx = self._topic_ids.get(key)
        if idx is None:
            idx = len(self.topics)
            self.topics.append(key)
            self._topic_ids[key] = idx
        self._last_topic_idx = idx
        # Point at our own bytes object, not at the scanned buffer (it may be unmapped later).
        self._last_topic = <const uint8_t *> PyBytes_AS_STRING(self.topics[idx])
        self._last_topic_len = n
        return self._last_topic_idx

    def scan(self, buf, Py_ssize_t start, Py_ssize_t end, int64_t base_offset, bint check_crc=False,
             Py_ssize_t max_records=-1):
        """Scan records in buf[start:end]. Returns (count, next_pos, status); entries[:count] hold the
        records, `reason` says what was wrong when status is SCAN_CORRUPT."""
        return self._scan_buf(buf, start, end, base_offset, check_crc, max_records, False)

    def scan_entries(self, buf, Py_ssize_t start, Py_ssize_t end, int64_t base_offset, bint check_crc=False,
                     Py_ssize_t max_records=-1):
        """As scan, over DLedger entries (DLedger's commit log): each entry's 48-byte header, then
        one record filling its body exactly (its entry: phys_offset is the record's, pos + 48). An
        entry with an empty body (a new leader's no-op) is stepped over, not counted. next_pos is
        always an entry's start; SCAN_BLANK is DLedger's blank (magic -1) closing a file, SCAN_ZERO
        8 zero bytes, SCAN_PARTIAL an entry not complete before `end`, SCAN_CORRUPT a header that is
        not an entry's or a body that is not one record."""
        return self._scan_buf(buf, start, end, base_offset, check_crc, max_records, True)

    cdef tuple _scan_buf(self, buf, Py_ssize_t start, Py_ssize_t end, int64_t base_offset, bint check_crc,
                         Py_ssize_t max_records, bint entries):
        cdef Buf b
        acquire(buf, &b, False)
        try:
            if start < 0 or end > b.size or start > end:
                raise ValueError(f"scan range [{start}, {end}) outside a buffer of {b.size}")
            if max_records < 0 or max_records > self._cap:
                max_records = self._cap
            return self._scan(b.ptr, start, end, base_offset, check_crc, max_records, entries)
        finally:
            release(&b)

    cdef tuple _scan(self, const uint8_t *base, Py_ssize_t pos, Py_ssize_t end, int64_t base_offset,
                     bint check_crc, Py_ssize_t max_records, bint entries=False):
        cdef Py_ssize_t count = 0, avail, q, body_len, topic_len, props_len, host1, host2
        cdef Py_ssize_t at = 0        # what next_pos says when the scan stops here (entries: the entry's start)
        cdef uint32_t total_u, magic
        cdef int64_t total
        cdef int32_t sys_flag, emagic, esize, ebody
        cdef const uint8_t *p
        cdef DispatchEntry *e
        cdef PropHits h
        self.reason = ""
        while count < max_records:
            avail = end - pos
            if avail == 0:
                return count, pos, SCAN_END
            if entries:
                if avail < 8:
                    return count, pos, SCAN_PARTIAL
                p = base + pos
                emagic = <int32_t> get_be32(p)
                esize = <int32_t> get_be32(p + 4)
                if emagic == -1:
                    return count, pos, SCAN_BLANK
                if emagic == 0 and esize == 0:
                    return count, pos, SCAN_ZERO
                if emagic != DLEDGER_MAGIC or esize < DLEDGER_HEADER:
                    self.reason = f"entry header magic {emagic} size {esize}"
                    return count, pos, SCAN_CORRUPT
                if esize > avail:
                    return count, pos, SCAN_PARTIAL
                ebody = <int32_t> get_be32(p + 44)
                if ebody != esize - DLEDGER_HEADER:
                    self.reason = f"entry bodySize {ebody} + {DLEDGER_HEADER} != size {esize}"
                    return count, pos, SCAN_CORRUPT
                if ebody == 0:  # a new leader's no-op: nothing to dispatch
                    pos += esize
                    continue
                at = pos
                pos += DLEDGER_HEADER
                avail = ebody  # the record fills the body exactly
            else:
                at = pos
            if avail < 8:
                if entries:
                    self.reason = f"entry body of {avail} bytes is not a record"
                    return count, at, SCAN_CORRUPT
                return count, pos, SCAN_PARTIAL
            p = base + pos
            total_u = get_be32(p)
            magic = get_be32(p + 4)
            total = <int32_t> total_u
            if entries and total != avail:
                self.reason = f"record of {total} bytes in an entry body of {avail}"
                return count, at, SCAN_CORRUPT
            if magic == RECORD_BLANK_MAGIC:
                if entries:
                    self.reason = "a commit-log blank in an entry body"
                    return count, at, SCAN_CORRUPT
                return count, pos, SCAN_BLANK
            if magic == 0 and total == 0:
                return count, pos, SCAN_ZERO
            if magic != RECORD_MESSAGE_MAGIC:
                self.reason = f"bad magic code 0x{magic:08X}"
                return count, at, SCAN_CORRUPT
            if total < RECORD_FIXED_LEN_V4:
                self.reason = f"total size {total} below the minimum {RECORD_FIXED_LEN_V4}"
                return count, at, SCAN_CORRUPT
            if total > avail:
                return count, pos, SCAN_PARTIAL
            # Walk the variable part inside [p, p+total): every length is checked against total.
            sys_flag = <int32_t> get_be32(p + 36)
            host1 = 20 if sys_flag & RECORD_SYSFLAG_BORNHOST_V6 else 8
            host2 = 20 if sys_flag & RECORD_SYSFLAG_STOREHOST_V6 else 8
            q = 48 + host1 + 8 + host2 + 4 + 8
            if q + 4 > total:
                self.reason = f"header of {q + 4} bytes exceeds total size {total}"
                return count, at, SCAN_CORRUPT
            body_len = <int32_t> get_be32(p + q)
            q += 4
            if body_len < 0 or body_len > total - q - 1:
                self.reason = f"body length {body_len} inconsistent with total size {total}"
                return count, at, SCAN_CORRUPT
            if check_crc and body_crc(p + q, body_len) != get_be32(p + 8):
                self.reason = f"body CRC 0x{body_crc(p + q, body_len):08X} != stored 0x{get_be32(p + 8):08X}"
                return count, at, SCAN_CORRUPT
            q += body_len
            topic_len = <int8_t> p[q]
            q += 1
            if topic_len < 0 or topic_len > total - q - 2:
                self.reason = f"topic length {topic_len} inconsistent with total size {total}"
                return count, at, SCAN_CORRUPT
            e = &self._out[count]
            e.topic_idx = self._intern_topic(p + q, <int> topic_len)
            q += topic_len
            props_len = <int16_t> get_be16(p + q)
            q += 2
            if props_len < 0 or q + props_len != total:
                self.reason = f"properties length {props_len} inconsistent with total size {total}"
                return count, at, SCAN_CORRUPT
            find_props(base, pos + q, props_len, &h)
            e.phys_offset = base_offset + pos
            e.size = <int32_t> total
            e.queue_id = <int32_t> get_be32(p + 12)
            e.queue_offset = <int64_t> get_be64(p + 20)
            e.sys_flag = sys_flag
            e.store_ts = <int64_t> get_be64(p + 48 + host1)
            e.tag_hash = java_hash_ptr(base + h.tags_pos, h.tags_len) if h.tags_pos >= 0 and h.tags_len > 0 else 0
            e.keys_pos = h.keys_pos
            e.keys_len = <int32_t> h.keys_len
            e.uniq_pos = h.uniq_pos
            e.uniq_len = <int32_t> h.uniq_len
            pos += total
            count += 1
        return count, pos, SCAN_END


def scan(buf, Py_ssize_t start, Py_ssize_t end, int64_t base_offset, bint check_crc=False, max_records=None):
    """Convenience form of Scanner.scan for tests and tools: returns (list of dicts, next_pos, status,
    reason) with the same keys as the pure-Python twin. max_records None or negative: no limit."""
    cdef Scanner s = Scanner(1024)
    cdef Py_ssize_t want = -1 if max_records is None or max_records < 0 else max_records
    data = bytes(memoryview(buf)[start:end])
    out = []
    pos = start
    while True:
        chunk = 1024 if want < 0 else min(1024, want - len(out))
        count, pos, status = s.scan(buf, pos, end, base_offset, check_crc, chunk)
        for i in range(count):
            e = s.entries[i]
            kp, kl, up, ul = int(e["keys_pos"]), int(e["keys_len"]), int(e["uniq_pos"]), int(e["uniq_len"])
            out.append({
                "phys_offset": int(e["phys_offset"]), "size": int(e["size"]), "queue_id": int(e["queue_id"]),
                "queue_offset": int(e["queue_offset"]), "tag_hash": int(e["tag_hash"]),
                "store_ts": int(e["store_ts"]), "sys_flag": int(e["sys_flag"]),
                "topic": s.topics[e["topic_idx"]],
                "keys": data[kp - start:kp - start + kl] if kp >= 0 else b"",
                "uniq": data[up - start:up - start + ul] if up >= 0 else b"",
                "body_crc_ok": True,
            })
        if status != SCAN_END or pos == end or (want >= 0 and len(out) >= want):
            return out, pos, status, s.reason


# ---------------------------------------------------------------------------------------------
# Segment warm-up

cdef extern from "<sys/mman.h>" nogil:
    int madvise(void *addr, size_t length, int advice)
    enum:
        MADV_RANDOM

def advise_random(MappedBuffer buf not None, Py_ssize_t start=0, Py_ssize_t end=-1) -> None:
    """madvise(MADV_RANDOM) the pages covering buf[start:end]: page faults there read no
    neighbours, so the page cache fills those pages with 4 KiB folios.

    Why: on kernels with large folios (ext4, >= 6.16) the fault read-around of a sequential
    pass through a map ramps folios up to 2 MiB, and a folio is written back whole: every
    4 KiB dirtied + fdatasync then writes 2 MiB (1.3 ms instead of 0.1 ms here, see
    bench/segment_probe.py). The commit log's unwritten pages must never be faulted that way.
    buf must start at the map's start (page-aligned), as MappedFile's do."""
    if end < 0:
        end = buf.size
    if start < 0 or end > buf.size or start > end:
        raise ValueError(f"advise range [{start}, {end}) outside a buffer of {buf.size}")
    cdef Py_ssize_t lo = start - start % 4096
    if end <= lo:
        return
    if madvise(buf.ptr + lo, end - lo, MADV_RANDOM) != 0:
        raise OSError(errno, os.strerror(errno), f"madvise(MADV_RANDOM) of [{lo}, {end})")


# Linux >= 5.14; older kernels answer EINVAL and the caller stops asking.
cdef enum:
    MADV_POPULATE_READ_ = 22

def populate_read(MappedBuffer buf not None, Py_ssize_t start, Py_ssize_t end) -> None:
    """madvise(MADV_POPULATE_READ) the pages covering buf[start:end], GIL released: they enter
    the page cache (and this map) without being dirtied, so the writer's later stores there take
    no page-allocating fault. Never writes a byte, so it may run beside the writer.

    Why (issue 16): on this machine a page the page cache takes from memory it never used before
    costs ~2.6 CPU-us per KiB (the host backs it on first touch), and the commit log's writer
    paid that inside its stores through the map: half the broker's CPU under batch sends
    (perf: `__pi_memset` under `filemap_fault`). Done ahead from a thread (store.warm_ahead), the
    cost moves off the event loop to the other core."""
    if start < 0 or end > buf.size or start > end:
        raise ValueError(f"populate range [{start}, {end}) outside a buffer of {buf.size}")
    cdef Py_ssize_t lo = start - start % 4096
    cdef uint8_t *p = buf.ptr
    cdef int rc, err = 0
    if end <= lo or p == NULL:
        return
    with nogil:
        rc = madvise(p + lo, end - lo, MADV_POPULATE_READ_)
        if rc != 0:
            err = errno  # before the GIL is taken back: that may set errno
    if rc != 0:
        raise OSError(err, os.strerror(err), f"madvise(MADV_POPULATE_READ) of [{lo}, {end})")


cdef extern from "<unistd.h>" nogil:
    ssize_t pwrite(int fd, const void *buf, size_t count, long offset)

cdef extern from "<stdlib.h>" nogil:
    void *calloc(size_t nmemb, size_t size)
    void free(void *ptr)


def warm_file(int fd, Py_ssize_t start, Py_ssize_t end, Py_ssize_t chunk) -> None:
    """Write zeros over [start, end) of a file with pwrite(2) of `chunk` bytes, GIL released.

    This is our version of RocketMQ's warm-up (a zero per page through the map), chosen for the
    folio size it leaves in the page cache, which decides two costs at once (kernel >= 6.16 ext4,
    measured by bench/segment_probe.py): a buffered write makes folios of its own size, a
    sequential pass through a map makes them up to 2 MiB. Big folios make the writer's page
    faults cheap (one per folio: 5 GiB/s through the map with 64 KiB, 0.9 GiB/s with 4 KiB), but
    writeback is per folio, so SYNC_FLUSH's 4 KiB fdatasync writes the whole folio: 2 MiB costs
    1.3 ms, 16 KiB costs 20-40 us more than 4 KiB. The caller picks the chunk for its flush
    mode (broker.store.mapped_file)."""
    if start < 0 or end < start or chunk <= 0 or chunk % 4096:
        raise ValueError(f"warm range [{start}, {end}) in chunks of {chunk}")
    cdef void *zeros = calloc(1, chunk)
    if zeros == NULL:
        raise MemoryError()
    cdef Py_ssize_t pos = start
    cdef Py_ssize_t n
    cdef ssize_t rc = 0
    cdef int err = 0
    try:
        with nogil:
            while pos < end:
                n = chunk if end - pos > chunk else end - pos
                rc = pwrite(fd, zeros, n, pos)
                if rc < 0:
                    err = errno
                    if err == EINTR:
                        continue
                    break
                if rc == 0:  # nothing written, nor an error: trying again would spin
                    break
                pos += rc
        if rc < 0:
            raise OSError(err, os.strerror(err), f"warming at offset {pos}")
        if pos < end:
            raise OSError(errno_.EIO, "pwrite wrote no byte", f"warming at offset {pos}")
    finally:
        free(zeros)


# ---------------------------------------------------------------------------------------------
# Appender: the single writer's put path in one call

from clock cimport now_ms



@cython.final
cdef class QueueState:
    """One queue's place in the writer: its next queue offset (an entry of RocketMQ's
    topicQueueTable) and where its last message ends (a reader waits for the reput to pass it).
    The send path holds these directly, so an append costs no dictionary lookup."""

    def __cinit__(self, bytes topic not None, int32_t queue_id, int64_t next_offset=0):
        self.topic = topic
        self.queue_id = queue_id
        self.next_offset = next_offset
        self.last_end = 0
        self.touched = 0

    def __repr__(self):
        return f"QueueState({self.topic!r}, {self.queue_id}, next={self.next_offset}, end={self.last_end})"


@cython.final
cdef class Appender:
    """The commit log's write position, queue table and current segment, so that one put is one
    call: it stamps the store time, assigns the queue offset, encodes the record at the write
    position and advances. A record that does not fit before the segment's 8-byte blank is not
    written (append returns None, append_c 1): the caller seals the segment and attaches the next.

    Entry mode (`entries=True`, DLedger's commit log): each record is the body of the next entry
    of the Raft log, written as broker.raft.entry_store writes one: the 48-byte DLedger header
    (magic 1, size, index, term, pos, channel 0, chainCrc 0, bodyCrc of the record, bodySize)
    at the write position, the record after it (its PHYSICALOFFSET is pos + 48), and the 32-byte
    index entry (magic 1, pos, size, index, term) at entry_index x 32 of the attached index file.
    The entry goes only where it leaves 8 bytes in its data file and its index entry fits in the
    index file, else append_c returns 1 and writes nothing: the entry store's own append then
    writes the blank and opens the next files (place_entries and attach follow it). A queue
    whose next offset is unknown (-1: a queue's first use in a leadership) also returns 1: the
    caller reads it from the consume queue first."""

    def __cinit__(self, bytes store_host not None, Py_ssize_t max_body, dict queue_offsets not None, int64_t wrote,
                  bint entries=False):
        if len(store_host) != 8 and len(store_host) != 20:
            raise MessageIllegal(f"store host must be 8 or 20 bytes, got {len(store_host)}")
        self.store_host = store_host
        self.max_body = max_body
        self._queues = {}
        for key, nxt in queue_offsets.items():
            self._queues[key] = QueueState(key[0], key[1], nxt)
        self.wrote = wrote
        self.seg = None
        self.seg_base = -1
        self.entries = entries
        self.iseg = None
        self.iseg_base = -1
        self.entry_index = 0
        self.term = 0

    cpdef QueueState queue(self, bytes topic, int32_t queue_id):
        """The queue's state, made on its first use."""
        key = (topic, queue_id)
        q = self._queues.get(key)
        if q is None:
            q = QueueState(topic, queue_id, -1 if self.entries else 0)
            self._queues[key] = q
        return <QueueState> q

    def next_offset(self, bytes topic not None, int32_t queue_id) -> int:
        q = self._queues.get((topic, queue_id))
        return (<QueueState> q).next_offset if q is not None else 0

    def last_end(self, bytes topic not None, int32_t queue_id) -> int:
        q = self._queues.get((topic, queue_id))
        return (<QueueState> q).last_end if q is not None else 0

    @property
    def queue_offsets(self) -> dict:
        """RocketMQ's topicQueueTable as a new dict: (topic bytes, queue id) -> next queue offset."""
        return {k: (<QueueState> q).next_offset for k, q in self._queues.items()}

    def place_entries(self, int64_t wrote, int64_t entry_index, int64_t term):
        """Entry mode: the next entry goes at `wrote` (the entry store's end) with this index and
        term. Both files are detached: attach the data file holding `wrote` and the index file
        holding entry_index x 32 before appending."""
        if not self.entries:
            raise ValueError("place_entries is for an Appender in entry mode")
        if entry_index < 0 or wrote < 0:
            raise ValueError(f"entry {entry_index} at {wrote}: both must be >= 0")
        self.wrote = wrote
        self.entry_index = entry_index
        self.term = term
        self.seg = None
        self.seg_base = -1
        self.iseg = None
        self.iseg_base = -1

    def attach_index(self, MappedBuffer iseg, int64_t base):
        """Entry mode: the index file (starting at byte `base` of the index) the next entry's
        32-byte index entry goes to."""
        if not self.entries:
            raise ValueError("attach_index is for an Appender in entry mode")
        if iseg is not None and not (base <= self.entry_index * 32 <= base + iseg.size):
            raise ValueError(f"index entry {self.entry_index} outside index file [{base}, {base + iseg.size})")
        self.iseg = iseg
        self.iseg_base = base

    @property
    def index_end(self) -> int:
        """Entry mode: where the attached index file ends (-1: none attached)."""
        return self.iseg_base + self.iseg.size if self.iseg is not None else -1

    def forget_offsets(self):
        """Every queue's next offset unknown again (-1): entry mode's leadership change, after
        which each queue's next offset is read from its consume queue on its first use."""
        for q in self._queues.values():
            (<QueueState> q).next_offset = -1

    def set_next_offset(self, bytes topic not None, int32_t queue_id, int64_t next_offset):
        self.queue(topic, queue_id).next_offset = next_offset

    def rewind(self, int64_t wrote, bytes topic not None, int32_t queue_id, int64_t next_offset):
        """Take back unpublished records of one queue: the write position and the queue's next
        offset go back (the segment stays attached; the caller zeroes what it must)."""
        if self.entries:
            raise ValueError("an Appender in entry mode does not rewind (the entry store truncates)")
        if self.seg is not None and not (self.seg_base <= wrote <= self.wrote):
            raise ValueError(f"cannot rewind to {wrote}: the segment holds [{self.seg_base}, {self.wrote}]")
        self.wrote = wrote
        self.queue(topic, queue_id).next_offset = next_offset

    def attach(self, MappedBuffer seg, int64_t base):
        """Make `seg` (starting at absolute offset `base`) the segment appends go to."""
        if seg is not None and not (base <= self.wrote <= base + seg.size):
            raise ValueError(f"write position {self.wrote} outside segment [{base}, {base + seg.size})")
        self.seg = seg
        self.seg_base = base

    @property
    def segment_end(self) -> int:
        return self.seg_base + self.seg.size if self.seg is not None else -1

    def seal(self) -> int:
        """Close the current segment with the blank marker; the write position moves to its end."""
        if self.seg is None:
            raise ValueError("no segment attached")
        if self.entries:
            raise ValueError("an Appender in entry mode does not seal (the entry store writes DLedger's blank)")
        cdef Py_ssize_t pos = self.wrote - self.seg_base
        cdef Py_ssize_t remaining = self.seg.size - pos
        if remaining >= RECORD_END_FILE_MIN_BLANK:
            put_be32(self.seg.ptr + pos, <uint32_t> remaining)
            put_be32(self.seg.ptr + pos + 4, RECORD_BLANK_MAGIC)
        self.wrote = self.seg_base + self.seg.size
        self.seg = None
        return self.wrote

    cdef int append_c(self, QueueState q, const uint8_t *body, Py_ssize_t body_len, const uint8_t *props,
                      Py_ssize_t props_len, int32_t flag, int32_t sys_flag, int64_t born_ts,
                      const uint8_t *born_host, Py_ssize_t born_len, int32_t reconsume_times,
                      AppendOut *out) except -1:
        """Append one record to queue q. Returns 0 with `out` filled, or 1 when it does not fit
        in the attached segment (or none is attached): nothing written. born_ts < 0: now."""
        cdef Fixed f
        cdef Py_ssize_t total, pos, hdr = 0, ipos = 0
        cdef int64_t ts, phys
        cdef uint8_t *e
        if self.seg is None:
            return 1
        if self.entries:
            if q.next_offset < 0 or self.iseg is None:
                return 1
            hdr = DLEDGER_HEADER
            ipos = self.entry_index * DLEDGER_INDEX_UNIT - self.iseg_base
            if ipos < 0 or ipos + DLEDGER_INDEX_UNIT > self.iseg.size:
                return 1
        if body_len > self.max_body:
            raise MessageIllegal(f"body of {body_len} bytes exceeds maxMessageSize {self.max_body}")
        ts = now_ms()
        f.topic = <const uint8_t *> PyBytes_AS_STRING(q.topic)
        f.topic_len = PyBytes_GET_SIZE(q.topic)
        f.born_host = born_host
        f.born_len = born_len
        f.store_host = <const uint8_t *> PyBytes_AS_STRING(self.store_host)
        f.store_len = PyBytes_GET_SIZE(self.store_host)
        f.queue_id = q.queue_id
        f.flag = flag
        f.sys_flag = sys_flag
        f.born_ts = born_ts if born_ts >= 0 else ts
        f.store_ts = ts
        f.reconsume_times = reconsume_times
        f.prepared_tx_offset = 0
        check_fixed(&f, props_len)
        total = rec_len(&f, body_len, props_len)
        pos = self.wrote - self.seg_base
        if hdr + total + RECORD_END_FILE_MIN_BLANK > self.seg.size - pos:
            if pos == 0:
                raise MessageIllegal(f"record of {total} bytes does not fit in a {self.seg.size}-byte segment")
            return 1
        phys = self.wrote + hdr
        put_record(self.seg.ptr + pos + hdr, &f, body, body_len, props, props_len, q.next_offset, phys)
        if hdr:
            e = self.seg.ptr + pos
            put_be32(e, DLEDGER_MAGIC)
            put_be32(e + 4, <uint32_t> (hdr + total))
            put_be64(e + 8, <uint64_t> self.entry_index)
            put_be64(e + 16, <uint64_t> self.term)
            put_be64(e + 24, <uint64_t> self.wrote)
            put_be32(e + 32, 0)  # channel
            put_be32(e + 36, 0)  # chainCrc (DLedger leaves it 0)
            put_be32(e + 40, crc32_body(e + hdr, <size_t> total))
            put_be32(e + 44, <uint32_t> total)
            e = self.iseg.ptr + ipos
            put_be32(e, DLEDGER_MAGIC)
            put_be64(e + 4, <uint64_t> self.wrote)
            put_be32(e + 12, <uint32_t> (hdr + total))
            put_be64(e + 16, <uint64_t> self.entry_index)
            put_be64(e + 24, <uint64_t> self.term)
            self.entry_index += 1
        out.phys = phys
        out.queue_offset = q.next_offset
        out.size = <int32_t> total
        out.store_ts = ts
        q.next_offset += 1
        self.wrote = phys + total
        q.last_end = self.wrote
        return 0

    def append(self, bytes topic not None, int32_t queue_id, body, bytes properties not None, int32_t flag,
               int32_t sys_flag, int64_t born_ts, bytes born_host not None, int32_t reconsume_times=0):
        """Append one record. Returns (physical offset, queue offset, size, store timestamp), or None
        when the segment is full. born_ts < 0 means 'now'."""
        cdef Buf b
        cdef AppendOut out
        cdef QueueState q = self.queue(topic, queue_id)
        acquire(body, &b, False)
        try:
            if self.append_c(q, b.ptr, b.size, <const uint8_t *> PyBytes_AS_STRING(properties),
                             PyBytes_GET_SIZE(properties), flag, sys_flag, born_ts,
                             <const uint8_t *> PyBytes_AS_STRING(born_host), PyBytes_GET_SIZE(born_host),
                             reconsume_times, &out):
                return None
            return out.phys, out.queue_offset, out.size, out.store_ts
        finally:
            release(&b)

    def append_batch(self, bytes topic not None, int32_t queue_id, list bodies not None, properties,
                     flag, int32_t sys_flag, int64_t born_ts, bytes born_host not None):
        """Append as many of `bodies` as fit in the segment; returns (count, first physical offset,
        first queue offset, store timestamp). count < len(bodies) means: seal, attach, call again
        with the rest."""
        cdef int64_t ts = now_ms(), qo, phys
        cdef Py_ssize_t i, n = PyList_GET_SIZE(bodies)
        cdef object body
        if self.entries:
            raise ValueError("an Appender in entry mode appends one record per entry (append)")
        for i in range(n):
            body = <object> PyList_GET_ITEM(bodies, i)
            if len(body) > self.max_body:
                raise MessageIllegal(f"body {i} of the batch ({len(body)} bytes) exceeds maxMessageSize {self.max_body}")
        if self.seg is None:
            return 0, self.wrote, -1, ts
        cdef QueueState q = self.queue(topic, queue_id)
        qo = q.next_offset
        phys = self.wrote
        count, end = encode_batch(self.seg, self.wrote - self.seg_base, self.seg.size, phys, qo, ts, topic,
                                  queue_id, bodies, properties, flag, sys_flag, born_ts if born_ts >= 0 else ts,
                                  born_host, self.store_host)
        if count == 0 and self.wrote == self.seg_base:
            raise MessageIllegal("a record of the batch does not fit in an empty segment")
        if count:
            q.next_offset = qo + count
            self.wrote = self.seg_base + end
            q.last_end = self.wrote
        return count, phys, qo, ts
