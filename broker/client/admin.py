"""Admin (a small DefaultMQAdminExt): topics, routes, clusters, consumer lag, broker runtime info,
messages by key or id (MQAdminImpl.queryMessage / viewMessage)."""
from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass

import msgspec

from broker.client import api
from broker.client.client_instance import MQClientInstance
from broker.client.errors import ClientError, ResponseError
from broker.client.message import MessageExt, decode_messages
from broker.client.route import MASTER_ID, MessageQueue, TopicRoute
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import UNIQUE_MSG_QUERY_FLAG


@dataclass
class QueueLag:
    queue: MessageQueue
    committed: int  # -1: the group has committed nothing for this queue
    max_offset: int

    @property
    def lag(self) -> int:
        return self.max_offset - max(self.committed, 0)


LONG_MAX = 2**63 - 1


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """MessageDecoder.decodeMessageId: an offsetMsgId is the hex of the store host (IPv4 4 bytes or
    IPv6 16, then the port as an int) and the commit-log offset (8 bytes): (host:port, offset)."""
    if len(msg_id) not in (32, 56):
        raise ClientError(f"{msg_id!r} is not an offsetMsgId (32 or 56 hex digits)")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ClientError(f"{msg_id!r} is not an offsetMsgId (not hex)") from None
    n = 4 if len(raw) == 16 else 16
    ip = ipaddress.ip_address(raw[:n])
    port = int.from_bytes(raw[n:n + 4], "big")
    host = str(ip) if n == 4 else f"[{ip}]"
    return f"{host}:{port}", int.from_bytes(raw[n + 4:], "big")


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
                           cluster: str | None = None, perm: int = 6, order: bool = False,
                           read_queues: int | None = None, write_queues: int | None = None) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC (17) on one broker, or on every master (of `cluster`); returns
        the addresses it was created on. The route follows once each broker re-registers.
        `queues` read and write queues, unless read_queues or write_queues says otherwise."""
        addrs = [broker_addr] if broker_addr else await self.master_addrs(cluster)
        if not addrs:
            raise ClientError(f"no master broker{' in cluster ' + cluster if cluster else ''} to create {topic} on")
        ext = {"topic": topic, "defaultTopic": "TBW102",
               "readQueueNums": queues if read_queues is None else read_queues,
               "writeQueueNums": queues if write_queues is None else write_queues,
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

    # -- subscription groups (mqadmin updateSubGroup / deleteSubGroup) -----------------------------
    async def sub_group(self, broker_addr: str, group: str) -> dict | None:
        """GET_SUBSCRIPTIONGROUP_CONFIG (352): the group's SubscriptionGroupConfig, None when the
        broker has none."""
        r = await self.client.invoke(broker_addr, RemotingCommand.request(codes.GET_SUBSCRIPTIONGROUP_CONFIG,
                                                                          {"group": group}), 5)
        if r.code == codes.SUBSCRIPTION_GROUP_NOT_EXIST:
            return None
        if r.code != codes.SUCCESS:
            raise ResponseError(r.code, r.remark, f"subscription group {group} of {broker_addr}")
        return msgspec.json.decode(r.body)

    async def all_sub_groups(self, broker_addr: str) -> dict:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): {"subscriptionGroupTable": ..., "dataVersion": ...}."""
        r = await self.client.invoke(broker_addr, RemotingCommand.request(codes.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), 5)
        if r.code != codes.SUCCESS:
            raise ResponseError(r.code, r.remark, f"subscription groups of {broker_addr}")
        return msgspec.json.decode(r.body)

    async def update_sub_group(self, group: str, broker_addr: str | None = None, cluster: str | None = None,
                               **fields) -> list[str]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) on one broker or every master (of `cluster`):
        the group's config there with `fields` (SubscriptionGroupConfig's names, e.g.
        consumeMessageOrderly=True, retryMaxTimes=3) changed; the others stay as they were.
        Returns the addresses updated."""
        addrs = [broker_addr] if broker_addr else await self.master_addrs(cluster)
        if not addrs:
            raise ClientError(f"no master broker{' in cluster ' + cluster if cluster else ''} to update {group} on")
        for addr in addrs:
            cfg = dict(await self.sub_group(addr, group) or {})
            cfg.update(fields, groupName=group)
            r = await self.client.invoke(addr, RemotingCommand.request(
                codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=msgspec.json.encode(cfg)), 5)
            if r.code != codes.SUCCESS:
                raise ResponseError(r.code, r.remark, f"update subscription group {group} on {addr}")
        return addrs

    async def delete_sub_group(self, group: str, broker_addr: str) -> None:
        """DELETE_SUBSCRIPTIONGROUP (207)."""
        r = await self.client.invoke(broker_addr, RemotingCommand.request(codes.DELETE_SUBSCRIPTIONGROUP,
                                                                          {"groupName": group}), 5)
        if r.code != codes.SUCCESS:
            raise ResponseError(r.code, r.remark, f"delete subscription group {group} on {broker_addr}")

    # -- messages ----------------------------------------------------------------------------------
    async def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = LONG_MAX,
                            unique: bool = False) -> list[MessageExt]:
        """QUERY_MESSAGE (12) on every broker of the topic's route: the messages of `topic` with
        `key` among their KEYS (or, `unique`, whose client msgId is `key`), stored within
        [begin, end] ms, oldest first. The index may hold other keys of the same hash: the
        messages are checked here, as MQAdminImpl checks them."""
        if max_num <= 0:
            raise ClientError(f"maxNum {max_num} must be at least 1")
        route = await self.route(topic)
        ext = {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin, "endTimestamp": end}
        if unique:
            ext[UNIQUE_MSG_QUERY_FLAG] = "true"

        async def one(bd) -> list[MessageExt]:
            addrs = bd.brokerAddrs
            addr = addrs.get(MASTER_ID) or next(iter(addrs.values()), None)
            if addr is None:
                return []
            r = await self.client.invoke(addr, RemotingCommand.request(codes.QUERY_MESSAGE, ext), 10)
            if r.code == codes.QUERY_NOT_FOUND:
                return []
            if r.code != codes.SUCCESS:
                raise ResponseError(r.code, r.remark, f"query {topic}#{key} on {addr}")
            return decode_messages(r.body, bd.brokerName)

        found = [m for ms in await asyncio.gather(*(one(bd) for bd in route.brokerDatas)) for m in ms]
        if unique:
            found = [m for m in found if m.topic == topic and m.uniq_key == key]
        else:
            found = [m for m in found if m.topic == topic and key in (m.keys or "").split(" ")]
        return sorted(found, key=lambda m: (m.store_timestamp, m.commit_log_offset))

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """VIEW_MESSAGE_BY_ID (33): the message an offsetMsgId names, from the broker it names."""
        addr, offset = decode_offset_msg_id(offset_msg_id)
        return await api.view_message(self.client, addr, offset)

    async def message_by_id(self, msg_id: str, topic: str | None = None) -> list[MessageExt]:
        """A message by either id (DefaultMQAdminExt.viewMessage(topic, msgId)): an offsetMsgId of a
        broker the name servers know is viewed there; otherwise the id is taken as a client msgId
        (UNIQ_KEY) and looked up through the index of `topic` (a message sent again keeps its
        msgId, hence a list)."""
        try:
            addr, _ = decode_offset_msg_id(msg_id)
        except ClientError:
            addr = None
        if addr is not None and addr in await self._broker_addrs():
            return [await self.view_message(msg_id)]
        if topic is None:
            raise ClientError(f"{msg_id} is not the offsetMsgId of a broker the name servers know: give its topic "
                              "to look it up as a client msgId (UNIQ_KEY)")
        return await self.query_message(topic, msg_id, unique=True)

    async def _broker_addrs(self) -> set[str]:
        table = (await self.cluster_info()).get("brokerAddrTable", {})
        return {a for bd in table.values() for a in (bd.get("brokerAddrs") or {}).values()}
