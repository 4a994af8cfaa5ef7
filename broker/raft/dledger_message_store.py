"""DLedgerMessageStore: the MessageStore of DLedger mode (`enableDLegerCommitLog=true`).

The log is the group's Raft log (broker.raft.server.DLedgerServer, in this process, on its peer
port from dLegerPeers), each RocketMQ record the body of one entry (DLedgerCommitLog). What
changes against the ordinary store, and why:

- Puts go to DLedgerCommitLog.append on the serving master only and are answered once a
  majority holds the entry (the put's future, as SYNC_MASTER's), with RocketMQ's statuses for
  DLedger's failures. The send kernel appends single sends in place through the commit log's
  Appender in entry mode (one entry each); after each read the log's end and the leader's
  quorum learn of them at once (note_appended) and the read's parked replies wait for the last
  entry to be committed (wait_put: one future per read, failed by a term change as every wait).
- Consumers see committed entries only, on every member: the committed position is published in
  the offset table's WROTE slot, and the reput (broker.raft.dledger_reput, its own process)
  dispatches up to it. Reads by physical offset read the DLedger data files (pos + 48), and
  below the divided offset the commit log written before DLedger mode, if there is one.
- Queue ends are those of the consume queues on every member (what the reput wrote), as on a
  slave: nothing appended is visible before it is committed and dispatched.
- Consume queues and the message index are rebuilt from the committed entries at every start
  (their directories are emptied first): entries beyond a crashed member's recovered log, or a
  torn consume-queue tail, can then never be served; the cost is one pass over the log at start.
- No flush or HA service: DLedger writes its files back itself (its flusher), replication is
  DLedger's. The cleaner is DLedger's variant (broker.raft.dledger_clean): expired data files
  go, oldest first, never beyond what is committed, dispatched, written back and still needed by
  a live follower (FOLLOWERS_NEED, published here); this process then drops their maps and moves
  its log's begin (`_drop_below`). The consume queues, rebuilt at each start from the log's
  begin, then have unwritten heads (`queue_heads_may_be_unwritten`).
- An ordinary commit log with records beside it (a store upgraded to DLedger mode) stays
  readable below the divided offset, as RocketMQ keeps it (broker.raft.divided_commit_log: the
  first start seals it and starts the DLedger data files where its last segment ends); its
  records are dispatched before the entries, so queue offsets continue across the divide.
  Turning DLedger mode off again is refused by the ordinary store (MessageStore._start).

Roles: `is_slave` is true until the role change handler makes this member the serving master
(broker.raft.role_change_handler), and again from the moment it stops leading.
"""
from __future__ import annotations

import logging
import os
import shutil
import time

import numpy as np

from broker.raft.config import DLedgerConfig
from broker.raft.dledger_commit_log import UNACKNOWLEDGED, DLedgerCommitLog, put_status
from broker.raft.divided_commit_log import open_old_commit_log
from broker.raft.role_change_handler import DLedgerRoleChangeHandler
from broker.raft.server import DLedgerServer
from broker.services.dispatch_waiters import DispatchWaiters
from broker.services.message_store import DEFAULT_BORN_HOST, MessageStore
from broker.services.notifier import Notifier
from broker.services.running_flags import RunningFlags
from broker.services.service_specs import ServiceSpec
from broker.services.supervisor import ServiceProcess
from broker.store import paths
from broker.store.checkpoint import StoreCheckpoint
from broker.store.config import SYNC_FLUSH, MessageStoreConfig
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.errors import ServiceUnavailable
from broker.store.message import encode_properties
from broker.store.offset_table import Slot, create_table
from broker.store.results import BatchChunk, BatchPutResult, PutResult, PutStatus

log = logging.getLogger("store")

