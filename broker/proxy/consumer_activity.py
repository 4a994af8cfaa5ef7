"""The consumer RPCs over the broker's pop consumption (RocketMQ 5's ReceiveMessageActivity,
AckMessageActivity, ChangeInvisibleDurationActivity): ReceiveMessage pops (POP_MESSAGE 200050) from
the broker the request's queue names and streams Status OK, each message with its receipt handle
(the broker's extraInfo, POP_CK), then the delivery timestamp, or a lone MESSAGE_NOT_FOUND;
AckMessage (ACK_MESSAGE 200051) and ChangeInvisibleDuration (CHANGE_MESSAGE_INVISIBLETIME 200053)
go to the broker the handle names. The receipt handle a client is given is the broker's with the
message's commit log offset appended (broker.proxy.receipt_handle), which
ForwardMessageToDeadLetterQueue (broker.proxy.forward_dlq_activity) sends back by.

The pop requests are the project client's (broker.client.pop).
"""
from __future__ import annotations

import asyncio
import base64
import logging
import re
import time

import msgspec

from broker.client import api
from broker.client.client_instance import MQClientInstance
from broker.client.errors import ResponseError
from broker.proxy import receipt_handle, receive_reply
from broker.proxy.ack_reply import ack_ok, ack_ok_of, read_ack
from broker.proxy.config import ProxyConfig
from broker.proxy.forward_dlq_activity import ForwardMessageToDLQActivity
from broker.proxy.grpc_metadata import client_id_of
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.receipt_handle_manager import ReceiptHandleManager
from broker.proxy.route_activity import validate_topic
from broker.proxy.status import Code, ProxyError, from_broker_refusal, from_client_error, status
from broker.proxy.subscription_groups import NOT_CACHED, SubscriptionGroups, orderly
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.server.filter.expression_type import SQL92, TAG

from broker.client import pop as _pop
from broker.common import extra_info as ei
from broker.kernels.batch_ack import ascending

log = logging.getLogger("proxy")

MIN_INVISIBLE_MS, MAX_INVISIBLE_MS = 10_000, 12 * 3600 * 1000  # ProxyConfig's minInvisibleTimeMillsForRecv, max
RECEIVE_BATCH_SIZE = 32  # ProxyConfig.grpcClientConsumerLongPollingBatchSize
# a SubscriptionGroupConfig's retryMaxTimes default (the broker's maxReconsumeTimes), for a group the
# broker has no config of: the broker moves a message to %DLQ% after so many retries, so the
# client's last attempt is the one after them
RETRY_MAX_TIMES = 16
RECEIVE_KEPT_MAX = 256  # receive_bytes_now's requests kept (clients x their receives' shapes)
CONSUME_INIT_MODE_MAX = 1  # ConsumeInitMode.MAX: a new group starts at the queue's end, as the Java proxy's


_ACKED = object()  # an entry of AckMessage's results its broker's batch ack took (status OK)


def not_implemented(rpc: str):
    """A broker that answers the pop codes REQUEST_CODE_NOT_SUPPORTED (a broker of another make, or
    an older one of ours: pop is served wherever the broker takes writes)."""
    return status(Code.NOT_IMPLEMENTED, f"{rpc}: the broker does not serve pop consumption (POP_MESSAGE) in its mode")


def _ms(duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000


def _filter(expr: pb.FilterExpression) -> tuple[str, str]:
    """(expType, exp) of a receive's FilterExpression, as the Java proxy builds its subscription
    (GrpcConverter.buildExpressionType, FilterAPI.build): SQL is SQL92, anything else TAG; an empty
    tag expression is "*", an empty SQL92 one is refused. The broker decides whether it filters by
    the type (SQL92 with enablePropertyFilter=true; else, or for an expression that does not
    compile, its refusal comes back as INTERNAL_SERVER_ERROR with its remark, as the Java proxy
    relays a broker's refusal), so the front never reads an SQL text as tags."""
    exp_type = SQL92 if expr.type == pb.SQL else TAG
    if expr.expression:
        return exp_type, expr.expression
    if exp_type == TAG:
        return TAG, "*"
    raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, f"Expression can't be null! {exp_type}")


_SQL = pb.SQL

# a group name's characters: ASCII letters and digits, '%', '|', '-' and '_' (one regex match per
# call, where a generator over its characters cost ~5 us a receive and an ack)
_GROUP_NAME = re.compile(r"[A-Za-z0-9%|_-]{1,255}")


