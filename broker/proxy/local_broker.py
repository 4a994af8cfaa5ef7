"""The local front's own broker reached by a call, not a connection: the consumer RPCs' pop and
batch ack (ConsumerActivity) hand their RemotingCommand to the broker's request handler
(BrokerController.handle: its role guard, pop's replay wait, refusals mapped to codes, latency
metrics) in the same event loop and read the answer it returns, as the in-process connection
(broker.remoting.memory_transport) would deliver it, without encoding and decoding both commands
and copying the popped records through the connection's buffers (a quarter of a receive's cost
at 32 messages).

What the two ends see is what the wire gives them: header values as the strings a command's
header carries (RemotingCommand.header_bytes' conversion), the records as one bytes body, a
handler's exception as SYSTEM_ERROR "internal error; see the broker log" (request_handling).
Only a broker without ACL is reached so: with aclEnable the front's requests are signed and
checked, which the connection does.

An AckMessage's batch ack goes further (`batch_ack`): its acks are handed to the broker's
AckMessageProcessor as values, with no command, JSON or base64, whenever the broker would serve
BATCH_ACK_MESSAGE at once; otherwise the command goes through `invoke` as above. A ReceiveMessage's
pop likewise (`pop`): the request's fields handed to the PopMessageProcessor as values, its answer
read as values (the records, popTime, reviveQid, the start offsets), whenever the broker would serve
POP_MESSAGE at once."""
from __future__ import annotations

import asyncio
import logging
import time

from broker.client.errors import BrokerUnreachable
from broker.remoting.codes import BATCH_ACK_MESSAGE, POLLING_TIMEOUT, POP_MESSAGE, SUCCESS, SYSTEM_ERROR
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import ext_string
from broker.remoting.refusals import response_code

log = logging.getLogger("proxy")
Popped = None  # broker.server.processor.pop_message_processor.Popped, imported with the first pop target


def _wire_ext(ext: dict | None) -> dict:
    return {k: v if type(v) is str else ext_string(v) for k, v in ext.items()} if ext else {}


class _Caller:
    """The `conn` a handler is given (its peer: ACL's address, logs), as an accepted connection's."""
    __slots__ = ("peer",)

    def __init__(self, peer: str):
        self.peer = peer