DLEDGER_REPUT = ServiceSpec("reput", "broker.raft.dledger_reput", Slot.REPUT_PID)
DLEDGER_CLEAN = ServiceSpec("clean", "broker.raft.dledger_clean", Slot.CLEAN_PID)
FOLLOWERS_NEED_INTERVAL_S = 1.0  # the leader's pin follows its followers' water marks at least this often
# A follower's reput is woken this long after the committed position moved, where the leader's is
# woken within a millisecond (REPUT_WAKE_DELAY): no put waits for a follower's consume queues, and
# each pass costs the same whatever it dispatches (see reput_wake_delay)
FOLLOWER_REPUT_WAKE_DELAY = 0.01


class DLedgerMessageStore(MessageStore):
    # its reput dispatches committed entries on every member: deleting a topic's queues would
    # need every member to do it at the same entry (not done: deleteTopic refuses a topic holding messages)
    deletes_topic_queues = False

    def __init__(self, config: MessageStoreConfig, dledger: DLedgerConfig):
        super().__init__(config)
        self.dledger_config = dledger
        self.server: DLedgerServer | None = None
        self.handler: DLedgerRoleChangeHandler | None = None
        self._server_started = False
        self._need_timer = None
        # DLedger flushes its own files and every put waits for its quorum (RocketMQ forces the
        # leader to SYNC_MASTER); brokerRole from broker.conf does not apply, and flushDiskType
        # only says how durable the quorum is: SYNC_FLUSH answers a put once a majority has it
        # on disk (the DLedgerServer's durable mode), ASYNC_FLUSH once a majority has it in
        # memory, as DLedger (which flushes every 10 ms)
        self.sync_flush = self.sync_master = False
        self._put_waits = True
        self.is_slave = True
        self.config.brokerRole = "SLAVE"
        # called with (master: bool) at each switch; the controller registers before start()
        self.role_listeners: list = []

    # -- roles -----------------------------------------------------------------------------------
    def set_master(self, master: bool) -> None:
        """The role change handler's switch (RocketMQ's changeToMaster(SYNC_MASTER) / changeToSlave)."""
        self.is_slave = not master
        self.config.brokerRole = "SYNC_MASTER" if master else "SLAVE"

    def _check_open(self, topic: str = "") -> None:
        if self.is_slave and self._accepting:
            raise ServiceUnavailable(self.not_master_remark())
        super()._check_open(topic)

    def not_master_remark(self) -> str:
        """Why this member refuses a send, from the instant it stops leading (the role change
        handler makes it a slave in the elector's own call): its DLedger role and term, and the
        leader it knows, so a client or operator reading the remark knows where writes go now."""
        s = self.server
        if s is None:
            return "this broker's DLedger member is not running"
        st = s.state
        me = f"DLedger member {st.self_id} of {st.group}"
        if st.is_leader:
            return (f"{me} leads term {st.term} but is not serving writes yet: the previous leaders' entries are "
                    f"still being committed and dispatched")
        if st.leader_id is None or st.leader_id == st.self_id:
            return (f"{me} is not the leader ({st.role.value} in term {st.term}, no leader known): the group is "
                    f"electing one; retry on the master the name server routes")
        peer = st.peers.get(st.leader_id)
        return (f"{me} is not the leader ({st.role.value} in term {st.term}): the leader is {st.leader_id}"
                f"{f' (DLedger peer {peer.addr})' if peer is not None else ''}; send to the master the name "
                f"server routes (brokerId 0)")

    @property
    def reads_dispatched_only(self) -> bool:
        return True

    @property
    def queue_heads_may_be_unwritten(self) -> bool:
        """A member whose log starts above 0 (no copy of the leader's old commit log, or old
        segments deleted) has no entries for the messages below it: its queues start after them."""
        cl = self.commit_log
        return cl is not None and (cl.min_offset > 0 or cl.server.store.ledger_begin_index > 0)

    # ready_for_kernel places the Appender at the log's end, which note_appended (took_in_place)
    # moves: each read's entries are taken before the next read
    settles_each_read = True

    def ready_for_kernel(self) -> bool:
        """The send kernel may append while this member serves as master and leads in its
        quorum's term (the Appender then placed at the log's end)."""
        return self.fast_writable and self.commit_log.ready_in_place()

    def queue_write_end(self, topic: str, queue_id: int) -> int:
        return 0  # nothing appended is readable before the reput dispatched it (committed first)

    def _queue_end(self, topic: bytes, queue_id: int) -> int:
        return self.reader.max_offset(topic.decode("utf-8", "replace"), queue_id)

    # -- lifecycle -------------------------------------------------------------------------------
    async def _start(self) -> None:
        cfg = self.config
        # consume queues are rebuilt from the committed entries (see the module's doc)
        shutil.rmtree(cfg.consumequeue_dir, ignore_errors=True)
        shutil.rmtree(cfg.index_dir, ignore_errors=True)  # and so is the message index, with them
        for d in (cfg.consumequeue_dir, cfg.config_dir):
            os.makedirs(d, exist_ok=True)
        self.consumer_offsets.load()
        self.topic_config.load()
        self.ckpt = StoreCheckpoint(paths.checkpoint(self.root))
        t0 = time.monotonic()
        # a commit log written without DLedger stays readable below the divided offset (the
        # first start seals it and starts the DLedger data files there)
        old = open_old_commit_log(cfg)
        try:
            server = self.server = DLedgerServer(
                self.dledger_config, self.root,
                # as RocketMQ's DLedgerCommitLog: data files of mappedFileSizeCommitLog; an empty
                # log never takes a leader's first position inside this member's own old log
                store_options={"data_file_size": cfg.mappedFileSizeCommitLog, "warm": cfg.warm_segments,
                               "floor": old.files[-1].end if old is not None else 0},
                durable=cfg.flushDiskType == SYNC_FLUSH)
        except BaseException:
            if old is not None:
                old.close()
            raise
        ds = server.store
        if old is not None and ds.ledger_end_index < 0 and ds.write_pos == old.files[-1].end:
            self._mark_divide(server)
        cl = self.commit_log = DLedgerCommitLog(cfg, server, self._queue_end, old)
        begin, committed = cl.begin_pos, cl.committed_pos
        log.info("dledger store %s recovered in %.3fs: entries [%d, %d], committed %d (data [%d, %d)%s)",
                 ds.dir, time.monotonic() - t0, ds.ledger_begin_index, ds.ledger_end_index, ds.committed_index,
                 begin, committed, f", dividedCommitlogOffset {cl.divided.divided}" if cl.divided else "")

        t = self.table = create_table(self.root)
        t.store(Slot.WROTE, committed)
        # FLUSHED: where this member's entry data is on disk (its index in ENTRY_INDEX_FLUSHED),
        # published at every write-back: what a power cut would keep, readable after a kill -9
        self._publish_durable(ds.flushed_pos, ds.index_flushed_pos)
        ds.on_durable.append(self._publish_durable)
        t.store(Slot.DISPATCHED, begin)
        t.store(Slot.MIN_OFFSET, cl.min_offset)
        # nothing deletable until this member knows what its followers need (_publish_followers_need)
        t.store(Slot.FOLLOWERS_NEED, begin)
        loop = self._loop
        n = self.notifier = Notifier(loop)
        self.flags = RunningFlags(t, cfg)
        self.dispatch = DispatchWaiters(t, loop, n.poke)
        n.listeners += [self._on_min_offset, self.flags.on_wake, self._on_queues_seen, self.dispatch.on_wake]
        self._specs = (DLEDGER_REPUT, DLEDGER_CLEAN)
        for spec in self._specs:
            svc = self.services[spec.name] = ServiceProcess(spec.name, spec.module, cfg, n.fd, loop)
            svc.start()
        self._open = True
        for spec in self._specs:
            await self._wait_ready(spec, cfg.serviceStartTimeout / 1000)
        await self.wait_dispatched(committed, cfg.serviceStartTimeout / 1000)
        self.cqs = ConsumeQueueStore(cfg.consumequeue_dir, cfg.mappedFileSizeConsumeQueue, writable=False)
        self.cqs.load()
        self._seen_min = cl.min_offset

        server.committed.listeners.append(self._on_committed)
        h = self.handler = DLedgerRoleChangeHandler(self, server)
        h.listeners.extend(self.role_listeners)
        server.elector.handlers.append(h.on_role_change)
        # after the server's own handler: a new leader's water marks are fresh when read
        server.elector.handlers.append(lambda _term, _role: self._publish_followers_need())
        self._need_timer = loop.call_later(FOLLOWERS_NEED_INTERVAL_S, self._tick_followers_need)
        await server.start()
        self._server_started = True
        self._accepting = True
        self._persist_timer = loop.call_later(cfg.flushConsumerOffsetInterval / 1000, self._persist_offsets)

    @staticmethod
    def _mark_divide(server: DLedgerServer) -> None:
        """A member that holds the old commit log begins its DLedger log with a marker: entry 0,
        term 0, empty body, at the divided offset, written back before the member votes. Every
        member upgraded from a copy of the same old log writes the same bytes, so they agree on
        entry 0; and its ledger end (0, 0) outranks an empty member's (-1, -1) in every vote, so a
        member without the old log (which would put entry 0 at position 0, where the others' old
        records lie, and be refused by them for ever) never leads while a member holding the old
        log is in its majority. The reput steps over it as over a leader's no-op."""
        ds = server.store
        index, pos = ds.append(0, b"")
        ds.persist_checkpoint()
        server.ledger_changed()  # the votes it gives and asks for compare this ledger end
        log.info("dledger: entry %d (term 0, empty) marks the divided offset %d: members holding the old commit "
                 "log lead before members without it", index, pos)

    # -- expiry (broker.raft.dledger_clean deletes; this member says what it must keep) ----------
    def followers_need(self) -> int:
        """The lowest data position this member must keep for the group (FOLLOWERS_NEED): on the
        leader, the position of the lowest follower's match entry, the first entry its next COMPARE
        reads (a follower not yet compared in this term, -1, pins the log's begin); elsewhere the
        committed position (a follower's own reput and clients need no more)."""
        s = self.server
        ds = s.store
        begin, end = ds.ledger_begin_index, ds.ledger_end_index
        if begin < 0:
            return ds.write_pos
        st = s.state
        if not st.is_leader:
            return self.commit_log.committed_pos
        if s.quorum.term != st.term:
            return ds.position(begin)[0]
        marks = [m for p, m in s.quorum.water_marks.items() if p != st.self_id]
        low = min(marks) if marks else end + 1
        if low > end:
            return ds.write_pos
        return ds.position(max(low, begin))[0]

    def _publish_followers_need(self) -> None:
        t = self.table
        if t is None or self.server is None or self.server.store.closed:
            return
        try:
            t.store(Slot.FOLLOWERS_NEED, self.followers_need())
        except Exception:  # a read of the index failing: the pin stays where it was (never higher)
            log.exception("dledger: what the followers need could not be read")

    def _tick_followers_need(self) -> None:
        self._publish_followers_need()
        if self.server is not None:
            self._need_timer = self._loop.call_later(FOLLOWERS_NEED_INTERVAL_S, self._tick_followers_need)

    def _drop_below(self, min_offset: int) -> None:
        """The cleaner deleted files below `min_offset`: the old segments' maps, then the data
        files' (the entry store moves its begin and deletes the index files below it); consume
        queues start at their first message that still exists."""
        cl = self.commit_log
        if cl is not None and cl.divided is not None:
            cl.divided.drop_before(min_offset)
        s = self.server
        if s is not None and not s.store.closed:
            try:
                s.store.drop_before(min_offset)
            except Exception:  # never on the loop: reads below keep refusing, the member goes on
                log.exception("dledger: the log's begin could not follow the cleaner's deletion below %d", min_offset)
        if self.cqs is not None:
            self.cqs.correct_min(min_offset)
        self.reader.forget_ends()
        self._publish_followers_need()

    def _publish_durable(self, data: int, index: int) -> None:
        t = self.table
        if t is None:  # the last write-back at close, after the table
            return
        t.store(Slot.FLUSHED, data)
        t.store(Slot.ENTRY_INDEX_FLUSHED, index)

    def reput_wake_delay(self) -> float:
        """A follower's consume queues are read by nobody in the way of a put (slave reads, a
        failover's new leader: it waits for them, which wakes its reput within a millisecond
        again), so its reput is woken every FOLLOWER_REPUT_WAKE_DELAY under load rather than every
        millisecond: a pass (the wake's futex, the pass's Python, its checkpoint loads) then
        dispatches ten times as many entries."""
        if self.is_slave and not self.table.load(Slot.WANT_DISPATCH):
            return FOLLOWER_REPUT_WAKE_DELAY
        return super().reput_wake_delay()

    def _on_committed(self, index: int) -> None:
        """The committed index moved (a quorum on the leader, the leader's word on a follower):
        the reput may dispatch up to the new committed position."""
        if self.table is not None:
            self._publish_wrote(self.commit_log.committed_pos)

    async def close(self) -> None:
        if not self._open:
            await self._teardown()
            return
        self._stop_accepting()
        if self._need_timer is not None:
            self._need_timer.cancel()
            self._need_timer = None
        if self.handler is not None:
            self.handler.close()
        await self._stop_server()  # waiting puts fail (NOT_LEADER), entries and checkpoint written back
        wrote = self.table.load(Slot.WROTE)
        await self._stop_services(wrote)
        log.info("dledger store %s stopped at committed position %d", self.root, wrote)
        self._open = False
        await self._teardown()

    async def _stop_server(self) -> None:
        s = self.server
        if s is None:
            return
        self.server = None
        if self._server_started:
            await s.stop()
        else:
            s.store.close()

    async def _teardown(self) -> None:
        await self._stop_server()
        if self.commit_log is not None:
            self.commit_log.close()  # the old segments; the data files were closed with the server's store
        self.commit_log = None
        await super()._teardown()

    # -- puts ------------------------------------------------------------------------------------
    def append(self, topic: str, queue_id: int, body, properties: bytes | dict | None = b"", *,
               flag: int = 0, sys_flag: int = 0, born_timestamp: int | None = None,
               born_host: bytes = DEFAULT_BORN_HOST, reconsume_times: int = 0, wait: bool = True,
               lazy_dispatch: bool = False):
        """As MessageStore.append; the future (always given) says PUT_OK once a majority holds the
        entry, or the status RocketMQ's DLedgerCommitLog answers the failure with. (An entry is
        dispatched once committed whatever `lazy_dispatch` says.)"""
        self._check_open(topic)
        tb = self._topic(topic)
        props = properties if type(properties) is bytes else encode_properties(properties)
        cl = self.commit_log
        phys, qo, size, ts, fut = cl.append(tb, queue_id, body, props, flag, sys_flag,
                                            -1 if born_timestamp is None else born_timestamp, born_host,
                                            reconsume_times)
        self.put_msgs += 1
        self.put_bytes += size
        self._count_status(fut, 1)
        return PutResult(PutStatus.PUT_OK, phys, qo, size, ts, cl.store_host), fut

    def append_record(self, topic: str, queue_id: int, body, properties: bytes):
        """As MessageStore.append_record: this store's append, its queue offset and future."""
        r, fut = self.append(topic, queue_id, body, properties, lazy_dispatch=True)
        return r.queue_offset, fut

    def append_batch(self, topic: str, queue_id: int, bodies: list, properties: bytes | list | dict | None = b"", *,
                     flag: int | list = 0, sys_flag: int = 0, born_timestamp: int | None = None,
                     born_host: bytes = DEFAULT_BORN_HOST, wait: bool = True):
        """One entry per message (consecutive, with consecutive queue offsets); the future is the
        last one's: entries commit in order, so it covers the batch."""
        tb, bodies, props = self._batch_args(topic, bodies, properties)
        cl = self.commit_log
        born = -1 if born_timestamp is None else born_timestamp
        chunks, sizes = [], []
        fut = None
        ts = 0
        for i, body in enumerate(bodies):
            p = props[i] if type(props) is list else props
            f = flag[i] if type(flag) is list else flag
            phys, qo, size, ts, fut = cl.append(tb, queue_id, body, bytes(p), f, sys_flag, born, born_host)
            chunks.append(BatchChunk(phys, qo, 1))
            sizes.append(size)
        self.put_msgs += len(bodies)
        self.put_bytes += sum(sizes)
        self._count_status(fut, len(bodies))
        end = chunks[-1].phys + sizes[-1]
        return BatchPutResult(PutStatus.PUT_OK, chunks, len(bodies), end, ts, np.array(sizes, np.int64),
                              cl.store_host), fut

    def note_appended(self, msgs: int, nbytes: int) -> None:
        """The send kernel appended `msgs` entries in place: the log's end moves past them and the
        quorum counts them (nothing is published: consumers see them once committed)."""
        self.put_msgs += msgs
        self.put_bytes += nbytes
        self.commit_log.took_in_place()

    def wait_put(self, end: int, resolve, arg) -> None:
        """Call resolve(arg, PUT_OK) once a majority holds the entries the send kernel appended
        so far (their last one; `end`, where the parked puts end, is at or before its end), else
        resolve(arg, status, why) with the status RocketMQ's DLedgerCommitLog answers the failure
        with (a term change, a timeout) and why, as DLedgerCommitLog.append's futures say it."""
        s = self.server
        if s is None:
            resolve(arg, PutStatus.SERVICE_NOT_AVAILABLE, "this broker's DLedger member is not running")
            return
        fut = s.wait_entry(s.store.ledger_end_index)

        def done(f) -> None:
            if f.cancelled():
                resolve(arg, PutStatus.UNKNOWN_ERROR, UNACKNOWLEDGED)
            elif f.exception() is not None:
                resolve(arg, put_status(f.exception()), f"{f.exception()}; {UNACKNOWLEDGED}")
            else:
                resolve(arg, PutStatus.PUT_OK)
        fut.add_done_callback(done)

    # -- introspection ---------------------------------------------------------------------------
    def offsets(self) -> dict[str, int]:
        t = self.table
        out = {"min": t.load(Slot.MIN_OFFSET), "wrote": t.load(Slot.WROTE), "flushed": t.load(Slot.FLUSHED),
               "dispatched": t.load(Slot.DISPATCHED)}
        out.update(disk_usage=t.load(Slot.DISK_USAGE) / 1e6, disk_full=t.load(Slot.DISK_FULL),
                   dispatch_blocked=t.load(Slot.DISPATCH_BLOCKED), deleted_files=t.load(Slot.DELETED_FILES))
        s = self.server
        if s is not None:
            st = s.state
            out.update(dLedgerRole=st.role.value, dLedgerTerm=st.term, dLedgerLeader=st.leader_id or "",
                       dLedgerCommittedIndex=s.store.committed_index, dLedgerEndIndex=s.store.ledger_end_index,
                       dLedgerWritePos=s.store.write_pos)
        return out

    def dledger_status(self) -> dict[str, float]:
        """The member's Raft figures for /metrics and `broker admin status`: its term, whether it
        leads, its committed and last index, and on the leader how many entries each follower is
        behind its log's end (from the quorum's water marks: -1, not yet compared, counts all)."""
        s = self.server
        if s is None:
            return {}
        st, store = s.state, s.store
        end = store.ledger_end_index
        out = {"dledger_term": float(st.term), "dledger_leader": 1.0 if st.is_leader else 0.0,
               "dledger_committed_index": float(store.committed_index), "dledger_end_index": float(end),
               "dledger_flushed_index": float(store.flushed_index),
               "dledger_disk_failed": 1.0 if store.disk_failed else 0.0}
        if st.is_leader:
            for peer, mark in s.quorum.water_marks.items():
                if peer != st.self_id:
                    out[f"dledger_follower_lag_{peer}"] = float(max(0, end - mark))
        return out
