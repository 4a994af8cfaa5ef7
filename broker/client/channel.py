"""A client's connection to one broker or name server (RocketMQ's NettyRemotingClient channel),
built for pipelining: many requests in flight, no task and no timer per request.

Requests are rendered into one WriteBuffer (`out`) and leave together at the end of the event
loop turn: 64 sends in flight cost one write, not 64. The hot requests (send, batch, pull) are
rendered by the client kernel (broker.kernels.client_codec) with an opaque from `fast_request`;
everything else is a RemotingCommand (`request`, `oneway`).

Each socket read goes through the kernel's ReplyReader once: every response it can read whole
becomes a Reply, and the futures waiting on those opaques are resolved in one loop per read. A
fast request's future gets the Reply itself; a RemotingCommand request's gets the command decoded
from the same frame while the read is handled (nothing of its header is lost). Frames the kernel
hands back (requests the broker sends us, a header of another shape) are decoded as
RemotingCommands, in frame order: a response resolves its waiter (a fast waiter then gets the
RemotingCommand), a request goes to the handler.

Sends the producer makes on its fast path (`sends.submit`) are kept in C instead (SendSlots, the
reader's `sends`): the reader completes their futures with SendResults as it meets their answers,
with no Reply handed to Python; what is not a plain success comes back to the producer's
`_send_answer`. SendSlots also hands out every opaque of the connection (`_next_opaque`).

Timeouts: requests with one timeout value expire in the order they were made, so each value
keeps a FIFO of (deadline, opaque) and one timer is armed at the earliest deadline of all; the
heads of the FIFOs that were answered are dropped as replies come in, so a FIFO holds about the
requests in flight; the kept sends have one timer of their own, armed at the earliest deadline
among them (SendSlots.armed), which scans the ring when it fires. A frame that cannot be valid closes the connection with one log line naming
the peer, as broker.remoting.connection does; every waiter then fails with ConnectionClosed.
"""
from __future__ import annotations

import asyncio
import collections
import logging
from typing import Awaitable, Callable

from broker.kernels.client_codec import READ_DONE, Reply, ReplyReader, SendSlots
from broker.kernels.header import HeaderError
from broker.kernels.remoting import FrameError, reallocate
from broker.kernels.wbuf import WriteBuffer
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import ConnectionClosed
from broker.remoting.request_handling import RequestHandling

log = logging.getLogger("client.channel")

INITIAL_BUFFER = 1 << 20
MIN_READ = 256 << 10  # a pull answer is up to 256 KiB: read it in one go when it is there
MAX_FRAME = 16 * 1024 * 1024

# handler(command, channel) -> response | awaitable of a response | None, for requests the broker sends
Handler = Callable[[RemotingCommand, "ClientChannel"], "RemotingCommand | Awaitable | None"]


