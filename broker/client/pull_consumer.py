"""PullConsumer (RocketMQ's DefaultMQPullConsumer): the caller picks the queue and the offset,
pulls, and commits what it consumed; nothing runs in the background but the heartbeat."""
from __future__ import annotations

from broker.client import api
from broker.client.api import PullResult
from broker.client.client_instance import MQClientInstance
from broker.client.errors import RouteNotFound
from broker.client.route import MessageQueue
from broker.remoting import codes

__all__ = ["PullConsumer", "PullResult"]


class PullConsumer:
    def __init__(self, group: str, namesrv_addr: str | None = None, client: MQClientInstance | None = None):
        self.group = group
        self.client = client or MQClientInstance(namesrv_addr)

    async def start(self) -> None:
        await self.client.start()

    async def shutdown(self) -> None:
        await self.client.shutdown()

    async def __aenter__(self) -> PullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.shutdown()

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, sorted (fetchSubscribeMessageQueues)."""
        route = await self.client.routes.get(topic)
        queues = route.read_queues(topic)
        if not queues:
            raise RouteNotFound(topic, "no readable queue")
        return queues

    async def _addr(self, mq: MessageQueue) -> str:
        addr = (await self.client.routes.get(mq.topic)).master_addr(mq.broker_name)
        if addr is None:
            addr = (await self.client.routes.get(mq.topic, refresh=True)).master_addr(mq.broker_name)
        if addr is None:
            raise RouteNotFound(mq.topic, f"broker {mq.broker_name} has no master")
        return addr

    async def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, sub_expression: str = "*",
                   suspend_ms: int = 0, timeout: float | None = None, decode: bool = True) -> PullResult:
        """One pull; `suspend_ms` > 0 lets the broker hold it until a message arrives (long polling).
        decode=False: the records stay undecoded in `PullResult.body`, not filtered by tag here."""
        return await api.pull(self.client, await self._addr(mq), self.group, mq, offset, max_nums, sub_expression,
                              suspend_ms, timeout=timeout, decode=decode)

    async def fetch_offset(self, mq: MessageQueue) -> int:
        """The group's committed offset of the queue; -1 when it has none."""
        return await api.query_consumer_offset(self.client, await self._addr(mq), self.group, mq)

    async def update_offset(self, mq: MessageQueue, offset: int) -> None:
        """Commit `offset` (the next message to consume) for the group (UPDATE_CONSUMER_OFFSET)."""
        await api.update_consumer_offset(self.client, await self._addr(mq), self.group, mq, offset)

    commit = update_offset

    async def max_offset(self, mq: MessageQueue) -> int:
        return await api.queue_offset(self.client, await self._addr(mq), mq, codes.GET_MAX_OFFSET)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await api.queue_offset(self.client, await self._addr(mq), mq, codes.GET_MIN_OFFSET)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset stored at or after `timestamp_ms` (searchOffset; the max offset when none is)."""
        return await api.search_offset(self.client, await self._addr(mq), mq, timestamp_ms)
