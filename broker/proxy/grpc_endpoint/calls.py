"""One gRPC call on a connection: its handler (a grpc.RpcMethodHandler) run in a task of its own,
unary or streaming either way, its deadline (grpc-timeout) and its cancellation (RST_STREAM).

A unary request is run when the client's side ends (its one message then known); a streaming
request starts its handler at once with a RequestStream the incoming messages feed. An idle stream
costs this object and its handler's own task: no task, timer or poll of ours waits on it."""
from __future__ import annotations

import asyncio
import collections
import logging
import sys
import zlib

from broker.proxy.grpc_endpoint.context import ServicerContext
from broker.proxy.grpc_endpoint.status import (
    CANCELLED, DEADLINE_EXCEEDED, INTERNAL, OK, RESOURCE_EXHAUSTED, UNIMPLEMENTED, UNKNOWN, AbortError,
    encode_message)

log = logging.getLogger("proxy")

_DECOMPRESS = {"gzip": lambda b: zlib.decompress(b, 31), "deflate": zlib.decompress}
_EAGER_TASKS = sys.version_info >= (3, 12)  # asyncio.Task(..., eager_start=True)


async def _resumed(coro, waited):
    """Drive a call's handler that Call.start ran up to its first wait (`waited`: what it yielded,
    the future it waits for, or None for a bare yield) on to its end, as the Task it would have
    run in: a future's outcome reaches it at its await when it resumes, and a cancellation of this
    task reaches it there too (through the future this task waits on, or thrown in when that
    future was done already)."""
    while True:
        cancelled = None
        try:
            if waited is None:
                await asyncio.sleep(0)
            else:
                waited._asyncio_future_blocking = False  # taken, as Task.__step takes a yielded future
                await waited
        except asyncio.CancelledError as e:
            if waited is None or not waited.cancelled():
                cancelled = e  # this task was cancelled, not (only) the future it waited for
        except BaseException:  # noqa: BLE001 - the future's failure: the handler meets it at its await
            pass
        try:
            waited = coro.send(None) if cancelled is None else coro.throw(cancelled)
        except StopIteration:
            return


class Framed(bytes):
    """What a streaming handler may yield instead of a response: response messages it serialized
    and length-prefixed itself (gRPC's flag byte and 4-byte length, then the message; any number
    back to back), written into the stream as they are. Plain `bytes` are taken the same way from a
    method whose responses are serialized (a protobuf response is never bytes; a method without a
    serializer answers its messages as bytes) and as a fast stream's answer: a kernel's answer
    (receive_reply.encode_popped) is then written as the object it made, not copied into a Framed."""
    __slots__ = ()


class CallError(Exception):
    """The request itself is wrong (a compressed message we cannot read, no request message)."""

    def __init__(self, code: int, details: str):
        super().__init__(details)
        self.code = code


class RequestStream:
    """The request iterator of a streaming request: incoming messages, deserialized when read."""
    __slots__ = ("_queue", "_waiter", "_ended", "_deserialize", "_loop")

    def __init__(self, deserialize, loop):
        self._queue = collections.deque()
        self._waiter = None
        self._ended = False
        self._deserialize = deserialize
        self._loop = loop

    def __aiter__(self):
        return self

    async def __anext__(self):
        while not self._queue:
            if self._ended:
                raise StopAsyncIteration
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        payload = self._queue.popleft()
        return self._deserialize(payload) if self._deserialize is not None else payload

    async def read(self):
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            return None  # grpc.aio's EOF is a sentinel; nothing here reads that way

    def put(self, payload: bytes) -> None:
        self._queue.append(payload)
        self._wake()

    def end(self) -> None:
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)


