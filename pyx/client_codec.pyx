# cython: language_level=3
"""The client's wire in C: request frames rendered straight into a WriteBuffer, the replies of
one socket read parsed into Reply objects (client_codec.pxd; the reply rules are
docs/formats.md §4.2).

A pipelining producer pays, per message, one render call and one Reply, instead of an ext dict,
a RemotingCommand and a msgspec encode going out and a header dict and a RemotingCommand coming
back. Everything not worth a fast path (admin calls, heartbeats, routes, requests the broker
sends us) stays with RemotingCommand: ReplyReader hands those frames back.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Contains, PyDict_Next
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport INT64_MAX, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp

from broker.kernels.header cimport (HeaderField, RemotingHeader, V_BYTES, V_ESCAPED, V_INT, V_NULL, V_STRING,
                                    json_ext_begin, json_ext_end, json_ext_field, json_header_begin,
                                    json_header_end, parse_json_header, parse_rocketmq_header, unescape_json)
from broker.kernels.wbuf cimport WriteBuffer
from ascii cimport ascii_int
from bodycrc cimport crc32_body
from bytesex cimport get_be32
from broker.kernels.remoting cimport FRAME_INCOMPLETE, FRAME_OK, FrameSpan, FrameStatus, frame_at, raise_frame_error


cdef extern from "Python.h":
    ctypedef struct PyObject
    ctypedef struct PyTypeObject
    void Py_INCREF(object o)
    void Py_XDECREF(PyObject *o)
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    object PyType_GenericAlloc(PyTypeObject *t, Py_ssize_t nitems)

cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member
    int T_OBJECT_EX

from clock cimport now_ms

cdef enum:
    CODE_PULL_MESSAGE = 11
    CODE_SEND_MESSAGE_V2 = 310
    CODE_SEND_BATCH_MESSAGE = 320
    VERSION_V4_9_4 = 401       # what RemotingCommand.request sends (broker.remoting.command.VERSION: MQVersion ordinal)
    FLAG_RESPONSE = 1
    FLAG_ONEWAY = 2
    MAX_PROPS_LEN = 32767      # a batched message's properties length is an int16
    BATCH_FIXED = 22           # total, magic, crc, flag, bodyLen (4 each) + propsLen (2)

READ_DONE = READ_DONE_
READ_SLOW = READ_SLOW_
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
for _name, _v in (("F_MSG_ID", F_MSG_ID), ("F_QUEUE_ID", F_QUEUE_ID), ("F_QUEUE_OFFSET", F_QUEUE_OFFSET),
                  ("F_NEXT_BEGIN_OFFSET", F_NEXT_BEGIN_OFFSET), ("F_MIN_OFFSET", F_MIN_OFFSET),
                  ("F_MAX_OFFSET", F_MAX_OFFSET), ("F_SUGGEST_BROKER", F_SUGGEST_BROKER),
                  ("F_TRANSACTION_ID", F_TRANSACTION_ID), ("F_RECALL_HANDLE", F_RECALL_HANDLE)):
    globals()[_name] = _v

cdef const char *HEX = b"0123456789ABCDEF"
cdef bytes EMPTY = b""



# -- UNIQ_KEY ------------------------------------------------------------------------------------

cdef uint8_t UNIQ_PREFIX[20]
cdef int64_t UNIQ_START_MS = 0
cdef uint32_t UNIQ_COUNTER = 0
cdef bint UNIQ_READY = False


def uniq_key_setup(str prefix not None, int64_t start_ms) -> None:
    """The process's 20 hex digits (ip, pid, random) and its start time: set once, by
    broker.client.message, before any key is made."""
    global UNIQ_START_MS, UNIQ_COUNTER, UNIQ_READY
    cdef bytes raw = prefix.encode("ascii")
    if len(raw) != 20 or any(c not in b"0123456789ABCDEF" for c in raw):
        raise ValueError(f"a UNIQ_KEY prefix is 20 upper-case hex digits, not {prefix!r}")
    for i in range(20):
        UNIQ_PREFIX[i] = raw[i]
    UNIQ_START_MS = start_ms
    UNIQ_COUNTER = 0
    UNIQ_READY = True


cdef int uniq_key_into(uint8_t *out) except -1:
    global UNIQ_COUNTER
    cdef uint32_t t, c
    cdef int i
    if not UNIQ_READY:
        raise RuntimeError("uniq_key_setup was not called (broker.client.message does it on import)")
    t = <uint32_t> (now_ms() - UNIQ_START_MS)   # the low 32 bits, as Java's int cast keeps
    c = UNIQ_COUNTER & 0xFFFF
    UNIQ_COUNTER += 1
    for i in range(20):
        out[i] = UNIQ_PREFIX[i]
    for i in range(8):
        out[20 + i] = HEX[(t >> (28 - 4 * i)) & 15]
    for i in range(4):
        out[28 + i] = HEX[(c >> (12 - 4 * i)) & 15]
    return 0


def new_uniq_key() -> str:
    """32 hex digits, unique per process and ms-ordered, as Java's producer sets UNIQ_KEY."""
    cdef uint8_t k[32]
    uniq_key_into(k)
    return PyUnicode_DecodeUTF8(<const char *> k, 32, NULL)


# -- properties ----------------------------------------------------------------------------------

cdef inline int put_text(WriteBuffer w, object s) except -1:
    """A property key or value as encode_properties formats it (f"{k}\\x01{v}": str() of a non-str)."""
    cdef const char *p
    cdef Py_ssize_t n
    if type(s) is not str:
        s = str(s)
    p = PyUnicode_AsUTF8AndSize(s, &n)
    return w.write(<const uint8_t *> p, n)


cdef inline bint is_name(object k, str name):
    return type(k) is str and <str> k == name


