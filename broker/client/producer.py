"""Producer (RocketMQ's DefaultMQProducer): SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).

A queue is chosen round-robin over the topic's write queues; a send that fails on the wire or
with a retryable code is tried up to twice more, each time on the next queue of another broker
when there is one (selectOneMessageQueue(lastBrokerName)), and the route is refetched after a
failure. A body over 4 KiB is zlib-compressed and flagged COMPRESSED (compressMsgBodyOverHowmuch).
"""
from __future__ import annotations

import asyncio
import itertools
import random
import time
import zlib
from dataclasses import dataclass

from broker.client.client_instance import MQClientInstance
from broker.client.errors import BrokerUnreachable, ClientError, ResponseError, RouteNotFound, SendFailed
from broker.client.message import (COMPRESSED_FLAG, PROPERTY_MAX_RECONSUME_TIMES, PROPERTY_UNIQ_KEY, Message,
                                   new_uniq_key, properties_string)
from broker.client.route import MessageQueue, TopicRoute
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.message_batch import encode_batch_body

COMPRESS_OVER = 4096
COMPRESS_LEVEL = 5  # Java's zipCompressLevel default
RETRY_TIMES_WHEN_SEND_FAILED = 2
RETRY_PREFIX = "%RETRY%"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
DEFAULT_TOPIC = "TBW102"

SEND_OK, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE = (
    "SEND_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")
_SEND_STATUS = {codes.SUCCESS: SEND_OK, codes.FLUSH_DISK_TIMEOUT: FLUSH_DISK_TIMEOUT,
                codes.FLUSH_SLAVE_TIMEOUT: FLUSH_SLAVE_TIMEOUT, codes.SLAVE_NOT_AVAILABLE: SLAVE_NOT_AVAILABLE}
# DefaultMQProducer.retryResponseCodes: worth another broker; anything else is the message's fault
RETRYABLE_CODES = {codes.SYSTEM_ERROR, codes.SYSTEM_BUSY, codes.SERVICE_NOT_AVAILABLE, codes.NO_PERMISSION,
                   codes.TOPIC_NOT_EXIST}


@dataclass
class SendResult:
    status: str
    msg_id: str  # the producer's UNIQ_KEY (comma-joined for a batch)
    offset_msg_id: str  # the broker's id: store address and commit-log offset
    queue: MessageQueue
    queue_offset: int

    def __str__(self) -> str:
        return (f"{self.status} msgId={self.msg_id} offsetMsgId={self.offset_msg_id} queue={self.queue} "
                f"queueOffset={self.queue_offset}")


