"""Producer (RocketMQ's DefaultMQProducer): SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).

A queue is chosen round-robin over the topic's write queues; a send that fails on the wire or
with a retryable code is tried up to twice more, each time on the next queue of another broker
when there is one (selectOneMessageQueue(lastBrokerName)), and the route is refetched after a
failure. A body over 4 KiB is zlib-compressed and flagged COMPRESSED (compressMsgBodyOverHowmuch).

Sends are pipelined: a request is rendered by the client kernel (broker.kernels.client_codec)
straight into its connection's write buffer, which leaves at the end of the loop turn with the
other requests of that turn, and its answer resolves a future from the connection's per-read loop.
When the topic's route is cached and its brokers connected (every send but a topic's first),
send() is no coroutine: one C call (the topic's FastTopic, client_codec.pyx) picks the queue,
renders the request and keeps it in the connection's SendSlots, and send() returns the future
that the connection's reply reader completes in C with the SendResult (its slots filled in C);
no task, no timer and no Python object of ours per send (send_async makes none either). A pinned queue, a body to compress, a retry topic and a producer whose _body adds
flags (transactions) take the coroutine path, which still awaits only the answer when it can.
Retries take the general path (route refetched, connection awaited), and keep the message's
UNIQ_KEY.
"""
from __future__ import annotations

import asyncio
import functools
import itertools
import random
import time
import zlib
from dataclasses import dataclass
from typing import Awaitable

from broker.client.client_instance import MQClientInstance
from broker.client.errors import BrokerUnreachable, ClientError, ResponseError, RouteNotFound, SendFailed
from broker.client.message import COMPRESSED_FLAG, PROPERTY_MAX_RECONSUME_TIMES, Message
from broker.client.route import MessageQueue, TopicRoute
from broker.kernels.client_codec import FastTopic, Reply, render_batch, render_send, send_result_setup
from broker.common.recall_handle import BadRecallHandle, RecallHandle
from broker.remoting import codes
from broker.remoting.command import RemotingCommand

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


@dataclass(slots=True)
class SendResult:
    status: str
    msg_id: str  # the producer's UNIQ_KEY (comma-joined for a batch)
    offset_msg_id: str  # the broker's id: store address and commit-log offset
    queue: MessageQueue
    queue_offset: int
    recall_handle: str | None = None  # a timer message's: what Producer.recall takes back

    def __str__(self) -> str:
        return (f"{self.status} msgId={self.msg_id} offsetMsgId={self.offset_msg_id} queue={self.queue} "
                f"queueOffset={self.queue_offset}")


send_result_setup(SendResult, _SEND_STATUS)


def _retry_counts(props: dict) -> tuple[dict, int, int]:
    """A consumer re-publishing a failed message: the counts travel in the header (j, l), not as
    properties (DefaultMQProducerImpl.sendKernelImpl)."""
    props = dict(props)
    reconsume = int(props.pop(PROPERTY_RECONSUME_TIME, "0") or 0)
    max_reconsume = int(props.pop(PROPERTY_MAX_RECONSUME_TIMES)) if PROPERTY_MAX_RECONSUME_TIMES in props else -1
    return props, reconsume, max_reconsume