cdef object build_properties(WriteBuffer out, object tags, object keys, object user, int32_t delay, object given):
    """The properties string Message.wire_properties() + setdefault(UNIQ_KEY) + encode_properties
    make, into `out`: the user's pairs in their order (TAGS, KEYS, DELAY replaced in place when the
    message sets them), then TAGS, KEYS, DELAY, WAIT=true, UNIQ_KEY the user did not give; pairs
    whose value is None are left out. The UNIQ_KEY the user did not set is `given` (a str: a retry
    keeps its first attempt's) or a new one. Returns the UNIQ_KEY (str, or whatever the user set)."""
    cdef Py_ssize_t pos = 0
    cdef PyObject *k
    cdef PyObject *v
    cdef bint first = True
    cdef uint8_t kbuf[32]
    cdef uint8_t num[20]
    cdef object uniq = None, value
    cdef bint has_tags = False, has_keys = False, has_delay = False, has_wait = False, has_uniq = False
    cdef bint set_tags = bool(tags), set_keys = bool(keys), set_delay = delay > 0
    if set_keys and type(keys) is not str:
        keys = " ".join(keys)
    if user is not None:
        if type(user) is not dict:
            user = dict(user)
        while PyDict_Next(user, &pos, &k, &v):
            key = <object> k
            value = <object> v
            if is_name(key, "TAGS"):
                has_tags = True
                if set_tags:
                    value = tags
            elif is_name(key, "KEYS"):
                has_keys = True
                if set_keys:
                    value = keys
            elif is_name(key, "DELAY"):
                has_delay = True
                if set_delay:
                    value = str(delay)
            elif is_name(key, "WAIT"):
                has_wait = True
            elif is_name(key, "UNIQ_KEY"):
                has_uniq = True
                uniq = value
            if value is None:
                continue
            if not first:
                out.write_byte(2)
            first = False
            put_text(out, key)
            out.write_byte(1)
            put_text(out, value)
    if set_tags and not has_tags:
        if not first:
            out.write_byte(2)
        first = False
        out.write(<const uint8_t *> b"TAGS\x01", 5)
        put_text(out, tags)
    if set_keys and not has_keys:
        if not first:
            out.write_byte(2)
        first = False
        out.write(<const uint8_t *> b"KEYS\x01", 5)
        put_text(out, keys)
    if set_delay and not has_delay:
        if not first:
            out.write_byte(2)
        first = False
        out.write(<const uint8_t *> b"DELAY\x01", 6)
        out.write(num, ascii_int(delay, num))
    if not has_wait:
        if not first:
            out.write_byte(2)
        first = False
        out.write(<const uint8_t *> b"WAIT\x01true", 9)
    if not has_uniq:
        if not first:
            out.write_byte(2)
        out.write(<const uint8_t *> b"UNIQ_KEY\x01", 9)
        if given is not None:
            put_text(out, given)
            uniq = given
        else:
            uniq_key_into(kbuf)
            out.write(kbuf, 32)
            uniq = PyUnicode_DecodeUTF8(<const char *> kbuf, 32, NULL)
    return uniq


def message_properties(tags, keys, properties, int32_t delay_level=0, uniq_key=None) -> tuple:
    """(properties bytes, UNIQ_KEY) as render_send builds them (tests and the slow paths)."""
    cdef WriteBuffer out = WriteBuffer()
    uniq = build_properties(out, tags, keys, properties, delay_level, uniq_key)
    return out.getvalue(), uniq


# -- request frames ------------------------------------------------------------------------------

cdef inline int ext_int(WriteBuffer w, const char *key, Py_ssize_t kn, int64_t v) except -1:
    cdef uint8_t num[20]
    return json_ext_field(w, <const uint8_t *> key, kn, num, ascii_int(v, num), False)


cdef inline int ext_text(WriteBuffer w, const char *key, Py_ssize_t kn, str s, bint first) except -1:
    cdef Py_ssize_t n
    cdef const char *p = PyUnicode_AsUTF8AndSize(s, &n)
    return json_ext_field(w, <const uint8_t *> key, kn, <const uint8_t *> p, n, first)


cdef inline Py_ssize_t frame_begin(WriteBuffer w, int32_t code, int32_t opaque, int32_t flag) except -1:
    cdef Py_ssize_t start = w.position()
    w.write(<const uint8_t *> b"\0\0\0\0\0\0\0\0", 8)   # the prefix, patched by frame_end
    json_header_begin(w, code, b"JAVA", VERSION_V4_9_4, opaque, flag)
    json_ext_begin(w)
    return start


cdef int frame_header_end(WriteBuffer w, Py_ssize_t start) except -1:
    cdef Py_ssize_t hl
    json_ext_end(w)
    json_header_end(w)
    hl = w.position() - start - 8
    if hl > 0xFFFFFF:
        raise ValueError(f"a request header of {hl} bytes does not fit the frame's 24-bit length")
    w.patch_be32(start + 4, <uint32_t> hl)
    return 0


cdef int frame_end(WriteBuffer w, Py_ssize_t start) except -1:
    cdef Py_ssize_t total = w.position() - start - 4
    if total > 0x7FFFFFFF:
        raise ValueError(f"a request of {total} bytes does not fit a frame")
    w.patch_be32(start, <uint32_t> total)
    return 0


cdef int send_header(WriteBuffer w, str group, str topic, int32_t default_queues, int32_t queue_id,
                     int32_t sys_flag, int64_t born_ts, int32_t flag, const uint8_t *props, Py_ssize_t props_len,
                     int32_t reconsume_times, bint batch, int32_t max_reconsume_times) except -1:
    """SendMessageRequestHeaderV2's fields in the order the producer's ext dict had them. The
    one-letter keys need no escaping: each number is written with its key in one piece
    (letter_int), the constant fields as one run of bytes."""
    cdef Py_ssize_t n
    cdef const char *p = PyUnicode_AsUTF8AndSize(group, &n)
    w.write(<const uint8_t *> b'"a":', 4)
    w.write_json_string(<const uint8_t *> p, n)
    p = PyUnicode_AsUTF8AndSize(topic, &n)
    w.write(<const uint8_t *> b',"b":', 5)
    w.write_json_string(<const uint8_t *> p, n)
    w.write(<const uint8_t *> b',"c":"TBW102"', 13)
    letter_int(w, 100, default_queues)   # d
    letter_int(w, 101, queue_id)         # e
    letter_int(w, 102, sys_flag)         # f
    letter_int(w, 103, born_ts if born_ts >= 0 else now_ms())   # g
    letter_int(w, 104, flag)             # h
    w.write(<const uint8_t *> b',"i":', 5)
    w.write_json_string(props, props_len)
    letter_int(w, 106, reconsume_times)  # j
    if batch:
        w.write(<const uint8_t *> b',"k":"false","m":"true"', 23)
    else:
        w.write(<const uint8_t *> b',"k":"false","m":"false"', 24)
    if max_reconsume_times >= 0:
        letter_int(w, 108, max_reconsume_times)  # l
    return 0


