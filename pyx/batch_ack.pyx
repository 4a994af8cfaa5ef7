# cython: language_level=3, boundscheck=False, wraparound=False
"""The batch ack's bookkeeping on one in-flight checkpoint (PopReviveService.ack_offsets), in one
call: which of the acked queue offsets the checkpoint popped (its index of each, indexOfAck's first
match), which of those were not acked already, the checkpoint's new bitmap, and the revive log's
BatchAckMsg record for them, its body and its properties, byte for byte what the Python path writes:

- body: msgspec's JSON of BatchAckMsg.to_json's dict, {"aol":[offsets],"so":..,"c":group,"t":topic,
  "q":..,"pt":..,"bn":broker name}, the offsets those acked now, ascending by index;
- properties: encode_properties({"TAGS": "bAck", "UNIQ_KEY": uniq}) as ReviveLog.append writes them,
  uniq RocketMQ's genBatchAckUniqueId, topic@queue@[o1, o2]@group@popTime@broker@bAck (the list as
  Java's List.toString, which is also Python's str of a list of ints).

It declines (None) what it does not render as that path does, which then runs as before: a
checkpoint of more than 64 messages, a bitmap or an offset outside 64 bits, a string with a byte
JSON escapes (a quote, a backslash, a control character) or that is not encodable as UTF-8.
The numbers are the checkpoint's and the request's (already range-checked), not untrusted bytes.
tests/twins/batch_ack_twin.py is its pure-Python twin (BatchAckMsg.to_json, the f-string);
tests/test_batch_ack_kernel_vs_twin.py holds them equal."""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsUnsignedLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.string cimport memcpy
from libc.stdint cimport int64_t, uint64_t, uint8_t

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1

cdef enum:
    MAX_N = 64  # messages a checkpoint may hold here (a pop takes at most 32)
    INT_CHARS = 20  # "-9223372036854775808"
    STACK = 4096  # the record's body and properties written here when they fit (a pop's 32: ~1.5 KB)

cdef bytes _TAGS = b"TAGS\x01bAck\x02UNIQ_KEY\x01"


cdef inline Py_ssize_t _itoa(char *o, int64_t v) noexcept nogil:
    """v in decimal at o (as Python's str and msgspec write an int): the characters written."""
    cdef char tmp[INT_CHARS]
    cdef uint64_t u
    cdef Py_ssize_t k = 0, i = 0
    if v < 0:
        o[0] = 45  # '-'
        i = 1
        u = <uint64_t>0 - <uint64_t>v
    else:
        u = <uint64_t>v
    while True:
        tmp[k] = <char>(48 + u % 10)
        u //= 10
        k += 1
        if u == 0:
            break
    while k:
        k -= 1
        o[i] = tmp[k]
        i += 1
    return i


cdef inline bint _plain(const char *s, Py_ssize_t n) noexcept nogil:
    """Whether JSON (msgspec) writes these UTF-8 bytes as they are, between quotes."""
    cdef Py_ssize_t i
    cdef uint8_t c
    for i in range(n):
        c = <uint8_t>s[i]
        if c < 0x20 or c == 0x22 or c == 0x5C:
            return False
    return True


cdef inline Py_ssize_t _str(char *o, const char *s, Py_ssize_t n) noexcept nogil:
    memcpy(o, s, n)
    return n


cdef inline Py_ssize_t _lit(char *o, const char *s) noexcept nogil:
    cdef Py_ssize_t i = 0
    while s[i]:
        o[i] = s[i]
        i += 1
    return i


cdef int _utf8(object s, const char **out, Py_ssize_t *n) except -1:
    """s's UTF-8 in out/n; 0, or 1 when it has none (a lone surrogate) or a byte JSON escapes."""
    if type(s) is not str:
        return 1
    try:
        out[0] = PyUnicode_AsUTF8AndSize(s, n)
    except UnicodeEncodeError:
        return 1
    return 0 if _plain(out[0], n[0]) else 1


