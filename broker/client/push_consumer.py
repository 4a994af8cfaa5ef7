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

Orderly (orderly=True, MessageListenerOrderly): each queue's messages reach the listener one at a
time in queue order, and a message the listener fails is not sent back but suspended and offered
again in place (SUSPEND_CURRENT_QUEUE_A_MOMENT, after suspend_current_queue_time_millis), its
reconsume_times counting up; past max_reconsume_times (unlimited unless set, as Java's -1) it is
re-published to %RETRY%<group> with that count, which the broker turns into %DLQ%<group>, and the
queue moves on. In clustering mode a queue is consumed only while this client holds its broker
lock (broker.client.rebalance_lock); a queue lost in a rebalance finishes the message in hand,
commits its offset and is unlocked, so the next holder starts exactly after it.

Broadcasting (message_model="BROADCASTING"): every member takes every queue, failed messages are
dropped (as Java's concurrent listener does there), and the offsets are the member's own, in a
local file (broker.client.local_offset_store) instead of the broker.
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
from broker.client.local_offset_store import LocalFileOffsetStore
from broker.client.message import (PROPERTY_MAX_RECONSUME_TIMES, PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC,
                                   Message, MessageExt)
from broker.client.offset_store import OffsetStore, RemoteBrokerOffsetStore
from broker.client.process_queue import REBALANCE_LOCK_INTERVAL, REBALANCE_LOCK_MAX_LIVE_TIME, ProcessQueue
from broker.client.producer import PROPERTY_RECONSUME_TIME, RETRY_PREFIX, Producer
from broker.client.rebalance_lock import RebalanceLock
from broker.client.route import MessageQueue
from broker.kernels.codec import java_string_hash
from broker.remoting import codes

log = logging.getLogger("client.consumer")

Listener = Callable[[list[MessageExt]], "bool | list[bool] | Awaitable[bool | list[bool]]"]

CLUSTERING, BROADCASTING = "CLUSTERING", "BROADCASTING"  # MessageModel
REBALANCE_INTERVAL = 20.0
PERSIST_INTERVAL = 5.0
SUSPEND_MILLIS = 15_000
PULL_DELAY_ON_EXCEPTION = 1.0  # Java waits 3 s; a test broker restarting is back sooner
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
MAX_CONSUME_BATCH = 1024  # DefaultMQPushConsumer's checkConfig bound of consumeMessageBatchMaxSize
MAX_RECONSUME_TIMES_CONCURRENTLY = 16  # what -1 means for a concurrent listener; an orderly one: unlimited
SUSPEND_CURRENT_QUEUE_TIME_MILLIS = 1000
REBALANCE_LATER = 0.5  # s: a queue whose lock was refused is asked for again this soon (rebalanceLater(500))
LOCK_RETRY_DELAY = 3.0  # s: a worker whose lock lapsed asks again this often (submitConsumeRequestLater 3000)
UNLOCK_DELAY = 20.0  # s: longest wait for the message in hand of a queue taken away (unlockDelayTimeMills)


class ConsumeOrderlyStatus:
    """What an orderly listener returns (a bool does as well: True is SUCCESS)."""
    SUCCESS = True
    SUSPEND_CURRENT_QUEUE_A_MOMENT = False


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
    def __init__(self, group: str, namesrv_addr: str | None = None, max_reconsume_times: int = -1,
                 consume_from_first: bool = False, client: MQClientInstance | None = None, pull_batch_size: int = 32,
                 rebalance_interval: float = REBALANCE_INTERVAL, persist_interval: float = PERSIST_INTERVAL,
                 suspend_ms: int = SUSPEND_MILLIS, orderly: bool = False, message_model: str = CLUSTERING,
                 instance_name: str | None = None, local_offset_store_dir: str | None = None,
                 suspend_current_queue_time_millis: int = SUSPEND_CURRENT_QUEUE_TIME_MILLIS,
                 lock_interval: float = REBALANCE_LOCK_INTERVAL,
                 lock_max_live_time: float = REBALANCE_LOCK_MAX_LIVE_TIME,
                 consume_message_batch_max_size: int = 1):
        if message_model not in (CLUSTERING, BROADCASTING):
            raise ClientError(f"message_model {message_model!r} is neither {CLUSTERING} nor {BROADCASTING}")
        if client is not None and instance_name:
            raise ClientError("instance_name names a client instance: give it to the MQClientInstance passed")
        if max_reconsume_times < -1:
            raise ClientError(f"max_reconsume_times {max_reconsume_times} must be -1 (the default) or more")
        for name, value in (("lock_interval", lock_interval), ("lock_max_live_time", lock_max_live_time),
                            ("suspend_current_queue_time_millis", suspend_current_queue_time_millis)):
            if value <= 0:
                raise ClientError(f"{name} {value} must be positive")
        if not 1 <= consume_message_batch_max_size <= MAX_CONSUME_BATCH:
            raise ClientError(f"consumeMessageBatchMaxSize {consume_message_batch_max_size} out of range "
                              f"[1, {MAX_CONSUME_BATCH}]")
        self.group = group
        self.client = client or MQClientInstance(namesrv_addr, instance_name=instance_name)
        self.orderly = orderly
        self.message_model = message_model
        if max_reconsume_times == -1:  # DefaultMQPushConsumer's -1: 16, or no limit for an orderly listener
            max_reconsume_times = 2**31 - 1 if orderly else MAX_RECONSUME_TIMES_CONCURRENTLY
        self.max_reconsume_times = max_reconsume_times
        self.consume_from_first = consume_from_first
        self.pull_batch_size = pull_batch_size
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.rebalance_interval = rebalance_interval
        self.persist_interval = persist_interval
        self.suspend_ms = suspend_ms
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis
        self.lock_max_live_time = lock_max_live_time
        self.subscriptions: dict[str, str] = {}
        self.listener: Listener | None = None
        self.offset_store: OffsetStore = (
            LocalFileOffsetStore(self.client.client_id, group, local_offset_store_dir)
            if message_model == BROADCASTING else RemoteBrokerOffsetStore(self.client, group, self._addr))
        self.offsets = self.offset_store.table  # next offset to consume, per held queue
        # only a clustering group shares queues among members; a broadcasting one has no one to exclude
        self._locks = RebalanceLock(self.client, group, self._addr, lock_interval) \
            if orderly and message_model == CLUSTERING else None
        self._pqs: dict[MessageQueue, ProcessQueue] = {}
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
        """listener(messages) → True when consumed; False, None or an exception: deliver again
        later (concurrently: through %RETRY%; orderly: in place, after a pause); or, concurrently,
        a list of one such answer per message."""
        self.listener = listener

    @property
    def assigned_queues(self) -> set[MessageQueue]:
        return set(self._workers)

    async def start(self) -> None:
        if self.listener is None:
            raise ClientError("register a listener before starting the consumer")
        if not self.subscriptions:
            raise ClientError("subscribe to a topic before starting the consumer")
        self.offset_store.load()  # a broadcasting member's unreadable offsets file: refused before anything runs
        if self.message_model == CLUSTERING:  # a broadcasting member does not retry (copySubscription)
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
            self._pqs.clear()
            self.client.consumers.pop(self.group, None)
            await self.client.shutdown()
            raise
        self._tasks = [asyncio.ensure_future(self._rebalance_loop()), asyncio.ensure_future(self._persist_loop())]
        if self._locks is not None:
            self._tasks.append(asyncio.ensure_future(self._locks.run(self._pqs)))

    async def shutdown(self) -> None:
        if not self.running:
            return
        self.running = False
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # every queue stops at once (each finishing its message in hand), then one persist_all
        # commits them all: a broadcasting consumer's file is written once, not once per queue
        held = list(self._workers)
        await asyncio.gather(*(self._stop_worker(mq, commit=False) for mq in held))
        await self.offset_store.persist_all()
        for mq in held:
            self.offset_store.remove(mq)
        if self._locks is not None:
            for mq in held:
                await self._locks.unlock(mq)
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
        return {"groupName": self.group, "consumeType": "CONSUME_PASSIVELY", "messageModel": self.message_model,
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
                if self.message_model == BROADCASTING:
                    wanted.update(queues)
                    continue
                cids = sorted(await api.consumer_ids(self.client, addrs[0], self.group))
                wanted.update(allocate_averagely(self.client.client_id, cids, queues))
            for mq in [mq for mq in self._workers if mq not in wanted]:
                await self._stop_worker(mq)
            refused = False
            for mq in sorted(wanted - set(self._workers)):
                if not self.running:
                    break
                pq = ProcessQueue()
                if self._locks is not None and not await self._locks.lock(mq, pq):
                    refused = True  # its last holder has not let go yet: ask again shortly
                    continue
                self._pqs[mq] = pq
                self._workers[mq] = asyncio.ensure_future(self._pull_loop(mq, pq))
            if refused and self.running:
                asyncio.get_running_loop().call_later(REBALANCE_LATER, self.rebalance_soon)
            if wanted:
                log.debug("%s: %s holds %s", self.group, self.client.client_id, sorted(map(str, self._workers)))

    async def _stop_worker(self, mq: MessageQueue, commit: bool = True) -> None:
        """Stop pulling a queue and commit what was consumed of it, before another member takes it.
        An orderly consumer first lets the message in hand finish and unlocks the queue last, so
        the next holder starts right after that message (RebalancePushImpl.removeUnnecessaryMessageQueue).
        commit=False (shutdown) leaves the commit and the unlock to the caller."""
        task, pq = self._workers.pop(mq), self._pqs.pop(mq)
        pq.dropped = True
        try:
            if self._locks is not None:
                try:
                    await asyncio.wait_for(pq.consume_lock.acquire(), UNLOCK_DELAY)
                except asyncio.TimeoutError:
                    log.warning("%s: the listener still holds a message of %s after %g s; letting the queue go",
                                self.group, mq, UNLOCK_DELAY)
        finally:  # a shutdown cancelling this wait leaves no worker behind
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if not commit:
            return
        await self.offset_store.persist(mq)
        self.offset_store.remove(mq)
        if self._locks is not None:
            await self._locks.unlock(mq)

    # -- offsets -----------------------------------------------------------------------------------
    async def _addr(self, mq: MessageQueue) -> str:
        addr = (await self.client.routes.get(mq.topic)).master_addr(mq.broker_name)
        if addr is None:
            addr = (await self.client.routes.get(mq.topic, refresh=True)).master_addr(mq.broker_name)
        if addr is None:
            raise RouteNotFound(mq.topic, f"broker {mq.broker_name} has no master")
        return addr

    async def _initial_offset(self, mq: MessageQueue) -> int:
        """The persisted offset; with none: a retry topic from 0, else from the first message
        (consume_from_first) or from the end (CONSUME_FROM_LAST_OFFSET)."""
        last = await self.offset_store.read_store(mq)
        if last >= 0:
            return last
        if mq.topic.startswith(RETRY_PREFIX):
            return 0
        code = codes.GET_MIN_OFFSET if self.consume_from_first else codes.GET_MAX_OFFSET
        return await api.queue_offset(self.client, await self._addr(mq), mq, code)

    async def persist_offsets(self) -> None:
        await self.offset_store.persist_all()

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(self.persist_interval)
            await self.persist_offsets()

    # -- pulling and consuming ---------------------------------------------------------------------
    async def _pull(self, mq: MessageQueue, offset: int, expr: str) -> api.PullResult:
        return await api.pull(self.client, await self._addr(mq), self.group, mq, offset, self.pull_batch_size, expr,
                              self.suspend_ms, commit_offset=self.offset_store.pull_commit_offset(mq))

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        expr = self.subscriptions.get(mq.topic, "*")
        offset = None
        ahead: asyncio.Future | None = None  # the next pull, in flight while a result is consumed
        try:
            while not pq.dropped:
                if self._locks is not None and not pq.may_consume(self.lock_max_live_time):
                    # the lock lapsed (refused at renewal, or not renewed in time): pull nothing until it is ours
                    if not await self._locks.lock(mq, pq):
                        await asyncio.sleep(LOCK_RETRY_DELAY)
                        continue
                try:
                    if offset is None:  # read after the lock was granted: the last holder has committed by then
                        offset = await self._initial_offset(mq)
                        self.offset_store.update(mq, offset)
                    if ahead is None:
                        ahead = asyncio.ensure_future(self._pull(mq, offset, expr))
                    pulled, ahead = ahead, None
                    res = await pulled
                except ClientError as e:
                    log.warning("%s: pull of %s failed: %s", self.group, mq, e)
                    await asyncio.sleep(PULL_DELAY_ON_EXCEPTION)
                    continue
                if res.status == api.FOUND:
                    if not self.orderly:
                        # as Java's pull service runs ahead of its consume threads: the listener's time
                        # (a database transaction, say) and the next pull's round trip overlap. Not for
                        # an orderly queue, which may stop mid-result when its lock is lost.
                        ahead = asyncio.ensure_future(self._pull(mq, res.next_begin_offset, expr))
                    if not await self._consume_all(mq, pq, res.messages):
                        # an orderly queue lost its lock mid-batch: go on from the message not consumed
                        offset = self.offset_store.read_memory(mq)
                        continue
                offset = res.next_begin_offset
                self.offset_store.update(mq, offset)  # past messages the tag filter dropped, too
                if res.status == api.OFFSET_ILLEGAL:
                    log.warning("%s: offset of %s moved to %d", self.group, mq, offset)
                    await self.offset_store.persist(mq)
        finally:
            if ahead is not None:
                ahead.cancel()
                await asyncio.gather(ahead, return_exceptions=True)

    async def _consume_all(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> bool:
        """One pull's messages, in queue order: orderly one at a time, else in batches of
        consume_message_batch_max_size. False when an orderly queue may no longer be consumed here."""
        if mq.topic.startswith(RETRY_PREFIX):
            for msg in msgs:
                if msg.retry_topic:
                    msg.topic = msg.retry_topic  # the listener sees the topic it subscribed to, as in Java
        if self.orderly:
            for msg in msgs:
                if not await self._consume_orderly(mq, pq, msg):
                    return False
            return True
        step = self.consume_message_batch_max_size
        for i in range(0, len(msgs), step):
            batch = msgs[i:i + step]
            await self._consume(mq, batch)
            self.offset_store.update(mq, batch[-1].queue_offset + 1)
        return True

    async def _listen(self, msgs: list[MessageExt]) -> list[bool]:
        """The listener's verdict, one per message: True consumed; False, None or an exception: not."""
        try:
            result = self.listener(msgs)
            if inspect.isawaitable(result):
                result = await result
            return _statuses(result, len(msgs))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: listener failed on %s", self.group, ", ".join(m.msg_id for m in msgs))
            return [False] * len(msgs)

    async def _consume(self, mq: MessageQueue, msgs: list[MessageExt]) -> None:
        """A concurrent listener's batch until every message is consumed or on its way back."""
        while True:
            failed = [m for m, ok in zip(msgs, await self._listen(msgs)) if not ok]
            if self.message_model == BROADCASTING:
                for m in failed:
                    log.warning("%s: broadcasting, %s failed: dropped", self.group, m.msg_id)
                return
            msgs = [m for m in failed if not await self._send_back(mq, m)]
            if not msgs:
                return
            await asyncio.sleep(PULL_DELAY_ON_EXCEPTION)  # nowhere to put them back: consume them again here

    async def _consume_orderly(self, mq: MessageQueue, pq: ProcessQueue, msg: MessageExt) -> bool:
        """ConsumeMessageOrderlyService: the message again and again in place until the listener
        takes it (or, past max_reconsume_times, it is on its way to the DLQ); never the next one
        before it. False when the queue may no longer be consumed here (dropped, or its lock lost)
        and the message was not."""
        while True:
            if pq.dropped:
                return False
            if self._locks is not None and not pq.may_consume(self.lock_max_live_time):
                return False  # the pull loop asks for the lock again before anything more
            async with pq.consume_lock:  # a rebalance taking the queue waits for this message
                if pq.dropped:
                    return False
                [ok] = await self._listen([msg])
                if not ok and msg.reconsume_times >= self.max_reconsume_times:
                    ok = await self._republish(msg)
                if ok:
                    self.offset_store.update(mq, msg.queue_offset + 1)
                    return True
            msg.reconsume_times += 1  # SUSPEND_CURRENT_QUEUE_A_MOMENT
            await asyncio.sleep(self.suspend_current_queue_time_millis / 1000)

    async def _send_back(self, mq: MessageQueue, msg: MessageExt) -> bool:
        try:
            await api.send_back(self.client, await self._addr(mq), self.group, msg, self.max_reconsume_times)
            return True
        except ClientError as e:
            log.warning("%s: send back of %s failed (%s); re-publishing to the retry topic", self.group, msg.msg_id, e)
        return await self._republish(msg)

    async def _republish(self, msg: MessageExt) -> bool:
        """Send a failed message to %RETRY%<group> as a producer would (sendMessageBack's fallback,
        and an orderly consumer's way to the DLQ): the broker sends it to %DLQ%<group> instead
        once its reconsume count is past the maximum given with it."""
        props = dict(msg.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.uniq_key or msg.msg_id)
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
