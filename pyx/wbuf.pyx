# cython: language_level=3
"""A growable write buffer for wire bytes (py-pgproto's WriteBuffer): kernels render headers and
frames into it with typed cdef writers, Python takes the result as bytes or as a memoryview.

The interface and its rules are in wbuf.pxd. Growing while a view is exported would free the
memory the view points at, so it raises BufferError instead (as bytearray does).
"""
cimport cython
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_FillInfo, PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.memoryview cimport PyMemoryView_FromObject
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from bytesex cimport put_be16, put_be32, put_be64

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX
    # use_bytes' object, held as a raw pointer so that _PyBytes_Resize can grow and shrink it in place
    PyObject *_new_bytes "PyBytes_FromStringAndSize"(const char *, Py_ssize_t) except NULL
    int _resize_bytes "_PyBytes_Resize"(PyObject **, Py_ssize_t) except -1
    char *_bytes_data "PyBytes_AS_STRING"(PyObject *)
    void _xdecref "Py_XDECREF"(PyObject *)

globals()["WBUF_INLINE"] = WBUF_INLINE

# Bytes each input byte takes inside a JSON string: 1 as is, 2 for the short escapes, 6 for
# \u00xx. msgspec's table, so the broker's headers stay byte-identical to what it sent before.
cdef uint8_t ESC_LEN[256]
cdef uint8_t ESC_CHAR[256]   # the letter after the backslash for 2-byte escapes
cdef int _i
for _i in range(256):
    ESC_LEN[_i] = 6 if _i < 0x20 else 1
    ESC_CHAR[_i] = 0
for _i, _c in ((0x22, b'"'), (0x5C, b'\\'), (0x08, b'b'), (0x0C, b'f'), (0x0A, b'n'), (0x0D, b'r'), (0x09, b't')):
    ESC_LEN[_i] = 2
    ESC_CHAR[_i] = _c[0]
cdef const char *HEX = b"0123456789abcdef"


