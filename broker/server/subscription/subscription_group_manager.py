"""SubscriptionGroupManager: the broker's consumer groups and their settings (RocketMQ's
SubscriptionGroupConfig), persisted in config/subscriptionGroup.json.

A group unknown here is created on first use when autoCreateSubscriptionGroup is on (as RocketMQ's
findSubscriptionGroupConfig), with retryMaxTimes = the broker's maxReconsumeTimes, so a broker
whose groups were never configured behaves as before. What a group's config changes:
- consumeEnable=false: pulls and pops are refused NO_PERMISSION ("subscription group no
  permission, <group>");
- retryMaxTimes: the retries before %DLQ% for CONSUMER_SEND_MSG_BACK and the pop revive;
- consumeMessageOrderly: a FIFO group; the gRPC front answers such a group's clients fifo=true
  and pops for it in order (broker.proxy.client_settings, consumer_activity).
"""
from __future__ import annotations

import logging

from broker.remoting import codes
from broker.remoting.refusals import NoPermission, Refusal
from broker.store.subscription_group_table import SubscriptionGroupConfig, SubscriptionGroupTable

log = logging.getLogger("groups")


class SubscriptionGroupNotExist(Refusal):
    response_code = codes.SUBSCRIPTION_GROUP_NOT_EXIST


class SubscriptionGroupManager:
    def __init__(self, table: SubscriptionGroupTable, auto_create: bool, default_retry_max_times: int):
        self.table = table
        self.auto_create = auto_create
        self.default_retry_max_times = default_retry_max_times

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.groups.get(group)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, created (and persisted in the background) when unknown and
        autoCreateSubscriptionGroup is on; None when it may not be created."""
        cfg = self.table.groups.get(group)
        if cfg is None and self.auto_create and group:
            cfg = SubscriptionGroupConfig(group, retryMaxTimes=self.default_retry_max_times)
            self.table.put(cfg)
            log.info("subscription group %s created on first use", group)
        return cfg

    def check_consumable(self, group: str) -> SubscriptionGroupConfig:
        """A pull's or a pop's check (RocketMQ's PullMessageProcessor / PopMessageProcessor)."""
        cfg = self.find(group)
        if cfg is None:
            raise SubscriptionGroupNotExist(f"subscription group [{group}] does not exist, "
                                            f"create it first (autoCreateSubscriptionGroup=false)")
        if not cfg.consumeEnable:
            raise NoPermission(f"subscription group no permission, {group}")
        return cfg

    def retry_max_times(self, group: str) -> int:
        """The retries before %DLQ%: the group's retryMaxTimes, else the broker's maxReconsumeTimes."""
        cfg = self.table.groups.get(group)
        return cfg.retryMaxTimes if cfg is not None else self.default_retry_max_times

    def update(self, fields: dict, cfg: SubscriptionGroupConfig) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: a field the request leaves out takes its default
        (retryMaxTimes: the broker's maxReconsumeTimes), as RocketMQ replaces the whole config."""
        if "retryMaxTimes" not in fields:
            cfg.retryMaxTimes = self.default_retry_max_times
        old = self.table.groups.get(cfg.groupName)
        self.table.put(cfg)
        log.info("subscription group %s %s: %s", cfg.groupName, "updated" if old else "created", cfg)

    def delete(self, group: str) -> bool:
        return self.table.remove(group) is not None

    def serialize_wrapper(self) -> dict:
        """SubscriptionGroupWrapper (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)."""
        return {"subscriptionGroupTable": {n: vars(c) for n, c in self.table.groups.items()},
                "dataVersion": dict(self.table.data_version)}