class Producer:
    # SendSlots renders a body as Producer._body makes it (plain, or compressed, sysFlag 0 or the
    # compressed flag): a subclass whose _body adds flags is kept off the fast path, unless it says
    # here that its send() keeps the messages that get them off it (ProxyProducer's half messages)
    fast_bodies = False

    def __init__(self, group: str, namesrv_addr: str | None = None, client: MQClientInstance | None = None,
                 retry_times: int = RETRY_TIMES_WHEN_SEND_FAILED, compress_over: int = COMPRESS_OVER,
                 default_topic_queue_nums: int = 4):
        self._fast: dict[str, FastTopic] = {}  # topic -> its sends kept in C (the kernel's FastTopic)
        self.group = group
        self.client = client or MQClientInstance(namesrv_addr)
        self.retry_times = retry_times
        self.compress_over = compress_over
        self.default_topic_queue_nums = default_topic_queue_nums
        self._rr: dict[str, itertools.count] = {}
        # topic -> (route, its write queues, brokerName -> master address), computed once per route object
        self._write_queues: dict[str, tuple[TopicRoute, list[MessageQueue], dict[str, str]]] = {}
        self._pending: set[asyncio.Future] = set()

    # a FastTopic holds the group and the two numbers as they were when it was made: a change drops them
    @property
    def group(self) -> str:
        return self._group

    @group.setter
    def group(self, value: str) -> None:
        self._group = value
        self._fast.clear()

    @property
    def compress_over(self) -> int:
        return self._compress_over

    @compress_over.setter
    def compress_over(self, value: int) -> None:
        self._compress_over = value
        self._fast.clear()

    @property
    def default_topic_queue_nums(self) -> int:
        return self._default_topic_queue_nums

    @default_topic_queue_nums.setter
    def default_topic_queue_nums(self, value: int) -> None:
        self._default_topic_queue_nums = value
        self._fast.clear()

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
    def _publish_info(self, topic: str, route: TopicRoute) -> tuple[TopicRoute, list[MessageQueue], dict[str, str]]:
        hit = self._write_queues.get(topic)
        if hit is None or hit[0] is not route:  # a new route object: its queues may have changed
            hit = self._write_queues[topic] = (route, route.write_queues(topic), route.broker_addrs())
        return hit

    async def _queues(self, topic: str, refresh: bool = False) -> tuple[TopicRoute, list[MessageQueue]]:
        """The topic's route and its writable queues."""
        route, queues, _ = self._publish_info(topic, await self.client.routes.get(topic, refresh))
        if not queues and not refresh:
            # as the Java client's tryToFindTopicPublishInfo: a cached route with no writable
            # queue (fetched while a broker had no master, e.g. during a DLedger failover) is
            # asked again at once, not kept for the route's 30 s
            route, queues, _ = self._publish_info(topic, await self.client.routes.get(topic, True))
        if not queues:
            raise RouteNotFound(topic, "no writable queue on a master")
        return route, queues

    async def write_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues, in the order queue selection indexes them (a front picks
        a FIFO group's queue by index)."""
        return (await self._queues(topic))[1]

    async def recall(self, topic: str, recall_handle: str, timeout: float = 3.0) -> str:
        """Take back a timer message before its time (RocketMQ 5.3's recallMessage): RECALL_MESSAGE
        to the master of the broker its handle names. Returns the message's id; ResponseError for
        a refusal (ILLEGAL_OPERATION for a handle that is not one, or a time already come)."""
        try:
            broker_name = RecallHandle.decode(recall_handle).broker_name
        except BadRecallHandle as e:
            raise ResponseError(codes.ILLEGAL_OPERATION, str(e), f"recall of {topic}") from None
        route = await self.client.routes.get(topic)
        addr = route.master_addr(broker_name)
        if addr is None:
            raise RouteNotFound(topic, f"no master of {broker_name}")
        r = await self.client.invoke(addr, RemotingCommand.request(codes.RECALL_MESSAGE, {
            "topic": topic, "recallHandle": recall_handle, "producerGroup": self.group}), timeout)
        if r.code != codes.SUCCESS:
            raise ResponseError(r.code, r.remark, f"recall of {topic} at {addr}")
        return r.get_str("msgId", "")

    def _select(self, topic: str, queues: list[MessageQueue], avoid: str | None) -> MessageQueue:
        rr = self._rr.get(topic)
        if rr is None:
            rr = self._rr[topic] = itertools.count(random.randrange(len(queues)))
        if avoid is None:
            return queues[next(rr) % len(queues)]
        for _ in range(len(queues)):
            mq = queues[next(rr) % len(queues)]
            if mq.broker_name != avoid:
                return mq
        return queues[next(rr) % len(queues)]

    def _target_now(self, topic: str, queue: MessageQueue | None):
        """(queue, master address, open connection) when all three are known without waiting;
        None when the route is not cached (or stale), has no writable queue or no master for the
        queue, or the broker is not connected yet: the general path deals with those."""
        route = self.client.routes.peek(topic)
        if route is None:
            return None
        _, queues, addrs = self._publish_info(topic, route)
        if queue is None:
            if not queues:
                return None
            queue = self._select(topic, queues, None)
        addr = addrs.get(queue.broker_name)
        if addr is None:
            return None
        ch = self.client.channel_now(addr)
        if ch is None:
            return None
        return queue, addr, ch

    # -- send ----------------------------------------------------------------------------------------
    def _body(self, msg: Message) -> tuple[bytes, int]:
        if len(msg.body) > self.compress_over:
            return zlib.compress(msg.body, COMPRESS_LEVEL), COMPRESSED_FLAG
        return msg.body, 0

    def _render(self, ch, opaque: int, oneway: bool, msg: Message, mq: MessageQueue, body, sys_flag: int,
                uniq: str | None) -> str:
        props, reconsume, max_reconsume = msg.properties, 0, -1
        if msg.topic.startswith(RETRY_PREFIX):
            props, reconsume, max_reconsume = _retry_counts(props)
        return render_send(ch.out, opaque, oneway, self.group, msg.topic, self.default_topic_queue_nums, mq.queue_id,
                           sys_flag, msg.flag, body, msg.tags, msg.keys, props, msg.delay_level, reconsume,
                           max_reconsume, uniq)

    def _result(self, r, topic: str, mq: MessageQueue, addr: str, msg_id: str) -> SendResult:
        """The broker's answer to a send as a SendResult; ResponseError for a failure code."""
        if type(r) is Reply:
            status = _SEND_STATUS.get(r.code)
            if status is None:
                raise ResponseError(r.code, r.remark, f"send to {mq} at {addr}")
            qid, qo, offset_id, recall = r.queue_id, r.queue_offset, r.msg_id, r.recall_handle
        else:  # a frame the kernel handed back: read as a RemotingCommand
            status = _SEND_STATUS.get(r.code)
            if status is None:
                raise ResponseError(r.code, r.remark, f"send to {mq} at {addr}")
            qid, qo, offset_id = r.get_int("queueId", mq.queue_id), r.get_int("queueOffset", -1), r.get_str("msgId", "")
            recall = r.get_str("recallHandle", "") or None
        if (qid is not None and qid != mq.queue_id) or mq.topic != topic:
            mq = MessageQueue(topic, mq.broker_name, mq.queue_id if qid is None else qid)
        return SendResult(status, msg_id, offset_id or "", mq, -1 if qo is None else qo, recall)

    def _failure(self, e: BaseException, addr: str, ch, code: int, timeout: float) -> ClientError:
        """An attempt's failure as the error the retry loop weighs (transport: BrokerUnreachable)."""
        if isinstance(e, asyncio.TimeoutError):  # before OSError: TimeoutError is one
            return BrokerUnreachable(addr, f"no answer to request code {code} within {timeout:g} s")
        if isinstance(e, OSError):
            self.client._drop(addr, ch)
            return BrokerUnreachable(addr, str(e) or type(e).__name__)
        return e

    def send(self, msg: Message, timeout: float = 3.0, queue: MessageQueue | None = None) -> Awaitable[SendResult]:
        """Send; await what it returns for the broker's answer as a SendResult (SendFailed once
        every attempt failed). `queue` pins the message to one queue (Java's send(msg, mq)):
        every attempt goes there. The request is rendered at once (not when awaited); when the
        topic's route is cached and its brokers connected, the awaitable is a future its answer
        completes in C (SendSlots), otherwise a coroutine."""
        if queue is None:  # _send_fast written out: a call less a send
            fast = self._fast.get(msg.topic)
            fut = False if fast is None else fast.submit(msg, timeout)
            if fut:
                return fut
            if fut is False:  # none yet, or stale: made again from the route cache, if it can be
                fut = self._send_fast_again(msg, timeout)
                if fut:
                    return fut
        return self._send(msg, timeout, queue)

    def _send_fast(self, msg: Message, timeout: float) -> asyncio.Future | None:
        """A send kept in C (FastTopic.submit) when the topic's route is cached and fresh and its
        brokers connected: the future its answer completes; None otherwise, nothing sent."""
        fast = self._fast.get(msg.topic)
        fut = False if fast is None else fast.submit(msg, timeout)
        if fut is False:
            return self._send_fast_again(msg, timeout)
        return fut

    def _send_fast_again(self, msg: Message, timeout: float) -> asyncio.Future | None:
        """The send of a topic whose FastTopic is missing or stale: a new one when the route cache
        allows (_fast_topic), and the send submitted to it; None when it does not take it."""
        fast = self._fast_topic(msg.topic)
        if fast is None:
            return None
        fut = fast.submit(msg, timeout)
        if fut is False:  # the connection closed, or the route is stale: the general path refetches
            self._fast.pop(msg.topic, None)
            return None
        return fut

    def _fast_topic(self, topic: str) -> FastTopic | None:
        """The topic's fast sends when its route is cached and fresh, with writable queues all on
        connected brokers; None otherwise: for a retry topic, whose counts travel in the header, and
        for a producer whose _body sets other flags (a TransactionProducer's half messages), as
        SendSlots renders the body as it is with sysFlag 0."""
        self._fast.pop(topic, None)
        routes = self.client.routes
        hit = routes.routes.get(topic)
        if hit is None or topic.startswith(RETRY_PREFIX) or not (self.fast_bodies or type(self)._body is Producer._body):
            return None
        left = routes.ttl - (time.monotonic() - hit[1])
        if left <= 0:
            return None
        _, queues, addrs = self._publish_info(topic, hit[0])
        targets = []
        for mq in queues:
            ch = self.client.channel_now(addrs.get(mq.broker_name, ""))
            if ch is None:
                return None
            targets.append((mq, mq.queue_id, ch))
        if not targets:
            return None
        rr = self._rr.get(topic)
        if rr is None:
            rr = self._rr[topic] = itertools.count(random.randrange(len(queues)))
        fast = self._fast[topic] = FastTopic(self, self.group, self.default_topic_queue_nums, self.compress_over,
                                             routes.routes, topic, hit, targets[0][2]._loop.time() + left, targets, rr)
        return fast

    def _send_answer(self, fut: asyncio.Future, answer, msg: Message, mq: MessageQueue, uniq: str, ch,
                     deadline: float, timeout: float) -> None:
        """A fast send's answer that is no plain success (SendSlots): a failure code, another
        queue, a frame only Python reads, a timeout or a closed connection (an exception). Read as
        _result reads it; a retryable failure retries on another broker as send() does."""
        if fut.done():  # the caller cancelled it
            return
        addr = next((a for a, c in self.client.conns.items() if c is ch), ch.peer)
        try:
            if isinstance(answer, BaseException):
                raise answer
            fut.set_result(self._result(answer, msg.topic, mq, addr, uniq))
            return
        except (OSError, ResponseError) as e:
            cause = self._failure(e, addr, ch, codes.SEND_MESSAGE_V2, timeout)
        except Exception as e:  # noqa: BLE001 - the caller's future gets it, not the connection's read
            fut.set_exception(e)
            return
        if isinstance(cause, ResponseError) and cause.code not in RETRYABLE_CODES:
            fut.set_exception(SendFailed(msg.topic, [cause]))
            return
        self.client.routes.invalidate(msg.topic)
        self._fast.pop(msg.topic, None)
        body, sys_flag = self._body(msg)
        retry = asyncio.ensure_future(self._send_attempts(
            msg, body, sys_flag, time.monotonic() + (deadline - ch._loop.time()), timeout, None, [cause],
            mq.broker_name, 1, uniq))
        retry.add_done_callback(functools.partial(_chain, fut))

    async def _send(self, msg: Message, timeout: float, queue: MessageQueue | None) -> SendResult:
        """send() by the channel's Python: a pinned queue, a topic's first sends, a retry topic."""
        deadline = time.monotonic() + timeout
        body, sys_flag = self._body(msg)
        target = self._target_now(msg.topic, queue)
        if target is None:
            return await self._send_attempts(msg, body, sys_flag, deadline, timeout, queue, [], None, 0, None)
        mq, addr, ch = target
        opaque, fut = ch.fast_request(timeout)
        try:
            uniq = self._render(ch, opaque, False, msg, mq, body, sys_flag, None)
        except BaseException:
            ch.forget(opaque)
            raise
        try:
            return self._result(await fut, msg.topic, mq, addr, uniq)
        except (OSError, ResponseError) as e:
            cause = self._failure(e, addr, ch, codes.SEND_MESSAGE_V2, timeout)
        if isinstance(cause, ResponseError) and cause.code not in RETRYABLE_CODES:
            raise SendFailed(msg.topic, [cause])
        self.client.routes.invalidate(msg.topic)
        return await self._send_attempts(msg, body, sys_flag, deadline, timeout, queue, [cause], mq.broker_name, 1,
                                         uniq)

    async def _send_attempts(self, msg: Message, body, sys_flag: int, deadline: float, timeout: float,
                             queue: MessageQueue | None, causes: list, avoid: str | None, first: int,
                             uniq: str | None) -> SendResult:
        """Attempts `first`.. of one send by the general path (the route fetched when needed, the
        connection awaited)."""
        state = [uniq]

        def start(ch, opaque, mq):
            state[0] = self._render(ch, opaque, False, msg, mq, body, sys_flag, state[0])

        def finish(r, mq, addr):
            return self._result(r, msg.topic, mq, addr, state[0])
        return await self._attempts(msg.topic, codes.SEND_MESSAGE_V2, deadline, timeout, queue, start, finish, causes,
                                    avoid, first)

    async def _attempts(self, topic: str, code: int, deadline: float, timeout: float, queue: MessageQueue | None,
                        start, finish, causes: list, avoid: str | None, first: int) -> SendResult:
        """The retry loop (DefaultMQProducerImpl.sendDefaultImpl): start(channel, opaque, queue)
        renders an attempt, finish(answer, queue, address) reads its answer."""
        for i in range(first, 1 + self.retry_times):
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
                ch = await self.client.connection(addr)
                try:
                    # the connection may have closed before this coroutine resumed (a broker killed
                    # as it accepted): ConnectionClosed here is that broker's failure, weighed and
                    # retried as any other, not the caller's
                    opaque, fut = ch.fast_request(left)
                except OSError as e:
                    raise self._failure(e, addr, ch, code, left) from None
                try:
                    start(ch, opaque, mq)
                except BaseException:
                    ch.forget(opaque)
                    raise
                try:
                    return finish(await fut, mq, addr)
                except (OSError, ResponseError) as e:
                    raise self._failure(e, addr, ch, code, left) from None
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

    def send_async(self, msg: Message, timeout: float = 3.0, callback=None) -> asyncio.Future:
        """Start a send; the returned future holds its SendResult (or the SendFailed). `callback`,
        if given, is called with that future when it is done. No task is made for it: its first
        attempt's answer completes the future from the connection's read (a retry, and a topic's
        very first send, run as a task)."""
        out = self._send_fast(msg, timeout)
        if out is None:
            out = self._send_async_by_python(msg, timeout)
        self._pending.add(out)
        out.add_done_callback(self._pending.discard)
        if callback is not None:
            out.add_done_callback(callback)
        return out

    def _send_async_by_python(self, msg: Message, timeout: float) -> asyncio.Future:
        """send_async's send when _send_fast does not take it (a compressed body, a topic's first)."""
        body, sys_flag = self._body(msg)
        target = self._target_now(msg.topic, None)
        if target is None:
            return asyncio.ensure_future(self._send_attempts(msg, body, sys_flag, time.monotonic() + timeout, timeout,
                                                             None, [], None, 0, None))
        mq, addr, ch = target
        out = ch._loop.create_future()
        opaque, fut = ch.fast_request(timeout)
        try:
            uniq = self._render(ch, opaque, False, msg, mq, body, sys_flag, None)
        except BaseException:
            ch.forget(opaque)
            raise
        fut.add_done_callback(functools.partial(self._async_answer, out, msg, body, sys_flag, mq, addr, ch, uniq,
                                                time.monotonic() + timeout, timeout))
        return out

    def _async_answer(self, out: asyncio.Future, msg: Message, body, sys_flag: int, mq: MessageQueue, addr: str,
                      ch, uniq: str, deadline: float, timeout: float, fut: asyncio.Future) -> None:
        if out.done():  # the caller cancelled it
            return
        try:
            out.set_result(self._result(fut.result(), msg.topic, mq, addr, uniq))
            return
        except (OSError, ResponseError) as e:
            cause = self._failure(e, addr, ch, codes.SEND_MESSAGE_V2, timeout)
        if isinstance(cause, ResponseError) and cause.code not in RETRYABLE_CODES:
            out.set_exception(SendFailed(msg.topic, [cause]))
            return
        self.client.routes.invalidate(msg.topic)
        retry = asyncio.ensure_future(self._send_attempts(msg, body, sys_flag, deadline, timeout, None, [cause],
                                                          mq.broker_name, 1, uniq))
        retry.add_done_callback(functools.partial(_chain, out))

    async def send_oneway(self, msg: Message) -> None:
        """Send without waiting for an answer (nothing tells whether it was stored)."""
        body, sys_flag = self._body(msg)
        target = self._target_now(msg.topic, None)
        if target is None:
            route, queues = await self._queues(msg.topic)
            mq = self._select(msg.topic, queues, None)
            addr = route.master_addr(mq.broker_name)
            if addr is None:
                raise RouteNotFound(msg.topic, f"queue {mq}: broker {mq.broker_name} has no master")
            ch = await self.client.connection(addr)
        else:
            mq, _, ch = target
        self._render(ch, ch.fast_oneway(), True, msg, mq, body, sys_flag, None)

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
        msgs = list(msgs)
        state: list = [None]

        def start(ch, opaque, mq):
            state[0] = render_batch(ch.out, opaque, self.group, topic, self.default_topic_queue_nums, mq.queue_id,
                                    msgs[0].flag, msgs, state[0])

        def finish(r, mq, addr):
            return self._result(r, topic, mq, addr, ",".join(state[0]))
        return await self._attempts(topic, codes.SEND_BATCH_MESSAGE, time.monotonic() + timeout, timeout, queue,
                                    start, finish, [], None, 0)


def _chain(out: asyncio.Future, task: asyncio.Future) -> None:
    if out.done():
        return
    if task.cancelled():
        out.cancel()
    elif task.exception() is not None:
        out.set_exception(task.exception())
    else:
        out.set_result(task.result())
