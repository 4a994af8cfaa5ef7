"""The gRPC endpoint on libnghttp2 (broker.proxy.grpc_endpoint, broker.kernels.h2_session) driven by
grpcio's client: deadlines, client cancellation, unknown methods, broken connections beside a
working one, a message larger than the flow-control windows, many streams on one connection, the
status codes of refused messages; and the kernel's gRPC message reassembly against its twin."""
from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading
import time

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.kernels import h2_session as K
from broker.proxy.grpc_endpoint import GrpcServer, calls, connection
from tests.conftest import wait_for
from tests.twins import grpc_message_twin as T

SERVICE = "test.Endpoint"


class Servicer:
    """Raw-bytes methods; what the handlers saw, for the tests to read."""

    def __init__(self):
        self.cancelled: list[str] = []
        self.started: list[str] = []
        self.peers: list[str] = []
        self.held: dict[bytes, asyncio.Future] = {}

    async def echo(self, request: bytes, context) -> bytes:
        self.peers.append(context.peer())
        meta = dict(context.invocation_metadata())
        return request + meta.get("x-suffix", "").encode()

    async def sleep(self, request: bytes, context) -> bytes:
        tag = request.decode()
        self.started.append(tag)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled.append(tag)
            raise
        return b"late"

    async def fail(self, request: bytes, context) -> bytes:
        raise ValueError("boom %")

    async def abort(self, request: bytes, context) -> bytes:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no: é")

    async def slow(self, request: bytes, context) -> bytes:
        await asyncio.sleep(float(request))
        return request

    async def waits(self, request: bytes, context) -> bytes:
        """Waits as a handler may after the call started it at once (Call.start): on a bare yield,
        on a future that fails (caught here), on one that succeeds."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0)
        failing = loop.create_future()
        loop.call_soon(failing.set_exception, ValueError("failed"))
        try:
            await failing
        except ValueError as e:
            caught = str(e)
        ok = loop.create_future()
        loop.call_later(0.01, ok.set_result, b"ok")
        return request + b" " + caught.encode() + b" " + await ok

    async def fast_or_not(self, request: bytes, context) -> bytes:
        return b"task:" + request

    def fast(self, request: bytes, context):
        """Fast's answer without a task (GrpcServer.add_fast_unary): declines, raises, holds or answers."""
        if request in (b"decline", b"raise"):
            if request == b"raise":
                raise ValueError("run() answers it")
            return None
        if request.startswith(b"now:"):  # the response's bytes, known at once
            return request[4:].upper()
        fut = asyncio.get_running_loop().create_future()
        if request.startswith(b"hold:"):
            self.held[request] = fut
        else:
            fut.set_result(request.upper())
        return fut, (lambda done: done.result() if request != b"bad-respond" else 1 / 0)

    async def count(self, request: bytes, context):
        for i in range(int(request)):
            yield str(i).encode()

    async def chat(self, requests, context):
        async for r in requests:
            yield r.upper()


def _handlers(s: Servicer) -> dict:
    return {
        "Echo": grpc.unary_unary_rpc_method_handler(s.echo),
        "Sleep": grpc.unary_unary_rpc_method_handler(s.sleep),
        "Fail": grpc.unary_unary_rpc_method_handler(s.fail),
        "Abort": grpc.unary_unary_rpc_method_handler(s.abort),
        "Slow": grpc.unary_unary_rpc_method_handler(s.slow),
        "Waits": grpc.unary_unary_rpc_method_handler(s.waits),
        "Count": grpc.unary_stream_rpc_method_handler(s.count),
        "Chat": grpc.stream_stream_rpc_method_handler(s.chat),
        "Fast": grpc.unary_unary_rpc_method_handler(s.fast_or_not),
        # the same fast answer with a request deserializer: raw, it is given the bytes all the same
        "FastRaw": grpc.unary_unary_rpc_method_handler(s.fast_or_not, request_deserializer=_tagged),
        "FastDecoded": grpc.unary_unary_rpc_method_handler(s.fast_or_not, request_deserializer=_tagged),
    }


