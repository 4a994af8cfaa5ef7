# cython: boundscheck=False, wraparound=False, cdivision=True
"""ReceiveMessage's messages encoded in C (and AckMessage's all-acked answer, encode_ack_ok): for
each popped message the bytes protobuf would serialize for ReceiveMessageResponse{message:
Message{topic, user_properties, system_properties, body}}, as broker.proxy.converter.to_proto
builds the Message and the front then sets its receipt_handle, delivery_attempt (reconsume_times
+ 1) and invisible_duration. Building and
serializing those protobuf objects in Python cost more per message than all the rest of a receive.

The messages are read through their Python attributes (a broker.kernels.pulled.MessageExt, or any
object with its fields), so the rules are the converter's, field for field: message_id is UNIQ_KEY
or the broker's msgId; born_host __BORNHOST or the record's born host without its port;
born_timestamp BORN_TIMESTAMP when it is all digits, else the record's; FIFO with message_group
for __SHARDINGKEY, else TRANSACTION for TRAN_MSG=true, else DELAY with delivery_timestamp for an
all-digit TIMER_DELIVER_MS, else NORMAL; body_digest the body's MD5 in upper-case hex; every
property not in `system` a user property. A timestamp outside protobuf's range, or a delivery
attempt outside int32, raises ValueError as protobuf would. tests/twins/receive_reply_twin.py is
the same in Python; tests/test_receive_reply_kernel_vs_twin.py holds both equal to protobuf's own
encoding. An empty `topic` is the message's own."""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from cpython.mem cimport PyMem_Free, PyMem_Malloc

from broker.kernels.pulled cimport MessageExt
from broker.kernels.wbuf cimport WriteBuffer
from protobuf_wire cimport pb_varint_len as _varint_len

# MD5 of many bodies in AVX2 lanes, sixteen at a time (0: no AVX2 here, nothing written)
cdef extern from "md5_mb.h" nogil:
    int md5_many(const uint8_t *const *ptrs, const size_t *lens, size_t n, uint8_t *out)

cdef extern from "Python.h":
    int PyObject_GetBuffer(object obj, Py_buffer *view, int flags) except -1
    void PyBuffer_Release(Py_buffer *view)
    int PyBUF_SIMPLE

cdef int64_t TS_MIN = -62135596800   # 0001-01-01T00:00:00Z
cdef int64_t TS_MAX = 253402300799    # 9999-12-31T23:59:59Z
cdef int64_t DUR_MAX = 315576000000

cdef enum:
    NORMAL = 1
    FIFO = 2
    DELAY = 3
    TRANSACTION = 4
    MD5 = 2
    IDENTITY = 1

# The body's MD5 by OpenSSL's EVP interface with the algorithm fetched once and one reused context:
# hashlib.md5(body) fetched the implementation by name and allocated a context per message, which
# cost as much as the digest of a 1 KiB body itself.
cdef extern from "openssl/evp.h" nogil:
    ctypedef struct EVP_MD:
        pass
    ctypedef struct EVP_MD_CTX:
        pass
    EVP_MD *EVP_MD_fetch(void *libctx, const char *algorithm, const char *properties)
    EVP_MD_CTX *EVP_MD_CTX_new()
    int EVP_DigestInit_ex2(EVP_MD_CTX *ctx, const EVP_MD *type, void *params)
    int EVP_DigestUpdate(EVP_MD_CTX *ctx, const void *d, size_t cnt)
    int EVP_DigestFinal_ex(EVP_MD_CTX *ctx, unsigned char *md, unsigned int *s)

cdef EVP_MD *_MD5 = EVP_MD_fetch(NULL, b"MD5", NULL)
cdef EVP_MD_CTX *_MD5_CTX = EVP_MD_CTX_new()
if _MD5 == NULL or _MD5_CTX == NULL:
    raise ImportError("OpenSSL's MD5 is not available (the body digest of every received message)")
cdef const char *_HEX = b"0123456789ABCDEF"


cdef int _md5_hex(const uint8_t *p, Py_ssize_t n, char *out) except -1:
    """The MD5 of p[:n] in upper-case hex (32 characters) into out; the GIL serializes the context."""
    cdef unsigned char d[16]
    cdef unsigned int dn = 0
    cdef int i
    if (EVP_DigestInit_ex2(_MD5_CTX, _MD5, NULL) != 1 or EVP_DigestUpdate(_MD5_CTX, p, <size_t>n) != 1
            or EVP_DigestFinal_ex(_MD5_CTX, d, &dn) != 1 or dn != 16):
        raise RuntimeError("OpenSSL's MD5 failed")
    for i in range(16):
        out[2 * i] = _HEX[d[i] >> 4]
        out[2 * i + 1] = _HEX[d[i] & 15]
    return 0


# every byte's two hex digits, upper case: a digest's 32 characters in 16 two-byte copies
cdef char _HEX2[512]
for _i in range(256):
    _HEX2[2 * _i] = _HEX[_i >> 4]
    _HEX2[2 * _i + 1] = _HEX[_i & 15]


cdef inline void _hex16(const uint8_t *d, char *out) noexcept:
    cdef int i
    for i in range(16):
        memcpy(out + 2 * i, _HEX2 + 2 * d[i], 2)


# The writers below write into the WriteBuffer's memory themselves, its room checked inline: a
# message is ~25 fields of three writes each, and WriteBuffer.write is a call through the other
# module's vtable each time (a third of encode_popped's own time before).
cdef inline int _put(WriteBuffer b, const uint8_t *p, Py_ssize_t n) except -1:
    if n > b._size - b._len:
        b._grow(n)
    memcpy(b._buf + b._len, p, n)
    b._len += n
    return 0


