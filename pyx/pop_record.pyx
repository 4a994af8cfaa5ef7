# cython: language_level=3, boundscheck=False, wraparound=False
"""A pop's checkpoint record for the revive log, written in one call: the body (PopCheckPoint's
JSON, RocketMQ's compact fastjson form: broker.store.pop_check_point.PopCheckPoint.to_json byte for
byte) and the properties ("TAGS" ck and "UNIQ_KEY" RocketMQ's genCkUniqueId
topic@queueId@startOffset@group@popTime@brokerName@ck, as encode_properties writes the pair), with
no dict, no msgspec call and no f-strings per pop (PopReviveService.add_check_point).

It takes what a pop writes: numbers within int64, the diffs a list of ints within int64, names
that JSON writes as they are (no '"', '\\' or control character below 0x20; anything else,
non-ASCII too, goes as its UTF-8, as msgspec writes it). Anything else is declined (None) and the
caller writes the record as before (to_json, its f-strings): a name to escape, a diff that is not
an int (a bool: JSON's true), a name that is not encodable (a lone surrogate).
tests/twins/pop_record_twin.py is its pure-Python twin; tests/test_pop_record_kernel_vs_twin.py
holds both equal to each other and to to_json and the f-strings."""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLong, PyLong_CheckExact
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.string cimport memcpy
from libc.stdint cimport int64_t, uint64_t, uint8_t


cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL


cdef enum:
    INT_MAX_LEN = 20  # "-9223372036854775808"


cdef inline Py_ssize_t _put_int(char *p, int64_t v) noexcept nogil:
    """v in decimal at p (as str(v)); its length."""
    cdef uint64_t u
    if v < 0:
        p[0] = 45  # '-'
        u = <uint64_t>0 - <uint64_t>v
        return 1 + _put_uint(p + 1, u)
    return _put_uint(p, <uint64_t>v)


cdef inline Py_ssize_t _put_uint(char *p, uint64_t u) noexcept nogil:
    cdef char tmp[INT_MAX_LEN]
    cdef Py_ssize_t n = 0, i
    while True:
        tmp[n] = <char>(48 + <int>(u % 10))  # '0' + digit
        n += 1
        u //= 10
        if u == 0:
            break
    for i in range(n):
        p[i] = tmp[n - 1 - i]
    return n


cdef inline Py_ssize_t _put(char *p, const char *s, Py_ssize_t n) noexcept nogil:
    memcpy(p, s, <size_t>n)
    return n


cdef inline Py_ssize_t _text(char *p, bytes b):
    """The constant `b` at p; its length."""
    cdef Py_ssize_t n = len(b)
    memcpy(p, PyBytes_AS_STRING(b), <size_t>n)
    return n


# the fixed text between the fields, in PopCheckPoint.to_json's order (its dict's keys)
cdef bytes _SO = b'{"so":', _PT = b',"pt":', _IT = b',"it":', _N = b',"bm":0,"n":', _Q = b',"q":'
cdef bytes _T = b',"t":"', _C = b'","c":"', _D = b'","ro":0,"d":[', _BN = b'],"bn":"', _END = b'"}'
# encode_properties({"TAGS": "ck", "UNIQ_KEY": ...})'s text before the key, and the key's tag
cdef bytes _PROPS = b"TAGS\x01ck\x02UNIQ_KEY\x01", _CK = b"@ck"


cdef inline bint _plain(const char *s, Py_ssize_t n) noexcept nogil:
    """Whether JSON writes the UTF-8 `s` as it is (msgspec escapes '"', '\\' and bytes below 0x20)."""
    cdef Py_ssize_t i
    cdef uint8_t c
    for i in range(n):
        c = <uint8_t>s[i]
        if c < 0x20 or c == 34 or c == 92:  # '"', '\\'
            return False
    return True


def check_point_record(int64_t start_offset, int64_t pop_time, int64_t invisible_time, int64_t num,
                       int64_t queue_id, str topic not None, str group not None, str broker_name not None,
                       list diffs not None):
    """(body, properties) of the ck record of a checkpoint with these fields (attempt id empty,
    bitmap 0), or None where it declines (see the module's text)."""
    cdef Py_ssize_t tn, gn, bn, nd = PyList_GET_SIZE(diffs), i, size, at = 0
    cdef const char *tp
    cdef const char *gp
    cdef const char *bp
    cdef int64_t v
    cdef char *buf
    try:
        tp = PyUnicode_AsUTF8AndSize(topic, &tn)
        gp = PyUnicode_AsUTF8AndSize(group, &gn)
        bp = PyUnicode_AsUTF8AndSize(broker_name, &bn)
    except UnicodeEncodeError:
        return None
    if not (_plain(tp, tn) and _plain(gp, gn) and _plain(bp, bn)):
        return None
    for i in range(nd):
        if not PyLong_CheckExact(<object>PyList_GET_ITEM(diffs, i)):
            return None
    # the bound of the body and of the properties: the fixed text (< 96), five numbers, the
    # names, each diff and its comma
    size = 96 + 5 * INT_MAX_LEN + tn + gn + bn + nd * (INT_MAX_LEN + 1)
    buf = <char *>PyMem_Malloc(<size_t>size)
    if buf == NULL:
        raise MemoryError()
    try:
        at += _text(buf + at, _SO)
        at += _put_int(buf + at, start_offset)
        at += _text(buf + at, _PT)
        at += _put_int(buf + at, pop_time)
        at += _text(buf + at, _IT)
        at += _put_int(buf + at, invisible_time)
        at += _text(buf + at, _N)
        at += _put_int(buf + at, num)
        at += _text(buf + at, _Q)
        at += _put_int(buf + at, queue_id)
        at += _text(buf + at, _T)
        at += _put(buf + at, tp, tn)
        at += _text(buf + at, _C)
        at += _put(buf + at, gp, gn)
        at += _text(buf + at, _D)
        for i in range(nd):
            if i:
                buf[at] = 44  # ','
                at += 1
            try:
                v = PyLong_AsLongLong(<object>PyList_GET_ITEM(diffs, i))
            except OverflowError:
                return None  # past int64
            at += _put_int(buf + at, v)
        at += _text(buf + at, _BN)
        at += _put(buf + at, bp, bn)
        at += _text(buf + at, _END)
        body = PyBytes_FromStringAndSize(buf, at)
        # TAGS\x01ck\x02UNIQ_KEY\x01topic@queueId@startOffset@group@popTime@brokerName@ck
        at = _text(buf, _PROPS)
        at += _put(buf + at, tp, tn)
        buf[at] = 64  # '@'
        at += 1
        at += _put_int(buf + at, queue_id)
        buf[at] = 64  # '@'
        at += 1
        at += _put_int(buf + at, start_offset)
        buf[at] = 64  # '@'
        at += 1
        at += _put(buf + at, gp, gn)
        buf[at] = 64  # '@'
        at += 1
        at += _put_int(buf + at, pop_time)
        buf[at] = 64  # '@'
        at += 1
        at += _put(buf + at, bp, bn)
        at += _text(buf + at, _CK)
        return body, PyBytes_FromStringAndSize(buf, at)
    finally:
        PyMem_Free(buf)
