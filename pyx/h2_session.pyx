# cython: language_level=3
"""The gRPC endpoint's HTTP/2 server session on libnghttp2 (broker.proxy.grpc_endpoint).

Everything HTTP/2 (the preface, HPACK, SETTINGS, PING, flow control, GOAWAY, stream states) is
nghttp2's; this kernel only keeps per-call Python work small. `feed(data)` runs one read through
nghttp2_session_mem_recv and returns that read's events as small tuples:

    (EV_HEADERS, stream_id, path, metadata, grpc_timeout, grpc_encoding)  a request's headers
    (EV_MESSAGE, stream_id, compressed_flag, payload)                      one whole gRPC message
    (EV_END, stream_id)                                                    the client's side ended
    (EV_CLOSED, stream_id, h2_error_code)                                  closed before we finished it
    (EV_TOO_LARGE, stream_id, length)                                      a message above the limit
    (EV_CALL, stream_id, path, metadata, grpc_timeout, grpc_encoding, compressed_flag, payload)
        a whole unary-shaped request read at once: its headers, its one message and its end

A stream's EV_HEADERS is held until the end of the read that opened it: when that read also
brings its one message and its end (every unary call a pipelining client sends), the three come
as one EV_CALL, so Python handles the call once, not three times. Otherwise EV_HEADERS (then the
message held, if any) is given at the end of the read, or before the stream's next event.

The gRPC messages (1 byte compressed flag, 4 byte big-endian length, payload) are reassembled
here from DATA chunks (MessageReader; its twin is tests/twins/grpc_message_twin.py). Responses are
queued per stream (`send_message`, `finish`, `unary`, `reset`) and `drain()` returns the bytes to
write, once per read: a stream's messages go out through a data provider over its own buffer
(deferred when the buffer is empty, resumed when a message is queued); its trailers follow.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize, PyByteArray_GET_SIZE, PyByteArray_Resize
from libc.stdint cimport int32_t, uint8_t, uint32_t
from libc.string cimport memcmp, memcpy, memset

from binascii import a2b_base64 as _a2b_base64  # a private name: not part of the module's surface

EV_HEADERS = 0
EV_MESSAGE = 1
EV_END = 2
EV_CLOSED = 3
EV_TOO_LARGE = 4
EV_CALL = 5
cdef size_t _OBUF_KEEP = 1 << 20  # the most a new drain's output starts with (sized by the last)
cdef bytes _CLOSE_PING = b"rmqclose"  # the opaque data of ping_for_close's PING

# gRPC's default receive limit on this front (grpc.max_receive_message_length of the grpcio server)
DEFAULT_MAX_MESSAGE = 130 * 1024 * 1024
MAX_CONCURRENT_STREAMS = 1000
STREAM_WINDOW = 16 * 1024 * 1024  # generous: nghttp2 consumes what we read and updates the windows
CONNECTION_WINDOW = 64 * 1024 * 1024
H2_CANCEL = NGHTTP2_CANCEL


class H2Error(Exception):
    """nghttp2 refused the connection's input (a bad preface, a flood, a broken frame)."""


class MessageTooLarge(ValueError):
    """A gRPC message whose length prefix exceeds the reader's limit."""


cdef extern from "Python.h":
    # drain's output is built in a bytes object of its own (no copy at the end): the object is
    # held as a raw pointer so that _PyBytes_Resize can grow and shrink it in place
    PyObject *_new_bytes "PyBytes_FromStringAndSize"(const char *, Py_ssize_t)
    int _resize_bytes "_PyBytes_Resize"(PyObject **, Py_ssize_t)
    char *_bytes_data "PyBytes_AS_STRING"(PyObject *)
    void _xdecref "Py_XDECREF"(PyObject *)
    void PyErr_Clear()


cdef extern from "nghttp2/nghttp2.h":
    ctypedef int (*nghttp2_error_callback2)(nghttp2_session *, int, const char *, size_t, void *) noexcept
    void nghttp2_session_callbacks_set_error_callback2(nghttp2_session_callbacks *, nghttp2_error_callback2)


