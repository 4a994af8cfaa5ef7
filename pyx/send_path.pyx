# cython: language_level=3
"""The send path: the frames of one socket read in one kernel pass.

`SendPipeline.run` walks the complete frames of a connection's receive buffer. For each one it
reads the remoting prefix (the checks and messages of remoting.split_frames), parses the header
in C (JSON or ROCKETMQ), and when the frame is a plain SEND_MESSAGE (10) or SEND_MESSAGE_V2 (310)
to a topic whose route Python installed, appends the record straight into the mapped segment
(Appender.append_c: the body is copied once, from the receive buffer) and renders the reply into
the connection's WriteBuffer (or, under SYNC_FLUSH / SYNC_MASTER, parks it in ParkedReplies,
rendered once the put is durable, unless the producer said WAIT=false). The record's properties
are the sent ones as RocketMQ's SendMessageProcessor stores them: CLUSTER=<brokerClusterName> (the
cluster a request-reply responder answers to), WAIT kept as sent (stored_props). Python touches the
read once.

With an Appender in entry mode (DLedger's commit log) each send is one entry of the Raft log,
written in place (header, record, index entry), and so is each message of a batch; a parked
reply then waits for the quorum to commit the entry (its `end` is the entry's end).

Everything else goes back to Python at its position in the read (RUN_SLOW), where the
processors handle it: other request codes, responses, a topic with no route (its first use,
auto-creation, %RETRY%/%DLQ%, no write permission), a queue id out of range or negative, DELAY,
transaction flags, a body over maxMessageSize, properties too long, a header field the kernel
cannot read as Java would (the processors then name it). A record that does not fit in the
segment goes to them too (RUN_ROLL): their append rolls to the next segment, or refuses naming why.

A timer message (a delivery time: TIMER_DELIVER_MS, TIMER_DELAY_SEC or TIMER_DELAY_MS) is taken
here once Python installed the timer topic's queue (`set_timer`), as the processors take it
(broker.server.timer.timer_message_service.transform): stored in rmq_sys_wheel_timer queue 0 with
TIMER_OUT_MS (the time rounded down to the precision), REAL_TOPIC and REAL_QID appended to its
properties, the reply naming the queue asked for and carrying the recall handle (when the message
has a UNIQ_KEY). Only the plain case: properties the processors would store byte for byte as sent
(well-formed UTF-8, every entry a key and a value, no key twice), a time ahead and within the
maximum delay, no DELAY, TIMER_OUT_MS, REAL_TOPIC, REAL_QID or TIMER_DEL_UNIQKEY, a reply that is
not parked; anything else goes to the processors, which refuse or store it as they do.

A frame the protocol cannot carry (bad lengths, a header that is not one) raises FrameError or
HeaderError naming the offset: the connection is closed, as split_frames and the header decoder
do.
"""
cimport cython
from buffers cimport Borrowed, borrow, check_range, give_back
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from broker.kernels.codec cimport AppendOut, Appender, QueueState
from broker.kernels.header cimport (HeaderField, RemotingHeader, V_BYTES, V_ESCAPED, V_INT, V_STRING,
                                    json_ext_begin, json_ext_end, json_ext_field, json_header_begin,
                                    json_header_remark,
                                    json_header_end, parse_json_header, parse_rocketmq_header,
                                    rocketmq_ext_field, rocketmq_header_begin, rocketmq_header_finish,
                                    unescape_json)
from broker.kernels.wbuf cimport WriteBuffer
from ascii cimport ascii_int, ascii_parse_int, msg_id_hex
from clock cimport now_ms
from utf8 cimport utf8_sequence
from bytesex cimport get_be16, get_be32
from broker.kernels.remoting cimport FRAME_INCOMPLETE, FRAME_OK, FrameSpan, FrameStatus, frame_at, raise_frame_error
from record cimport RECORD_MAX_PROPS_LEN, RECORD_SYSFLAG_TRANSACTION, record_length_of


cdef extern from "string.h" nogil:
    void *memmem(const void *haystack, size_t hlen, const void *needle, size_t nlen)
    void *memchr(const void *s, int c, size_t n)

cdef enum:
    RUN_DONE_ = 0
    RUN_SLOW_ = 1
    RUN_ROLL_ = 2
    RUN_YIELD_ = 3
    MAX_EXT = 32
    MAX_TIMER_ENTRIES = 64     # properties with more entries go to the processors (duplicate check)
    SCRATCH = 65536            # unescaped properties (at most 32767 bytes are accepted)
    CODE_SEND_MESSAGE = 10
    CODE_SEND_MESSAGE_V2 = 310
    CODE_SEND_BATCH_MESSAGE = 320
    BATCH_FIXED = 22           # a batched message's fixed fields (MessageDecoder.encodeMessage)
    FLAG_RESPONSE = 1
    FLAG_ONEWAY = 2
    VERSION_V4_9_4 = 401  # MQVersion.Version.V4_9_4.ordinal() (395 is V4_9_1); broker.remoting.command.VERSION
    LANGUAGE_JAVA = 0

RUN_DONE = RUN_DONE_
RUN_SLOW = RUN_SLOW_
RUN_ROLL = RUN_ROLL_
RUN_YIELD = RUN_YIELD_
DEFAULT_MAX_FRAME = 16 * 1024 * 1024



# -- what a send request says -----------------------------------------------------------------

cdef struct SendFields:
    const uint8_t *topic
    Py_ssize_t topic_len
    const uint8_t *props
    Py_ssize_t props_len
    int64_t born_ts
    int32_t queue_id
    int32_t sys_flag
    int32_t flag
    int32_t reconsume_times
    bint has_topic
    bint has_queue
    bint props_escaped


cdef inline bint is_key(const uint8_t *k, Py_ssize_t kn, const char *name, Py_ssize_t n) noexcept nogil:
    return kn == n and memcmp(k, name, n) == 0


cdef bint read_int(const uint8_t *p, HeaderField *f, int bits, int64_t *out) noexcept nogil:
    """A header integer as Java's header decoding reads it: a JSON integer, or a string of an
    optional '-' and decimal digits, within the type's range. False: leave it to Python."""
    cdef int64_t v = 0, lim
    cdef Py_ssize_t i, n
    cdef const uint8_t *s
    cdef bint neg = False
    if f.kind == V_INT:
        v = f.ival
    elif f.kind == V_STRING or f.kind == V_BYTES:  # JSON with no escapes, or ROCKETMQ's raw bytes
        s = p + f.val_pos
        n = f.val_len
        i = 0
        if n > 0 and s[0] == 45:  # '-'
            neg = True
            i = 1
        if i >= n or n - i > 18:
            return False  # empty, or long enough to overflow: Python decides
        while i < n:
            if s[i] < 48 or s[i] > 57:
                return False
            v = v * 10 + (s[i] - 48)
            i += 1
        if neg:
            v = -v
    else:
        return False
    if bits == 32:
        if v < -2147483648 or v > 2147483647:
            return False
    out[0] = v
    return True


