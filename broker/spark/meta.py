"""Driver-side lookups through the project's client, blocking: the topic's queues, their
offsets, a timestamp search (SEARCH_OFFSET_BY_TIMESTAMP, 29) and the consumer group's commits.

Spark calls a reader's planning methods from plain (non-async) Python, in a planner process
(batch) or in one long-lived process per streaming source, so the client runs on a private
event loop driven with run_until_complete; nothing of it is pickled (see the readers'
__getstate__)."""
from __future__ import annotations

import asyncio

from broker.client.admin import Admin
from broker.client.errors import ClientError
from broker.client.pull_consumer import PullConsumer
from broker.client.route import MessageQueue
from broker.spark.errors import RocketMQSourceError
from broker.spark.offsets import queue_key


class TopicMeta:
    def __init__(self, namesrv_addr: str, topic: str, group: str):
        self.namesrv_addr = namesrv_addr
        self.topic = topic
        self.loop = asyncio.new_event_loop()
        # no start(): these are plain requests, no heartbeat task is wanted on a loop that only
        # runs while a call is being answered
        self.consumer = PullConsumer(group, namesrv_addr)
        self.admin = Admin(client=self.consumer.client)
        self._queues: list[MessageQueue] | None = None

    def _run(self, coro, what: str):
        try:
            return self.loop.run_until_complete(coro)
        except ClientError as e:
            raise RocketMQSourceError(f"{what} of topic {self.topic} (name server {self.namesrv_addr}): {e}") from None

    def queues(self, refresh: bool = False) -> list[MessageQueue]:
        """The topic's readable queues. The name server answers a made-up route for any topic
        (so that a producer's first send can create it): existence is checked against the
        topics brokers have registered, so a misspelt topic is an error, not an empty read."""
        # checked once: a running stream is not failed by a registration in progress
        if self._queues is None and self.topic not in self._run(self.admin.topic_list(), "topic list"):
            raise RocketMQSourceError(f"topic {self.topic} does not exist: no broker registered with name server "
                                      f"{self.namesrv_addr} serves it")
        if self._queues is None or refresh:
            self._queues = self._run(self._fetch_queues(), "route")
        return self._queues

    async def _fetch_queues(self) -> list[MessageQueue]:
        self.consumer.client.routes.invalidate(self.topic)  # new queues and moved brokers show up
        return await self.consumer.fetch_queues(self.topic)

    def _per_queue(self, fn, queues: list[MessageQueue], what: str) -> dict[str, int]:
        async def all_of():
            return await asyncio.gather(*(fn(mq) for mq in queues))
        return dict(zip((queue_key(mq) for mq in queues), self._run(all_of(), what)))

    def min_offsets(self, queues: list[MessageQueue]) -> dict[str, int]:
        return self._per_queue(self.consumer.min_offset, queues, "min offsets")

    def max_offsets(self, queues: list[MessageQueue]) -> dict[str, int]:
        return self._per_queue(self.consumer.max_offset, queues, "max offsets")

    def offsets_at(self, queues: list[MessageQueue], timestamp_ms: int) -> dict[str, int]:
        return self._per_queue(lambda mq: self.consumer.search_offset(mq, timestamp_ms), queues,
                               f"offsets at timestamp {timestamp_ms}")

    def commit(self, offsets: dict[str, int]) -> None:
        """UPDATE_CONSUMER_OFFSET of the group for every queue of `offsets` (queue key → next offset)."""
        by_key = {queue_key(mq): mq for mq in self.queues()}

        async def all_of():
            await asyncio.gather(*(self.consumer.update_offset(by_key[k], off)
                                   for k, off in offsets.items() if k in by_key))
        self._run(all_of(), f"commit of group {self.consumer.group}")

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.consumer.client.shutdown())
        finally:
            self.loop.close()

    def __enter__(self) -> TopicMeta:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