@cython.final
@cython.freelist(4)
cdef class WriteBuffer:
    """WriteBuffer(): an empty buffer. Kernels write into it through the cdef methods of
    wbuf.pxd; Python sees len(), getvalue(), view(), and thin wrappers of the writers (extend,
    extend_int, extend_json_string, patch32, reset) for Python callers and the tests."""

    def __cinit__(self):
        self._buf = self._inline
        self._size = WBUF_INLINE
        self._len = 0
        self._views = 0

    def __dealloc__(self):
        if self._obj is not NULL:
            _xdecref(self._obj)
            self._obj = NULL
        elif self._buf != self._inline:
            PyMem_Free(self._buf)
        self._buf = NULL

    # -- growth ------------------------------------------------------------------------------
    cdef int ensure(self, Py_ssize_t n) except -1:
        if n > self._size - self._len:
            return self._grow(n)
        return 0

    cdef int _grow(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t need, size
        cdef uint8_t *p
        if n < 0:
            raise ValueError(f"cannot reserve {n} bytes")
        if self._views:
            raise BufferError(f"cannot grow a WriteBuffer of {self._len} bytes while {self._views} view(s) "
                              "of it are exported")
        if n > PY_SSIZE_T_MAX - self._len:
            raise MemoryError()
        need = self._len + n
        size = self._size
        while size < need:
            size = need if size > PY_SSIZE_T_MAX // 2 else size * 2
        if self._obj is not NULL:
            try:
                _resize_bytes(&self._obj, size)  # realloc: the bytes written move with it
            except MemoryError:
                self._obj = NULL  # freed by _PyBytes_Resize: back to empty
                self._buf = self._inline
                self._size = WBUF_INLINE
                self._len = 0
                raise
            self._buf = <uint8_t *> _bytes_data(self._obj)
            self._size = size
            return 0
        if self._buf == self._inline:
            p = <uint8_t *> PyMem_Malloc(size)
            if p == NULL:
                raise MemoryError()
            memcpy(p, self._inline, self._len)
        else:
            p = <uint8_t *> PyMem_Realloc(self._buf, size)
            if p == NULL:
                raise MemoryError()
        self._buf = p
        self._size = size
        return 0

    # -- writers -----------------------------------------------------------------------------
    cdef int write(self, const uint8_t *p, Py_ssize_t n) except -1:
        self.ensure(n)
        memcpy(self._buf + self._len, p, n)
        self._len += n
        return 0

    cdef int write_byte(self, uint8_t b) except -1:
        self.ensure(1)
        self._buf[self._len] = b
        self._len += 1
        return 0

    cdef int write_be16(self, uint16_t v) except -1:
        self.ensure(2)
        put_be16(self._buf + self._len, v)
        self._len += 2
        return 0

    cdef int write_be32(self, uint32_t v) except -1:
        self.ensure(4)
        put_be32(self._buf + self._len, v)
        self._len += 4
        return 0

    cdef int write_be64(self, uint64_t v) except -1:
        self.ensure(8)
        put_be64(self._buf + self._len, v)
        self._len += 8
        return 0

    cdef int write_ascii_int(self, int64_t v) except -1:
        cdef uint8_t tmp[20]
        cdef int i = 20
        # the magnitude in unsigned arithmetic: -INT64_MIN does not fit an int64
        cdef uint64_t m = (<uint64_t> 0 - <uint64_t> v) if v < 0 else <uint64_t> v
        while True:
            i -= 1
            tmp[i] = <uint8_t> (48 + m % 10)
            m //= 10
            if m == 0:
                break
        self.ensure(21)
        if v < 0:
            self._buf[self._len] = 45  # '-'
            self._len += 1
        memcpy(self._buf + self._len, tmp + i, 20 - i)
        self._len += 20 - i
        return 0

    cdef int write_json_string(self, const uint8_t *p, Py_ssize_t n) except -1:
        cdef Py_ssize_t i, out = 2
        cdef uint8_t *q
        cdef uint8_t c
        # exact size first (one table pass), so the copy below never checks room again
        for i in range(n):
            out += ESC_LEN[p[i]]
        self.ensure(out)
        q = self._buf + self._len
        q[0] = 34  # '"'
        q += 1
        if out == n + 2:
            memcpy(q, p, n)
            q += n
        else:
            for i in range(n):
                c = p[i]
                if ESC_LEN[c] == 1:
                    q[0] = c
                    q += 1
                elif ESC_LEN[c] == 2:
                    q[0] = 92  # '\\'
                    q[1] = ESC_CHAR[c]
                    q += 2
                else:
                    q[0] = 92
                    q[1] = 117  # 'u'
                    q[2] = 48
                    q[3] = 48
                    q[4] = HEX[c >> 4]
                    q[5] = HEX[c & 15]
                    q += 6
        q[0] = 34
        self._len += out
        return 0

    cdef Py_ssize_t position(self) noexcept:
        return self._len

    cdef int patch_be32(self, Py_ssize_t at, uint32_t v) except -1:
        if at < 0 or at > self._len - 4:
            raise ValueError(f"patch at {at} outside the {self._len} bytes written")
        if self._views:
            raise BufferError("cannot patch a WriteBuffer while views of it are exported")
        put_be32(self._buf + at, v)
        return 0

    cdef int clear(self) except -1:
        if self._views:
            raise BufferError("cannot clear a WriteBuffer while views of it are exported")
        self._len = 0
        return 0

    cdef int use_bytes(self, Py_ssize_t n) except -1:
        if self._len or self._views:
            raise BufferError("use_bytes needs an empty WriteBuffer with no view exported")
        if n < 1:
            n = 1
        if self._obj is not NULL:
            if n <= self._size:
                return 0
            _xdecref(self._obj)
            self._obj = NULL
            self._buf = self._inline
            self._size = WBUF_INLINE
        elif self._buf != self._inline:
            PyMem_Free(self._buf)
            self._buf = self._inline
            self._size = WBUF_INLINE
        self._obj = _new_bytes(NULL, n)
        self._buf = <uint8_t *> _bytes_data(self._obj)
        self._size = n
        return 0

    cdef bytes take_bytes(self):
        cdef bytes out
        if self._views:
            raise BufferError("cannot take a WriteBuffer's bytes while views of it are exported")
        if self._obj is NULL:
            out = PyBytes_FromStringAndSize(<char *> self._buf, self._len)
            self._len = 0
            return out
        try:
            _resize_bytes(&self._obj, self._len)  # shrinking: realloc in place, nothing copied
        finally:
            out = None if self._obj is NULL else <bytes><object> self._obj
            if self._obj is not NULL:
                Py_DECREF(out)  # the buffer's reference is the caller's now
            self._obj = NULL
            self._buf = self._inline
            self._size = WBUF_INLINE
            self._len = 0
        return out

    # -- Python side -------------------------------------------------------------------------
    def __len__(self):
        return self._len

    def getvalue(self) -> bytes:
        """The bytes written so far, copied."""
        return PyBytes_FromStringAndSize(<char *> self._buf, self._len)

    def view(self) -> memoryview:
        """A read-only memoryview of the bytes written so far, without a copy. While it (or any
        export) is alive the buffer will not grow, clear or patch: release it first."""
        return PyMemoryView_FromObject(self)

    def extend(self, data) -> None:
        """Append any bytes-like object (Python callers and tests; kernels use write())."""
        cdef Py_buffer v
        PyObject_GetBuffer(data, &v, PyBUF_SIMPLE)
        try:
            self.write(<const uint8_t *> v.buf, v.len)
        finally:
            PyBuffer_Release(&v)

    def extend_int(self, int64_t v, int width=0) -> None:
        """Append v in decimal ASCII (width 0) or big-endian in 2, 4 or 8 bytes (two's complement)."""
        if width == 0:
            self.write_ascii_int(v)
        elif width == 2:
            self.write_be16(<uint16_t> v)
        elif width == 4:
            self.write_be32(<uint32_t> v)
        elif width == 8:
            self.write_be64(<uint64_t> v)
        else:
            raise ValueError(f"width {width} is not 0, 2, 4 or 8")

    def extend_json_string(self, data) -> None:
        """Append the UTF-8 bytes `data` as a quoted, escaped JSON string."""
        cdef Py_buffer v
        PyObject_GetBuffer(data, &v, PyBUF_SIMPLE)
        try:
            self.write_json_string(<const uint8_t *> v.buf, v.len)
        finally:
            PyBuffer_Release(&v)

    def patch32(self, Py_ssize_t at, uint32_t v) -> None:
        """patch_be32: overwrite 4 bytes already written at `at` with v, big-endian."""
        self.patch_be32(at, v)

    def reset(self) -> None:
        """clear(): forget the bytes written, keep the memory."""
        self.clear()

    def start_bytes(self, Py_ssize_t n) -> None:
        """use_bytes(n) (Python callers and the tests)."""
        self.use_bytes(n)

    def take(self) -> bytes:
        """take_bytes(): the bytes written, handed over (without a copy after start_bytes); the buffer
        is empty again."""
        return self.take_bytes()

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("a WriteBuffer's views are read-only")
        PyBuffer_FillInfo(buffer, self, self._buf, self._len, 1, flags)
        self._views += 1

    def __releasebuffer__(self, Py_buffer *buffer):
        self._views -= 1
