"""AdminBrokerProcessor's per-queue figures for the operator's tools, in RocketMQ's body format:
GET_TOPIC_STATS_INFO (mqadmin topicStatus), GET_CONSUME_STATS (consumerProgress),
GET_BROKER_CONSUME_STATS (brokerConsumeStats), QUERY_TOPIC_CONSUME_BY_WHO and VIEW_BROKER_STATS_DATA
(statsAll). The rates are BrokerStatsManager's (broker.server.metrics.broker_stats_manager).

The stats bodies hold maps keyed by a MessageQueue object, which fastjson writes with the object
itself as the key (`{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}`) and the Java side reads
back into Map<MessageQueue, ...>; strict JSON has no such thing, so `mq_keyed_json` writes it by hand."""
from __future__ import annotations

import msgspec

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import (GetConsumeStatsInBrokerHeader, GetConsumeStatsRequestHeader, TopicHeader,
                                     ViewBrokerStatsDataRequestHeader, decode)
from broker.remoting.refusals import TopicNotExist
from broker.server.metrics.broker_stats_manager import GROUP_GET_NUMS, TOPIC_PUT_NUMS, StatsNotExist
from broker.server.processor.offset_search import queue_store_time

_encode = msgspec.json.encode


def mq_keyed_json(fields: dict, table_name: str, table: dict[tuple[str, str, int], dict]) -> bytes:
    """`{"<table_name>":{<MessageQueue>:<value>,...},<fields>}` as fastjson writes it (fields sorted)."""
    entries = b",".join(_encode({"brokerName": broker, "queueId": qid, "topic": topic}) + b":" + _encode(value)
                        for (topic, broker, qid), value in table.items())
    parts = {table_name: b"{" + entries + b"}", **{k: _encode(v) for k, v in fields.items()}}
    return b"{" + b",".join(_encode(k) + b":" + parts[k] for k in sorted(parts)) + b"}"