cdef bint read_send_fields(const uint8_t *p, HeaderField *ext, Py_ssize_t n, bint v2, SendFields *s) noexcept nogil:
    """The fields of SendMessageRequestHeader(V2) the append needs; False if any is absent where
    required or not readable here (the processors then answer, naming it). Of equal keys the last
    one counts, as in Java's HashMap of extFields."""
    cdef Py_ssize_t i
    cdef HeaderField *f
    cdef const uint8_t *k
    cdef Py_ssize_t kn
    cdef int64_t v
    cdef int c
    # where each field's last occurrence is: topic, queueId, sysFlag, bornTimestamp, flag,
    # properties, reconsumeTimes (V2's b e f g h i j)
    cdef Py_ssize_t at[7]
    for i in range(7):
        at[i] = -1
    for i in range(n):
        f = &ext[i]
        if f.key_escaped:
            return False
        k = p + f.key_pos
        kn = f.key_len
        c = -1
        if v2:
            if kn == 1:
                c = (0 if k[0] == 98 else 1 if k[0] == 101 else 2 if k[0] == 102 else 3 if k[0] == 103 else
                     4 if k[0] == 104 else 5 if k[0] == 105 else 6 if k[0] == 106 else -1)
        elif is_key(k, kn, b"topic", 5):
            c = 0
        elif is_key(k, kn, b"queueId", 7):
            c = 1
        elif is_key(k, kn, b"sysFlag", 7):
            c = 2
        elif is_key(k, kn, b"bornTimestamp", 13):
            c = 3
        elif is_key(k, kn, b"flag", 4):
            c = 4
        elif is_key(k, kn, b"properties", 10):
            c = 5
        elif is_key(k, kn, b"reconsumeTimes", 14):
            c = 6
        if c >= 0:
            at[c] = i
    if at[0] < 0:
        return False
    f = &ext[at[0]]
    if f.kind != V_STRING and f.kind != V_BYTES:
        return False
    s.topic = p + f.val_pos
    s.topic_len = f.val_len
    s.has_topic = True
    s.has_queue = at[1] >= 0
    s.queue_id = -1
    if at[1] >= 0:
        if not read_int(p, &ext[at[1]], 32, &v):
            return False
        s.queue_id = <int32_t> v
    s.sys_flag = s.flag = s.reconsume_times = 0
    s.born_ts = 0
    if at[2] >= 0:
        if not read_int(p, &ext[at[2]], 32, &v):
            return False
        s.sys_flag = <int32_t> v
    if at[3] >= 0:
        if not read_int(p, &ext[at[3]], 64, &v):
            return False
        s.born_ts = v
    if at[4] >= 0:
        if not read_int(p, &ext[at[4]], 32, &v):
            return False
        s.flag = <int32_t> v
    if at[6] >= 0:
        if not read_int(p, &ext[at[6]], 32, &v):
            return False
        s.reconsume_times = <int32_t> v
    s.props = NULL
    s.props_len = 0
    s.props_escaped = False
    if at[5] >= 0:
        f = &ext[at[5]]
        if f.kind == V_STRING or f.kind == V_BYTES:
            s.props_escaped = False
        elif f.kind == V_ESCAPED:
            s.props_escaped = True
        else:
            return False
        s.props = p + f.val_pos
        s.props_len = f.val_len
    return True


# -- the properties as stored ------------------------------------------------------------------

cdef bint wait_value(const uint8_t *v, Py_ssize_t n) noexcept nogil:
    """Message.isWaitStoreMsgOK: Boolean.parseBoolean of WAIT's value ("true" in any case)."""
    return n == 4 and (v[0] | 32) == 116 and (v[1] | 32) == 114 and (v[2] | 32) == 117 and (v[3] | 32) == 101


cdef Py_ssize_t stored_props(const uint8_t *src, Py_ssize_t n, uint8_t *dst, Py_ssize_t cap, const uint8_t *cluster,
                             Py_ssize_t cn, bint *wait) noexcept nogil:
    """The properties as Apache RocketMQ 5.5.0's SendMessageProcessor stores them: CLUSTER set to
    the broker's cluster (one the producer sent is replaced), WAIT kept (tests/test_differential.py
    compares the stored properties; it also tells the broker whether to answer before the flush or
    the slave: `wait`, true without it);
    entries separated by \x02, empty ones dropped, none after CLUSTER (RocketMQ 5's
    messageProperties2String). -1 when the result passes `cap`."""
    cdef Py_ssize_t i = 0, o = 0, end, name_len
    cdef const uint8_t *e
    cdef const uint8_t *sep
    wait[0] = True
    while i < n:
        e = <const uint8_t *> memchr(src + i, 2, n - i)
        end = (e - src) if e != NULL else n
        if end > i:
            sep = <const uint8_t *> memchr(src + i, 1, end - i)
            name_len = (sep - (src + i)) if sep != NULL else -1
            if name_len == 4 and memcmp(src + i, b"WAIT", 4) == 0:
                wait[0] = wait_value(sep + 1, end - i - 5)
            elif name_len == 7 and memcmp(src + i, b"CLUSTER", 7) == 0:
                i = end + 1
                continue
            if o + end - i + 1 > cap:
                return -1
            memcpy(dst + o, src + i, end - i)
            o += end - i
            dst[o] = 2
            o += 1
        i = end + 1
    if o + 8 + cn > cap:
        return -1
    memcpy(dst + o, b"CLUSTER\x01", 8)
    o += 8
    memcpy(dst + o, cluster, cn)
    return o + cn


def stored_properties(bytes props not None, bytes cluster not None) -> tuple:
    """stored_props from Python: (the properties as stored, wait), or None past 32767 bytes."""
    cdef bint wait
    cdef uint8_t *out = <uint8_t *> PyMem_Malloc(RECORD_MAX_PROPS_LEN + 1)
    if out == NULL:
        raise MemoryError()
    try:
        n = stored_props(<const uint8_t *> PyBytes_AS_STRING(props), PyBytes_GET_SIZE(props), out,
                         RECORD_MAX_PROPS_LEN, <const uint8_t *> PyBytes_AS_STRING(cluster),
                         PyBytes_GET_SIZE(cluster), &wait)
        if n < 0:
            return None
        return PyBytes_FromStringAndSize(<const char *> out, n), wait
    finally:
        PyMem_Free(out)


