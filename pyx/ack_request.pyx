# cython: language_level=3, boundscheck=False, wraparound=False
"""AckMessage's request (apache.rocketmq.v2.AckMessageRequest) read from its protobuf bytes for
the local front's batch ack (broker.proxy.consumer_activity.ConsumerActivity.ack_now): the group
and topic names, the entries' receipt handles grouped by the checkpoint they name, and the answer
protobuf would serialize if every entry is acked, all in one pass, without a protobuf object, a
Python string per handle or a dict per checkpoint.

It takes what a 5.x consumer acking what it received sends: one entry (what the official
clients' ack(message) sends, one call per message) or more (a batch of one receive), each a
message id and a receipt handle this front gave (9 fields: "ckOffset popTime invisibleTime
reviveQid retryFlag brokerName queueId queueOffset commitLogOffset", every number plain ASCII
digits within what broker.common.extra_info.parse takes, the retry flag 0, 1 or 2, the broker name
printable ASCII), each handle's queue offset at or past its checkpoint's. Anything else is declined
(None), and the protobuf path reads the request and answers it as before: a field repeated where
protobuf would merge, a field it does not read (an entry's lite_topic, an unknown one), a wrong
wire type, a string that is not UTF-8, a handle of another shape. What is taken is what protobuf
and receipt_handle.BatchReader would read. tests/twins/ack_request_twin.py is its pure-Python
twin; tests/test_ack_request_kernel_vs_twin.py holds both equal to each other and to that path."""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8, PyUnicode_DecodeASCII
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.string cimport memcpy, memcmp
from libc.stdint cimport int64_t, uint8_t, uint64_t

from utf8 cimport valid_utf8
from protobuf_wire cimport pb_read_varint as _varint, pb_varint_len as _varint_len

cdef enum:
    BAD = -1
    MAX_GROUPS = 64  # distinct checkpoints in one request (more: declined)

cdef uint64_t I64 = (<uint64_t>1 << 63) - 1
cdef uint64_t I31 = <uint64_t>1 << 31
# Status{code: OK (20000), message: "OK"}, as broker.proxy.status.status() serializes
cdef bytes _STATUS_OK = b"\x08\xa0\x9c\x01\x12\x02OK"


cdef inline Py_ssize_t _field(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, uint64_t *number,
                              Py_ssize_t *vend) noexcept nogil:
    """A length-delimited field at p[pos]: its number in `number`, its value's start returned and
    its end in `vend`; BAD for any other wire type, a field number 0 or a length past `end`."""
    cdef uint64_t tag, n
    pos = _varint(p, pos, end, &tag)
    if pos == BAD or tag & 7 != 2 or tag >> 3 == 0:
        return BAD
    number[0] = tag >> 3
    pos = _varint(p, pos, end, &n)
    if pos == BAD or n > <uint64_t>(end - pos):
        return BAD
    vend[0] = pos + <Py_ssize_t>n
    return pos


cdef inline Py_ssize_t _name(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t *ne) noexcept nogil:
    """A Resource's name (field 2; its resource_namespace, field 1, checked as UTF-8 and skipped):
    its start (end in `ne`; an absent name is empty), or BAD."""
    cdef uint64_t number
    cdef Py_ssize_t s, e, ns = -1
    ne[0] = pos
    while pos < end:
        s = _field(p, pos, end, &number, &e)
        if s == BAD or number > 2 or not valid_utf8(p + s, e - s):
            return BAD
        if number == 2:
            if ns != -1:
                return BAD
            ns = s
            ne[0] = e
        pos = e
    return ns if ns != -1 else ne[0]


cdef inline Py_ssize_t _number(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, uint64_t limit,
                               uint64_t *out) noexcept nogil:
    """ASCII digits (1 to 19) up to a space or `end`, at most `limit`: the position of what follows
    them, or BAD."""
    cdef uint64_t v = 0
    cdef Py_ssize_t s = pos
    while pos < end and p[pos] != 0x20:
        if p[pos] < 0x30 or p[pos] > 0x39 or pos - s >= 19:
            return BAD
        v = v * 10 + (p[pos] - 0x30)
        pos += 1
    if pos == s or v > limit:
        return BAD
    out[0] = v
    return pos