def ascending(list offsets not None):
    """`offsets` (ints) ascending and distinct: the list itself when it already is (a batch's
    handles come in their pop's order), else sorted(set(offsets)), a new list."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(offsets)
    cdef object a, b
    for i in range(1, n):
        a = <object>PyList_GET_ITEM(offsets, i - 1)
        b = <object>PyList_GET_ITEM(offsets, i)
        if type(a) is not int or type(b) is not int or not a < b:
            return sorted(set(offsets))
    return offsets


def ack_record(list offsets not None, int64_t so, list diffs not None, int64_t num, object bitmap, str topic,
               int64_t queue_id, str group, int64_t pop_time, str broker_name):
    """The acks of `offsets` (queue offsets, any order) on the checkpoint (start offset `so`, its
    `diffs` or, when empty, `num` consecutive offsets, the `bitmap` of those acked already):
    (bitmap, full, body, properties, single, missing) or None (declined, see the module).
    `bitmap`: the checkpoint's with these acks; `full`: every message of it acked then.
    `body`, `properties`: the BatchAckMsg record when two or more are acked now, else None, and
    `single` is the index of the one acked now (an AckMsg record, PopReviveService.ack) or -1.
    `missing`: the offsets the checkpoint did not pop, in the order given."""
    cdef Py_ssize_t n = PyList_GET_SIZE(diffs) if diffs else num
    cdef Py_ssize_t k = PyList_GET_SIZE(offsets), i, j, size, pos, cnt, lo, hi, mid
    cdef int overflow
    cdef int64_t d[MAX_N]
    cdef int64_t off, rel
    cdef uint64_t old, mask = 0, todo, full, bit
    cdef bint consecutive = True, rising = True
    cdef list missing = []
    cdef const char *ts
    cdef const char *gs
    cdef const char *bs
    cdef Py_ssize_t tn, gn, bn
    cdef bytes body, props
    cdef char *o
    cdef char stack[STACK]
    cdef char *heap = NULL
    cdef Py_ssize_t bsize
    cdef object x
    if n > MAX_N or n < 0:
        return None
    if type(bitmap) is not int or bitmap < 0 or bitmap >= (<object>1 << 64):
        return None
    old = PyLong_AsUnsignedLongLong(bitmap)
    if diffs:
        for i in range(n):
            x = <object>PyList_GET_ITEM(diffs, i)
            if type(x) is not int:
                return None
            d[i] = PyLong_AsLongLongAndOverflow(x, &overflow)
            if overflow:
                return None
            if d[i] != i:
                consecutive = False
            if i and d[i] <= d[i - 1]:
                rising = False
    for i in range(k):
        x = <object>PyList_GET_ITEM(offsets, i)
        if type(x) is not int:
            return None
        off = PyLong_AsLongLongAndOverflow(x, &overflow)
        if overflow:
            return None
        j = -1
        if off >= so:  # (index_of: below the start nothing)
            if (<uint64_t>off - <uint64_t>so) >> 63:
                return None  # the difference overflows: left to the Python path
            rel = off - so
            if consecutive:
                if rel < n:
                    j = rel
            elif rising:  # ascending diffs: the one match, if any, by bisection
                lo, hi = 0, n
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if d[mid] < rel:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo < n and d[lo] == rel:
                    j = lo
            else:
                for lo in range(n):  # the first match, as list.index
                    if d[lo] == rel:
                        j = lo
                        break
        if j < 0:
            missing.append(x)
        else:
            mask |= (<uint64_t>1) << j
    full = (<uint64_t>-1) if n == 64 else ((<uint64_t>1) << n) - 1
    todo = mask & ~old
    cnt = 0
    bit = todo
    while bit:
        bit &= bit - 1
        cnt += 1
    if cnt <= 1:
        j = -1
        if cnt:
            j = 0
            while not (todo >> j) & 1:
                j += 1
        return bitmap, old == full, None, None, j, missing
    if _utf8(topic, &ts, &tn) or _utf8(group, &gs, &gn) or _utf8(broker_name, &bs, &bn):
        return None
    # the body, then the properties (the offsets written in each), into one buffer each made a
    # bytes object of its length (not one of the bound's size sliced to it: an allocation and a
    # copy less each): on the stack when both bounds fit, else one heap block
    bsize = 64 + gn + tn + bn + 3 * INT_CHARS + cnt * (INT_CHARS + 1)
    size = len(_TAGS) + 64 + gn + tn + bn + 2 * INT_CHARS + cnt * (INT_CHARS + 2)
    if bsize + size <= STACK:
        o = stack
    else:
        heap = <char *>PyMem_Malloc(bsize + size)
        if heap == NULL:
            raise MemoryError()
        o = heap
    pos = _lit(o, b'{"aol":[')
    for j in range(n):
        if (todo >> j) & 1:
            pos += _itoa(o + pos, so + (d[j] if diffs else j))
            o[pos] = 44  # ','
            pos += 1
    pos -= 1
    pos += _lit(o + pos, b'],"so":')
    pos += _itoa(o + pos, so)
    pos += _lit(o + pos, b',"c":"')
    pos += _str(o + pos, gs, gn)
    pos += _lit(o + pos, b'","t":"')
    pos += _str(o + pos, ts, tn)
    pos += _lit(o + pos, b'","q":')
    pos += _itoa(o + pos, queue_id)
    pos += _lit(o + pos, b',"pt":')
    pos += _itoa(o + pos, pop_time)
    pos += _lit(o + pos, b',"bn":"')
    pos += _str(o + pos, bs, bn)
    pos += _lit(o + pos, b'"}')
    try:
        body = PyBytes_FromStringAndSize(o, pos)
    except BaseException:
        PyMem_Free(heap)
        raise
    o += bsize
    pos = _str(o, PyBytes_AS_STRING(_TAGS), len(_TAGS))
    pos += _str(o + pos, ts, tn)
    o[pos] = 64  # '@'
    pos += 1
    pos += _itoa(o + pos, queue_id)
    pos += _lit(o + pos, b'@[')
    for j in range(n):
        if (todo >> j) & 1:
            pos += _itoa(o + pos, so + (d[j] if diffs else j))
            o[pos] = 44  # ', '
            o[pos + 1] = 32
            pos += 2
    pos -= 2
    pos += _lit(o + pos, b']@')
    pos += _str(o + pos, gs, gn)
    o[pos] = 64
    pos += 1
    pos += _itoa(o + pos, pop_time)
    o[pos] = 64
    pos += 1
    pos += _str(o + pos, bs, bn)
    pos += _lit(o + pos, b'@bAck')
    try:
        props = PyBytes_FromStringAndSize(o, pos)
    finally:
        PyMem_Free(heap)  # (NULL: nothing)
    return old | todo, (old | todo) == full, body, props, -1, missing
