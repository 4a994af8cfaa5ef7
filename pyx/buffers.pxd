# Borrowing a Python object's bytes for the length of a kernel call, in one place (py-pgproto
# shares its buffer helpers the same way): every kernel that takes a buffer argument uses these,
# so the acquire/release pairing and the range check are written once.
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uint8_t


cdef struct Borrowed:
    uint8_t *ptr
    Py_ssize_t size
    Py_buffer view


cdef inline int borrow(object obj, Borrowed *b, bint writable) except -1:
    """obj's bytes (any buffer: bytes, bytearray, memoryview, a numpy map); give_back when done."""
    PyObject_GetBuffer(obj, &b.view, PyBUF_SIMPLE | (PyBUF_WRITABLE if writable else 0))
    b.ptr = <uint8_t *> b.view.buf
    b.size = b.view.len
    return 0


cdef inline void give_back(Borrowed *b) noexcept:
    PyBuffer_Release(&b.view)


cdef inline int check_range(Py_ssize_t start, Py_ssize_t end, Py_ssize_t size) except -1:
    """[start, end) within a buffer of `size` bytes, or ValueError naming all three."""
    if start < 0 or end > size or start > end:
        raise ValueError(f"range [{start}, {end}) outside a buffer of {size}")
    return 0
