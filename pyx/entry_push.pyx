# cython: language_level=3
"""A follower's side of DLedger's APPEND push in bulk (broker/raft/entry_handler.py): one call
checks every entry a push carries, one call per data file copies them into the follower's log.

`check_entries` is what broker.raft.push_protocol documents for an APPEND's body (the leader's
entries as its data files hold them, 48-byte header then body, back to back), with no Python
object per entry; `append_entries` copies a run of them into a mapped data file with one memcpy
and writes their 32-byte index units, as DLedgerEntryStore's own append writes one entry
(broker/raft/entry_store.py). Layouts: broker/raft/entry_format.py. Nothing is read or written
outside the buffers given; an entry `append_entries` cannot place (another file, another position)
is left to the entry store's append, which writes DLedger's blank and opens the next file.

Given the data file's descriptor, `append_entries` writes a run with pwrite rather than through
the map: the page cache then takes the run's pages in the write itself, where a store through
the map takes a read fault per page (the warm-ahead thread's, ahead) and then a write fault; a
follower's copy of 1 KiB entries in runs of 8 cost 0.6 CPU-us per entry so, 1.8 through the map
(the warm-ahead's populate included; measured on this machine, fresh fallocated files).
"""
from libc.errno cimport EINTR, errno
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset
from posix.types cimport off_t
from posix.unistd cimport pwrite

import os

from bodycrc cimport crc32_body
from buffers cimport Borrowed, borrow, check_range, give_back
from bytesex cimport get_be32, get_be64, put_be32, put_be64

cdef enum:
    HEADER_SIZE = 48      # DLedgerEntry.BODY_OFFSET
    MIN_BLANK_LEN = 8     # what an entry leaves free after it in its file
    INDEX_UNIT = 32
    MAGIC_1 = 1


class PushBodyError(ValueError):
    """An APPEND's body that is not the entries its request announces."""


cdef inline int32_t be32(const uint8_t *p) noexcept nogil:
    return <int32_t> get_be32(p)


cdef inline int64_t be64(const uint8_t *p) noexcept nogil:
    return <int64_t> get_be64(p)


def check_entries(body, int64_t index, int64_t pos, int64_t count, int64_t term):
    """Every entry of an APPEND's body: exactly `count` entries filling it, each header DLedger's
    (magic 1, size >= 48 with bodySize = size - 48, within the body, index, term and pos >= 0),
    indexes consecutive from `index`, the first at `pos`, each one's pos at or after the end of the
    one before, terms never decreasing nor above `term`, the body's CRC equal to bodyCrc when that
    is not 0. Returns (first entry's term, last entry's term); PushBodyError naming the first
    entry that is not so."""
    cdef Borrowed b
    borrow(body, &b, False)
    cdef const uint8_t *p = b.ptr
    cdef Py_ssize_t n = b.size, at = 0, room
    cdef int64_t expect = index, last_end = -1, last_term = -1, first_term = -1, found = 0
    cdef int64_t e_index, e_term, e_pos
    cdef int32_t magic, size, body_size, crc
    cdef uint32_t actual
    try:
        while at < n:
            room = n - at
            if room < HEADER_SIZE:
                raise PushBodyError(f"{room} bytes after entry {expect - 1}, less than a header")
            magic = be32(p + at)
            size = be32(p + at + 4)
            e_index = be64(p + at + 8)
            e_term = be64(p + at + 16)
            e_pos = be64(p + at + 24)
            crc = be32(p + at + 40)
            body_size = be32(p + at + 44)
            if magic != MAGIC_1:
                raise PushBodyError(f"entry {e_index}: magic {magic} is not {MAGIC_1}")
            if size < HEADER_SIZE or body_size != size - HEADER_SIZE:
                raise PushBodyError(f"entry {e_index}: size {size} with bodySize {body_size}")
            if size > room:
                raise PushBodyError(f"entry {e_index}: size {size} runs past the push ({room} bytes left)")
            if e_index < 0 or e_term < 0 or e_pos < 0:
                raise PushBodyError(f"entry index {e_index}, term {e_term}, pos {e_pos}: negative")
            if e_index != expect:
                raise PushBodyError(f"entry {e_index} where entry {expect} belongs")
            if e_term > term:
                raise PushBodyError(f"entry {e_index} of term {e_term} pushed in term {term}")
            if e_term < last_term:
                raise PushBodyError(f"entry {e_index} of term {e_term} after one of term {last_term}")
            if found and e_pos < last_end:
                raise PushBodyError(f"entry {e_index} at pos {e_pos} overlaps the one before (ending at {last_end})")
            if not found and e_pos != pos:
                raise PushBodyError(f"entry {e_index} at pos {e_pos}, the push says {pos}")
            if crc != 0:
                actual = crc32_body(p + at + HEADER_SIZE, <size_t> body_size)
                if actual != <uint32_t> crc:
                    raise PushBodyError(f"entry {e_index}: the body does not match its CRC {crc}")
            if not found:
                first_term = e_term
            found += 1
            at += size
            expect += 1
            last_end = e_pos + size
            last_term = e_term
        if found != count:
            raise PushBodyError(f"{found} entries in a push of {count}")
        return first_term, last_term
    finally:
        give_back(&b)