class LocalBroker:
    """`invoke(addr, cmd, timeout)` as MQClientInstance.invoke, for the broker at `addr` (this one)."""

    def __init__(self, addr: str, handler, peer: str):
        self.addr = addr
        self._handler = handler
        self._caller = _Caller(peer)
        self._ack_target = None  # (controller, pop service, ack processor) for batch_ack, False: none
        self._pop_target = None  # (controller, pop service, pop processor) for pop, False: none
        self._send_target = None  # (controller, the sends' connection state) for send, False: none

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        request = RemotingCommand(cmd.code, _wire_ext(cmd.ext), cmd.body, opaque=cmd.opaque, flag=cmd.flag)
        try:
            res = self._handler(request, self._caller)
            if res is not None and not isinstance(res, RemotingCommand):
                try:
                    res = await asyncio.wait_for(res, timeout)
                except asyncio.TimeoutError:
                    raise BrokerUnreachable(addr, f"no answer to request code {cmd.code} within {timeout:g} s") \
                        from None
        except (asyncio.CancelledError, BrokerUnreachable):
            raise
        except Exception:  # noqa: BLE001 - as the connection answers a handler's failure
            log.exception("handler failed for %r from %s", request, self._caller.peer)
            res = request.response(SYSTEM_ERROR, remark="internal error; see the broker log")
        if res is None:
            raise BrokerUnreachable(addr, f"no answer to request code {cmd.code}")
        body = res.body
        if isinstance(body, list):  # the records as views of the log: one body, as the client reads it
            body = b"".join(body)
        elif isinstance(body, memoryview):
            body = bytes(body)
        return RemotingCommand(res.code, _wire_ext(res.ext), body, res.remark, opaque=res.opaque, flag=res.flag)

    # -- BATCH_ACK_MESSAGE as values (the AckMessage call's batch ack) -------------------------------
    def batch_ack(self, acks):
        """The batch ack of `acks` (AckMessageProcessor.batch_ack_code's values: group, real topic,
        queue id, checkpoint offset, revive queue, pop time, the offsets) handed to the broker's
        AckMessageProcessor without a RemotingCommand, its JSON or base64: its response code, or a
        future of it while the revive records wait to be durable (reply_when_durable). The wire's
        guards are kept: it is taken only while BrokerController.handle would hand the command
        straight to the pop service's processor (no role switch, no ACL, the code served) and the
        pop service would serve it at once (the master, its revive log replayed); else None, and
        the caller invokes the command, whose answer says why (SLAVE_NOT_AVAILABLE, the replay's
        wait, SYSTEM_BUSY). Timed into rocketmq_rpc_latency as BATCH_ACK_MESSAGE; a refusal raised
        is its code, as BrokerController.handle maps it; a failure SYSTEM_ERROR, logged."""
        target = self._ack_target
        if target is None:
            target = self._ack_target = _ack_target(self._handler)
        if target is False:
            return None
        controller, pop, processor = target
        # (_serves(controller, pop, BATCH_ACK_MESSAGE) inline: a frame a call)
        if (controller._switching or controller.acl is not None or BATCH_ACK_MESSAGE not in controller.handlers
                or not pop._serving or pop.store.is_slave or not pop.ready.is_set()):
            return None
        latency = controller.rpc_latency
        t0 = time.perf_counter_ns()
        try:
            code = processor.batch_ack_code(acks)
        except Exception as e:  # noqa: BLE001 - as BrokerController.handle and the connection answer it
            code = response_code(e)
            if code is None:
                log.exception("batch ack (local front) failed for %s from %s", acks[:4], self._caller.peer)
                return SYSTEM_ERROR
            log.debug("batch ack (local front) refused: %s", e)
        if type(code) is int:
            latency.record(BATCH_ACK_MESSAGE, code, time.perf_counter_ns() - t0)
            return code
        code.add_done_callback(lambda f: _ack_timed(latency, f, t0))
        return code

    # -- POP_MESSAGE as values (the ReceiveMessage call's pop) ------------------------------------------
    def pop(self, group: str, topic: str, queue_id: int, max_nums: int, invisible_ms: int, poll_ms: int,
            exp: str, exp_type: str, init_mode: int, order: bool, attempt_id: str, timeout: float):
        """POP_MESSAGE's fields handed to the broker's PopMessageProcessor.pop_values without a
        RemotingCommand or header strings: None when the broker would not serve it at once (the
        caller then invokes the command, whose answer says why: SLAVE_NOT_AVAILABLE, the replay's
        wait, SYSTEM_BUSY while switching), else an awaitable of (response code, remark, Popped or
        None): the Popped's values are the answer's (records as views of the log, popTime,
        reviveQid, restNum, the start offsets). The wire's guards are batch_ack's; long polling and
        the wait for the revive records' durability are the processor's, as for the command, within
        `timeout` (then BrokerUnreachable, as invoke). Timed into rocketmq_rpc_latency as
        POP_MESSAGE (a held one as held); a refusal raised is its code and remark, as
        BrokerController.handle answers it; a failure SYSTEM_ERROR, logged, as the connection answers it."""
        answer = self.pop_now(group, topic, queue_id, max_nums, invisible_ms, poll_ms, exp, exp_type, init_mode,
                              order, attempt_id, timeout)
        return _answered(answer) if type(answer) is tuple else answer

    def pop_now(self, group: str, topic: str, queue_id: int, max_nums: int, invisible_ms: int, poll_ms: int,
                exp: str, exp_type: str, init_mode: int, order: bool, attempt_id: str, timeout: float):
        """`pop` without an awaitable when the broker answers at once (the receive's fast answer):
        None as pop's, (code, remark, Popped or None) when answered now, else pop's awaitable of it
        (the revive records' durability, long polling)."""
        target = self._pop_target
        if target is None:
            target = self._pop_target = _pop_target(self._handler)
        if target is False:
            return None
        controller, pop, processor = target
        # (_serves(controller, pop, POP_MESSAGE), inline: a frame fewer a receive)
        if controller._switching or controller.acl is not None or POP_MESSAGE not in controller.handlers \
                or not pop._serving or pop.store.is_slave or not pop.ready.is_set():
            return None
        t0 = time.perf_counter_ns()
        try:
            res = processor.pop_values(group, topic, queue_id, max_nums, invisible_ms, poll_ms, exp, exp_type,
                                       init_mode, order, attempt_id)
        except Exception as e:  # noqa: BLE001 - as BrokerController.handle and the connection answer it
            code = response_code(e)
            if code is None:
                log.exception("pop (local front) failed for %s from %s", (group, topic), self._caller.peer)
                return SYSTEM_ERROR, "internal error; see the broker log", None
            controller.rpc_latency.record(POP_MESSAGE, code, time.perf_counter_ns() - t0)
            return code, str(e), None
        if type(res) is Popped:  # (_timed_popped, inline)
            code = res.code
            if code is None:
                code = SUCCESS if res.count else POLLING_TIMEOUT
            controller.rpc_latency.record(POP_MESSAGE, code, time.perf_counter_ns() - t0, False)
            return code, res.remark, res
        args = (group, topic, queue_id, max_nums, invisible_ms, poll_ms, exp, exp_type, init_mode, order, attempt_id)
        return _popped_later(self, controller.rpc_latency, res, t0, timeout, args)


    # -- SEND_MESSAGE_V2 as values (the SendMessage call's plain message) ------------------------------
    def send(self, topic: bytes, queue_id: int, body, props: bytes) -> int:
        """A plain message (`props` as the front's producer renders them into SEND_MESSAGE_V2's
        header, no compression, sysFlag and flag 0) handed to the broker's send kernel as values
        (FastSendPath.append_values): the same route, checks and append as that frame over the
        in-process connection, with that connection's born host, settled at the loop turn's end
        with the sends that came as frames. Returns its queue offset; -1 when the kernel would not
        answer the frame at once (a role switch, ACL, a slave or a full disk, replies waiting for
        durability, no route yet, a refusal to come...) or this handler is not a broker's:
        nothing is stored, and the caller sends the frame, whose answer says why. (The front's
        SendMessage makes this call itself, per send, with what `sender` gives.)"""
        sender = self.sender()
        if sender is None:
            return -1
        fast, conn = sender
        return fast.append_values(conn, topic, queue_id, body, props)

    def sender(self):
        """(FastSendPath, the sends' connection state): `send` is fast.append_values(state, ...),
        which checks per send what may change (a role switch, the kernel enabled this turn,
        replies parked); None when sends never go as values here (ACL on, no send kernel, a
        handler that is not a broker's). Fixed once the broker runs, so a caller may keep it."""
        target = self._send_target
        if target is None:
            target = self._send_target = _send_target(self._handler, self._caller.peer)
        if target is False:
            return None
        controller, conn = target
        fast = controller.fast
        if controller.acl is not None or fast is None:
            return None
        return fast, conn

    def takes_sends(self) -> bool:
        """Whether `send` may take a send now, before one is prepared for it: False while every
        send would be declined (a role switch, ACL, replies waiting for durability under
        SYNC_FLUSH / SYNC_MASTER, a store that settles each read, not a broker's handler)."""
        sender = self.sender()
        if sender is None:
            return False
        fast, conn = sender
        return not (conn.controller._switching or fast.pipeline.parked or not fast.takes_values)


