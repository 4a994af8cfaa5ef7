# Interface of the write buffer the kernels render wire bytes into (py-pgproto's WriteBuffer shape).
#
# A growable byte buffer: 1 KiB inline (a response header fits), then PyMem_Realloc'd, doubling.
# Writers append at the end; patch_be32 back-fills a length written earlier (a frame prefix, the
# ROCKETMQ header's ext length). While a memoryview of it is exported (view(), or any buffer export)
# the buffer refuses, with BufferError, anything that would move or change the bytes the view shows:
# growing, clear(), patch_be32. Appending within the current capacity stays allowed: a view's length
# is fixed when it is taken, so it never sees bytes written after.
#
# Every cdef writer returns 0 or raises (except -1): MemoryError, BufferError, ValueError.

from cpython.object cimport PyObject
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef enum:
    WBUF_INLINE = 1024


cdef class WriteBuffer:
    cdef uint8_t *_buf          # _inline, or a PyMem block once grown
    cdef Py_ssize_t _size       # capacity of _buf
    cdef Py_ssize_t _len        # bytes written
    cdef Py_ssize_t _views      # buffer exports alive
    cdef PyObject *_obj         # NULL, or (use_bytes) the bytes object _buf is the contents of
    cdef uint8_t _inline[WBUF_INLINE]

    cdef int ensure(self, Py_ssize_t n) except -1          # room for n more bytes
    cdef int _grow(self, Py_ssize_t n) except -1
    cdef int write(self, const uint8_t *p, Py_ssize_t n) except -1
    cdef int write_byte(self, uint8_t b) except -1
    cdef int write_be16(self, uint16_t v) except -1
    cdef int write_be32(self, uint32_t v) except -1
    cdef int write_be64(self, uint64_t v) except -1
    cdef int write_ascii_int(self, int64_t v) except -1    # decimal, '-' for negatives
    # a JSON string, quoted: \" \\ \b \f \n \r \t, other bytes < 0x20 as \u00xx, everything else
    # (non-ASCII UTF-8 included) as is -- byte for byte what msgspec.json.encode writes
    cdef int write_json_string(self, const uint8_t *p, Py_ssize_t n) except -1
    cdef Py_ssize_t position(self) noexcept
    cdef int patch_be32(self, Py_ssize_t at, uint32_t v) except -1
    cdef int clear(self) except -1
    # An empty buffer written from now on into a bytes object of n bytes' room (grown as needed),
    # which take_bytes hands over as it is: the result without a copy out of the buffer.
    cdef int use_bytes(self, Py_ssize_t n) except -1
    cdef bytes take_bytes(self)                             # the bytes written; the buffer empty again