def _group(resource: pb.Resource) -> str:
    name = resource.name
    if _GROUP_NAME.fullmatch(name) is None:
        raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, f"consumer group {name!r} is empty, too long or holds characters "
                                                      f"other than letters, digits, '%', '|', '-' and '_'")
    return name


def _receive_args(request: spb.ReceiveMessageRequest, config: ProxyConfig,
                  names_ok: set | frozenset = frozenset()) -> tuple[str, str, str, str, int, int]:
    """(group, topic, expType, exp, invisible ms, long polling ms) of a receive, or ProxyError.
    `names_ok`: (group, topic) pairs already found valid (the names' checks are pure functions of
    them), whose regex and topic rule are not run again. (Each protobuf field is read once: a
    field's read is a upb call, and this runs per receive.)"""
    group_res, mq = request.group, request.message_queue
    group, topic = group_res.name, mq.topic.name
    if (group, topic) not in names_ok:
        _group(group_res), validate_topic(mq.topic)
    fe = request.filter_expression
    expression = fe.expression
    if fe.type == _SQL:
        exp_type = SQL92
        if not expression:
            raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, f"Expression can't be null! {exp_type}")
    else:  # (_filter's rules, inline)
        exp_type = TAG
        if not expression:
            expression = "*"
    # a PushConsumer (auto_renew) names no invisible time: the front's, renewed while it works
    if request.auto_renew:
        invisible = config.defaultInvisibleTimeMills
    else:
        if request.HasField("invisible_duration"):
            d = request.invisible_duration
            invisible = d.seconds * 1000 + d.nanos // 1_000_000  # _ms
        else:
            invisible = 30_000
        if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
            raise ProxyError(Code.ILLEGAL_INVISIBLE_TIME, f"the invisible time must be within "
                                                          f"{MIN_INVISIBLE_MS} and {MAX_INVISIBLE_MS} ms")
    batch = request.batch_size
    if batch <= 0 or batch > RECEIVE_BATCH_SIZE:
        raise ProxyError(Code.BAD_REQUEST, f"batch size {batch} must be within 1 and 32")
    max_poll = config.grpcClientConsumerMaxLongPollingTimeoutMillis
    if request.HasField("long_polling_timeout"):
        d = request.long_polling_timeout
        poll = min(d.seconds * 1000 + d.nanos // 1_000_000, max_poll)
    else:
        poll = max_poll
    return group, topic, exp_type, expression, invisible, max(0, poll)


def _receive_failed(e: Exception) -> spb.ReceiveMessageResponse:
    """The one response of a receive that failed before any message: its status."""
    if isinstance(e, ProxyError):
        return spb.ReceiveMessageResponse(status=status(e.code, e.message))
    if isinstance(e, ResponseError):
        if e.code == codes.REQUEST_CODE_NOT_SUPPORTED:
            return spb.ReceiveMessageResponse(status=not_implemented("ReceiveMessage"))
        # e.g. an SQL92 filter: INTERNAL_SERVER_ERROR, "The broker does not support ..."
        return spb.ReceiveMessageResponse(status=status(*from_broker_refusal(e)))
    return spb.ReceiveMessageResponse(status=status(*from_client_error(e)))


class ConsumerActivity:
    # local mode: the broker this front lives in, reached by a call for pops and batch acks
    # (broker.proxy.local_broker, set by LocalGrpcFront); None: every broker over the client's connections
    local = None

    def __init__(self, client: MQClientInstance, config: ProxyConfig):
        self.client = client
        self.config = config
        self.dlq = ForwardMessageToDLQActivity(client, self._broker_addr)
        self.groups = SubscriptionGroups(client)
        self.renewals = ReceiptHandleManager(self._renew, config.renewAheadTimeMillis, config.renewSliceTimeMillis)
        self._names_ok: set[tuple[str, str]] = set()  # (group, topic) pairs found valid (receive_now, ack_now)
        # a ReceiveMessage request's bytes -> what receive_bytes_now read of them (bounded)
        self._receive_kept: dict[bytes, tuple] = {}

    def _name_ok(self, group: str, topic: str) -> None:
        """(group, topic) found valid: kept (bounded, as what clients send is not), so the next
        receive or ack of them skips the names' checks."""
        names = self._names_ok
        if (group, topic) not in names:
            if len(names) >= 1024:
                names.clear()
            names.add((group, topic))

    def _via(self, addr: str):
        """What a pop or batch ack to `addr` is invoked through (its `invoke` is the client's)."""
        local = self.local
        return local if local is not None and local.addr == addr else self.client

    async def _renew(self, h, invisible_ms: int) -> str:
        """A PushConsumer's message kept invisible another `invisible_ms` (ReceiptHandleManager)."""
        addr = await self._broker_addr(h.topic, self._handle(h.current).broker_name)
        handle = await _pop.change_invisible_time(self.client, addr, h.group, h.topic, h.current, invisible_ms)
        return receipt_handle.encode(handle, receipt_handle.commit_log_offset(h.current))

    async def _broker_addr(self, topic: str, broker_name: str) -> str:
        route = await self.client.routes.get(topic)
        addr = route.master_addr(broker_name)
        if addr is None:
            raise ProxyError(Code.NOT_FOUND, f"broker {broker_name} of topic {topic} has no master")
        return addr

    async def receive_message(self, request: spb.ReceiveMessageRequest, context):
        try:
            group, topic, exp_type, expression, invisible, poll = _receive_args(request, self.config)
            broker = request.message_queue.broker.name
            addr = await self._broker_addr(topic, broker)
            # a FIFO group (consumeMessageOrderly) pops in order: one batch of a queue out at a
            # time; the client's attemptId lets a retried receive get the same batch again
            group_config = await self.groups.get(addr, group)
            order = orderly(group_config)
            client_id = client_id_of(context) if request.auto_renew else None
            popped = r = None
            if order:
                r = await _pop.pop(self._via(addr), addr, broker, group, topic, invisible, request.batch_size,
                                   poll_ms=poll, expression=expression, expression_type=exp_type,
                                   init_mode=CONSUME_INIT_MODE_MAX, order=True, attempt_id=request.attempt_id)
                if r.messages:
                    r.messages = await self._past_max_attempts_to_dlq(addr, group, group_config, r.messages)
            else:
                # (in local mode the fields go to the broker's PopMessageProcessor as values and the
                # answer comes back as values: LocalBroker.pop, no command, unless the broker would
                # not serve it at once)
                popped = await _pop.pop_records(self._via(addr), addr, group, topic, invisible, request.batch_size,
                                                poll_ms=poll, expression=expression,
                                                expression_type=exp_type, init_mode=CONSUME_INIT_MODE_MAX)
        except Exception as e:  # noqa: BLE001 - answered: ProxyError, a broker's refusal, a client error
            yield _receive_failed(e)
            return
        async for response in self._received(popped, r, group, topic, broker, invisible, client_id):
            yield response

    def receive_now(self, request: spb.ReceiveMessageRequest, context):
        """ReceiveMessage answered without a task or a chain of async generators
        (GrpcServer.add_fast_stream), in local mode: a receive from this front's broker, its route
        and its group (not FIFO) known fresh, popped by the broker at once (LocalBroker.pop_now)
        and written by one kernel call: the framed answer. None before anything is popped (a
        request it refuses, a route or group not cached, the broker not serving the pop at once),
        and receive_message answers the call. What comes of a pop that waits (durability, long
        polling) or that the kernel leaves to receive_ok comes as receive_message's rest
        (_received), in a task."""
        if self.local is None:
            return None
        try:
            args = _receive_args(request, self.config, self._names_ok)
        except ProxyError:
            return None
        group, topic = args[0], args[1]
        if (group, topic) not in self._names_ok:
            self._name_ok(group, topic)
        return self._receive_fast(args + (request.message_queue.broker.name, request.batch_size,
                                          request.auto_renew), context)

    def receive_bytes_now(self, payload: bytes, context):
        """receive_now of the request's bytes (GrpcServer.add_fast_stream, raw). A client sends
        the same bytes on every receive (its group, topic, batch, invisible and long-polling time,
        filter), and what _receive_args makes of them is a function of the bytes and the front's
        fixed config: kept per request's bytes (bounded), a repeated request costs a dict look-up
        instead of its parse and checks. The route and the group's config are still read per
        call (either can change). A request not kept is parsed and checked as receive_now does;
        one that does not parse or that _receive_args refuses is never kept and declines (None):
        the method's path answers it (its status) as before."""
        if self.local is None:
            return None
        args = self._receive_kept.get(payload)
        if args is None:
            try:
                request = spb.ReceiveMessageRequest.FromString(payload)
                args = _receive_args(request, self.config, self._names_ok)
            except Exception:  # noqa: BLE001 - ProxyError or a bad message: the method answers it
                return None
            group, topic = args[0], args[1]
            if (group, topic) not in self._names_ok:
                self._name_ok(group, topic)
            args += (request.message_queue.broker.name, request.batch_size, request.auto_renew)
            if not request.attempt_id:  # (a client naming one names a new one every receive: not kept)
                kept = self._receive_kept
                if len(kept) >= RECEIVE_KEPT_MAX:
                    kept.clear()
                kept[bytes(payload)] = args
        return self._receive_fast(args, context)

    def _receive_fast(self, args: tuple, context):
        """receive_now's pop and answer of its request's values (_receive_args' six, then the
        broker's name, the batch size, auto_renew)."""
        group, topic, exp_type, expression, invisible, poll, broker, batch, auto_renew = args
        local = self.local
        route = self.client.routes.peek(topic)
        if route is None:
            return None
        if route is not self._receive_route or broker != self._receive_broker:
            # (the route object is RouteCache's, replaced, never changed, when refetched)
            if route.master_addr(broker) != local.addr:
                return None
            self._receive_route, self._receive_broker = route, broker
        group_config = self.groups.peek(local.addr, group)
        if group_config is NOT_CACHED or (group_config and group_config.get("consumeMessageOrderly")):  # orderly
            return None
        answer = local.pop_now(group, topic, -1, batch, invisible, poll, expression, exp_type,
                               CONSUME_INIT_MODE_MAX, False, "", poll / 1000 + 10)
        if answer is None:
            return None
        client_id = client_id_of(context) if auto_renew else None
        if type(answer) is tuple:
            code, remark, popped = answer
            if code == codes.SUCCESS:
                try:
                    framed = self._written_now(popped, group, topic, broker, invisible, client_id)
                except Exception:  # noqa: BLE001 - popped already: _received answers it, as receive_message
                    framed = None
                if framed is not None:
                    return framed
        return self._received_later(answer, group, topic, broker, local.addr, invisible, client_id)

    # receive_now's last route that named this broker the master of the request's broker (as ack_now's)
    _receive_route = None
    _receive_broker = None

    def _written_now(self, popped, group: str, topic: str, broker: str, invisible: int, client_id):
        """_written of the broker's Popped as it is (what typed_records makes of it, without the
        PoppedRecords and, for records in one run of the log, the copy of them joined: the kernel
        reads the view of the log, at once, before anything can move the log)."""
        views = popped.views
        fast = receive_reply.receive_popped_values(views[0] if len(views) == 1 else b"".join(views),
                                                   popped.start_offsets(), popped.pop_time, popped.invisible_time,
                                                   popped.revive_qid, topic, broker, invisible,
                                                   int(time.time() * 1000), client_id is not None)
        if fast is None:  # (_kept, inline)
            return None
        if client_id is not None:
            renewals = self.renewals
            for handle in fast[1]:
                renewals.add(client_id, group, topic, handle, invisible)
        return fast[0]

    def _kept(self, fast, group: str, topic: str, invisible: int, client_id):
        if fast is None:
            return None
        framed, handles = fast
        if client_id is not None:
            for handle in handles:
                self.renewals.add(client_id, group, topic, handle, invisible)
        return framed

    def _written(self, popped, group: str, topic: str, broker: str, invisible: int, client_id):
        """The framed answer written from the popped records in one kernel call (receive_popped),
        their handles kept renewed for a PushConsumer; None: the kernel leaves them (a compressed
        body, an IPv6 host, ...) to be read into messages, as before."""
        fast = receive_reply.receive_popped(popped, topic, broker, invisible, int(time.time() * 1000),
                                            client_id is not None)
        return self._kept(fast, group, topic, invisible, client_id)

    async def _received_later(self, answer, group: str, topic: str, broker: str, addr: str, invisible: int,
                              client_id):
        """receive_now's answer of a pop it did not write at once (pop_now's tuple, or its awaitable)."""
        try:
            code, remark, popped = answer if type(answer) is tuple else await answer
            records = _pop.typed_records(code, remark, popped, f"pop {topic} for {group} from {addr}", False)
        except Exception as e:  # noqa: BLE001 - answered as receive_message answers it
            yield _receive_failed(e)
            return
        async for response in self._received(records, None, group, topic, broker, invisible, client_id):
            yield response

    async def _received(self, popped, r, group: str, topic: str, broker: str, invisible: int, client_id):
        """A receive's responses of its pop: `popped` (pop_records' answer) or, for an orderly pop,
        `r` (pop's messages)."""
        framed = None
        if popped is not None:
            try:
                if popped.status == _pop.FOUND:
                    framed = self._written(popped, group, topic, broker, invisible, client_id)
                if framed is None:
                    r = _pop.read_records(popped, broker, topic)
            except Exception as e:  # noqa: BLE001 - answered as a failed pop
                yield _receive_failed(e)
                return
        if framed is not None:
            yield framed
            return
        if not r.messages:
            yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            return
        sep = receipt_handle.SEP
        handles = [f"{_pop.handle_of(m)}{sep}{m.commit_log_offset}" for m in r.messages]
        try:
            answer = receive_reply.receive_ok(r.messages, topic, handles, invisible, int(time.time() * 1000))
        except ValueError:
            # a message protobuf cannot carry (a timestamp past its range): the ones before it
            # go out, then the call fails on it
            yield receive_reply.status_ok()
            for m, handle in zip(r.messages, handles):
                one = receive_reply.one_message(m, topic, handle, invisible)
                if client_id is not None:
                    self.renewals.add(client_id, group, topic, handle, invisible)
                yield one
            raise
        if client_id is not None:
            for handle in handles:
                self.renewals.add(client_id, group, topic, handle, invisible)
        yield answer

    async def _past_max_attempts_to_dlq(self, addr: str, group: str, group_config: dict, messages: list) -> list:
        """An orderly pop redelivers a batch not acked in time with its attempt raised, and the
        broker's revive (which moves a message to %DLQ% past retryMaxTimes) plays no part: as the
        Java proxy's PopMessageResultFilterImpl, a message past max attempts (retryMaxTimes + 1)
        goes to %DLQ%<group> here (send-back with delayLevel -1, then acked) and is not delivered;
        the group's next message is then free to come."""
        max_attempts = group_config.get("retryMaxTimes", RETRY_MAX_TIMES) + 1
        kept = []
        for m in messages:
            if m.reconsume_times + 1 <= max_attempts:
                kept.append(m)
                continue
            try:
                await api.send_back(self.client, addr, group, m, max_reconsume_times=0, delay_level=-1)
                await _pop.ack(self.client, addr, group, m.topic, _pop.handle_of(m))
            except Exception as e:  # noqa: BLE001 - delivered instead: the client may forward it itself
                log.warning("could not move %s of %s past its max attempts to %%DLQ%%: %s", m.msg_id, group, e)
                kept.append(m)
        return kept

    async def ack_message(self, request: spb.AckMessageRequest, context) -> spb.AckMessageResponse | bytes:
        """The response, or its bytes when every entry was acked (what a consumer's acks are)."""
        group, topic = _group(request.group), validate_topic(request.topic)
        if not request.entries:
            raise ProxyError(Code.BAD_REQUEST, "no receipt handle to ack")
        entries = list(request.entries)
        out: list = [None] * len(entries)
        taken: dict[int, str] = {}  # entry index -> the handle in force (renewals.take, asked once)
        if len(entries) > 1:  # what a SimpleConsumer acking what it received sends
            texts = [e.receipt_handle for e in entries]  # (each read of the field makes a new str)
            await self._batch_ack(group, topic, entries, texts, out, taken)
            # the whole batch acked: its answer encoded at once (ack_reply)
            if out.count(_ACKED) == len(out):
                return ack_ok_of([e.message_id for e in entries], texts)
        return await self._ack_rest(group, topic, entries, out, taken)

    async def _ack_rest(self, group: str, topic: str, entries: list, out: list, taken: dict):
        """The entries a batch ack did not take (None in `out`; _ACKED: taken), each acked alone by
        its own ACK_MESSAGE, all in flight at once on the broker's connection, and the answer."""
        async def ack(i: int, entry) -> spb.AckMessageResultEntry:
            try:
                info = self._handle(entry.receipt_handle)
                addr = await self._broker_addr(topic, info.broker_name)
                handle = taken[i] if i in taken else await self.renewals.take(group, entry.receipt_handle)
                await _pop.ack(self.client, addr, group, topic, handle)
                st = status()
            except ProxyError as e:
                st = status(e.code, e.message)
            except ResponseError as e:
                st = (status(Code.INVALID_RECEIPT_HANDLE, f"the receipt handle is expired or acked: {e}")
                      if e.code == codes.NO_MESSAGE else not_implemented("AckMessage")
                      if e.code == codes.REQUEST_CODE_NOT_SUPPORTED else status(*from_client_error(e)))
            except Exception as e:  # noqa: BLE001
                st = status(*from_client_error(e))
            return spb.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st)

        if all(e is _ACKED for e in out):
            return ack_ok(entries)
        left = [i for i, e in enumerate(out) if e is None]
        for i, e in zip(left, await asyncio.gather(*(ack(i, entries[i]) for i in left))):
            out[i] = e
        for i, e in enumerate(out):
            if e is _ACKED:
                out[i] = spb.AckMessageResultEntry(message_id=entries[i].message_id,
                                                   receipt_handle=entries[i].receipt_handle, status=status())
        codes_ = {e.status.code for e in out}
        top = status(Code.MULTIPLE_RESULTS) if len(codes_) > 1 else status(out[0].status.code, out[0].status.message)
        return spb.AckMessageResponse(status=top, entries=out)

    # ack_now's last route that named this broker the master of its checkpoints' broker: the
    # route object (RouteCache's, replaced, never changed, when refetched) and the broker name
    _ack_route = None
    _ack_broker = None

    def ack_now(self, payload: bytes, context):
        """AckMessage answered from the request's bytes without a task (GrpcServer.add_fast_unary,
        raw), in local mode: a consumer's acks of what it received (one handle, what a 5.x
        client's ack(message) sends, or a receive's batch of them, of this front's shape, read
        with the batch's answer by the ack_request kernel, every handle of the broker this front lives in, none renewed by the front) handed as values to
        the broker's batch ack (LocalBroker.batch_ack). The response's bytes when every entry was
        acked at once (the usual answer), else (a future, a function of it giving the response),
        or None before anything is acked, and ack_message answers the call: a
        request of another shape, a name it refuses, a route not cached, the broker not serving
        the batch ack at once. A batch the broker does not take whole (any answer but SUCCESS)
        goes on as ack_message's does: each entry acked alone, each its own status."""
        local = self.local
        if local is None or self.renewals.handles:
            return None
        got = read_ack(payload)
        if got is None:
            return None
        group, topic, checkpoints, answer = got
        if (group, topic) not in self._names_ok:
            try:
                _group(pb.Resource(name=group))
                validate_topic(pb.Resource(name=topic))
            except ProxyError:
                return None
            self._name_ok(group, topic)
        route = self.client.routes.peek(topic)
        if route is None:
            return None
        if len(checkpoints) == 1:  # one receive's handles (the usual batch): _typed_acks without its dict
            ck, pt, _, rq, retry, broker_name, qid, offsets = checkpoints[0]
            if route is not self._ack_route or broker_name != self._ack_broker:
                if route.master_addr(broker_name) != local.addr:
                    return None
                self._ack_route, self._ack_broker = route, broker_name
            offsets = ascending(offsets)
            if offsets[-1] - ck >= _MAX_SPAN:
                return None
            typed = [(group, topic if retry == ei.NORMAL_TOPIC else ei.real_topic(topic, group, retry), qid, ck, rq,
                      pt, offsets)]
        else:
            acks: dict = {}
            for ck, pt, it, rq, retry, broker_name, qid, offsets in checkpoints:
                if route.master_addr(broker_name) != local.addr:
                    return None
                key = (retry, qid, ck, rq, pt, it)
                if key in acks:
                    acks[key] = acks[key] + offsets
                else:
                    acks[key] = offsets
            typed = _typed_acks(group, topic, acks)
        code = local.batch_ack(typed) if typed is not None else None
        if code is None:
            return None
        if code == codes.SUCCESS:
            return answer  # the response itself (add_fast_unary's bytes): no future, no function of it
        return asyncio.ensure_future(self._ack_now_rest(group, topic, payload, code, answer)), _result

    async def _ack_now_rest(self, group: str, topic: str, payload: bytes, code, answer: bytes):
        """ack_now's batch once its answer is known (its records durable), and when it is not
        SUCCESS each entry acked alone, as ack_message goes on; failures answered as the
        servicer's wrapper answers them."""
        try:
            if type(code) is not int:
                try:
                    code = await asyncio.wait_for(code, 5)
                except Exception:  # noqa: BLE001 - as _batch_ack: each handle is then acked alone
                    code = None
            if code == codes.SUCCESS:
                return answer
            entries = list(spb.AckMessageRequest.FromString(payload).entries)
            return await self._ack_rest(group, topic, entries, [None] * len(entries),
                                        {i: e.receipt_handle for i, e in enumerate(entries)})
        except ProxyError as e:
            return spb.AckMessageResponse(status=status(e.code, e.message))
        except Exception as e:  # noqa: BLE001 - answered, logged, never a dead call
            log.exception("AckMessage failed")
            return spb.AckMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}"))

    async def _batch_ack(self, group: str, topic: str, entries: list, texts: list[str], out: list,
                         taken: dict) -> None:
        """The handles of `entries` acked by one BATCH_ACK_MESSAGE per broker (the Java proxy's
        batch ack; the broker writes one revive-log record per checkpoint instead of one per
        message). A broker's batch answered SUCCESS sets its entries in `out` to _ACKED; any other answer
        (a handle it does not have in flight, a broker without batch acks) leaves them None, and
        each is acked alone, which gives each its own status. A handle that does not parse is
        answered here. `taken`: the handle in force of each entry (a renewed one's latest), for
        the acks made alone too: the front renews it no more once asked. `texts`: the entries'
        receipt handles."""
        batches: dict[str, tuple[list[int], dict]] = {}  # broker address -> (entry indexes, acks by checkpoint)
        addrs: dict[str, str] = {}  # broker name -> its address, looked up once per call
        renewed = self.renewals.handles
        read = receipt_handle.BatchReader().read  # a batch's handles share all but their offsets
        last = None  # (the fields read last, their address, batch, offsets and checkpoint key): a batch's are the same
        for i, text in enumerate(texts):
            try:
                info, queue_offset = read(text)
                # a handle the front does not renew is the one in force (take would say so)
                if renewed and (group, text) in renewed:
                    current = taken[i] = await self.renewals.take(group, text)
                    if current != text:
                        info = self._handle(current)
                        queue_offset = info.queue_offset
                else:
                    taken[i] = text
                if last is not None and last[0] is info:
                    _, addr, idx, offsets, key = last
                else:
                    addr = addrs.get(info.broker_name)
                    if addr is None:
                        addr = addrs[info.broker_name] = await self._broker_addr(topic, info.broker_name)
                    idx = offsets = key = None
            except ProxyError as e:
                out[i] = spb.AckMessageResultEntry(message_id=entries[i].message_id, receipt_handle=text,
                                                   status=status(e.code, e.message))
                continue
            ck_offset = info.ck_offset
            if queue_offset is None or queue_offset < ck_offset:
                continue  # a 7-field handle (its offset travels in the request), or one no checkpoint holds: alone
            if idx is None:
                idx, acks = batches.setdefault(addr, ([], {}))
                key = (info.retry, info.queue_id, ck_offset, info.revive_qid, info.pop_time, info.invisible_time)
                offsets = acks.get(key)
                if offsets is None:
                    offsets = acks[key] = []
                last = (info, addr, idx, offsets, key)
            idx.append(i)
            offsets.append(queue_offset)
        if not batches:
            return

        async def one(addr: str, idx: list[int], acks: dict) -> None:
            if len(idx) < 2:
                return
            via = self._via(addr)
            try:
                typed = _typed_acks(group, topic, acks) if via is self.local else None
                # the broker this front lives in: its processor handed the values (None: not now)
                code = via.batch_ack(typed) if typed is not None else None
                if code is not None and type(code) is not int:
                    code = await asyncio.wait_for(code, 5)
                if code is None:  # a command, as the wire carries it
                    code = (await via.invoke(addr, RemotingCommand.request(
                        codes.BATCH_ACK_MESSAGE, {}, _batch_ack_body(self._handle(taken[idx[0]]).broker_name, group,
                                                                     topic, acks)), 5)).code
            except Exception:  # noqa: BLE001 - each handle is then acked alone, and answered alone
                return
            if code == codes.SUCCESS:
                for i in idx:
                    out[i] = _ACKED
        if len(batches) == 1:  # one broker (the usual case): no task for it
            (addr, (idx, acks)), = batches.items()
            await one(addr, idx, acks)
        else:
            await asyncio.gather(*(one(addr, idx, acks) for addr, (idx, acks) in batches.items()))

    async def change_invisible_duration(self, request, context) -> spb.ChangeInvisibleDurationResponse:
        group, topic = _group(request.group), validate_topic(request.topic)
        invisible = _ms(request.invisible_duration)
        # 0 is the Java proxy's minimum here: a client's nack without a backoff makes the message
        # visible again at once (the Node.js client nacks so under a CUSTOMIZED retry policy)
        if not 0 <= invisible <= MAX_INVISIBLE_MS:
            raise ProxyError(Code.ILLEGAL_INVISIBLE_TIME, f"the invisible time must be within 0 and {MAX_INVISIBLE_MS} ms")
        info = self._handle(request.receipt_handle)
        addr = await self._broker_addr(topic, info.broker_name)
        try:
            handle = await _pop.change_invisible_time(self.client, addr, group, topic,
                                                      await self.renewals.take(group, request.receipt_handle), invisible)
        except ResponseError as e:
            if e.code == codes.NO_MESSAGE:
                raise ProxyError(Code.INVALID_RECEIPT_HANDLE, f"the receipt handle is expired or acked: {e}") from None
            raise
        try:  # the new handle keeps the commit log offset the old one carried
            handle = receipt_handle.encode(handle, receipt_handle.commit_log_offset(request.receipt_handle))
        except ProxyError:
            pass  # an 8-field handle (not this front's): an 8-field one back
        return spb.ChangeInvisibleDurationResponse(status=status(), receipt_handle=handle)

    async def forward_to_dlq(self, request, context) -> spb.ForwardMessageToDeadLetterQueueResponse:
        group, topic = _group(request.group), validate_topic(request.topic)
        current = await self.renewals.take(group, request.receipt_handle)
        if current != request.receipt_handle:  # renewed by the front: the handle in force goes to the broker
            renewed = spb.ForwardMessageToDeadLetterQueueRequest()
            renewed.CopyFrom(request)
            renewed.receipt_handle = current
            request = renewed
        try:
            return await self.dlq.forward(group, topic, request)
        except ResponseError as e:
            if e.code == codes.REQUEST_CODE_NOT_SUPPORTED:
                return spb.ForwardMessageToDeadLetterQueueResponse(status=not_implemented(
                    "ForwardMessageToDeadLetterQueue"))
            raise ProxyError(*from_client_error(e)) from None

    @staticmethod
    def _handle(text: str):
        return receipt_handle.decode(text)


