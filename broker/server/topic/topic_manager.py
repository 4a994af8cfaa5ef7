"""TopicConfigManager: the broker's topics, auto-created on first use as RocketMQ does."""
from __future__ import annotations

import logging
from typing import Callable

from broker.common.topic_validator import (DEFAULT_TOPIC, DLQ_PREFIX, PERM_INHERIT, PERM_READ, PERM_WRITE, RETRY_PREFIX,
                                           SCHEDULE_TOPIC, TopicError, check_topic_name, reply_topic)
from broker.store.config_files import TopicConfig, TopicConfigTable

log = logging.getLogger("topics")


class TopicManager:
    def __init__(self, table: TopicConfigTable, auto_create: bool, default_queue_nums: int, cluster: str | None = None):
        self.table = table
        self.auto_create = auto_create
        self.default_queue_nums = default_queue_nums
        self.on_change: list[Callable[[], None]] = []  # e.g. re-register with the name servers
        # TBW102 only with auto-creation, as RocketMQ's TopicConfigManager: its route is what tells
        # name servers and clients that a send may create a topic (without it a Java producer
        # stops at "No route info of this topic" instead of being refused by every broker)
        for name, nums in ((DEFAULT_TOPIC, default_queue_nums), (SCHEDULE_TOPIC, 18)):
            if name == DEFAULT_TOPIC and not auto_create:
                continue
            if name not in table.topics:
                table.topics[name] = TopicConfig(name, nums, nums, PERM_READ | PERM_WRITE | PERM_INHERIT)
        # <cluster>_REPLY_TOPIC, one queue, as RocketMQ's TopicConfigManager makes it at start: a
        # request-reply responder sends its replies there (routed by the name server like any topic)
        if cluster and reply_topic(cluster) not in table.topics:
            table.topics[reply_topic(cluster)] = TopicConfig(reply_topic(cluster), 1, 1, PERM_READ | PERM_WRITE)

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.topics.get(topic)

    def get_or_create(self, topic: str, queue_nums: int | None = None) -> TopicConfig | None:
        """The topic's config; created when unknown and auto-creation is on (retry and dead-letter
        topics always: the broker itself writes them). None when it may not be created."""
        cfg = self.table.topics.get(topic)
        if cfg is not None:
            return cfg
        system = topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX)
        if not (self.auto_create or system):
            return None
        check_topic_name(topic)
        n = 1 if system else (queue_nums or self.default_queue_nums)
        return self.create(TopicConfig(topic, n, n, PERM_READ | PERM_WRITE))

    def create(self, cfg: TopicConfig) -> TopicConfig:
        check_topic_name(cfg.topicName)
        self.table.put(cfg)
        log.info("topic %s: %d queues, perm %d", cfg.topicName, cfg.writeQueueNums, cfg.perm)
        for cb in self.on_change:
            cb()
        return cfg

    def delete(self, topic: str) -> TopicConfig | None:
        """The topic's config goes (DELETE_TOPIC_IN_BROKER); on_change re-registers without it."""
        cfg = self.table.remove(topic)
        if cfg is not None:
            log.info("topic %s deleted", topic)
            for cb in self.on_change:
                cb()
        return cfg

    def learn(self, queue_counts: dict[str, int]) -> list[str]:
        """A slave's topics from the queues its log holds (MessageStore.queue_counts): a topic it
        has no config for yet, or fewer queues than it holds, gets one, so that consumers can read
        every replicated message the moment the master is gone, before (or without) a copy of
        the master's config. Returns the topics created or widened; on_change follows."""
        learned = []
        for topic, n in sorted(queue_counts.items()):
            cfg = self.table.topics.get(topic)
            if cfg is not None and cfg.readQueueNums >= n:
                continue
            try:
                check_topic_name(topic)
            except TopicError as e:
                log.warning("consume queue directory %r is not a topic: %s", topic, e)
                continue
            if cfg is None:
                cfg = TopicConfig(topic, n, n, PERM_READ | PERM_WRITE)
            else:
                cfg = TopicConfig(**{**vars(cfg), "readQueueNums": n, "writeQueueNums": max(n, cfg.writeQueueNums)})
            learned.append(cfg)
        if learned:
            self.table.put_learned(learned)
            log.info("topics learned from the replicated log: %s",
                     ", ".join(f"{c.topicName} ({c.readQueueNums} queues)" for c in learned))
            for cb in self.on_change:
                cb()
        return [c.topicName for c in learned]

    def serialize_wrapper(self) -> dict:
        """TopicConfigSerializeWrapper for REGISTER_BROKER."""
        return {"topicConfigTable": {n: vars(c) for n, c in self.table.topics.items()},
                "dataVersion": dict(self.table.data_version)}
