"""What a put or a get returns: RocketMQ's PutMessageStatus / GetMessageStatus and results."""
from __future__ import annotations

import asyncio
import enum

import numpy as np

from broker.kernels.codec import msg_id as _msg_id


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    # DLedger mode: no quorum in time, or too many appends waiting for one (DLedgerCommitLog)
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    # controller mode: the SyncStateSet is smaller than minInSyncReplicas (refused before the put)
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"


class PutFuture(asyncio.Future):
    """A put's future (its PutStatus once known) that can also say why it failed: `remark`, sent
    to the client after RocketMQ's own remark for the status (DLedger mode: which member stopped
    leading, or which entry no majority held in time)."""

    remark: str | None = None


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"


class PutResult:
    __slots__ = ("status", "physical_offset", "queue_offset", "size", "store_timestamp", "_store_host")

    def __init__(self, status, physical_offset, queue_offset, size, store_timestamp, store_host):
        self.status = status
        self.physical_offset = physical_offset
        self.queue_offset = queue_offset
        self.size = size
        self.store_timestamp = store_timestamp
        self._store_host = store_host

    @property
    def msg_id(self) -> str:
        """offsetMsgId: 32 upper-case hex chars of store IPv4, port and physical offset."""
        return _msg_id(self._store_host, self.physical_offset)

    @property
    def end_offset(self) -> int:
        return self.physical_offset + self.size

    def __repr__(self) -> str:
        return (f"PutResult({self.status.name}, phys={self.physical_offset}, queue_offset={self.queue_offset}, "
                f"size={self.size})")


class BatchChunk:
    """Records of one put_batch that landed in one segment."""

    __slots__ = ("phys", "queue_offset", "count")

    def __init__(self, phys: int, queue_offset: int, count: int):
        self.phys = phys
        self.queue_offset = queue_offset
        self.count = count


class BatchPutResult:
    __slots__ = ("status", "chunks", "count", "end_offset", "store_timestamp", "_sizes", "_store_host")

    def __init__(self, status, chunks: list[BatchChunk], count, end_offset, store_timestamp, sizes, store_host):
        self.status = status
        self.chunks = chunks
        self.count = count
        self.end_offset = end_offset
        self.store_timestamp = store_timestamp
        self._sizes = sizes
        self._store_host = store_host

    @property
    def queue_offset(self) -> int:
        return self.chunks[0].queue_offset if self.chunks else -1

    def physical_offsets(self) -> np.ndarray:
        """Physical offset of every record, in order (computed on demand, not on the put path)."""
        out = np.empty(self.count, np.int64)
        i = 0
        for c in self.chunks:
            sizes = self._sizes[i:i + c.count]
            out[i] = c.phys
            if c.count > 1:
                out[i + 1:i + c.count] = c.phys + np.cumsum(sizes[:-1])
            i += c.count
        return out

    def msg_ids(self) -> list[str]:
        return [_msg_id(self._store_host, int(p)) for p in self.physical_offsets()]


class GetResult:
    __slots__ = ("status", "messages", "queue_offsets", "next_offset", "min_offset", "max_offset", "total_bytes",
                 "suggest_slave", "count")

    def __init__(self, status, next_offset, min_offset, max_offset, messages=(), queue_offsets=(), total_bytes=0,
                 count=None):
        self.status = status
        # zero-copy views of whole stored records (get(spans=True): of runs of records back to back)
        self.messages: list[memoryview] = messages if type(messages) is list else list(messages)
        self.queue_offsets: list[int] = queue_offsets if type(queue_offsets) is list else list(queue_offsets)
        self.count = len(self.messages) if count is None else count  # records
        self.next_offset = next_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.total_bytes = total_bytes
        # RocketMQ's suggestPullingFromSlave: the unread backlog behind these messages is larger
        # than accessMessageInMemoryMaxRatio % of RAM (it would be read from disk, not memory)
        self.suggest_slave = False

    def release(self) -> None:
        """Drop the views (they pin their segment's map until released)."""
        for m in self.messages:
            m.release()
        self.messages = []
