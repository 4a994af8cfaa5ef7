"""LocalFileOffsetStore: a broadcasting consumer's offsets, kept by the consumer itself (RocketMQ's
noun). Every member of a broadcasting group reads every message, so the broker's one offset per
group and queue cannot say where each member is: each keeps its own, in
<dir>/<clientId>/<group>/offsets.json, where <dir> is Java's rocketmq.client.localOffsetStoreDir
(~/.rocketmq_offsets by default). A consumer restarted with the same client id (the same
instance name on the same host) carries on where it left off.

Java's fastjson writes the table with MessageQueue objects as map keys, which is not JSON; this
file says the same in JSON: {"offsetTable": [{"topic", "brokerName", "queueId", "offset"}, ...]}.
A write goes to offsets.json.tmp, the previous content to offsets.json.bak, and the new file is
renamed into place (MixAll.string2File): a crash mid-write leaves the old file or the .bak, and a
file found empty or unreadable is read from the .bak instead.
"""
from __future__ import annotations

import logging
import os

import msgspec

from broker.client.errors import ClientError
from broker.client.offset_store import OffsetStore
from broker.client.route import MessageQueue

log = logging.getLogger("client.consumer")

LOCAL_OFFSET_STORE_DIR = os.path.join("~", ".rocketmq_offsets")  # rocketmq.client.localOffsetStoreDir


class LocalOffsetStoreError(ClientError):
    """Neither offsets.json nor its .bak could be read as an offset table."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"local offset store {path}: {reason}")
        self.path = path


def _parse(text: bytes, path: str) -> dict[MessageQueue, int]:
    try:
        data = msgspec.json.decode(text)
        return {MessageQueue(str(e["topic"]), str(e["brokerName"]), int(e["queueId"])): int(e["offset"])
                for e in data["offsetTable"]}
    except (msgspec.DecodeError, KeyError, TypeError, ValueError) as e:
        raise LocalOffsetStoreError(path, f"not an offset table ({type(e).__name__}: {e})") from None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class LocalFileOffsetStore(OffsetStore):
    def __init__(self, client_id: str, group: str, store_dir: str | None = None):
        super().__init__()
        self.group = group
        self.path = os.path.join(os.path.expanduser(store_dir or LOCAL_OFFSET_STORE_DIR), client_id, group,
                                 "offsets.json")

    def read_file(self) -> dict[MessageQueue, int]:
        """The table as last persisted: offsets.json, or its .bak when that is empty or unreadable."""
        text = _read(self.path)
        if text.strip():
            try:
                return _parse(text, self.path)
            except LocalOffsetStoreError as e:
                log.warning("%s; trying %s.bak", e, self.path)
        bak = _read(self.path + ".bak")
        return _parse(bak, self.path + ".bak") if bak.strip() else {}

    def load(self) -> None:
        self.table.update(self.read_file())

    async def read_store(self, mq: MessageQueue) -> int:
        offset = self.read_file().get(mq, -1)
        if offset >= 0:
            self.table[mq] = offset
        return offset

    async def persist(self, mq: MessageQueue) -> None:
        if mq in self.table:
            self._write({mq})

    async def persist_all(self) -> None:
        if self.table:
            self._write(set(self.table))

    def _write(self, mqs: set[MessageQueue]) -> None:
        """Merge these queues' offsets into the file (queues not held now keep their entries)."""
        try:
            merged = self.read_file()
        except LocalOffsetStoreError as e:
            log.error("%s: rewriting it from memory", e)
            merged = {}
        merged.update({mq: self.table[mq] for mq in mqs if mq in self.table})
        data = msgspec.json.encode({"offsetTable": [
            {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off}
            for mq, off in sorted(merged.items())]})
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            _write(self.path + ".tmp", data)
            previous = _read(self.path)
            if previous.strip():
                _write(self.path + ".bak", previous)
            os.replace(self.path + ".tmp", self.path)
        except OSError as e:  # a full disk, say: the offsets stay in memory and the next persist tries again
            log.error("%s: persisting offsets to %s failed: %s", self.group, self.path, e)
