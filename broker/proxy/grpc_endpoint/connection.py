"""One HTTP/2 connection of the gRPC endpoint: an asyncio Protocol feeding its nghttp2 session
(broker.kernels.h2_session) and writing the session's output once per read, or once per loop
iteration for answers that come later (flush_soon), never once per frame."""
from __future__ import annotations

import asyncio
import logging

from broker.kernels.h2_session import (
    EV_CALL, EV_CLOSED, EV_END, EV_HEADERS, EV_MESSAGE, EV_TOO_LARGE, H2Error, ServerSession)
from broker.proxy.grpc_endpoint.calls import Call, Framed, too_large
from broker.proxy.grpc_endpoint.context import ServicerContext
from broker.proxy.grpc_endpoint.status import OK, UNAVAILABLE, UNIMPLEMENTED, encode_message, timeout_seconds

log = logging.getLogger("proxy")
_MALFORMED = object()  # a grpc-timeout timeout_seconds does not read (no deadline), as kept in _TIMEOUTS
_TIMEOUTS: dict = {}  # grpc-timeout -> its seconds (or _MALFORMED), for every connection
LINGER_S = 3.0  # a closing connection waits this long at most for its PING's ACK (H2Connection._close)


def peer_of(transport) -> str:
    """grpcio's peer format: ipv4:127.0.0.1:5555, ipv6:[::1]:5555."""
    addr = transport.get_extra_info("peername")
    if not addr:
        return "unknown"
    if len(addr) >= 4 or ":" in addr[0]:
        return f"ipv6:[{addr[0]}]:{addr[1]}"
    return f"ipv4:{addr[0]}:{addr[1]}"