class StatsProcessor:
    def __init__(self, store, topics, consumers, groups, broker_name: str, broker_addr, broker_stats=None):
        self.store = store
        self.broker_stats = broker_stats  # BrokerStatsManager
        self.topics = topics
        self.consumers = consumers  # ConsumerManager: whom a group subscribes to
        self.groups = groups  # SubscriptionGroupManager: every group brokerConsumeStats reports
        self.broker_name = broker_name
        self.broker_addr = broker_addr  # () -> "ip:port", known once the server listens

    def handlers(self) -> dict:
        return {codes.GET_TOPIC_STATS_INFO: self.topic_stats, codes.GET_CONSUME_STATS: self.consume_stats,
                codes.QUERY_TOPIC_CONSUME_BY_WHO: self.consumed_by, codes.GET_BROKER_CONSUME_STATS: self.broker_consume_stats,
                codes.VIEW_BROKER_STATS_DATA: self.view_stats}

    def view_stats(self, cmd: RemotingCommand, conn):
        """BrokerStatsData of one stats item; RocketMQ's SYSTEM_ERROR when there is no such item
        (mqadmin statsAll then counts 0 for it)."""
        h = decode(ViewBrokerStatsDataRequestHeader, cmd.ext)
        try:
            data = self.broker_stats.view(h.statsName, h.statsKey)
        except (StatsNotExist, AttributeError):
            return cmd.response(codes.SYSTEM_ERROR, remark=f"The stats <{h.statsName}> <{h.statsKey}> not exist")
        return cmd.response(codes.SUCCESS, body=_encode(data))

    def _tps(self, stats_name: str, key: str) -> float:
        """The minute window's rate (BrokerStatsManager.tpsTopicPutNums, tpsGroupGetNums); 0 without one."""
        try:
            return self.broker_stats.view(stats_name, key)["statsMinute"]["tps"]
        except (StatsNotExist, AttributeError):
            return 0.0

    def consumed_by(self, cmd: RemotingCommand, conn):
        """GroupList: the groups online that subscribe to the topic, and those that committed offsets of it."""
        topic = decode(TopicHeader, cmd.ext).topic
        groups = {name for name, g in self.consumers.groups.items() if topic in g.subscriptions}
        groups.update(k.rpartition("@")[2] for k in self.store.consumer_offsets.table if k.rpartition("@")[0] == topic)
        return cmd.response(codes.SUCCESS, body=_encode({"groupList": sorted(groups)}))

    def _store_time(self, topic: str, queue_id: int, offset: int) -> int:
        return queue_store_time(self.store, topic, queue_id, offset)

    def topic_stats(self, cmd: RemotingCommand, conn):
        topic = decode(TopicHeader, cmd.ext).topic
        cfg = self.topics.get(topic)
        if cfg is None:
            raise TopicNotExist(f"topic[{topic}] not exist")
        table = {}
        for qid in range(max(cfg.readQueueNums, cfg.writeQueueNums)):
            lo = max(self.store.min_offset(topic, qid), 0)
            hi = max(self.store.max_offset(topic, qid), 0)
            table[(topic, self.broker_name, qid)] = {
                "lastUpdateTimestamp": self._store_time(topic, qid, hi - 1) if hi > 0 else 0,
                "maxOffset": hi, "minOffset": lo}
        return cmd.response(codes.SUCCESS, body=mq_keyed_json({"topicPutTps": self._tps(TOPIC_PUT_NUMS, topic)},
                                                              "offsetTable", table))

    def _topics_of(self, h: GetConsumeStatsRequestHeader) -> list[str]:
        """getTopicsForCollectingConsumeStats: the listed topics as given; else the one topic, or every
        topic the group committed offsets for, less those its online members do not subscribe to."""
        listed = [t for t in h.topicList.split(";") if t]
        if listed:
            return listed
        if h.topic:
            topics = [h.topic]
        else:
            suffix = "@" + h.consumerGroup
            topics = sorted(k[:-len(suffix)] for k in self.store.consumer_offsets.table if k.endswith(suffix))
        group = self.consumers.groups.get(h.consumerGroup)
        if group is not None and group.subscriptions:
            topics = [t for t in topics if t in group.subscriptions]
        return topics

    def _offsets(self, group: str, topic: str, queue_nums: int, table: dict) -> int:
        """OffsetWrappers of the group's queues of a topic into `table`; returns their total diff."""
        diff = 0
        for qid in range(queue_nums):
            broker_offset = max(self.store.max_offset(topic, qid), 0)
            consumer_offset = max(self.store.consumer_offsets.query(group, topic, qid), 0)
            wrapper = {"brokerOffset": broker_offset, "consumerOffset": consumer_offset,
                       "lastTimestamp": 0, "pullOffset": consumer_offset}
            if consumer_offset > 0:
                wrapper["lastTimestamp"] = self._store_time(topic, qid, consumer_offset - 1)
            table[(topic, self.broker_name, qid)] = wrapper
            diff += broker_offset - consumer_offset
        return diff

    def consume_stats(self, cmd: RemotingCommand, conn):
        h = decode(GetConsumeStatsRequestHeader, cmd.ext)
        table, tps = {}, 0.0
        for topic in self._topics_of(h):
            cfg = self.topics.get(topic)
            if cfg is not None:
                self._offsets(h.consumerGroup, topic, cfg.readQueueNums, table)
                tps += self._tps(GROUP_GET_NUMS, f"{topic}@{h.consumerGroup}")
        return cmd.response(codes.SUCCESS, body=mq_keyed_json({"consumeTps": tps}, "offsetTable", table))

    def broker_consume_stats(self, cmd: RemotingCommand, conn):
        """ConsumeStatsList (GET_BROKER_CONSUME_STATS; mqadmin brokerConsumeStats): for every subscription
        group, one ConsumeStats per topic it committed offsets for (less those its online members do
        not subscribe to); `isOrder` true keeps the ordered topics only."""
        only_ordered = decode(GetConsumeStatsInBrokerHeader, cmd.ext).isOrder
        entries, total = [], 0
        for group in sorted(self.groups.table.groups):
            stats = []
            for topic in self._topics_of(GetConsumeStatsRequestHeader(group)):
                cfg = self.topics.get(topic)
                if cfg is None or (only_ordered and not cfg.order):
                    continue
                table = {}
                total += self._offsets(group, topic, cfg.writeQueueNums, table)
                stats.append(mq_keyed_json({"consumeTps": 0.0}, "offsetTable", table))
            entries.append(b"{" + _encode(group) + b":[" + b",".join(stats) + b"]}")
        body = (b'{"brokerAddr":' + _encode(self.broker_addr()) + b',"consumeStatsList":[' + b",".join(entries)
                + b'],"totalDiff":' + str(total).encode() + b',"totalInflightDiff":0}')
        return cmd.response(codes.SUCCESS, body=body)
