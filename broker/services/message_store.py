"""MessageStore: the in-process API over the store and its service processes.

The broker process is the commit log's only writer. `append` encodes straight into the mapped
segment and publishes `wrote` in the shared offset table; the flush and reput services (their
own processes, supervised here) wake on that futex. What the services publish back comes in
through one eventfd (Notifier) and reaches the parts that wait on it:

- GroupCommitService (SYNC_FLUSH) and GroupTransferService (SYNC_MASTER) answer the puts
  waiting for `flushed` / `acked`;
- RunningFlags follows the cleaner's DISK_FULL, the reput's DISPATCH_BLOCKED and the flush's FLUSH_ERRORS;
- DispatchWaiters serve readers waiting for consume queues;
- a deletion by the cleaner (MIN_OFFSET) drops maps here.

Reads go through QueueReader. This class keeps the lifecycle (lock, recovery, services, clean
stop) and the put path.
"""
from __future__ import annotations

import asyncio
import collections
import errno
import fcntl
import logging
import os
import shutil
import socket
import struct
import time

from broker.kernels.codec import MAX_TOPIC_LEN
from broker.services.compaction_service import CompactionService
from broker.services.dispatch_waiters import DispatchWaiters
from broker.services.group_commit import GroupCommitService
from broker.services.group_transfer import GroupTransferService, SyncStateSetTransfer
from broker.services.notifier import Notifier
from broker.services.offset_waiters import Resolve, resolve_future
from broker.services.query_message import MessageQuery, QueryMessageResult
from broker.services.queue_reader import QueueReader
from broker.services.running_flags import RunningFlags
from broker.services.service_specs import SPECS
from broker.services.supervisor import ServiceProcess
from broker.store import ha_master_address, paths
from broker.store.checkpoint import StoreCheckpoint
from broker.store.commit_log import CommitLog
from broker.store.config import SYNC_FLUSH, MessageStoreConfig
from broker.store.config_files import WRITER, ConsumerOffsetTable, TopicConfigTable
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.durable import fsync_dir
from broker.store.errors import InSyncReplicasNotEnough, MessageIllegal, ServiceUnavailable, StoreConfigError
from broker.store.index_service import recover_index
from broker.store.message import StoredMessage, encode_properties
from broker.store.mapped_file import zero_torn_tail
from broker.store.offset_table import HA_ROLE_MASTER, HA_ROLE_NONE, HA_ROLE_SLAVE, Slot, confirm_offset, create_table
from broker.store.recovery import RecoveryResult, recover
from broker.store.results import (BatchChunk, BatchPutResult, GetResult, GetStatus,  # noqa: F401 (re-exported)
                                  PutResult, PutStatus)

log = logging.getLogger("store")
_WROTE = int(Slot.WROTE)  # plain ints: the put path passes them to the kernel on every call
_REPUT_WAKE = int(Slot.REPUT_WAKE)
DEFAULT_BORN_HOST = socket.inet_aton("127.0.0.1") + (0).to_bytes(4, "big")
REPUT_WAKE_DELAY = 0.001  # seconds; see _publish_wrote
# the same for appends nothing waits to see dispatched (the pop's revive log: read back at a start,
# and its queue's end looked at within ReviveLog's END_LOOK_DELAY): a wake-up per 20 ms of them, not
# per millisecond, each a futex syscall and a reput pass of a record or two
REPUT_LAZY_WAKE_DELAY = 0.02


class _Both:
    """SYNC_FLUSH + SYNC_MASTER: the put's status once the flush and a slave both answered; the
    flush's failure first, as RocketMQ's handleDiskFlush runs before handleHA."""

    __slots__ = ("flush", "ack", "resolve", "arg")

    def __init__(self, resolve: Resolve, arg):
        self.flush = self.ack = None
        self.resolve, self.arg = resolve, arg

    @staticmethod
    def flushed(self: "_Both", status: PutStatus) -> None:
        self.flush = status
        if self.ack is not None:
            self.resolve(self.arg, status if status is not PutStatus.PUT_OK else self.ack)

    @staticmethod
    def acked(self: "_Both", status: PutStatus) -> None:
        self.ack = status
        if self.flush is not None:
            self.resolve(self.arg, self.flush if self.flush is not PutStatus.PUT_OK else status)


def refuse_dledger_log(root: str) -> None:
    """StoreConfigError naming enableDLegerCommitLog if a DLedger log under the store root holds
    entries: the store ran in DLedger mode, its newer messages are in the DLedger data files, and
    the ordinary commit log cannot serve them (RocketMQ starts and silently loses them). A data file
    whose first bytes are zeros holds none: entries are written from a file's start."""
    for d in paths.dledger_data_dirs(root):
        for name in sorted(n for n in os.listdir(d) if n.isdigit()):
            with open(os.path.join(d, name), "rb") as f:
                if not f.read(8).strip(b"\0"):
                    continue
            raise StoreConfigError(
                "enableDLegerCommitLog",
                f"{d} holds DLedger entries (file {name}): this store ran in DLedger mode and its newer messages "
                f"live in those files, which the ordinary commit log cannot serve (turning DLedger mode off would "
                f"lose them). Keep enableDLegerCommitLog=true, or start the ordinary store on another "
                f"storePathRootDir")