cdef inline int _varint(WriteBuffer b, uint64_t v) except -1:
    cdef uint8_t *q
    cdef Py_ssize_t n = 0
    if 10 > b._size - b._len:
        b._grow(10)
    q = b._buf + b._len
    while v > 0x7F:
        q[n] = <uint8_t>((v & 0x7F) | 0x80)
        v >>= 7
        n += 1
    q[n] = <uint8_t>v
    b._len += n + 1
    return 0


cdef inline int _tag(WriteBuffer b, uint32_t field, int wire) except -1:
    return _varint(b, (<uint64_t>field << 3) | <uint64_t>wire)


cdef inline int _bytes(WriteBuffer b, uint32_t field, const uint8_t *p, Py_ssize_t n) except -1:
    _tag(b, field, 2)
    _varint(b, <uint64_t>n)
    return _put(b, p, n)


cdef inline int _str(WriteBuffer b, uint32_t field, str s) except -1:
    """A string field, written even when empty (the caller decides presence)."""
    cdef Py_ssize_t n
    cdef const char *p = PyUnicode_AsUTF8AndSize(s, &n)
    return _bytes(b, field, <const uint8_t *>p, n)


cdef inline int _int(WriteBuffer b, uint32_t field, int64_t v) except -1:
    _tag(b, field, 0)
    return _varint(b, <uint64_t>v)  # a negative int32/int64: ten bytes, two's complement


cdef inline int _sub(WriteBuffer b, uint32_t field, WriteBuffer inner) except -1:
    return _bytes(b, field, inner._buf, inner._len)


cdef inline uint8_t *_raw_varint(uint8_t *q, uint64_t v) noexcept:
    while v > 0x7F:
        q[0] = <uint8_t>((v & 0x7F) | 0x80)
        v >>= 7
        q += 1
    q[0] = <uint8_t>v
    return q + 1


cdef int _seconds_nanos(WriteBuffer b, uint32_t field, int64_t seconds, int64_t nanos) except -1:
    """A Timestamp or Duration submessage (seconds = 1, nanos = 2; zeros not written), written in
    place after one room check (it was six writer calls, each checking room): its length is at
    most 22 bytes (two ten-byte varints of negative values and their tags), so one byte."""
    cdef uint8_t *q
    cdef uint8_t *length
    if 40 > b._size - b._len:  # a tag of 5, the length, 1 + 10, 1 + 10
        b._grow(40)
    length = _raw_varint(b._buf + b._len, (<uint64_t>field << 3) | 2)
    q = length + 1
    if seconds:
        q[0] = 8
        q = _raw_varint(q + 1, <uint64_t>seconds)
    if nanos:
        q[0] = 16
        q = _raw_varint(q + 1, <uint64_t>nanos)
    length[0] = <uint8_t>(q - length - 1)
    b._len = q - b._buf
    return 0


cdef int _timestamp(WriteBuffer b, uint32_t field, object ms) except -1:
    """Timestamp.FromMilliseconds(ms): floor division, protobuf's range or ValueError."""
    cdef int64_t v
    try:
        v = ms
    except OverflowError:
        raise ValueError(f"Timestamp is not valid: {ms} ms is out of range") from None
    return _timestamp_ms(b, field, v)


cdef int _timestamp_ms(WriteBuffer b, uint32_t field, int64_t v) except -1:
    cdef int64_t seconds, rem
    seconds = v // 1000
    rem = v % 1000
    if rem < 0:  # C truncates toward zero; Python (and protobuf's FromMilliseconds) floors
        rem += 1000
        seconds -= 1
    if seconds < TS_MIN or seconds > TS_MAX:
        raise ValueError(f"Timestamp is not valid: Seconds {seconds} must be in range [{TS_MIN}, {TS_MAX}].")
    return _seconds_nanos(b, field, seconds, rem * 1000000)


cdef int _duration(WriteBuffer b, uint32_t field, int64_t ms) except -1:
    """Duration.FromMilliseconds(ms), normalized as protobuf does (nanos take the sign of seconds)."""
    cdef int64_t seconds = ms // 1000, nanos = ms % 1000
    if nanos < 0:
        nanos += 1000
        seconds -= 1
    nanos *= 1000000
    if seconds < 0 and nanos > 0:
        seconds += 1
        nanos -= 1000000000
    if seconds < -DUR_MAX or seconds > DUR_MAX:
        raise ValueError(f"Duration is not valid: Seconds {seconds} must be in range [{-DUR_MAX}, {DUR_MAX}].")
    return _seconds_nanos(b, field, seconds, nanos)


cdef inline bint _digits(object s):
    return s is not None and len(<str>s) > 0 and (<str>s).isdigit()