cdef inline int letter_int(WriteBuffer w, uint8_t key, int64_t v) except -1:
    ""","<key>":"<v>" in one write (what ext_int writes for a one-letter key)."""
    cdef uint8_t out[32]
    cdef Py_ssize_t n
    out[0] = 44   # ,
    out[1] = 34   # "
    out[2] = key
    out[3] = 34
    out[4] = 58   # :
    out[5] = 34
    n = ascii_int(v, out + 6)
    out[6 + n] = 34
    return w.write(out, 7 + n)


cdef object _render_send(WriteBuffer w, WriteBuffer props, int32_t opaque, bint oneway, str group, str topic,
                         int32_t default_queues, int32_t queue_id, int32_t sys_flag, int32_t flag, body, tags, keys,
                         properties, int32_t delay_level, int32_t reconsume_times, int32_t max_reconsume_times,
                         uniq_key, int64_t born_ts):
    cdef Py_buffer b
    cdef Py_ssize_t start = w.position()
    props._len = 0
    PyObject_GetBuffer(body, &b, PyBUF_SIMPLE)
    try:
        uniq = build_properties(props, tags, keys, properties, delay_level, uniq_key)
        start = frame_begin(w, CODE_SEND_MESSAGE_V2, opaque, FLAG_ONEWAY if oneway else 0)
        send_header(w, group, topic, default_queues, queue_id, sys_flag, born_ts, flag, props._buf, props._len,
                    reconsume_times, False, max_reconsume_times)
        frame_header_end(w, start)
        w.write(<const uint8_t *> b.buf, b.len)
        frame_end(w, start)
        return uniq
    except BaseException:
        w._len = start   # a half-written frame would desynchronise the stream (wbuf.pxd's _len)
        raise
    finally:
        PyBuffer_Release(&b)


def render_send(WriteBuffer w not None, int32_t opaque, bint oneway, str group not None, str topic not None,
                int32_t default_queues, int32_t queue_id, int32_t sys_flag, int32_t flag, body, tags, keys,
                properties, int32_t delay_level=0, int32_t reconsume_times=0, int32_t max_reconsume_times=-1,
                uniq_key=None, int64_t born_ts=-1):
    """One SEND_MESSAGE_V2 frame into w: the header's properties built from tags, keys, the user's
    `properties` and the delay level (build_properties), `body` as given (already compressed
    when sys_flag says so). born_ts < 0: now; max_reconsume_times < 0: no `l` field; uniq_key: the
    UNIQ_KEY to use when the properties have none (None: a new one). Returns the message's
    UNIQ_KEY. On any error nothing is left in w."""
    return _render_send(w, WriteBuffer(), opaque, oneway, group, topic, default_queues, queue_id, sys_flag, flag, body,
                        tags, keys, properties, delay_level, reconsume_times, max_reconsume_times, uniq_key, born_ts)


cdef int batch_entry(WriteBuffer w, object msg, WriteBuffer props, list uniqs, object given) except -1:
    """One message of a SEND_BATCH_MESSAGE body (MessageDecoder.encodeMessages):
    [total][magic 0][bodyCRC][flag][bodyLen][body][propsLen int16][props]."""
    cdef Py_buffer b
    cdef uint32_t crc
    props._len = 0
    uniqs.append(build_properties(props, msg.tags, msg.keys, msg.properties, 0, given))
    if props._len > MAX_PROPS_LEN:
        raise ValueError(f"properties of {props._len} bytes exceed a batched message's {MAX_PROPS_LEN}")
    flag = msg.flag
    PyObject_GetBuffer(msg.body, &b, PyBUF_SIMPLE)
    try:
        if b.len > 0x7FFFFFFF - BATCH_FIXED - props._len:
            raise ValueError(f"a body of {b.len} bytes does not fit a batch")
        crc = crc32_body(<const uint8_t *> b.buf, <size_t> b.len)
        w.write_be32(<uint32_t> (BATCH_FIXED + b.len + props._len))
        w.write_be32(0)
        w.write_be32(crc)
        w.write_be32(<uint32_t> <int32_t> flag)
        w.write_be32(<uint32_t> b.len)
        w.write(<const uint8_t *> b.buf, b.len)
        w.write_be16(<unsigned short> props._len)
        w.write(props._buf, props._len)
    finally:
        PyBuffer_Release(&b)
    return 0


