"""CommitLog: the one append-only log all queues share. Only its single writer process appends."""
from __future__ import annotations

import numpy as np

from broker.kernels.codec import Appender, advise_random, record_length
from broker.store.config import SYNC_FLUSH, MessageStoreConfig
from broker.store.mapped_file import WARM_CHUNK_ASYNC_FLUSH, WARM_CHUNK_SYNC_FLUSH
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.results import BatchChunk
from broker.store.warm_ahead import WarmAheadService


def warm_chunk_for(config: MessageStoreConfig) -> int:
    return WARM_CHUNK_SYNC_FLUSH if config.flushDiskType == SYNC_FLUSH else WARM_CHUNK_ASYNC_FLUSH




class CommitLog:
    def __init__(self, config: MessageStoreConfig, writable: bool):
        self.config = config
        self.queue = MappedFileQueue(config.commitlog_dir, config.mappedFileSizeCommitLog, writable,
                                     warm=config.warm_segments, warm_chunk=warm_chunk_for(config))
        self.store_host = config.store_host
        self._app = Appender(self.store_host, config.maxMessageSize, {}, 0)
        # Segments not warmed when made (ASYNC_FLUSH by default) are warmed ahead of the writer.
        self._warm_ahead = (WarmAheadService(self.queue.find, keep=config.commit_log_cache_bytes)
                            if writable and not config.warm_segments else None)
        self.large_folios = (self._warm_ahead is not None and config.flushDiskType != SYNC_FLUSH
                             and config.commitLogCacheBytes > 0)

    def let_go_below(self, floor) -> None:
        """floor: () -> the offset below which no service needs the log any more (flushed and
        dispatched); pages further below than commitLogCacheBytes are let go of (warm_ahead)."""
        if self._warm_ahead is not None:
            self._warm_ahead.floor = floor

    def load(self) -> None:
        self.queue.load()

    @property
    def wrote(self) -> int:
        return self._app.wrote

    @property
    def appender(self) -> Appender:
        """The write position and queue table (next offset and last end of every queue)."""
        return self._app

    @property
    def queue_offsets(self) -> dict[tuple[bytes, int], int]:
        """RocketMQ's topicQueueTable, a copy: (topic, queue id) -> next queue offset."""
        return self._app.queue_offsets

    def set_write_position(self, offset: int, queue_offsets: dict[tuple[bytes, int], int]) -> None:
        """After recovery: appends continue at `offset` with these next queue offsets."""
        self._app = Appender(self.store_host, self.config.maxMessageSize, dict(queue_offsets), offset)
        mf = self.queue.find(offset)
        if mf is None and self.queue.writable and offset % self.queue.file_size == 0:
            # Made now, before the store takes writes: left to the thread that prepares segments
            # ahead, a fresh store's first put waited for a whole segment to be warmed (1 GiB by
            # default: seconds on a busy disk, and a client's first send timed out).
            mf = self.queue.roll(offset)
        if mf is not None and offset < mf.end:
            self._attach(mf, offset)
        if self.queue.writable:
            self.queue.prepare_ahead()
        if self._warm_ahead is not None:
            self._warm_ahead.stop()
            self._warm_ahead.start(offset)

    def note_wrote(self, wrote: int) -> None:
        """The writer's position moved (published): keep the pages ahead of it warm."""
        if self._warm_ahead is not None:
            self._warm_ahead.note(wrote)

    def _next_segment(self) -> None:
        """Seal the full segment (if any) and attach the next one. The next one is made first: if
        that fails (a full disk) nothing has changed and the current segment stays open."""
        app = self._app
        base = app.segment_end if app.segment_end >= 0 else app.wrote
        mf = self.queue.find(base) or self.queue.roll(base)
        if app.segment_end >= 0:
            app.seal()
        self._attach(mf, app.wrote)

    def _attach(self, mf, offset: int) -> None:
        # Unwritten pages that are no longer cached (a reboot) must not fault back in through the
        # read-around's 2 MiB folios, which every 4 KiB SYNC_FLUSH would write back whole. Cached
        # ones keep the folios the warm-up made: the advice does not slow their write faults.
        # Large folios pay under ASYNC_FLUSH only where the writer reuses the memory of pages let
        # go of behind it (a set commitLogCacheBytes): fresh ones cost the VM's host more than
        # small ones (docs/store.md, "Pages behind").
        if not self.large_folios:
            advise_random(mf.buf, offset - mf.base)
        self._app.attach(mf.buf, mf.base)

    def append(self, topic: bytes, queue_id: int, body, properties: bytes, flag: int, sys_flag: int,
               born_ts: int, born_host: bytes, reconsume_times: int = 0) -> tuple[int, int, int, int]:
        """Append one record; returns (physical offset, queue offset, size, store timestamp).
        born_ts < 0 stamps the store time."""
        r = self._app.append(topic, queue_id, body, properties, flag, sys_flag, born_ts, born_host, reconsume_times)
        if r is None:
            self._next_segment()
            r = self._app.append(topic, queue_id, body, properties, flag, sys_flag, born_ts, born_host,
                                 reconsume_times)
        return r

    def append_batch(self, topic: bytes, queue_id: int, bodies: list, properties, flag: int | list, sys_flag: int,
                     born_ts: int, born_host: bytes) -> tuple[list[BatchChunk], int]:
        """Append many records of one queue; returns (chunks per segment, store timestamp)."""
        chunks: list[BatchChunk] = []
        done = 0
        ts = 0
        while done < len(bodies):
            rest = bodies if done == 0 else bodies[done:]
            props = properties if type(properties) is not list or done == 0 else properties[done:]
            flags = flag if type(flag) is not list or done == 0 else flag[done:]
            count, phys, qo, ts = self._app.append_batch(topic, queue_id, rest, props, flags, sys_flag, born_ts,
                                                         born_host)
            if count:
                chunks.append(BatchChunk(phys, qo, count))
                done += count
            if done < len(bodies):
                try:
                    self._next_segment()
                except OSError:
                    if chunks:
                        self._rewind(chunks[0].phys, topic, queue_id, chunks[0].queue_offset)
                    raise
        return chunks, ts

    def _rewind(self, offset: int, topic: bytes, queue_id: int, queue_offset: int) -> None:
        """Undo the unpublished records of a batch that could not be finished: the write position
        and the queue's next offset go back, and the first record's size word is zeroed so that
        a recovery after a crash cannot mistake the leftovers for stored messages."""
        mf = self.queue.find(offset)
        mf.mm[offset - mf.base:offset - mf.base + 8] = 0
        self._app.rewind(offset, topic, queue_id, queue_offset)

    def record_sizes(self, topic: bytes, bodies: list, properties, born_host: bytes) -> np.ndarray:
        """Each record's size for these bodies (a batch's result computes offsets from them)."""
        fixed = record_length(0, len(topic), 0, len(born_host) == 20, len(self.store_host) == 20)
        n = len(bodies)
        if type(properties) is list:
            return np.fromiter((len(b) + len(p) + fixed for b, p in zip(bodies, properties)), np.int64, n)
        return np.fromiter((len(b) for b in bodies), np.int64, n) + (fixed + len(properties))

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    def close(self) -> None:
        if self._warm_ahead is not None:
            self._warm_ahead.stop()
        self._app.attach(None, -1)
        self.queue.close()