class ClientChannel(RequestHandling, asyncio.BufferedProtocol):
    _log = logging.getLogger("client.channel")
    _side = "client"
    # Seconds a request waits, while others are in flight on the channel, for the requests of the
    # next turns to leave in the same write; 0 (the default): written at the end of its loop turn.
    # The gRPC front may set it (ProxyConfig.remotingCoalesceMicros): each 5.x send reaches it as
    # a gRPC call of its own, handled in a loop turn of its own, so under load every request is a
    # write of its own, and a read and a reply of its own at the broker. A request with no other
    # in flight (a sequential caller) is never held; a long-polling pop in flight counts as one.
    coalesce_delay = 0.0

    def __init__(self, handler: Handler | None = None, max_frame: int = MAX_FRAME):
        self.handler = handler
        self.reader = ReplyReader(max_frame)
        self.sends = self.reader.sends = SendSlots(self)  # the opaques, and the sends completed in C
        self.out = WriteBuffer()  # requests rendered this loop turn
        self.signer = None  # an AclClientRPCHook: requests signed as they leave (broker.client.acl_hook)
        self.buf = bytearray(INITIAL_BUFFER)
        self.view = memoryview(self.buf)
        self.start = 0  # first unread byte
        self.end = 0  # end of received bytes
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.waiters: dict[int, asyncio.Future] = {}  # opaque -> the future its answer resolves
        self.commands: set[int] = set()  # opaques whose waiter wants a RemotingCommand (request())
        self.closed = asyncio.Event()
        self.tasks: set[asyncio.Task] = set()  # handlers of broker requests that returned awaitables
        self._flush_soon = False
        self._fifos: dict[float, collections.deque] = {}  # timeout -> deque of (deadline, opaque)
        self._timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None  # armed at sends.armed
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- asyncio protocol ------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self._loop = asyncio.get_running_loop()
        self.sends.bind(self._loop)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = f"{peer[0]}:{peer[1]}"
        elif peer:
            self.peer = str(peer)

    def get_buffer(self, sizehint: int) -> memoryview:
        if len(self.buf) - self.end < MIN_READ:
            self._make_room(max(sizehint, MIN_READ))
        return self.view[self.end:]

    def _make_room(self, want: int) -> None:
        """Room for `want` more bytes: the unread tail moved to the front (reallocateByteBuffer),
        or to a bigger buffer when a frame needs more."""
        pending = self.end - self.start
        if self.start > 0 and len(self.buf) - pending >= want:
            self.end = reallocate(self.buf, self.start, self.end)
            self.start = 0
            return
        size = max(len(self.buf), INITIAL_BUFFER)  # a closed channel's buffer is empty
        while size < pending + want:
            size *= 2
        new = bytearray(size)
        new[:pending] = self.view[self.start:self.end]
        self.buf, self.view = new, memoryview(new)
        self.start, self.end = 0, pending

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        reader = self.reader
        pos = self.start
        while True:
            try:
                status, pos = reader.read(self.buf, pos, self.end)
            except (FrameError, HeaderError) as e:
                self._resolve(reader.take())  # what was read before the bad frame is good
                self.abort(f"{e.reason} (at byte {e.offset - self.start} of this read)"
                           if isinstance(e, FrameError) else f"{e.reason} (at byte {e.offset} of a header)")
                return
            replies = reader.take()
            if replies:
                self._resolve(replies)
            if status == READ_DONE:
                break
            self._slow_frame(reader.slow_type, reader.slow_header_start, reader.slow_header_len,
                             reader.slow_body_start, reader.slow_body_len)
            if self.transport is None:
                return
            pos = reader.slow_next
        self.start = pos
        if self.start == self.end:
            self.start = self.end = 0

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc) -> None:
        if self.end > self.start:
            log.warning("connection to %s closed with %d bytes of an incomplete frame unread (%s)", self.peer,
                        self.end - self.start, exc or "end of stream")
            self.start = self.end = 0
        self.transport = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        sends = self.sends.take_all()
        waiters, self.waiters = self.waiters, {}
        self.commands.clear()
        self._fifos.clear()
        for fut in waiters.values():
            if not fut.done():
                fut.set_exception(ConnectionClosed(f"connection to {self.peer} closed"))
        for fut, msg, mq, uniq, owner, deadline, timeout in sends:
            owner._send_answer(fut, ConnectionClosed(f"connection to {self.peer} closed"), msg, mq, uniq, self,
                               deadline, timeout)
        for t in list(self.tasks):
            t.cancel()
        # A lost connection is replaced by a new channel, never reopened: its buffers (1 MiB to
        # read, what the sends had rendered, the SendSlots' 256 KiB ring) go now. The channel
        # itself lives on until the next request to its address replaces it in
        # MQClientInstance.conns, and its old SendSlots, which refers back to it, would have kept
        # both until the collector found them: a gRPC front, which allocates little, kept 1.3 MiB
        # per broker restart that way (docs/soak.md).
        self.buf = bytearray()
        self.view = memoryview(self.buf)
        self.start = self.end = 0
        self.out = WriteBuffer()
        self.sends = self.reader.sends = SendSlots(self)  # empty: its ring is made at a first send
        self.closed.set()

    # -- answers ---------------------------------------------------------------------------------
    def _resolve(self, replies: list[Reply]) -> None:
        """One loop per read: each Reply to the future waiting on its opaque."""
        waiters, commands = self.waiters, self.commands
        for r in replies:
            fut = waiters.pop(r.opaque, None)
            if fut is None:
                continue  # an answer nobody waits for (it timed out): dropped, as the Java clients do
            if commands and r.opaque in commands:
                commands.discard(r.opaque)
                try:
                    res = RemotingCommand.decode(self.view[r.header_start:r.header_start + r.header_len], r.body,
                                                 r.serialize_type)
                except FrameError as e:  # the kernel read this header: only Python's own limits differ
                    fut.set_exception(e)
                    continue
            else:
                res = r
            if not fut.done():  # its waiter may have been cancelled
                fut.set_result(res)
        self._trim()

    def _slow_frame(self, stype: int, hs: int, hl: int, bs: int, bl: int) -> None:
        try:
            cmd = RemotingCommand.decode(self.view[hs:hs + hl], self.view[bs:bs + bl], stype)
        except FrameError as e:
            self.abort(f"{e.reason} (at byte {e.offset} of a header)")
            return
        if cmd.is_response:
            fut = self.waiters.pop(cmd.opaque, None)
            self.commands.discard(cmd.opaque)
            if fut is not None and not fut.done():
                cmd.body = bytes(cmd.body)  # the caller reads it after the buffer is reused
                fut.set_result(cmd)
            elif fut is None:
                sent = self.sends.take(cmd.opaque)
                if sent is not None:  # a send kept in C, answered by a frame only Python reads
                    fut, msg, mq, uniq, owner, deadline, timeout = sent
                    cmd.body = bytes(cmd.body)
                    owner._send_answer(fut, cmd, msg, mq, uniq, self, deadline, timeout)
            return
        self._handle_request(cmd)

    # -- timeouts --------------------------------------------------------------------------------
    def _watch(self, opaque: int, timeout: float) -> None:
        deadline = self._loop.time() + timeout
        fifo = self._fifos.get(timeout)
        if fifo is None:
            fifo = self._fifos[timeout] = collections.deque()
        fifo.append((deadline, opaque))
        timer = self._timer
        if timer is None or deadline < timer.when():
            if timer is not None:
                timer.cancel()
            self._timer = self._loop.call_at(deadline, self._expire)

    def _trim(self) -> None:
        """Drop the answered requests at the heads of the FIFOs (and FIFOs left empty)."""
        waiters = self.waiters
        empty = None
        for timeout, fifo in self._fifos.items():
            while fifo and fifo[0][1] not in waiters:
                fifo.popleft()
            if not fifo:
                empty = [timeout] if empty is None else empty + [timeout]
        if empty:
            for timeout in empty:
                del self._fifos[timeout]

    def _expire(self) -> None:
        self._timer = None
        now = self._loop.time()
        waiters = self.waiters
        nxt = None
        for timeout, fifo in list(self._fifos.items()):
            while fifo and (fifo[0][0] <= now or fifo[0][1] not in waiters):
                _, opaque = fifo.popleft()
                fut = waiters.pop(opaque, None)
                self.commands.discard(opaque)
                if fut is not None and not fut.done():
                    fut.set_exception(asyncio.TimeoutError(f"no answer from {self.peer} within {timeout:g} s"))
            if not fifo:
                del self._fifos[timeout]
            elif nxt is None or fifo[0][0] < nxt:
                nxt = fifo[0][0]
        if nxt is not None:
            self._timer = self._loop.call_at(nxt, self._expire)

    def _arm_sends(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
        self._send_timer = self._loop.call_at(self.sends.armed, self._expire_sends)

    def _expire_sends(self) -> None:
        self._send_timer = None
        expired = self.sends.expire(self._loop.time())
        if self.sends.in_flight:
            self._arm_sends()
        for fut, msg, mq, uniq, owner, deadline, timeout in expired:
            owner._send_answer(fut, asyncio.TimeoutError(f"no answer from {self.peer} within {timeout:g} s"), msg, mq,
                               uniq, self, deadline, timeout)

    # -- requests --------------------------------------------------------------------------------
    def _next_opaque(self) -> int:
        return self.sends.next_opaque()

    def _kick(self) -> None:
        if not self._flush_soon:
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        self._flush_soon = True
        if self.coalesce_delay and len(self.waiters) + self.sends.in_flight > 1:  # others in flight: a sequential caller is not held
            self._loop.call_later(self.coalesce_delay, self._flush)
        else:
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_soon = False
        if len(self.out) and self.transport is not None:
            data = self.out.getvalue()
            self.out.reset()
            if self.signer is None:
                self.transport.write(data)
            else:
                self.transport.writelines(self.signer.sign_frames(data))

    def fast_request(self, timeout: float) -> tuple[int, asyncio.Future]:
        """An opaque and the future its answer resolves (a Reply, or a RemotingCommand for a frame
        the kernel hands back); the caller renders its request with that opaque into `out` at
        once. The request leaves at the end of this loop turn; the future fails with
        asyncio.TimeoutError after `timeout` seconds and with ConnectionClosed if the connection
        goes first. Forget the opaque (forget()) if the render fails."""
        if self.transport is None:
            raise ConnectionClosed(f"connection to {self.peer} is closed")
        opaque = self._next_opaque()
        fut = self._loop.create_future()
        self.waiters[opaque] = fut
        self._watch(opaque, timeout)
        if not self._flush_soon:
            self._schedule_flush()
        return opaque, fut

    def fast_oneway(self) -> int:
        """An opaque for a oneway request the caller renders into `out` at once."""
        if self.transport is None:
            raise ConnectionClosed(f"connection to {self.peer} is closed")
        self._kick()
        return self._next_opaque()

    def forget(self, opaque: int) -> None:
        self.waiters.pop(opaque, None)
        self.commands.discard(opaque)

    def send(self, cmd: RemotingCommand) -> None:
        """A command (a oneway request, or our answer to a broker's request) with this turn's requests."""
        out = self.out
        for part in cmd.encode_parts():
            out.extend(part)
        if self.transport is not None:
            self._kick()

    async def request(self, cmd: RemotingCommand, timeout: float = 30.0) -> RemotingCommand:
        """Send `cmd` (its opaque is made here, unique on this channel) and wait for its answer."""
        if self.transport is None:
            raise ConnectionClosed(f"connection to {self.peer} is closed")
        opaque = cmd.opaque = self._next_opaque()
        fut = self._loop.create_future()
        self.waiters[opaque] = fut
        self.commands.add(opaque)
        self._watch(opaque, timeout)
        self.send(cmd)
        try:
            return await fut
        finally:
            self.forget(opaque)

    def oneway(self, cmd: RemotingCommand) -> None:
        if self.transport is None:
            raise ConnectionClosed(f"connection to {self.peer} is closed")
        cmd.opaque = self._next_opaque()
        self.send(cmd)

    def abort(self, reason: str) -> None:
        log.warning("closing connection to %s: %s", self.peer, reason)
        self.start = self.end = 0  # what is left unread is not "an incomplete frame" (connection_lost)
        if self.transport is not None:
            self.transport.abort()
            self.transport = None

    def close(self) -> None:
        if self.transport is not None:
            self._flush()  # requests and oneways rendered this turn go first
            self.transport.close()


async def open_channel(host: str, port: int, handler: Handler | None = None, signer=None,
                       ssl_context=None) -> ClientChannel:
    loop = asyncio.get_running_loop()
    _, channel = await loop.create_connection(lambda: ClientChannel(handler), host, port, ssl=ssl_context)
    channel.signer = signer
    return channel


def open_channel_in_process(dial, peer: str, handler: Handler | None = None, signer=None) -> ClientChannel:
    """A channel connected by `dial(channel)` inside this process, with no socket (a broker's own
    front reaching it: RemotingServer.connect_local); `peer` names the other side in errors and logs."""
    channel = ClientChannel(handler)
    channel.peer = peer
    channel.signer = signer
    dial(channel)
    return channel
