"""broker.remoting.memory_transport: the in-process connection between the broker's own gRPC front
and its remoting server. What a socket would do, kept: bytes arrive in order and whole (also through
a BufferedProtocol with a small buffer), a writer's buffer may be reused at once, a paused reader
holds what is written until it resumes, close() delivers what was written and then EOF, abort()
drops it and tells the peer of a reset. The front over it is tested by the local-mode gRPC tests."""
from __future__ import annotations

import asyncio

from broker.remoting import memory_transport


class Recorder(asyncio.BufferedProtocol):
    def __init__(self, chunk: int = 5):
        self.buf = bytearray(chunk)
        self.data = bytearray()
        self.reads = 0
        self.events: list = []
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        self.events.append(("made", transport.get_extra_info("peername")))

    def get_buffer(self, sizehint):
        return memoryview(self.buf)

    def buffer_updated(self, nbytes):
        self.data += self.buf[:nbytes]
        self.reads += 1

    def eof_received(self):
        self.events.append("eof")

    def connection_lost(self, exc):
        self.events.append(("lost", type(exc).__name__ if exc else None))


class Plain(asyncio.Protocol):
    def __init__(self):
        self.data = bytearray()
        self.events: list = []

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.data += data

    def eof_received(self):
        self.events.append("eof")

    def connection_lost(self, exc):
        self.events.append(("lost", type(exc).__name__ if exc else None))


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_bytes_arrive_in_order_through_a_small_buffer_and_writers_may_reuse_theirs():
    async def go():
        a, b = Recorder(), Recorder(chunk=5)
        ta, tb = memory_transport.connect(asyncio.get_running_loop(), a, "front:1", b, "broker:2")
        assert a.events == [("made", "front:1")] and b.events == [("made", "broker:2")]
        scratch = bytearray(b"hello ")
        ta.write(memoryview(scratch))
        scratch[:] = b"XXXXXX"  # reused at once, as a reply buffer is: what was written stays
        ta.writelines([memoryview(b"wor"), b"ld", bytearray(b"!")])
        assert b.data == b""  # delivered in a later loop turn, as a read would be
        await _turns()
        assert bytes(b.data) == b"hello world!" and b.reads == 3  # through the 5-byte buffer
        tb.write(b"back")
        await _turns()
        assert bytes(a.data) == b"back"
    asyncio.run(go())


def test_a_paused_reader_holds_what_is_written_until_it_resumes():
    async def go():
        a, b = Recorder(), Recorder(chunk=4)
        ta, tb = memory_transport.connect(asyncio.get_running_loop(), a, "a", b, "b")
        tb.pause_reading()
        ta.write(b"12345678")
        await _turns()
        assert b.data == b"" and not tb.is_reading()
        tb.resume_reading()
        ta.write(b"9")
        await _turns()
        assert bytes(b.data) == b"123456789"
    asyncio.run(go())


def test_close_delivers_what_was_written_then_eof_and_abort_resets_the_peer():
    async def go():
        loop = asyncio.get_running_loop()
        a, b = Plain(), Recorder()
        ta, tb = memory_transport.connect(loop, a, "a", b, "b")
        ta.write(b"last words")
        ta.close()
        assert ta.is_closing()
        ta.write(b"after close")  # dropped, as a closed socket transport's
        await _turns()
        assert bytes(b.data) == b"last words"
        assert b.events[1:] == ["eof", ("lost", None)] and a.events == [("lost", None)]

        c, d = Plain(), Recorder()
        tc, td = memory_transport.connect(loop, c, "c", d, "d")
        tc.write(b"never delivered")
        tc.abort()
        await _turns()
        assert d.data == b"" and d.events[1:] == [("lost", "ConnectionResetError")] and c.events == [("lost", None)]
        tc.abort()  # twice: nothing more happens
        await _turns()
        assert d.events[1:] == [("lost", "ConnectionResetError")]
    asyncio.run(go())
