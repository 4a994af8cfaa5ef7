# cython: language_level=3
"""SendMessage's request (apache.rocketmq.v2.SendMessageRequest) read from its protobuf bytes
straight into what the front's producer sends: the topic, body, tag, keys and the properties
broker.proxy.converter.to_remoting would give, without the protobuf package's Python objects.

It takes what nearly every call is: one message, plain (no transaction, no delivery time, no
message group, no GZIP body) and valid by every rule to_remoting applies. Anything else is
declined (None): a second message, a field repeated where protobuf would merge, a wrong wire type,
a limit passed, a property, tag or key to refuse. The protobuf path then
reads the request and answers it, errors included, as before. Whatever is accepted is what
protobuf would read: the fields skipped are checked as protobuf checks them (well-formed wire
data, UTF-8 strings). tests/twins/send_request_twin.py is its pure-Python twin;
tests/test_send_request_kernel.py holds both equal to each other and to protobuf + to_remoting.
send_ok's twin is tests/twins/send_reply_twin.py; tests/test_send_reply.py holds both equal to
protobuf's serialization."""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Next
from cpython.object cimport PyObject

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
from cpython.unicode cimport PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8
from libc.string cimport memcpy
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

from ascii cimport ascii_int
from utf8 cimport valid_utf8
from protobuf_wire cimport pb_read_varint as _varint, pb_varint_len as _varint_len

cdef enum:
    BAD = -1

# SystemProperties fields that are strings protobuf checks for UTF-8 and to_remoting does not read
# (store_host 10, receipt_handle 12, lite_topic 21); Resource's resource_namespace (1); Digest's
# checksum (2); DeadLetterQueue's topic and message_id (1, 2)
cdef uint64_t _SKIPPED_SP_STRINGS = (1 << 10) | (1 << 12) | (1 << 21)
# SystemProperties fields that are messages: body_digest 4 (a string at 2), store_timestamp 9,
# invisible_duration 15, orphaned_transaction_recovery_duration 19 (no strings), dead_letter_queue
# 20 (strings at 1 and 2)
cdef uint64_t _SKIPPED_SP_MESSAGES = (1 << 4) | (1 << 9) | (1 << 15) | (1 << 19) | (1 << 20)


cdef inline bint _utf8(const uint8_t *p, Py_ssize_t s, Py_ssize_t e) noexcept nogil:
    return valid_utf8(p + s, e - s)


cdef inline bint _has_control(const uint8_t *p, Py_ssize_t s, Py_ssize_t e) noexcept nogil:
    """[\\x00-\\x1f\\x7f]: ASCII bytes, never part of a longer UTF-8 sequence."""
    cdef Py_ssize_t i
    for i in range(s, e):
        if p[i] < 0x20 or p[i] == 0x7F:
            return True
    return False


cdef inline bint _has_graphic(const uint8_t *p, Py_ssize_t s, Py_ssize_t e) noexcept nogil:
    """A printable ASCII character (not whitespace): then str.strip() leaves something."""
    cdef Py_ssize_t i
    for i in range(s, e):
        if 0x21 <= p[i] <= 0x7E:
            return True
    return False


cdef inline bint _blank(const uint8_t *p, Py_ssize_t s, Py_ssize_t e, str text):
    """not text.strip(), asked of Python only when no ASCII character answers (U+3000 is blank)."""
    return not _has_graphic(p, s, e) and not text.strip()


cdef inline bint _valid_topic(const uint8_t *p, Py_ssize_t s, Py_ssize_t e) noexcept nogil:
    """TopicValidator: 1-127 characters of [%|a-zA-Z0-9_-]."""
    cdef Py_ssize_t i
    cdef uint8_t c
    if e - s < 1 or e - s > 127:
        return False
    for i in range(s, e):
        c = p[i]
        if not ((c >= 0x61 and c <= 0x7A) or (c >= 0x41 and c <= 0x5A) or (c >= 0x30 and c <= 0x39)
                or c == 0x25 or c == 0x7C or c == 0x5F or c == 0x2D):
            return False
    return True


cdef Py_ssize_t _skip(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, int wire) noexcept nogil:
    """Past one field's value of wire type `wire`: the position after it, or BAD (groups, 3 and 4,
    are declined: no field here is one)."""
    cdef uint64_t v
    if wire == 0:
        return _varint(p, pos, end, &v)
    if wire == 1:
        return pos + 8 if end - pos >= 8 else BAD
    if wire == 5:
        return pos + 4 if end - pos >= 4 else BAD
    if wire == 2:
        pos = _varint(p, pos, end, &v)
        if pos == BAD or v > <uint64_t>(end - pos):
            return BAD
        return pos + <Py_ssize_t>v
    return BAD