cdef class MessageReader:
    """gRPC length-prefixed messages out of a byte stream cut anywhere."""
    cdef bytearray pending    # None until a message is cut across chunks (most streams never)
    cdef size_t need          # bytes `pending` must hold before a parse can yield a message
    cdef readonly size_t max_length

    def __cinit__(self, size_t max_length=DEFAULT_MAX_MESSAGE):
        self.need = 5
        self.max_length = max_length

    @property
    def buffered(self) -> int:
        return 0 if self.pending is None else PyByteArray_GET_SIZE(self.pending)

    cdef Py_ssize_t _parse(self, const uint8_t *b, size_t n, list out, int32_t sid) except -2:
        """Whole messages of b[:n] appended to out; the bytes consumed, or -1 past the limit."""
        cdef size_t pos = 0
        cdef size_t length
        while n - pos >= 5:
            length = (<size_t>b[pos + 1] << 24) | (<size_t>b[pos + 2] << 16) | (<size_t>b[pos + 3] << 8) | b[pos + 4]
            if length > self.max_length:
                self.need = length
                return -1
            if n - pos - 5 < length:
                self.need = 5 + length
                return pos
            payload = PyBytes_FromStringAndSize(<const char *>b + pos + 5, length)
            if sid >= 0:
                out.append((EV_MESSAGE, sid, b[pos], payload))
            else:
                out.append((b[pos], payload))
            pos += 5 + length
        self.need = 5
        return pos

    cdef Py_ssize_t push(self, const uint8_t *data, size_t n, list out, int32_t sid) except -2:
        """Append the whole messages `data` completes to out; 0, or -1 when one is above the limit
        (its length then in self.need)."""
        cdef Py_ssize_t k, have = 0 if self.pending is None else PyByteArray_GET_SIZE(self.pending)
        if have == 0:
            k = self._parse(data, n, out, sid)
            if k < 0:
                return -1
            if <size_t>k < n:
                if self.pending is None:
                    self.pending = PyByteArray_FromStringAndSize(<const char *>data + k, n - k)
                else:
                    PyByteArray_Resize(self.pending, n - k)
                    memcpy(PyByteArray_AS_STRING(self.pending), data + k, n - k)
            return 0
        PyByteArray_Resize(self.pending, have + n)
        memcpy(PyByteArray_AS_STRING(self.pending) + have, data, n)
        if <size_t>(have + n) < self.need:
            return 0
        k = self._parse(<const uint8_t *>PyByteArray_AS_STRING(self.pending), have + n, out, sid)
        if k < 0:
            return -1
        del self.pending[:k]
        return 0

    def feed(self, data) -> list:
        """The (compressed_flag, payload) of every message `data` completes; MessageTooLarge past the limit."""
        cdef const uint8_t[::1] view = data
        cdef list out = []
        if view.shape[0] == 0:
            return out
        if self.push(&view[0], view.shape[0], out, -1) < 0:
            raise MessageTooLarge(f"a message of {self.need} bytes is above the limit of {self.max_length}")
        return out


cdef class _Stream(MessageReader):
    """A request stream: its own MessageReader (one object a call, not two)."""
    cdef int32_t sid
    cdef list meta
    cdef object path
    cdef object timeout
    cdef object encoding
    cdef bytearray out          # length-prefixed messages not yet handed to nghttp2 (None until one)
    cdef bytes single           # or a unary answer's one message, framed as it is copied out (unary)
    cdef Py_ssize_t out_pos     # bytes of `out` (or of `single` with its 5-byte prefix) handed out
    cdef bytes framed           # messages framed by the caller (send_framed), held, not copied: before `out`
    cdef Py_ssize_t framed_pos  # bytes of `framed` handed out
    cdef bint responded         # the response HEADERS (with a data provider) are submitted
    cdef bint finishing         # trailers go after `out` drains
    cdef bint done              # the call is finished on our side (trailers or RST): no EV_CLOSED
    cdef bint discard           # a message above the limit: the rest of its data is dropped
    cdef bint deferred          # the data provider returned DEFERRED: resume on the next message
    cdef bint held              # its EV_HEADERS not given yet (see the module's doc)
    cdef object first           # the EV_MESSAGE read while held, or None
    cdef bytes status
    cdef bytes message


cdef bytes _STATUS = b":status"
cdef bytes _S200 = b"200"
cdef bytes _CT = b"content-type"
cdef bytes _GRPC = b"application/grpc"
cdef bytes _GS = b"grpc-status"
cdef bytes _GM = b"grpc-message"
cdef bytes _OK = b"0"  # grpc-status 0


