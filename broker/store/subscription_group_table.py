"""config/subscriptionGroup.json, kept as RocketMQ's SubscriptionGroupManager keeps it:
{"subscriptionGroupTable": {group: SubscriptionGroupConfig}, "dataVersion": {...}}.

Written as topics.json is (config_files.write_atomic: tmp, .bak, rename). Unlike topics.json,
whose topics are learned back from the consume queues, nothing else remembers a group's settings
(a FIFO group, a disabled one): a file that does not parse is read from its .bak, and when
neither parses the broker refuses to start, naming the file, rather than silently turn FIFO
groups into concurrent ones.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, fields

from broker.store.config_files import WRITER, parse_fastjson, write_atomic
from broker.store.errors import CorruptStoreError

log = logging.getLogger(__name__)


@dataclass
class SubscriptionGroupConfig:
    """RocketMQ's SubscriptionGroupConfig, its defaults (retryMaxTimes's is the broker's
    maxReconsumeTimes, given by the manager)."""
    groupName: str
    consumeEnable: bool = True
    consumeFromMinEnable: bool = True
    consumeBroadcastEnable: bool = True
    consumeMessageOrderly: bool = False
    retryQueueNums: int = 1
    retryMaxTimes: int = 16
    brokerId: int = 0
    whichBrokerWhenConsumeSlowly: int = 1
    notifyConsumerIdsChangedEnable: bool = True
    groupSysFlag: int = 0
    consumeTimeoutMinute: int = 15

    @classmethod
    def from_json(cls, d: dict) -> "SubscriptionGroupConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


_BOOLS = {f.name for f in fields(SubscriptionGroupConfig) if f.type in ("bool", bool)}
_INTS = {f.name for f in fields(SubscriptionGroupConfig) if f.type in ("int", int)}


def validate(d: object) -> SubscriptionGroupConfig:
    """A config from a request body; ValueError naming the field that is wrong."""
    if not isinstance(d, dict):
        raise ValueError("the body must be a SubscriptionGroupConfig JSON object")
    name = d.get("groupName")
    if not isinstance(name, str) or not name or len(name) > 255 or not all(
            c.isascii() and (c.isalnum() or c in "%|_-") for c in name):
        raise ValueError(f"groupName {name!r} must be 1..255 of letters, digits, %|_-")
    for k in _BOOLS:
        if k in d and not isinstance(d[k], bool):
            raise ValueError(f"{k} {d[k]!r} must be true or false")
    for k in _INTS:
        if k in d and (isinstance(d[k], bool) or not isinstance(d[k], int)):
            raise ValueError(f"{k} {d[k]!r} must be an integer")
    for k in ("retryMaxTimes", "retryQueueNums", "brokerId", "groupSysFlag"):
        if d.get(k, 0) < 0:
            raise ValueError(f"{k} {d[k]} must not be negative")
    if d.get("consumeTimeoutMinute", 15) <= 0:
        raise ValueError(f"consumeTimeoutMinute {d['consumeTimeoutMinute']} must be positive")
    return SubscriptionGroupConfig.from_json(d)


class SubscriptionGroupTable:
    def __init__(self, config_dir: str):
        self.path = os.path.join(config_dir, "subscriptionGroup.json")
        self.groups: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = {"timestamp": 0, "counter": 0}

    def load(self) -> None:
        data = self._read()
        try:
            self.groups = {n: SubscriptionGroupConfig.from_json(c)
                           for n, c in (data.get("subscriptionGroupTable") or {}).items()}
            self.data_version = data.get("dataVersion") or self.data_version
        except (TypeError, AttributeError) as e:
            raise CorruptStoreError(self.path, 0, f"not a subscription group table: {e}") from None

    def _read(self) -> dict:
        errors = []
        for candidate in (self.path, self.path + ".bak"):
            try:
                with open(candidate, encoding="utf-8") as f:
                    text = f.read()
            except FileNotFoundError:
                continue
            try:
                data = parse_fastjson(text)
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                if errors:
                    log.error("%s; read %s instead", errors[0], candidate)
                return data
            except ValueError as e:
                errors.append(f"{candidate} is unreadable ({e})")
        if errors:  # a file there, and neither it nor its backup parses
            raise CorruptStoreError(self.path, 0, "; ".join(errors))
        return {}

    def put(self, cfg: SubscriptionGroupConfig) -> None:
        self.groups[cfg.groupName] = cfg
        self._changed()

    def replace(self, groups: dict[str, SubscriptionGroupConfig], data_version: dict) -> None:
        """The master's whole table (a slave's SlaveSynchronize), with the master's data version."""
        self.groups = dict(groups)
        self.data_version = dict(data_version)
        WRITER.submit(self.path, self.text())

    def remove(self, group: str) -> SubscriptionGroupConfig | None:
        cfg = self.groups.pop(group, None)
        if cfg is not None:
            self._changed()
        return cfg

    def _changed(self) -> None:
        self.data_version = {"timestamp": int(time.time() * 1000), "counter": self.data_version["counter"] + 1}
        WRITER.submit(self.path, self.text())

    def text(self) -> str:
        return json.dumps({"subscriptionGroupTable": {n: asdict(c) for n, c in sorted(self.groups.items())},
                           "dataVersion": self.data_version}, indent=1)

    async def written(self) -> None:
        """Until the background writer has written every change so far (an admin's update is
        answered once it is on disk, as RocketMQ persists it before answering)."""
        await asyncio.get_running_loop().run_in_executor(None, WRITER.drain)

    def persist(self) -> None:
        """Write now (shutdown)."""
        write_atomic(self.path, self.text())