cdef Py_ssize_t _tag(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, uint64_t *number, int *wire) noexcept nogil:
    cdef uint64_t key
    pos = _varint(p, pos, end, &key)
    if pos == BAD:
        return BAD
    number[0] = key >> 3
    wire[0] = <int>(key & 7)
    if number[0] == 0 or number[0] > 536870911:  # field numbers are 1 .. 2^29 - 1
        return BAD
    return pos


cdef Py_ssize_t _len(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t *stop) noexcept nogil:
    """A length-delimited value at p[pos]: its first byte's position, its end in `stop`; or BAD."""
    cdef uint64_t v
    pos = _varint(p, pos, end, &v)
    if pos == BAD or v > <uint64_t>(end - pos):
        return BAD
    stop[0] = pos + <Py_ssize_t>v
    return pos


cdef bint _checked(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, uint64_t strings) noexcept nogil:
    """A message to_remoting does not read, walked as protobuf parses it: well-formed fields, and
    UTF-8 in the length-delimited ones whose numbers are in `strings` (its string fields)."""
    cdef uint64_t number
    cdef int wire
    cdef Py_ssize_t s, stop
    while pos < end:
        pos = _tag(p, pos, end, &number, &wire)
        if pos == BAD:
            return False
        if wire == 2 and number < 64 and (strings >> number) & 1:
            s = _len(p, pos, end, &stop)
            if s == BAD or not _utf8(p, s, stop):
                return False
            pos = stop
        else:
            pos = _skip(p, pos, end, wire)
            if pos == BAD:
                return False
    return True


cdef str _text(const uint8_t *p, Py_ssize_t s, Py_ssize_t e):
    """A UTF-8 string field as str, or None when it is not UTF-8 (protobuf refuses the request)."""
    try:
        return PyUnicode_DecodeUTF8(<const char *>p + s, e - s, NULL)
    except UnicodeDecodeError:
        return None


cdef bint _timestamp(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, int64_t *seconds_out,
                     int64_t *q_out) noexcept:
    """A Timestamp's seconds, and nanos // 1_000_000 (floor, as Python's), into the out-params;
    False for a field of another wire type, or wire data that does not parse."""
    cdef uint64_t number, v
    cdef int wire
    cdef int64_t seconds = 0
    cdef int32_t nanos = 0
    while pos < end:
        pos = _tag(p, pos, end, &number, &wire)
        if pos == BAD:
            return False
        if number == 1 or number == 2:
            if wire != 0:
                return False
            pos = _varint(p, pos, end, &v)
            if pos == BAD:
                return False
            if number == 1:
                seconds = <int64_t>v
            else:
                nanos = <int32_t>v
        else:
            pos = _skip(p, pos, end, wire)
            if pos == BAD:
                return False
    # Python's floor division (cdivision truncates): nanos may be negative
    cdef int64_t q = nanos / 1_000_000
    if nanos % 1_000_000 != 0 and nanos < 0:
        q -= 1
    seconds_out[0] = seconds
    q_out[0] = q
    return True


cdef object _timestamp_ms(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end):
    """A Timestamp's seconds * 1000 + nanos // 1_000_000 as to_remoting computes it, or None (a
    field of another wire type, or wire data that does not parse)."""
    cdef int64_t seconds, q
    if not _timestamp(p, pos, end, &seconds, &q):
        return None
    return (<object>seconds) * 1000 + q  # a Python int: any int64 seconds, as to_remoting's


cdef Py_ssize_t _ascii_ms(int64_t seconds, int64_t q, char *out) noexcept:
    """str(seconds * 1000 + q) into out (24 bytes) when it fits an int64 (|seconds| < 9e15, every
    real time): its length; -1 otherwise (the caller formats the Python int)."""
    if seconds >= 9_000_000_000_000_000 or seconds <= -9_000_000_000_000_000:
        return -1
    return ascii_int(seconds * 1000 + q, <uint8_t *>out)