def render_batch(WriteBuffer w not None, int32_t opaque, str group not None, str topic not None,
                 int32_t default_queues, int32_t queue_id, int32_t flag, list msgs not None,
                 list uniq_keys=None, int64_t born_ts=-1) -> list:
    """One SEND_BATCH_MESSAGE frame into w: V2's header (no properties, sysFlag 0, m true) and the
    messages encoded as the Java client encodes a batch. Each of `msgs` has body, tags, keys,
    properties and flag (a Message); uniq_keys, when given, are the UNIQ_KEYs of those without one
    (a retry's). Returns their UNIQ_KEYs. On any error nothing is left in w."""
    cdef Py_ssize_t start = w.position(), i
    cdef WriteBuffer props = WriteBuffer()
    cdef list uniqs = []
    try:
        start = frame_begin(w, CODE_SEND_BATCH_MESSAGE, opaque, 0)
        send_header(w, group, topic, default_queues, queue_id, 0, born_ts, flag, <const uint8_t *> b"", 0, 0, True,
                    -1)
        frame_header_end(w, start)
        if uniq_keys is not None and len(uniq_keys) != PyList_GET_SIZE(msgs):
            raise ValueError(f"{len(uniq_keys)} UNIQ_KEYs for {PyList_GET_SIZE(msgs)} messages")
        for i in range(PyList_GET_SIZE(msgs)):
            batch_entry(w, <object> PyList_GET_ITEM(msgs, i), props, uniqs,
                        None if uniq_keys is None else <object> PyList_GET_ITEM(uniq_keys, i))
        frame_end(w, start)
        return uniqs
    except BaseException:
        w._len = start
        raise


def render_pull(WriteBuffer w not None, int32_t opaque, str group not None, str topic not None, int32_t queue_id,
                int64_t queue_offset, int32_t max_nums, int32_t sys_flag, int64_t commit_offset,
                int64_t suspend_ms, str subscription not None, int64_t sub_version=0) -> None:
    """One PULL_MESSAGE frame into w (PullMessageRequestHeader, in the order the client's ext dict
    had its fields). On any error nothing is left in w."""
    cdef Py_ssize_t start = w.position()
    try:
        start = frame_begin(w, CODE_PULL_MESSAGE, opaque, 0)
        ext_text(w, b"consumerGroup", 13, group, True)
        ext_text(w, b"topic", 5, topic, False)
        ext_int(w, b"queueId", 7, queue_id)
        ext_int(w, b"queueOffset", 11, queue_offset)
        ext_int(w, b"maxMsgNums", 10, max_nums)
        ext_int(w, b"sysFlag", 7, sys_flag)
        ext_int(w, b"commitOffset", 12, commit_offset)
        ext_int(w, b"suspendTimeoutMillis", 20, suspend_ms)
        ext_text(w, b"subscription", 12, subscription, False)
        ext_int(w, b"subVersion", 10, sub_version)
        frame_header_end(w, start)
        frame_end(w, start)
    except BaseException:
        w._len = start
        raise


# -- replies -------------------------------------------------------------------------------------

@cython.final
@cython.freelist(64)
cdef class Reply:
    """One response as the client needs it (docs/formats.md §4.2): code, opaque, remark, the
    send and pull fields present (None when absent), the body. header_start/header_len and
    serialize_type locate the frame's header in the buffer it was read from, valid only while
    that read is being handled (for a waiter that wants the whole RemotingCommand)."""

    @property
    def queue_id(self):
        return self._queue_id if self.fields & F_QUEUE_ID else None

    @property
    def queue_offset(self):
        return self._queue_offset if self.fields & F_QUEUE_OFFSET else None

    @property
    def next_begin_offset(self):
        return self._next_begin if self.fields & F_NEXT_BEGIN_OFFSET else None

    @property
    def min_offset(self):
        return self._min_offset if self.fields & F_MIN_OFFSET else None

    @property
    def max_offset(self):
        return self._max_offset if self.fields & F_MAX_OFFSET else None

    @property
    def suggest_which_broker_id(self):
        return self._suggest if self.fields & F_SUGGEST_BROKER else None

    def __repr__(self):
        return (f"<Reply opaque={self.opaque} code={self.code} remark={self.remark!r} msgId={self.msg_id!r} "
                f"queueId={self.queue_id} queueOffset={self.queue_offset} nextBeginOffset={self.next_begin_offset} "
                f"body={len(self.body)}B>")


cdef enum:  # the reply fields read (index into at[])
    K_NONE = -1
    K_MSG_ID = 0
    K_QUEUE_ID = 1
    K_QUEUE_OFFSET = 2
    K_NEXT_BEGIN = 3
    K_MIN_OFFSET = 4
    K_MAX_OFFSET = 5
    K_SUGGEST = 6
    K_TRANSACTION_ID = 7
    K_RECALL_HANDLE = 8
    N_KNOWN = 9


cdef inline int known_key(const uint8_t *k, Py_ssize_t n) noexcept nogil:
    if n == 5 and memcmp(k, b"msgId", 5) == 0:
        return K_MSG_ID
    if n == 7 and memcmp(k, b"queueId", 7) == 0:
        return K_QUEUE_ID
    if n == 11 and memcmp(k, b"queueOffset", 11) == 0:
        return K_QUEUE_OFFSET
    if n == 15 and memcmp(k, b"nextBeginOffset", 15) == 0:
        return K_NEXT_BEGIN
    if n == 9:
        if memcmp(k, b"minOffset", 9) == 0:
            return K_MIN_OFFSET
        if memcmp(k, b"maxOffset", 9) == 0:
            return K_MAX_OFFSET
    if n == 20 and memcmp(k, b"suggestWhichBrokerId", 20) == 0:
        return K_SUGGEST
    if n == 13 and memcmp(k, b"transactionId", 13) == 0:
        return K_TRANSACTION_ID
    if n == 12 and memcmp(k, b"recallHandle", 12) == 0:
        return K_RECALL_HANDLE
    return K_NONE


cdef bint read_long(const uint8_t *p, HeaderField *f, int64_t lo, int64_t hi, int64_t *out) noexcept nogil:
    """An integer field of a reply (§4.2): a JSON integer, or a string (no escapes) of an optional
    '-' and 1 to 19 decimal digits, within [lo, hi]. False: not readable here."""
    cdef const uint8_t *s
    cdef Py_ssize_t i = 0, n
    cdef uint64_t m = 0
    cdef bint neg = False
    cdef int64_t v
    if f.kind == V_INT:
        v = f.ival
    elif f.kind == V_STRING or f.kind == V_BYTES:
        s = p + f.val_pos
        n = f.val_len
        if n > 0 and s[0] == 45:
            neg = True
            i = 1
        if i >= n or n - i > 19:
            return False
        while i < n:
            if s[i] < 48 or s[i] > 57:
                return False
            m = m * 10 + (s[i] - 48)   # 19 digits stay below 2^64
            i += 1
        if neg:
            if m > (<uint64_t> INT64_MAX) + 1:
                return False
            v = <int64_t> ((<uint64_t> 0) - m)
        else:
            if m > <uint64_t> INT64_MAX:
                return False
            v = <int64_t> m
    else:
        return False
    if v < lo or v > hi:
        return False
    out[0] = v
    return True