cdef int _message(WriteBuffer out, object m, str topic, str handle, int64_t invisible_ms, object system,
                  WriteBuffer sp, WriteBuffer up, WriteBuffer tmp, const uint8_t *md5=NULL) except -1:
    """One ReceiveMessageResponse{message} appended to `out` (sp, up, tmp: scratch buffers; `md5`:
    the body's digest made already, or NULL)."""
    cdef dict props = m.properties
    cdef Py_buffer body
    cdef Py_ssize_t msg_len
    cdef int64_t attempt
    cdef int kind
    cdef char digest[32]
    # a pulled record's view (what a pop gives): its fixed fields read from the record itself, and
    # its TAGS from the properties just parsed (what its getter returns then), without a
    # Python attribute lookup and an int object per field
    cdef MessageExt pm = <MessageExt>m if type(m) is MessageExt else None
    sp.clear()
    up.clear()
    # -- system_properties, in field order ---------------------------------------------------------
    tags = props.get("TAGS") if pm is not None else m.tags
    if tags:
        _str(sp, 1, tags)
    keys = props.get("KEYS")
    if keys:
        for k in (<str>keys).split(" "):
            if k:
                _str(sp, 2, k)
    msg_id = props.get("UNIQ_KEY") or m.msg_id
    if msg_id:
        _str(sp, 3, msg_id)
    body_obj = m.body_view
    PyObject_GetBuffer(body_obj, &body, PyBUF_SIMPLE)
    try:
        if md5 != NULL:
            _hex16(md5, digest)
        else:
            _md5_hex(<const uint8_t *>body.buf, body.len, digest)
        _tag(sp, 4, 2)  # Digest{type = 1: MD5, checksum = 2: 32 hex characters}: 2 + 34 bytes
        _varint(sp, 36)
        _int(sp, 1, MD5)
        _bytes(sp, 2, <const uint8_t *>digest, 32)
        _int(sp, 5, IDENTITY)
        group = props.get("__SHARDINGKEY")
        deliver = None
        if group:
            kind = FIFO
        elif props.get("TRAN_MSG") == "true":
            kind = TRANSACTION
        else:
            deliver = props.get("TIMER_DELIVER_MS")
            kind = DELAY if _digits(deliver) else NORMAL
        _int(sp, 6, kind)
        born = props.get("BORN_TIMESTAMP")
        if born and _digits(born):
            _timestamp(sp, 7, int(born))
        elif pm is not None:
            _timestamp_ms(sp, 7, pm._r.born_ts)
        else:
            _timestamp(sp, 7, m.born_timestamp)
        born_host = props.get("__BORNHOST")
        if not born_host:
            born_host = m.born_host
            born_host = born_host.rpartition(":")[0] if born_host else ""
        if born_host:
            _str(sp, 8, born_host)
        if pm is not None:
            _timestamp_ms(sp, 9, pm._r.store_ts)
        else:
            _timestamp(sp, 9, m.store_timestamp)
        store_host = m.store_host
        if store_host:
            _str(sp, 10, store_host)
        if kind == DELAY:
            _timestamp(sp, 11, int(deliver))
        _str(sp, 12, handle)
        if pm is not None:
            if pm._r.queue_id:
                _int(sp, 13, pm._r.queue_id)
            _int(sp, 14, pm._r.queue_offset)
            attempt = <int64_t>pm._r.reconsume_times + 1
        else:
            qid = m.queue_id
            if qid:
                _int(sp, 13, <int32_t>qid)
            _int(sp, 14, <int64_t>m.queue_offset)
            attempt = <int64_t>m.reconsume_times + 1
        _duration(sp, 15, invisible_ms)
        if attempt < -2147483648 or attempt > 2147483647:
            raise ValueError(f"Value out of range: {attempt}")
        _int(sp, 16, attempt)
        if kind == FIFO:
            _str(sp, 17, group)
        trace = props.get("TRACE_CONTEXT")
        if trace:
            _str(sp, 18, trace)
        # -- user_properties: map entries (key = 1, value = 2) --------------------------------------
        for k, v in props.items():
            if k in system:
                continue
            tmp.clear()
            _str(tmp, 1, k)
            _str(tmp, 2, v)
            _sub(up, 2, tmp)
        # -- Message{topic = 1 (Resource.name = 2), user_properties = 2, system_properties = 3, body = 4}
        tmp.clear()
        if not topic:  # the converter's Resource(name=topic or msg.topic)
            topic = m.topic
        if topic:
            _str(tmp, 2, topic)
        msg_len = (1 + _varint_len(tmp._len) + tmp._len) + up._len + (1 + _varint_len(sp._len) + sp._len)
        if body.len:
            msg_len += 1 + _varint_len(body.len) + body.len
        _tag(out, 2, 2)  # ReceiveMessageResponse.message
        _varint(out, <uint64_t>msg_len)
        _sub(out, 1, tmp)
        out.write(up._buf, up._len)
        _sub(out, 3, sp)
        if body.len:
            _bytes(out, 4, <const uint8_t *>body.buf, body.len)
    finally:
        PyBuffer_Release(&body)
    return 0


def encode_message(m, str topic, str handle, int64_t invisible_ms, system) -> bytes:
    """One message's ReceiveMessageResponse bytes (no gRPC length prefix)."""
    cdef WriteBuffer out = WriteBuffer()
    _message(out, m, topic, handle, invisible_ms, system, WriteBuffer(), WriteBuffer(), WriteBuffer())
    return out.getvalue()


# md5_many's lanes in use (False only in tests: the per-body digest a CPU without AVX2 takes)
cdef bint _md5_lanes = True


def use_md5_lanes(bint on) -> bool:
    """Tests only: whether the bodies' MD5s go eight at a time in AVX2 lanes (the default where
    the CPU has AVX2) or one by one through OpenSSL, as on a CPU without it; returns the setting
    before."""
    global _md5_lanes
    before = _md5_lanes
    _md5_lanes = on
    return before


