# cython: language_level=3
"""Pulled records read in C: message views for the client, Arrow column buffers for Spark.

The layout and the checks made before any field is read are in pulled.pxd (docs/formats.md §1).
A view holds the pulled bytes and its record's offsets; what a consumer does not look at (the
properties of a message it only counts, the msgId of one it only stores) is never decoded. The
column builder writes every field of every record straight into Arrow's buffer layouts
(offsets + data, validity bytes, little-endian integers), so Spark's batches cost no Python object
per row. Property strings are read as RocketMQ's string2messageProperties reads them: pieces
split at \\x02, each at its first \\x01, a pair kept only with a key and a value.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from broker.kernels.wbuf cimport WriteBuffer
from bytesex cimport get_be16, get_be32, get_be64
from ascii cimport msg_id_hex
from utf8 cimport valid_utf8

import socket
import zlib

from cpython.memoryview cimport PyMemoryView_GET_BUFFER

cdef enum:
    FIXED_LEN_V4 = 91
    SYSFLAG_COMPRESSED = 0x1
    SYSFLAG_BORNHOST_V6 = 0x10
    SYSFLAG_STOREHOST_V6 = 0x20

cdef uint32_t MESSAGE_MAGIC = 0xDAA320A7u

# A host's "ip:port" text by its stored bytes (address and port): the store host is the same in
# every record of a broker, a born host the same for all of a producer connection's messages, and
# inet_ntop plus the formatting cost more than a received message's whole encoding otherwise
# (a pop of 32 made 64 of them). Emptied when full, so a crowd of producers cannot grow it.
cdef dict _HOSTS = {}
cdef Py_ssize_t _HOSTS_MAX = 4096


class PulledRecordsError(ValueError):
    """Pulled bytes that are not a run of whole records, or a body flagged compressed that does
    not inflate. `offset` is where, in the bytes given."""

    def __init__(self, offset, message):
        super().__init__(message)
        self.offset = offset


cdef int _corrupt(Py_ssize_t pos, str reason) except -1:
    raise PulledRecordsError(pos, f"pulled body is corrupt at byte {pos}: {reason}")


cdef int walk_record(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, RecordSpan *r) except -1:
    cdef const uint8_t *q = p + pos
    cdef Py_ssize_t avail = end - pos, total, at
    cdef uint32_t magic
    if avail < 8:
        return _corrupt(pos, f"{avail} bytes cannot hold a record")
    total = <int32_t> get_be32(q)
    magic = get_be32(q + 4)
    if magic != MESSAGE_MAGIC:
        return _corrupt(pos, f"bad magic code 0x{magic:08X}")
    if total < FIXED_LEN_V4 or total > avail:
        return _corrupt(pos, f"total size {total} outside {FIXED_LEN_V4}..{avail}")
    r.pos = pos
    r.size = total
    r.queue_id = <int32_t> get_be32(q + 12)
    r.flag = <int32_t> get_be32(q + 16)
    r.queue_offset = <int64_t> get_be64(q + 20)
    r.phys_offset = <int64_t> get_be64(q + 28)
    r.sys_flag = <int32_t> get_be32(q + 36)
    r.born_ts = <int64_t> get_be64(q + 40)
    r.born_host_len = 20 if r.sys_flag & SYSFLAG_BORNHOST_V6 else 8
    r.store_host_len = 20 if r.sys_flag & SYSFLAG_STOREHOST_V6 else 8
    r.born_host = pos + 48
    at = 48 + r.born_host_len
    # store timestamp, store host, reconsume times, prepared offset, body length
    if at + 8 + r.store_host_len + 4 + 8 + 4 > total:
        return _corrupt(pos, f"total size {total} is too small for its hosts (sysFlag 0x{r.sys_flag:x})")
    r.store_ts = <int64_t> get_be64(q + at)
    r.store_host = pos + at + 8
    at += 8 + r.store_host_len
    r.reconsume_times = <int32_t> get_be32(q + at)
    at += 12
    r.body_len = <int32_t> get_be32(q + at)
    at += 4
    if r.body_len < 0 or r.body_len > total - at - 3:   # TOPICLEN (1) and PROPERTIESLEN (2) follow
        return _corrupt(pos, f"body length {r.body_len} inconsistent with total size {total}")
    r.body = pos + at
    at += r.body_len
    r.topic_len = <int8_t> q[at]
    at += 1
    if r.topic_len < 0 or r.topic_len > total - at - 2:
        return _corrupt(pos, f"topic length {r.topic_len} inconsistent with total size {total}")
    r.topic = pos + at
    at += r.topic_len
    r.props_len = <int16_t> get_be16(q + at)
    at += 2
    if r.props_len < 0 or at + r.props_len != total:
        return _corrupt(pos, f"properties length {r.props_len} does not end at total size {total}")
    r.props = pos + at
    return 0


cdef inline Py_ssize_t piece_end(const uint8_t *p, Py_ssize_t i, Py_ssize_t end, Py_ssize_t *sep) noexcept nogil:
    """The end of the properties piece starting at i (the next \\x02 or `end`); its first \\x01 in sep (-1: none)."""
    sep[0] = -1
    while i < end and p[i] != 2:
        if sep[0] < 0 and p[i] == 1:
            sep[0] = i
        i += 1
    return i


cdef bint find_property(const uint8_t *p, Py_ssize_t start, Py_ssize_t n, const char *name, Py_ssize_t nl,
                        Py_ssize_t *vpos, Py_ssize_t *vlen) noexcept nogil:
    """The value of the last pair named `name` with a non-empty value."""
    cdef Py_ssize_t i = start, end = start + n, j, sep
    cdef bint found = False
    while i < end:
        j = piece_end(p, i, end, &sep)
        if sep >= 0 and sep - i == nl and j - sep > 1 and memcmp(p + i, name, nl) == 0:
            vpos[0] = sep + 1
            vlen[0] = j - sep - 1
            found = True
        i = j + 1
    return found


@cython.freelist(256)
cdef class MessageExt:
    """One pulled message (RocketMQ's MessageExt), a view of the pulled bytes: `body` is made on
    first access (bytes; inflated at decode when the producer compressed it), `body_view` is a
    memoryview of the pulled bytes (no copy), `properties` a dict made on first use, `msg_id` the broker's offsetMsgId (store host and commit-log offset, hex); the
    producer's id is `uniq_key`. MessageExt(topic, body, ...) builds one from fields."""

    def __init__(self, topic, body=b"", int32_t queue_id=0, int64_t queue_offset=0, int64_t commit_log_offset=0,
                 msg_id="", properties=None, int32_t reconsume_times=0, int64_t born_timestamp=0,
                 int64_t store_timestamp=0, born_host="", store_host="", int32_t sys_flag=0, int32_t flag=0,
                 broker_name=""):
        self._data = None
        self._topic = topic
        self._body = body
        self._r.queue_id = queue_id
        self._r.queue_offset = queue_offset
        self._r.phys_offset = commit_log_offset
        self._msg_id = msg_id
        self._props = {} if properties is None else properties
        self._r.reconsume_times = reconsume_times
        self._r.born_ts = born_timestamp
        self._r.store_ts = store_timestamp
        self._born_host = born_host
        self._store_host = store_host
        self._r.sys_flag = sys_flag
        self._r.flag = flag
        self.broker_name = broker_name

    cdef const uint8_t *_ptr(self):
        return <const uint8_t *> PyMemoryView_GET_BUFFER(self._data).buf

    @property
    def topic(self):
        return self._topic

    @topic.setter
    def topic(self, value):
        self._topic = value

    @property
    def body(self):
        """The body as bytes (made from the pulled bytes on first access; body_view copies nothing)."""
        if self._body is None:
            self._body = PyBytes_FromStringAndSize(<const char *> self._ptr() + self._r.body, self._r.body_len)
        return self._body

    @property
    def body_view(self):
        """The body without a copy: a read-only memoryview of the pulled bytes (the inflated bytes
        for a body the producer compressed, or the body given to MessageExt())."""
        if self._body is not None:
            return self._body if type(self._body) is memoryview else memoryview(self._body)
        return self._data[self._r.body:self._r.body + self._r.body_len]

    @property
    def body_size(self):
        return self._r.body_len if self._body is None else len(self._body)

    @body.setter
    def body(self, value):
        self._body = value

    @property
    def properties(self) -> dict:
        cdef const uint8_t *p
        cdef Py_ssize_t i, end, j, sep
        cdef dict out
        if self._props is None:
            out = {}
            p = self._ptr()
            i = self._r.props
            end = i + self._r.props_len
            while i < end:
                j = piece_end(p, i, end, &sep)
                if sep > i and j - sep > 1:
                    out[PyUnicode_DecodeUTF8(<const char *> p + i, sep - i, "replace")] = \
                        PyUnicode_DecodeUTF8(<const char *> p + sep + 1, j - sep - 1, "replace")
                i = j + 1
            self._props = out
        return self._props

    @properties.setter
    def properties(self, value):
        self._props = value

    cdef object _text(self, const char *name, Py_ssize_t n):
        cdef Py_ssize_t vpos, vlen
        if self._props is not None:
            return self._props.get(name.decode("ascii"))
        if find_property(self._ptr(), self._r.props, self._r.props_len, name, n, &vpos, &vlen):
            return PyUnicode_DecodeUTF8(<const char *> self._ptr() + vpos, vlen, "replace")
        return None

    @property
    def tags(self):
        return self._text(b"TAGS", 4)

    @property
    def keys(self):
        return self._text(b"KEYS", 4)

    @property
    def uniq_key(self):
        return self._text(b"UNIQ_KEY", 8)

    @property
    def retry_topic(self):
        return self._text(b"RETRY_TOPIC", 11)

    @property
    def msg_id(self):
        cdef uint8_t out[56]
        if self._msg_id is None:
            msg_id_hex(self._ptr() + self._r.store_host, self._r.store_host_len, self._r.phys_offset, out)
            self._msg_id = PyUnicode_DecodeUTF8(<const char *> out, 2 * (self._r.store_host_len + 8), NULL)
        return self._msg_id

    @property
    def offset_msg_id(self):
        return self.msg_id

    cdef object _host(self, Py_ssize_t at, Py_ssize_t n):
        cdef const uint8_t *p = self._ptr() + at
        cdef bytes raw = PyBytes_FromStringAndSize(<const char *> p, n)
        text = _HOSTS.get(raw)
        if text is None:
            ip = socket.inet_ntop(socket.AF_INET6 if n == 20 else socket.AF_INET, raw[:n - 4])
            text = f"{ip}:{<uint32_t> get_be32(p + n - 4)}"
            if len(_HOSTS) >= _HOSTS_MAX:
                _HOSTS.clear()
            _HOSTS[raw] = text
        return text

    @property
    def born_host(self):
        if self._born_host is None:
            self._born_host = self._host(self._r.born_host, self._r.born_host_len)
        return self._born_host

    @property
    def store_host(self):
        if self._store_host is None:
            self._store_host = self._host(self._r.store_host, self._r.store_host_len)
        return self._store_host

    @property
    def queue_id(self):
        return self._r.queue_id

    @property
    def queue_offset(self):
        return self._r.queue_offset

    @property
    def commit_log_offset(self):
        return self._r.phys_offset

    @property
    def reconsume_times(self):
        return self._r.reconsume_times

    @reconsume_times.setter
    def reconsume_times(self, int32_t value):
        # an orderly consumer counts a message's suspensions on the message itself, as Java's
        # ConsumeMessageOrderlyService does with setReconsumeTimes: the listener sees the count
        self._r.reconsume_times = value

    @property
    def born_timestamp(self):
        return self._r.born_ts

    @property
    def store_timestamp(self):
        return self._r.store_ts

    @property
    def sys_flag(self):
        return self._r.sys_flag

    @property
    def flag(self):
        return self._r.flag

    def __repr__(self):
        return (f"<MessageExt topic={self._topic!r} queueId={self.queue_id} queueOffset={self.queue_offset} "
                f"msgId={self.msg_id} body={self.body_size}B>")


cdef object _inflate(object raw, str msg_id, Py_ssize_t pos):
    try:
        return zlib.decompress(raw)
    except zlib.error as e:
        raise PulledRecordsError(pos, f"message {msg_id} is flagged compressed but does not inflate: {e}") from None


def decode_records(data, broker_name="") -> list:
    """A PULL_MESSAGE FOUND body as MessageExt views, in order; bodies the producer compressed
    are inflated now (so that a bad one fails the pull, not a later read). Raises
    PulledRecordsError."""
    cdef bytes b = data if type(data) is bytes else bytes(data)
    cdef object whole = memoryview(b)
    cdef const uint8_t *p = <const uint8_t *> PyBytes_AS_STRING(b)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b), pos = 0
    cdef RecordSpan r
    cdef MessageExt m
    cdef list out = []
    cdef object topic = None
    cdef Py_ssize_t last_topic = -1, last_len = -1
    while pos < n:
        walk_record(p, pos, n, &r)
        if last_topic < 0 or r.topic_len != last_len or memcmp(p + r.topic, p + last_topic, r.topic_len) != 0:
            topic = PyUnicode_DecodeUTF8(<const char *> p + r.topic, r.topic_len, "replace")
            last_topic, last_len = r.topic, r.topic_len
        m = MessageExt.__new__(MessageExt)
        m._data = whole
        m._r = r
        m._topic = topic
        m.broker_name = broker_name
        if r.sys_flag & SYSFLAG_COMPRESSED:
            m._body = _inflate(whole[r.body:r.body + r.body_len], m.msg_id, pos)
        out.append(m)
        pos += r.size
    return out


