"""PushConsumer (RocketMQ's DefaultMQPushConsumer, clustering mode, concurrent listener).

Every 20 s, on start and when the broker says the group changed (NOTIFY_CONSUMER_IDS_CHANGED),
the subscribed topics' queues are shared out among the group's members (AllocateMessageQueue-
Averagely over the sorted member ids and queues). Each queue this member holds gets one task that
long-polls it and hands the messages, in queue order, to the listener: one at a time, or up to
`consume_message_batch_max_size` (RocketMQ's consumeMessageBatchMaxSize, default 1) from one pull
in one call; so the queue's consumed offset is simply "after the last batch handled", committed
every 5 s, when the queue moves to another member and on shutdown.

The listener answers for the whole list (True; False, None or an exception: all of them again
later) or, an extension of Java's ackIndex, per message: a list of as many booleans as messages,
so one failure in a batch sends back that message alone.
A message the listener fails goes back to the broker (CONSUMER_SEND_MSG_BACK)
to come again later through %RETRY%<group>, which this consumer subscribes to itself; if the broker
cannot take it back it is re-published to %RETRY%<group>, and if that fails too it is retried here.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Awaitable, Callable

from broker.client import api
from broker.client.client_instance import MQClientInstance
from broker.client.errors import ClientError, RouteNotFound
from broker.client.message import (PROPERTY_MAX_RECONSUME_TIMES, PROPERTY_RETRY_TOPIC, Message, MessageExt)
from broker.client.producer import PROPERTY_RECONSUME_TIME, RETRY_PREFIX, Producer
from broker.client.route import MessageQueue
from broker.kernels.codec import java_string_hash
from broker.remoting import codes

log = logging.getLogger("client.consumer")

Listener = Callable[[list[MessageExt]], "bool | list[bool] | Awaitable[bool | list[bool]]"]

REBALANCE_INTERVAL = 20.0
PERSIST_INTERVAL = 5.0
SUSPEND_MILLIS = 15_000
PULL_DELAY_ON_EXCEPTION = 1.0  # Java waits 3 s; a test broker restarting is back sooner
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
MAX_CONSUME_BATCH = 1024  # DefaultMQPushConsumer's checkConfig bound of consumeMessageBatchMaxSize


def allocate_averagely(client_id: str, cids: list[str], mqs: list[MessageQueue]) -> list[MessageQueue]:
    """AllocateMessageQueueAveragely: contiguous runs, the first len(mqs) % len(cids) members one more."""
    if client_id not in cids or not mqs:
        return []
    index, n, m = cids.index(client_id), len(mqs), len(cids)
    mod = n % m
    if n <= m:
        size = 1
    else:
        size = n // m + 1 if mod > 0 and index < mod else n // m
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [mqs[(start + i) % n] for i in range(min(size, n - start))]


class PushConsumer:
    def __init__(self, group: str, namesrv_addr: str | None = None, max_reconsume_times: int = 16,
                 consume_from_first: bool = False, client: MQClientInstance | None = None, pull_batch_size: int = 32,
                 rebalance_interval: float = REBALANCE_INTERVAL, persist_interval: float = PERSIST_INTERVAL,
                 suspend_ms: int = SUSPEND_MILLIS, consume_message_batch_max_size: int = 1):
        if not 1 <= consume_message_batch_max_size <= MAX_CONSUME_BATCH:
            raise ClientError(f"consumeMessageBatchMaxSize {consume_message_batch_max_size} out of range "
                              f"[1, {MAX_CONSUME_BATCH}]")
        self.group = group
        self.client = client or MQClientInstance(namesrv_addr)
        self.max_reconsume_times = max_reconsume_times
        self.consume_from_first = consume_from_first
        self.pull_batch_size = pull_batch_size
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.rebalance_interval = rebalance_interval
        self.persist_interval = persist_interval
        self.suspend_ms = suspend_ms
        self.subscriptions: dict[str, str] = {}
        self.listener: Listener | None = None
        self.offsets: dict[MessageQueue, int] = {}  # next offset to consume, per held queue
        self._committed: dict[MessageQueue, int] = {}
        self._workers: dict[MessageQueue, asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []
        self._wakeup: asyncio.Event | None = None
        self._rebalance_lock: asyncio.Lock | None = None
        self._retry_producer: Producer | None = None
        self._sub_version = 0
        self.running = False

    # -- setup -------------------------------------------------------------------------------------
    def subscribe(self, topic: str, sub_expression: str = "*") -> None:
        self.subscriptions[topic] = sub_expression or "*"

    def register(self, listener: Listener) -> None:
        """listener(messages) → True when consumed; False or an exception: deliver again later; or a
        list of one such answer per message."""
        self.listener = listener

    @property
    def assigned_queues(self) -> set[MessageQueue]:
        return set(self._workers)

    async def start(self) -> None:
        if self.listener is None:
            raise ClientError("register a listener before starting the consumer")
        if not self.subscriptions:
            raise ClientError("subscribe to a topic before starting the consumer")
        self.subscriptions.setdefault(RETRY_PREFIX + self.group, "*")
        self._sub_version = int(time.time() * 1000)
        self._wakeup = asyncio.Event()
        self._rebalance_lock = asyncio.Lock()
        self._retry_producer = Producer(INNER_PRODUCER_GROUP, client=self.client)
        self.client.consumers[self.group] = self
        await self.client.start()
        self.running = True
        try:
            for topic in self.subscriptions:  # the heartbeat goes to the brokers of these routes
                try:
                    await self.client.routes.get(topic)
                except RouteNotFound as e:
                    log.warning("%s: %s (will look again at the next rebalance)", self.group, e)
            await self.client.send_heartbeat()
            await self.rebalance()
        except BaseException:  # no name server, say: leave nothing running behind the error
            self.running = False
            for mq in list(self._workers):
                self._workers.pop(mq).cancel()
            self.client.consumers.pop(self.group, None)
            await self.client.shutdown()
            raise
        self._tasks = [asyncio.ensure_future(self._rebalance_loop()), asyncio.ensure_future(self._persist_loop())]

    async def shutdown(self) -> None:
        if not self.running:
            return
        self.running = False
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for mq in list(self._workers):
            await self._stop_worker(mq)
        self.client.consumers.pop(self.group, None)
        await self.client.unregister(consumer_group=self.group)
        await self.client.shutdown()

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.shutdown()

    def consumer_data(self) -> dict:
        """This group's entry of the heartbeat's consumerDataSet."""
        subs = []
        for topic, expr in sorted(self.subscriptions.items()):
            tags = sorted(api.parse_tags(expr) or [])
            subs.append({"topic": topic, "subString": expr, "tagsSet": tags,
                         "codeSet": [java_string_hash(t.encode()) for t in tags], "subVersion": self._sub_version,
                         "classFilterMode": False, "expressionType": "TAG"})
        return {"groupName": self.group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET" if self.consume_from_first
                else "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": subs, "unitMode": False}

    # -- rebalance ---------------------------------------------------------------------------------
    def rebalance_soon(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    async def _rebalance_loop(self) -> None:
        # `running` ends the loop, not only the cancel: 3.11's wait_for swallows a cancel that
        # meets the event being set (a member leaving notifies us as we shut down too)
        while self.running:
            try:
                await asyncio.wait_for(self._wakeup.wait(), self.rebalance_interval)
            except asyncio.TimeoutError:
                pass
            self._wakeup.clear()
            if not self.running:
                return
            try:
                await self.rebalance()
            except ClientError as e:
                log.warning("%s: rebalance failed: %s", self.group, e)

    async def rebalance(self) -> None:
        async with self._rebalance_lock:
            wanted: set[MessageQueue] = set()
            for topic in list(self.subscriptions):
                try:
                    route = await self.client.routes.get(topic)
                except RouteNotFound:
                    continue
                queues = route.read_queues(topic)
                addrs = sorted(route.broker_addrs().values())
                if not queues or not addrs:
                    continue
                cids = sorted(await api.consumer_ids(self.client, addrs[0], self.group))
                wanted.update(allocate_averagely(self.client.client_id, cids, queues))
            for mq in [mq for mq in self._workers if mq not in wanted]:
                await self._stop_worker(mq)
            for mq in sorted(wanted - set(self._workers)):
                if self.running:
                    self._workers[mq] = asyncio.ensure_future(self._pull_loop(mq))
            if wanted:
                log.debug("%s: %s holds %s", self.group, self.client.client_id, sorted(map(str, wanted)))

    async def _stop_worker(self, mq: MessageQueue) -> None:
        """Stop pulling a queue and commit what was consumed of it, before another member takes it."""
        task = self._workers.pop(mq)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await self._commit(mq)
        self.offsets.pop(mq, None)
        self._committed.pop(mq, None)

    # -- offsets -----------------------------------------------------------------------------------
    async def _addr(self, mq: MessageQueue) -> str:
        addr = (await self.client.routes.get(mq.topic)).master_addr(mq.broker_name)
        if addr is None:
            addr = (await self.client.routes.get(mq.topic, refresh=True)).master_addr(mq.broker_name)
        if addr is None:
            raise RouteNotFound(mq.topic, f"broker {mq.broker_name} has no master")
        return addr

    async def _initial_offset(self, mq: MessageQueue) -> int:
        """The committed offset; with none: a retry topic from 0, else from the first message
        (consume_from_first) or from the end (CONSUME_FROM_LAST_OFFSET)."""
        addr = await self._addr(mq)
        last = await api.query_consumer_offset(self.client, addr, self.group, mq)
        if last >= 0:
            return last
        if mq.topic.startswith(RETRY_PREFIX):
            return 0
        code = codes.GET_MIN_OFFSET if self.consume_from_first else codes.GET_MAX_OFFSET
        return await api.queue_offset(self.client, addr, mq, code)

    async def _commit(self, mq: MessageQueue) -> None:
        offset = self.offsets.get(mq)
        if offset is None or self._committed.get(mq) == offset:
            return
        try:
            await api.update_consumer_offset(self.client, await self._addr(mq), self.group, mq, offset)
            self._committed[mq] = offset
        except ClientError as e:
            log.warning("%s: commit of %s at %d failed: %s", self.group, mq, offset, e)

    async def persist_offsets(self) -> None:
        await asyncio.gather(*(self._commit(mq) for mq in list(self.offsets)))

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(self.persist_interval)
            await self.persist_offsets()

    # -- pulling and consuming ---------------------------------------------------------------------
    async def _pull(self, mq: MessageQueue, offset: int, expr: str) -> api.PullResult:
        return await api.pull(self.client, await self._addr(mq), self.group, mq, offset, self.pull_batch_size, expr,
                              self.suspend_ms, commit_offset=self._committed.get(mq, -1))

    async def _pull_loop(self, mq: MessageQueue) -> None:
        expr = self.subscriptions.get(mq.topic, "*")
        offset = None
        ahead: asyncio.Future | None = None  # the next pull, in flight while a result is consumed
        try:
            while True:
                try:
                    if offset is None:
                        offset = await self._initial_offset(mq)
                        self.offsets[mq] = offset
                    if ahead is None:
                        ahead = asyncio.ensure_future(self._pull(mq, offset, expr))
                    pulled, ahead = ahead, None
                    res = await pulled
                except ClientError as e:
                    log.warning("%s: pull of %s failed: %s", self.group, mq, e)
                    await asyncio.sleep(PULL_DELAY_ON_EXCEPTION)
                    continue
                if res.status == api.FOUND:
                    # as Java's pull service runs ahead of its consume threads: the listener's time
                    # (a database transaction, say) and the next pull's round trip overlap
                    ahead = asyncio.ensure_future(self._pull(mq, res.next_begin_offset, expr))
                    msgs, step = res.messages, self.consume_message_batch_max_size
                    for i in range(0, len(msgs), step):
                        batch = msgs[i:i + step]
                        await self._consume(mq, batch)
                        self.offsets[mq] = batch[-1].queue_offset + 1
                offset = res.next_begin_offset
                self.offsets[mq] = offset  # past messages the tag filter dropped, too
                if res.status == api.OFFSET_ILLEGAL:
                    log.warning("%s: offset of %s moved to %d", self.group, mq, offset)
                    await self._commit(mq)
        finally:
            if ahead is not None:
                ahead.cancel()
                await asyncio.gather(ahead, return_exceptions=True)

    async def _consume(self, mq: MessageQueue, msgs: list[MessageExt]) -> None:
        if mq.topic.startswith(RETRY_PREFIX):
            for msg in msgs:
                if msg.retry_topic:
                    msg.topic = msg.retry_topic  # the listener sees the topic it subscribed to, as in Java
        while True:
            try:
                result = self.listener(msgs)
                if inspect.isawaitable(result):
                    result = await result
                oks = _statuses(result, len(msgs))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: listener failed on %s", self.group, ", ".join(m.msg_id for m in msgs))
                oks = [False] * len(msgs)
            msgs = [m for m, ok in zip(msgs, oks) if not ok and not await self._send_back(mq, m)]
            if not msgs:
                return
            await asyncio.sleep(PULL_DELAY_ON_EXCEPTION)  # nowhere to put them back: consume them again here

    async def _send_back(self, mq: MessageQueue, msg: MessageExt) -> bool:
        try:
            await api.send_back(self.client, await self._addr(mq), self.group, msg, self.max_reconsume_times)
            return True
        except ClientError as e:
            log.warning("%s: send back of %s failed (%s); re-publishing to the retry topic", self.group, msg.msg_id, e)
        props = dict(msg.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        props[PROPERTY_RECONSUME_TIME] = str(msg.reconsume_times + 1)
        props[PROPERTY_MAX_RECONSUME_TIMES] = str(self.max_reconsume_times)
        retry = Message(RETRY_PREFIX + self.group, msg.body, properties=props, delay_level=3 + msg.reconsume_times,
                        flag=msg.flag)
        try:
            await self._retry_producer.send(retry)
            return True
        except ClientError as e:
            log.warning("%s: re-publishing %s failed: %s", self.group, msg.msg_id, e)
            return False


def _statuses(result, n: int) -> list[bool]:
    """The listener's answer as one boolean per message. None counts as "later", as Java's null
    ConsumeConcurrentlyStatus."""
    if isinstance(result, (list, tuple)):
        if len(result) != n:
            raise ClientError(f"listener answered {len(result)} statuses for {n} messages")
        return [bool(r) for r in result]
    return [bool(result)] * n