def md5_digests(list bodies, bint lanes=True) -> bytes:
    """Tests and bench/md5_micro.py: the 16-byte MD5 of each of `bodies` (bytes-like), back to back,
    made as the answers make them: md5_many's AVX2 lanes (sixteen at a time), or with `lanes` False
    (or no AVX2 here) OpenSSL's per body."""
    cdef Py_ssize_t i, n = len(bodies), held = 0
    cdef Py_buffer *views
    cdef const uint8_t **ptrs
    cdef size_t *lens
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n * 16)
    cdef uint8_t *digests = <uint8_t *>PyBytes_AS_STRING(out)
    cdef unsigned int dn
    if n == 0:
        return out
    views = <Py_buffer *>PyMem_Malloc(n * sizeof(Py_buffer))
    ptrs = <const uint8_t **>PyMem_Malloc(n * sizeof(const uint8_t *))
    lens = <size_t *>PyMem_Malloc(n * sizeof(size_t))
    try:
        if views == NULL or ptrs == NULL or lens == NULL:
            raise MemoryError()
        for i in range(n):
            PyObject_GetBuffer(bodies[i], &views[i], PyBUF_SIMPLE)
            held += 1
            ptrs[i] = <const uint8_t *>views[i].buf
            lens[i] = <size_t>views[i].len
        if not (lanes and md5_many(ptrs, lens, <size_t>n, digests)):
            for i in range(n):
                if (EVP_DigestInit_ex2(_MD5_CTX, _MD5, NULL) != 1
                        or EVP_DigestUpdate(_MD5_CTX, ptrs[i], lens[i]) != 1
                        or EVP_DigestFinal_ex(_MD5_CTX, digests + 16 * i, &dn) != 1 or dn != 16):
                    raise RuntimeError("OpenSSL's MD5 failed")
    finally:
        for i in range(held):
            PyBuffer_Release(&views[i])
        PyMem_Free(views)
        PyMem_Free(ptrs)
        PyMem_Free(lens)
    return out


def encode_messages(list msgs, str topic, list handles, int64_t invisible_ms, system) -> bytes:
    """Each message's ReceiveMessageResponse as a gRPC message (flag 0, 4-byte big-endian length,
    the bytes), back to back: what one stream's DATA carries for them. The bodies' MD5s are made
    first, eight at a time (md5_many)."""
    cdef WriteBuffer out = WriteBuffer(), sp = WriteBuffer(), up = WriteBuffer(), tmp = WriteBuffer()
    cdef Py_ssize_t i, at, n = len(msgs), held = 0
    cdef Py_buffer *bodies
    cdef const uint8_t **ptrs
    cdef size_t *lens
    cdef uint8_t *digests
    cdef int have = 0
    if len(handles) != n:
        raise ValueError(f"{n} messages but {len(handles)} receipt handles")
    if n == 0:
        return b""
    bodies = <Py_buffer *>PyMem_Malloc(n * sizeof(Py_buffer))
    ptrs = <const uint8_t **>PyMem_Malloc(n * sizeof(const uint8_t *))
    lens = <size_t *>PyMem_Malloc(n * sizeof(size_t))
    digests = <uint8_t *>PyMem_Malloc(n * 16)
    try:
        if bodies == NULL or ptrs == NULL or lens == NULL or digests == NULL:
            raise MemoryError()
        for i in range(n):
            PyObject_GetBuffer(msgs[i].body_view, &bodies[i], PyBUF_SIMPLE)
            held += 1
            ptrs[i] = <const uint8_t *>bodies[i].buf
            lens[i] = <size_t>bodies[i].len
        have = md5_many(ptrs, lens, <size_t>n, digests) if _md5_lanes else 0
        for i in range(n):
            at = out._len
            out.write_byte(0)
            out.write_be32(0)
            _message(out, msgs[i], topic, handles[i], invisible_ms, system, sp, up, tmp,
                     digests + 16 * i if have else NULL)
            out.patch_be32(at + 1, <uint32_t>(out._len - at - 5))
    finally:
        for i in range(held):
            PyBuffer_Release(&bodies[i])
        PyMem_Free(bodies)
        PyMem_Free(ptrs)
        PyMem_Free(lens)
        PyMem_Free(digests)
    return out.getvalue()


# AckMessageResponse{status: OK, entries: [AckMessageResultEntry{message_id, receipt_handle, status: OK}]}
# Status{code: OK (20000), message: "OK"}: 08 a0 9c 01 12 02 4f 4b
cdef bytes _STATUS_OK = b"\x08\xa0\x9c\x01\x12\x02OK"


def encode_ack_ok(list message_ids, list handles) -> bytes:
    """AckMessage's answer when every entry was acked: what protobuf serializes for
    AckMessageResponse{status: OK, entries: [{message_id, receipt_handle, status: OK}, ...]}, the
    entries in the request's order (empty strings not written, as proto3 does)."""
    cdef WriteBuffer out = WriteBuffer()
    cdef Py_ssize_t i, n = len(message_ids), mlen, hlen, slen = len(_STATUS_OK), entry
    cdef const char *mp
    cdef const char *hp
    if len(handles) != n:
        raise ValueError(f"{n} message ids but {len(handles)} receipt handles")
    _bytes(out, 1, <const uint8_t *><const char *>_STATUS_OK, slen)
    for i in range(n):
        mp = PyUnicode_AsUTF8AndSize(<str>message_ids[i], &mlen)
        hp = PyUnicode_AsUTF8AndSize(<str>handles[i], &hlen)
        entry = 2 + slen
        if mlen:
            entry += 1 + _varint_len(mlen) + mlen
        if hlen:
            entry += 1 + _varint_len(hlen) + hlen
        _tag(out, 2, 2)
        _varint(out, <uint64_t>entry)
        if mlen:
            _bytes(out, 1, <const uint8_t *>mp, mlen)
        if hlen:
            _bytes(out, 2, <const uint8_t *>hp, hlen)
        _bytes(out, 3, <const uint8_t *><const char *>_STATUS_OK, slen)
    return out.getvalue()


# -- a whole receive's answer from the POP_MESSAGE body (encode_popped) -----------------------------
# The front's usual receive (not orderly) written from the popped records themselves: no MessageExt,
# properties dict, POP_CK string or handle f-string per message. What it does not take (see
# encode_popped) it declines with None, and the front reads the records as before.

from cpython.unicode cimport PyUnicode_DecodeUTF8, PyUnicode_FromFormat
from libc.string cimport memchr, memcmp, memcpy