cdef inline void _nv(nghttp2_nv *nv, bytes name, bytes value):
    """A header of ours: its name one of the module's constants (lowercase, alive as long as the
    module), which nghttp2 then does not copy; a value that is one of them (_S200, _GRPC, _OK) not
    either, any other value copied."""
    nv.name = <uint8_t *>PyBytes_AS_STRING(name)
    nv.namelen = PyBytes_GET_SIZE(name)
    nv.value = <uint8_t *>PyBytes_AS_STRING(value)
    nv.valuelen = PyBytes_GET_SIZE(value)
    if value is _S200 or value is _GRPC or value is _OK:
        nv.flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE
    else:
        nv.flags = NGHTTP2_NV_FLAG_NO_COPY_NAME


cdef int _submit_trailer(nghttp2_session *s, _Stream st) noexcept:
    cdef nghttp2_nv nva[2]
    _nv(&nva[0], _GS, st.status)
    if st.message is not None:
        _nv(&nva[1], _GM, st.message)
    return nghttp2_submit_trailer(s, st.sid, nva, 2 if st.message is not None else 1)


cdef size_t _copy_single(_Stream st, uint8_t *buf, size_t length) noexcept:
    """The next bytes of the unary answer's message with its gRPC prefix (flag 0, 4-byte length),
    copied straight into nghttp2's frame: no buffer of ours in between."""
    cdef size_t plen = <size_t>PyBytes_GET_SIZE(st.single)
    cdef size_t pos = <size_t>st.out_pos
    cdef size_t k = 5 + plen - pos
    cdef size_t done = 0
    cdef uint8_t pre[5]
    if k > length:
        k = length
    if pos < 5:
        pre[0] = 0
        pre[1] = <uint8_t>((plen >> 24) & 0xff)
        pre[2] = <uint8_t>((plen >> 16) & 0xff)
        pre[3] = <uint8_t>((plen >> 8) & 0xff)
        pre[4] = <uint8_t>(plen & 0xff)
        done = 5 - pos if 5 - pos < k else k
        memcpy(buf, pre + pos, done)
    if done < k:
        memcpy(buf + done, PyBytes_AS_STRING(st.single) + (pos + done - 5), k - done)
    st.out_pos = <Py_ssize_t>(pos + k)
    if pos + k == 5 + plen:
        st.single = None
        st.out_pos = 0
    return k


cdef inline size_t _avail(_Stream st) noexcept:
    """The bytes the stream has queued and not handed out yet."""
    if st.single is not None:
        return 5 + <size_t>PyBytes_GET_SIZE(st.single) - <size_t>st.out_pos
    cdef size_t n = 0
    if st.framed is not None:
        n = <size_t>(PyBytes_GET_SIZE(st.framed) - st.framed_pos)
    if st.out is not None:
        n += <size_t>(PyByteArray_GET_SIZE(st.out) - st.out_pos)
    return n


cdef int _copy_out(_Stream st, uint8_t *buf, size_t length) noexcept:
    """The stream's next `length` bytes (no more than _avail) copied to buf, in the order queued:
    the unary answer, or the framed bytes held, then `out`. 0, or -1 when a buffer would not shrink."""
    cdef size_t k
    if st.single is not None:
        _copy_single(st, buf, length)
        return 0
    if st.framed is not None:
        k = <size_t>(PyBytes_GET_SIZE(st.framed) - st.framed_pos)
        if k > length:
            k = length
        memcpy(buf, PyBytes_AS_STRING(st.framed) + st.framed_pos, k)
        st.framed_pos += k
        if st.framed_pos == PyBytes_GET_SIZE(st.framed):
            st.framed = None  # the caller's bytes let go as soon as they are written
            st.framed_pos = 0
        buf += k
        length -= k
    if length:
        memcpy(buf, PyByteArray_AS_STRING(st.out) + st.out_pos, length)
        st.out_pos += length
        if st.out_pos == PyByteArray_GET_SIZE(st.out):
            st.out_pos = 0
            if PyByteArray_Resize(st.out, 0) < 0:
                PyErr_Clear()
                return -1
    return 0


cdef ssize_t _read_cb(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t length, uint32_t *flags,
                      nghttp2_data_source *source, void *user_data) noexcept:
    """How much of the stream's queue the next DATA frame carries: nothing is copied here
    (NGHTTP2_DATA_FLAG_NO_COPY), _send_data writes the frame straight into drain's output."""
    cdef _Stream st = <_Stream>source.ptr
    cdef size_t avail = _avail(st)
    cdef size_t n = avail if avail < length else length
    if n:
        flags[0] |= NGHTTP2_DATA_FLAG_NO_COPY
    if st.finishing and n == avail:
        flags[0] |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM
        if _submit_trailer(s, st) != 0:
            return NGHTTP2_ERR_CALLBACK_FAILURE
        return n
    if n:
        return n
    st.deferred = True
    return NGHTTP2_ERR_DEFERRED


