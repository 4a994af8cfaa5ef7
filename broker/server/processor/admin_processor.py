"""AdminBrokerProcessor: topic creation, topic config, offsets tables, runtime info, clean."""
from __future__ import annotations

import msgspec

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import CreateTopicRequestHeader, TopicHeader, decode
from broker.remoting.refusals import BadRequest, TopicNotExist
from broker.common.topic_attributes import AttributeError_, apply_attributes
from broker.common.topic_validator import TopicError, not_sendable
from broker.store.config_files import TopicConfig


class AdminProcessor:
    def __init__(self, store, topics, schedule, runtime_table):
        self.store = store
        self.topics = topics
        self.schedule = schedule
        self.runtime_table = runtime_table  # () -> GET_BROKER_RUNTIME_INFO's table

    def handlers(self) -> dict:
        return {codes.UPDATE_AND_CREATE_TOPIC: self.create_topic, codes.GET_ALL_TOPIC_CONFIG: self.all_topics,
                codes.GET_TOPIC_CONFIG: self.topic_config, codes.DELETE_TOPIC_IN_BROKER: self.delete_topic,
                codes.GET_BROKER_RUNTIME_INFO: self.runtime_info,
                codes.GET_ALL_CONSUMER_OFFSET: self.all_consumer_offsets,
                codes.GET_ALL_DELAY_OFFSET: self.all_delay_offsets,
                codes.DELETE_EXPIRED_COMMITLOG: self.delete_expired}

    def create_topic(self, cmd: RemotingCommand, conn):
        h = decode(CreateTopicRequestHeader, cmd.ext)
        if not (0 < h.readQueueNums <= 1024 and 0 < h.writeQueueNums <= 1024):
            raise TopicError("queue numbers must be 1..1024")
        current = self.topics.get(h.topic)
        try:
            attributes = apply_attributes(current.attributes if current is not None else {}, h.attributes,
                                          create=current is None)
        except AttributeError_ as e:
            raise BadRequest(str(e)) from None
        self.topics.create(TopicConfig(h.topic, h.readQueueNums, h.writeQueueNums, h.perm, h.topicFilterType,
                                       h.topicSysFlag, h.order, attributes))
        # RocketMQ's reply keeps the remark its createResponseCommand put there before success
        return cmd.response(codes.SUCCESS, remark="not set any response code")

    def all_topics(self, cmd: RemotingCommand, conn):
        """TopicConfigAndMappingSerializeWrapper, as RocketMQ 5 answers: no static topics here, so
        the queue mappings are empty and their version never moved; the count in the header."""
        wrapper = self.topics.serialize_wrapper()
        table = {name: {**cfg, "attributes": dict(cfg.get("attributes") or {})}
                 for name, cfg in wrapper["topicConfigTable"].items()}
        body = {**wrapper, "topicConfigTable": table, "topicQueueMappingInfoMap": {},
                "topicQueueMappingDetailMap": {}, "mappingDataVersion": {"counter": 0, "stateVersion": 0,
                                                                         "timestamp": 0}}
        return cmd.response(codes.SUCCESS, {"totalTopicNum": len(table)}, body=msgspec.json.encode(body))

    def topic_config(self, cmd: RemotingCommand, conn):
        """TopicConfigAndQueueMapping: the topic's config (no static-topic mapping here)."""
        topic = decode(TopicHeader, cmd.ext).topic
        cfg = self.topics.get(topic)
        if cfg is None:
            raise TopicNotExist(f"No topic in this broker. topic: {topic}")
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode(vars(cfg)))

    def delete_topic(self, cmd: RemotingCommand, conn):
        """As RocketMQ's deleteTopicInBroker: the topic's config goes (and with it its route at the
        next registration), its groups' offsets, and its consume queues (MessageStore.delete_topic_queues):
        its messages can no longer be pulled, and a topic made again by that name starts empty at
        offset 0. Its records stay in the commit log until they expire."""
        topic = decode(TopicHeader, cmd.ext).topic
        if not topic.strip():
            raise BadRequest("The specified topic is blank.")
        if not_sendable(topic):
            raise BadRequest(f"The topic[{topic}] is conflict with system topic.")
        cfg = self.topics.get(topic)
        held = 0
        if cfg is not None:
            held = sum(max(self.store.max_offset(topic, q), 0)
                       for q in range(max(cfg.readQueueNums, cfg.writeQueueNums)))
            if held and not getattr(self.store, "deletes_topic_queues", False):
                raise BadRequest(f"topic {topic} holds {held} messages: this broker cannot delete a topic's stored "
                                 f"messages in DLedger mode (the topic can be made unreadable: updateTopicPerm)")
            self.topics.delete(topic)  # no sends to it through the kernel from here (its route goes)
        self.store.consumer_offsets.remove_topic(topic)
        if not getattr(self.store, "deletes_topic_queues", False) or self.store.is_slave:
            return cmd.response(codes.SUCCESS)

        async def drop_queues():
            await self.store.delete_topic_queues(topic)
            return cmd.response(codes.SUCCESS)
        return drop_queues()

    def all_consumer_offsets(self, cmd: RemotingCommand, conn):
        """ConsumerOffsetManager's table, for a slave's SlaveSynchronize (and admin tools)."""
        table = {k: {str(q): o for q, o in v.items()} for k, v in self.store.consumer_offsets.table.items()}
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode({"offsetTable": table}))

    def all_delay_offsets(self, cmd: RemotingCommand, conn):
        offsets = self.schedule.offsets if self.schedule is not None else {}
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode(
            {"offsetTable": {str(k): v for k, v in sorted(offsets.items())}}))

    def delete_expired(self, cmd: RemotingCommand, conn):
        """`broker admin clean` / mqadmin deleteExpiredCommitLog: expired files go now."""
        self.store.request_clean()
        return cmd.response(codes.SUCCESS)

    def runtime_info(self, cmd: RemotingCommand, conn):
        table = self.runtime_table()
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode({"table": {k: str(v) for k, v in table.items()}}))