cdef object read_text(const uint8_t *p, HeaderField *f):
    """A string field or the remark: its text, None for null; NotImplemented if it is no string."""
    cdef uint8_t small[256]
    cdef uint8_t *tmp
    cdef Py_ssize_t m
    if f.kind == V_STRING or f.kind == V_BYTES:
        return PyUnicode_DecodeUTF8(<const char *> p + f.val_pos, f.val_len, NULL)
    if f.kind == V_NULL:
        return None
    if f.kind != V_ESCAPED:
        return NotImplemented
    tmp = &small[0]
    if f.val_len > 256:
        tmp = <uint8_t *> PyMem_Malloc(f.val_len)
        if tmp == NULL:
            raise MemoryError()
    try:
        m = unescape_json(p + f.val_pos, f.val_len, tmp)
        return PyUnicode_DecodeUTF8(<const char *> tmp, m, NULL)
    finally:
        if tmp != &small[0]:
            PyMem_Free(tmp)


# -- fast sends -----------------------------------------------------------------------------------

cdef object RESULT_TYPE = None   # SendResult (broker.client.producer)
cdef dict STATUS_OF = {}         # response code of a stored message -> SendResult.status
cdef double INF = float("inf")
DEF MAX_OPAQUE = 0x7FFFFFFF      # opaques are Java ints
RESULT_FIELDS = ("status", "msg_id", "offset_msg_id", "queue", "queue_offset", "recall_handle")
# where each of RESULT_FIELDS lives in a RESULT_TYPE object, when that type is a plain slots
# dataclass (its __init__ stores the six arguments and does nothing else): a SendResult is then
# made by filling its slots, not by a Python call of its __init__ per message; -1: call it
cdef Py_ssize_t RESULT_SLOTS[6]
RESULT_SLOTS[0] = -1


def send_result_setup(result_type, dict status_of not None) -> None:
    """What an answered send becomes: result_type(status, msg_id, offset_msg_id, queue,
    queue_offset, recall_handle) with status_of[code]; set once by broker.client.producer."""
    global RESULT_TYPE, STATUS_OF
    RESULT_TYPE = result_type
    STATUS_OF = dict(status_of)
    RESULT_SLOTS[0] = -1
    if result_type is not None and _plain_slots_dataclass(result_type):
        for i, name in enumerate(RESULT_FIELDS):
            RESULT_SLOTS[i] = (<PyMemberDescrObject *> <PyObject *> result_type.__dict__[name]).d_member.offset


cdef bint _plain_slots_dataclass(type t):
    """t is a dataclass of exactly RESULT_FIELDS, in order, each an object slot of t's own, whose
    __new__ is object's and which has no __post_init__: an object of it with every slot filled
    is what its __init__ makes."""
    import dataclasses
    import types
    if not dataclasses.is_dataclass(t) or hasattr(t, "__post_init__") or t.__new__ is not object.__new__:
        return False
    if tuple(f.name for f in dataclasses.fields(t)) != RESULT_FIELDS or not t.__dataclass_params__.init:
        return False
    if getattr(getattr(t.__init__, "__code__", None), "co_filename", None) != "<string>":  # not the one dataclass wrote
        return False
    for name in RESULT_FIELDS:
        d = t.__dict__.get(name)
        if type(d) is not types.MemberDescriptorType or (<PyMemberDescrObject *> <PyObject *> d).d_member.type != T_OBJECT_EX:
            return False
    return True


cdef inline void fill_slot(object o, Py_ssize_t offset, object v):
    Py_INCREF(v)
    (<PyObject **> ((<char *> <PyObject *> o) + offset))[0] = <PyObject *> v


cdef object send_result(object status, object uniq, object offset_id, object mq, int64_t queue_offset, object recall):
    """RESULT_TYPE(status, uniq, offset_id, mq, queue_offset, recall)."""
    cdef object r
    if RESULT_SLOTS[0] < 0:
        return RESULT_TYPE(status, uniq, offset_id, mq, queue_offset, recall)
    r = PyType_GenericAlloc(<PyTypeObject *> RESULT_TYPE, 0)
    fill_slot(r, RESULT_SLOTS[0], status)
    fill_slot(r, RESULT_SLOTS[1], uniq)
    fill_slot(r, RESULT_SLOTS[2], offset_id)
    fill_slot(r, RESULT_SLOTS[3], mq)
    fill_slot(r, RESULT_SLOTS[4], queue_offset)
    fill_slot(r, RESULT_SLOTS[5], recall)
    return r


cdef inline tuple slot_tuple(SendSlot *s):
    """The slot's references handed over as (fut, msg, mq, uniq, owner, deadline, timeout); the slot freed."""
    cdef tuple t = (<object> s.fut, <object> s.msg, <object> s.mq, <object> s.uniq, <object> s.owner, s.deadline,
                    s.timeout)
    slot_clear(s)
    return t


cdef inline void slot_clear(SendSlot *s) noexcept:
    Py_XDECREF(<PyObject *> s.fut)
    Py_XDECREF(<PyObject *> s.msg)
    Py_XDECREF(<PyObject *> s.mq)
    Py_XDECREF(<PyObject *> s.uniq)
    Py_XDECREF(<PyObject *> s.owner)
    s.fut = s.msg = s.mq = s.uniq = s.owner = NULL