def _tagged(payload: bytes) -> bytes:
    return b"decoded-" + payload


class Endpoint:
    """A GrpcServer on its own loop in a thread, on a free loopback port."""

    def __init__(self, max_message: int = 8 << 20):
        self.servicer = Servicer()
        self.loop = asyncio.new_event_loop()
        self.server = GrpcServer(max_message)
        handlers = _handlers(self.servicer)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        self.server.add_fast_unary(f"/{SERVICE}/Fast", self.servicer.fast)
        self.server.add_fast_unary(f"/{SERVICE}/FastRaw", self.servicer.fast, raw=True)
        self.server.add_fast_unary(f"/{SERVICE}/FastDecoded", self.servicer.fast)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(5)
        return self

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self.server.stop(0.5), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(f"127.0.0.1:{self.port}",
                                     options=[("grpc.max_receive_message_length", 64 << 20)])


@pytest.fixture(scope="module")
def ep():
    with Endpoint() as e:
        yield e


def _unary(ch, name):
    return ch.unary_unary(f"/{SERVICE}/{name}")


def test_unary_metadata_and_peer(ep):
    with ep.channel() as ch:
        reply, call = _unary(ch, "Echo").with_call(b"hi", metadata=[("x-suffix", "!")], timeout=5)
        assert reply == b"hi!"
        assert call.code() == grpc.StatusCode.OK
    assert ep.servicer.peers[-1].startswith("ipv4:127.0.0.1:")


def test_a_handler_started_at_once_waits_and_meets_its_futures_outcomes(ep):
    """A handler runs within the read that ended its request (no task until it waits); once it
    waits it goes on in a task, meeting each future's failure or result at its await."""
    with ep.channel() as ch:
        assert _unary(ch, "Waits")(b"w", timeout=5) == b"w failed ok"
        assert _unary(ch, "Echo")(b"at once", timeout=5) == b"at once"


def test_deadline_exceeded_and_handler_cancelled(ep):
    with ep.channel() as ch:
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as e:
            _unary(ch, "Sleep")(b"deadline", timeout=0.3)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - t0 < 5
    wait_for(lambda: "deadline" in ep.servicer.cancelled, 5, "the handler cancelled by its deadline")


def test_client_cancel_cancels_the_handler(ep):
    with ep.channel() as ch:
        fut = _unary(ch, "Sleep").future(b"cancel", timeout=20)
        wait_for(lambda: "cancel" in ep.servicer.started, 5, "the handler started")
        fut.cancel()  # RST_STREAM
        wait_for(lambda: "cancel" in ep.servicer.cancelled, 5, "the handler cancelled by RST_STREAM")
        assert _unary(ch, "Echo")(b"still", timeout=5) == b"still"  # the connection lives on


def test_a_fast_unary_answers_without_a_task_or_declines_to_the_handler(ep, caplog):
    with ep.channel() as ch:
        fast = _unary(ch, "Fast")
        assert fast(b"abc", timeout=5) == b"ABC"  # the fast answer
        assert fast(b"now:abc", timeout=5) == b"ABC"  # ... given as the response's bytes
        assert fast(b"decline", timeout=5) == b"task:decline"  # declined: the method's handler
        assert fast(b"raise", timeout=5) == b"task:raise"  # raised: the handler answers it as it would
        with pytest.raises(grpc.RpcError) as e:
            fast(b"bad-respond", timeout=5)
        assert e.value.code() == grpc.StatusCode.UNKNOWN and "ZeroDivisionError" in e.value.details()
        # an answer later than the call's deadline is dropped; the connection and its calls go on
        with pytest.raises(grpc.RpcError) as e:
            fast(b"hold:1", timeout=0.3)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        held = ep.servicer.held[b"hold:1"]
        ep.loop.call_soon_threadsafe(held.set_result, b"late")
        assert fast(b"after", timeout=5) == b"AFTER"
        # a call answered later than its request, but within its deadline
        f = fast.future(b"hold:2", timeout=10)
        wait_for(lambda: b"hold:2" in ep.servicer.held, 5, "the second call held")
        ep.loop.call_soon_threadsafe(ep.servicer.held[b"hold:2"].set_result, b"in time")
        assert f.result(5) == b"in time"


