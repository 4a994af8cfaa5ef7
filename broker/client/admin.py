"""Admin (a small DefaultMQAdminExt): topics, routes, clusters, consumer lag, broker runtime info."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

import msgspec

from broker.client import api
from broker.client.client_instance import MQClientInstance
from broker.client.errors import ClientError, ResponseError
from broker.client.route import MASTER_ID, MessageQueue, TopicRoute
from broker.remoting import codes
from broker.remoting.command import RemotingCommand


@dataclass
class QueueLag:
    queue: MessageQueue
    committed: int  # -1: the group has committed nothing for this queue
    max_offset: int

    @property
    def lag(self) -> int:
        return self.max_offset - max(self.committed, 0)


class Admin:
    def __init__(self, namesrv_addr: str | None = None, client: MQClientInstance | None = None):
        self.client = client or MQClientInstance(namesrv_addr)

    async def start(self) -> None:
        await self.client.start()

    async def shutdown(self) -> None:
        await self.client.shutdown()

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.shutdown()

    # -- name server -------------------------------------------------------------------------------
    async def cluster_info(self) -> dict:
        """ClusterInfo: {"brokerAddrTable": {name: BrokerData}, "clusterAddrTable": {cluster: [names]}}."""
        return await self.client.namesrv_json(codes.GET_BROKER_CLUSTER_INFO, "cluster info")

    async def topic_list(self) -> list[str]:
        return list((await self.client.namesrv_json(codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, "topic list"))
                    .get("topicList") or [])

    async def route(self, topic: str) -> TopicRoute:
        return await self.client.routes.get(topic, refresh=True)

    async def master_addrs(self, cluster: str | None = None) -> list[str]:
        info = await self.cluster_info()
        names = info.get("clusterAddrTable", {}).get(cluster, []) if cluster else list(info.get("brokerAddrTable", {}))
        table = info.get("brokerAddrTable", {})
        return sorted(a for n in names if (a := (table.get(n, {}).get("brokerAddrs") or {}).get(MASTER_ID)))

    # -- brokers -----------------------------------------------------------------------------------
    async def create_topic(self, topic: str, queues: int = 4, broker_addr: str | None = None,
                           cluster: str | None = None, perm: int = 6, order: bool = False) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC (17) on one broker, or on every master (of `cluster`); returns
        the addresses it was created on. The route follows once each broker re-registers."""
        addrs = [broker_addr] if broker_addr else await self.master_addrs(cluster)
        if not addrs:
            raise ClientError(f"no master broker{' in cluster ' + cluster if cluster else ''} to create {topic} on")
        ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
               "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": order}
        for addr in addrs:
            r = await self.client.invoke(addr, RemotingCommand.request(codes.UPDATE_AND_CREATE_TOPIC, ext), 5)
            if r.code != codes.SUCCESS:
                raise ResponseError(r.code, r.remark, f"create topic {topic} on {addr}")
        self.client.routes.invalidate(topic)
        return addrs

    async def consumer_offsets(self, group: str, topic: str) -> list[QueueLag]:
        """Per queue: the group's committed offset (14) against the queue's max offset (30)."""
        route = await self.route(topic)
        masters = route.broker_addrs()

        async def one(mq: MessageQueue) -> QueueLag:
            addr = masters[mq.broker_name]
            committed, max_offset = await asyncio.gather(api.query_consumer_offset(self.client, addr, group, mq),
                                                         api.queue_offset(self.client, addr, mq))
            return QueueLag(mq, committed, max_offset)
        return list(await asyncio.gather(*(one(mq) for mq in route.read_queues(topic) if mq.broker_name in masters)))

    async def delete_expired(self, broker_addr: str) -> None:
        """DELETE_EXPIRED_COMMITLOG (329): the broker's cleaner deletes expired files now."""
        r = await self.client.invoke(broker_addr, RemotingCommand.request(codes.DELETE_EXPIRED_COMMITLOG), 5)
        if r.code != codes.SUCCESS:
            raise ResponseError(r.code, r.remark, f"clean on {broker_addr}")

    async def broker_status(self, broker_addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO (28): the broker's runtime table."""
        r = await self.client.invoke(broker_addr, RemotingCommand.request(codes.GET_BROKER_RUNTIME_INFO), 5)
        if r.code != codes.SUCCESS:
            raise ResponseError(r.code, r.remark, f"runtime info of {broker_addr}")
        return dict(msgspec.json.decode(r.body).get("table") or {})