# -- timer messages -----------------------------------------------------------------------------

cdef Py_ssize_t b64url(const uint8_t *src, Py_ssize_t n, uint8_t *out) noexcept nogil:
    """URL-safe base64 with padding (Python's base64.urlsafe_b64encode); returns the length."""
    cdef const char *a = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    cdef Py_ssize_t i = 0, o = 0
    cdef uint32_t v
    while n - i >= 3:
        v = (<uint32_t> src[i] << 16) | (<uint32_t> src[i + 1] << 8) | src[i + 2]
        out[o] = a[v >> 18]
        out[o + 1] = a[(v >> 12) & 63]
        out[o + 2] = a[(v >> 6) & 63]
        out[o + 3] = a[v & 63]
        i += 3
        o += 4
    if n - i == 1:
        v = <uint32_t> src[i] << 16
        out[o] = a[v >> 18]
        out[o + 1] = a[(v >> 12) & 63]
        out[o + 2] = 61
        out[o + 3] = 61
        o += 4
    elif n - i == 2:
        v = (<uint32_t> src[i] << 16) | (<uint32_t> src[i + 1] << 8)
        out[o] = a[v >> 18]
        out[o + 1] = a[(v >> 12) & 63]
        out[o + 2] = a[(v >> 6) & 63]
        out[o + 3] = 61
        o += 4
    return o


cdef inline bint timer_value(const uint8_t *v, Py_ssize_t n, int64_t *out) noexcept nogil:
    """A timer property's value as int() reads it, for an optional '-' and at most 15 digits (no
    overflow once scaled to ms); False for anything else (the processors read it then)."""
    return ascii_parse_int(v, n, 15, out)


cdef inline Py_ssize_t put(uint8_t *d, Py_ssize_t o, const char *s, Py_ssize_t n) noexcept nogil:
    memcpy(d + o, s, n)
    return o + n


# -- routes -------------------------------------------------------------------------------------

@cython.final
cdef class TopicRoute:
    """A topic the kernel may append to: its write queues' states, index = queue id."""
    cdef readonly bytes topic
    cdef list queues
    cdef readonly Py_ssize_t n

    def __cinit__(self, bytes topic not None, list queues not None):
        self.topic = topic
        self.queues = queues
        self.n = len(queues)


# -- replies ------------------------------------------------------------------------------------



cdef int render_send_reply(WriteBuffer w, int serialize_type, int32_t code, int32_t opaque, int32_t queue_id,
                           int64_t queue_offset, const uint8_t *mid, Py_ssize_t mn, bytes region,
                           bytes trace, const uint8_t *remark=NULL, Py_ssize_t rn=0, const uint8_t *recall=NULL,
                           Py_ssize_t recall_len=0) except -1:
    """One SEND_MESSAGE response frame, as a 4.9 broker writes it: msgId (a batch's: every id,
    comma-joined), queueId, queueOffset (a batch's first), MSG_REGION, TRACE_ON
    (SendMessageProcessor.handlePutMessageResult), then a timer message's recallHandle when
    recall_len > 0 (attachRecallHandle); a remark when rn > 0."""
    cdef uint8_t num[24]
    cdef uint8_t qo[24]
    cdef Py_ssize_t nn = ascii_int(queue_id, num)
    cdef Py_ssize_t qn = ascii_int(queue_offset, qo)
    cdef Py_ssize_t start = w.position(), at, hl
    w.write(<const uint8_t *> b"\0\0\0\0\0\0\0\0", 8)
    if serialize_type == 0:
        json_header_begin(w, code, b"JAVA", VERSION_V4_9_4, opaque, FLAG_RESPONSE)
        if rn > 0:
            json_header_remark(w, remark, rn)
        json_ext_begin(w)
        json_ext_field(w, <const uint8_t *> b"msgId", 5, mid, mn, True)
        json_ext_field(w, <const uint8_t *> b"queueId", 7, num, nn, False)
        json_ext_field(w, <const uint8_t *> b"queueOffset", 11, qo, qn, False)
        json_ext_field(w, <const uint8_t *> b"MSG_REGION", 10, <const uint8_t *> PyBytes_AS_STRING(region),
                       PyBytes_GET_SIZE(region), False)
        json_ext_field(w, <const uint8_t *> b"TRACE_ON", 8, <const uint8_t *> PyBytes_AS_STRING(trace),
                       PyBytes_GET_SIZE(trace), False)
        if recall_len > 0:
            json_ext_field(w, <const uint8_t *> b"recallHandle", 12, recall, recall_len, False)
        json_ext_end(w)
        json_header_end(w)
    else:
        at = rocketmq_header_begin(w, code, LANGUAGE_JAVA, VERSION_V4_9_4, opaque, FLAG_RESPONSE, remark, rn)
        rocketmq_ext_field(w, <const uint8_t *> b"msgId", 5, mid, mn)
        rocketmq_ext_field(w, <const uint8_t *> b"queueId", 7, num, nn)
        rocketmq_ext_field(w, <const uint8_t *> b"queueOffset", 11, qo, qn)
        rocketmq_ext_field(w, <const uint8_t *> b"MSG_REGION", 10, <const uint8_t *> PyBytes_AS_STRING(region),
                           PyBytes_GET_SIZE(region))
        rocketmq_ext_field(w, <const uint8_t *> b"TRACE_ON", 8, <const uint8_t *> PyBytes_AS_STRING(trace),
                           PyBytes_GET_SIZE(trace))
        if recall_len > 0:
            rocketmq_ext_field(w, <const uint8_t *> b"recallHandle", 12, recall, recall_len)
        rocketmq_header_finish(w, at)
    hl = w.position() - start - 8
    w.patch_be32(start, <uint32_t> (4 + hl))
    w.patch_be32(start + 4, (<uint32_t> serialize_type << 24) | <uint32_t> hl)
    return 0


cdef struct Parked:
    int64_t queue_offset
    int64_t phys
    Py_ssize_t ids_at        # a batch's msgId text in the arena, or -1 (one id: from phys)
    Py_ssize_t ids_len
    int32_t opaque
    int32_t queue_id
    int32_t serialize_type