class Producer:
    def __init__(self, group: str, namesrv_addr: str | None = None, client: MQClientInstance | None = None,
                 retry_times: int = RETRY_TIMES_WHEN_SEND_FAILED, compress_over: int = COMPRESS_OVER,
                 default_topic_queue_nums: int = 4):
        self.group = group
        self.client = client or MQClientInstance(namesrv_addr)
        self.retry_times = retry_times
        self.compress_over = compress_over
        self.default_topic_queue_nums = default_topic_queue_nums
        self._rr: dict[str, itertools.count] = {}
        self._write_queues: dict = {}  # topic -> (route, its write queues)
        self._pending: set[asyncio.Future] = set()

    async def start(self) -> None:
        self.client.producer_groups.add(self.group)
        await self.client.start()

    async def shutdown(self) -> None:
        if self._pending:  # async sends in flight finish first
            await asyncio.gather(*self._pending, return_exceptions=True)
        self.client.producer_groups.discard(self.group)
        await self.client.shutdown()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.shutdown()

    # -- queue selection ---------------------------------------------------------------------------
    async def _queues(self, topic: str, refresh: bool = False) -> tuple[TopicRoute, list[MessageQueue]]:
        """The topic's route and its writable queues, computed once per route object."""
        route = await self.client.routes.get(topic, refresh)
        hit = self._write_queues.get(topic)
        if hit is not None and hit[0] is route:  # the same route object: its queues are unchanged
            queues = hit[1]
        else:
            queues = route.write_queues(topic)
            self._write_queues[topic] = (route, queues)
        if not queues:
            raise RouteNotFound(topic, "no writable queue on a master")
        return route, queues

    def _select(self, topic: str, queues: list[MessageQueue], avoid: str | None) -> MessageQueue:
        rr = self._rr.get(topic)
        if rr is None:
            rr = self._rr[topic] = itertools.count(random.randrange(len(queues)))
        for _ in range(len(queues)):
            mq = queues[next(rr) % len(queues)]
            if mq.broker_name != avoid:
                return mq
        return queues[next(rr) % len(queues)]

    # -- send ----------------------------------------------------------------------------------------
    async def send(self, msg: Message, timeout: float = 3.0, queue: MessageQueue | None = None) -> SendResult:
        """Send and wait for the broker's answer; SendFailed once every attempt failed. `queue`
        pins the message to one queue (Java's send(msg, mq)): every attempt goes there."""
        body, props, sys_flag, extra = self._prepare(msg)
        return await self._with_retries(
            msg.topic, lambda mq, addr, left: self._send_one(mq, addr, codes.SEND_MESSAGE_V2, msg.topic, body, props,
                                                             sys_flag, msg.flag, extra, left, props[PROPERTY_UNIQ_KEY]),
            timeout, queue)

    def send_async(self, msg: Message, timeout: float = 3.0, callback=None) -> asyncio.Future:
        """Start a send; the returned future holds its SendResult (or the SendFailed). `callback`,
        if given, is called with that future when it is done."""
        fut = asyncio.ensure_future(self.send(msg, timeout))
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)
        if callback is not None:
            fut.add_done_callback(callback)
        return fut

    async def send_oneway(self, msg: Message) -> None:
        """Send without waiting for an answer (nothing tells whether it was stored)."""
        body, props, sys_flag, extra = self._prepare(msg)
        route, queues = await self._queues(msg.topic)
        mq = self._select(msg.topic, queues, None)
        addr = route.master_addr(mq.broker_name)
        ext = self._header(mq, msg.topic, props, sys_flag, msg.flag, extra)
        await self.client.invoke_oneway(addr, RemotingCommand.request(codes.SEND_MESSAGE_V2, ext, body, oneway=True))

    async def send_batch(self, msgs: list[Message], timeout: float = 3.0,
                         queue: MessageQueue | None = None) -> SendResult:
        """All messages into one queue in one request; they must share a topic (and a flag).
        `queue` pins the batch to that queue (every attempt goes there)."""
        if not msgs:
            raise ClientError("send_batch: no messages")
        topic = msgs[0].topic
        if any(m.topic != topic for m in msgs):
            raise ClientError("send_batch: the messages of a batch must share one topic")
        if topic.startswith(RETRY_PREFIX) or any(m.delay_level > 0 for m in msgs):
            raise ClientError("send_batch: batches cannot go to a retry topic or be delayed")
        entries, keys = [], []
        for m in msgs:
            props = m.wire_properties()
            props.setdefault(PROPERTY_UNIQ_KEY, new_uniq_key())
            keys.append(props[PROPERTY_UNIQ_KEY])
            entries.append((m.body, properties_string(props).encode(), m.flag))
        body = encode_batch_body(entries)
        return await self._with_retries(
            topic, lambda mq, addr, left: self._send_one(mq, addr, codes.SEND_BATCH_MESSAGE, topic, body, None, 0,
                                                         msgs[0].flag, {"m": True}, left, ",".join(keys)),
            timeout, queue)

    # -- internals -----------------------------------------------------------------------------------
    def _prepare(self, msg: Message):
        """(body, properties, sysFlag, extra header fields) for one message."""
        props = msg.wire_properties()
        props.setdefault(PROPERTY_UNIQ_KEY, new_uniq_key())
        extra: dict = {}
        if msg.topic.startswith(RETRY_PREFIX):
            # a consumer re-publishing a failed message: the counts travel in the header, not as
            # properties (DefaultMQProducerImpl.sendKernelImpl)
            extra["j"] = int(props.pop(PROPERTY_RECONSUME_TIME, "0") or 0)
            if PROPERTY_MAX_RECONSUME_TIMES in props:
                extra["l"] = int(props.pop(PROPERTY_MAX_RECONSUME_TIMES))
        body, sys_flag = msg.body, 0
        if len(body) > self.compress_over:
            body, sys_flag = zlib.compress(body, COMPRESS_LEVEL), COMPRESSED_FLAG
        return body, props, sys_flag, extra

    def _header(self, mq: MessageQueue, topic: str, props, sys_flag: int, flag: int, extra: dict) -> dict:
        ext = {"a": self.group, "b": topic, "c": DEFAULT_TOPIC, "d": self.default_topic_queue_nums,
               "e": mq.queue_id, "f": sys_flag, "g": int(time.time() * 1000), "h": flag,
               "i": properties_string(props) if props is not None else "", "j": 0, "k": False, "m": False}
        ext.update(extra)
        return ext

    async def _send_one(self, mq, addr, code, topic, body, props, sys_flag, flag, extra, timeout, msg_id) -> SendResult:
        ext = self._header(mq, topic, props, sys_flag, flag, extra)
        r = await self.client.invoke(addr, RemotingCommand.request(code, ext, body), timeout)
        status = _SEND_STATUS.get(r.code)
        if status is None:
            raise ResponseError(r.code, r.remark, f"send to {mq} at {addr}")
        return SendResult(status, msg_id, r.get_str("msgId", ""), MessageQueue(topic, mq.broker_name,
                          r.get_int("queueId", mq.queue_id)), r.get_int("queueOffset", -1))

    async def _with_retries(self, topic: str, attempt, timeout: float, queue: MessageQueue | None = None) -> SendResult:
        deadline = time.monotonic() + timeout
        causes: list[Exception] = []
        avoid = None
        for i in range(1 + self.retry_times):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # no route (name servers unreachable, unknown topic) is raised as is: another
            # attempt would ask the same name servers the same question
            route, queues = await self._queues(topic, refresh=i > 0)
            mq = self._select(topic, queues, avoid) if queue is None else queue
            addr = route.master_addr(mq.broker_name)
            if addr is None:  # only a pinned queue can name a broker the route has no master of
                raise RouteNotFound(topic, f"queue {mq}: broker {mq.broker_name} has no master")
            try:
                return await attempt(mq, addr, left)
            except BrokerUnreachable as e:
                causes.append(e)
                avoid = mq.broker_name
            except ResponseError as e:
                causes.append(e)
                if e.code not in RETRYABLE_CODES:
                    break
                avoid = mq.broker_name
            self.client.routes.invalidate(topic)
        if not causes:
            causes.append(TimeoutError(f"send timed out after {timeout:g} s"))
        raise SendFailed(topic, causes)