class MessageStore:
    """`async with MessageStore(config) as store:` or `await store.start()` … `await store.close()`."""

    def __init__(self, config: MessageStoreConfig):
        self.config = config
        self.root = config.storePathRootDir
        self.sync_flush = config.flushDiskType == SYNC_FLUSH
        self._take_role()
        self.commit_log: CommitLog | None = None
        self.cqs: ConsumeQueueStore | None = None
        self.table = None
        self.ckpt: StoreCheckpoint | None = None
        self.services: dict[str, ServiceProcess] = {}
        self.recovery: RecoveryResult | None = None
        self.notifier: Notifier | None = None
        self.flags: RunningFlags | None = None
        self.group_commit: GroupCommitService | None = None
        self.group_transfer: GroupTransferService | None = None
        self.dispatch: DispatchWaiters | None = None
        self.reader = QueueReader(self)
        self.queries = MessageQuery(self)
        self.compaction = CompactionService(self)
        self.on_new_queues: list = []  # called when the reput starts writing a queue (queue_counts)
        self._lock_fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._topics: dict[str, bytes] = {}
        self._seen_min = 0  # MIN_OFFSET as last acted on
        self._queues_seen = 0  # QUEUES_SEEN as last acted on
        self.refused_writes = 0  # puts refused (disk full, queues not writable)
        self._refusal_logged = 0.0
        # counters for metrics (plain ints: a put pays an add, not a lock)
        self.put_msgs = self.put_bytes = 0
        self.put_failed: collections.Counter = collections.Counter()  # final status other than PUT_OK -> messages
        self._wake_pending = False  # a wake of the services sleeping on WROTE is scheduled
        self._reput_wake_pending = False
        self._reput_lazy_pending = False  # a wake of the reput for lazy_dispatch appends is scheduled
        self._open = False
        self._accepting = False
        self.consumer_offsets = ConsumerOffsetTable(config.config_dir)
        self.topic_config = TopicConfigTable(config.config_dir)
        self._persist_timer: asyncio.TimerHandle | None = None
        # controller mode (broker.server.controller.replicas_manager): the SyncStateSet puts need, and why
        # puts are refused while it is smaller than minInSyncReplicas
        self.isr_members: frozenset[int] = frozenset()
        self.isr_refusal: str | None = None
        self._left_off: tuple[int, dict] | None = None  # a master's write position and queue table, quiesced

    def _take_role(self) -> None:
        cfg = self.config
        self.sync_master = cfg.sync_master
        self.is_slave = cfg.is_slave
        # a put waits for the flush, a slave's acknowledgement, or both
        self._put_waits = self.sync_flush or self.sync_master

    def set_role(self, role: str) -> None:
        """Controller mode: the role (brokerRole) the next start() serves in; the store is closed."""
        if self._open:
            raise RuntimeError("the store's role changes only while it is closed")
        self.config.brokerRole = role
        self.config.validate()
        self._take_role()

    def _make_group_transfer(self) -> None:
        cfg, t = self.config, self.table
        if self.sync_master and cfg.enableControllerMode:
            self.group_transfer = SyncStateSetTransfer(t, self._loop, cfg.syncFlushTimeout, cfg)
            self.group_transfer.set_members(self.isr_members)
        elif self.sync_master:
            self.group_transfer = GroupTransferService(t, self._loop, cfg.syncFlushTimeout, cfg.haSlaveFallbehindMax)
        if self.group_transfer is not None:
            self.notifier.listeners.append(self.group_transfer.on_wake)

    def _tell_ha(self, role: int) -> int:
        """The HA process's role (and controller mode's epoch and broker id for its hello), taken
        up at the next bump of HA_MASTER, which this returns (HA_ROLE_ACK reaches it once done)."""
        t, cfg = self.table, self.config
        t.store(Slot.HA_EPOCH, cfg.controllerMasterEpoch)
        t.store(Slot.HA_BROKER_ID, max(cfg.controllerBrokerId, 0))
        t.store(Slot.HA_ROLE, role)
        gen = t.load(Slot.HA_MASTER) + 1
        t.store(Slot.HA_MASTER, gen)  # store() wakes the HA process sleeping on it
        return gen

    async def _ha_switched(self, gen: int) -> None:
        t = self.table
        try:
            await self.wait_condition(lambda: t.load(Slot.HA_ROLE_ACK) >= gen, self.config.serviceStartTimeout / 1000)
        except asyncio.TimeoutError:
            raise ServiceUnavailable("the HA service did not take up its new role in time") from None

    # -- controller mode: a role switch in place ---------------------------------------------------
    async def quiesce(self) -> int:
        """The first half of a controller-mode role switch: the store stops taking writes and the
        HA process leaves its role (a slave's link is closed, a master's slaves are dropped), so
        that nothing writes the log; returns where it ends. The service processes keep running
        (flush, reput and cleaner do not depend on the role): a switch costs milliseconds, not
        their restart. Then either resume() in the new role, or close() and start() again (a
        slave's diverged tail is cut while the store is closed)."""
        if not self._open:
            raise ServiceUnavailable("the store is not started")
        self._accepting = False
        if self.group_transfer is not None:
            self.notifier.listeners.remove(self.group_transfer.on_wake)
            self.group_transfer.close()  # puts waiting for a slave: answered with what it acknowledged
            self.group_transfer = None
        if self.commit_log.queue.writable:
            # a read-only map from here: the writer's segments made ahead must not race the HA
            # client's, should this broker become a slave
            self._left_off = (self.commit_log.wrote, dict(self.commit_log.queue_offsets))
            self.commit_log.close()
            self.commit_log = CommitLog(self.config, writable=False)
            self.commit_log.load()
        await self._ha_switched(self._tell_ha(HA_ROLE_NONE))
        self.commit_log.queue.refresh()
        return self.table.load(Slot.WROTE)

    async def resume(self, role: str, master_ha_addr: str = "") -> None:
        """After quiesce(): serve as `role` (brokerRole; a SLAVE follows `master_ha_addr`, or
        nobody with ""). A master appends from where the log ends: its queues' next offsets are
        what the reput dispatched, once it dispatched everything."""
        self.config.brokerRole = role
        self.config.validate()
        self._take_role()
        t = self.table
        if self.is_slave:
            if master_ha_addr:
                ha_master_address.write(self.root, master_ha_addr)
            else:
                try:
                    os.unlink(ha_master_address.path(self.root))
                except FileNotFoundError:
                    pass
            await self._ha_switched(self._tell_ha(HA_ROLE_SLAVE))
        else:
            wrote = t.load(Slot.WROTE)
            if self._left_off is not None and self._left_off[0] == wrote:
                offsets = self._left_off[1]  # this broker wrote the log last: its own queue table
            else:
                offsets = await self._queue_offsets_at(wrote)
            cl = CommitLog(self.config, writable=True)
            cl.let_go_below(self._cache_floor)
            cl.load()
            # what the HA client received past the last whole record goes (as recovery's torn
            # tail); a segment it made ahead stays, for the appends to come
            for mf in cl.queue.files:
                if mf.end > wrote and zero_torn_tail(mf.mm, max(wrote - mf.base, 0)) >= 0:
                    mf.mm.flush()
            self.commit_log.close()
            self.commit_log = cl
            cl.set_write_position(wrote, offsets)
            self._make_group_transfer()
            await self._ha_switched(self._tell_ha(HA_ROLE_MASTER))
        self._left_off = None
        self.reader.forget_ends()
        self._accepting = True

    async def _queue_offsets_at(self, wrote: int) -> dict[tuple[bytes, int], int]:
        """Every queue's next offset for a log that ends at `wrote` and that another wrote (the HA
        client): what the reput dispatched, once it dispatched all of it (on a slave nothing bounds
        the reput)."""
        self.table.add(_REPUT_WAKE, 1)
        await self.wait_dispatched(wrote, self.config.serviceStartTimeout / 1000)
        cqs = ConsumeQueueStore(self.config.consumequeue_dir, self.config.mappedFileSizeConsumeQueue, writable=False)
        cqs.load()
        try:
            return {(topic.encode(), qid): cq.max_offset_on_disk() for (topic, qid), cq in cqs.queues.items()}
        finally:
            cqs.close()

    # -- lifecycle ------------------------------------------------------------------------------
    async def __aenter__(self) -> "MessageStore":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def _lock(self) -> None:
        """The `lock` file, held two ways: flock, and the record lock on its first byte that Apache
        RocketMQ's broker takes (FileChannel.tryLock(0, 1), an fcntl lock that flock does not see),
        so that neither broker starts on a store the other is running on. The record lock is an
        open-file-description one: closing another descriptor of the file does not drop it."""
        os.makedirs(self.root, exist_ok=True)
        self._lock_fd = os.open(paths.lock_file(self.root), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.fcntl(self._lock_fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0))
        except OSError as e:
            os.close(self._lock_fd)
            self._lock_fd = -1
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise ServiceUnavailable(f"store {self.root} is in use by another broker (lock file held)") from None
        os.write(self._lock_fd, b"lock")

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._lock()
        try:
            await self._start()
        except BaseException:
            # a start that failed or was cancelled (controller mode: a stop during a role switch)
            # leaves the store closed, so that a close() after it has nothing left to stop
            self._open = self._accepting = False
            await self._teardown()
            raise

    async def _start(self) -> None:
        cfg = self.config
        self._left_off = None
        refuse_dledger_log(self.root)
        for d in (cfg.commitlog_dir, cfg.consumequeue_dir, cfg.config_dir):
            os.makedirs(d, exist_ok=True)
        abort = paths.abort_file(self.root)
        clean = not os.path.exists(abort)
        had_checkpoint = os.path.exists(paths.checkpoint(self.root))  # StoreCheckpoint makes one
        self.consumer_offsets.load()
        self.topic_config.load()
        self.ckpt = StoreCheckpoint(paths.checkpoint(self.root))
        self.commit_log = CommitLog(cfg, writable=True)
        self.commit_log.let_go_below(self._cache_floor)
        self.commit_log.load()
        # nothing written before: neither a checkpoint nor a commit-log segment (a store whose
        # every segment expired keeps its checkpoint, and is recovered)
        created = not had_checkpoint and not self.commit_log.queue.files
        writer_cqs = ConsumeQueueStore(cfg.consumequeue_dir, cfg.mappedFileSizeConsumeQueue, writable=True)
        writer_cqs.load()
        t0 = time.monotonic()
        res = self.recovery = recover(self.commit_log, writer_cqs, self.ckpt, clean, cfg.checkCRCOnRecover)
        writer_cqs.close()  # from here on only the reput service writes consume queues
        if cfg.messageIndexEnable:
            rebuild = recover_index(cfg, self.ckpt.get("indexMsgTimestamp"), res.clean)
            if rebuild is not None:  # the reput re-indexes what was deleted (and rewrites the same CQ entries)
                res.dispatch_from = max(min(res.dispatch_from, rebuild), self.commit_log.min_offset)
        if created:
            log.info("created the store at %s", self.root)
        else:
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

        loop = self._loop
        n = self.notifier = Notifier(loop)
        self.flags = RunningFlags(t, cfg)
        self.dispatch = DispatchWaiters(t, loop, n.poke)
        if self.sync_flush:
            self.group_commit = GroupCommitService(t, loop, cfg.syncFlushTimeout)
            n.listeners.append(self.group_commit.on_wake)
        self._make_group_transfer()
        n.listeners += [self._on_min_offset, self.flags.on_wake, self._on_queues_seen, self.dispatch.on_wake]
        self._tell_ha(HA_ROLE_SLAVE if self.is_slave else HA_ROLE_MASTER)
        self._specs = SPECS
        for spec in self._specs:
            svc = self.services[spec.name] = ServiceProcess(spec.name, spec.module, cfg, n.fd, loop)
            svc.start()
        self._open = True
        for spec in self._specs:
            await self._wait_ready(spec, cfg.serviceStartTimeout / 1000)
        # As RocketMQ: serve only once consume queues caught up with the recovered log.
        await self.wait_dispatched(res.max_offset, cfg.serviceStartTimeout / 1000)
        self.cqs = ConsumeQueueStore(cfg.consumequeue_dir, cfg.mappedFileSizeConsumeQueue, writable=False)
        self._seen_min = self.commit_log.min_offset
        self.cqs.correct_min(self._seen_min)  # queues may still have files below an earlier deletion
        self.cqs.load()
        self.compaction.load()
        self.compaction.start()
        self._accepting = True
        self._persist_timer = loop.call_later(cfg.flushConsumerOffsetInterval / 1000, self._persist_offsets)

    def _persist_offsets(self) -> None:
        """Every flushConsumerOffsetInterval (5 s), as RocketMQ's ConsumerOffsetManager."""
        try:
            if self.consumer_offsets.dirty:
                self.consumer_offsets.persist_soon()
        except OSError as e:
            log.error("could not persist consumer offsets: %s", e)
        if self._accepting:
            self._persist_timer = self._loop.call_later(self.config.flushConsumerOffsetInterval / 1000,
                                                        self._persist_offsets)

    async def _wait_ready(self, spec, timeout: float) -> None:
        """A service is ready once it has published its pid (after installing its signal handlers)."""
        svc = self.services[spec.name]
        await self.wait_condition(lambda: svc.proc.poll() is not None or self.table.load(spec.pid_slot) == svc.pid,
                                  timeout)

    async def close(self) -> None:
        await self.compaction.stop()
        if not self._open:
            await self._teardown()
            return
        self._stop_accepting()
        t = self.table
        t.wake(_WROTE)
        wrote = t.load(Slot.WROTE)
        await self._stop_services(wrote)
        flushed, dispatched = t.load(Slot.FLUSHED), t.load(Slot.DISPATCHED)
        for waiting in (self.group_commit, self.group_transfer):
            if waiting is not None:
                waiting.close()
        if flushed == wrote and dispatched == wrote:
            self.ckpt.set(cleanOffset=wrote)
            self.ckpt.flush()
            os.unlink(paths.abort_file(self.root))
            fsync_dir(self.root)
            log.info("store %s stopped cleanly at %d", self.root, wrote)
        else:
            log.error("store %s stopped with flushed %d / dispatched %d behind wrote %d: next start recovers",
                      self.root, flushed, dispatched, wrote)
        self._open = False
        await self._teardown()

    def _stop_accepting(self) -> None:
        """The first step of a close: no more writes, and the configs' final writes."""
        self._accepting = False
        if self._persist_timer is not None:
            self._persist_timer.cancel()
        WRITER.drain()  # what the loop handed to the background writer, before the final writes
        self.consumer_offsets.persist()
        self.topic_config.persist()

    async def _stop_services(self, wrote: int) -> None:
        """The reput dispatches up to `wrote`, then every service is stopped, each after its final
        work (the flush's last fdatasync)."""
        t = self.table
        t.add(_REPUT_WAKE, 1)
        # in controller mode only what the SyncStateSet acknowledged is dispatched (confirm_offset):
        # a master cut off from it stops with its unconfirmed tail undispatched, recovered at start
        bound = confirm_offset(t, wrote)
        try:
            await self.wait_dispatched(bound, 30)
        except asyncio.TimeoutError:
            log.error("reput did not catch up with %d before shutdown", bound)
        # From here on a service that ends is one we asked to stop (it may see SHUTDOWN and finish
        # by itself while we are busy with another): it must not be restarted.
        for svc in self.services.values():
            svc.stopping = True
        t.store(Slot.SHUTDOWN, 1)
        for spec in self._specs:
            # A service stopped before it set up its signal handling would die without its final
            # flush: let a (re)starting one get ready first.
            try:
                await self._wait_ready(spec, 10)
            except asyncio.TimeoutError:
                log.error("%s service is not ready; stopping it anyway", spec.name)
            await self.services[spec.name].stop()

    async def _teardown(self) -> None:
        if self.services and self.table is not None:
            self.table.store(Slot.SHUTDOWN, 1)  # the services stop only on a SIGTERM with it set
        for svc in self.services.values():
            svc.stopping = True
            if svc.proc is not None and svc.proc.poll() is None:
                await svc.stop(5)
        self.services.clear()
        for waiting in (self.group_commit, self.group_transfer):
            if waiting is not None:
                waiting.waiters.close()
        self.group_commit = self.group_transfer = None  # a restart (controller mode) makes its own
        if self.notifier is not None:
            self.notifier.close()
            self.notifier = None
        self.queries.close()
        for part in (self.cqs, self.commit_log, self.ckpt, self.table):
            if part is not None:
                part.close()
        self.cqs = self.commit_log = self.ckpt = self.table = None
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- what the services tell us -------------------------------------------------------------
    def _on_min_offset(self) -> None:
        m = self.table.load(Slot.MIN_OFFSET)
        if m != self._seen_min:
            self._seen_min = m
            self._drop_below(m)

    def _on_queues_seen(self) -> None:
        seen = self.table.load(Slot.QUEUES_SEEN)
        if seen != self._queues_seen:
            self._queues_seen = seen
            for cb in self.on_new_queues:
                cb()

    def _drop_below(self, min_offset: int) -> None:
        """The cleaner deleted segments below `min_offset`: let go of their maps, and start every
        loaded consume queue at its first message that still exists."""
        if self.commit_log is not None:
            n = self.commit_log.queue.drop_before(min_offset)
            if n:
                log.info("commit log now starts at %d (%d segments deleted by the cleaner)", min_offset, n)
        if self.cqs is not None:
            self.cqs.correct_min(min_offset)
        self.reader.forget_ends()

    async def wait_condition(self, predicate, timeout: float) -> None:
        """Until `predicate()` holds, re-checked at each wake-up from a service."""
        await self.notifier.wait_for(predicate, timeout)

    def poke(self) -> None:
        """Re-read what the services published, as if one had just woken us."""
        self.notifier.poke()

    # -- put ------------------------------------------------------------------------------------
    def _topic(self, topic: str) -> bytes:
        b = self._topics.get(topic)
        if b is None:
            b = topic.encode("utf-8")
            if not 0 < len(b) <= MAX_TOPIC_LEN:
                raise MessageIllegal(f"topic {topic!r} is {len(b)} bytes; RocketMQ allows 1..{MAX_TOPIC_LEN}")
            self._topics[topic] = b
        return b

    def topic_bytes(self, topic: str) -> bytes:
        return self._topics.get(topic) or topic.encode()

    def _check_open(self, topic: str = "") -> None:
        if not self._accepting:
            raise ServiceUnavailable("store is not started or is shutting down")
        if self.is_slave:
            raise ServiceUnavailable("this broker is a SLAVE: its log is written by replication from the master only")
        why = self.flags.why_not_writable()
        if why is not None:
            self._refuse(topic, *why)
        if self.isr_refusal is not None:
            self.put_failed[PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH] += 1
            raise InSyncReplicasNotEnough(self.isr_refusal)

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
               wait: bool = True, lazy_dispatch: bool = False) -> tuple[PutResult, asyncio.Future | None]:
        """Append one message now (the body is copied into the log before this returns, so it may
        be a view of a buffer about to be reused). Returns the result and, under SYNC_FLUSH or
        SYNC_MASTER with wait=True, the future that gives its final status. `lazy_dispatch`: no
        reader waits for this one's dispatch, so the reput is woken within REPUT_LAZY_WAKE_DELAY."""
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
        self._publish_wrote(cl.wrote, lazy_dispatch)
        self.put_msgs += 1
        self.put_bytes += size
        fut = self._await_put(end) if self._put_waits and wait else None
        self._count_status(fut, 1)
        return PutResult(PutStatus.PUT_OK, phys, qo, size, ts, cl.store_host), fut

    def append_record(self, topic: str, queue_id: int, body, properties: bytes) -> tuple[int, asyncio.Future | None]:
        """append(topic, queue_id, body, properties, lazy_dispatch=True) for the broker's own
        records (the revive log's checkpoints and acks, properties already encoded): the same
        record, checks, wake-ups and future, answered as (queue offset, future) without the
        PutResult no caller of it reads (~0.5 us a record, twice a receive and its ack)."""
        if not self._accepting or self.is_slave or self.isr_refusal is not None \
                or self.flags.why_not_writable() is not None:
            self._check_open(topic)  # (what it refuses, it refuses there: its checks, counters and log)
        tb = self._topics.get(topic) or self._topic(topic)
        cl = self.commit_log
        app = cl._app  # (cl.appender, without the property's frame)
        # the Appender at once (CommitLog.append's first try, without its frame); CommitLog.append
        # when the segment is full (None: nothing written), which rolls to the next and appends
        r = app.append(tb, queue_id, body, properties, 0, 0, -1, DEFAULT_BORN_HOST, 0)
        if r is None:
            try:
                r = cl.append(tb, queue_id, body, properties, 0, 0, -1, DEFAULT_BORN_HOST, 0)
            except OSError as e:
                self._segment_failed(topic, e)
            app = cl.appender
        phys, qo, size, ts = r
        wrote = app.wrote
        if self._wake_pending and (self._reput_wake_pending or self._reput_lazy_pending):
            # (_publish_wrote(wrote, True) when its wake-ups are already due, as under a stream of pops)
            self.table.publish(_WROTE, wrote)
            warm = cl._warm_ahead  # (cl.note_wrote(wrote), inline)
            if warm is not None:
                warm.note(wrote)
        else:
            self._publish_wrote(wrote, True)
        self.put_msgs += 1
        self.put_bytes += size
        if self._put_waits:
            fut = self._await_put(phys + size)
            self._count_status(fut, 1)
            return qo, fut
        return qo, None

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
        tb, bodies, props = self._batch_args(topic, bodies, properties)
        cl = self.commit_log
        try:
            chunks, ts = cl.append_batch(tb, queue_id, bodies, props, flag, sys_flag,
                                         -1 if born_timestamp is None else born_timestamp, born_host)
        except OSError as e:
            self._segment_failed(topic, e)
        end = cl.wrote
        self._publish_wrote(end)
        fut = self._await_put(end) if self._put_waits and wait else None
        self._count_status(fut, len(bodies))
        self.put_msgs += len(bodies)
        self.put_bytes += end - chunks[0].phys if chunks else 0
        sizes = cl.record_sizes(tb, bodies, props, born_host)
        return BatchPutResult(PutStatus.PUT_OK, chunks, len(bodies), end, ts, sizes, cl.store_host), fut

    def _batch_args(self, topic: str, bodies, properties) -> tuple[bytes, list, bytes | list]:
        """A batch's arguments checked and normalized: (topic bytes, bodies as a list, properties
        as one encoded bytes or one per body). The store must take writes for the topic."""
        self._check_open(topic)
        tb = self._topic(topic)
        if not isinstance(bodies, list):
            bodies = list(bodies)
        if not bodies:
            raise ValueError("put_batch needs at least one body")
        props = properties
        if type(props) is not bytes and type(props) is not list:
            props = encode_properties(props)
        return tb, bodies, props

    async def put_batch(self, topic: str, queue_id: int, bodies: list, properties: bytes | list | dict | None = b"", *,
                        flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None,
                        born_host: bytes = DEFAULT_BORN_HOST, wait: bool = True) -> BatchPutResult:
        """Append many messages to one queue (see append_batch), awaiting the flush under SYNC_FLUSH."""
        r, fut = self.append_batch(topic, queue_id, bodies, properties, flag=flag, sys_flag=sys_flag,
                                   born_timestamp=born_timestamp, born_host=born_host, wait=wait)
        if fut is not None:
            r.status = await fut
        return r

    @property
    def waits_for_durability(self) -> bool:
        """A put is answered once flushed (SYNC_FLUSH), acknowledged by a slave (SYNC_MASTER), or both."""
        return self._put_waits

    @property
    def reads_dispatched_only(self) -> bool:
        """Whether a queue ends at its last dispatched consume-queue entry, held pulls waking at
        every dispatch: on a slave (nothing appends here) and in DLedger mode (what is appended
        is readable once committed and dispatched). A master knows its queues' ends itself."""
        return self.is_slave

    @property
    def queue_heads_may_be_unwritten(self) -> bool:
        """Whether a consume queue may begin with entries never written on this member (DLedger
        mode: see ConsumeQueue.skip_unwritten_head). The ordinary store writes every queue densely."""
        return False

    @property
    def fast_writable(self) -> bool:
        """Whether appends may go straight in (the send kernel): a running master not refusing writes."""
        return (self._accepting and not self.is_slave and self.isr_refusal is None
                and self.flags.why_not_writable() is None)

    # The send kernel's appends may be settled (note_appended) once per loop turn, for every
    # connection read in it: nothing here depends on them before the next read.
    settles_each_read = False

    def ready_for_kernel(self) -> bool:
        """Right before the send kernel runs a read: whether it may append (fast_writable). A
        store whose kernel needs more than that (DLedger's: its Appender at the log's end) does
        it here."""
        return self.fast_writable

    def note_appended(self, msgs: int, nbytes: int) -> None:
        """The send kernel appended `msgs` records (`nbytes`) since the last note: publish the new
        write position and count them, as append() does for one."""
        self.put_msgs += msgs
        self.put_bytes += nbytes
        self._publish_wrote(self.commit_log.wrote)

    def _publish_wrote(self, wrote: int, lazy_dispatch: bool = False) -> None:
        # `wrote` is visible to the services at once; waking them (a futex syscall, ~4 us, and a
        # context switch on a 2-core machine) is batched, and costs nothing for one that is not
        # asleep (the waiter count beside each word: the eventcount pattern).
        # - Those sleeping on WROTE (the flush service under SYNC_FLUSH, the HA service under
        #   SYNC_MASTER: producers wait on them) are woken at the end of the event-loop turn, once
        #   for every put of the turn; otherwise within REPUT_WAKE_DELAY.
        # - The reput sleeps on REPUT_WAKE between passes, bumped at most once a millisecond while
        #   puts come in: it dispatches everything written since, a pass per wake. (Watching WROTE
        #   itself, it found new records after every pass and spun at a core's worth of CPU in
        #   passes of a few records; RocketMQ's ReputMessageService looks every 1 ms.)
        self.table.publish(_WROTE, wrote)
        self.commit_log.note_wrote(wrote)
        if not self._wake_pending:
            self._wake_pending = True
            if self._put_waits:
                self._loop.call_soon(self._wake_writers_waiters)
            else:
                self._loop.call_later(REPUT_WAKE_DELAY, self._wake_writers_waiters)
        if lazy_dispatch:  # (a prompt wake-up already due covers it)
            if not self._reput_wake_pending and not self._reput_lazy_pending:
                self._reput_lazy_pending = True
                self._loop.call_later(REPUT_LAZY_WAKE_DELAY, self._wake_reput_lazily)
            return
        if not self._reput_wake_pending:
            self._reput_wake_pending = True
            self._loop.call_later(self.reput_wake_delay(), self._wake_reput)

    def reput_wake_delay(self) -> float:
        """How long a write may wait before the reput is woken for it (a store whose dispatch
        nobody waits on can batch more per pass: DLedger's followers)."""
        return REPUT_WAKE_DELAY

    def _wake_writers_waiters(self) -> None:
        self._wake_pending = False
        if self.table is not None:
            self.table.wake(_WROTE)

    def _wake_reput(self) -> None:
        self._reput_wake_pending = False
        if self.table is not None:
            self.table.add(_REPUT_WAKE, 1)

    def _wake_reput_lazily(self) -> None:
        self._reput_lazy_pending = False
        self._wake_reput()

    def wait_put(self, end: int, resolve: Resolve, arg) -> None:
        """Call resolve(arg, status) once the put ending at `end` is as durable as the mode asks:
        flushed (SYNC_FLUSH), acknowledged by a slave (SYNC_MASTER), or both."""
        if self.group_commit is not None and self.group_transfer is not None:
            both = _Both(resolve, arg)
            self.group_commit.wait(end, _Both.flushed, both)
            self.group_transfer.wait(end, _Both.acked, both)
        elif self.group_commit is not None:
            self.group_commit.wait(end, resolve, arg)
        else:
            self.group_transfer.wait(end, resolve, arg)

    def _await_put(self, end: int) -> asyncio.Future:
        fut = self._loop.create_future()
        self.wait_put(end, resolve_future, fut)
        return fut

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

    # -- waiting on the services ----------------------------------------------------------------
    async def wait_dispatched(self, offset: int, timeout: float | None = None) -> int:
        """Wait until the reput service has built consume queues up to `offset`."""
        return await self.dispatch.wait(offset, timeout)

    def dispatched(self) -> int:
        return self.table.load(Slot.DISPATCHED)

    def _cache_floor(self) -> int:
        """Below this no service reads the commit log as it goes: flushed and dispatched."""
        t = self.table
        return 0 if t is None else min(t.load(Slot.FLUSHED), t.load(Slot.DISPATCHED))

    async def wait_flushed(self, offset: int, timeout: float | None = None) -> int:
        """Wait until the flush service has made the commit log durable up to `offset`."""
        await self.wait_condition(lambda: self.table.load(Slot.FLUSHED) >= offset, timeout)
        return self.table.load(Slot.FLUSHED)

    # -- get (QueueReader) ---------------------------------------------------------------------
    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.reader.max_offset(topic, queue_id)

    def min_offset(self, topic: str, queue_id: int) -> int:
        view = self.compaction.view_for(topic, queue_id)
        if view is not None:  # a compacted queue starts at its view's first kept message
            return min(view.first, self.reader.min_offset(topic, queue_id))
        return self.reader.min_offset(topic, queue_id)

    def queue_write_end(self, topic: str, queue_id: int) -> int:
        """End offset in the commit log of the last message appended to the queue in this run
        (0 if none): a reader waits for `dispatched` to pass it before the message is visible."""
        if self.is_slave:
            return 0
        return self.commit_log.appender.last_end(self.topic_bytes(topic), queue_id)

    def get(self, topic: str, queue_id: int, offset: int, max_msgs: int = 32, max_bytes: int = 256 * 1024,
            tag_hashes: set[int] | None = None, spans: bool = False, sql: bytes | None = None,
            merge: bool = False) -> GetResult:
        """QueueReader.get (merge: views of runs of records, with their offsets; a compacted
        queue's view gives one view per record)."""
        view = self.compaction.view_for(topic, queue_id)
        if view is not None and offset < view.end:  # a compacted queue: its view, then its tail
            hi = max(view.end, self.reader.max_offset(topic, queue_id))
            return self.compaction.get(view, offset, max_msgs, max_bytes, tag_hashes, spans, sql,
                                       self.min_offset(topic, queue_id), hi)
        return self.reader.get(topic, queue_id, offset, max_msgs, max_bytes, tag_hashes, spans, sql, merge)

    def read_run(self, topic: str, queue_id: int, offset: int, max_msgs: int, max_bytes: int,
                 tag_hashes: set[int] | None = None, sql: bytes | None = None):
        """get(merge=True) for a pop: QueueReader.read_run's (views, queue offsets, next offset, max
        offset) when found, else get's GetResult (a compacted queue's always)."""
        if self.compaction.views and self.compaction.view_for(topic, queue_id) is not None:
            return self.get(topic, queue_id, offset, max_msgs, max_bytes, tag_hashes, sql=sql, merge=True)
        return self.reader.read_run(topic, queue_id, offset, max_msgs, max_bytes, tag_hashes, sql)

    def record_view(self, physical_offset: int) -> memoryview:
        return self.reader.record_view(physical_offset)

    def lookup(self, physical_offset: int) -> StoredMessage:
        return self.reader.lookup(physical_offset)

    def queue_counts(self) -> dict[str, int]:
        return self.reader.queue_counts()

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult:
        """QUERY_MESSAGE: the stored records indexed under `key` of `topic`, stored within [begin, end]."""
        return self.queries.query(topic, key, max_num, begin, end)

    @property
    def get_msgs(self) -> int:
        return self.reader.get_msgs

    @property
    def get_bytes(self) -> int:
        return self.reader.get_bytes

    # -- introspection and requests ----------------------------------------------------------------
    def offsets(self) -> dict[str, int]:
        t = self.table
        out = {"min": t.load(Slot.MIN_OFFSET), "wrote": t.load(Slot.WROTE), "flushed": t.load(Slot.FLUSHED),
               "dispatched": t.load(Slot.DISPATCHED)}
        out.update(disk_usage=t.load(Slot.DISK_USAGE) / 1e6, disk_full=t.load(Slot.DISK_FULL),
                   dispatch_blocked=t.load(Slot.DISPATCH_BLOCKED), deleted_files=t.load(Slot.DELETED_FILES),
                   flush_errors=t.load(Slot.FLUSH_ERRORS))
        if self.is_slave:
            out.update(received=t.load(Slot.HA_RECEIVED), linked=t.load(Slot.HA_LINK))
        else:
            out.update(acked=t.load(Slot.ACKED), slaves=t.load(Slot.HA_SLAVES))
        return out

    deletes_topic_queues = True  # deleteTopic drops a topic's consume queues (not in DLedger mode)

    async def delete_topic_queues(self, topic: str, timeout: float = 10.0) -> int:
        """RocketMQ's deleteTopics: the topic's consume queues go (their directories, this process's
        maps, the reput's), and its queue offsets start again at 0; its records stay in the commit
        log until they expire, reachable by physical offset only. Returns the messages its queues
        held. A master's store only (a slave's queues follow its master's commit log)."""
        if self.is_slave or self.cqs is None:
            raise ServiceUnavailable("a slave's consume queues follow its master's commit log")
        tb = self.topic_bytes(topic)
        app = self.commit_log.appender
        queues = sorted(q for t, q in app.queue_offsets if t == tb)
        held = sum(max(self.max_offset(topic, q), 0) for q in queues)
        # every record of the topic in its queues first: the reput must not write them after
        await self.wait_dispatched(self.table.load(Slot.WROTE), timeout)
        for key in [k for k in self.cqs.queues if k[0] == topic]:
            self.cqs.queues.pop(key).close()
        tdir = os.path.join(self.cqs.root, topic)
        if "/" not in topic and topic not in ("", ".", "..") and os.path.isdir(tdir):
            # out of consumequeue/ at once: out of every listing (the cleaner's, the next start's)
            gone = os.path.join(os.path.dirname(self.cqs.root), f".deleting-topic-{time.time_ns()}")
            os.rename(tdir, gone)
            fsync_dir(self.cqs.root)
            shutil.rmtree(gone, ignore_errors=True)
        # the reput lets go of its maps and checkpoints past the topic's records (a crash must not
        # dispatch them again into new queues)
        gen = self.table.add(Slot.TOPICS_DELETED, 1)
        self._wake_reput()
        await self.wait_condition(lambda: self.table.load(Slot.TOPICS_DELETED_ACK) >= gen, timeout)
        for q in queues:
            app.rewind(app.wrote, tb, q, 0)
        self.reader.forget_ends()
        self.compaction.forget(topic)
        log.info("topic %s: consume queues %s deleted (%d messages)", topic, queues, held)
        return held

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