cdef class ServerSession:
    """One HTTP/2 connection's server side (see the module's doc)."""
    cdef nghttp2_session *s
    cdef list events
    cdef list held              # the streams opened by this read (their EV_HEADERS maybe held)
    cdef dict streams
    cdef size_t max_message
    cdef readonly object last_error
    cdef PyObject *obytes       # drain's output, a bytes object being written (NULL until a frame)
    cdef char *obuf             # its bytes: every frame nghttp2 sends in one call, written in place
    cdef size_t olen, ocap
    cdef size_t ohint           # the capacity a new output starts with (the last output's size)
    cdef bytes path_raw         # the last :path seen, and its str: the same for nearly every call
    cdef str path_str
    # metadata a client sends the same on every call (x-mq-client-id, x-mq-language, ...): per
    # header name [name, value or None once it was seen to change, the (key, value) entry]
    cdef list meta_seen
    # the client answered the PING of ping_for_close: it has read every frame written before it
    cdef readonly bint close_acked

    def __cinit__(self, size_t max_message=DEFAULT_MAX_MESSAGE, uint32_t max_concurrent_streams=MAX_CONCURRENT_STREAMS):
        cdef nghttp2_session_callbacks *cbs
        cdef nghttp2_option *opt
        cdef nghttp2_settings_entry iv[2]
        self.events = []
        self.held = []
        self.streams = {}
        self.meta_seen = []
        self.max_message = max_message
        if nghttp2_session_callbacks_new(&cbs) != 0:
            raise MemoryError()
        nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, _on_begin_headers)
        nghttp2_session_callbacks_set_on_header_callback(cbs, _on_header)
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, _on_frame_recv)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, _on_data_chunk)
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, _on_stream_close)
        nghttp2_session_callbacks_set_error_callback2(cbs, _on_error)
        nghttp2_session_callbacks_set_send_callback(cbs, _on_send)
        nghttp2_session_callbacks_set_send_data_callback(cbs, _send_data)
        if nghttp2_option_new(&opt) != 0:
            nghttp2_session_callbacks_del(cbs)
            raise MemoryError()
        rv = nghttp2_session_server_new2(&self.s, cbs, <void *>self, opt)
        nghttp2_option_del(opt)
        nghttp2_session_callbacks_del(cbs)
        if rv != 0:
            raise MemoryError(nghttp2_strerror(rv).decode())
        iv[0].settings_id = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS
        iv[0].value = max_concurrent_streams
        iv[1].settings_id = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE
        iv[1].value = STREAM_WINDOW
        nghttp2_submit_settings(self.s, NGHTTP2_FLAG_NONE, iv, 2)
        nghttp2_session_set_local_window_size(self.s, NGHTTP2_FLAG_NONE, 0, CONNECTION_WINDOW)

    def __dealloc__(self):
        if self.s is not NULL:
            nghttp2_session_del(self.s)
            self.s = NULL
        _xdecref(self.obytes)
        self.obytes = NULL
        self.obuf = NULL

    def feed(self, data) -> list:
        """One read's events (see the module's doc); H2Error when nghttp2 refuses the input."""
        cdef const uint8_t[::1] view = data
        cdef ssize_t rv
        if view.shape[0] == 0:
            return self.take_events()
        try:
            rv = nghttp2_session_mem_recv(self.s, &view[0], view.shape[0])
        finally:
            self._give_held()
        if rv < 0:
            raise H2Error(nghttp2_strerror(<int>rv).decode())
        return self.take_events()

    cdef int _give(self, _Stream st) except -1:
        """The stream's held EV_HEADERS (and the message held with them) given now."""
        if st.held:
            st.held = False
            self.events.append((EV_HEADERS, st.sid, st.path, st.meta, st.timeout, st.encoding))
            if st.first is not None:
                self.events.append(st.first)
                st.first = None
        return 0

    cdef int _give_held(self) except -1:
        cdef _Stream st
        if self.held:
            for st in self.held:
                self._give(st)
            self.held = []
        return 0

    def take_events(self) -> list:
        """The events not handed out yet (those `drain` caused: a stream nghttp2 closed while sending)."""
        events = self.events
        self.events = []
        return events

    @property
    def has_events(self) -> bool:
        return len(self.events) != 0

    def drain(self) -> bytes:
        """Every byte nghttp2 has to send now (frames, DATA out of the streams' buffers, trailers):
        nghttp2_session_send hands each frame to _on_send, and each DATA frame to _send_data, which
        write them into one bytes object, so a turn's frames become one bytes object (not one per
        frame, then joined), handed out as it is (shrunk to its length, not copied)."""
        cdef int rv
        cdef size_t n
        self.olen = 0
        rv = nghttp2_session_send(self.s)
        if rv < 0:
            self.olen = 0
            raise H2Error(nghttp2_strerror(rv).decode())
        n = self.olen
        self.olen = 0
        if n == 0:
            return b""
        if _resize_bytes(&self.obytes, <Py_ssize_t>n) < 0:  # shrinking: realloc in place
            self.obytes = NULL
            self.obuf = NULL
            self.ocap = 0
            raise MemoryError()
        out = <object>self.obytes  # the reference is handed over: the next drain starts a new one
        Py_DECREF(out)
        self.obytes = NULL
        self.obuf = NULL
        self.ocap = 0
        self.ohint = n + n // 4 if n + n // 4 < _OBUF_KEEP else _OBUF_KEEP
        return out

    def want_io(self) -> bool:
        """False once the connection is over (GOAWAY both ways and no stream left, or a fatal error)."""
        return nghttp2_session_want_read(self.s) != 0 or nghttp2_session_want_write(self.s) != 0

    def want_write(self) -> bool:
        return nghttp2_session_want_write(self.s) != 0

    @property
    def open_streams(self) -> int:
        return len(self.streams)

    cdef int _respond(self, _Stream st) except -1:
        cdef nghttp2_nv nva[2]
        cdef nghttp2_data_provider prd
        _nv(&nva[0], _STATUS, _S200)
        _nv(&nva[1], _CT, _GRPC)
        prd.source.ptr = <void *>st
        prd.read_callback = _read_cb
        rv = nghttp2_submit_response(self.s, st.sid, nva, 2, &prd)
        if rv != 0:
            raise H2Error(nghttp2_strerror(rv).decode())
        st.responded = True
        return 0

    cdef inline void _queue(self, _Stream st, bytes payload):
        cdef Py_ssize_t n = PyBytes_GET_SIZE(payload)
        cdef Py_ssize_t have
        cdef char *p
        if st.out is None:
            st.out = bytearray()
        have = PyByteArray_GET_SIZE(st.out)
        PyByteArray_Resize(st.out, have + 5 + n)
        p = PyByteArray_AS_STRING(st.out) + have
        p[0] = 0
        p[1] = <char>((n >> 24) & 0xff)
        p[2] = <char>((n >> 16) & 0xff)
        p[3] = <char>((n >> 8) & 0xff)
        p[4] = <char>(n & 0xff)
        memcpy(p + 5, PyBytes_AS_STRING(payload), n)

    cdef int _kick(self, _Stream st) except -1:
        if not st.responded:
            self._respond(st)
        elif st.deferred:
            st.deferred = False
            nghttp2_session_resume_data(self.s, st.sid)
        return 0

    def send_message(self, int32_t sid, bytes payload) -> bool:
        """Queue one response message (the response headers first, once); False if the stream is gone."""
        cdef _Stream st = self.streams.get(sid)
        if st is None or st.done:
            return False
        self._queue(st, payload)
        self._kick(st)
        return True

    def send_framed(self, int32_t sid, framed) -> bool:
        """Queue response messages already length-prefixed (flag byte, 4-byte big-endian length,
        message; any number back to back): many messages of one stream go out as one copy into its
        buffer (bytes, or a subclass of it). False if the stream is gone."""
        cdef _Stream st = self.streams.get(sid)
        cdef Py_ssize_t n, have
        if not isinstance(framed, bytes):
            raise TypeError(f"framed messages are bytes, not {type(framed).__name__}")
        n = PyBytes_GET_SIZE(framed)
        if st is None or st.done:
            return False
        if n:
            if st.framed is None and st.single is None and (st.out is None or PyByteArray_GET_SIZE(st.out) == 0):
                st.framed = <bytes>framed  # held, not copied: bytes do not change (a bytes subclass's
                st.framed_pos = 0          # contents neither); written from here into the DATA frames
            else:
                if st.out is None:
                    st.out = bytearray()
                have = PyByteArray_GET_SIZE(st.out)
                PyByteArray_Resize(st.out, have + n)
                memcpy(PyByteArray_AS_STRING(st.out) + have, PyBytes_AS_STRING(framed), n)
            self._kick(st)
        return True

    def finish(self, int32_t sid, int code, bytes message=None) -> bool:
        """End the call with grpc-status `code` (grpc-message `message`, percent-encoded by the
        caller): trailers after the queued messages, or a trailers-only response."""
        cdef _Stream st = self.streams.get(sid)
        cdef nghttp2_nv nva[4]
        if st is None or st.done:
            return False
        st.done = True
        st.status = str(code).encode() if code else _OK
        st.message = message if message else None
        if st.responded:
            st.finishing = True
            if st.deferred:
                st.deferred = False
                nghttp2_session_resume_data(self.s, sid)
            return True
        _nv(&nva[0], _STATUS, _S200)
        _nv(&nva[1], _CT, _GRPC)
        _nv(&nva[2], _GS, st.status)
        if st.message is not None:
            _nv(&nva[3], _GM, st.message)
        rv = nghttp2_submit_response(self.s, sid, nva, 4 if st.message is not None else 3, NULL)
        if rv != 0:
            raise H2Error(nghttp2_strerror(rv).decode())
        return True

    def unary(self, int32_t sid, bytes payload) -> bool:
        """A unary call's answer: headers, the one message and grpc-status 0, in one call."""
        cdef _Stream st = self.streams.get(sid)
        if st is None or st.done:
            return False
        if st.single is None and st.framed is None and (st.out is None or PyByteArray_GET_SIZE(st.out) == 0):
            st.single = payload  # copied once, into the DATA frame (_copy_single)
            st.out_pos = 0
        else:
            self._queue(st, payload)
        st.done = True
        st.finishing = True
        st.status = _OK
        st.message = None
        self._kick(st)
        return True

    def reset(self, int32_t sid, uint32_t error_code=NGHTTP2_CANCEL) -> bool:
        """RST_STREAM the call (the handler is gone and no status can be said)."""
        cdef _Stream st = self.streams.get(sid)
        if st is None or st.done:
            return False
        st.done = True
        nghttp2_submit_rst_stream(self.s, NGHTTP2_FLAG_NONE, sid, error_code)
        return True

    def ping_for_close(self) -> None:
        """A PING after the last frames: its ACK (`close_acked`) says the client has read them all,
        so the socket may close without a reset taking them from its receive buffer."""
        nghttp2_submit_ping(self.s, NGHTTP2_FLAG_NONE, <const uint8_t *>_CLOSE_PING)

    def goaway(self, uint32_t error_code=NGHTTP2_NO_ERROR) -> None:
        """No new streams: the ones already opened carry on."""
        nghttp2_submit_goaway(self.s, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(self.s),
                              error_code, NULL, 0)


