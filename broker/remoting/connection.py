"""One remoting TCP connection, for servers and clients alike (asyncio BufferedProtocol).

Bytes are read straight into our own buffer, split in place by the frame kernel, and each frame's
header decoded; a request goes to the handler with its body as a view of the buffer, a response
resolves the future waiting on its opaque. A frame that cannot be valid (over 16 MiB, bad
lengths, a header that is not JSON) closes this connection with one log line naming the peer and
the reason; nothing else is affected. So does a peer hanging up in the middle of a frame, and, on
a server given an idle timeout (serverChannelMaxIdleTimeSeconds), a connection that neither sent
nor received anything for that long (RocketMQ's IdleStateHandler ALL_IDLE).

The body view is valid only during the handler call (the buffer is reused): a handler that keeps
the body across an await copies it, or, as the send path does, consumes it synchronously.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import Awaitable, Callable

from broker.kernels.header import HeaderError
from broker.kernels.remoting import FrameError, reallocate, split_frames
from broker.kernels.send_path import RUN_DONE, RUN_YIELD
from broker.remoting import memory_transport
from broker.remoting.command import RemotingCommand
from broker.remoting.request_handling import RequestHandling
from broker.remoting.tls import TLS_RECORD_HANDSHAKE

log = logging.getLogger("remoting")

INITIAL_BUFFER = 1 << 20  # allocated at the second read, not at accept
FIRST_READ = 4 << 10  # the first read's buffer: often the only read (one request, or an idle peer's EOF)
MIN_READ = 64 << 10
MAX_FRAME = 16 * 1024 * 1024
# A server-side connection stops reading requests while this much of its answers waits unsent
# (a client that never reads them); it reads again below WRITE_LOW.
WRITE_HIGH = 8 << 20
WRITE_LOW = 2 << 20
# The send kernel's first replies of a read leave after this many messages, not only at its end:
# a client pipelining 64 sends otherwise waited for all 64 to be stored before any reply left,
# and the two processes took turns (1.15 of 2 cores busy, issue 16's profile). Each later part
# is twice the one before, so a read of n messages costs about log2(n / 16) writes, not n / 16
# (each write wakes the client: ~0.5 CPU-us/msg more at 256 in flight with a fixed 16).
# Not when the replies are parked (SYNC_FLUSH, SYNC_MASTER, DLedger): none could leave early, and
# each part's settle published the write position mid-read, so a flush service between rounds
# took the first parts alone and the rest of the read waited for a second fdatasync (at 64 in
# flight, 58 % of rounds paid two, 48 + 16 messages).
REPLY_FIRST = 16

# handler(command, connection) -> response | awaitable of a response | None (no reply)
Handler = Callable[[RemotingCommand, "RemotingConnection"], "RemotingCommand | Awaitable | None"]


class ConnectionClosed(ConnectionError):
    pass


class RemotingConnection(RequestHandling, asyncio.BufferedProtocol):
    def __init__(self, handler: Handler | None = None, on_close: Callable | None = None,
                 max_frame: int = MAX_FRAME, idle_timeout: float = 0, backpressure: bool = False, fast=None):
        self.handler = handler
        # the broker's send path in a kernel (broker.server.processor.send_fast_path): each read goes
        # through it first, and what it hands back goes to the handler in frame order
        self.fast = fast
        self.send_conn = None
        self.in_turn = False  # read in this loop turn: FastSendPath.end_turn settles its appends
        self.parked_seen = 0  # its parked replies already settled (FastSendPath.settle)
        # Only the serving side pauses its reads: a client pausing too (its requests backed up
        # while the server's answers are) would leave both sides waiting for the other to read.
        self.backpressure = backpressure
        self.on_close = on_close
        self.max_frame = max_frame
        # Hostile input (issue 7): the receive buffer was a 1 MiB bytearray (zero-filled, so
        # resident) made at accept: 1,000 connections that never send a byte took 1 GiB of RSS, and
        # as much again at once when they all hung up (the EOF is a read). Now the first read gets
        # FIRST_READ bytes, and a second read the INITIAL_BUFFER (_make_room).
        self.buf = bytearray()
        self.view = memoryview(self.buf)
        self.start = 0  # first unparsed byte
        self.end = 0  # end of received bytes
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.pending: dict[int, asyncio.Future] = {}
        self.closed = asyncio.Event()
        self.tasks: set[asyncio.Task] = set()
        self.attrs: dict = {}  # per-connection state of the processors (client id, ...)
        self._out: list | None = None  # replies gathered while the frames of one read are handled
        self._later: list | None = None  # replies gathered until the end of this loop turn
        # Hostile input (issue 7): idle connections were kept forever; RocketMQ closes a channel
        # with no read and no write for serverChannelMaxIdleTimeSeconds (120 s). 0 = never.
        self.idle_timeout = idle_timeout
        self._idle_timer: asyncio.TimerHandle | None = None
        self._active = 0.0  # loop time of the last read or write (kept only with an idle timeout)
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- asyncio protocol ----------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        # asyncio.get_running_loop() costs a getpid() system call (its fork check): a late reply
        # per SYNC_FLUSH send paid one each
        self._loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = f"{peer[0]}:{peer[1]}"
        elif peer:
            self.peer = str(peer)
        if self.backpressure:
            transport.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)
        if self.fast is not None:
            self.send_conn = self.fast.conn_state(self)
        if self.idle_timeout > 0:
            loop = self._loop
            self._active = loop.time()
            self._idle_timer = loop.call_later(self.idle_timeout, self._idle_check)

    def _idle_check(self) -> None:
        """One timer per connection, moved on lazily: a busy connection costs a float store per
        read, and this callback once per idle_timeout."""
        self._idle_timer = None
        if self.transport is None:
            return
        loop = self._loop
        idle = loop.time() - self._active
        if idle >= self.idle_timeout:
            self.abort(f"no traffic for {idle:.0f} s (serverChannelMaxIdleTimeSeconds={self.idle_timeout:g})")
            return
        self._idle_timer = loop.call_later(self.idle_timeout - idle, self._idle_check)

    # Hostile input (issue 7): a client that pipelines requests and never reads the answers made
    # the transport hold every answer (pull bodies included) without bound. Reads stop above
    # WRITE_HIGH unsent bytes, so only what is already in flight can still add answers.
    def pause_writing(self) -> None:
        if self.backpressure and self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.backpressure and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.end == 0 and self.buf:  # nothing kept from the last read (a lone request's every read)
            return self.view
        if len(self.buf) - self.end < MIN_READ:
            if not self.buf:  # the first read (see __init__)
                self.buf = bytearray(FIRST_READ)
                self.view = memoryview(self.buf)
                return self.view
            if len(self.buf) == FIRST_READ and self.end < FIRST_READ:
                # A peer that sends one small request at a time (a heartbeat every 30 s, a producer
                # waiting for each answer) keeps the small buffer: its reads, its EOF among them,
                # fit. The big one is made once a read fills this one. (5,000 clients hanging up at
                # once each zero-filled a megabyte for its EOF: 3 s of page faults, nothing answered.)
                return self.view[self.end:]
            self._make_room(max(sizehint, MIN_READ))
        return self.view[self.end:]

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        if self._idle_timer is not None:
            self._active = self._loop.time()
        if self.fast is not None:
            self._fast_read()
            return
        try:
            frames, nxt = split_frames(self.buf, self.start, self.end, self.max_frame)
        except FrameError as e:
            self.abort(f"{e.reason} (at byte {e.offset - self.start} of this read)")
            return
        # Replies to the frames of one read leave in one write: a pipelining client (64 sends in
        # flight) costs one send syscall per read, not one per request.
        out = self._out = []
        try:
            for serialize_type, hs, hl, bs, bl in frames:
                try:
                    cmd = RemotingCommand.decode(self.view[hs:hs + hl], self.view[bs:bs + bl], serialize_type)
                except FrameError as e:
                    self.abort(f"{e.reason} (at byte {e.offset} of a header)")
                    return
                self._dispatch(cmd)
                if self.transport is None:
                    return
        finally:
            self._out = None
            if out and self.transport is not None:
                self.transport.writelines(out)
        self.start = nxt
        if self.start == self.end:
            self.start = self.end = 0

    def _fast_read(self) -> None:
        """A read through the send kernel: the sends it takes are appended and answered in C, the
        replies written at the end of the read, the store told of the appends at once for the
        loop turn's first read, else at its end, once for every other connection read in it
        (FastSendPath.read_done, end_turn); a frame it
        hands back (another code, a topic's first use, a refusal to come...) goes to the
        handler, after the store has been told what the kernel appended before it."""
        fast, st = self.fast, self.send_conn
        out = None
        pos = self.start
        part = 0 if fast.pipeline.parked else REPLY_FIRST
        try:
            fast.before_read(st, self)
            while True:
                try:
                    status, pos = fast.pipeline.run(st, self.buf, pos, self.end, part)
                except (FrameError, HeaderError) as e:
                    self.abort(f"{e.reason} (at byte {e.offset - self.start} of this read)"
                               if isinstance(e, FrameError) else f"{e.reason} (at byte {e.offset} of a header)")
                    return
                if status == RUN_DONE:
                    break
                # A part of a long read, or a frame for the processors: the store is told of
                # every append of this turn before the processors append, and the replies so far
                # leave now (the processors' before the kernel's after them).
                fast.read_done(self)
                fast.end_turn(final=False)
                if out is None:
                    out = self._out = []
                replies = st.take_replies()
                if replies is not None:
                    out.append(replies)
                if out and self.transport is not None:
                    self.transport.writelines(out)
                out.clear()
                if status == RUN_YIELD:
                    part *= 2
                    continue
                hs, hl, bs, bl = st.slow_header_start, st.slow_header_len, st.slow_body_start, st.slow_body_len
                try:
                    cmd = RemotingCommand.decode(self.view[hs:hs + hl], self.view[bs:bs + bl], st.slow_type)
                except FrameError as e:
                    self.abort(f"{e.reason} (at byte {e.offset} of a header)")
                    return
                self._dispatch(cmd)
                if self.transport is None:
                    return
                pos = st.slow_next
        finally:
            fast.read_done(self)  # what was appended counts even if the connection just closed
            replies = st.take_replies()
            if out is not None:
                self._out = None
                if replies is not None:
                    out.append(replies)
                if out and self.transport is not None:
                    self.transport.writelines(out)
            elif replies is not None and self.transport is not None:
                self.transport.write(replies)
        self.start = pos
        if self.start == self.end:
            self.start = self.end = 0

    def send_bytes(self, data: bytes) -> None:
        """Frames already rendered (replies the send kernel parked): with this read's replies, or
        at the end of this loop turn with the other late ones."""
        if self._out is not None:
            self._out.append(data)
        elif self.transport is not None:
            if self._later is None:
                self._later = []
                self._loop.call_soon(self._write_later)
            self._later.append(data)

    def _make_room(self, want: int) -> None:
        """Room for `want` more bytes: move the partial frame to the front (reallocateByteBuffer),
        or move it to a bigger buffer when a frame needs more (views of the old one stay valid)."""
        pending = self.end - self.start
        if self.start > 0 and len(self.buf) - pending >= want:
            self.end = reallocate(self.buf, self.start, self.end)
            self.start = 0
            return
        size = max(len(self.buf), INITIAL_BUFFER)  # past the FIRST_READ buffer (see __init__)
        while size < pending + want:
            size *= 2
        new = bytearray(size)
        new[:pending] = self.view[self.start:self.end]
        self.buf, self.view = new, memoryview(new)
        self.start, self.end = 0, pending

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc) -> None:
        if self.end > self.start:
            # Hostile input (issue 7): a peer hanging up mid-frame (a truncated frame, then EOF or
            # a reset) was dropped without a word; abort() empties the buffer, so this is the only
            # line for it. Nothing of the partial frame was handled.
            log.warning("connection from %s closed with %d bytes of an incomplete frame unread (%s)", self.peer,
                        self.end - self.start, exc or "end of stream")
            self.start = self.end = 0
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self.transport = None
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionClosed(f"connection to {self.peer} closed"))
        self.pending.clear()
        for t in list(self.tasks):
            t.cancel()
        self.closed.set()
        if self.on_close is not None:
            self.on_close(self)

    # -- dispatch ------------------------------------------------------------------------------
    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            fut = self.pending.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                cmd.body = bytes(cmd.body)  # the caller reads it after we reuse the buffer
                fut.set_result(cmd)
            return  # an unknown opaque is dropped, as the Java clients do
        self._handle_request(cmd)

    # -- sending -------------------------------------------------------------------------------
    def send(self, cmd: RemotingCommand) -> None:
        if self._out is not None:
            self._out.extend(cmd.encode_parts())
        elif self.transport is not None:
            # Replies completed outside a read (a group commit releasing many SYNC_FLUSH sends at
            # once) leave together at the end of the event-loop turn: one write for all of them.
            if self._later is None:
                self._later = []
                self._loop.call_soon(self._write_later)
            self._later.extend(cmd.encode_parts())

    def _write_later(self) -> None:
        out, self._later = self._later, None
        if out and self.transport is not None:
            self.transport.writelines(out)
            if self._idle_timer is not None:  # a write (a held pull answered) is traffic too
                self._active = self._loop.time()

    async def request(self, cmd: RemotingCommand, timeout: float = 30.0) -> RemotingCommand:
        if self.transport is None:
            raise ConnectionClosed(f"connection to {self.peer} is closed")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        opaque = cmd.opaque
        self.pending[opaque] = fut
        # one timer handle per request, cancelled by the answer (asyncio.wait_for costs a
        # waiter future and callbacks more, which a pipelining client pays per message)
        timer = loop.call_later(timeout, self._expire, opaque, timeout)
        self.send(cmd)
        try:
            return await fut
        finally:
            timer.cancel()
            self.pending.pop(opaque, None)

    def _expire(self, opaque: int, timeout: float) -> None:
        fut = self.pending.pop(opaque, None)
        if fut is not None and not fut.done():
            fut.set_exception(asyncio.TimeoutError(f"no answer from {self.peer} within {timeout:g} s"))

    def oneway(self, cmd: RemotingCommand) -> None:
        self.send(cmd)

    def abort(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.start = self.end = 0  # what is left unread is not "an incomplete frame" (connection_lost)
        if self.transport is not None:
            self.transport.abort()
            self.transport = None

    def close(self) -> None:
        if self.transport is not None:
            if self._later:  # replies and oneways still gathered for this turn go first
                self._write_later()
            self.transport.close()


async def connect(host: str, port: int, handler: Handler | None = None, ssl_context=None) -> RemotingConnection:
    """A connection to a remoting server; over TLS with `ssl_context` (broker.remoting.tls.client_context)."""
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(lambda: RemotingConnection(handler), host, port, ssl=ssl_context)
    return conn


class RemotingServer:
    """Listens on host:port; every connection hands its requests to `handler`. With `fast_port` it
    listens there too, for the same handler: a broker's VIP channel (RocketMQ's fastRemotingServer
    on listenPort - 2), which Java clients with vipChannelEnabled and the Dashboard's admin calls
    use. 0 picks either port.

    TLS (broker.remoting.tls): `tls_mode` "enforcing" serves TLS only with `ssl_context`;
    "permissive" serves TLS and plaintext on each port, telling them apart by a connection's first
    byte, peeked before the transport is made (a peer that sends nothing is closed after the idle
    timeout, as it would be once connected)."""

    def __init__(self, handler: Handler, host: str, port: int, idle_timeout: float = 0, fast=None,
                 fast_port: int | None = None, tls_mode: str = "disabled", ssl_context=None):
        self.handler = handler
        self.fast = fast  # the broker's send kernel, given to every connection
        self.host = host
        self.port = port
        self.fast_port = fast_port
        self.idle_timeout = idle_timeout  # seconds without traffic before a connection is closed; 0 = never
        if tls_mode != "disabled" and ssl_context is None:
            raise ValueError(f"tls mode {tls_mode} needs an SSL context")
        self.tls_mode = tls_mode
        self.ssl_context = ssl_context
        self.server: asyncio.AbstractServer | None = None
        self.fast_server: asyncio.AbstractServer | None = None
        self._sniffing: list = []  # permissive mode: (listening socket, accept task) per port
        self.tls_accepted = 0  # connections that began a TLS handshake (all of them when enforcing)
        self.connections: set[RemotingConnection] = set()
        self.on_close: list[Callable[[RemotingConnection], None]] = []

    def _protocol(self) -> RemotingConnection:
        if self.tls_mode == "enforcing":
            self.tls_accepted += 1
        conn = RemotingConnection(self.handler, self._closed, idle_timeout=self.idle_timeout, backpressure=True,
                                  fast=self.fast)
        self.connections.add(conn)
        return conn

    def connect_local(self, peer: str, protocol: asyncio.BaseProtocol, addr: str) -> None:
        """Connect `protocol` (the caller's client channel) to this server from its own process,
        with no socket: an in-process connection (broker.remoting.memory_transport) served as an
        accepted one (same handler, send kernel and ACL as any other; no TLS, the bytes never
        leave the process). `peer`: the "host:port" the connection is known by here (born host,
        ACL's address, logs), as a TCP peer would be by its address; `addr`: this server's, as
        the caller's channel sees it."""
        conn = RemotingConnection(self.handler, self._closed, idle_timeout=self.idle_timeout, backpressure=True,
                                  fast=self.fast)
        self.connections.add(conn)
        memory_transport.connect(asyncio.get_running_loop(), conn, peer, protocol, addr)

    def _closed(self, conn: RemotingConnection) -> None:
        self.connections.discard(conn)
        for cb in self.on_close:
            cb(conn)

    async def _listen(self, port: int):
        """One listening port: an asyncio server, or in permissive mode a socket and its accept task.
        Returns the port bound."""
        loop = asyncio.get_running_loop()
        if self.tls_mode != "permissive":
            server = await loop.create_server(self._protocol, self.host, port, reuse_address=True, backlog=1024,
                                              ssl=self.ssl_context if self.tls_mode == "enforcing" else None)
            return server, server.sockets[0].getsockname()[1]
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, port))
            sock.listen(1024)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        task = loop.create_task(self._accept(sock))
        self._sniffing.append((sock, task))
        return None, sock.getsockname()[1]

    async def _accept(self, sock) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                peer, _ = await loop.sock_accept(sock)
            except OSError as e:  # EMFILE and the like: this connection is lost, the port is not
                log.warning("accept on %s:%d failed: %s", self.host, sock.getsockname()[1], e)
                await asyncio.sleep(0.1)  # a pause before the next accept, not a poll for a condition
                continue
            peer.setblocking(False)
            peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sniff(peer)

    def _sniff(self, peer) -> None:
        """Wait for the first byte without reading it: 0x16 (a TLS handshake record) gets TLS."""
        loop = asyncio.get_running_loop()
        fd = peer.fileno()
        timer = None

        def give_up() -> None:
            loop.remove_reader(fd)
            peer.close()

        def readable() -> None:
            try:
                first = peer.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                return
            except OSError:
                first = b""
            loop.remove_reader(fd)
            if timer is not None:
                timer.cancel()
            if not first:  # hung up before a byte
                peer.close()
                return
            ssl_context = self.ssl_context if first[0] == TLS_RECORD_HANDSHAKE else None
            if ssl_context is not None:
                self.tls_accepted += 1
            loop.create_task(self._attach(peer, ssl_context))

        loop.add_reader(fd, readable)
        if self.idle_timeout > 0:
            timer = loop.call_later(self.idle_timeout, give_up)

    async def _attach(self, peer, ssl_context) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(self._protocol, peer, ssl=ssl_context)
        except (OSError, ssl.SSLError) as e:  # a failed handshake closes this connection only
            log.warning("TLS handshake with a client failed: %s", e)
            peer.close()

    async def start(self) -> None:
        self.server, self.port = await self._listen(self.port)
        if self.fast_port is not None:
            try:
                self.fast_server, self.fast_port = await self._listen(self.fast_port)
            except OSError as e:
                await self.close()  # neither port served
                raise OSError(e.errno, f"cannot listen on {self.host}:{self.fast_port}, the VIP channel "
                                       f"(listenPort - 2): {e.strerror}") from e

    async def close(self) -> None:
        servers = [s for s in (self.server, self.fast_server) if s is not None]
        for s in servers:
            s.close()
        for sock, task in self._sniffing:
            task.cancel()
            sock.close()
        self._sniffing.clear()
        for c in list(self.connections):
            c.close()
        for s in servers:
            await s.wait_closed()
        self.server = self.fast_server = None