@cython.final
cdef class SendSlots:
    """A connection's opaques, and its SEND_MESSAGE_V2 requests in flight that complete in C.

    send() renders a message into the connection's WriteBuffer under the next opaque and keeps,
    in the ring slot of that opaque, what its answer needs; ReplyReader.read, meeting the answer,
    completes the caller's future with a SendResult made here (complete()), with no Reply, dict
    or Python call of the channel's in between. An answer that is not a plain success (a failure
    code, a queue other than the one asked), a frame only Python reads (take()), a deadline
    passed (expire()) and a closed connection (take_all()) go to the owner's Python instead:
    owner._send_answer(fut, answer, msg, mq, uniq, channel, deadline, timeout).

    Deadlines: `armed` is the earliest deadline the channel's one timer waits for (inf: none);
    send() returns 1 when a send's deadline comes before it (the channel re-arms), and expire()
    scans the ring, which holds only the sends in flight."""

    def __cinit__(self, channel=None, Py_ssize_t size=4096):
        if size <= 0 or size & (size - 1):
            raise ValueError(f"a ring of {size} slots: a power of two is needed")
        self.size = size
        self.channel = channel
        self.armed = INF
        self.props = WriteBuffer()

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.ring != NULL:
            for i in range(self.size):
                slot_clear(&self.ring[i])
            PyMem_Free(self.ring)

    def bind(self, loop) -> None:
        """The connection is open on `loop`: submit() makes its futures and reads its clock."""
        self._create_future = loop.create_future
        self._time = loop.time
        self._open = True

    def submit(self, WriteBuffer w not None, owner, str group not None, msg, mq, int32_t queue_id,
               int32_t default_queues, Py_ssize_t compress_over, double timeout, double fresh_until):
        """send() for the channel's loop (bind()): a new future, kept with `msg` rendered into w,
        the channel's timer armed (channel._arm_sends()) and its flush scheduled
        (channel._schedule_flush()) as needed; returns that future. None: not a send for here
        (send() returned -1), nothing done; False: the connection is closed (take_all()) or the
        route was fresh only until `fresh_until` (loop time), which has passed."""
        return slots_submit(self, w, owner, group, msg, mq, queue_id, default_queues, compress_over, timeout,
                            fresh_until)

    def next_opaque(self) -> int:
        """The connection's next opaque (1 .. 2^31-1, then 1 again): every request takes one here."""
        self._opaque = self._opaque % MAX_OPAQUE + 1
        return self._opaque

    cpdef int send(self, WriteBuffer w, fut, owner, str group, msg, mq, int32_t queue_id,
                   int32_t default_queues, Py_ssize_t compress_over, double now, double timeout) except -2:
        """Render `msg` (a Message, to `mq`, whose queue id is queue_id) into w and keep it in
        flight: 0; 1 when the channel's timer must be armed at `armed` now; -1 when the send is
        not one for here (a body over compress_over, or the opaque's slot still taken by a send
        4096 opaques old): nothing was rendered or kept."""
        cdef SendSlot *s
        cdef int32_t opaque
        cdef Py_ssize_t i
        if w is None or group is None:
            raise TypeError("send() needs a WriteBuffer and a group")
        body = msg.body
        if len(body) > compress_over:
            return -1
        if self.ring == NULL:
            self.ring = <SendSlot *> PyMem_Malloc(self.size * sizeof(SendSlot))
            if self.ring == NULL:
                raise MemoryError()
            for i in range(self.size):
                self.ring[i].fut = self.ring[i].msg = self.ring[i].mq = NULL
                self.ring[i].uniq = self.ring[i].owner = NULL
        opaque = self._opaque % MAX_OPAQUE + 1
        s = &self.ring[opaque & (self.size - 1)]
        if s.fut != NULL:
            return -1
        uniq = _render_send(w, self.props, opaque, False, group, msg.topic, default_queues, queue_id, 0, msg.flag,
                            body, msg.tags, msg.keys, msg.properties, msg.delay_level, 0, -1, None, -1)
        self._opaque = opaque
        s.opaque = opaque
        s.queue_id = queue_id
        s.deadline = now + timeout
        s.timeout = timeout
        Py_INCREF(fut)
        s.fut = <void *> fut
        Py_INCREF(msg)
        s.msg = <void *> msg
        Py_INCREF(mq)
        s.mq = <void *> mq
        Py_INCREF(uniq)
        s.uniq = <void *> uniq
        Py_INCREF(owner)
        s.owner = <void *> owner
        self.in_flight += 1
        if s.deadline < self.armed:
            self.armed = s.deadline
            return 1
        return 0

    cdef int complete(self, Reply r) except -1:
        """1 when r answers a send kept here (its future completed, or the owner called); 0 if not."""
        cdef SendSlot *s
        cdef object status
        cdef tuple t
        if self.ring == NULL:
            return 0
        s = &self.ring[r.opaque & (self.size - 1)]
        if s.fut == NULL or s.opaque != r.opaque:
            return 0
        self.in_flight -= 1
        status = STATUS_OF.get(r.code)
        if status is None or RESULT_TYPE is None or (r.fields & F_QUEUE_ID and r._queue_id != s.queue_id):
            t = slot_tuple(s)
            t[4]._send_answer(t[0], r, t[1], t[2], t[3], self.channel, t[5], t[6])
            return 1
        fut = <object> s.fut
        uniq = <object> s.uniq
        mq = <object> s.mq
        slot_clear(s)
        if fut.done():  # its caller cancelled it
            return 1
        # a timer message's answer carries its recall handle (None for the others)
        fut.set_result(send_result(status, uniq, r.msg_id if r.msg_id else "", mq,
                                   r._queue_offset if r.fields & F_QUEUE_OFFSET else -1, r.recall_handle))
        return 1

    def take(self, int32_t opaque):
        """The send in flight under `opaque` as (fut, msg, mq, uniq, owner, deadline, timeout),
        no longer kept; None when there is none."""
        cdef SendSlot *s
        if self.ring == NULL:
            return None
        s = &self.ring[opaque & (self.size - 1)]
        if s.fut == NULL or s.opaque != opaque:
            return None
        self.in_flight -= 1
        return slot_tuple(s)

    def expire(self, double now) -> list:
        """The sends whose deadline is at or before `now`, no longer kept (as take() gives them);
        `armed` becomes the earliest deadline left (inf: none)."""
        cdef list out = []
        cdef Py_ssize_t i
        cdef double nxt = INF
        if self.ring != NULL and self.in_flight:
            for i in range(self.size):
                if self.ring[i].fut == NULL:
                    continue
                if self.ring[i].deadline <= now:
                    self.in_flight -= 1
                    out.append(slot_tuple(&self.ring[i]))
                elif self.ring[i].deadline < nxt:
                    nxt = self.ring[i].deadline
        self.armed = nxt
        return out

    def take_all(self) -> list:
        """Every send in flight (the connection closed), in no particular order; submit() takes
        no more."""
        cdef list out = []
        cdef Py_ssize_t i
        self._open = False
        if self.ring != NULL and self.in_flight:
            for i in range(self.size):
                if self.ring[i].fut != NULL:
                    out.append(slot_tuple(&self.ring[i]))
        self.in_flight = 0
        self.armed = INF
        return out