cdef inline ServerSession _sess(void *user_data):
    return <ServerSession>user_data


cdef int _on_begin_headers(nghttp2_session *s, const nghttp2_frame *frame, void *user_data) noexcept:
    cdef ServerSession self = _sess(user_data)
    cdef _Stream st
    if frame.hd.type != NGHTTP2_HEADERS or frame.headers.cat != NGHTTP2_HCAT_REQUEST:
        return 0
    try:
        st = _Stream.__new__(_Stream)
        st.sid = frame.hd.stream_id
        st.meta = []
        st.max_length = self.max_message
        self.streams[st.sid] = st
        nghttp2_session_set_stream_user_data(s, st.sid, <void *>st)
    except BaseException:
        return NGHTTP2_ERR_CALLBACK_FAILURE
    return 0


cdef int _on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                    const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data) noexcept:
    cdef void *p
    cdef _Stream st
    cdef ServerSession self
    cdef bytes raw
    cdef list seen
    if frame.hd.type != NGHTTP2_HEADERS or frame.headers.cat != NGHTTP2_HCAT_REQUEST:
        return 0
    p = nghttp2_session_get_stream_user_data(s, frame.hd.stream_id)
    if p is NULL:
        return 0
    st = <_Stream>p
    try:
        if name[0] == 58:  # ':'
            if namelen == 5 and name[1] == 112:  # :path
                self = _sess(user_data)
                raw = self.path_raw
                if raw is not None and <size_t>PyBytes_GET_SIZE(raw) == valuelen \
                        and memcmp(PyBytes_AS_STRING(raw), value, valuelen) == 0:
                    st.path = self.path_str
                else:
                    st.path = (<const char *>value)[:valuelen].decode("latin-1")
                    self.path_raw = PyBytes_FromStringAndSize(<const char *>value, valuelen)
                    self.path_str = st.path
            return 0
        # the headers every call sends and nothing reads, skipped without a Python string
        if _named(name, namelen, b"content-type", 12) or _named(name, namelen, b"te", 2) \
                or _named(name, namelen, b"grpc-accept-encoding", 20):
            return 0
        if _named(name, namelen, b"grpc-timeout", 12):
            st.timeout = (<const char *>value)[:valuelen].decode("latin-1")
            return 0
        if _named(name, namelen, b"grpc-encoding", 13):
            st.encoding = (<const char *>value)[:valuelen].decode("latin-1")
            return 0
        self = _sess(user_data)
        seen = _meta_seen(self.meta_seen, name, namelen)
        if seen is not None and seen[1] is not None:
            if _same_bytes(<bytes>seen[1], value, valuelen):
                st.meta.append(seen[2])  # the same (key, value) tuple as the call before
                return 0
            seen[1] = None  # a value that changes (a request id, a date): not looked for again
        key = (<const char *>name)[:namelen].decode("latin-1")
        if namelen >= 4 and memcmp(name + namelen - 4, b"-bin", 4) == 0:
            # gRPC sends -bin values unpadded; the padding is put back (as a count that is never
            # negative: the kernel's % is C's, for which -3 % 4 is -3, and no padding at all)
            raw = (<const char *>value)[:valuelen]
            entry = (key, _a2b_base64(raw + b"=" * ((4 - valuelen % 4) % 4)))
        else:
            entry = (key, (<const char *>value)[:valuelen].decode("latin-1"))
        st.meta.append(entry)
        if seen is None and len(self.meta_seen) < _META_SEEN_MAX:
            self.meta_seen.append([PyBytes_FromStringAndSize(<const char *>name, namelen),
                                   PyBytes_FromStringAndSize(<const char *>value, valuelen), entry])
    except BaseException:
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE  # that stream is reset, the connection lives
    return 0


