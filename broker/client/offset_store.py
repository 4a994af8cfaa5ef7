"""OffsetStore: where a push consumer keeps the next offset to consume of each queue it holds
(RocketMQ's noun), and RemoteBrokerOffsetStore, clustering mode's, which commits to the broker
(UPDATE_CONSUMER_OFFSET) so whichever member holds the queue next carries on from there.

The table in memory is updated after each message; `persist` writes it out (every 5 s, when the
queue moves to another member and on shutdown). A broadcasting consumer keeps its offsets in a
file of its own instead: broker.client.local_offset_store.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from broker.client import api
from broker.client.client_instance import MQClientInstance
from broker.client.errors import ClientError
from broker.client.route import MessageQueue

log = logging.getLogger("client.consumer")


class OffsetStore:
    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}

    def load(self) -> None:
        """Read what persist wrote before, where that is local (nothing to do for the broker's)."""

    def update(self, mq: MessageQueue, offset: int) -> None:
        self.table[mq] = offset

    def read_memory(self, mq: MessageQueue) -> int | None:
        return self.table.get(mq)

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)

    async def read_store(self, mq: MessageQueue) -> int:
        """The persisted offset of a queue; -1 when there is none."""
        raise NotImplementedError

    async def persist(self, mq: MessageQueue) -> None:
        raise NotImplementedError

    async def persist_all(self) -> None:
        await asyncio.gather(*(self.persist(mq) for mq in list(self.table)))

    def pull_commit_offset(self, mq: MessageQueue) -> int:
        """The offset a pull carries for the broker to commit (PullSysFlag commitOffset); -1: none."""
        return -1


class RemoteBrokerOffsetStore(OffsetStore):
    def __init__(self, client: MQClientInstance, group: str, addr_of: Callable[[MessageQueue], Awaitable[str]]):
        super().__init__()
        self.client = client
        self.group = group
        self.addr_of = addr_of
        self._committed: dict[MessageQueue, int] = {}

    def remove(self, mq: MessageQueue) -> None:
        super().remove(mq)
        self._committed.pop(mq, None)

    async def read_store(self, mq: MessageQueue) -> int:
        return await api.query_consumer_offset(self.client, await self.addr_of(mq), self.group, mq)

    async def persist(self, mq: MessageQueue) -> None:
        offset = self.table.get(mq)
        if offset is None or self._committed.get(mq) == offset:
            return
        try:
            await api.update_consumer_offset(self.client, await self.addr_of(mq), self.group, mq, offset)
            self._committed[mq] = offset
        except ClientError as e:
            log.warning("%s: commit of %s at %d failed: %s", self.group, mq, offset, e)

    def pull_commit_offset(self, mq: MessageQueue) -> int:
        return self._committed.get(mq, -1)
