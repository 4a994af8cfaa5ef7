"""MessageStore: the in-process API over the store and its service processes.

The broker process is the commit log's only writer. `put` encodes straight into the mapped
segment and publishes `wrote` in the shared offset table; the flush and reput services (their
own processes, supervised here) wake on that futex. Under SYNC_FLUSH a put parks a future in
a deque ordered by end offset; each flush writes our eventfd and every future up to the new
`flushed` completes at once (group commit). Deadlines grow with offsets too, so one timer on
the oldest waiter enforces syncFlushTimeout for all of them.
"""
from __future__ import annotations

import asyncio
import collections
import enum
import fcntl
import logging
import os
import socket
import time

import numpy as np

from broker.kernels.codec import msg_id as _msg_id
from broker.services.supervisor import ServiceProcess
from broker.store.checkpoint import StoreCheckpoint
from broker.store.commit_log import BatchChunk, CommitLog
from broker.store.config import SYNC_FLUSH, MessageStoreConfig
from broker.store.config_files import ConsumerOffsetTable, TopicConfigTable
from broker.store.consume_queue import ConsumeQueue, ConsumeQueueStore
from broker.store import ha_master_address
from broker.store.durable import fsync_dir
from broker.store.errors import MessageIllegal, ServiceUnavailable, StoreError
from broker.store.message import StoredMessage, decode_message, encode_properties
from broker.store.offset_table import Slot, create_table
from broker.store.recovery import RecoveryResult, recover

log = logging.getLogger("store")
_WROTE = int(Slot.WROTE)  # a plain int: the put path passes it to the kernel on every call
DEFAULT_BORN_HOST = socket.inet_aton("127.0.0.1") + (0).to_bytes(4, "big")


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"


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


REPUT_WAKE_DELAY = 0.001  # seconds; see _publish_wrote


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
                 "suggest_slave")

    def __init__(self, status, next_offset, min_offset, max_offset, messages=(), queue_offsets=(), total_bytes=0):
        self.status = status
        self.messages: list[memoryview] = list(messages)  # zero-copy views of whole stored records
        self.queue_offsets: list[int] = list(queue_offsets)
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