class Call:
    __slots__ = ("conn", "sid", "handler", "context", "deadline", "timer", "task", "payload", "count",
                 "requests", "encoding", "expired", "finished", "path", "fast", "fast_raw", "respond", "started")

    def __init__(self, conn, sid: int, path: str, handler, context: ServicerContext, encoding: str | None,
                 fast=None, fast_raw: bool = False):
        self.conn = conn
        self.sid = sid
        self.path = path
        self.handler = handler
        self.encoding = encoding
        self.payload = None
        self.count = 0
        self.requests = None
        self.task = None
        self.started = False  # run() began (at once in start(), or in its task)
        self.expired = False
        self.finished = False
        self.fast = fast  # the method's fast answer (GrpcServer.add_fast_unary)
        self.fast_raw = fast_raw  # ... which reads the request's bytes itself
        # the fast answer's function of its future giving the response (unary), or the responses
        # it left to come (server streaming: _fast_stream)
        self.respond = None
        # the deadline's timer is armed (arm) only for a call that outlives the read it came in:
        # one answered within its read (the fast answers, a handler that does not wait) is over
        # before the loop could run any timer, so a timer set and cancelled per call (~3 us) would
        # change nothing
        self.timer = None
        self.deadline = context._deadline  # loop time, or None
        self.context = context
        if handler.request_streaming:
            self.requests = RequestStream(handler.request_deserializer, conn.loop)
            self.task = conn.loop.create_task(self.run())
            self.arm()

    def arm(self) -> None:
        """The deadline's timer, for a call not finished yet (H2Connection: when the read that
        opened the call is dispatched, or at once for a call whose message comes later)."""
        if self.deadline is not None and self.timer is None and not self.finished:
            self.timer = self.conn.loop.call_at(self.deadline, self.expire)

    # -- what the connection tells the call ---------------------------------------------------------
    def on_message(self, flag: int, payload: bytes) -> None:
        if flag:
            payload = self._decompressed(flag, payload)
            if payload is None:
                return
        if self.requests is not None:
            self.requests.put(payload)
        else:
            self.payload = payload
            self.count += 1

    def on_end(self) -> None:
        if self.requests is not None:
            self.requests.end()
        elif self.task is None and not self.started and not self.finished:
            if self.fast is None or not self.run_now():
                self.start()

    def start(self) -> None:
        """Run the handler now, up to its first wait: a call answered without waiting (the local
        front's pop found messages, an ack) costs no task and no turn of the loop; one that
        waits goes on in a task (_resumed), which deadline and reset cancel as before."""
        if _EAGER_TASKS:
            task = asyncio.Task(self.run(), loop=self.conn.loop, eager_start=True)
            if not task.done():
                self.task = task
            return
        coro = self.run()
        try:
            waited = coro.send(None)
        except StopIteration:
            return
        self.task = self.conn.loop.create_task(_resumed(coro, waited))

    def run_now(self) -> bool:
        """The method's fast answer (a unary call with its one message): False when it declines,
        and run() answers the call. Its response may come as bytes, already serialized. The answer
        is written when the fast answer's future is done, unless the call ended first (deadline,
        reset): then it is dropped, as a cancelled handler's would be."""
        if self.count != 1:
            return False
        h = self.handler
        try:
            request = (self.payload if self.fast_raw or h.request_deserializer is None
                       else h.request_deserializer(self.payload))
            taken = self.fast(request, self.context)
        except Exception:  # noqa: BLE001 - run() meets it again and answers it as the method does
            return False
        if taken is None:
            return False
        return self.take(taken)

    def take(self, taken) -> bool:
        """What the fast answer gave (not None): written now, or when its future is done, or the
        responses it left to come run in a task (H2Connection._answer_now hands a call over here
        when its answer is not known within the read)."""
        if self.handler.response_streaming:
            return self._fast_stream(taken)
        if type(taken) is bytes:  # the response itself, serialized: written with this read's flush
            self.respond = _as_given
            self._fast_done(taken)
            return True
        self.respond = taken[1]
        fut = taken[0]
        if fut.done():  # answered already: written with this read's flush, not a turn of the loop later
            self._fast_done(fut)
        else:
            fut.add_done_callback(self._fast_done)
        return True

    def _fast_stream(self, taken) -> bool:
        """A server-streaming method's fast answer (GrpcServer.add_fast_stream): its whole answer
        already framed (Framed), written now with the OK trailers; or an async iterator of the
        responses still to come (its handler's work went as far as it could without waiting),
        which run() writes in a task as the handler's own, deadline and reset cancelling it."""
        if type(taken) is Framed or type(taken) is bytes:
            self.finished = True
            self._stop_timer()
            self.context.done_ = True
            conn = self.conn
            conn.session.send_framed(self.sid, taken)
            conn.session.finish(self.sid, OK, None)  # call_done below flushes them
            conn.call_done(self)
            return True
        self.respond = taken
        self.start()
        return True

    def _fast_done(self, fut) -> None:
        """The fast answer's future is done: its response written (a bound method, not a closure
        over four cells made for every call)."""
        if self.finished:
            return
        self.finished = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.context.done_ = True
        conn = self.conn
        try:
            response = self.respond(fut)  # bytes: already serialized
            if type(response) is not bytes and self.handler.response_serializer is not None:
                response = self.handler.response_serializer(response)
            conn.session.unary(self.sid, response)  # call_done below flushes it
        except Exception as e:  # noqa: BLE001 - the call ends UNKNOWN, logged; the connection lives
            log.exception("gRPC call %s from %s failed", self.path, conn.peer)
            conn.finish(self.sid, UNKNOWN, encode_message(f"Unexpected {type(e)}: {e}"))
        conn.call_done(self)

    def on_closed(self) -> None:
        """The client reset the stream (or the connection went): the handler is cancelled."""
        self.context.cancelled_ = True
        self.finished = True
        self._stop_timer()
        if self.task is not None:
            self.task.cancel()

    def expire(self) -> None:
        """The deadline passed: DEADLINE_EXCEEDED now, the handler cancelled."""
        self.timer = None
        if self.finished:
            return
        self.expired = True
        self.context.cancelled_ = True
        self.fail(DEADLINE_EXCEEDED, "Deadline Exceeded")
        if self.task is not None:
            self.task.cancel()

    def fail(self, code: int, details: str) -> None:
        """End the call with `code` (trailers, or trailers-only before any response)."""
        if self.finished:
            return
        self.finished = True
        self._stop_timer()
        self.conn.finish(self.sid, code, encode_message(details))
        if self.task is None:
            if not self.started:  # refused before its handler ran: nothing else will release it
                self.conn.call_done(self)
            # (else run() is running in start(), before any task: its end releases the call)
        elif self.task is not asyncio.current_task():
            self.task.cancel()

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _decompressed(self, flag: int, payload: bytes):
        decompress = _DECOMPRESS.get(self.encoding) if flag == 1 else None
        if decompress is None:
            self.fail(UNIMPLEMENTED if flag == 1 else INTERNAL,
                      f"a compressed message with grpc-encoding {self.encoding!r}, which this server does not read"
                      if flag == 1 else f"a message with compressed flag {flag}")
            return None
        try:
            return decompress(payload)
        except zlib.error as e:
            self.fail(INTERNAL, f"a {self.encoding} message that does not decompress: {e}")
            return None

    # -- the handler ----------------------------------------------------------------------------------
    async def run(self) -> None:
        self.started = True
        h = self.handler
        ctx = self.context
        conn = self.conn
        try:
            if self.respond is not None and h.response_streaming:  # what a fast answer left to come
                arg = None
            elif self.requests is not None:
                arg = self.requests
            else:
                if self.count != 1:
                    raise CallError(INTERNAL if self.count == 0 else UNIMPLEMENTED,
                                    "no request message" if self.count == 0 else
                                    f"{self.count} request messages to a unary method")
                arg = self.payload
                if h.request_deserializer is not None:
                    try:
                        arg = h.request_deserializer(arg)
                    except Exception:  # noqa: BLE001 - a request that does not parse: INTERNAL, as grpcio
                        raise CallError(INTERNAL, "Exception deserializing request!") from None
            serialize = h.response_serializer
            if h.response_streaming:
                responses = self.respond
                if responses is None:
                    behavior = h.unary_stream if h.unary_stream is not None else h.stream_stream
                    responses = behavior(arg, ctx)
                async for response in responses:
                    if self.finished:
                        break
                    if type(response) is Framed or (type(response) is bytes and serialize is not None):
                        # messages the handler encoded and framed itself
                        conn.send_framed(self.sid, response)
                    else:
                        conn.send_message(self.sid, serialize(response) if serialize is not None else response)
                if not self.finished:
                    self.finished = True
                    code = ctx.code_ or OK
                    conn.finish(self.sid, code, encode_message(ctx.details_) if code else None)
            else:
                behavior = h.unary_unary if h.unary_unary is not None else h.stream_unary
                response = behavior(arg, ctx)
                if asyncio.iscoroutine(response):
                    response = await response
                if not self.finished:
                    self.finished = True
                    if ctx.code_:
                        conn.finish(self.sid, ctx.code_, encode_message(ctx.details_))
                    else:
                        conn.unary(self.sid, response if serialize is None or type(response) is bytes
                                   else serialize(response))  # bytes: the handler serialized it
        except asyncio.CancelledError:
            if not self.finished:  # the front stopping: the client learns the call was cancelled
                self.fail(CANCELLED, "Cancelled")
        except AbortError:
            self.fail(ctx.code_ or UNKNOWN, ctx.details_ or "")
        except CallError as e:
            self.fail(e.code, str(e))
        except Exception as e:  # noqa: BLE001 - the call ends UNKNOWN, logged; the connection lives
            if ctx.code_:  # the servicer's default (UNIMPLEMENTED, then NotImplementedError)
                self.fail(ctx.code_, ctx.details_ or str(e))
            else:
                log.exception("gRPC call %s from %s failed", self.path, conn.peer)
                self.fail(UNKNOWN, f"Unexpected {type(e)}: {e}")
        finally:
            self._stop_timer()
            ctx.done_ = True
            conn.call_done(self)


def too_large(call: Call, length: int, limit: int) -> None:
    call.fail(RESOURCE_EXHAUSTED, f"Received message larger than max ({length} vs. {limit})")


def _as_given(answer: bytes) -> bytes:
    """The respond of a fast answer given as its response's bytes (run_now)."""
    return answer
