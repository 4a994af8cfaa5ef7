"""An in-process connection between two protocols of one event loop, with no socket under it: the
broker's own gRPC front reaching the broker (local mode, RemotingServer.connect_local).

A socketpair cost each batch of the front's requests four system calls and two epoll wake-ups (the
front's write, the broker's read, its reply's write, the front's read); here the bytes written in
one loop turn are handed to the other side's protocol in the next, as a read would hand them.
Written bytes are copied at once (writers reuse their buffers, as a socket's send copies them), and
delivered through get_buffer/buffer_updated to a BufferedProtocol, data_received otherwise.

The writer is never paused: what can be in flight is bounded by the front's streams. A reader that
pauses its reading keeps what was written for it until it resumes."""
from __future__ import annotations

import asyncio


class MemoryTransport(asyncio.Transport):
    __slots__ = ("_loop", "_protocol", "_peer", "_incoming", "_scheduled", "_paused", "_closing", "_lost",
                 "_buffered")

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: asyncio.BaseProtocol, peername: str):
        super().__init__({"peername": peername})
        self._loop = loop
        self._protocol = protocol
        self._buffered = isinstance(protocol, asyncio.BufferedProtocol)
        self._peer: MemoryTransport | None = None
        self._incoming: list[bytes] = []  # written by the peer, not yet delivered to our protocol
        self._scheduled = False
        self._paused = False
        self._closing = False
        self._lost = False

    # -- asyncio.Transport ----------------------------------------------------------------------------
    def get_protocol(self):
        return self._protocol

    def set_protocol(self, protocol) -> None:
        self._protocol = protocol
        self._buffered = isinstance(protocol, asyncio.BufferedProtocol)

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data) -> None:
        if data and not self._closing and self._peer is not None:
            self._peer._receive(bytes(data))

    def writelines(self, list_of_data) -> None:
        if not self._closing and self._peer is not None:
            data = b"".join(list_of_data)
            if data:
                self._peer._receive(data)

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            if self._incoming:
                self._schedule()

    def is_reading(self) -> bool:
        return not self._paused and not self._lost

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass  # nothing is ever buffered on the writing side

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        """What was written reaches the peer; then both ends are lost, the peer with EOF."""
        if self._closing:
            return
        self._closing = True
        self._loop.call_soon(self._hang_up, None)

    def abort(self) -> None:
        """Both ends lost now; what was not delivered is dropped, the peer told of a reset."""
        if self._lost:
            return
        self._closing = True
        self._incoming.clear()
        peer = self._peer
        if peer is not None:
            peer._incoming.clear()
        self._loop.call_soon(self._hang_up, ConnectionResetError("the in-process peer aborted the connection"))

    # -- delivery -------------------------------------------------------------------------------------
    def _receive(self, data: bytes) -> None:
        if self._lost:
            return
        self._incoming.append(data)
        if not self._scheduled and not self._paused:
            self._schedule()

    def _schedule(self) -> None:
        self._scheduled = True
        self._loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        self._scheduled = False
        if self._lost or self._paused or not self._incoming:
            return
        incoming = self._incoming
        data = incoming[0] if len(incoming) == 1 else b"".join(incoming)
        incoming.clear()
        protocol = self._protocol
        if not self._buffered:
            protocol.data_received(data)
            return
        view = memoryview(data)
        off, size = 0, len(data)
        while off < size:
            if self._lost:
                return
            if self._paused:  # the rest waits for resume_reading, ahead of anything written later
                incoming.insert(0, bytes(view[off:]))
                return
            buf = protocol.get_buffer(size - off)
            n = min(len(buf), size - off)
            if n == 0:
                raise RuntimeError("get_buffer() returned an empty buffer")
            buf[:n] = view[off:off + n]
            off += n
            protocol.buffer_updated(n)

    def _hang_up(self, exc: BaseException | None) -> None:
        """Both ends lost: the peer's protocol first gets what was written to it (a close, not an
        abort), then EOF, then connection_lost; ours connection_lost."""
        peer = self._peer
        if peer is not None and not peer._lost:
            peer._closing = True
            if exc is None:
                peer._paused = False
                peer._deliver()
                if not peer._lost:
                    peer._protocol.eof_received()
            peer._lose(exc)
        self._lose(None)

    def _lose(self, exc: BaseException | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._incoming.clear()
        self._protocol.connection_lost(exc)


def connect(loop: asyncio.AbstractEventLoop, a: asyncio.BaseProtocol, a_peer: str, b: asyncio.BaseProtocol,
            b_peer: str) -> tuple[MemoryTransport, MemoryTransport]:
    """Connect protocols `a` and `b` (connection_made on each, `a` first); `a_peer`: how `a` sees
    its peer (its transport's peername), `b_peer` how `b` does."""
    ta, tb = MemoryTransport(loop, a, a_peer), MemoryTransport(loop, b, b_peer)
    ta._peer, tb._peer = tb, ta
    a.connection_made(ta)
    b.connection_made(tb)
    return ta, tb