@cython.final
cdef class ParkedReplies:
    """The replies of one read's sends that wait for the flush or a slave (SYNC_FLUSH,
    SYNC_MASTER): kept as a few numbers each, rendered all at once with the final status."""
    cdef Parked *_items
    cdef Py_ssize_t _n, _cap
    cdef readonly object conn
    cdef readonly int64_t end          # the highest end offset among them
    cdef readonly int64_t messages     # messages they answer (a batch's count as many)
    cdef bytes store_host, region, trace
    cdef WriteBuffer _ids              # batches' msgId texts

    def __cinit__(self, conn, bytes store_host not None, bytes region not None, bytes trace not None):
        self.conn = conn
        self._ids = WriteBuffer()
        self.messages = 0
        self.store_host = store_host
        self.region = region
        self.trace = trace
        self._items = NULL
        self._n = self._cap = 0
        self.end = 0

    def __dealloc__(self):
        if self._items != NULL:
            PyMem_Free(self._items)

    def __len__(self):
        return self._n

    cdef int add(self, int32_t opaque, int serialize_type, int32_t queue_id, int64_t queue_offset, int64_t phys,
                 int64_t end, const uint8_t *ids, Py_ssize_t ids_len, int64_t messages) except -1:
        cdef Py_ssize_t cap
        cdef Parked *items
        if self._n == self._cap:
            cap = 16 if self._cap == 0 else self._cap * 2
            items = <Parked *> PyMem_Realloc(self._items, cap * sizeof(Parked))
            if items == NULL:
                raise MemoryError()
            self._items, self._cap = items, cap
        self._items[self._n].opaque = opaque
        self._items[self._n].serialize_type = serialize_type
        self._items[self._n].queue_id = queue_id
        self._items[self._n].queue_offset = queue_offset
        self._items[self._n].phys = phys
        if ids != NULL:
            self._items[self._n].ids_at = self._ids.position()
            self._items[self._n].ids_len = ids_len
            self._ids.write(ids, ids_len)
        else:
            self._items[self._n].ids_at = -1
            self._items[self._n].ids_len = 0
        self._n += 1
        self.messages += messages
        if end > self.end:
            self.end = end
        return 0

    def render(self, int32_t code, bytes remark=None) -> bytes:
        """Every parked reply with this response code (and remark: UTF-8, none when None or
        empty), framed, in one bytes object."""
        cdef WriteBuffer w = WriteBuffer()
        cdef Py_ssize_t i, mn
        cdef uint8_t mid[56]
        cdef Parked *it
        cdef const uint8_t *rp = NULL
        cdef Py_ssize_t rn = 0
        if remark is not None:
            rp = <const uint8_t *> PyBytes_AS_STRING(remark)
            rn = PyBytes_GET_SIZE(remark)
        for i in range(self._n):
            it = &self._items[i]
            if it.ids_at >= 0:
                render_send_reply(w, it.serialize_type, code, it.opaque, it.queue_id, it.queue_offset,
                                  self._ids._buf + it.ids_at, it.ids_len, self.region, self.trace, rp, rn)
            else:
                mn = msg_id_hex(<const uint8_t *> PyBytes_AS_STRING(self.store_host),
                                PyBytes_GET_SIZE(self.store_host), it.phys, mid)
                render_send_reply(w, it.serialize_type, code, it.opaque, it.queue_id, it.queue_offset, mid, mn,
                                  self.region, self.trace, rp, rn)
        return w.getvalue()


# -- one connection's results -------------------------------------------------------------------

@cython.final
cdef class SendConn:
    """What the pipeline keeps per connection: the producer's address as stored (BORNHOST), the
    replies rendered for it, and what was appended since `take` (for the store's bookkeeping)."""
    cdef readonly bytes born_host
    cdef readonly WriteBuffer out
    cdef public ParkedReplies parked     # set by Python before a run in SYNC modes
    cdef readonly int64_t msgs
    cdef readonly int64_t bytes_appended
    cdef readonly int64_t max_end
    cdef readonly int64_t timers         # timer messages appended since take_timers
    cdef readonly list touched           # QueueStates appended to, when the pipeline tracks them
    # the frame handed back to Python (RUN_SLOW)
    cdef readonly int slow_type
    cdef readonly Py_ssize_t slow_header_start, slow_header_len, slow_body_start, slow_body_len, slow_next

    def __cinit__(self, bytes born_host not None):
        if len(born_host) != 8 and len(born_host) != 20:
            raise ValueError(f"born host must be 8 or 20 bytes, got {len(born_host)}")
        self.born_host = born_host
        self.out = WriteBuffer()
        self.parked = None
        self.touched = []
        self.msgs = self.bytes_appended = self.max_end = 0
        self.timers = 0

    def take_timers(self) -> int:
        """Timer messages appended (into the timer topic) since the last call, and reset."""
        n = self.timers
        self.timers = 0
        return n

    def take_replies(self):
        """The replies rendered since the last call, as one bytes object (None if there are none)."""
        if self.out.position() == 0:
            return None
        data = self.out.getvalue()
        self.out.clear()
        return data

    def take(self) -> tuple:
        """(messages, bytes, highest end offset, touched queues) since the last take, and reset."""
        r = (self.msgs, self.bytes_appended, self.max_end, self.touched)
        self.msgs = self.bytes_appended = self.max_end = 0
        self.touched = []
        return r


# -- the pipeline -------------------------------------------------------------------------------

