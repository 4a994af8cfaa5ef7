# cython: language_level=3
"""SQL92 subscription programs evaluated on stored message properties (the evaluator itself is
sql92_eval.pxd, which the consume-queue scan in queue_read.pyx runs in place on each record).
These entry points serve the tests, the fuzz harness and the slow paths."""
from buffers cimport Borrowed, borrow, give_back
from sql92_eval cimport record_properties, sql_matches, sql_valid
from libc.stdint cimport uint8_t


def validate(program) -> None:
    """ValueError unless `program` is a well-formed SQL92 program (broker.server.filter.sql92)."""
    cdef Borrowed p
    borrow(program, &p, False)
    try:
        if not sql_valid(p.ptr, p.size):
            raise ValueError("malformed SQL92 program")
    finally:
        give_back(&p)


def matches(program, properties) -> bool:
    """Whether a message whose stored properties are `properties` (name\\x01value\\x02...) matches."""
    cdef Borrowed p, q
    cdef bint ok
    borrow(program, &p, False)
    try:
        borrow(properties, &q, False)
        try:
            if not sql_valid(p.ptr, p.size):
                raise ValueError("malformed SQL92 program")
            with nogil:
                ok = sql_matches(p.ptr, p.size, q.ptr, q.size)
            return ok
        finally:
            give_back(&q)
    finally:
        give_back(&p)


def record_matches(program, record) -> bool:
    """matches() on the properties of one stored record (a record too short for its own lengths
    matches nothing)."""
    cdef Borrowed p, r
    cdef const uint8_t *props
    cdef Py_ssize_t pn
    borrow(program, &p, False)
    try:
        borrow(record, &r, False)
        try:
            if not sql_valid(p.ptr, p.size):
                raise ValueError("malformed SQL92 program")
            if not record_properties(r.ptr, r.size, &props, &pn):
                return False
            return sql_matches(p.ptr, p.size, props, pn)
        finally:
            give_back(&r)
    finally:
        give_back(&p)
