"""SendMessageActivity: SendMessage, each v2 Message stored through the project's remoting
Producer. A FIFO message's group picks its queue (queue_selector); a transactional message goes
as a half message (TRAN_MSG, PREPARED sysFlag) and its SendResultEntry carries a transaction id
that names where the half message lies, which EndTransaction reads back (transaction_activity)."""
from __future__ import annotations

import asyncio
import functools
import random

from broker.client.errors import ResponseError
from broker.client.producer import FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SEND_OK, SLAVE_NOT_AVAILABLE, Producer
from broker.client.message import Message
from broker.client.transaction_producer import PROPERTY_TRANSACTION_PREPARED, offset_of, prepared_body
from broker.kernels.send_request import read_send, read_send_props, send_ok
from broker.proxy.config import ProxyConfig
from broker.proxy.converter import SYSTEM_PROPERTIES, TRAN_MSG, to_remoting
from broker.proxy.grpc_metadata import host_of_peer, peer_host
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.queue_selector import queue_index_for_group
from broker.proxy.route_activity import validate_topic
from broker.common.recall_handle import BadRecallHandle, RecallHandle
from broker.common.topic_attributes import accepts
from broker.proxy.status import Code, ProxyError, from_broker_refusal, from_client_error, status
from broker.proxy.transaction_id import TransactionId

_STATUS_CODE = {SEND_OK: Code.OK, FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
                FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT, SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE}

_NORMAL: dict = {}  # the properties message_type_of reads, for a NORMAL message


class ProxyProducer(Producer):
    """The front's remoting producer: half messages get the PREPARED type, as a TransactionProducer's,
    and take the general path; every other message the fast one (SendSlots), as a plain Producer's."""
    fast_bodies = True

    def _body(self, msg):
        return prepared_body(msg, super()._body(msg))

    def send(self, msg, timeout: float = 3.0, queue=None):
        if msg.properties.get(PROPERTY_TRANSACTION_PREPARED) == "true":
            return self._send(msg, timeout, queue)
        return Producer.send(self, msg, timeout, queue)


_NO_PEER = object()  # no call's peer yet (a peer may be None: not this)