cdef object slots_submit(SendSlots self, WriteBuffer w, owner, str group, msg, mq, int32_t queue_id,
                         int32_t default_queues, Py_ssize_t compress_over, double timeout, double fresh_until):
    """SendSlots.submit (FastTopic.submit calls it from C)."""
    cdef double now
    cdef int r
    if not self._open:
        return False
    now = self._time()
    if now >= fresh_until:
        return False
    fut = self._create_future()
    r = self.send(w, fut, owner, group, msg, mq, queue_id, default_queues, compress_over, now, timeout)
    if r < 0:
        return None
    channel = self.channel
    if r:
        channel._arm_sends()
    if not channel._flush_soon:
        channel._schedule_flush()
    return fut


@cython.final
cdef class FastTopic:
    """A producer's fast sends of one topic (Producer.send): the queue chosen round-robin and the
    message handed to that queue's connection (SendSlots.submit) with no Python of the producer's
    per send. Made from the route cache's entry for the topic (`hit`, a tuple the cache replaces
    when it refetches or drops the route): each of `targets` is (queue, queue id, the open
    ClientChannel of its broker), `rr` the producer's round-robin counter of the topic (an
    iterator of ints), `fresh_until` (loop time) when the route stops being fresh."""

    cdef readonly object hit
    cdef readonly double fresh_until
    cdef readonly str topic
    cdef readonly Py_ssize_t n
    cdef dict routes
    cdef object owner, rr
    cdef str group
    cdef int32_t default_queues
    cdef Py_ssize_t compress_over
    cdef list mqs, qids, slots, outs

    def __init__(self, owner, str group not None, int32_t default_queues, Py_ssize_t compress_over,
                 dict routes not None, str topic not None, hit, double fresh_until, list targets not None, rr):
        if not targets:
            raise ValueError("a FastTopic needs at least one target")
        self.owner, self.group, self.default_queues, self.compress_over = owner, group, default_queues, compress_over
        self.routes, self.topic, self.hit, self.fresh_until, self.rr = routes, topic, hit, fresh_until, rr
        self.mqs = [t[0] for t in targets]
        self.qids = [int(t[1]) for t in targets]
        self.slots = [<SendSlots?> t[2].sends for t in targets]
        self.outs = [<WriteBuffer?> t[2].out for t in targets]
        self.n = len(targets)

    def submit(self, msg, double timeout):
        """Send `msg` on the next queue: the future its answer completes (SendSlots.submit). None:
        not a send for here (a body to compress: before a queue is taken; the ring slot of the
        next opaque still taken), nothing sent; False: stale (the route cache holds another entry
        for the topic, the route is no longer fresh, or the connection closed), nothing sent."""
        cdef Py_ssize_t i
        cdef long long k
        if len(msg.body) > self.compress_over:
            return None
        if self.routes.get(self.topic) is not self.hit:
            return False
        k = next(self.rr)
        i = k % self.n
        if i < 0:
            i += self.n
        return slots_submit(<SendSlots> self.slots[i], <WriteBuffer> self.outs[i], self.owner, self.group, msg,
                            self.mqs[i], <int32_t> self.qids[i], self.default_queues, self.compress_over, timeout,
                            self.fresh_until)