@cython.final
cdef class SendPipeline:
    cdef Appender app
    cdef dict _routes                    # topic bytes -> TopicRoute
    cdef TopicRoute _last                # the route of the previous frame (most reads: one topic)
    cdef public bint enabled             # False: every frame goes to Python
    cdef public bint parked              # SYNC_FLUSH / SYNC_MASTER: replies wait for durability
    cdef public bint track_queues        # pulls are held: report the queues appended to
    cdef readonly bytes region
    cdef readonly bytes trace
    cdef public bytes cluster            # brokerClusterName, stored as CLUSTER; empty: properties as sent
    cdef Py_ssize_t max_frame
    cdef uint8_t *_scratch
    cdef uint8_t *_stored                # the properties as stored (stored_props)
    cdef uint8_t *_batch_props           # one batched message's properties with the batch's
    cdef WriteBuffer _ids                # a batch reply's msgIds
    cdef readonly int64_t appended       # messages the kernel appended (the rest went to the processors)
    cdef readonly bytes timer_topic      # the timer topic (set_timer), None: timer messages go to Python
    cdef QueueState _timer_q             # its queue 0
    cdef int64_t _timer_precision, _timer_max_ms
    cdef bytes _broker_name              # what a recall handle names
    cdef public int64_t timer_clock_ms   # the time timer messages are taken at; 0: the wall clock
    cdef Py_ssize_t _recall_len          # the last timer message's recall handle, in _scratch
    cdef uint8_t _mid[56]

    def __cinit__(self, Appender app not None, bytes region=b"DefaultRegion", bytes trace=b"true",
                  Py_ssize_t max_frame=DEFAULT_MAX_FRAME, bytes cluster=b""):
        self.app = app
        self.cluster = cluster
        self._routes = {}
        self._last = None
        self.enabled = False
        self.parked = False
        self.track_queues = False
        self.region = region
        self.trace = trace
        self.max_frame = max_frame
        self.appended = 0
        self.timer_topic = None
        self._timer_q = None
        self._broker_name = b""
        self.timer_clock_ms = 0
        self._scratch = <uint8_t *> PyMem_Malloc(SCRATCH)
        self._batch_props = <uint8_t *> PyMem_Malloc(RECORD_MAX_PROPS_LEN + 1)
        self._stored = <uint8_t *> PyMem_Malloc(RECORD_MAX_PROPS_LEN + 1)
        if self._scratch == NULL or self._batch_props == NULL or self._stored == NULL:
            raise MemoryError()
        self._ids = WriteBuffer()

    def __dealloc__(self):
        if self._scratch != NULL:
            PyMem_Free(self._scratch)
        if self._batch_props != NULL:
            PyMem_Free(self._batch_props)
        if self._stored != NULL:
            PyMem_Free(self._stored)

    @property
    def appender(self):
        return self.app

    def set_appender(self, Appender app not None):
        """The commit log made a new Appender (recovery): every route is rebuilt on it."""
        self.app = app
        self._routes.clear()
        self._last = None
        if self.timer_topic is not None:
            self._timer_q = app.queue(self.timer_topic, 0)

    def set_timer(self, bytes topic, int64_t precision_ms=1000, int64_t max_delay_ms=0, bytes broker_name=b""):
        """Take timer messages into `topic` queue 0 (None: hand them to Python), their time
        rounded down to `precision_ms`, refused (by the processors) past `max_delay_ms` ahead."""
        if topic is None:
            self.timer_topic, self._timer_q = None, None
            return
        if precision_ms <= 0 or max_delay_ms <= 0 or broker_name is None:
            raise ValueError(f"timer precision {precision_ms} ms and max delay {max_delay_ms} ms must be positive")
        self.timer_topic = topic
        self._timer_q = self.app.queue(topic, 0)
        self._timer_precision, self._timer_max_ms, self._broker_name = precision_ms, max_delay_ms, broker_name

    def set_route(self, bytes topic not None, int32_t write_queues) -> None:
        """Let the kernel append to `topic`'s queues 0 .. write_queues - 1."""
        if write_queues <= 0 or write_queues > 65536:
            raise ValueError(f"write_queues {write_queues} outside 1..65536")
        self._routes[topic] = TopicRoute(topic, [self.app.queue(topic, i) for i in range(write_queues)])
        self._last = None

    def drop_routes(self) -> None:
        self._routes.clear()
        self._last = None

    def routes(self) -> dict:
        return {t: (<TopicRoute> r).n for t, r in self._routes.items()}

    cdef TopicRoute _route(self, const uint8_t *topic, Py_ssize_t n):
        cdef TopicRoute r = self._last
        if r is not None and PyBytes_GET_SIZE(r.topic) == n and memcmp(PyBytes_AS_STRING(r.topic), topic, n) == 0:
            return r
        key = PyBytes_FromStringAndSize(<const char *> topic, n)
        found = self._routes.get(key)
        if found is None:
            return None
        self._last = <TopicRoute> found
        return self._last

    def run(self, SendConn c not None, buf, Py_ssize_t pos, Py_ssize_t end, int64_t yield_after=0) -> tuple:
        """Handle the frames of buf[pos:end] until one needs Python. Returns (status, pos):
        RUN_DONE with pos at the first incomplete frame (or end); RUN_SLOW with pos at a frame for
        the processors (its geometry in c.slow_*; continue from c.slow_next); RUN_ROLL with pos at
        a send that needs the next segment; RUN_YIELD with pos at the next frame once this call
        appended `yield_after` messages or more (0: never), so that the caller sends the replies
        so far while the rest of the read waits (a pipelining client refills meanwhile)."""
        cdef Borrowed view
        borrow(buf, &view, False)
        cdef const uint8_t *p = view.ptr
        cdef int64_t length
        cdef FrameSpan f
        cdef FrameStatus status
        cdef Py_ssize_t hl, hs, bs, bl, props_len
        cdef int st
        cdef RemotingHeader h
        cdef HeaderField ext[MAX_EXT]
        cdef SendFields s
        cdef TopicRoute route
        cdef QueueState q
        cdef AppendOut out
        cdef const uint8_t *props
        cdef bint batch
        cdef int full
        cdef bint wait, timed
        cdef int64_t msgs0 = c.msgs
        try:
            check_range(pos, end, view.size)
            if self.parked and c.parked is None:
                raise ValueError("parked replies wanted but the connection has no ParkedReplies")
            while end - pos >= 4:
                status = frame_at(p, pos, end, self.max_frame, &f)
                if status == FRAME_INCOMPLETE:
                    break
                if status != FRAME_OK:
                    raise_frame_error(status, pos, &f, self.max_frame)
                length, st = f.length, f.serialize_type
                hs, hl, bs, bl = f.header_start, f.header_len, f.body_start, f.body_len
                if not self.enabled:
                    return self._slow(c, st, hs, hl, bs, bl, pos + 4 + length), pos
                if st == 0:
                    parse_json_header(p + hs, hl, &h, ext, MAX_EXT)
                else:
                    parse_rocketmq_header(p + hs, hl, &h, ext, MAX_EXT)
                batch = h.code == CODE_SEND_BATCH_MESSAGE
                if (h.flag & FLAG_RESPONSE) or h.ext_total > MAX_EXT or (
                        h.code != CODE_SEND_MESSAGE_V2 and h.code != CODE_SEND_MESSAGE and not batch):
                    return self._slow(c, st, hs, hl, bs, bl, pos + 4 + length), pos
                # a batch's header is SendMessageRequestHeaderV2's too; ext positions are from p + hs
                if not read_send_fields(p + hs, ext, h.n_ext, h.code != CODE_SEND_MESSAGE, &s) or not s.has_queue \
                        or s.queue_id < 0 or s.sys_flag & RECORD_SYSFLAG_TRANSACTION or (bl > self.app.max_body and not batch):
                    return self._slow(c, st, hs, hl, bs, bl, pos + 4 + length), pos
                route = self._route(s.topic, s.topic_len)
                if route is None or s.queue_id >= route.n:
                    return self._slow(c, st, hs, hl, bs, bl, pos + 4 + length), pos
                if s.props == NULL:
                    props, props_len = <const uint8_t *> b"", 0
                elif s.props_escaped:
                    if s.props_len > SCRATCH:
                        return self._slow(c, st, hs, hl, bs, bl, pos + 4 + length), pos
                    props_len = unescape_json(s.props, s.props_len, self._scratch)
                    props = self._scratch
                else:
                    props, props_len = s.props, s.props_len
                # a delay level diverts to the schedule topic: the processors do that; a delivery
                # time (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS) to the timer topic: here
                # when the timer topic is installed, in the plain case (_timer_props)
                if props_len > RECORD_MAX_PROPS_LEN or (props_len >= 6 and
                                                        memmem(props, props_len, b"DELAY\x01", 6) != NULL):
                    return self._slow(c, st, hs, hl, bs, bl, pos + 4 + length), pos
                timed = props_len >= 8 and memmem(props, props_len, b"TIMER_DE", 8) != NULL
                if timed and (self._timer_q is None or batch):
                    return self._slow(c, st, hs, hl, bs, bl, pos + 4 + length), pos
                wait = True
                if PyBytes_GET_SIZE(self.cluster) and not batch:  # RocketMQ 5.5.0 adds none to a batch's
                    props_len = stored_props(props, props_len, self._stored, RECORD_MAX_PROPS_LEN,
                                             <const uint8_t *> PyBytes_AS_STRING(self.cluster),
                                             PyBytes_GET_SIZE(self.cluster), &wait)
                    if props_len < 0:
                        return self._slow(c, st, hs, hl, bs, bl, pos + 4 + length), pos
                    props = self._stored
                q = <QueueState> route.queues[s.queue_id]
                if timed:
                    if self.parked and wait:
                        return self._slow(c, st, hs, hl, bs, bl, pos + 4 + length), pos
                    if props != self._stored:
                        memcpy(self._stored, props, props_len)
                        props = self._stored
                    props_len = self._timer_props(props_len, s.topic, s.topic_len, s.queue_id)
                    if props_len < 0:
                        return self._slow(c, st, hs, hl, bs, bl, pos + 4 + length), pos
                    q = self._timer_q
                if batch:
                    full = self._append_batch(c, q, &s, p + bs, bl, props, props_len, st, h.opaque,
                                              not (h.flag & FLAG_ONEWAY), wait)
                    if full == 1:
                        return self._slow(c, st, hs, hl, bs, bl, pos + 4 + length), pos
                else:
                    try:
                        full = self.app.append_c(q, p + bs, bl, props, props_len, s.flag, s.sys_flag, s.born_ts,
                                                 <const uint8_t *> PyBytes_AS_STRING(c.born_host),
                                                 PyBytes_GET_SIZE(c.born_host), s.reconsume_times, &out)
                    except Exception:  # refused before writing anything (a record larger than a segment)
                        return self._slow(c, st, hs, hl, bs, bl, pos + 4 + length), pos
                    if full == 0:
                        self._appended(c, q, 1, out.size)
                        if timed:
                            c.timers += 1
                            if not (h.flag & FLAG_ONEWAY):  # never parked (above)
                                render_send_reply(c.out, st, 0, h.opaque, s.queue_id, out.queue_offset,
                                                  self._msg_id(out.phys), 16 + 2 * PyBytes_GET_SIZE(self.app.store_host),
                                                  self.region, self.trace, NULL, 0, self._scratch, self._recall_len)
                        elif not (h.flag & FLAG_ONEWAY):
                            self._reply(c, st, h.opaque, s.queue_id, out.queue_offset, out.phys, NULL, 0, 1, wait)
                if full:
                    # the processors take this one: their append rolls to the next segment (or
                    # refuses it naming why) and the kernel goes on in the new segment
                    self._slow(c, st, hs, hl, bs, bl, pos + 4 + length)
                    return RUN_ROLL_, pos
                pos += 4 + length
                if yield_after > 0 and c.msgs - msgs0 >= yield_after and end - pos >= 4:
                    return RUN_YIELD_, pos
            return RUN_DONE_, pos
        finally:
            give_back(&view)

    def append_values(self, SendConn c not None, bytes topic not None, int32_t queue_id, body,
                      bytes props not None, int32_t flag=0, int32_t sys_flag=0, int64_t born_ts=-1) -> int:
        """One send handed as values, not as a frame (the local gRPC front's SendMessage,
        broker.proxy.local_broker.LocalBroker.send): `props` as the producer renders them into a
        SEND_MESSAGE_V2 header, appended to `topic` queue `queue_id` as run() appends that frame
        (the same route, checks, CLUSTER property and Appender; born_ts < 0: now). Returns the
        record's queue offset, or -1 when run() would hand the frame to the processors or answer
        it later: the kernel disabled, replies parked (SYNC_FLUSH / SYNC_MASTER), no route or a
        queue out of it, a transaction flag, a body over maxMessageSize, properties too long, DELAY
        or a timer property, a record that does not fit in the segment (nothing written then)."""
        cdef Borrowed view
        cdef TopicRoute route
        cdef QueueState q
        cdef AppendOut out
        cdef const uint8_t *pp = <const uint8_t *> PyBytes_AS_STRING(props)
        cdef Py_ssize_t props_len = PyBytes_GET_SIZE(props)
        cdef bint wait = True
        cdef int full
        if not self.enabled or self.parked or queue_id < 0 or sys_flag & RECORD_SYSFLAG_TRANSACTION:
            return -1
        route = self._route(<const uint8_t *> PyBytes_AS_STRING(topic), PyBytes_GET_SIZE(topic))
        if route is None or queue_id >= route.n:
            return -1
        if props_len > RECORD_MAX_PROPS_LEN or (props_len >= 6 and memmem(pp, props_len, b"DELAY\x01", 6) != NULL) \
                or (props_len >= 8 and memmem(pp, props_len, b"TIMER_DE", 8) != NULL):
            return -1
        if PyBytes_GET_SIZE(self.cluster):
            props_len = stored_props(pp, props_len, self._stored, RECORD_MAX_PROPS_LEN,
                                     <const uint8_t *> PyBytes_AS_STRING(self.cluster), PyBytes_GET_SIZE(self.cluster),
                                     &wait)
            if props_len < 0:
                return -1
            pp = self._stored
        q = <QueueState> route.queues[queue_id]
        borrow(body, &view, False)
        try:
            if view.size > self.app.max_body:
                return -1
            try:
                full = self.app.append_c(q, view.ptr, view.size, pp, props_len, flag, sys_flag,
                                         born_ts if born_ts >= 0 else now_ms(),
                                         <const uint8_t *> PyBytes_AS_STRING(c.born_host),
                                         PyBytes_GET_SIZE(c.born_host), 0, &out)
            except Exception:  # refused before writing anything (a record larger than a segment)
                return -1
        finally:
            give_back(&view)
        if full:
            return -1
        self._appended(c, q, 1, out.size)
        return out.queue_offset

    cdef inline void _appended(self, SendConn c, QueueState q, int64_t msgs, int64_t nbytes):
        c.msgs += msgs
        self.appended += msgs
        c.bytes_appended += nbytes
        c.max_end = self.app.wrote
        if self.track_queues and not q.touched:
            q.touched = 1
            c.touched.append(q)

    cdef const uint8_t *_msg_id(self, int64_t phys):
        """The msgId of the record at `phys`, in _mid (valid until the next call)."""
        msg_id_hex(<const uint8_t *> PyBytes_AS_STRING(self.app.store_host), PyBytes_GET_SIZE(self.app.store_host),
                   phys, self._mid)
        return self._mid

    cdef Py_ssize_t _timer_props(self, Py_ssize_t n, const uint8_t *topic, Py_ssize_t topic_len,
                                 int32_t queue_id) noexcept:
        """A timer message's properties (_stored[:n], as stored) as the processors store them in
        the timer topic: TIMER_OUT_MS, REAL_TOPIC, REAL_QID appended; its recall handle (if it has
        a UNIQ_KEY) into _scratch (_recall_len, 0: none). The new length, or -1 when the processors
        must take it: properties they would not store byte for byte as sent (not UTF-8, an entry
        without a key or a value, a key twice, more than MAX_TIMER_ENTRIES entries), a time not
        ahead or past the maximum delay, one of DELAY, TIMER_OUT_MS, REAL_TOPIC, REAL_QID,
        TIMER_DEL_UNIQKEY, no timer property, a value that is not [-]digits, too long a result."""
        cdef uint8_t *d = self._stored
        cdef uint8_t *raw = self._batch_props
        cdef Py_ssize_t i = 0, k, j, end, nent = 0, vpos, vlen
        cdef Py_ssize_t ks[MAX_TIMER_ENTRIES]
        cdef Py_ssize_t kl[MAX_TIMER_ENTRIES]
        cdef const uint8_t *e
        cdef const uint8_t *sep
        cdef int64_t now, deliver = 0, v, p = self._timer_precision
        cdef Py_ssize_t sec_at = -1, sec_len = 0, ms_at = -1, ms_len = 0, at_at = -1, at_len = 0
        cdef Py_ssize_t uniq_at = -1, uniq_len = 0, o, bn = PyBytes_GET_SIZE(self._broker_name)
        cdef uint8_t num[24]
        cdef uint8_t qnum[40]      # the queue id's digits, then (at 12) TIMER_OUT_MS + 1's, to measure
        if n <= 0 or d[n - 1] == 2:
            return -1  # a trailing separator: decoded and encoded again it would be gone
        while i < n:
            if d[i] >= 0x80:
                k = utf8_sequence(d, n, i)
                if k < 0:
                    return -1
                i += k
            else:
                i += 1
        i = 0
        while i < n:
            e = <const uint8_t *> memchr(d + i, 2, n - i)
            end = (e - d) if e != NULL else n
            sep = <const uint8_t *> memchr(d + i, 1, end - i)
            if sep == NULL or sep == d + i or sep + 1 == d + end or nent == MAX_TIMER_ENTRIES:
                return -1  # no key or no value (dropped when decoded), or an empty entry
            k = sep - (d + i)
            for j in range(nent):
                if kl[j] == k and memcmp(d + ks[j], d + i, k) == 0:
                    return -1  # a key twice: decoded, the last value would stand in the first's place
            ks[nent] = i
            kl[nent] = k
            nent += 1
            vpos = i + k + 1
            vlen = end - vpos
            if is_key(d + i, k, b"TIMER_DELAY_SEC", 15):
                sec_at, sec_len = vpos, vlen
            elif is_key(d + i, k, b"TIMER_DELAY_MS", 14):
                ms_at, ms_len = vpos, vlen
            elif is_key(d + i, k, b"TIMER_DELIVER_MS", 16):
                at_at, at_len = vpos, vlen
            elif is_key(d + i, k, b"UNIQ_KEY", 8):
                uniq_at, uniq_len = vpos, vlen
            elif (is_key(d + i, k, b"TIMER_OUT_MS", 12) or is_key(d + i, k, b"REAL_TOPIC", 10)
                  or is_key(d + i, k, b"REAL_QID", 8) or is_key(d + i, k, b"TIMER_DEL_UNIQKEY", 17)
                  or is_key(d + i, k, b"DELAY", 5)):
                return -1
            i = end + 1
        now = self.timer_clock_ms if self.timer_clock_ms > 0 else now_ms()
        if sec_at >= 0:  # the order transform reads them in
            if not timer_value(d + sec_at, sec_len, &v):
                return -1
            deliver = now + v * 1000
        elif ms_at >= 0:
            if not timer_value(d + ms_at, ms_len, &v):
                return -1
            deliver = now + v
        elif at_at >= 0:
            if not timer_value(d + at_at, at_len, &v):
                return -1
            deliver = v
        else:
            return -1
        if deliver <= now or deliver - now > self._timer_max_ms:
            return -1
        deliver = deliver - p if deliver % p == 0 else deliver // p * p
        k = ascii_int(deliver, num)
        j = ascii_int(queue_id, qnum)
        if n + 36 + k + topic_len + j > RECORD_MAX_PROPS_LEN:
            return -1
        self._recall_len = 0
        if uniq_at >= 0:  # "v1 <topic> <brokerName> <TIMER_OUT_MS + 1> <UNIQ_KEY>", base64url
            if 6 + topic_len + bn + ascii_int(deliver + 1, qnum + 12) + uniq_len > RECORD_MAX_PROPS_LEN:
                return -1
            o = put(raw, 0, b"v1 ", 3)
            o = put(raw, o, <const char *> topic, topic_len)
            raw[o] = 32
            o = put(raw, o + 1, PyBytes_AS_STRING(self._broker_name), bn)
            raw[o] = 32
            o += 1
            o += ascii_int(deliver + 1, raw + o)
            raw[o] = 32
            o = put(raw, o + 1, <const char *> d + uniq_at, uniq_len)
            self._recall_len = b64url(raw, o, self._scratch)
        o = put(d, n, b"\x02TIMER_OUT_MS\x01", 14)
        o = put(d, o, <const char *> num, k)
        o = put(d, o, b"\x02REAL_TOPIC\x01", 12)
        o = put(d, o, <const char *> topic, topic_len)
        o = put(d, o, b"\x02REAL_QID\x01", 10)
        return put(d, o, <const char *> qnum, j)

    cdef int _reply(self, SendConn c, int st, int32_t opaque, int32_t queue_id, int64_t queue_offset, int64_t phys,
                    const uint8_t *ids, Py_ssize_t ids_len, int64_t msgs, bint wait) except -1:
        """The reply now, or parked until the put is durable (SYNC_FLUSH / SYNC_MASTER, unless the
        producer said WAIT=false: CommitLog answers those without waiting for the flush or a slave)."""
        cdef uint8_t mid[56]
        if self.parked and wait:
            return c.parked.add(opaque, st, queue_id, queue_offset, phys, self.app.wrote, ids, ids_len, msgs)
        if ids == NULL:
            ids_len = msg_id_hex(<const uint8_t *> PyBytes_AS_STRING(self.app.store_host),
                                 PyBytes_GET_SIZE(self.app.store_host), phys, mid)
            ids = mid
        return render_send_reply(c.out, st, 0, opaque, queue_id, queue_offset, ids, ids_len, self.region, self.trace)

    cdef int _append_batch(self, SendConn c, QueueState q, SendFields *s, const uint8_t *b, Py_ssize_t n,
                           const uint8_t *bprops, Py_ssize_t bprops_len, int st, int32_t opaque,
                           bint answer, bint wait) except -1:
        """SEND_BATCH_MESSAGE: every message of the body into queue q, as a 4.9 broker stores them
        (MessageExtBatchEncoder): each with its own flag, its own properties followed by the batch's
        (a separator added when its own do not end with one). Returns 0 when appended, 1 when the
        processors must take it (malformed: they say where; a body or properties too long), 2 when
        the whole batch does not fit in the segment (they split it across segments)."""
        cdef Py_ssize_t pos = 0, tot, blen, plen, merged, count = 0, i
        cdef int64_t total = 0, first_qo = -1, first_phys = -1, nbytes = 0
        cdef Py_ssize_t topic_len = PyBytes_GET_SIZE(q.topic)
        cdef const uint8_t *m
        cdef AppendOut out
        cdef uint8_t mid[56]
        cdef Py_ssize_t mn
        if self.app.seg is None:
            return 2
        # one pass to check every message and measure the records, before anything is written
        while pos < n:
            if n - pos < BATCH_FIXED:
                return 1
            tot = <int32_t> get_be32(b + pos)
            if tot < BATCH_FIXED or tot > n - pos:
                return 1
            blen = <int32_t> get_be32(b + pos + 16)
            if blen < 0 or BATCH_FIXED + blen > tot:
                return 1
            plen = get_be16(b + pos + 20 + blen)
            if BATCH_FIXED + blen + plen != tot or blen > self.app.max_body:
                return 1
            merged = plen + bprops_len + (1 if plen > 0 and bprops_len > 0 and b[pos + 21 + blen + plen] != 2 else 0)
            if merged > RECORD_MAX_PROPS_LEN:
                return 1
            total += record_length_of(PyBytes_GET_SIZE(c.born_host), PyBytes_GET_SIZE(self.app.store_host), blen,
                                      topic_len, merged)
            count += 1
            pos += tot
        if count == 0:
            return 1
        if self.app.entries:
            # one entry per message (as DLedgerCommitLog.append): its header, its index unit; a
            # queue whose next offset this leadership has not read yet goes to the processors
            if q.next_offset < 0:
                return 1
            total += 48 * count
            if self.app.iseg is None or (self.app.entry_index + count) * 32 - self.app.iseg_base > self.app.iseg.size:
                return 2
        if total + 8 > self.app.seg.size - (self.app.wrote - self.app.seg_base):
            return 2
        self._ids.clear()
        pos = 0
        for i in range(count):
            m = b + pos
            tot = <int32_t> get_be32(m)
            blen = <int32_t> get_be32(m + 16)
            plen = get_be16(m + 20 + blen)
            merged = plen
            if plen:
                memcpy(self._batch_props, m + 22 + blen, plen)
            if bprops_len:
                if plen > 0 and m[21 + blen + plen] != 2:
                    self._batch_props[merged] = 2
                    merged += 1
                memcpy(self._batch_props + merged, bprops, bprops_len)
                merged += bprops_len
            if self.app.append_c(q, m + 20, blen, self._batch_props, merged, <int32_t> get_be32(m + 12), s.sys_flag,
                                 s.born_ts, <const uint8_t *> PyBytes_AS_STRING(c.born_host),
                                 PyBytes_GET_SIZE(c.born_host), s.reconsume_times, &out):
                raise AssertionError("a batch measured to fit did not")  # pragma: no cover
            if i == 0:
                first_qo, first_phys = out.queue_offset, out.phys
            else:
                self._ids.write_byte(44)  # ','
            mn = msg_id_hex(<const uint8_t *> PyBytes_AS_STRING(self.app.store_host),
                            PyBytes_GET_SIZE(self.app.store_host), out.phys, mid)
            self._ids.write(mid, mn)
            nbytes += out.size
            pos += tot
        self._appended(c, q, count, nbytes)
        if answer:
            self._reply(c, st, opaque, s.queue_id, first_qo, first_phys, self._ids._buf, self._ids.position(), count,
                        wait)
        return 0

    cdef int _slow(self, SendConn c, int st, Py_ssize_t hs, Py_ssize_t hl, Py_ssize_t bs, Py_ssize_t bl,
                   Py_ssize_t nxt) except -1:
        c.slow_type = st
        c.slow_header_start = hs
        c.slow_header_len = hl
        c.slow_body_start = bs
        c.slow_body_len = bl
        c.slow_next = nxt
        return RUN_SLOW_