cdef inline Py_ssize_t _space(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    return pos + 1 if pos < end and p[pos] == 0x20 else BAD


cdef struct Handle:
    uint64_t ck, pt, it, rq, qid, qo
    uint8_t retry
    Py_ssize_t head_end  # the 7 fields shared by a checkpoint's handles: [start, head_end)
    Py_ssize_t bs, be  # the broker name


cdef bint _handle(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, Handle *h) noexcept nogil:
    """A 9-field receipt handle of this front's shape in p[pos:end] (see the module)."""
    cdef uint64_t clo
    pos = _number(p, pos, end, I64, &h.ck)
    if pos == BAD: return False
    pos = _space(p, pos, end)
    if pos == BAD: return False
    pos = _number(p, pos, end, I64, &h.pt)
    if pos == BAD: return False
    pos = _space(p, pos, end)
    if pos == BAD: return False
    pos = _number(p, pos, end, I64, &h.it)
    if pos == BAD: return False
    pos = _space(p, pos, end)
    if pos == BAD: return False
    pos = _number(p, pos, end, I31, &h.rq)
    if pos == BAD: return False
    pos = _space(p, pos, end)
    if pos == BAD: return False
    if pos >= end or p[pos] < 0x30 or p[pos] > 0x32:
        return False
    h.retry = p[pos]
    pos = _space(p, pos + 1, end)
    if pos == BAD: return False
    h.bs = pos
    while pos < end and 0x21 <= p[pos] <= 0x7E:
        pos += 1
    h.be = pos
    if h.be == h.bs: return False
    pos = _space(p, pos, end)
    if pos == BAD: return False
    pos = _number(p, pos, end, I31, &h.qid)
    if pos == BAD: return False
    h.head_end = pos
    pos = _space(p, pos, end)
    if pos == BAD: return False
    pos = _number(p, pos, end, I64, &h.qo)
    if pos == BAD: return False
    pos = _space(p, pos, end)
    if pos == BAD: return False
    pos = _number(p, pos, end, I64, &clo)
    return pos == end and h.qo >= h.ck


cdef inline Py_ssize_t _put_varint(uint8_t *o, Py_ssize_t pos, uint64_t v) noexcept nogil:
    while v >= 0x80:
        o[pos] = <uint8_t>(v & 0x7F) | 0x80
        v >>= 7
        pos += 1
    o[pos] = <uint8_t>v
    return pos + 1


cdef inline Py_ssize_t _put(uint8_t *o, Py_ssize_t pos, uint8_t tag, const uint8_t *s, Py_ssize_t n) noexcept nogil:
    o[pos] = tag
    pos = _put_varint(o, pos + 1, <uint64_t>n)
    memcpy(o + pos, s, n)
    return pos + n


cdef inline bint _tail(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, uint64_t ck,
                      uint64_t *qo) noexcept nogil:
    """A handle's last two fields (" queueOffset commitLogOffset", from the space after its head at
    p[pos]) as _handle reads them: the queue offset in `qo`, False when they are not of its shape."""
    cdef uint64_t clo
    pos = _number(p, pos + 1, end, I64, qo)
    if pos == BAD: return False
    pos = _space(p, pos, end)
    if pos == BAD: return False
    pos = _number(p, pos, end, I64, &clo)
    return pos == end and qo[0] >= ck


def read_ack(bytes payload):
    """(group name, topic name, checkpoints, answer) of an AckMessageRequest of the shape the
    module describes; None for anything else. `checkpoints`: per distinct head of handles (their
    first 7 fields' text), in the order first met, (ckOffset, popTime, invisibleTime, reviveQid,
    retry flag, broker name, queueId, [each of its entries' queue offsets, in request order]).
    `answer`: the bytes protobuf serializes for AckMessageResponse{status: OK, entries:
    [{message_id, receipt_handle, status: OK}, ...]} of these entries (broker.proxy.ack_reply)."""
    cdef Py_ssize_t n = len(payload)
    cdef const uint8_t *p = <const uint8_t *><const char *>payload
    cdef Py_ssize_t pos = 0, s, e, gs = -1, ge = -1, ts = -1, te = -1, gns = 0, gne = 0, tns = 0, tne = 0
    cdef Py_ssize_t es, ee, ms, me = 0, hs, he = 0, k, ng = 0, last = -1, entries = 0, entry, hl
    cdef Py_ssize_t slen = len(_STATUS_OK), cap, w
    cdef uint64_t number, qo
    cdef Handle h
    cdef Py_ssize_t heads[MAX_GROUPS]
    cdef Py_ssize_t head_lens[MAX_GROUPS]
    cdef uint64_t cks[MAX_GROUPS]
    cdef list groups = [], offsets = None
    cdef uint8_t stack[16384]
    cdef uint8_t *o = stack
    cdef const uint8_t *st = <const uint8_t *><const char *>_STATUS_OK
    # The answer is written as the entries are read, into a buffer that holds it whatever they
    # are: its status (2 + slen bytes), then per entry at most the request's entry and 13 bytes
    # (the status field, 2 + slen, and a length varint one byte longer); a taken entry is at least
    # 21 bytes (its tag and length, the handle's tag and length, 17 bytes of 9 fields)
    cap = 2 + slen + n + (n // 21 + 1) * 13
    if cap > <Py_ssize_t>sizeof(stack):
        o = <uint8_t *>PyMem_Malloc(cap)
        if o == NULL:
            raise MemoryError()
    try:
        w = _put(o, 0, 0x0A, st, slen)
        # the request: group (1) and topic (2) once each, entries (3)
        while pos < n:
            s = _field(p, pos, n, &number, &e)
            if s == BAD:
                return None
            if number == 1:
                if gs != -1:
                    return None
                gs, ge = s, e
            elif number == 2:
                if ts != -1:
                    return None
                ts, te = s, e
            elif number == 3:
                # an entry: message_id (1) and receipt_handle (2), once each
                ms = me = hs = -1
                es = s
                while es < e:
                    k = _field(p, es, e, &number, &ee)
                    if k == BAD or number > 2:
                        return None
                    if number == 1:
                        if ms != -1 or not valid_utf8(p + k, ee - k):
                            return None
                        ms, me = k, ee
                    else:
                        if hs != -1:
                            return None
                        hs, he = k, ee
                    es = ee
                if hs == -1:
                    return None
                hl = he - hs
                # a batch's handles share their head (what one pop gave): the same bytes as the last
                # one's up to a space read as they were, and only the two offsets after it are read
                if last != -1 and hl > head_lens[last] and p[hs + head_lens[last]] == 0x20 \
                        and memcmp(p + heads[last], p + hs, head_lens[last]) == 0:
                    if not _tail(p, hs + head_lens[last], he, cks[last], &qo):
                        return None
                else:
                    if not _handle(p, hs, he, &h):
                        return None
                    qo = h.qo
                    for k in range(ng):
                        if head_lens[k] == h.head_end - hs and memcmp(p + heads[k], p + hs, head_lens[k]) == 0:
                            break
                    else:
                        if ng == MAX_GROUPS:
                            return None
                        heads[ng], head_lens[ng], cks[ng] = hs, h.head_end - hs, h.ck
                        k = ng
                        ng += 1
                        groups.append((h.ck, h.pt, h.it, h.rq, chr(h.retry), PyUnicode_DecodeASCII(
                            <const char *>p + h.bs, h.be - h.bs, NULL), h.qid, []))
                    if k != last:
                        last = k
                        offsets = <list>(<tuple>groups[k])[7]
                offsets.append(qo)
                # its answer: {message_id (when not empty), receipt_handle, status OK}
                entry = 2 + slen + 1 + _varint_len(hl) + hl
                if me > ms:
                    entry += 1 + _varint_len(me - ms) + (me - ms)
                o[w] = 0x12
                w = _put_varint(o, w + 1, <uint64_t>entry)
                if me > ms:
                    w = _put(o, w, 0x0A, p + ms, me - ms)
                w = _put(o, w, 0x12, p + hs, hl)
                w = _put(o, w, 0x1A, st, slen)
                entries += 1
            else:
                return None
            pos = e
        if entries < 1:  # (an AckMessage of no entry is the protobuf path's refusal)
            return None
        if gs != -1:
            gns = _name(p, gs, ge, &gne)
        if ts != -1:
            tns = _name(p, ts, te, &tne)
        if gns == BAD or tns == BAD:
            return None
        return (PyUnicode_DecodeUTF8(<const char *>p + gns, gne - gns, NULL),
                PyUnicode_DecodeUTF8(<const char *>p + tns, tne - tns, NULL), groups,
                PyBytes_FromStringAndSize(<const char *>o, w))
    finally:
        if o != stack:
            PyMem_Free(o)
