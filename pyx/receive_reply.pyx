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
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from broker.kernels.pulled cimport MessageExt
from broker.kernels.wbuf cimport WriteBuffer

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


cdef inline int _varint(WriteBuffer b, uint64_t v) except -1:
    cdef uint8_t tmp[10]
    cdef int n = 0
    while v > 0x7F:
        tmp[n] = <uint8_t>((v & 0x7F) | 0x80)
        v >>= 7
        n += 1
    tmp[n] = <uint8_t>v
    return b.write(tmp, n + 1)


cdef inline Py_ssize_t _varint_len(uint64_t v) noexcept:
    cdef Py_ssize_t n = 1
    while v > 0x7F:
        v >>= 7
        n += 1
    return n


cdef inline int _tag(WriteBuffer b, uint32_t field, int wire) except -1:
    return _varint(b, (<uint64_t>field << 3) | <uint64_t>wire)


cdef inline int _bytes(WriteBuffer b, uint32_t field, const uint8_t *p, Py_ssize_t n) except -1:
    _tag(b, field, 2)
    _varint(b, <uint64_t>n)
    return b.write(p, n)


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


cdef int _seconds_nanos(WriteBuffer b, uint32_t field, int64_t seconds, int64_t nanos) except -1:
    """A Timestamp or Duration submessage (seconds = 1, nanos = 2; zeros not written)."""
    cdef Py_ssize_t n = 0
    if seconds:
        n += 1 + _varint_len(<uint64_t>seconds)
    if nanos:
        n += 1 + _varint_len(<uint64_t>nanos)
    _tag(b, field, 2)
    _varint(b, <uint64_t>n)
    if seconds:
        _int(b, 1, seconds)
    if nanos:
        _int(b, 2, nanos)
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
                  WriteBuffer sp, WriteBuffer up, WriteBuffer tmp) except -1:
    """One ReceiveMessageResponse{message} appended to `out` (sp, up, tmp: scratch buffers)."""
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


def encode_messages(list msgs, str topic, list handles, int64_t invisible_ms, system) -> bytes:
    """Each message's ReceiveMessageResponse as a gRPC message (flag 0, 4-byte big-endian length,
    the bytes), back to back: what one stream's DATA carries for them."""
    cdef WriteBuffer out = WriteBuffer(), sp = WriteBuffer(), up = WriteBuffer(), tmp = WriteBuffer()
    cdef Py_ssize_t i, at
    if len(handles) != len(msgs):
        raise ValueError(f"{len(msgs)} messages but {len(handles)} receipt handles")
    for i in range(len(msgs)):
        at = out._len
        out.write_byte(0)
        out.write_be32(0)
        _message(out, msgs[i], topic, handles[i], invisible_ms, system, sp, up, tmp)
        out.patch_be32(at + 1, <uint32_t>(out._len - at - 5))
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