# -- Arrow column buffers ------------------------------------------------------------------------

cdef inline int put_i32(WriteBuffer w, int32_t v) except -1:
    return w.write(<const uint8_t *> &v, 4)      # little-endian host: Arrow's byte order


cdef inline int put_i64(WriteBuffer w, int64_t v) except -1:
    return w.write(<const uint8_t *> &v, 8)


cdef inline int end_value(WriteBuffer offsets, WriteBuffer data) except -1:
    """Close a binary value: its end offset (Arrow's int32 offsets)."""
    if data._len > 0x7FFFFFFF:
        raise OverflowError(f"a column of {data._len} bytes exceeds Arrow's 32-bit offsets")
    return put_i32(offsets, <int32_t> data._len)


@cython.final
cdef class RecordColumns:
    """The records of pulled chunks whose queue offset is in [lo, hi), as Arrow buffers (the
    schema of broker.spark.schema): add() every chunk, then buffers(). Int columns are
    little-endian int32/int64, timestamps in microseconds, string/binary columns int32 offsets
    (rows + 1, from 0) and data, TAGS and KEYS with a validity byte per row (1: present, the last
    pair of that name with a value), the properties map as map offsets (rows + 1) over key and
    value string columns."""

    def __cinit__(self):
        self.rows = 0
        self.topics = []
        self._topic_ids = {}
        self.utf8 = True
        self.compressed = []
        self.topic_idx, self.queue_id, self.queue_offset = WriteBuffer(), WriteBuffer(), WriteBuffer()
        self.born_ts, self.store_ts = WriteBuffer(), WriteBuffer()
        self.msg_id_offsets, self.msg_id_data = WriteBuffer(), WriteBuffer()
        self.body_offsets, self.body_data = WriteBuffer(), WriteBuffer()
        self.map_offsets, self.key_offsets, self.key_data = WriteBuffer(), WriteBuffer(), WriteBuffer()
        self.value_offsets, self.value_data = WriteBuffer(), WriteBuffer()
        self.tags_offsets, self.tags_data, self.tags_valid = WriteBuffer(), WriteBuffer(), WriteBuffer()
        self.keys_offsets, self.keys_data, self.keys_valid = WriteBuffer(), WriteBuffer(), WriteBuffer()
        for w in (self.msg_id_offsets, self.body_offsets, self.map_offsets, self.key_offsets, self.value_offsets,
                  self.tags_offsets, self.keys_offsets):
            put_i32(<WriteBuffer> w, 0)

    def reset(self) -> None:
        """Empty again, keeping the memory (a fresh buffer's first writes fault its pages in: a
        reader reuses its columns batch after batch). BufferError while a view of a buffer of the
        previous batch is alive (an Arrow array still holding it): then make a new one."""
        for w in self.buffers().values():
            (<WriteBuffer> w).clear()
        self.rows = 0
        self.topics = []
        self._topic_ids = {}
        self._last_topic = None
        self.utf8 = True
        self.compressed = []
        for w in (self.msg_id_offsets, self.body_offsets, self.map_offsets, self.key_offsets, self.value_offsets,
                  self.tags_offsets, self.keys_offsets):
            put_i32(<WriteBuffer> w, 0)

    def reserve(self, Py_ssize_t nbytes) -> None:
        """Room for the rows of `nbytes` of records at once (growing by doubling copies what was
        written at every step): bodies and properties are parts of the records, a msgId is at
        most 56 hex digits for a record of at least 91 bytes, offsets 4 bytes a row."""
        cdef Py_ssize_t rows = nbytes // FIXED_LEN_V4 + 1
        self.body_data.ensure(nbytes)
        self.msg_id_data.ensure(rows * 56)
        for w in (self.topic_idx, self.queue_id, self.msg_id_offsets, self.body_offsets, self.map_offsets,
                  self.tags_offsets, self.keys_offsets):
            (<WriteBuffer> w).ensure(rows * 4)
        for w in (self.queue_offset, self.born_ts, self.store_ts):
            (<WriteBuffer> w).ensure(rows * 8)

    def add(self, chunk, int64_t lo, int64_t hi) -> int:
        """The records of one pulled chunk (whole records back to back) with lo <= queue offset
        < hi; returns how many were added. Raises PulledRecordsError (nothing of the bad record
        is added; the rows before it are)."""
        cdef bytes b = chunk if type(chunk) is bytes else bytes(chunk)
        cdef const uint8_t *p = <const uint8_t *> PyBytes_AS_STRING(b)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(b), pos = 0, added = 0
        cdef RecordSpan r
        while pos < n:
            walk_record(p, pos, n, &r)
            if lo <= r.queue_offset < hi:
                self._add(p, &r)
                added += 1
            pos += r.size
        return added

    cdef int _add(self, const uint8_t *p, RecordSpan *r) except -1:
        cdef uint8_t hexed[56]
        cdef Py_ssize_t i, end, j, sep, pairs = 0, tpos = -1, tlen = 0, kpos = -1, klen = 0
        cdef object idx
        # topic: interned, the previous row's compared first (most chunks hold one topic)
        if self._last_topic is None or PyBytes_GET_SIZE(self._last_topic) != r.topic_len or \
                memcmp(PyBytes_AS_STRING(self._last_topic), p + r.topic, r.topic_len) != 0:
            key = PyBytes_FromStringAndSize(<const char *> p + r.topic, r.topic_len)
            idx = self._topic_ids.get(key)
            if idx is None:
                idx = self._topic_ids[key] = len(self.topics)
                self.topics.append(key)
            self._last_topic = key
            self._last_idx = idx
        put_i32(self.topic_idx, self._last_idx)
        put_i32(self.queue_id, r.queue_id)
        put_i64(self.queue_offset, r.queue_offset)
        # microseconds, wrapping in int64 for absurd values (§1.1): unsigned arithmetic, no UB
        put_i64(self.born_ts, <int64_t> (<uint64_t> r.born_ts * 1000u))
        put_i64(self.store_ts, <int64_t> (<uint64_t> r.store_ts * 1000u))
        msg_id_hex(p + r.store_host, r.store_host_len, r.phys_offset, hexed)
        self.msg_id_data.write(hexed, 2 * (r.store_host_len + 8))
        end_value(self.msg_id_offsets, self.msg_id_data)
        if r.sys_flag & SYSFLAG_COMPRESSED:  # compression is end to end: inflate as the client does
            hexed_id = PyUnicode_DecodeUTF8(<const char *> hexed, 2 * (r.store_host_len + 8), NULL)
            body = _inflate(PyBytes_FromStringAndSize(<const char *> p + r.body, r.body_len), hexed_id, r.pos)
            self.body_data.write(<const uint8_t *> PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body))
            self.compressed.append(self.rows)
        else:
            self.body_data.write(p + r.body, r.body_len)
        end_value(self.body_offsets, self.body_data)
        # properties: every pair with a key and a value, in order; TAGS and KEYS the last of each
        i = r.props
        end = i + r.props_len
        while i < end:
            j = piece_end(p, i, end, &sep)
            if sep > i and j - sep > 1:
                if self.utf8 and not (valid_utf8(p + i, sep - i) and valid_utf8(p + sep + 1, j - sep - 1)):
                    self.utf8 = False
                self.key_data.write(p + i, sep - i)
                end_value(self.key_offsets, self.key_data)
                self.value_data.write(p + sep + 1, j - sep - 1)
                end_value(self.value_offsets, self.value_data)
                pairs += 1
                if sep - i == 4 and memcmp(p + i, b"TAGS", 4) == 0:
                    tpos, tlen = sep + 1, j - sep - 1
                elif sep - i == 4 and memcmp(p + i, b"KEYS", 4) == 0:
                    kpos, klen = sep + 1, j - sep - 1
            i = j + 1
        put_i32(self.map_offsets, <int32_t> (self.key_offsets._len // 4 - 1))
        if tpos >= 0:
            self.tags_data.write(p + tpos, tlen)
        self.tags_valid.write_byte(1 if tpos >= 0 else 0)
        end_value(self.tags_offsets, self.tags_data)
        if kpos >= 0:
            self.keys_data.write(p + kpos, klen)
        self.keys_valid.write_byte(1 if kpos >= 0 else 0)
        end_value(self.keys_offsets, self.keys_data)
        self.rows += 1
        return 0

    def buffers(self) -> dict:
        """name -> WriteBuffer (buffer-exporting; wrap with pyarrow.py_buffer, no copy)."""
        return {"topic_idx": self.topic_idx, "queue_id": self.queue_id, "queue_offset": self.queue_offset,
                "born_ts": self.born_ts, "store_ts": self.store_ts, "msg_id_offsets": self.msg_id_offsets,
                "msg_id_data": self.msg_id_data, "body_offsets": self.body_offsets, "body_data": self.body_data,
                "map_offsets": self.map_offsets, "key_offsets": self.key_offsets, "key_data": self.key_data,
                "value_offsets": self.value_offsets, "value_data": self.value_data,
                "tags_offsets": self.tags_offsets, "tags_data": self.tags_data, "tags_valid": self.tags_valid,
                "keys_offsets": self.keys_offsets, "keys_data": self.keys_data, "keys_valid": self.keys_valid}
