"""CommitLog: the one append-only log all queues share. Only its single writer process appends."""
from __future__ import annotations

import time

from broker.kernels.codec import END_FILE_MIN_BLANK_LENGTH, FIXED_LEN_V4, encode_batch, encode_record, write_blank
from broker.store.config import MessageStoreConfig
from broker.store.errors import MessageIllegal
from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import MappedFileQueue


class BatchChunk:
    """Records of one put_batch that landed in one segment."""

    __slots__ = ("phys", "queue_offset", "count")

    def __init__(self, phys: int, queue_offset: int, count: int):
        self.phys = phys
        self.queue_offset = queue_offset
        self.count = count


class CommitLog:
    def __init__(self, config: MessageStoreConfig, writable: bool):
        self.config = config
        self.queue = MappedFileQueue(config.commitlog_dir, config.mappedFileSizeCommitLog, writable,
                                     warm=config.warmMapedFileEnable)
        self.store_host = config.store_host
        self.max_message_size = config.maxMessageSize
        self.wrote = 0
        self.queue_offsets: dict[tuple[bytes, int], int] = {}  # RocketMQ's topicQueueTable
        self._cur: MappedFile | None = None

    def load(self) -> None:
        self.queue.load()

    def set_write_position(self, offset: int) -> None:
        """After recovery: appends continue at `offset` (a segment boundary needs no file yet)."""
        self.wrote = offset
        self._cur = self.queue.find(offset)
        if self._cur is not None and offset == self._cur.end:
            self._cur = None
        if self.queue.writable:
            self.queue.prepare_ahead()

    def _segment_for_write(self) -> MappedFile:
        cur = self._cur
        if cur is None or self.wrote >= cur.end:
            cur = self._cur = self.queue.find(self.wrote) or self.queue.roll(self.wrote)
        return cur

    def _seal(self, cur: MappedFile) -> MappedFile:
        """Close the segment's tail with a blank and continue in the next one."""
        pos = self.wrote - cur.base
        write_blank(cur.buf, pos, cur.size - pos)
        self.wrote = cur.end
        self._cur = None
        return self._segment_for_write()

    def append(self, topic: bytes, queue_id: int, body, properties: bytes, flag: int, sys_flag: int,
               born_ts: int, born_host: bytes, reconsume_times: int = 0) -> tuple[int, int, int, int]:
        """Append one record; returns (physical offset, queue offset, size, store timestamp)."""
        if len(body) > self.max_message_size:
            raise MessageIllegal(f"body of {len(body)} bytes exceeds maxMessageSize {self.max_message_size}")
        size = FIXED_LEN_V4 + len(body) + len(topic) + len(properties) + (12 if len(born_host) == 20 else 0)
        if size + END_FILE_MIN_BLANK_LENGTH > self.queue.file_size:
            raise MessageIllegal(f"record of {size} bytes does not fit in a {self.queue.file_size}-byte segment")
        cur = self._segment_for_write()
        if size + END_FILE_MIN_BLANK_LENGTH > cur.end - self.wrote:
            cur = self._seal(cur)
        key = (topic, queue_id)
        qo = self.queue_offsets.get(key, 0)
        phys = self.wrote
        store_ts = time.time_ns() // 1_000_000
        n = encode_record(cur.buf, phys - cur.base, phys, qo, store_ts, topic, queue_id, body, properties,
                          flag, sys_flag, born_ts, born_host, self.store_host, reconsume_times, 0)
        self.wrote = phys + n
        self.queue_offsets[key] = qo + 1
        return phys, qo, n, store_ts

    def append_batch(self, topic: bytes, queue_id: int, bodies: list, properties, flag: int, sys_flag: int,
                     born_ts: int, born_host: bytes) -> tuple[list[BatchChunk], int]:
        """Append many records of one queue; returns (chunks per segment, store timestamp)."""
        limit = self.max_message_size
        if any(len(b) > limit for b in bodies):
            raise MessageIllegal(f"a body in the batch exceeds maxMessageSize {limit}")
        key = (topic, queue_id)
        qo = self.queue_offsets.get(key, 0)
        store_ts = time.time_ns() // 1_000_000
        chunks: list[BatchChunk] = []
        done = 0
        cur = self._segment_for_write()
        while done < len(bodies):
            rest = bodies if done == 0 else bodies[done:]
            props = properties if type(properties) is not list or done == 0 else properties[done:]
            count, end = encode_batch(cur.buf, self.wrote - cur.base, cur.size, self.wrote, qo + done, store_ts,
                                      topic, queue_id, rest, props, flag, sys_flag, born_ts, born_host,
                                      self.store_host)
            if count:
                chunks.append(BatchChunk(self.wrote, qo + done, count))
                self.wrote = cur.base + end
                done += count
            if done < len(bodies):
                if count == 0 and self.wrote == cur.base:
                    raise MessageIllegal("a record of the batch does not fit in an empty segment")
                cur = self._seal(cur)
        self.queue_offsets[key] = qo + done
        return chunks, store_ts

    def view(self, offset: int, size: int) -> memoryview | None:
        """Zero-copy view of [offset, offset+size) if it lies in one mapped segment."""
        mf = self.queue.find(offset)
        if mf is None or offset + size > mf.end:
            return None
        return mf.view(offset, offset + size)

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    def close(self) -> None:
        self._cur = None
        self.queue.close()