from broker.kernels.pulled cimport RecordSpan, walk_record
from ascii cimport ascii_int
from bytesex cimport get_be32, put_be32
from utf8 cimport valid_utf8

cdef enum:
    MAX_PAIRS = 64              # a record with more property pairs is declined
    MAX_QUEUES = 32             # the queues whose start offsets encode_popped keeps at hand
    SYSFLAG_DECLINED = 0x31     # compressed body (0x1), an IPv6 born (0x10) or store (0x20) host
    # the properties the answer reads (their slot in _Props.at)
    P_TAGS = 0
    P_KEYS = 1
    P_UNIQ_KEY = 2
    P_SHARDINGKEY = 3
    P_TRAN_MSG = 4
    P_TIMER_DELIVER_MS = 5
    P_BORN_TIMESTAMP = 6
    P_BORNHOST = 7
    P_TRACE_CONTEXT = 8
    P_POP_CK = 9
    N_READ = 10

cdef enum:
    STACK_RECORDS = 64          # encode_popped's record arrays on the stack up to this many records

cdef struct _Pair:
    Py_ssize_t key, klen, value, vlen

cdef struct _Props:
    _Pair user[MAX_PAIRS]       # the pairs whose key is not a system property, in stored order
    int n_user
    Py_ssize_t at[N_READ]       # the last kept pair's value of each property read (-1: none)
    Py_ssize_t len[N_READ]

# the system property names by length (the `system` set given last; a set of str), as C arrays:
# _sys_name[_sys_from[n]:_sys_from[n + 1]] the names of n bytes (pointers into _system_names' bytes).
# A list of bytes per length walked by Python iteration cost a reference count pair per name tried.
cdef object _system_given = None
cdef list _system_names = None
cdef const char **_sys_name = NULL
cdef Py_ssize_t _sys_from[257]


cdef int _load_system(object system) except -1:
    global _system_given, _system_names, _sys_name
    cdef list names
    cdef const char **table
    cdef Py_ssize_t i, n
    if system is _system_given:
        return 0
    names = []
    for k in system:
        b = (<str>k).encode()
        if len(b) >= 256:
            raise ValueError(f"a system property name of {len(b)} bytes")
        names.append(b)
    names.sort(key=len)
    table = <const char **>PyMem_Malloc((len(names) + 1) * sizeof(const char *))
    if table == NULL:
        raise MemoryError()
    i = 0
    for n in range(257):
        while i < len(names) and len(<bytes>names[i]) < n:
            i += 1
        _sys_from[n] = i
    for i in range(len(names)):
        table[i] = <const char *>(<bytes>names[i])
    PyMem_Free(_sys_name)
    _sys_name, _system_names, _system_given = table, names, system
    return 0