def test_a_call_answered_within_its_read_makes_no_call_object(ep, monkeypatch):
    """H2Connection._answer_now: a fast answer known within the read (the response's bytes, as the
    local front's SendMessage and AckMessage give) is written without a Call; one that is not
    (a future, a decline) goes on in a Call, which answers it as before."""
    made = []

    class Counted(calls.Call):
        __slots__ = ()

        def __init__(self, conn, sid, path, *rest):
            made.append(path)
            super().__init__(conn, sid, path, *rest)

    monkeypatch.setattr(connection, "Call", Counted)
    with ep.channel() as ch:
        fast = _unary(ch, "Fast")
        assert fast(b"now:abc", timeout=5) == b"ABC"
        assert fast(b"now:def") == b"DEF"  # no grpc-timeout either
        assert made == []
        assert fast(b"abc", timeout=5) == b"ABC"  # a future: the call goes on in a Call
        assert fast(b"decline", timeout=5) == b"task:decline"
        assert made == [f"/{SERVICE}/Fast"] * 2


def test_a_raw_fast_unary_is_given_the_request_bytes(ep):
    """add_fast_unary(raw=True): the fast answer reads the message's bytes itself (the front's
    SendMessage kernel); without it, what the method's deserializer makes of them."""
    with ep.channel() as ch:
        assert _unary(ch, "FastRaw")(b"abc", timeout=5) == b"ABC"
        assert _unary(ch, "FastDecoded")(b"abc", timeout=5) == b"DECODED-ABC"
        assert _unary(ch, "FastRaw")(b"decline", timeout=5) == b"task:decoded-decline"  # the handler's own path


def test_unknown_method_unimplemented(ep):
    with ep.channel() as ch:
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary(f"/{SERVICE}/Nope")(b"x", timeout=5)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "Nope" in e.value.details()


def test_handler_exception_unknown_and_abort(ep, caplog):
    with ep.channel() as ch:
        with caplog.at_level(logging.ERROR, logger="proxy"):
            with pytest.raises(grpc.RpcError) as e:
                _unary(ch, "Fail")(b"x", timeout=5)
        assert e.value.code() == grpc.StatusCode.UNKNOWN
        assert "boom %" in e.value.details()  # percent-encoded on the wire, decoded by the client
        assert any("failed" in r.getMessage() for r in caplog.records)
        with pytest.raises(grpc.RpcError) as e:
            _unary(ch, "Abort")(b"x", timeout=5)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert e.value.details() == "no: é"


def test_streams_and_big_messages(ep):
    with ep.channel() as ch:
        assert list(ch.unary_stream(f"/{SERVICE}/Count")(b"5", timeout=5)) == [b"0", b"1", b"2", b"3", b"4"]
        assert list(ch.stream_stream(f"/{SERVICE}/Chat")(iter([b"a", b"b", b"c"]), timeout=5)) == [b"A", b"B", b"C"]
        big = bytes(range(256)) * (4 << 12)  # 4 MiB: beyond the 64 KiB default windows, both ways
        assert _unary(ch, "Echo")(big, timeout=20) == big


def test_message_above_the_limit_resource_exhausted():
    with Endpoint(max_message=1 << 20) as small, small.channel() as ch:
        with pytest.raises(grpc.RpcError) as e:
            _unary(ch, "Echo")(b"x" * ((1 << 20) + 1), timeout=10)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _unary(ch, "Echo")(b"y" * (1 << 20), timeout=10) == b"y" * (1 << 20)
        wait_for(lambda: not any(c.calls for c in small.server.connections), 5, "the refused call released")