def read_send(bytes payload, str peer, Py_ssize_t max_body, Py_ssize_t max_user_props, Py_ssize_t max_user_prop_size,
              system_names):
    """(topic, body, tag or None, keys list or None, properties, message_id) of a SendMessageRequest
    of one plain, valid message, the properties as to_remoting makes them (`peer`: the client's
    host, the born host of a message naming none); None for anything else (see the module)."""
    return _request(payload, peer, max_body, max_user_props, max_user_prop_size, system_names, False)


def read_send_props(bytes payload, str peer, Py_ssize_t max_body, Py_ssize_t max_user_props,
                    Py_ssize_t max_user_prop_size, system_names):
    """read_send with the properties rendered as the front's producer renders them into
    SEND_MESSAGE_V2's header (client_codec.message_properties(tag, keys, properties)[0]):
    (topic, body, properties bytes, message_id), the message id being the UNIQ_KEY; None for what
    read_send declines. The local front's send (SendMessageActivity._send_local) hands these to
    the broker's send kernel: no dict, no per-property string, no second call to render them."""
    return _request(payload, peer, max_body, max_user_props, max_user_prop_size, system_names, True)


cdef object _request(bytes payload, str peer, Py_ssize_t max_body, Py_ssize_t max_user_props,
                     Py_ssize_t max_user_prop_size, system_names, bint render):
    """The SendMessageRequest's walk: its one message (field 1), other fields unknown to protobuf
    kept unread; the message read by _message."""
    cdef Py_ssize_t n = len(payload)
    cdef const uint8_t *p = <const uint8_t *><const char *>payload
    cdef Py_ssize_t pos = 0, ms = -1, me = -1
    cdef uint64_t number
    cdef int wire
    if n == 0:
        return None
    while pos < n:
        pos = _tag(p, pos, n, &number, &wire)
        if pos == BAD:
            return None
        if number == 1:
            if wire != 2 or ms != -1:
                return None
            ms = _len(p, pos, n, &me)
            if ms == BAD:
                return None
            pos = me
        else:
            pos = _skip(p, pos, n, wire)
            if pos == BAD:
                return None
    if ms == -1:
        return None
    return _message(payload, p, ms, me, peer, max_body, max_user_props, max_user_prop_size, system_names, render)


cdef object _message(payload, const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, str peer, Py_ssize_t max_body,
                     Py_ssize_t max_user_props, Py_ssize_t max_user_prop_size, system_names, bint render):
    cdef uint64_t number, v
    cdef int wire
    cdef Py_ssize_t s, stop, ts = -1, te = -1, ss = -1, se = -1, bs = 0, be = 0, ks, ke, vs, ve, es, ee
    cdef Py_ssize_t size = 0, entries = 0
    cdef bint have_topic = False
    cdef str key, value
    user = {}
    while pos < end:
        pos = _tag(p, pos, end, &number, &wire)
        if pos == BAD:
            return None
        if number == 1 or number == 3:  # topic, system_properties: once (a second would merge)
            if wire != 2:
                return None
            s = _len(p, pos, end, &stop)
            if s == BAD:
                return None
            if number == 1:
                if have_topic:
                    return None
                have_topic = True
                ts, te = s, stop
            else:
                if ss != -1:
                    return None
                ss, se = s, stop
            pos = stop
        elif number == 2:  # a user_properties entry: key 1, value 2
            if wire != 2:
                return None
            es = _len(p, pos, end, &ee)
            if es == BAD:
                return None
            pos = ee
            ks = ke = vs = ve = es
            while es < ee:
                es = _tag(p, es, ee, &number, &wire)
                if es == BAD:
                    return None
                if number == 1 or number == 2:
                    if wire != 2:
                        return None
                    s = _len(p, es, ee, &stop)
                    if s == BAD or not _utf8(p, s, stop):  # each one checked, the last one kept
                        return None
                    if number == 1:
                        ks, ke = s, stop
                    else:
                        vs, ve = s, stop
                    es = stop
                else:  # protobuf keeps such an entry among the unknown fields, out of the map
                    return None
            if ke == ks or _has_control(p, ks, ke) or _has_control(p, vs, ve):
                return None
            key = _text(p, ks, ke)
            value = _text(p, vs, ve)
            if key is None or value is None or key in system_names:
                return None
            user[key] = value
            entries += 1
            size += (ke - ks) + (ve - vs)
        elif number == 4:  # body: the last one, as protobuf reads a repeated scalar
            if wire != 2:
                return None
            s = _len(p, pos, end, &stop)
            if s == BAD:
                return None
            bs, be = s, stop
            pos = stop
        else:
            pos = _skip(p, pos, end, wire)
            if pos == BAD:
                return None
    if len(user) != entries or entries > max_user_props:  # a key given twice: the protobuf path
        return None
    # the topic (Resource): name 2; resource_namespace 1 is a string protobuf checks
    cdef Py_ssize_t ns = -1, ne = -1
    if not have_topic:
        return None
    pos = ts
    while pos < te:
        pos = _tag(p, pos, te, &number, &wire)
        if pos == BAD:
            return None
        if number == 1 or number == 2:
            if wire != 2:
                return None
            s = _len(p, pos, te, &stop)
            if s == BAD:
                return None
            if not _utf8(p, s, stop):
                return None
            if number == 2:
                ns, ne = s, stop
            pos = stop
        else:
            pos = _skip(p, pos, te, wire)
            if pos == BAD:
                return None
    if ns == -1 or not _valid_topic(p, ns, ne):
        return None
    if be == bs or (0 < max_body < be - bs):
        return None
    if ss == -1:  # no system properties: no message id
        return None
    # the topic decoded from the request's bytes (TopicValidator's characters: ASCII), no bytes slice first
    return _system(payload, p, ss, se, user, size, PyUnicode_DecodeASCII(<const char *> p + ns, ne - ns, NULL),
                   bs, be, peer, max_user_prop_size, render)