cdef inline bint _is_system(const uint8_t *k, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i
    if n >= 256:
        return False
    for i in range(_sys_from[n], _sys_from[n + 1]):
        if _sys_name[i][0] == k[0] and memcmp(_sys_name[i], k, n) == 0:
            return True
    return False


cdef int _read_slot(const uint8_t *k, Py_ssize_t n) noexcept:
    """Which property the answer reads this key is (-1: none)."""
    if n == 4:
        if memcmp(k, b"TAGS", 4) == 0:
            return P_TAGS
        if memcmp(k, b"KEYS", 4) == 0:
            return P_KEYS
    elif n == 8:
        if memcmp(k, b"UNIQ_KEY", 8) == 0:
            return P_UNIQ_KEY
        if memcmp(k, b"TRAN_MSG", 8) == 0:
            return P_TRAN_MSG
    elif n == 13:
        if memcmp(k, b"__SHARDINGKEY", 13) == 0:
            return P_SHARDINGKEY
        if memcmp(k, b"TRACE_CONTEXT", 13) == 0:
            return P_TRACE_CONTEXT
    elif n == 16:
        if memcmp(k, b"TIMER_DELIVER_MS", 16) == 0:
            return P_TIMER_DELIVER_MS
    elif n == 14:
        if memcmp(k, b"BORN_TIMESTAMP", 14) == 0:
            return P_BORN_TIMESTAMP
    elif n == 10:
        if memcmp(k, b"__BORNHOST", 10) == 0:
            return P_BORNHOST
    elif n == 6:
        if memcmp(k, b"POP_CK", 6) == 0:
            return P_POP_CK
    return -1


cdef bint _props(const uint8_t *p, Py_ssize_t start, Py_ssize_t n, _Props *out):
    """The record's properties as the pulled kernel's dict holds them (pieces at \\x02, each split at
    its first \\x01, kept with a key and a value; the last of a key wins); False: declined (more
    than MAX_PAIRS user pairs, or a user key twice, whose dict order is not the stored one)."""
    cdef Py_ssize_t i = start, end = start + n, j, sep, klen
    cdef const uint8_t *q
    cdef int slot, a
    out.n_user = 0
    for slot in range(N_READ):
        out.at[slot] = -1
    while i < end:
        # the piece's end (\x02) and its first \x01 by memchr (SIMD in libc): a byte-at-a-time scan
        # of both was the answer's hottest loop after the MD5
        q = <const uint8_t *>memchr(p + i, 2, <size_t>(end - i))
        j = end if q == NULL else q - p
        q = <const uint8_t *>memchr(p + i, 1, <size_t>(j - i))
        sep = -1 if q == NULL else q - p
        if sep > i and j - sep > 1:
            klen = sep - i
            slot = _read_slot(p + i, klen)
            if slot >= 0:
                out.at[slot] = sep + 1
                out.len[slot] = j - sep - 1
            if not _is_system(p + i, klen):
                for a in range(out.n_user):
                    if out.user[a].klen == klen and memcmp(p + out.user[a].key, p + i, klen) == 0:
                        return False
                if out.n_user == MAX_PAIRS:
                    return False
                out.user[out.n_user].key = i
                out.user[out.n_user].klen = klen
                out.user[out.n_user].value = sep + 1
                out.user[out.n_user].vlen = j - sep - 1
                out.n_user += 1
        i = j + 1
    return True


cdef int _ascii_ms(const uint8_t *p, Py_ssize_t n, int64_t *v) noexcept:
    """1: p[:n] is ASCII digits (str.isdigit's True) whose value fits 18 digits, in v; 0: not all
    digits with no byte past ASCII (isdigit's False); -1: declined (a non-ASCII byte, where
    str.isdigit also takes other scripts' digits, or a value past 18 digits)."""
    cdef Py_ssize_t i
    cdef int64_t x = 0
    cdef bint digits = n > 0
    for i in range(n):
        if p[i] >= 0x80:
            return -1
        if p[i] < 48 or p[i] > 57:
            digits = False
    if not digits:
        return 0
    if n > 18:
        return -1
    for i in range(n):
        x = x * 10 + (p[i] - 48)
    v[0] = x
    return 1


cdef int _ipv4(WriteBuffer b, const uint8_t *h, bint port) except -1:
    """inet_ntop's text of an IPv4 host's 4 bytes, with ":port" from the next 4 when `port`."""
    cdef int i
    cdef uint8_t *q
    if 32 > b._size - b._len:  # "255.255.255.255:4294967295"
        b._grow(32)
    q = b._buf + b._len
    for i in range(4):
        if i:
            q[0] = 46  # '.'
            q += 1
        q += ascii_int(h[i], q)
    if port:
        q[0] = 58  # ':'
        q += 1
        q += ascii_int(<int64_t>get_be32(h + 4), q)
    b._len = q - b._buf
    return 0


cdef struct _HostText:
    # the last host's 8 stored bytes (address, port) and their text: a pop's records mostly share
    # their store host (the broker) and often their born host (one producer)
    uint8_t key[8]
    bint valid
    Py_ssize_t len
    uint8_t text[32]


cdef inline int _host_field(WriteBuffer sp, uint32_t field, const uint8_t *h, bint port, _HostText *c,
                            WriteBuffer tmp) except -1:
    """The host's inet_ntop text (":port" when `port`) as field `field`, made once per distinct host."""
    cdef Py_ssize_t klen = 8 if port else 4
    if not c.valid or memcmp(c.key, h, klen) != 0:
        tmp.clear()
        _ipv4(tmp, h, port)
        memcpy(c.text, tmp._buf, tmp._len)
        c.len = tmp._len
        memcpy(c.key, h, klen)
        c.valid = True
    return _bytes(sp, field, c.text, c.len)


cdef int _popped_message(WriteBuffer out, const uint8_t *p, RecordSpan *r, _Props *pr, WriteBuffer resource,
                         WriteBuffer handle, WriteBuffer duration, _HostText *hosts,
                         WriteBuffer sp, WriteBuffer up, WriteBuffer tmp, const uint8_t *md5) except -1:
    """One ReceiveMessageResponse{message}, as _message writes it for the same record read by the
    pulled kernel (the caller has checked what encode_popped declines); `resource`: the topic's
    Resource{name} and `duration` the invisible duration field, the same for every message of the
    call, written once by the caller; `hosts`: the born and store host texts last made; `md5`: the
    body's digest made already (md5_many), or NULL."""
    cdef char digest[32]
    cdef Py_ssize_t msg_len, a, k, e
    cdef int64_t born, deliver = 0
    cdef int kind, d
    sp.clear()
    up.clear()
    if pr.at[P_TAGS] >= 0:
        _bytes(sp, 1, p + pr.at[P_TAGS], pr.len[P_TAGS])
    if pr.at[P_KEYS] >= 0:  # str.split(" "), the empty pieces skipped
        k = pr.at[P_KEYS]
        e = k + pr.len[P_KEYS]
        a = k
        while a <= e:
            if a == e or p[a] == 32:
                if a > k:
                    _bytes(sp, 2, p + k, a - k)
                k = a + 1
            a += 1
    _bytes(sp, 3, p + pr.at[P_UNIQ_KEY], pr.len[P_UNIQ_KEY])
    if md5 != NULL:
        _hex16(md5, digest)
    else:
        _md5_hex(p + r.body, r.body_len, digest)
    _tag(sp, 4, 2)
    _varint(sp, 36)
    _int(sp, 1, MD5)
    _bytes(sp, 2, <const uint8_t *>digest, 32)
    _int(sp, 5, IDENTITY)
    if pr.at[P_SHARDINGKEY] >= 0:
        kind = FIFO
    elif pr.at[P_TRAN_MSG] >= 0 and pr.len[P_TRAN_MSG] == 4 and memcmp(p + pr.at[P_TRAN_MSG], b"true", 4) == 0:
        kind = TRANSACTION
    else:
        kind = NORMAL
        if pr.at[P_TIMER_DELIVER_MS] >= 0:
            d = _ascii_ms(p + pr.at[P_TIMER_DELIVER_MS], pr.len[P_TIMER_DELIVER_MS], &deliver)
            if d < 0:
                raise ValueError("declined")
            if d:
                kind = DELAY
    _int(sp, 6, kind)
    born = r.born_ts
    if pr.at[P_BORN_TIMESTAMP] >= 0:
        d = _ascii_ms(p + pr.at[P_BORN_TIMESTAMP], pr.len[P_BORN_TIMESTAMP], &born)
        if d < 0:
            raise ValueError("declined")
        if d == 0:
            born = r.born_ts
    _timestamp_ms(sp, 7, born)
    if pr.at[P_BORNHOST] >= 0:
        _bytes(sp, 8, p + pr.at[P_BORNHOST], pr.len[P_BORNHOST])
    else:
        _host_field(sp, 8, p + r.born_host, False, &hosts[0], tmp)
    _timestamp_ms(sp, 9, r.store_ts)
    _host_field(sp, 10, p + r.store_host, True, &hosts[1], tmp)
    if kind == DELAY:
        _timestamp_ms(sp, 11, deliver)
    _bytes(sp, 12, handle._buf, handle._len)
    if r.queue_id:
        _int(sp, 13, r.queue_id)
    _int(sp, 14, r.queue_offset)
    _put(sp, duration._buf, duration._len)
    if r.reconsume_times == 2147483647:
        raise ValueError("declined")  # a delivery attempt past int32: the front's own path refuses it
    _int(sp, 16, <int64_t>r.reconsume_times + 1)
    if kind == FIFO:
        _bytes(sp, 17, p + pr.at[P_SHARDINGKEY], pr.len[P_SHARDINGKEY])
    if pr.at[P_TRACE_CONTEXT] >= 0:
        _bytes(sp, 18, p + pr.at[P_TRACE_CONTEXT], pr.len[P_TRACE_CONTEXT])
    for a in range(pr.n_user):
        tmp.clear()
        _bytes(tmp, 1, p + pr.user[a].key, pr.user[a].klen)
        _bytes(tmp, 2, p + pr.user[a].value, pr.user[a].vlen)
        _sub(up, 2, tmp)
    msg_len = resource._len + up._len + (1 + _varint_len(sp._len) + sp._len)
    if r.body_len:
        msg_len += 1 + _varint_len(r.body_len) + r.body_len
    _tag(out, 2, 2)
    _varint(out, <uint64_t>msg_len)
    _put(out, resource._buf, resource._len)
    _put(out, up._buf, up._len)
    _sub(out, 3, sp)
    if r.body_len:
        _bytes(out, 4, p + r.body, r.body_len)
    return 0


cdef inline uint8_t _retry_flag(const uint8_t *t, Py_ssize_t n) noexcept:
    """extra_info.retry_flag of a topic's bytes: '1' (%RETRY%...), '2' (one with a '+'), '0'."""
    cdef Py_ssize_t i
    if n < 7 or memcmp(t, b"%RETRY%", 7) != 0:
        return 48
    for i in range(7, n):
        if t[i] == 43:
            return 50
    return 49


def encode_popped(body, str topic, dict starts, str middle, str broker_name, int64_t invisible_ms, system,
                  int64_t now_ms, bint want_handles):
    """A whole ReceiveMessage answer (Status OK, each message, the delivery timestamp `now_ms`, each
    a gRPC message) from a POP_MESSAGE FOUND body (the stored records back to back), each message
    with the receipt handle the front gives: extra_info.build's text of its checkpoint's start
    offset (`starts`, keyed "<retryFlag>@<queueId>" as extra_info.parse_start_offset_info gives
    it), `middle` ("<popTime> <invisibleTime> <reviveQid>"), its retry flag, `broker_name`, queue id
    and offset, then the commit log offset (receipt_handle.encode). What receive_ok writes for the
    same records read by broker.client.pop.pop, byte for byte.

    Returns (bytes, [handle, ...] when `want_handles` else None), or None where the front's own
    path is to read the records: a record whose body is compressed or whose hosts are IPv6,
    properties that are not UTF-8 or hold POP_CK, no UNIQ_KEY, a user property twice, a
    BORN_TIMESTAMP or TIMER_DELIVER_MS past ASCII or 18 digits, anything protobuf cannot carry, an
    empty topic, a queue without its start offset, a body that is not whole records."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t n, pos = 0, at, topic_len, mid_len, broker_len
    cdef RecordSpan r
    cdef _Props pr
    cdef WriteBuffer out = WriteBuffer(), sp = WriteBuffer(), up = WriteBuffer(), tmp = WriteBuffer()
    cdef WriteBuffer handle = WriteBuffer(), resource = WriteBuffer(), duration = WriteBuffer()
    cdef _HostText hosts[2]
    cdef const char *tp = PyUnicode_AsUTF8AndSize(topic, &topic_len)
    cdef const char *mp = PyUnicode_AsUTF8AndSize(middle, &mid_len)
    cdef const char *bp = PyUnicode_AsUTF8AndSize(broker_name, &broker_len)
    cdef int last_flag = -1
    cdef int32_t last_qid = 0
    cdef int64_t start = 0
    cdef uint8_t flag
    cdef list handles = [] if want_handles else None
    cdef uint8_t seen_flag[MAX_QUEUES]
    cdef int32_t seen_qid[MAX_QUEUES]
    cdef int64_t seen_start[MAX_QUEUES]
    cdef int n_seen = 0, q
    cdef Py_ssize_t prefix_max, count = 0, i
    cdef RecordSpan *spans = NULL
    cdef const uint8_t **bodies = NULL
    cdef size_t *sizes = NULL
    cdef uint8_t *digests = NULL
    # a pop's records (32 at most from a client, 64 here) on the stack: no allocation and one walk
    cdef RecordSpan spans_st[STACK_RECORDS]
    cdef const uint8_t *bodies_st[STACK_RECORDS]
    cdef size_t sizes_st[STACK_RECORDS]
    cdef uint8_t digests_st[16 * STACK_RECORDS]
    cdef bint on_heap = False
    cdef int have_md5
    if topic_len == 0:
        return None
    _load_system(system)
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t *>view.buf
        n = view.len
        if n == 0:
            return None
        # every message's Message.topic (Resource{name}, field 1) and invisible_duration (field 15)
        tmp.clear()
        _bytes(tmp, 2, <const uint8_t *>tp, topic_len)
        _sub(resource, 1, tmp)
        try:
            _duration(duration, 15, invisible_ms)
        except ValueError:
            return None  # as the first message's would have
        hosts[0].valid = hosts[1].valid = False
        # the records' bodies and ~300 bytes of fields each: no regrowth; written into the bytes object
        # that is the answer (take_bytes), not copied out of a buffer at the end
        out.use_bytes(n + n // 2 + 4096)
        prefix_max = 22 + mid_len + broker_len
        out.write(<const uint8_t *><const char *>_STATUS_OK_FRAME, len(_STATUS_OK_FRAME))
        # the records first, and their bodies' MD5s sixteen at a time (md5_many; NULL: one by one)
        try:
            while pos < n:
                if count < STACK_RECORDS:
                    walk_record(p, pos, n, &spans_st[count])
                    pos += spans_st[count].size
                else:
                    walk_record(p, pos, n, &r)
                    pos += r.size
                count += 1
        except ValueError:
            return None
        if count <= STACK_RECORDS:
            spans, bodies, sizes, digests = spans_st, bodies_st, sizes_st, digests_st
        else:
            on_heap = True
            spans = <RecordSpan *>PyMem_Malloc(count * sizeof(RecordSpan))
            bodies = <const uint8_t **>PyMem_Malloc(count * sizeof(const uint8_t *))
            sizes = <size_t *>PyMem_Malloc(count * sizeof(size_t))
            digests = <uint8_t *>PyMem_Malloc(count * 16)
            if spans == NULL or bodies == NULL or sizes == NULL or digests == NULL:
                raise MemoryError()
            pos = 0
            for i in range(count):
                walk_record(p, pos, n, &spans[i])
                pos += spans[i].size
        for i in range(count):
            bodies[i] = p + spans[i].body
            sizes[i] = <size_t>spans[i].body_len
        have_md5 = md5_many(bodies, sizes, <size_t>count, digests) if _md5_lanes else 0
        for i in range(count):
            r = spans[i]
            if (r.sys_flag & SYSFLAG_DECLINED) or not valid_utf8(p + r.props, r.props_len) \
                    or not _props(p, r.props, r.props_len, &pr) or pr.at[P_POP_CK] >= 0 or pr.at[P_UNIQ_KEY] < 0:
                return None
            flag = _retry_flag(p + r.topic, r.topic_len)
            if flag != last_flag or r.queue_id != last_qid:
                # the queues seen so far, each's start offset asked of `starts` once
                for q in range(n_seen):
                    if seen_flag[q] == flag and seen_qid[q] == r.queue_id:
                        start = seen_start[q]
                        break
                else:
                    got = starts.get(PyUnicode_FromFormat("%c@%d", <int>flag, <int>r.queue_id))
                    if type(got) is not int or not 0 <= got < (1 << 63):
                        return None
                    start = got
                    if n_seen < MAX_QUEUES:
                        seen_flag[n_seen], seen_qid[n_seen], seen_start[n_seen] = flag, r.queue_id, start
                        n_seen += 1
                last_flag, last_qid = flag, r.queue_id
            handle._len = 0
            if prefix_max + 80 > handle._size:  # written in place: start, queue id, offsets in decimal, spaces
                handle._grow(prefix_max + 80)
            handle._len = ascii_int(start, handle._buf)
            handle._buf[handle._len] = 32
            memcpy(handle._buf + handle._len + 1, mp, mid_len)
            handle._len += 1 + mid_len
            handle._buf[handle._len] = 32
            handle._buf[handle._len + 1] = flag
            handle._buf[handle._len + 2] = 32
            memcpy(handle._buf + handle._len + 3, bp, broker_len)
            handle._len += 3 + broker_len
            handle._buf[handle._len] = 32
            handle._len += 1 + ascii_int(r.queue_id, handle._buf + handle._len + 1)
            handle._buf[handle._len] = 32
            handle._len += 1 + ascii_int(r.queue_offset, handle._buf + handle._len + 1)
            handle._buf[handle._len] = 32
            handle._len += 1 + ascii_int(r.phys_offset, handle._buf + handle._len + 1)
            at = out._len
            _put(out, <const uint8_t *>b"\0\0\0\0\0", 5)  # the gRPC prefix, its length patched below
            try:
                _popped_message(out, p, &r, &pr, resource, handle, duration, hosts, sp, up, tmp,
                                digests + 16 * i if have_md5 else NULL)
            except ValueError:
                return None
            put_be32(out._buf + at + 1, <uint32_t>(out._len - at - 5))  # (no view of `out` exists)
            if want_handles:
                handles.append(PyUnicode_DecodeUTF8(<const char *>handle._buf, handle._len, NULL))
    finally:
        PyBuffer_Release(&view)
        if on_heap:
            PyMem_Free(spans)
            PyMem_Free(bodies)
            PyMem_Free(sizes)
            PyMem_Free(digests)
    # ReceiveMessageResponse{delivery_timestamp = 3}
    tmp.clear()
    try:
        _timestamp_ms(tmp, 3, now_ms)
    except ValueError:
        return None
    out.write_byte(0)
    out.write_be32(<uint32_t>tmp._len)
    out.write(tmp._buf, tmp._len)
    return out.take_bytes(), handles


# ReceiveMessageResponse{status: Status OK} framed: what receive_ok starts with
cdef bytes _STATUS_OK_FRAME = b"\x00\x00\x00\x00\x0a\x0a\x08" + _STATUS_OK