def test_deadline_of_a_request_never_ended(ep):
    """A request whose client never ends it: DEADLINE_EXCEEDED at its grpc-timeout, the call released."""
    s = _raw(ep.port)
    s.sendall(_preface() + _headers_frame(1, f"/{SERVICE}/Echo", end=False, extra=(("grpc-timeout", "200m"),)))
    first, block = _read_until_end(s, 1)
    assert first and (b"\x014" in block or b"\x81\x67" in block), block  # grpc-status 4, raw or Huffman
    wait_for(lambda: not any(c.calls for c in ep.server.connections), 5, "the expired call released")
    s.close()


def test_compressed_request_without_encoding_unimplemented(ep):
    """A compressed message flag with no grpc-encoding the server reads: UNIMPLEMENTED; gzip is read."""
    with ep.channel() as ch:
        reply = _unary(ch, "Echo").with_call(b"zipped" * 100, compression=grpc.Compression.Gzip, timeout=5)[0]
        assert reply == b"zipped" * 100
    s = _raw(ep.port)
    s.sendall(_preface() + _headers_frame(1, f"/{SERVICE}/Echo", end=False)
              + _data_frame(1, b"\x01" + struct.pack(">I", 3) + b"abc", end=True))
    first, block = _read_until_end(s, 1)
    assert first, "a trailers-only response"
    assert b"\x0212" in block or b"\x82\x04\x2f" in block, block  # "12" as an HPACK string, raw or Huffman
    s.close()


def test_many_streams_on_one_connection(ep):
    with ep.channel() as ch:
        echo = _unary(ch, "Echo")
        futures = [echo.future(str(i).encode(), timeout=20) for i in range(1500)]  # above 1000 concurrent
        assert [f.result() for f in futures] == [str(i).encode() for i in range(1500)]


def test_idle_streams_cost_no_task_of_ours(ep):
    """1,000 open, idle stream-stream calls: the handlers' own tasks and nothing more (no task or
    timer of the endpoint per stream), then each still answers and ends."""
    async def main():
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ep.port}") as ch:
            chat = ch.stream_stream(f"/{SERVICE}/Chat")
            calls = [chat() for _ in range(1000)]
            for c in calls:
                await c.write(b"hi")
            assert [await c.read() for c in calls] == [b"HI"] * 1000

            async def census():
                return len(asyncio.all_tasks()) - 1, len(asyncio.get_running_loop()._scheduled)
            tasks, timers = asyncio.run_coroutine_threadsafe(census(), ep.loop).result(5)
            assert tasks == 1000 and timers == 0, (tasks, timers)
            for c in calls:
                await c.done_writing()
            for c in calls:
                assert await c.read() == grpc.aio.EOF
                assert await c.code() == grpc.StatusCode.OK
    asyncio.run(main())


def test_stop_lets_calls_in_flight_finish():
    with Endpoint() as e, e.channel() as ch:
        fut = _unary(ch, "Slow").future(b"0.5", timeout=10)
        wait_for(lambda: any(c.calls for c in e.server.connections), 5, "the call in flight")
        asyncio.run_coroutine_threadsafe(e.server.stop(5), e.loop).result(10)  # GOAWAY, then the grace
        assert fut.result() == b"0.5"
        with pytest.raises(ConnectionRefusedError):
            _raw(e.port)


