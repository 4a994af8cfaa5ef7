"""SlaveSynchronize: a slave copies its master's topic config, consumer offsets, delay offsets,
subscription groups and timer checkpoint every 10 s (3 s after start), as RocketMQ's does (a DLedger follower every
flushConsumerOffsetInterval: see BrokerController.start), so that consumers reading from it while the
master is down find their topics and resume where they were, and a failover keeps each group's
settings (a FIFO group stays FIFO, retryMaxTimes stays the group's). Offsets only move forward: an
offset committed on the slave while the master was down is never replaced by the master's older
one when it returns (RocketMQ #1094 makes consumers re-read there)."""
from __future__ import annotations

import asyncio
import logging
import struct

import msgspec

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.store.config_files import TopicConfig
from broker.store.subscription_group_table import SubscriptionGroupConfig

log = logging.getLogger("broker")
FIRST_DELAY, PERIOD = 3.0, 10.0


class SlaveSynchronize:
    def __init__(self, controller):
        self.c = controller
        self.master_addr: str | None = None  # the master's remoting address, from the name server
        self._conn = None
        self._failing: str | None = None

    async def _call(self, code: int, raw: bool = False):
        if self._conn is None or self._conn.transport is None:
            host, _, port = self.master_addr.rpartition(":")
            self._conn = await asyncio.wait_for(connect(host, int(port)), 3)
        r = await self._conn.request(RemotingCommand.request(code, {}), 5)
        if r.code != codes.SUCCESS:
            raise OSError(f"code {r.code}: {r.remark}")
        return bytes(r.body) if raw else msgspec.json.decode(bytes(r.body))

    async def sync_all(self) -> None:
        if not self.master_addr:
            return
        try:
            self._topics(await self._call(codes.GET_ALL_TOPIC_CONFIG))
            moved = self.c.store.consumer_offsets.merge((await self._call(codes.GET_ALL_CONSUMER_OFFSET))
                                                        .get("offsetTable") or {})
            if moved:
                self.c.store.consumer_offsets.persist_soon()
            delay = (await self._call(codes.GET_ALL_DELAY_OFFSET)).get("offsetTable") or {}
            if self.c.schedule is not None:
                self.c.schedule.merge({int(k): int(v) for k, v in delay.items()})
                self.c.schedule.persist_soon()
            self._groups(await self._call(codes.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
            if self.c.timer is not None and self.c.store.config.timerWheelEnable:
                self._timer(await self._call(codes.GET_TIMER_CHECK_POINT, raw=True))
            if self._failing:
                log.info("synchronizing from master %s again", self.master_addr)
            self._failing = None
        except (OSError, asyncio.TimeoutError, msgspec.DecodeError, ValueError, TypeError, AttributeError) as e:
            if self._failing != str(e):  # once per cause, not every 10 s while the master is down
                log.warning("cannot synchronize from master %s: %s", self.master_addr, e or type(e).__name__)
                self._failing = str(e)
            self.close()

    def _topics(self, data: dict) -> None:
        table = self.c.topics.table
        version = data.get("dataVersion") or {}
        if version == table.data_version:
            return
        known = set(TopicConfig.__dataclass_fields__)
        topics = {name: TopicConfig(**{k: v for k, v in cfg.items() if k in known})
                  for name, cfg in (data.get("topicConfigTable") or {}).items()}
        table.replace(topics, version)
        log.info("topic config copied from master %s: %d topics", self.master_addr, len(topics))
        self.c.topics.learn(self.c.store.queue_counts())  # what the log holds stays served

    def _groups(self, data: dict) -> None:
        """RocketMQ's syncSubscriptionGroupConfig: the master's table replaces ours when its data
        version differs."""
        table = self.c.groups.table
        version = data.get("dataVersion") or {}
        if version == table.data_version:
            return
        groups = {name: SubscriptionGroupConfig.from_json(cfg)
                  for name, cfg in (data.get("subscriptionGroupTable") or {}).items()}
        table.replace(groups, version)
        log.info("subscription groups copied from master %s: %d groups", self.master_addr, len(groups))

    def _timer(self, body: bytes) -> None:
        """syncTimerCheckPoint: the master's read time and queue offset (TimerCheckpoint.encode's
        56 bytes; ours add the commit log's end at that checkpoint)."""
        if len(body) < 56:
            raise ValueError(f"a timer checkpoint of {len(body)} bytes")
        last_read_ms, _, _, master_queue_offset = struct.unpack_from(">4q", body)
        cl_offset = struct.unpack_from(">q", body, 56)[0] if len(body) >= 64 else 0
        self.c.timer.sync_from_master(last_read_ms, master_queue_offset, cl_offset)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