cdef size_t _META_SEEN_MAX = 16


cdef inline bint _same_bytes(bytes b, const uint8_t *p, size_t n) noexcept:
    return <size_t>PyBytes_GET_SIZE(b) == n and memcmp(PyBytes_AS_STRING(b), p, n) == 0


cdef list _meta_seen(list seen, const uint8_t *name, size_t namelen):
    """The meta_seen entry of this header name, or None."""
    cdef list e
    for e in seen:
        if _same_bytes(<bytes>e[0], name, namelen):
            return e
    return None


cdef inline bint _named(const uint8_t *name, size_t namelen, const char *want, size_t n) noexcept:
    return namelen == n and memcmp(name, want, n) == 0


cdef int _on_frame_recv(nghttp2_session *s, const nghttp2_frame *frame, void *user_data) noexcept:
    cdef ServerSession self
    cdef void *p
    cdef _Stream st
    if frame.hd.type != NGHTTP2_HEADERS and frame.hd.type != NGHTTP2_DATA:
        if (frame.hd.type == NGHTTP2_PING and frame.hd.flags & NGHTTP2_FLAG_ACK
                and memcmp(frame.ping.opaque_data, <const char *>_CLOSE_PING, 8) == 0):
            _sess(user_data).close_acked = True
        return 0
    p = nghttp2_session_get_stream_user_data(s, frame.hd.stream_id)
    if p is NULL:
        return 0
    st = <_Stream>p
    self = _sess(user_data)
    try:
        if frame.hd.type == NGHTTP2_HEADERS and frame.headers.cat == NGHTTP2_HCAT_REQUEST:
            st.held = True
            self.held.append(st)
        if frame.hd.flags & NGHTTP2_FLAG_END_STREAM:
            if st.held and st.first is not None:
                first = st.first
                st.first = None
                st.held = False
                self.events.append((EV_CALL, st.sid, st.path, st.meta, st.timeout, st.encoding, first[2], first[3]))
            else:
                self._give(st)
                self.events.append((EV_END, st.sid))
    except BaseException:
        return NGHTTP2_ERR_CALLBACK_FAILURE
    return 0