cdef object _system(payload, const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, dict user, Py_ssize_t size,
                    str topic, Py_ssize_t bs, Py_ssize_t be, str peer, Py_ssize_t max_user_prop_size, bint render):
    cdef uint64_t number, v
    cdef int wire
    cdef Py_ssize_t s, stop, tag_s = -1, tag_e = -1, id_s = 0, id_e = 0, host_s = 0, host_e = 0
    cdef Py_ssize_t trace_s = 0, trace_e = 0, born_s = -1, born_e = -1
    cdef str text
    keys = []
    while pos < end:
        pos = _tag(p, pos, end, &number, &wire)
        if pos == BAD:
            return None
        if number == 1 or number == 2 or number == 3 or number == 8 or number == 18:
            if wire != 2:
                return None
            s = _len(p, pos, end, &stop)
            if s == BAD or (number != 2 and not _utf8(p, s, stop)):  # each one checked, the last one kept
                return None
            pos = stop
            if number == 1:
                tag_s, tag_e = s, stop
            elif number == 2:  # a key: not blank, no control character
                if _has_control(p, s, stop):
                    return None
                text = _text(p, s, stop)
                if text is None or _blank(p, s, stop, text):
                    return None
                keys.append(text)
                size += stop - s
            elif number == 3:
                id_s, id_e = s, stop
            elif number == 8:
                host_s, host_e = s, stop
            else:
                trace_s, trace_e = s, stop
        elif number == 5 or number == 6:  # body_encoding (GZIP 2), message_type (TRANSACTION 4)
            if wire != 0:
                return None
            pos = _varint(p, pos, end, &v)
            if pos == BAD:
                return None
            if <int32_t>v == (2 if number == 5 else 4):
                return None
        elif number == 7:  # born_timestamp: once
            if wire != 2 or born_s != -1:
                return None
            born_s = _len(p, pos, end, &born_e)
            if born_s == BAD:
                return None
            pos = born_e
        elif number == 11 or number == 17:  # delivery_timestamp, message_group: the protobuf path
            return None
        elif wire == 2 and number < 64 and (_SKIPPED_SP_STRINGS >> number) & 1:
            s = _len(p, pos, end, &stop)
            if s == BAD or not _utf8(p, s, stop):
                return None
            pos = stop
        elif wire == 2 and number < 64 and (_SKIPPED_SP_MESSAGES >> number) & 1:
            s = _len(p, pos, end, &stop)
            if s == BAD or not _checked(p, s, stop, (1 << 2) if number == 4 else
                                        ((1 << 1) | (1 << 2)) if number == 20 else 0):
                return None
            pos = stop
        else:
            pos = _skip(p, pos, end, wire)
            if pos == BAD:
                return None
    tag = None
    if tag_e > tag_s:  # a tag given: not blank, no '|', no control character
        if _has_control(p, tag_s, tag_e):
            return None
        tag = _text(p, tag_s, tag_e)
        if tag is None or "|" in tag or _blank(p, tag_s, tag_e, tag):
            return None
        size += tag_e - tag_s
    if size > max_user_prop_size:
        return None
    message_id = _text(p, id_s, id_e)
    if message_id is None or _blank(p, id_s, id_e, message_id):
        return None
    # born_host and trace are well-formed UTF-8 (each checked by _utf8 above, as strictly as
    # Python decodes): strings of them only for the dict of read_send, not for the rendering
    born_ms = None
    cdef int64_t seconds, q
    cdef char born_buf[24]
    cdef const char *born_p = NULL
    cdef Py_ssize_t born_n = 0
    cdef bytes born_b
    if render:
        if born_s != -1:
            if not _timestamp(p, born_s, born_e, &seconds, &q):
                return None
            born_n = _ascii_ms(seconds, q, born_buf)
            born_p = born_buf
            if born_n < 0:  # past an int64 of milliseconds: the Python int's digits
                born_b = str((<object>seconds) * 1000 + q).encode("ascii")
                born_p = PyBytes_AS_STRING(born_b)
                born_n = PyBytes_GET_SIZE(born_b)
        # the body copied from the request's bytes: no slice object, no ints made for its bounds
        return topic, PyBytes_FromStringAndSize(<const char *> p + bs, be - bs), _render(
            p, user, id_s, id_e, topic, trace_s, trace_e, host_s, host_e, peer, born_p, born_n, tag_s, tag_e,
            tag is not None, keys), message_id
    born_host = _text(p, host_s, host_e)
    trace = _text(p, trace_s, trace_e)
    if born_host is None or trace is None:
        return None
    if born_s != -1:
        born_ms = _timestamp_ms(p, born_s, born_e)
        if born_ms is None:
            return None
    props = user
    props["UNIQ_KEY"] = message_id
    props["PGROUP"] = topic
    if trace:
        props["TRACE_CONTEXT"] = trace
    if born_host or peer:
        props["__BORNHOST"] = born_host or peer
    if born_ms is not None:
        props["BORN_TIMESTAMP"] = str(born_ms)
    return topic, PyBytes_FromStringAndSize(<const char *> p + bs, be - bs), tag, keys or None, props, message_id