def append_entries(body, Py_ssize_t at, int64_t index, int64_t wrote, int64_t min_term,
                   seg, int64_t seg_base, iseg, int64_t iseg_base, int fd=-1):
    """Copy the entries of body[at:] (checked by check_entries) that continue a log in the data
    file `seg` (the log's bytes from seg_base): the first must be entry `index` at position
    `wrote`, each next one the next index right after it, each leaving MIN_BLANK_LEN bytes free
    after it in `seg`, of a term not below the one before (`min_term` for the first), with its
    index unit inside the index file `iseg` (the index's bytes from iseg_base; entry i's unit is
    at i x 32). The headers are the leader's, channel and chainCrc written 0 as the entry store
    writes them; each index unit is (magic 1, pos, size, index, term). Stops before the first entry
    that does not continue the log so (it opens the next file, or is not the one expected: the
    entry store's append deals with it). Returns (entries appended, the body position after
    them, the log's end after them, the last one's term or min_term if none).

    `fd` >= 0: the descriptor of the file `seg` maps from its first byte (opened for writing); a run whose headers all
    carry channel and chainCrc 0 (as this store's leaders write them) is written at its place in
    the file with pwrite, the same bytes. A write that fails raises OSError with the index units
    unwritten and the bytes it wrote zeroed again (past the log's end every byte is zero)."""
    cdef Borrowed b, d, x
    borrow(body, &b, False)
    try:
        borrow(seg, &d, True)
        try:
            borrow(iseg, &x, True)
            try:
                check_range(at, b.size, b.size)
                return _append(b.ptr, b.size, at, index, wrote, min_term, d.ptr, d.size, seg_base,
                               x.ptr, x.size, iseg_base, fd)
            finally:
                give_back(&x)
        finally:
            give_back(&d)
    finally:
        give_back(&b)


cdef tuple _append(const uint8_t *p, Py_ssize_t n, Py_ssize_t at, int64_t index, int64_t wrote,
                   int64_t min_term, uint8_t *seg, Py_ssize_t seg_size, int64_t seg_base,
                   uint8_t *iseg, Py_ssize_t iseg_size, int64_t iseg_base, int fd):
    cdef Py_ssize_t start = at
    cdef int64_t rel = wrote - seg_base, first_rel, k = 0, i, term = min_term, e_term, uoff
    cdef int32_t size
    cdef const uint8_t *e
    cdef uint8_t *u
    cdef bint zeroed = True   # every header of the run already carries channel 0 and chainCrc 0
    if rel < 0 or rel > seg_size:
        return 0, at, wrote, min_term
    first_rel = rel
    # the run: every entry that continues the log in this file, contiguous in the body and in the file
    while n - at >= HEADER_SIZE:
        size = be32(p + at + 4)
        e_term = be64(p + at + 16)
        uoff = (index + k) * INDEX_UNIT - iseg_base
        if (be32(p + at) != MAGIC_1 or size < HEADER_SIZE or be32(p + at + 44) != size - HEADER_SIZE
                or size > n - at or be64(p + at + 8) != index + k or be64(p + at + 24) != seg_base + rel
                or e_term < term or rel + size + MIN_BLANK_LEN > seg_size
                or uoff < 0 or uoff + INDEX_UNIT > iseg_size):
            break
        if zeroed and (be32(p + at + 32) != 0 or be32(p + at + 36) != 0):
            zeroed = False
        term = e_term
        at += size
        rel += size
        k += 1
    if k == 0:
        return 0, start, wrote, min_term
    if fd >= 0 and zeroed:
        _pwrite_run(fd, p + start, rel - first_rel, first_rel, seg + first_rel)
    else:
        memcpy(seg + first_rel, p + start, <size_t> (rel - first_rel))
        # the headers as this store writes them
        u = seg + first_rel
        for i in range(k):
            put_be32(u + 32, 0)   # channel
            put_be32(u + 36, 0)   # chainCrc
            u += be32(u + 4)
    # the index units, from the pushed headers (the map's pages of a run written with pwrite are
    # left unfaulted)
    e = p + start
    for i in range(k):
        size = be32(e + 4)
        u = iseg + (index + i) * INDEX_UNIT - iseg_base
        put_be32(u, MAGIC_1)
        put_be64(u + 4, get_be64(e + 24))    # pos
        put_be32(u + 12, <uint32_t> size)
        put_be64(u + 16, <uint64_t> (index + i))
        put_be64(u + 24, get_be64(e + 16))   # term
        e += size
    return k, at, seg_base + rel, term


cdef int _pwrite_run(int fd, const uint8_t *src, int64_t n, int64_t off, uint8_t *mapped) except -1:
    """All n bytes at `off` of the file; on a failure the bytes written are zeroed through the
    map (`mapped`: the same place) and OSError raised. The GIL is kept, as by the copy into the
    map this replaces: a write of a few pages into the page cache is shorter than handing the GIL
    to another thread and taking it back."""
    cdef int64_t done = 0
    cdef ssize_t w
    cdef int err = 0
    while done < n:
        w = pwrite(fd, src + done, <size_t> (n - done), <off_t> (off + done))
        if w > 0:
            done += w
        elif w < 0 and errno == EINTR:
            continue
        else:  # 0 bytes written (nothing more will be) or an error
            err = errno if w < 0 else 5  # EIO
            break
    if err:
        memset(mapped, 0, <size_t> done)
        raise OSError(err, f"pwrite of {n} bytes at {off} of a data file: {os.strerror(err)}")
    return 0