def test_a_closing_connection_waits_for_the_ack_of_its_ping_before_closing():
    """After its last frames the server PINGs and closes once the client ACKs (the client has
    then read every frame before it): a close at a fixed time let the client's next bytes meet a
    closed socket, whose reset dropped trailers the client had not read yet."""
    with Endpoint() as e:
        s = _raw(e.port)
        s.sendall(_preface())
        wait_for(lambda: e.server.connections, 5, "the connection")
        stopping = asyncio.run_coroutine_threadsafe(e.server.stop(5), e.loop)
        buf, ping = b"", None
        s.settimeout(5)
        while ping is None:
            chunk = s.recv(65536)
            assert chunk, "closed before the PING"
            buf += chunk
            while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                n = int.from_bytes(buf[:3], "big")
                if buf[3] == 6 and not buf[4] & 0x1:  # a PING, not an ACK
                    ping = buf[9:9 + n]
                buf = buf[9 + n:]
        s.settimeout(0.5)
        with pytest.raises(socket.timeout):  # no ACK yet: the connection stays open
            s.recv(65536)
        s.sendall(_frame(6, 0x1, 0, ping))
        s.settimeout(5)
        while s.recv(65536):  # closed once the ACK is read, well before LINGER_S
            pass
        stopping.result(10)
        s.close()


@pytest.mark.parametrize("garbage", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 64])
def test_garbage_closes_that_connection_alone(ep, caplog, garbage):
    with ep.channel() as ch:
        assert _unary(ch, "Echo")(b"before", timeout=5) == b"before"
        with caplog.at_level(logging.WARNING, logger="proxy"):
            s = _raw(ep.port)
            s.sendall(garbage)
            s.settimeout(5)
            while s.recv(65536):  # the server's SETTINGS, maybe a GOAWAY, then the close
                pass
            s.close()
            wait_for(lambda: any("closed" in r.getMessage() and "127.0.0.1" in r.getMessage()
                                 for r in caplog.records), 5, "the log line naming the peer")
        assert _unary(ch, "Echo")(b"after", timeout=5) == b"after"


# -- raw HTTP/2 for the inputs grpcio's client never sends ------------------------------------------
def _raw(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", sid) + payload


def _preface() -> bytes:
    return b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0, b"")


def _literal(name: str, value: str) -> bytes:  # HPACK literal without indexing, new name, no Huffman
    n, v = name.encode(), value.encode()
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def _headers_frame(sid: int, path: str, end: bool, extra=()) -> bytes:
    block = (b"\x83\x86" + _literal(":path", path) + _literal(":authority", "x")  # POST, http
             + _literal("content-type", "application/grpc") + _literal("te", "trailers")
             + b"".join(_literal(k, v) for k, v in extra))
    return _frame(1, 0x4 | (0x1 if end else 0), sid, block)


def _data_frame(sid: int, payload: bytes, end: bool) -> bytes:
    return _frame(0, 0x1 if end else 0, sid, payload)


def _read_until_end(s: socket.socket, sid: int) -> tuple[bool, bytes]:
    """(whether it was the stream's first HEADERS, its header block) of the HEADERS frame that ends `sid`."""
    buf, seen = b"", False
    s.settimeout(5)
    while True:
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            kind, flags, fsid = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            if kind == 1 and fsid == sid:
                if flags & 0x1:
                    return not seen, buf[9:9 + length]
                seen = True
            buf = buf[9 + length:]
        chunk = s.recv(65536)
        assert chunk, "connection closed before the stream ended"
        buf += chunk


# -- the kernel's reassembly against its twin -----------------------------------------------------------
messages = st.lists(st.tuples(st.integers(0, 1), st.binary(max_size=300)), max_size=8)


@settings(max_examples=300, deadline=None)
@given(messages, st.lists(st.integers(0, 2000), max_size=12), st.integers(0, 400))
def test_reader_kernel_equals_twin(msgs, cuts, limit):
    stream = b"".join(bytes([f]) + struct.pack(">I", len(p)) + p for f, p in msgs)
    pieces, at = [], 0
    for c in sorted(c % (len(stream) + 1) for c in cuts) + [len(stream)]:
        pieces.append(stream[at:c])
        at = c
    k, t = K.MessageReader(limit), T.MessageReader(limit)
    for piece in pieces:
        kr = _outcome(k.feed, piece)
        tr = _outcome(t.feed, piece)
        assert kr == tr
        if kr[0] == "raised":
            break
        assert k.buffered == t.buffered


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except ValueError as e:
        return ("raised", type(e).__name__)