cdef inline char *_put(char *w, const char *s, Py_ssize_t n) noexcept nogil:
    memcpy(w, s, n)
    return w + n


cdef bytes _render(const uint8_t *p, dict user, Py_ssize_t id_s, Py_ssize_t id_e, str topic, Py_ssize_t trace_s,
                   Py_ssize_t trace_e, Py_ssize_t host_s, Py_ssize_t host_e, str peer, const char *born_p,
                   Py_ssize_t born_n, Py_ssize_t tag_s, Py_ssize_t tag_e, bint has_tag, list keys):
    """The properties _system would give (the user's in their order, UNIQ_KEY, PGROUP, TRACE_CONTEXT,
    __BORNHOST, BORN_TIMESTAMP: born_p, born_n its digits, NULL: none) followed by what message_properties adds for a tag, keys and WAIT,
    rendered as message_properties renders them: key \x01 value pairs joined by \x02, UTF-8 (a
    string field's bytes as sent: valid UTF-8, checked). No user key is a system name (read_send
    declines those), so none of TAGS, KEYS, DELAY, WAIT, UNIQ_KEY is the user's."""
    cdef Py_ssize_t pos = 0, n = 0, kn, vn, hn, pn, keys_n = 0
    cdef PyObject *k
    cdef PyObject *v
    cdef const char *kp
    cdef const char *vp
    cdef const char *peer_p = NULL
    cdef const char *keys_p = NULL
    cdef const char *topic_p = PyUnicode_AsUTF8AndSize(topic, &pn)
    cdef bytes keys_b = None
    while PyDict_Next(user, &pos, &k, &v):
        PyUnicode_AsUTF8AndSize(<object> k, &kn)
        PyUnicode_AsUTF8AndSize(<object> v, &vn)
        n += kn + vn + 2
    n += 9 + (id_e - id_s) + 1 + 7 + pn  # UNIQ_KEY, PGROUP
    if trace_e > trace_s:
        n += 1 + 14 + (trace_e - trace_s)
    hn = host_e - host_s
    if hn == 0 and peer:
        peer_p = PyUnicode_AsUTF8AndSize(peer, &hn)
    if hn:
        n += 1 + 11 + hn
    if born_p != NULL:
        n += 1 + 15 + born_n
    if has_tag:
        n += 1 + 5 + (tag_e - tag_s)
    if keys:
        keys_b = " ".join(keys).encode("utf-8")
        keys_p = PyBytes_AS_STRING(keys_b)
        keys_n = PyBytes_GET_SIZE(keys_b)
        n += 1 + 5 + keys_n
    n += 1 + 9  # WAIT
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n)
    cdef char *w = PyBytes_AS_STRING(out)
    pos = 0
    while PyDict_Next(user, &pos, &k, &v):
        kp = PyUnicode_AsUTF8AndSize(<object> k, &kn)
        vp = PyUnicode_AsUTF8AndSize(<object> v, &vn)
        w = _put(w, kp, kn)
        w[0] = 1
        w = _put(w + 1, vp, vn)
        w[0] = 2
        w += 1
    w = _put(w, b"UNIQ_KEY\x01", 9)
    w = _put(w, <const char *> p + id_s, id_e - id_s)
    w = _put(w, b"\x02PGROUP\x01", 8)
    w = _put(w, topic_p, pn)
    if trace_e > trace_s:
        w = _put(w, b"\x02TRACE_CONTEXT\x01", 15)
        w = _put(w, <const char *> p + trace_s, trace_e - trace_s)
    if hn:
        w = _put(w, b"\x02__BORNHOST\x01", 12)
        w = _put(w, peer_p if peer_p != NULL else <const char *> p + host_s, hn)
    if born_p != NULL:
        w = _put(w, b"\x02BORN_TIMESTAMP\x01", 16)
        w = _put(w, born_p, born_n)
    if has_tag:
        w = _put(w, b"\x02TAGS\x01", 6)
        w = _put(w, <const char *> p + tag_s, tag_e - tag_s)
    if keys_p != NULL:
        w = _put(w, b"\x02KEYS\x01", 6)
        w = _put(w, keys_p, keys_n)
    _put(w, b"\x02WAIT\x01true", 10)
    return out