class H2Connection(asyncio.Protocol):
    def __init__(self, server):
        self.server = server
        self.loop = server.loop
        self.calls: dict[int, Call] = {}
        self.transport = None
        self.session = None
        self.peer = "unknown"
        self._flush_pending = False
        self._closed = False
        self._routes = server._routes  # route_of's cache (cleared in place, never replaced)
        self._linger: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -----------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.peer = peer_of(transport)
        self.session = ServerSession(self.server.max_message)
        self.server.connections.add(self)
        if self.server.stopping:
            self.session.goaway()
        self.flush()

    def data_received(self, data: bytes) -> None:
        if self._closed:  # lingering after our last frames (_close): only the PING's ACK matters
            self._read_while_closing(data)
            return
        try:
            events = self.session.feed(data)
        except H2Error as e:
            self._abandon(str(e))
            return
        # what the calls write while dispatched (a call's handler runs at once: Call.start) leaves
        # with this read's flush below; none of them schedules a flush of its own
        self._flush_pending = True
        try:
            self._dispatch(events)
        finally:
            self.flush()

    def _dispatch(self, events: list) -> None:
        calls = self.calls
        for ev in events:
            kind = ev[0]
            if kind == EV_CALL:  # headers, the one message and the end, read at once
                if ev[6] == 0 and self._answer_now(ev):
                    continue
                call = self._open(ev)
                if call is None:
                    continue
                if ev[6] == 0 and call.requests is None:  # a unary call's uncompressed message
                    call.payload = ev[7]
                    call.count = 1
                    call.start()  # on_end of a call just opened (no task, not finished)
                else:
                    call.on_message(ev[6], ev[7])
                    call.on_end()
                if not call.finished and call.deadline is not None:  # it outlives this read (Call.arm)
                    call.arm()
            elif kind == EV_MESSAGE:
                call = calls.get(ev[1])
                if call is not None:
                    call.on_message(ev[2], ev[3])
            elif kind == EV_HEADERS:
                call = self._open(ev)
                if call is not None:
                    call.arm()
            elif kind == EV_END:
                call = calls.get(ev[1])
                if call is not None:
                    call.on_end()
            elif kind == EV_CLOSED:
                call = calls.pop(ev[1], None)
                if call is not None:
                    call.on_closed()
            elif kind == EV_TOO_LARGE:
                call = calls.get(ev[1])
                if call is not None:
                    too_large(call, ev[2], self.server.max_message)

    def connection_lost(self, exc) -> None:
        self._closed = True
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        self.server.connections.discard(self)
        calls, self.calls = self.calls, {}
        for call in calls.values():
            call.on_closed()
        self.server.connection_gone()

    # -- calls ----------------------------------------------------------------------------------------
    def _answer_now(self, ev) -> bool:
        """A whole call with a fast answer (GrpcServer.add_fast_unary / add_fast_stream) answered
        within the read that brought it, as nearly every SendMessage, AckMessage and ReceiveMessage
        of the 5.x clients is: the answer's frames are written with this read's flush, and no Call,
        no entry in `calls` and no deadline timer is made for it (over before any timer could run).
        An answer still to come (a future, the responses of a receive that waits) goes on in a Call
        given what the fast answer began (Call.take). False: the fast answer declined before doing
        anything (or there is none), and the call takes the method's handler."""
        path = ev[2]
        route = self._routes.get(path) or self.server.route_of(path)  # the server's cache, read here
        fast = route[1]
        if fast is None:
            return False
        handler = route[0]
        if handler.request_streaming:
            return False
        context = ServicerContext(self, self._deadline(ev[4]), ev[3])
        try:
            taken = fast(ev[7] if route[2] or handler.request_deserializer is None
                         else handler.request_deserializer(ev[7]), context)
        except Exception:  # noqa: BLE001 - the handler meets it again and answers it as the method does
            return False
        if taken is None:
            return False
        sid = ev[1]
        if handler.response_streaming:
            if type(taken) is Framed or type(taken) is bytes:  # the whole answer, framed: OK trailers after it
                context.done_ = True
                self.session.send_framed(sid, taken)
                self.session.finish(sid, OK, None)
                self.flush_soon()
                return True
        elif type(taken) is bytes:  # the response itself, serialized
            context.done_ = True
            self.session.unary(sid, taken)
            self.flush_soon()
            return True
        call = self.calls[sid] = Call(self, sid, path, handler, context, ev[5], route[1], route[2])
        call.payload = ev[7]
        call.count = 1
        call.take(taken)
        if not call.finished and call.deadline is not None:  # it outlives this read (Call.arm)
            call.arm()
        return True

    def _open(self, ev) -> Call | None:
        sid = ev[1]
        path = ev[2]
        route = self._routes.get(path) or self.server.route_of(path)  # the server's cache, read here
        handler = route[0]
        if handler is None:
            self.session.finish(sid, UNIMPLEMENTED, encode_message(f"Method not found: {path}"))
            return None
        context = ServicerContext(self, self._deadline(ev[4]), ev[3])
        call = self.calls[sid] = Call(self, sid, path, handler, context, ev[5], route[1], route[2])
        return call

    def _deadline(self, timeout) -> float | None:
        """The loop time a call's grpc-timeout ends at (None: no deadline, or one that does not read)."""
        if timeout is None:
            return None
        # a client sends the same grpc-timeout on every call of a kind: its seconds kept (bounded)
        seconds = _TIMEOUTS.get(timeout)
        if seconds is None:
            seconds = timeout_seconds(timeout)
            if seconds is None:
                seconds = _MALFORMED
            if len(_TIMEOUTS) >= 1024:
                _TIMEOUTS.clear()
            _TIMEOUTS[timeout] = seconds
        return None if seconds is _MALFORMED else self.loop.time() + seconds

    def call_done(self, call: Call) -> None:
        calls = self.calls
        if calls.get(call.sid) is call:
            del calls[call.sid]
        if not self._flush_pending:  # flush_soon, written out
            self._flush_pending = True
            self.loop.call_soon(self.flush)
        if not calls:
            self.server.connection_gone()

    def send_message(self, sid: int, payload: bytes) -> None:
        if self.session.send_message(sid, payload):
            self.flush_soon()

    def send_framed(self, sid: int, framed: bytes) -> None:
        if self.session.send_framed(sid, framed):
            self.flush_soon()

    def unary(self, sid: int, payload: bytes) -> None:
        if self.session.unary(sid, payload):
            self.flush_soon()

    def finish(self, sid: int, code: int, message: bytes | None) -> None:
        if self.session.finish(sid, code, message):
            self.flush_soon()

    # -- output ---------------------------------------------------------------------------------------
    def flush_soon(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_pending = False
        if self._closed:
            return
        try:
            out = self.session.drain()
        except H2Error as e:
            self._abandon(str(e))
            return
        if out:
            self.transport.write(out)
        if self.session.has_events:  # a stream nghttp2 closed while sending: its call is told
            self._dispatch(self.session.take_events())
            self.flush_soon()
        if not self.session.want_io():
            reason = self.session.last_error
            if reason:
                log.warning("gRPC connection from %s closed: %s", self.peer, reason)
            self._close()

    def goaway(self) -> None:
        """The server stops: no new streams; the calls in flight go on."""
        if not self._closed:
            self.session.goaway()
            self.flush()

    def abort(self) -> None:
        """The grace is over: the calls left are cancelled and the connection closed."""
        for call in list(self.calls.values()):
            call.fail(UNAVAILABLE, "the server is stopping")
        self.flush()
        if not self._closed:
            self._close()

    def _close(self) -> None:
        """Our last frames, then a PING; the socket closes when the client ACKs it (so it has read
        them all) or after LINGER_S. Closing at once, or after a fixed wait, lost a stream's
        trailers after GOAWAY on a loaded machine: the client's next bytes reached a closed socket,
        the kernel answered RST, and the client's kernel dropped what it had not read yet, so
        grpcio saw the stream fail ("Socket closed") instead of end."""
        self._closed = True
        t = self.transport
        try:
            self.session.ping_for_close()
            out = self.session.drain()
        except H2Error:
            t.close()
            return
        if out:
            t.write(out)
        self._linger = self.loop.call_later(LINGER_S, t.close)

    def _read_while_closing(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        try:
            self.session.feed(data)  # its events are dropped: every call has ended
        except H2Error:
            self.transport.close()
            return
        if self.session.close_acked:
            self.transport.close()

    def _abandon(self, reason: str) -> None:
        """nghttp2 refused this connection's input: logged naming the peer, this connection alone closed."""
        log.warning("gRPC connection from %s closed: HTTP/2 protocol error: %s", self.peer, reason)
        try:
            out = self.session.drain()  # its GOAWAY, when nghttp2 has one to say
            if out:
                self.transport.write(out)
        except H2Error:
            pass
        self._closed = True
        self.transport.close()
