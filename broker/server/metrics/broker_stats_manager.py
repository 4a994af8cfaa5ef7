"""BrokerStatsManager: the per-topic and per-group figures of VIEW_BROKER_STATS_DATA (315), what
mqadmin `statsAll` prints as #InTPS, #OutTPS and the 24-hour counts.

RocketMQ keeps a StatsItem per (stats name, key) and samples it every 10 s (the minute window: 7
samples), every 10 min (the hour window: 7) and every hour (the day window: 25); a window's sum is
its newest figure minus its oldest, its tps that sum per second. Here:
- TOPIC_PUT_NUMS <topic>: the messages the topic's consume queues gained (the sum of their max
  offsets). The send kernel appends without counting per topic; the queues count for it.
- GROUP_GET_NUMS / GROUP_GET_SIZE <topic>@<group>: the messages (record bytes) pulls found,
  counted by PullMessageProcessor.
- BROKER_PUT_NUMS / BROKER_GET_NUMS <brokerClusterName>: the store's put and get counters.
A window's newest figure is the value now (not the last 10 s sample), so a figure shows as soon
as a message is put; its oldest is the oldest sample the window holds, the first one taken when
the broker started.
"""
from __future__ import annotations

import time
from collections import deque

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
# (period in seconds, samples kept): StatsItem's minute, hour and day lists
WINDOWS = {"statsMinute": (10.0, 7), "statsHour": (600.0, 7), "statsDay": (3600.0, 25)}


class StatsNotExist(LookupError):
    pass


class BrokerStatsManager:
    def __init__(self, store, topics, cluster: str):
        self.store = store
        self.topics = topics
        self.cluster = cluster
        self.group_gets: dict[str, list[int]] = {}  # "topic@group" -> [messages, bytes, pulls]
        # (group, topic, queue) -> the offset after the last message a pull returned (RocketMQ's
        # pull offset table: what the consumer has, committed or not; the lag metrics read it)
        self.pull_offsets: dict[tuple[str, str, int], int] = {}
        self._samples = {name: deque(maxlen=n) for name, (_, n) in WINDOWS.items()}
        self._last = {name: -1e18 for name in WINDOWS}

    def group_get(self, group: str, topic: str, messages: int, nbytes: int, queue_id: int = -1,
                  next_offset: int = -1) -> None:
        """A pull found `messages` (RocketMQ's incGroupGetNums / incGroupGetSize) and the consumer
        goes on from `next_offset` of the queue."""
        if queue_id >= 0:
            self.pull_offsets[(group, topic, queue_id)] = next_offset
        c = self.group_gets.get(f"{topic}@{group}")
        if c is None:
            c = self.group_gets[f"{topic}@{group}"] = [0, 0, 0]
        c[0] += messages
        c[1] += nbytes
        c[2] += 1

    def _topic_puts(self, topic: str) -> int:
        cfg = self.topics.get(topic)
        n = max(cfg.readQueueNums, cfg.writeQueueNums) if cfg is not None else 0
        return sum(max(self.store.max_offset(topic, q), 0) for q in range(n))

    def _now(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Every figure now: (stats name, key) -> (value, times)."""
        out = {(TOPIC_PUT_NUMS, t): (self._topic_puts(t), 0) for t in list(self.topics.table.topics)}
        for key, (msgs, nbytes, pulls) in self.group_gets.items():
            out[(GROUP_GET_NUMS, key)] = (msgs, pulls)
            out[(GROUP_GET_SIZE, key)] = (nbytes, pulls)
        out[(BROKER_PUT_NUMS, self.cluster)] = (self.store.put_msgs, 0)
        out[(BROKER_GET_NUMS, self.cluster)] = (self.store.get_msgs, 0)
        return out

    def sample(self, now: float | None = None) -> None:
        """Called every 10 s (and at start): each window takes a sample when its period is due."""
        now = time.monotonic() if now is None else now
        figures = None
        for name, (period, _) in WINDOWS.items():
            if now - self._last[name] >= period - 0.5:
                figures = figures if figures is not None else self._now()
                self._samples[name].append((now, figures))
                self._last[name] = now

    def _current(self, stats_name: str, key: str) -> tuple[int, int]:
        if stats_name == TOPIC_PUT_NUMS:
            if self.topics.get(key) is None:
                raise StatsNotExist
            return self._topic_puts(key), 0
        if stats_name in (GROUP_GET_NUMS, GROUP_GET_SIZE):
            c = self.group_gets.get(key)
            if c is None:
                raise StatsNotExist
            return (c[0] if stats_name == GROUP_GET_NUMS else c[1]), c[2]
        if stats_name in (BROKER_PUT_NUMS, BROKER_GET_NUMS) and key == self.cluster:
            return (self.store.put_msgs if stats_name == BROKER_PUT_NUMS else self.store.get_msgs), 0
        raise StatsNotExist

    def view(self, stats_name: str, key: str, now: float | None = None) -> dict:
        """BrokerStatsData: {statsMinute, statsHour, statsDay}, each {sum, tps, avgpt}; StatsNotExist
        for a name or key this broker has no figure of."""
        now = time.monotonic() if now is None else now
        value, times = self._current(stats_name, key)
        out = {}
        for name in WINDOWS:
            oldest = self._samples[name][0] if self._samples[name] else (now, {})
            then, figures = oldest
            old_value, old_times = figures.get((stats_name, key), (0, 0))
            total = max(value - old_value, 0)  # a topic deleted and made again starts from 0
            calls = times - old_times
            out[name] = {"sum": total, "tps": total / (now - then) if now > then else 0.0,
                         "avgpt": total / calls if calls > 0 else 0.0}
        return out