def _send_target(handler, peer: str):
    """(BrokerController, the sends' connection state) of `handler`, or False (sends go as frames).
    The state is a connection's as FastSendPath reads it (SendConn with the born host the
    in-process connection from `peer` stores, the turn's flags)."""
    from broker.kernels.send_path import SendConn
    from broker.server.processor.send_processor import born_host_of
    controller = getattr(handler, "__self__", None)
    if controller is None or not hasattr(controller, "fast") or not hasattr(controller, "_switching"):
        return False
    from types import SimpleNamespace
    return controller, _SendConnState(SendConn(born_host_of(SimpleNamespace(peer=peer, attrs={}))), controller)


class _SendConnState:
    """What FastSendPath keeps per connection, for the front's sends handed as values, and the
    broker whose role switch declines them (FastSendPath.append_values asks it per send)."""
    __slots__ = ("send_conn", "in_turn", "parked_seen", "controller")

    def __init__(self, send_conn, controller):
        self.send_conn = send_conn
        self.in_turn = False
        self.parked_seen = 0
        self.controller = controller


def _ack_target(handler):
    """(BrokerController, PopService, AckMessageProcessor) of `handler` (BrokerController.handle),
    or False when it is not one (a test's handler): batch acks then go as commands."""
    from broker.server.processor.ack_message_processor import AckMessageProcessor
    return _processor_of(handler, AckMessageProcessor)