cdef int _on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t sid, const uint8_t *data, size_t n,
                        void *user_data) noexcept:
    cdef ServerSession self
    cdef _Stream st
    cdef void *p = nghttp2_session_get_stream_user_data(s, sid)
    if p is NULL:
        return 0
    st = <_Stream>p
    if st.discard:
        return 0
    self = _sess(user_data)
    cdef list got
    cdef Py_ssize_t rc
    try:
        if not st.held:
            rc = st.push(data, n, self.events, sid)
        else:  # the first message is held with the headers, in case the end comes in this read too
            got = []
            rc = st.push(data, n, got, sid)
            if got:
                if st.first is None and len(got) == 1:
                    st.first = got[0]
                else:
                    self._give(st)
                    self.events.extend(got)
        if rc < 0:
            self._give(st)
            st.discard = True
            self.events.append((EV_TOO_LARGE, sid, st.need))
    except BaseException:
        return NGHTTP2_ERR_CALLBACK_FAILURE
    return 0


cdef int _on_stream_close(nghttp2_session *s, int32_t sid, uint32_t error_code, void *user_data) noexcept:
    cdef ServerSession self = _sess(user_data)
    cdef void *p = nghttp2_session_get_stream_user_data(s, sid)
    cdef _Stream st
    if p is NULL:
        return 0
    st = <_Stream>p
    try:
        if not st.done:
            self._give(st)
            self.events.append((EV_CLOSED, sid, error_code))
        del self.streams[sid]
    except BaseException:
        return NGHTTP2_ERR_CALLBACK_FAILURE
    return 0