class MessageStore:
    """`async with MessageStore(config) as store:` or `await store.start()` … `await store.close()`."""

    def __init__(self, config: MessageStoreConfig):
        self.config = config
        self.root = config.storePathRootDir
        self.sync_flush = config.flushDiskType == SYNC_FLUSH
        self.sync_master = config.sync_master
        self.is_slave = config.is_slave
        # a put waits for the flush, a slave's acknowledgement, or both
        self._put_waits = self.sync_flush or self.sync_master
        self.commit_log: CommitLog | None = None
        self.cqs: ConsumeQueueStore | None = None
        self.table = None
        self.ckpt: StoreCheckpoint | None = None
        self.services: dict[str, ServiceProcess] = {}
        self.recovery: RecoveryResult | None = None
        self._lock_fd = -1
        self._efd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._topics: dict[str, bytes] = {}
        self._last_end: dict[tuple[bytes, int], int] = {}
        self._flush_waiters: collections.deque = collections.deque()  # (end offset, deadline, future)
        self._flush_timer: asyncio.TimerHandle | None = None
        self._ack_waiters: collections.deque = collections.deque()  # SYNC_MASTER: (end, deadline, future)
        self._ack_timer: asyncio.TimerHandle | None = None
        self._slave_max: dict[tuple[str, int], int] = {}  # slave: consumable end of each queue
        self._seen_min = 0  # MIN_OFFSET as last acted on
        self._disk_full = 0  # DISK_FULL as last seen
        self._dispatch_blocked = 0  # DISPATCH_BLOCKED as last seen (the errno the reput is stuck on)
        self._queues_seen = 0  # QUEUES_SEEN as last acted on
        self.on_new_queues: list = []  # called when the reput starts writing a queue (see queue_counts)
        self.refused_writes = 0  # puts refused for a full disk
        self._refusal_logged = 0.0
        # counters for metrics (plain ints: a put pays an add, not a lock)
        self.put_msgs = self.put_bytes = self.get_msgs = self.get_bytes = 0
        self.put_failed: collections.Counter = collections.Counter()  # final status other than PUT_OK -> messages
        self._memory_share = (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                              * config.accessMessageInMemoryMaxRatio // 100)
        self._wake_pending = False
        self._dispatch_waiters: list = []  # (offset, future)
        self._conditions: list = []  # (predicate, future): checked on every service wake-up
        self._open = False
        self._accepting = False
        self.consumer_offsets = ConsumerOffsetTable(config.config_dir)
        self.topic_config = TopicConfigTable(config.config_dir)
        self._persist_timer: asyncio.TimerHandle | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    async def __aenter__(self) -> "MessageStore":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def _lock(self) -> None:
        os.makedirs(self.root, exist_ok=True)
        self._lock_fd = os.open(os.path.join(self.root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise ServiceUnavailable(f"store {self.root} is in use by another broker (lock file held)") from None
        os.write(self._lock_fd, b"lock")

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._lock()
        try:
            await self._start()
        except BaseException:
            await self._teardown()
            raise

    async def _start(self) -> None:
        cfg = self.config
        for d in (cfg.commitlog_dir, cfg.consumequeue_dir, cfg.config_dir):
            os.makedirs(d, exist_ok=True)
        abort = os.path.join(self.root, "abort")
        clean = not os.path.exists(abort)
        self.consumer_offsets.load()
        self.topic_config.load()
        self.ckpt = StoreCheckpoint(os.path.join(self.root, "checkpoint"))
        self.commit_log = CommitLog(cfg, writable=True)
        self.commit_log.load()
        writer_cqs = ConsumeQueueStore(cfg.consumequeue_dir, cfg.mappedFileSizeConsumeQueue, writable=True)
        writer_cqs.load()
        t0 = time.monotonic()
        res = self.recovery = recover(self.commit_log, writer_cqs, self.ckpt, clean, cfg.checkCRCOnRecover)
        writer_cqs.close()  # from here on only the reput service writes consume queues
        log.info("store %s recovered (%s) in %.3fs: commit log [%d, %d)", self.root,
                 "clean stop" if res.clean else "after a crash", time.monotonic() - t0,
                 self.commit_log.min_offset, res.max_offset)
        if self.is_slave:
            # The HA client (its own process) is a slave's only writer, creating segments too:
            # this process reads the log through a read-only map from here on.
            self.commit_log.close()
            self.commit_log = CommitLog(cfg, writable=False)
            self.commit_log.load()
        else:
            self.commit_log.set_write_position(res.max_offset, res.queue_offsets)

        t = self.table = create_table(self.root)
        t.store(Slot.WROTE, res.max_offset)
        durable = res.max_offset if res.clean else min(self.ckpt.get("flushedOffset") if self.ckpt.has_offsets else 0,
                                                       res.max_offset)
        t.store(Slot.FLUSHED, max(durable, self.commit_log.min_offset))
        t.store(Slot.DISPATCHED, res.dispatch_from)
        t.store(Slot.MIN_OFFSET, self.commit_log.min_offset)
        self.ckpt.set(cleanOffset=-1)
        self.ckpt.flush()
        os.close(os.open(abort, os.O_WRONLY | os.O_CREAT, 0o644))
        fsync_dir(self.root)

        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._loop.add_reader(self._efd, self._on_notify)
        ha = "broker.ha.ha_client" if self.is_slave else "broker.ha.ha_service"
        for name, module in (("flush", "broker.services.flush_service"), ("reput", "broker.services.reput_service"),
                             ("ha", ha), ("clean", "broker.services.clean_service")):
            svc = self.services[name] = ServiceProcess(name, module, cfg, self._efd, self._loop)
            svc.start()
        self._open = True
        for name in self.services:
            await self._wait_ready(name, cfg.serviceStartTimeout / 1000)
        # As RocketMQ: serve only once consume queues caught up with the recovered log.
        await self.wait_dispatched(res.max_offset, cfg.serviceStartTimeout / 1000)
        self.cqs = ConsumeQueueStore(cfg.consumequeue_dir, cfg.mappedFileSizeConsumeQueue, writable=False)
        self._seen_min = self.commit_log.min_offset
        self.cqs.correct_min(self._seen_min)  # queues may still have files below an earlier deletion
        self.cqs.load()
        self._accepting = True
        self._persist_timer = self._loop.call_later(cfg.flushConsumerOffsetInterval / 1000, self._persist_offsets)

    def _persist_offsets(self) -> None:
        """Every flushConsumerOffsetInterval (5 s), as RocketMQ's ConsumerOffsetManager."""
        try:
            if self.consumer_offsets.dirty:
                self.consumer_offsets.persist()
        except OSError as e:
            log.error("could not persist consumer offsets: %s", e)
        if self._accepting:
            self._persist_timer = self._loop.call_later(self.config.flushConsumerOffsetInterval / 1000,
                                                        self._persist_offsets)

    async def close(self) -> None:
        if not self._open:
            await self._teardown()
            return
        self._accepting = False
        if self._persist_timer is not None:
            self._persist_timer.cancel()
        self.consumer_offsets.persist()
        t = self.table
        t.wake(_WROTE)
        wrote = t.load(Slot.WROTE)
        try:
            await self.wait_dispatched(wrote, 30)
        except asyncio.TimeoutError:
            log.error("reput did not catch up with %d before shutdown", wrote)
        # From here on a service that ends is one we asked to stop (it may see SHUTDOWN and finish
        # by itself while we are busy with another): it must not be restarted.
        for svc in self.services.values():
            svc.stopping = True
        t.store(Slot.SHUTDOWN, 1)
        for name, svc in self.services.items():
            # A service stopped before it set up its signal handling would die without its final
            # flush: let a (re)starting one get ready first.
            try:
                await self._wait_ready(name, 10)
            except asyncio.TimeoutError:
                log.error("%s service is not ready; stopping it anyway", name)
            await svc.stop()
        flushed, dispatched = t.load(Slot.FLUSHED), t.load(Slot.DISPATCHED)
        self._complete_flush_waiters(flushed)
        self._expire_flush_waiters(force=True)
        self._complete_ack_waiters(t.load(Slot.ACKED))
        self._expire_ack_waiters(force=True)
        if flushed == wrote and dispatched == wrote:
            self.ckpt.set(cleanOffset=wrote)
            self.ckpt.flush()
            os.unlink(os.path.join(self.root, "abort"))
            fsync_dir(self.root)
            log.info("store %s stopped cleanly at %d", self.root, wrote)
        else:
            log.error("store %s stopped with flushed %d / dispatched %d behind wrote %d: next start recovers",
                      self.root, flushed, dispatched, wrote)
        self._open = False
        await self._teardown()

    async def _teardown(self) -> None:
        for svc in self.services.values():
            if svc.proc is not None and svc.proc.poll() is None:
                await svc.stop(5)
        self.services.clear()
        for timer in (self._flush_timer, self._ack_timer):
            if timer is not None:
                timer.cancel()
        self._flush_timer = self._ack_timer = None
        if self._efd >= 0:
            self._loop.remove_reader(self._efd)
            os.close(self._efd)
            self._efd = -1
        for part in (self.cqs, self.commit_log, self.ckpt, self.table):
            if part is not None:
                part.close()
        self.cqs = self.commit_log = self.ckpt = self.table = None
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- wake-ups from the services -----------------------------------------------------------
    def _on_notify(self) -> None:
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            return
        t = self.table
        if self._flush_waiters:
            self._complete_flush_waiters(t.load(Slot.FLUSHED))
        if self._ack_waiters:
            self._complete_ack_waiters(t.load(Slot.ACKED))
        m = t.load(Slot.MIN_OFFSET)
        if m != self._seen_min:
            self._seen_min = m
            self._drop_below(m)
        full = t.load(Slot.DISK_FULL)
        if full != self._disk_full:
            self._disk_full = full
            log.log(logging.ERROR if full else logging.WARNING, "%s", "disk full: refusing writes" if full
                    else "disk usage back under diskSpaceWarningLevelRatio: accepting writes")
        seen = t.load(Slot.QUEUES_SEEN)
        if seen != self._queues_seen:
            self._queues_seen = seen
            for cb in self.on_new_queues:
                cb()
        blocked = t.load(Slot.DISPATCH_BLOCKED)
        if blocked != self._dispatch_blocked:
            self._dispatch_blocked = blocked
            if blocked:
                log.error("consume queues cannot be written (%s): refusing writes", os.strerror(blocked))
            else:
                log.warning("consume queues are written again: accepting writes")
        if self._dispatch_waiters:
            d = t.load(Slot.DISPATCHED)
            keep = []
            for off, fut in self._dispatch_waiters:
                if off <= d:
                    if not fut.done():
                        fut.set_result(d)
                else:
                    keep.append((off, fut))
            self._dispatch_waiters = keep
            if not keep:
                t.store(Slot.WANT_DISPATCH, 0)

        if self._conditions:
            for pred, fut in self._conditions:
                if not fut.done() and pred():
                    fut.set_result(None)

    async def _wait_condition(self, predicate, timeout: float) -> None:
        """Wait until `predicate()` holds, re-checked at each wake-up from a service."""
        if predicate():
            return
        entry = (predicate, self._loop.create_future())
        self._conditions.append(entry)
        try:
            await asyncio.wait_for(entry[1], timeout)
        finally:
            self._conditions.remove(entry)

    async def _wait_ready(self, name: str, timeout: float) -> None:
        """A service is ready once it has published its pid (after installing its signal handlers)."""
        svc = self.services[name]
        slot = {"flush": Slot.FLUSH_PID, "reput": Slot.REPUT_PID, "ha": Slot.HA_PID, "clean": Slot.CLEAN_PID}[name]
        await self._wait_condition(lambda: svc.proc.poll() is not None or self.table.load(slot) == svc.pid, timeout)

    def _complete_flush_waiters(self, flushed: int) -> None:
        w = self._flush_waiters
        while w and w[0][0] <= flushed:
            fut = w.popleft()[2]
            if not fut.done():
                fut.set_result(PutStatus.PUT_OK)

    def _expire_flush_waiters(self, force: bool = False) -> None:
        self._flush_timer = None
        w = self._flush_waiters
        now = time.monotonic()
        while w and (force or w[0][1] <= now):
            fut = w.popleft()[2]
            if not fut.done():
                fut.set_result(PutStatus.FLUSH_DISK_TIMEOUT)
        if w:
            self._flush_timer = self._loop.call_at(self._loop.time() + (w[0][1] - now), self._expire_flush_waiters)

    # -- SYNC_MASTER: a put completes when a slave acknowledged its end (GroupTransferService) --
    def _count_status(self, fut: asyncio.Future | None, n: int) -> None:
        """Only the failures are counted (PUT_OK is put_msgs less them, see put_status_counts):
        an ASYNC put pays nothing here, a waiting one a callback on the future it has anyway."""
        if fut is not None:
            fut.add_done_callback(lambda f: f.cancelled() or f.result() is PutStatus.PUT_OK
                                  or self.put_failed.update({f.result(): n}))

    def put_status_counts(self) -> dict:
        """Final status -> messages (puts still waiting for a flush or a slave count as PUT_OK)."""
        failed = dict(self.put_failed)  # a copy: metrics may read this from the HTTP thread
        # stored but not confirmed (timeouts, no slave) were appended; refusals were not
        stored_failed = sum(v for k, v in failed.items() if k is not PutStatus.SERVICE_NOT_AVAILABLE)
        return {PutStatus.PUT_OK: self.put_msgs - stored_failed, **failed}

    def _await_ack(self, end: int) -> asyncio.Future:
        fut = self._loop.create_future()
        t = self.table
        acked = t.load(Slot.ACKED)
        if acked >= end:
            fut.set_result(PutStatus.PUT_OK)
        elif not t.load(Slot.HA_SLAVES) or end - acked >= self.config.haSlaveFallbehindMax:
            # no slave, or the best one too far behind to catch up within the timeout: say so now
            fut.set_result(PutStatus.SLAVE_NOT_AVAILABLE)
        else:
            self._ack_waiters.append((end, time.monotonic() + self.config.syncFlushTimeout / 1000, fut))
            if self._ack_timer is None:
                self._ack_timer = self._loop.call_later(self.config.syncFlushTimeout / 1000, self._expire_ack_waiters)
        return fut

    def _complete_ack_waiters(self, acked: int) -> None:
        w = self._ack_waiters
        while w and w[0][0] <= acked:
            fut = w.popleft()[2]
            if not fut.done():
                fut.set_result(PutStatus.PUT_OK)

    def _expire_ack_waiters(self, force: bool = False) -> None:
        self._ack_timer = None
        w = self._ack_waiters
        now = time.monotonic()
        while w and (force or w[0][1] <= now):
            fut = w.popleft()[2]
            if not fut.done():
                fut.set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)
        if w:
            self._ack_timer = self._loop.call_at(self._loop.time() + (w[0][1] - now), self._expire_ack_waiters)

    def _await_put(self, end: int) -> asyncio.Future:
        """The future of a put's final status: the flush (SYNC_FLUSH), a slave's ack (SYNC_MASTER),
        or both, the flush's failure reported first as RocketMQ's handleDiskFlush runs first."""
        if not self.sync_master:
            return self._await_flush(end)
        ack = self._await_ack(end)
        if not self.sync_flush:
            return ack
        flush = self._await_flush(end)
        both = self._loop.create_future()

        def done(_):
            if flush.done() and ack.done() and not both.done():
                f = flush.result()
                both.set_result(f if f is not PutStatus.PUT_OK else ack.result())
        flush.add_done_callback(done)
        ack.add_done_callback(done)
        return both

    async def wait_dispatched(self, offset: int, timeout: float | None = None) -> int:
        """Wait until the reput service has built consume queues up to `offset`."""
        d = self.table.load(Slot.DISPATCHED)
        if d >= offset:
            return d
        fut = self._loop.create_future()
        self._dispatch_waiters.append((offset, fut))
        self.table.store(Slot.WANT_DISPATCH, 1)
        self._on_notify_soon()
        return await asyncio.wait_for(fut, timeout)

    def dispatched(self) -> int:
        return self.table.load(Slot.DISPATCHED)

    async def wait_flushed(self, offset: int, timeout: float | None = None) -> int:
        """Wait until the flush service has made the commit log durable up to `offset`."""
        await self._wait_condition(lambda: self.table.load(Slot.FLUSHED) >= offset, timeout)
        return self.table.load(Slot.FLUSHED)

    def _on_notify_soon(self) -> None:
        # The reput may have moved between our load and WANT_DISPATCH: look once more.
        os.eventfd_write(self._efd, 1)

    # -- put ------------------------------------------------------------------------------------
    def _topic(self, topic: str) -> bytes:
        b = self._topics.get(topic)
        if b is None:
            b = topic.encode("utf-8")
            if not 0 < len(b) <= 127:
                raise MessageIllegal(f"topic {topic!r} is {len(b)} bytes; RocketMQ allows 1..127")
            self._topics[topic] = b
        return b

    def _check_open(self, topic: str = "") -> None:
        if not self._accepting:
            raise ServiceUnavailable("store is not started or is shutting down")
        if self.is_slave:
            raise ServiceUnavailable("this broker is a SLAVE: its log is written by replication from the master only")
        if self._disk_full:
            self._refuse(topic, "disk full", f"disk full: usage {self.table.load(Slot.DISK_USAGE) / 10_000:.1f}% is "
                         f"above diskSpaceWarningLevelRatio {self.config.diskSpaceWarningLevelRatio:g}%; writes are "
                         f"refused until expired files are deleted")
        if self._dispatch_blocked:
            # RocketMQ's logicsQueueError: messages appended now would not reach their queues
            self._refuse(topic, "consume queues cannot be written",
                         f"consume queues cannot be written ({os.strerror(self._dispatch_blocked)}); writes are "
                         f"refused until they can")

    def _refuse(self, topic: str, why: str, message: str) -> None:
        self.refused_writes += 1
        self.put_failed[PutStatus.SERVICE_NOT_AVAILABLE] += 1
        now = time.monotonic()
        if now - self._refusal_logged >= 1.0:  # every refusal is counted; the log says so once a second
            log.warning("refused a write to %s (%d so far): %s", topic or "?", self.refused_writes, why)
            self._refusal_logged = now
        raise ServiceUnavailable(message)

    def _segment_failed(self, topic: str, err: OSError) -> None:
        """The next commit-log segment could not be made (a full disk before the cleaner saw it):
        the put is refused, nothing of it was stored, and the next put tries again."""
        self._refuse(topic, f"no new commit-log segment: {err.strerror}",
                     f"cannot create the next commit-log segment {err.filename}: {err.strerror}")

    def append(self, topic: str, queue_id: int, body, properties: bytes | dict | None = b"", *,
               flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None,
               born_host: bytes = DEFAULT_BORN_HOST, reconsume_times: int = 0,
               wait: bool = True) -> tuple[PutResult, asyncio.Future | None]:
        """Append one message now (the body is copied into the log before this returns, so it may
        be a view of a buffer about to be reused). Returns the result and, under SYNC_FLUSH with
        wait=True, the future that gives its final status once the flush covered it."""
        self._check_open(topic)
        tb = self._topic(topic)
        props = properties if type(properties) is bytes else encode_properties(properties)
        cl = self.commit_log
        try:
            phys, qo, size, ts = cl.append(tb, queue_id, body, props, flag, sys_flag,
                                           -1 if born_timestamp is None else born_timestamp, born_host,
                                           reconsume_times)
        except OSError as e:
            self._segment_failed(topic, e)
        end = phys + size
        self._last_end[(tb, queue_id)] = end
        self._publish_wrote(cl.wrote)
        self.put_msgs += 1
        self.put_bytes += size
        fut = self._await_put(end) if self._put_waits and wait else None
        self._count_status(fut, 1)
        return PutResult(PutStatus.PUT_OK, phys, qo, size, ts, cl.store_host), fut

    async def put(self, topic: str, queue_id: int, body, properties: bytes | dict | None = b"", *,
                  flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None,
                  born_host: bytes = DEFAULT_BORN_HOST, reconsume_times: int = 0, wait: bool = True) -> PutResult:
        """Append one message. Under SYNC_FLUSH (and wait=True) returns once the flush covered it,
        or with FLUSH_DISK_TIMEOUT after syncFlushTimeout (the message is stored, not yet durable)."""
        r, fut = self.append(topic, queue_id, body, properties, flag=flag, sys_flag=sys_flag,
                             born_timestamp=born_timestamp, born_host=born_host,
                             reconsume_times=reconsume_times, wait=wait)
        if fut is not None:
            r.status = await fut
        return r

    def append_batch(self, topic: str, queue_id: int, bodies: list, properties: bytes | list | dict | None = b"", *,
                     flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None,
                     born_host: bytes = DEFAULT_BORN_HOST,
                     wait: bool = True) -> tuple[BatchPutResult, asyncio.Future | None]:
        """Append many messages to one queue now, one kernel call per segment; `properties` is
        shared or one bytes object per body. Returns the result and, under SYNC_FLUSH with
        wait=True, the future giving the final status once the flush covered the last one."""
        self._check_open(topic)
        tb = self._topic(topic)
        if not isinstance(bodies, list):
            bodies = list(bodies)
        if not bodies:
            raise ValueError("put_batch needs at least one body")
        props = properties
        if type(props) is not bytes and type(props) is not list:
            props = encode_properties(props)
        cl = self.commit_log
        try:
            chunks, ts = cl.append_batch(tb, queue_id, bodies, props, flag, sys_flag,
                                         -1 if born_timestamp is None else born_timestamp, born_host)
        except OSError as e:
            self._segment_failed(topic, e)
        end = cl.wrote
        self._last_end[(tb, queue_id)] = end
        self._publish_wrote(end)
        fut = self._await_put(end) if self._put_waits and wait else None
        self._count_status(fut, len(bodies))
        self.put_msgs += len(bodies)
        self.put_bytes += end - chunks[0].phys if chunks else 0
        fixed = 91 + len(tb)
        if type(props) is list:
            sizes = np.fromiter((len(b) + len(p) + fixed for b, p in zip(bodies, props)), np.int64, len(bodies))
        else:
            sizes = np.fromiter((len(b) for b in bodies), np.int64, len(bodies)) + (fixed + len(props))
        return BatchPutResult(PutStatus.PUT_OK, chunks, len(bodies), end, ts, sizes, cl.store_host), fut

    async def put_batch(self, topic: str, queue_id: int, bodies: list, properties: bytes | list | dict | None = b"", *,
                        flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None,
                        born_host: bytes = DEFAULT_BORN_HOST, wait: bool = True) -> BatchPutResult:
        """Append many messages to one queue (see append_batch), awaiting the flush under SYNC_FLUSH."""
        r, fut = self.append_batch(topic, queue_id, bodies, properties, flag=flag, sys_flag=sys_flag,
                                   born_timestamp=born_timestamp, born_host=born_host, wait=wait)
        if fut is not None:
            r.status = await fut
        return r

    def _publish_wrote(self, wrote: int) -> None:
        # `wrote` is visible to the services at once; their wake-up (a futex syscall, ~4 us, and
        # a context switch on a 2-core machine) happens once per event-loop turn, after every put
        # of the turn: one wake for the whole group, not one per put for the reput service.
        #
        # Under ASYNC_FLUSH the wake waits up to REPUT_WAKE_DELAY more: at a high send rate one
        # wake then covers the turns of a whole millisecond (RocketMQ's ReputMessageService polls
        # every 1 ms, so consumers see no later delivery than with Java). Under SYNC_FLUSH the
        # flush service waits on the same word and producers wait on it: wake at the turn's end.
        self.table.publish(_WROTE, wrote)
        if not self._wake_pending:
            self._wake_pending = True
            if self._put_waits:
                self._loop.call_soon(self._wake_services)
            else:
                self._loop.call_later(REPUT_WAKE_DELAY, self._wake_services)

    def _wake_services(self) -> None:
        self._wake_pending = False
        if self.table is not None:
            self.table.wake(_WROTE)

    def _await_flush(self, end: int) -> asyncio.Future:
        fut = self._loop.create_future()
        if self.table.load(Slot.FLUSHED) >= end:
            fut.set_result(PutStatus.PUT_OK)
            return fut
        deadline = time.monotonic() + self.config.syncFlushTimeout / 1000
        self._flush_waiters.append((end, deadline, fut))
        if self._flush_timer is None:
            self._flush_timer = self._loop.call_later(self.config.syncFlushTimeout / 1000, self._expire_flush_waiters)
        return fut

    # -- get ------------------------------------------------------------------------------------
    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.cqs.find(topic, queue_id) if self.cqs is not None else None

    def max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last consumable (dispatched) message of the queue."""
        if self.is_slave:
            return self._slave_max_offset(topic, queue_id)
        key = (self._topics.get(topic) or topic.encode(), queue_id)
        nxt = self.commit_log.queue_offsets.get(key, 0)
        d = self.table.load(Slot.DISPATCHED)
        if self._last_end.get(key, 0) <= d:
            return nxt
        cq = self._queue(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset, nxt  # first index whose entry is not yet dispatched
        while lo < hi:
            mid = (lo + hi) // 2
            e = cq.entry(mid)
            if e is not None and e[1] > 0 and e[0] + e[1] <= d:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _slave_max_offset(self, topic: str, queue_id: int) -> int:
        """On a slave nothing here appends: a queue ends at its first unwritten consume-queue
        entry (the reput writes entries in order and only for whole replicated records)."""
        cq = self._queue(topic, queue_id)
        if cq is None:
            return 0
        key = (topic, queue_id)
        end = max(self._slave_max.get(key, 0), cq.min_offset)
        while True:
            ents = cq.entries(end, 4096)
            if len(ents) == 0:
                break
            zero = np.flatnonzero(ents["size"] == 0)
            if len(zero):
                end += int(zero[0])
                break
            end += len(ents)
        self._slave_max[key] = end
        return end

    def queue_write_end(self, topic: str, queue_id: int) -> int:
        """End offset in the commit log of the last message appended to the queue in this run
        (0 if none): a reader waits for `dispatched` to pass it before the message is visible."""
        return self._last_end.get((self._topics.get(topic) or topic.encode(), queue_id), 0)

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queue(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def get(self, topic: str, queue_id: int, offset: int, max_msgs: int = 32, max_bytes: int = 256 * 1024,
            tag_hashes: set[int] | None = None) -> GetResult:
        """Messages of one queue from `offset` as zero-copy views of their stored records.
        Statuses and next offsets follow RocketMQ's DefaultMessageStore.getMessage."""
        if max_msgs <= 0 or max_bytes <= 0:
            raise ValueError("max_msgs and max_bytes must be positive")
        cq = self._queue(topic, queue_id)
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0 if offset == 0 else offset, 0, 0)
        lo, hi = cq.min_offset, self.max_offset(topic, queue_id)
        if hi <= lo:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0 if offset == 0 else lo, lo, hi)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        msgs: list[memoryview] = []
        qoffs: list[int] = []
        total = 0
        nxt = i = offset
        # Unfiltered reads stop at max_msgs entries; filtered ones may skip entries, but scan at
        # most as far as RocketMQ does (16000 bytes of consume queue, or 20 per wanted message).
        stop = min(hi, offset + (max_msgs if tag_hashes is None else max(800, max_msgs * 20)))
        full = False
        find = self.commit_log.queue.find
        seg_mv, seg_base, seg_end = None, 0, 0  # the segment the previous record was in
        while i < stop and not full:
            ents = cq.entries(i, stop - i)
            if len(ents) == 0:
                break
            offs, sizes = ents["offset"].tolist(), ents["size"].tolist()
            tags = ents["tag"].tolist() if tag_hashes is not None else None
            for k in range(len(offs)):
                if tags is not None and tags[k] not in tag_hashes:
                    nxt = i + k + 1
                    continue
                size = sizes[k]
                if msgs and total + size > max_bytes:
                    full = True
                    break
                o = offs[k]
                if not seg_base <= o < seg_end - size:
                    mf = find(o)
                    if mf is None and self.is_slave:  # a segment the HA client made since we looked
                        self.commit_log.queue.refresh()
                        mf = find(o)
                    if mf is None or o + size > mf.end or mf.mv is None:
                        full = True
                        break
                    seg_mv, seg_base, seg_end = mf.mv, mf.base, mf.end + 1
                msgs.append(seg_mv[o - seg_base:o - seg_base + size])
                qoffs.append(i + k)
                total += size
                nxt = i + k + 1
                if len(msgs) >= max_msgs:
                    full = True
                    break
            i += len(offs)
        if not msgs:
            status = GetStatus.NO_MATCHED_MESSAGE if nxt > offset else GetStatus.OFFSET_FOUND_NULL
            return GetResult(status, nxt, lo, hi)
        r = GetResult(GetStatus.FOUND, nxt, lo, hi, msgs, qoffs, total)
        self.get_msgs += len(msgs)
        self.get_bytes += total
        r.suggest_slave = self.table.load(Slot.WROTE) - o > self._memory_share
        return r

    def record_view(self, physical_offset: int) -> memoryview:
        """Zero-copy view of the whole stored record at a physical offset (RocketMQ's
        selectOneMessageByOffset). On a slave the HA client may have made the segment since this
        process last looked, so the segments are looked for again before giving up."""
        queue = self.commit_log.queue
        mf = queue.find(physical_offset)
        if mf is None and self.is_slave:
            queue.refresh()
            mf = queue.find(physical_offset)
        if mf is None or mf.mv is None or not 0 <= physical_offset < self.table.load(Slot.WROTE):
            raise StoreError(f"no message at physical offset {physical_offset}: the commit log holds "
                             f"[{self.commit_log.min_offset}, {self.table.load(Slot.WROTE)})")
        at = physical_offset - mf.base
        size = int.from_bytes(mf.mv[at:at + 4], "big")
        if not 0 < size <= mf.size - at:
            raise StoreError(f"no record starts at physical offset {physical_offset} (size word {size})")
        return mf.mv[at:at + size]

    def lookup(self, physical_offset: int) -> StoredMessage:
        """Decode the record at a physical offset (RocketMQ's lookMessageByOffset / view by msgId)."""
        view = self.record_view(physical_offset)
        try:
            return decode_message(view, 0)
        except StoreError as e:
            raise StoreError(f"no message at physical offset {physical_offset}: {e}") from None

    # -- introspection --------------------------------------------------------------------------
    def offsets(self) -> dict[str, int]:
        t = self.table
        out = {"min": t.load(Slot.MIN_OFFSET), "wrote": t.load(Slot.WROTE), "flushed": t.load(Slot.FLUSHED),
               "dispatched": t.load(Slot.DISPATCHED)}
        out.update(disk_usage=t.load(Slot.DISK_USAGE) / 1e6, disk_full=t.load(Slot.DISK_FULL),
                   deleted_files=t.load(Slot.DELETED_FILES))
        if self.is_slave:
            out.update(received=t.load(Slot.HA_RECEIVED), linked=t.load(Slot.HA_LINK))
        else:
            out.update(acked=t.load(Slot.ACKED), slaves=t.load(Slot.HA_SLAVES))
        return out

    def queue_counts(self) -> dict[str, int]:
        """Each topic that has consume queues on disk, with one more than its highest queue id:
        what the log itself says exists, whatever any topic config says."""
        out: dict[str, int] = {}
        root = self.config.consumequeue_dir
        try:
            topics = os.listdir(root)
        except FileNotFoundError:
            return out
        for topic in topics:
            try:
                ids = [int(q) for q in os.listdir(os.path.join(root, topic)) if q.isdigit()]
            except NotADirectoryError:
                continue
            if ids:
                out[topic] = max(ids) + 1
        return out

    def _drop_below(self, min_offset: int) -> None:
        """The cleaner deleted segments below `min_offset`: let go of their maps, and start every
        loaded consume queue at its first message that still exists."""
        if self.commit_log is not None:
            n = self.commit_log.queue.drop_before(min_offset)
            if n:
                log.info("commit log now starts at %d (%d segments deleted by the cleaner)", min_offset, n)
        if self.cqs is not None:
            self.cqs.correct_min(min_offset)
        self._slave_max.clear()

    def request_clean(self) -> None:
        """`broker admin clean` (DELETE_EXPIRED_COMMITLOG): the cleaner deletes expired files now,
        whatever the hour, for its next 20 passes (RocketMQ's executeDeleteFilesManually)."""
        self.table.add(Slot.MANUAL_CLEAN, 1)  # add() wakes the cleaner sleeping on the slot

    def set_master_ha_address(self, addr: str) -> None:
        """A slave learned its master's HA address (from the name server): tell the HA client."""
        if self.table is not None and ha_master_address.write(self.root, addr):
            log.info("master HA address is %s", addr)
            self.table.store(Slot.HA_MASTER, self.table.load(Slot.HA_MASTER) + 1)  # wakes the HA client

    def service_pids(self) -> dict[str, int | None]:
        return {name: svc.pid for name, svc in self.services.items()}