# -- a batch ack's checkpoints: {(retry flag, queue id, checkpoint offset, revive queue, pop time,
# invisible time): [queue offsets of the handles, as read]} -------------------------------------------
_MAX_SPAN = 1024  # the most offsets a BatchAck's bitset may name (AckMessageProcessor's check)


def _batch_ack_body(broker_name: str, group: str, topic: str, acks: dict) -> bytes:
    """BATCH_ACK_MESSAGE's body (BatchAckMessageRequestBody's JSON, a BitSet per checkpoint)."""
    out = []
    for (retry, q, so, rq, pt, it), offsets in acks.items():
        bits = 0
        for o in offsets:
            bits |= 1 << (o - so)
        out.append({"c": group, "t": topic, "r": retry, "so": so, "q": q, "rq": rq, "pt": pt, "it": it,
                    "b": base64.b64encode(bits.to_bytes((bits.bit_length() + 7) // 8, "little")).decode()})
    return msgspec.json.encode({"brokerName": broker_name, "acks": out})


def _result(fut):
    return fut.result()


def _typed_acks(group: str, topic: str, acks: dict) -> list | None:
    """The same acks as the values AckMessageProcessor.batch_ack_code takes (what it reads from
    the body), or None when the body would be refused whole (a checkpoint spanning more offsets
    than a BitSet may carry): then the command goes, and is refused as before."""
    out = []
    for (retry, q, so, rq, pt, _), offsets in acks.items():
        offsets = ascending(offsets)  # sorted(set(offsets)), the list itself when it is already
        if offsets[-1] - so >= _MAX_SPAN:
            return None
        out.append((group, ei.real_topic(topic, group, retry), q, so, rq, pt, offsets))
    return out