# -- the answer ----------------------------------------------------------------------------------------
# field 1 of both SendMessageResponse and SendResultEntry: Status{code: OK (20000), message: "OK"}
cdef const char *_STATUS_OK = b"\x0a\x08\x08\xa0\x9c\x01\x12\x02OK"
cdef enum:
    STATUS_OK_LEN = 10


cdef inline char *_put_varint(char *out, uint64_t v) noexcept nogil:
    while v > 0x7F:
        out[0] = <char>((v & 0x7F) | 0x80)
        out += 1
        v >>= 7
    out[0] = <char>v
    return out + 1


cdef inline char *_put_string(char *out, char tag, const char *s, Py_ssize_t n) noexcept nogil:
    if n == 0:  # proto3: a default value is not written
        return out
    out[0] = tag
    out = _put_varint(out + 1, <uint64_t>n)
    memcpy(out, s, n)
    return out + n


def send_ok(str message_id, int64_t offset, str recall_handle) -> bytes:
    """The bytes protobuf serializes for SendMessageResponse{status: OK, entries: [SendResultEntry{
    status: OK, message_id, offset, recall_handle}]}: three message objects built and serialized
    per call cost more than the rest of the front's answer."""
    cdef bytes mid = message_id.encode("utf-8")
    cdef bytes rh = recall_handle.encode("utf-8")
    cdef Py_ssize_t nm = len(mid), nr = len(rh)
    cdef Py_ssize_t entry = STATUS_OK_LEN
    if nm:
        entry += 1 + _varint_len(<uint64_t>nm) + nm
    if offset:
        entry += 1 + _varint_len(<uint64_t>offset)  # int64: a negative one in ten bytes
    if nr:
        entry += 1 + _varint_len(<uint64_t>nr) + nr
    cdef bytes out = PyBytes_FromStringAndSize(NULL, STATUS_OK_LEN + 1 + _varint_len(<uint64_t>entry) + entry)
    cdef char *w = PyBytes_AS_STRING(out)
    memcpy(w, _STATUS_OK, STATUS_OK_LEN)
    w[STATUS_OK_LEN] = 0x12
    w = _put_varint(w + STATUS_OK_LEN + 1, <uint64_t>entry)
    memcpy(w, _STATUS_OK, STATUS_OK_LEN)
    w = _put_string(w + STATUS_OK_LEN, 0x12, PyBytes_AS_STRING(mid), nm)
    if offset:
        w[0] = 0x20
        w = _put_varint(w + 1, <uint64_t>offset)
    _put_string(w, 0x2a, PyBytes_AS_STRING(rh), nr)
    return out