@cython.final
cdef class ReplyReader:
    """Reads the frames of a client connection's receive buffer (read()), keeping a Reply for
    every response it can read whole; take() hands them over."""

    def __cinit__(self, Py_ssize_t max_frame=DEFAULT_MAX_FRAME):
        self.replies = []
        self.max_frame = max_frame

    def take(self) -> list:
        """The Replies read since the last take, in frame order."""
        out = self.replies
        self.replies = []
        return out

    def read(self, buf, Py_ssize_t pos, Py_ssize_t end) -> tuple:
        """Read the frames of buf[pos:end] until one goes to Python. Returns (status, pos):
        READ_DONE with pos at the first incomplete frame (or end); READ_SLOW with pos at a frame
        to decode as a RemotingCommand (geometry in slow_*; continue from slow_next). A frame
        that cannot be one raises FrameError, a header that cannot be one HeaderError."""
        cdef Py_buffer view
        cdef const uint8_t *p
        cdef FrameSpan f
        cdef FrameStatus status
        cdef Reply r
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        p = <const uint8_t *> view.buf
        try:
            if pos < 0 or end > view.len or pos > end:
                raise ValueError(f"range [{pos}, {end}) outside a buffer of {view.len}")
            while end - pos >= 4:
                status = frame_at(p, pos, end, self.max_frame, &f)
                if status == FRAME_INCOMPLETE:
                    break
                if status != FRAME_OK:
                    raise_frame_error(status, pos, &f, self.max_frame)
                r = self._reply(p, f.serialize_type, f.header_start, f.header_len, f.body_start, f.body_len)
                if r is not None and self.sends is not None and self.sends.complete(r):
                    pos = f.next
                    continue
                if r is None:
                    self.slow_type = f.serialize_type
                    self.slow_header_start = f.header_start
                    self.slow_header_len = f.header_len
                    self.slow_body_start = f.body_start
                    self.slow_body_len = f.body_len
                    self.slow_next = f.next
                    return READ_SLOW_, pos
                self.replies.append(r)
                pos = f.next
            return READ_DONE_, pos
        finally:
            PyBuffer_Release(&view)

    cdef Reply _reply(self, const uint8_t *buf, int st, Py_ssize_t hs, Py_ssize_t hl, Py_ssize_t bs, Py_ssize_t bl):
        """The frame as a Reply, or None when it goes to Python (§4.2)."""
        cdef RemotingHeader h
        cdef HeaderField ext[REPLY_MAX_EXT]
        cdef Py_ssize_t at[N_KNOWN]
        cdef Py_ssize_t i
        cdef int k
        cdef int64_t v
        cdef uint32_t fields = 0
        cdef const uint8_t *p = buf + hs
        cdef Reply r
        if st == 0:
            parse_json_header(p, hl, &h, ext, REPLY_MAX_EXT)
        else:
            parse_rocketmq_header(p, hl, &h, ext, REPLY_MAX_EXT)
        if not (h.flag & FLAG_RESPONSE) or h.ext_total > REPLY_MAX_EXT:
            return None
        for i in range(N_KNOWN):
            at[i] = -1
        for i in range(h.n_ext):
            if ext[i].key_escaped:
                return None
            k = known_key(p + ext[i].key_pos, ext[i].key_len)
            if k != K_NONE:
                at[k] = i  # the last of equal keys counts, as in Java's HashMap
        remark = read_text(p, &h.remark)
        if remark is NotImplemented:
            return None
        r = Reply.__new__(Reply)
        r.opaque = h.opaque
        r.code = h.code
        r.remark = remark
        r.header_start = hs
        r.header_len = hl
        r.serialize_type = st
        # integers: a null value (ROCKETMQ's length 0) is an absent field, as the accessors read it
        if at[K_QUEUE_ID] >= 0 and ext[at[K_QUEUE_ID]].kind != V_NULL:
            if not read_long(p, &ext[at[K_QUEUE_ID]], -2147483648, 2147483647, &v):
                return None
            r._queue_id = <int32_t> v
            fields |= F_QUEUE_ID
        if at[K_QUEUE_OFFSET] >= 0 and ext[at[K_QUEUE_OFFSET]].kind != V_NULL:
            if not read_long(p, &ext[at[K_QUEUE_OFFSET]], -INT64_MAX - 1, INT64_MAX, &r._queue_offset):
                return None
            fields |= F_QUEUE_OFFSET
        if at[K_NEXT_BEGIN] >= 0 and ext[at[K_NEXT_BEGIN]].kind != V_NULL:
            if not read_long(p, &ext[at[K_NEXT_BEGIN]], -INT64_MAX - 1, INT64_MAX, &r._next_begin):
                return None
            fields |= F_NEXT_BEGIN_OFFSET
        if at[K_MIN_OFFSET] >= 0 and ext[at[K_MIN_OFFSET]].kind != V_NULL:
            if not read_long(p, &ext[at[K_MIN_OFFSET]], -INT64_MAX - 1, INT64_MAX, &r._min_offset):
                return None
            fields |= F_MIN_OFFSET
        if at[K_MAX_OFFSET] >= 0 and ext[at[K_MAX_OFFSET]].kind != V_NULL:
            if not read_long(p, &ext[at[K_MAX_OFFSET]], -INT64_MAX - 1, INT64_MAX, &r._max_offset):
                return None
            fields |= F_MAX_OFFSET
        if at[K_SUGGEST] >= 0 and ext[at[K_SUGGEST]].kind != V_NULL:
            if not read_long(p, &ext[at[K_SUGGEST]], -INT64_MAX - 1, INT64_MAX, &r._suggest):
                return None
            fields |= F_SUGGEST_BROKER
        # strings: null is absent too
        r.msg_id = None
        r.transaction_id = None
        r.recall_handle = None
        if at[K_MSG_ID] >= 0:
            r.msg_id = read_text(p, &ext[at[K_MSG_ID]])
            if r.msg_id is NotImplemented:
                return None
            if r.msg_id is not None:
                fields |= F_MSG_ID
        if at[K_TRANSACTION_ID] >= 0:
            r.transaction_id = read_text(p, &ext[at[K_TRANSACTION_ID]])
            if r.transaction_id is NotImplemented:
                return None
            if r.transaction_id is not None:
                fields |= F_TRANSACTION_ID
        if at[K_RECALL_HANDLE] >= 0:
            r.recall_handle = read_text(p, &ext[at[K_RECALL_HANDLE]])
            if r.recall_handle is NotImplemented:
                return None
            if r.recall_handle is not None:
                fields |= F_RECALL_HANDLE
        r.fields = fields
        r.body = PyBytes_FromStringAndSize(<const char *> buf + bs, bl) if bl > 0 else EMPTY
        return r


def read_replies(buf, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t max_frame=DEFAULT_MAX_FRAME,
                 SendSlots sends=None) -> tuple:
    """Every frame of buf[pos:end] through a ReplyReader, for the tests and the fuzz harness:
    (items, pos) where each item is a Reply or ("slow", type, header_start, header_len,
    body_start, body_len), and pos is where the first incomplete frame begins. The answers to
    the sends kept in `sends` complete them and leave no item."""
    cdef ReplyReader reader = ReplyReader(max_frame)
    reader.sends = sends
    items = []
    while True:
        status, pos = reader.read(buf, pos, end)
        items.extend(reader.take())
        if status == READ_DONE_:
            return items, pos
        items.append(("slow", reader.slow_type, reader.slow_header_start, reader.slow_header_len,
                      reader.slow_body_start, reader.slow_body_len))
        pos = reader.slow_next