class SendMessageActivity:
    # local mode: the broker this front lives in, reached by a call for plain sends (LocalBroker.send,
    # set by LocalGrpcFront); None: every send through the producer's connections
    local = None

    def __init__(self, producer: ProxyProducer, config: ProxyConfig, topic_types=None):
        self.producer = producer
        self.config = config
        self.topic_types = topic_types  # TopicTypes: the message.type each topic takes
        self._local_queues: dict = {}  # topic -> (route, its write queues when all are the local broker's, or None)
        # local mode: (FastSendPath, the sends' connection state) as LocalBroker.sender gives them,
        # False when the broker takes no sends as values, None until asked
        self._sender = None
        self._peer, self._peer_host = _NO_PEER, ""  # the last call's peer string and its host (send_bytes_now)

    async def send_message(self, request: spb.SendMessageRequest, context) -> spb.SendMessageResponse:
        if not request.messages:
            raise ProxyError(Code.MESSAGE_CORRUPTED, "no message to send")
        topic = validate_topic(request.messages[0].topic)
        peer = peer_host(context)
        if len(request.messages) == 1:  # what every 5.x client sends: one message a call
            return await self._send_single(request.messages[0], topic, peer)
        msgs = [to_remoting(m, topic, self.config, peer) for m in request.messages]
        if self.topic_types is not None:
            for m in msgs:
                await self.topic_types.validate(topic, m.properties)
        groups = [m.system_properties.message_group for m in request.messages]
        queues = None
        if any(groups):
            try:
                queues = await self.producer.write_queues(topic)
            except Exception as e:  # noqa: BLE001 - no route: answered as a Status
                return spb.SendMessageResponse(status=status(*from_client_error(e)))
        sends = [(m, pm.system_properties.message_id,
                  queues[queue_index_for_group(g, len(queues))] if g else None)
                 for m, pm, g in zip(msgs, request.messages, groups)]
        if len(sends) == 1 or queues is not None:
            # each FIFO message on its own group's queue, in the request's order: sends in flight
            # together could be stored in another order
            entries = [await self._send_one(*one) for one in sends]
        else:
            entries = await asyncio.gather(*(self._send_one(*one) for one in sends))
        codes = {e.status.code for e in entries}
        top = status(Code.MULTIPLE_RESULTS) if len(codes) > 1 else status(entries[0].status.code,
                                                                            entries[0].status.message)
        return spb.SendMessageResponse(status=top, entries=entries)

    def send_now(self, request: spb.SendMessageRequest, context):
        """SendMessage without a task or a coroutine, for what nearly every call is (one message,
        no message group, no half message, a topic whose type is cached): (the producer's future,
        a function of it giving the response), or None: send_message then answers the call, errors
        included. Nothing is sent before the last step, so a None leaves nothing behind."""
        msgs = request.messages
        if len(msgs) != 1:
            return None
        pm = msgs[0]
        sp = pm.system_properties
        if sp.message_group:
            return None
        topic = validate_topic(pm.topic)
        msg = to_remoting(pm, topic, self.config, peer_host(context))
        if msg.properties.get(TRAN_MSG) == "true":
            return None
        if self.topic_types is not None and not self.topic_types.accepts_now(topic, msg.properties):
            return None
        fut = self.producer.send(msg)
        if not isinstance(fut, asyncio.Future):  # not on the fast path: a coroutine, which send_message would have
            fut = asyncio.ensure_future(fut)
        message_id = sp.message_id
        return fut, functools.partial(_response, message_id)

    def send_bytes_now(self, payload: bytes, context):
        """send_now from the request's bytes: a plain message read by the send_request kernel
        straight into the Message to send (what to_remoting would make of it); anything it
        declines is parsed by protobuf and goes to send_now, which answers as before. In local
        mode, while the broker takes sends as values, the kernel reads it with its properties
        already rendered (read_send_props) and handed to the broker's send kernel (_send_local,
        whose usual case is made here in line): its answer is known at once and returned as the
        response's bytes (no future, no function of it: the endpoint writes them with this read's
        flush); a send declined there is read again for the producer."""
        c = self.config
        local = self.local
        if local is not None:
            sender = self._sender
            if sender is None:
                sender = self._sender = local.sender() or False
            if sender and sender[0].takes_values:
                # the peer's host, parsed once per peer string (a connection's, the same every call)
                peer = context.peer()
                if peer is not self._peer:
                    self._peer_host = host_of_peer(peer)
                    self._peer = peer
                got = read_send_props(payload, self._peer_host, c.maxMessageSize, c.userPropertyMaxNum,
                                      c.maxUserPropertySize, SYSTEM_PROPERTIES)
                if got is None:
                    return self.send_now(spb.SendMessageRequest.FromString(payload), context)
                topic, body, props, message_id = got
                # a message the kernel takes is a NORMAL one: none of the properties that make another type
                if self.topic_types is not None and not self.topic_types.takes_normal_now(topic):
                    return None
                # _send_local's usual case in line (one Python call less a send): the topic's queues
                # known for its cached route, all this broker's, a body the producer sends as it is
                producer = self.producer
                route = producer.client.routes.peek(topic)
                hit = self._local_queues.get(topic)
                if hit is not None and route is not None and hit[0] is route and hit[1] is not None \
                        and len(body) <= producer._compress_over:
                    queues, i = hit[1], hit[3]
                    offset = sender[0].append_values(sender[1], hit[2], queues[i % len(queues)].queue_id, body, props)
                    if offset >= 0:  # the round robin moves only for a send taken: the producer picks its own
                        hit[3] = i + 1
                        return send_ok(message_id, offset, "")
                else:
                    answer = self._send_local(topic, body, props, message_id)
                    if answer is not None:  # the response's bytes: the endpoint writes them with this read's flush
                        return answer
        peer = peer_host(context)
        got = read_send(payload, peer, c.maxMessageSize, c.userPropertyMaxNum, c.maxUserPropertySize,
                        SYSTEM_PROPERTIES)
        if got is None:
            return self.send_now(spb.SendMessageRequest.FromString(payload), context)
        topic, body, tag, keys, props, message_id = got
        if self.topic_types is not None and not self.topic_types.accepts_now(topic, _NORMAL):
            return None
        # Producer.send, not ProxyProducer.send: no half message here (TRAN_MSG is a system name)
        fut = Producer.send(self.producer, Message(topic, body, tag, keys, props))
        if not isinstance(fut, asyncio.Future):  # not on the fast path: a coroutine, which send_message would have
            fut = asyncio.ensure_future(fut)
        return fut, functools.partial(_response, message_id)

    def _send_local(self, topic: str, body: bytes, props: bytes, message_id: str) -> bytes | None:
        """Local mode: the message read by read_send_props (`props` rendered as the producer
        renders them, its UNIQ_KEY `message_id`) handed to the broker's send kernel as values
        (FastSendPath.append_values, the call LocalBroker.sender gives, made here with no layer
        between), the queue picked as the producer picks it (round robin over the route's
        writable queues, from a random start; its own count, moved only by a send taken, so a send
        declined here leaves the producer's rotation as it was), no SEND_MESSAGE_V2 frame
        rendered and parsed, no in-process delivery, no future: the OK answer's bytes, or None when
        it is not taken (the route not cached, a queue on another broker, a body the producer
        would compress, the broker not appending it at once), with nothing stored."""
        producer = self.producer
        route = producer.client.routes.peek(topic)
        if route is None or len(body) > producer.compress_over:
            return None
        hit = self._local_queues.get(topic)
        if hit is None or hit[0] is not route:
            _, queues, addrs = producer._publish_info(topic, route)
            addr = self.local.addr
            mine = bool(queues) and all(addrs.get(q.broker_name) == addr for q in queues)
            if len(self._local_queues) >= 1024:
                self._local_queues.clear()
            # [route, its queues (None: not all this broker's), the topic's bytes, the round robin's
            # next index: from a random start, as the producer's, kept across a route's refresh]
            nxt = hit[3] if hit is not None else random.randrange(max(len(queues), 1))
            hit = self._local_queues[topic] = [route, queues if mine else None, topic.encode(), nxt]
        queues = hit[1]
        sender = self._sender
        if queues is None or not sender:
            return None
        i = hit[3]
        offset = sender[0].append_values(sender[1], hit[2], queues[i % len(queues)].queue_id, body, props)
        if offset < 0:  # the round robin moves only for a send taken: the producer picks its own
            return None
        hit[3] = i + 1
        return send_ok(message_id, offset, "")

    async def _send_single(self, pm, topic: str, peer: str) -> spb.SendMessageResponse:
        """send_message of a request with one message, without the lists and gathers of a batch."""
        msg = to_remoting(pm, topic, self.config, peer)
        if self.topic_types is not None and self.topic_types.check:
            await self.topic_types.validate(topic, msg.properties)
        sp = pm.system_properties
        group = sp.message_group
        queue = None
        if group:
            try:
                queues = await self.producer.write_queues(topic)
            except Exception as e:  # noqa: BLE001 - no route: answered as a Status
                return spb.SendMessageResponse(status=status(*from_client_error(e)))
            queue = queues[queue_index_for_group(group, len(queues))]
        entry = await self._send_one(msg, sp.message_id, queue)
        return spb.SendMessageResponse(status=entry.status, entries=(entry,))

    async def _send_one(self, msg, message_id: str, queue) -> spb.SendResultEntry:
        try:
            r = await self.producer.send(msg, queue=queue)
        except Exception as e:  # noqa: BLE001 - each message's failure is its own entry
            return spb.SendResultEntry(status=status(*from_client_error(e)), message_id=message_id)
        code = _STATUS_CODE.get(r.status, Code.INTERNAL_SERVER_ERROR)
        if code != Code.OK:
            return spb.SendResultEntry(status=status(code, f"send message failed, sendStatus={r.status}"),
                                       message_id=message_id)
        tid = ""
        if msg.properties.get(TRAN_MSG) == "true":
            route = self.producer.client.routes.peek(r.queue.topic) or await self.producer.client.routes.get(r.queue.topic)
            addr = route.master_addr(r.queue.broker_name) or ""
            tid = str(TransactionId(addr, offset_of(r.offset_msg_id), r.queue_offset))
        return spb.SendResultEntry(status=status(), message_id=r.msg_id, transaction_id=tid, offset=r.queue_offset,
                                   recall_handle=r.recall_handle or "")

    async def recall_message(self, request: spb.RecallMessageRequest, context) -> spb.RecallMessageResponse:
        """RecallMessage (the Java proxy's RecallMessageActivity): RECALL_MESSAGE to the master of
        the broker the handle names; the topic must take DELAY messages (enableTopicMessageTypeCheck)."""
        topic = validate_topic(request.topic)
        if self.topic_types is not None and self.topic_types.check:
            expected = await self.topic_types.get(topic)
            if not accepts(expected, "DELAY"):
                raise ProxyError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                 f"TopicMessageType validate failed, the expected type is {expected}, but actual type "
                                 f"is DELAY")
        try:
            RecallHandle.decode(request.recall_handle)
        except BadRecallHandle as e:  # as the Java proxy answers it
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, str(e)) from None
        try:
            msg_id = await self.producer.recall(topic, request.recall_handle, timeout=2.0)
        except ResponseError as e:
            return spb.RecallMessageResponse(status=status(*from_broker_refusal(e)))
        except Exception as e:  # noqa: BLE001 - no route, no master: answered as a Status
            return spb.RecallMessageResponse(status=status(*from_client_error(e)))
        return spb.RecallMessageResponse(status=status(), message_id=msg_id)


def _response(message_id: str, done: asyncio.Future) -> spb.SendMessageResponse | bytes:
    """send_now's response from its finished future (a plain message: no transaction id); a
    stored message's as bytes (send_request.send_ok), a failure's as a message."""
    e = done.exception()
    if e is None:
        r = done.result()
        if r.status == SEND_OK:
            return send_ok(r.msg_id, r.queue_offset, r.recall_handle or "")
        code = _STATUS_CODE.get(r.status, Code.INTERNAL_SERVER_ERROR)
        entry = spb.SendResultEntry(status=status(code, f"send message failed, sendStatus={r.status}"),
                                    message_id=message_id)
    else:
        entry = spb.SendResultEntry(status=status(*from_client_error(e)), message_id=message_id)
    return spb.SendMessageResponse(status=entry.status, entries=(entry,))