def _serves(controller, pop, code: int) -> bool:
    """Whether BrokerController.handle would hand the command `code` straight to the pop service's
    processor (no role switch, no ACL, the code served) and the pop service would serve it at once
    (the master, its revive log replayed)."""
    return not (controller._switching or controller.acl is not None or code not in controller.handlers
                or not pop._serving or pop.store.is_slave or not pop.ready.is_set())


def _processor_of(handler, kind):
    controller = getattr(handler, "__self__", None)
    pop = getattr(controller, "pop", None)
    if pop is None or not hasattr(controller, "rpc_latency"):
        return False
    for p in pop.processors:
        if isinstance(p, kind):
            return controller, pop, p
    return False


def _ack_timed(latency, f, t0: int) -> None:
    if f.cancelled():
        latency.record(BATCH_ACK_MESSAGE, None, time.perf_counter_ns() - t0, result="cancelled")
    elif f.exception() is not None:
        latency.record(BATCH_ACK_MESSAGE, None, time.perf_counter_ns() - t0, result="process_request_failed")
    else:
        latency.record(BATCH_ACK_MESSAGE, f.result(), time.perf_counter_ns() - t0)


def _pop_target(handler):
    """(BrokerController, PopService, PopMessageProcessor) of `handler`, or False (pops go as commands)."""
    global Popped
    from broker.server.processor.pop_message_processor import Popped, PopMessageProcessor
    return _processor_of(handler, PopMessageProcessor)


async def _answered(answer):
    return answer


async def _popped_later(local: LocalBroker, latency, res, t0: int, timeout: float, args: tuple):
    """pop_now's answer of a pop that waits: a future (its revive records' durability) or a
    coroutine (held: long polling), awaited as invoke awaits a handler's."""
    held = not isinstance(res, asyncio.Future)
    try:
        res = await asyncio.wait_for(res, timeout)
    except asyncio.TimeoutError:
        latency.record(POP_MESSAGE, None, time.perf_counter_ns() - t0, held, "cancelled")
        raise BrokerUnreachable(local.addr, f"no answer to request code {POP_MESSAGE} within {timeout:g} s") \
            from None
    except asyncio.CancelledError:
        latency.record(POP_MESSAGE, None, time.perf_counter_ns() - t0, held, "cancelled")
        raise
    except Exception:  # noqa: BLE001 - as the connection answers a handler's failure
        latency.record(POP_MESSAGE, None, time.perf_counter_ns() - t0, held, "process_request_failed")
        log.exception("pop (local front) failed for %s from %s", args[:2], local._caller.peer)
        return SYSTEM_ERROR, "internal error; see the broker log", None
    return _timed_popped(latency, res, t0, held)


def _timed_popped(latency, res, t0: int, held: bool) -> tuple:
    code = res.code
    if code is None:
        code = SUCCESS if res.count else POLLING_TIMEOUT
    latency.record(POP_MESSAGE, code, time.perf_counter_ns() - t0, held)
    return code, res.remark, res
