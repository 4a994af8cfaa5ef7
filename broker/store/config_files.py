"""config/consumerOffset.json and config/topics.json, kept as RocketMQ keeps them.

Writes are atomic (RocketMQ's MixAll.string2File, made crash-safe): the new content goes to
`<file>.tmp` and is fsynced, the current file is copied to `<file>.bak`, then the temp file is
renamed over the original and the directory fsynced. Loading falls back to `.bak` when the file is
missing or unreadable. RocketMQ writes these with fastjson, which leaves integer map keys unquoted
(`{0:250}`); we write strict JSON (fastjson reads it) and read both.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
from dataclasses import asdict, dataclass, field

from broker.store.config_writer import ConfigFileWriter
from broker.store.durable import fsync_dir

log = logging.getLogger(__name__)
_UNQUOTED_INT_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')


def write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(path):
        shutil.copyfile(path, path + ".bak")
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


WRITER = ConfigFileWriter(write_atomic)  # persist_soon's background writer, one per process


def parse_fastjson(text: str) -> object:
    return json.loads(_UNQUOTED_INT_KEY.sub(r'\1"\2"\3', text))


def read_with_backup(path: str) -> object | None:
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, encoding="utf-8") as f:
                text = f.read()
            if text.strip():
                return parse_fastjson(text)
        except FileNotFoundError:
            continue
        except ValueError as e:
            log.error("%s is unreadable (%s); trying the backup", candidate, e)
    return None


class ConsumerOffsetTable:
    """RocketMQ's ConsumerOffsetManager table: "topic@group" -> {queueId: offset}."""

    def __init__(self, config_dir: str):
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self.table: dict[str, dict[int, int]] = {}
        self.dirty = False

    def load(self) -> None:
        data = read_with_backup(self.path) or {}
        self.table = {k: {int(q): int(o) for q, o in v.items()} for k, v in data.get("offsetTable", {}).items()}

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(f"{topic}@{group}", {})[queue_id] = offset
        self.dirty = True

    def raise_to(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """commit(offset) when it is past the queue's offset (query's), else nothing: one key made."""
        key = f"{topic}@{group}"
        queues = self.table.get(key)
        if queues is None:
            if offset > -1:
                self.table[key] = {queue_id: offset}
                self.dirty = True
        elif offset > queues.get(queue_id, -1):
            queues[queue_id] = offset
            self.dirty = True

    def merge(self, table: dict) -> int:
        """Offsets copied from the master (a slave's SlaveSynchronize): an offset never moves back,
        so commits made here while the master was down survive its return (RocketMQ #1094).
        Returns how many offsets moved."""
        moved = 0
        for key, queues in table.items():
            mine = self.table.setdefault(str(key), {})
            for q, off in queues.items():
                q, off = int(q), int(off)
                if off > mine.get(q, -1):
                    mine[q] = off
                    moved += 1
        if moved:
            self.dirty = True
        return moved

    def remove_topic(self, topic: str) -> int:
        """Every group's offsets of a deleted topic; returns how many groups had some."""
        keys = [k for k in self.table if k.rpartition("@")[0] == topic]
        for k in keys:
            del self.table[k]
        if keys:
            self.dirty = True
        return len(keys)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """-1 when the group never committed an offset for the queue (as RocketMQ)."""
        return self.table.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def _text(self) -> str:
        return json.dumps({"offsetTable": {k: {str(q): o for q, o in sorted(v.items())} for k, v in self.table.items()}},
                          indent=1)

    def persist(self) -> None:
        """Write now (shutdown)."""
        write_atomic(self.path, self._text())
        self.dirty = False

    def persist_soon(self) -> None:
        """Write from the background writer: the event loop never waits for an fsync."""
        WRITER.submit(self.path, self._text())
        self.dirty = False


@dataclass
class TopicConfig:
    topicName: str
    readQueueNums: int = 4
    writeQueueNums: int = 4
    perm: int = 6
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int = 0
    order: bool = False
    # RocketMQ 5's topic attributes, as its topics.json keeps them: "message.type" (NORMAL, FIFO,
    # DELAY, TRANSACTION, MIXED, UNSPECIFIED) is the one this broker knows (broker.common.topic_attributes)
    attributes: dict = field(default_factory=dict)


class TopicConfigTable:
    """RocketMQ's TopicConfigManager table with its dataVersion."""

    def __init__(self, config_dir: str):
        self.path = os.path.join(config_dir, "topics.json")
        self.topics: dict[str, TopicConfig] = {}
        self.data_version = {"timestamp": 0, "counter": 0}

    def load(self) -> None:
        data = read_with_backup(self.path) or {}
        known = set(TopicConfig.__dataclass_fields__)
        self.topics = {name: TopicConfig(**{k: v for k, v in cfg.items() if k in known})
                       for name, cfg in data.get("topicConfigTable", {}).items()}
        self.data_version = data.get("dataVersion", self.data_version)

    def replace(self, topics: dict[str, TopicConfig], data_version: dict) -> None:
        """The master's whole table (a slave's SlaveSynchronize)."""
        self.topics = dict(topics)
        self.data_version = dict(data_version)
        self.persist_soon()

    def put_learned(self, configs: list[TopicConfig]) -> None:
        """Topics a slave learned from its own consume queues: kept and persisted, but the data
        version stays the master's, so SlaveSynchronize does not take them for a change."""
        for cfg in configs:
            self.topics[cfg.topicName] = cfg
        self.persist_soon()

    def put(self, cfg: TopicConfig) -> None:
        import time
        self.topics[cfg.topicName] = cfg
        self.data_version = {"timestamp": int(time.time() * 1000), "counter": self.data_version["counter"] + 1}
        self.persist_soon()

    def remove(self, topic: str) -> TopicConfig | None:
        import time
        cfg = self.topics.pop(topic, None)
        if cfg is not None:
            self.data_version = {"timestamp": int(time.time() * 1000), "counter": self.data_version["counter"] + 1}
            self.persist_soon()
        return cfg

    def _text(self) -> str:
        return json.dumps({"topicConfigTable": {n: asdict(c) for n, c in sorted(self.topics.items())},
                           "dataVersion": self.data_version}, indent=1)

    def persist(self) -> None:
        """Write now (shutdown)."""
        write_atomic(self.path, self._text())

    def persist_soon(self) -> None:
        """Write from the background writer: a topic created by a send never waits for an fsync.
        (A crash in between loses only the file's copy: a store's topics are also learned back
        from its consume queues at start.)"""
        WRITER.submit(self.path, self._text())