cdef int _room(ServerSession self, size_t n) noexcept:
    """Room for n more bytes in drain's output (a bytes object, grown by doubling); 0 or -1."""
    cdef size_t cap
    if self.olen + n <= self.ocap:
        return 0
    cap = self.ocap * 2 if self.ocap else (self.ohint if self.ohint > 16384 else 16384)
    while cap < self.olen + n:
        cap *= 2
    if self.obytes is NULL:
        self.obytes = _new_bytes(NULL, <Py_ssize_t>cap)
        if self.obytes is NULL:
            PyErr_Clear()
            return -1
    elif _resize_bytes(&self.obytes, <Py_ssize_t>cap) < 0:  # frees it on failure
        PyErr_Clear()
        self.obytes = NULL
        self.obuf = NULL
        self.ocap = 0
        self.olen = 0
        return -1
    self.obuf = _bytes_data(self.obytes)
    self.ocap = cap
    return 0


cdef ssize_t _on_send(nghttp2_session *s, const uint8_t *data, size_t n, int flags, void *user_data) noexcept:
    """nghttp2_session_send's output (drain): appended to the session's output."""
    cdef ServerSession self = _sess(user_data)
    if _room(self, n) < 0:
        return NGHTTP2_ERR_CALLBACK_FAILURE
    memcpy(self.obuf + self.olen, data, n)
    self.olen += n
    return <ssize_t>n


cdef int _send_data(nghttp2_session *s, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
                    nghttp2_data_source *source, void *user_data) noexcept:
    """A DATA frame _read_cb sized (NGHTTP2_DATA_FLAG_NO_COPY): its 9-byte header, then `length`
    bytes of the stream's queue copied straight into drain's output (no copy into nghttp2's frame
    buffer first), padding as nghttp2 asks (none: no padding callback is set)."""
    cdef ServerSession self = _sess(user_data)
    cdef _Stream st = <_Stream>source.ptr
    cdef size_t padlen = frame.data.padlen
    cdef size_t total = 9 + length + padlen
    cdef char *p
    if _room(self, total) < 0:
        return NGHTTP2_ERR_CALLBACK_FAILURE
    p = self.obuf + self.olen
    memcpy(p, framehd, 9)
    p += 9
    if padlen > 0:
        p[0] = <char>(padlen - 1)
        p += 1
    if _copy_out(st, <uint8_t *>p, length) < 0:
        return NGHTTP2_ERR_CALLBACK_FAILURE
    if padlen > 1:
        memset(p + length, 0, padlen - 1)
    self.olen += total
    return 0


cdef int _on_error(nghttp2_session *s, int code, const char *msg, size_t n, void *user_data) noexcept:
    cdef ServerSession self = _sess(user_data)
    try:
        self.last_error = msg[:n].decode("utf-8", "replace")
    except BaseException:
        pass
    return 0
