"""The broker's side of the send kernel (broker.kernels.send_path): which topics it may append to,
and what the store and the held pulls must learn after each read.

Routes: a topic whose sends need nothing but an append (it exists, is writable, is not a retry,
dead-letter or schedule topic) gets a route listing its write queues, kept in step with the
topic table. A topic without one goes to the processors, which create it on first use (and the
change installs its route for the next send).

Per read: the kernel is enabled only while the store takes writes (not a slave, not refusing
for a full disk; asked once per loop turn) and ACL is off (signatures are checked by the
processors); it reports the queues it appended to only while pulls are held. The replies it
answers at once leave at the end of the read. At the end of the event-loop turn (and before any
frame handed to the processors), `end_turn` settles every connection read in the turn at once:
the store publishes the new write position and counts the puts, the pulls held on those queues
wake; under SYNC_FLUSH / SYNC_MASTER every connection's replies parked in that turn go to the
store's waiters as one entry, answered together when the puts are durable: one connection's
replies leave in one write, and 50 producers with one send in flight each cost one settle and
one waiter per turn, not a settle, a waiter, a timer check and a scheduled write per send. In
DLedger mode the store is told of the entries the kernel appended after each read (its log end
and quorum follow; its Appender is placed at the log's end before the next) and the parked
replies wait for the quorum to commit the turn's last entry.

Timer messages: once the timer service made its topic (rmq_sys_wheel_timer), the kernel stores
the plain ones there itself (SendPipeline.set_timer, with timerPrecisionMs, timerMaxDelaySec and
the broker name their recall handles carry); `settle` tells the timer service how many arrived.
"""
from __future__ import annotations

import time

from broker.kernels.codec import MAX_TOPIC_LEN
from broker.kernels.send_path import ParkedReplies, SendConn, SendPipeline
from broker.server.processor.send_processor import STATUS_CODES, STATUS_REMARKS, born_host_of
from broker.common.topic_attributes import is_compaction
from broker.common.topic_validator import DLQ_PREFIX, PERM_WRITE, RETRY_PREFIX, not_sendable
from broker.remoting.codes import SEND_MESSAGE_V2, SUCCESS
from broker.server.timer.timer_message_service import TIMER_TOPIC
from broker.store.results import PutStatus

REGION = b"DefaultRegion"  # BrokerConfig.regionId
TRACE_ON = b"true"  # BrokerConfig.traceOn


def routable(name: str, cfg) -> bool:
    # a compacted topic's sends go down the slow path, which refuses one without a key
    return (bool(cfg.perm & PERM_WRITE) and not is_compaction(cfg.attributes) and cfg.writeQueueNums > 0 and not name.startswith(RETRY_PREFIX)
            and not name.startswith(DLQ_PREFIX) and not not_sendable(name)
            and 0 < len(name.encode()) <= MAX_TOPIC_LEN)


class FastSendPath:
    def __init__(self, store, topics, holds, acl_enabled: bool, cluster: str = "", latency=None, timer=None,
                 broker_name: str = "", fast_failure=None):
        self.store = store
        # broker.server.fast_failure: each read's appends timed; the sends of a busy turn go to Python
        self.fast_failure = fast_failure if fast_failure is not None and fast_failure.enabled else None
        self._read_at = 0.0
        self.timer = timer  # TimerMessageService: told of the timer messages the kernel stored
        self.broker_name = broker_name.encode()
        self.latency = latency  # RpcLatency: a read's immediate replies, a parked batch's wait
        self.cluster = cluster.encode()  # stored as every message's CLUSTER property
        self.topics = topics
        self.holds = holds
        self.acl_enabled = acl_enabled
        self._conns: list = []  # connections read in this loop turn, not settled yet (read_done)
        self._scheduled = False  # end_turn is scheduled for the end of this loop turn
        self._turn_store = None  # the store they were appended to (a role switch may rebind meanwhile)
        self._enabled = None  # the store takes the kernel's appends, asked once per loop turn (before_read)
        self._last_read = 0  # id() of the connection read last outside a turn's batch (read_done)
        self.latency_immediate = 0  # replies answered at once by reads settled before end_turn (DLedger's)
        self.rebind(store)

    def rebind(self, store) -> None:
        """Bind to the store's commit log (again in controller mode, after the store restarted in
        another role with a new log to append to)."""
        self.store = store
        self._enabled = None
        self.pipeline = SendPipeline(store.commit_log.appender, REGION, TRACE_ON, cluster=self.cluster)
        self.pipeline.parked = store.waits_for_durability
        # sends handed as values may be taken at all (LocalBroker.sender's caller asks before
        # reading one): not while every reply waits for durability, nor on a store told of each read
        self.takes_values = not store.waits_for_durability and not store.settles_each_read
        self._store_host = store.commit_log.appender.store_host
        self.sync_routes()

    def sync_routes(self) -> None:
        """Routes for every routable topic, as the topic table says now (a topic created, its
        queues or permission changed)."""
        p = self.pipeline
        p.drop_routes()
        for name, cfg in self.topics.table.topics.items():
            if routable(name, cfg):
                p.set_route(name.encode(), cfg.writeQueueNums)
        timer_cfg = self.topics.table.topics.get(TIMER_TOPIC)
        config = self.store.config
        if self.timer is not None and config.timerWheelEnable and timer_cfg is not None and timer_cfg.writeQueueNums > 0:
            p.set_timer(TIMER_TOPIC.encode(), config.timerPrecisionMs, config.timerMaxDelaySec * 1000, self.broker_name)
        else:
            p.set_timer(None)

    # -- per connection and per read -------------------------------------------------------------
    def conn_state(self, conn) -> SendConn:
        return SendConn(born_host_of(conn))

    def before_read(self, st: SendConn, conn) -> None:
        p = self.pipeline
        # Whether the store takes the kernel's appends is asked once per loop turn (end_turn, or
        # a read settled at once, forgets it): the other connections' reads in the turn raced
        # this one anyway. A store that settles each read (DLedger's: its Appender placed before
        # each) is asked each read.
        enabled = self._enabled
        if enabled is None:
            enabled = not self.acl_enabled and self.store.ready_for_kernel()
            if not self.store.settles_each_read:
                self._enabled = enabled
        ff = self.fast_failure
        if ff is not None:
            if ff.busy:  # the sends that piled up during a stall go to fast_failure's refusal
                enabled = False
            self._read_at = time.perf_counter()
        p.enabled = enabled
        p.track_queues = self.holds.waiting > 0
        if p.parked and st.parked is None:
            st.parked = ParkedReplies(conn, self._store_host, REGION, TRACE_ON)

    def append_values(self, conn, topic: bytes, queue_id: int, body, props: bytes) -> int:
        """A send handed as values by the local gRPC front (LocalBroker.send), for `conn` (its
        SendConn and turn flags, as a connection's, and `controller`, its broker, declining while it
        switches roles): appended by the kernel as a SEND_MESSAGE_V2
        frame of these values would be (SendPipeline.append_values) and settled with the turn's
        reads at its end (end_turn: the store's write position and put count, the held pulls,
        SEND_MESSAGE_V2's latency). Returns its queue offset, or -1 when the kernel would not
        answer that frame at once (not enabled this turn, a busy stall, replies parked for
        durability, a store that settles each read, no route, a refusal to come...): nothing
        appended, and the caller sends it the old way."""
        store = self.store
        if store.settles_each_read or conn.controller._switching:
            return -1
        enabled = self._enabled
        if enabled is None:
            enabled = self._enabled = not self.acl_enabled and store.ready_for_kernel()
        ff = self.fast_failure
        if not enabled or (ff is not None and ff.busy):
            return -1
        p = self.pipeline
        p.enabled = True  # before_read sets it again for every connection's read
        p.track_queues = self.holds.waiting > 0
        qo = p.append_values(conn.send_conn, topic, queue_id, body, props)
        if qo < 0:
            return -1
        if not self._scheduled:
            self._scheduled = True
            self._turn_store = store
            store._loop.call_soon(self.end_turn)
        if not conn.in_turn:
            conn.in_turn = True
            self._conns.append(conn)
        return qo

    def read_done(self, conn) -> None:
        """The end of a read the kernel went through, before its replies are written. Reads of
        several connections in one loop turn are settled at its end, together (end_turn), their
        replies written before that; a read outside such a turn (one connection's, as a lone
        producer's) is settled now, with nothing left to do after its reply. A store that must
        learn of every read's appends before the next read (DLedger's: its Appender is placed
        at the log's end before each) is told now."""
        ff = self.fast_failure
        if ff is not None and (now := time.perf_counter()) - self._read_at > ff.limit:
            ff.stalled(self._read_at, now)
            self.pipeline.enabled = False  # the rest of this read piled up too
        if self._scheduled:
            if self.store.settles_each_read:
                self.latency_immediate += self.settle((conn,))
        else:
            immediate = self.settle((conn,))
            parked = conn.send_conn.parked
            if id(conn) == self._last_read and (parked is None or not len(parked)):
                self._enabled = None  # asked again at the next read: no turn's end forgets it
                if immediate and self.latency is not None:
                    self.latency.record(SEND_MESSAGE_V2, SUCCESS, 0, n=immediate)
                return
            # another connection than the last read's: more may follow in this turn (or replies
            # were parked, to wait for durability together)
            self._last_read = id(conn)
            self.latency_immediate += immediate
            self._scheduled = True
            self._turn_store = self.store
            self.store._loop.call_soon(self.end_turn)
        if not conn.in_turn:
            conn.in_turn = True
            self._conns.append(conn)

    def settle(self, conns) -> int:
        """What the kernel appended for `conns` since their last settle: the store publishes the
        new write position and counts the puts (once for all of them), the held pulls on those
        queues wake, the timer service learns of its messages. Returns how many of those puts
        were answered at once (not parked)."""
        msgs = nbytes = immediate = timers = 0
        touched = None
        for conn in conns:
            st = conn.send_conn
            m, b, _, t = st.take()
            if m:
                msgs += m
                nbytes += b
                parked = st.parked
                if parked is None:
                    immediate += m
                else:
                    n = len(parked)
                    immediate += m - (n - conn.parked_seen)
                    conn.parked_seen = n
            if st.timers:
                timers += st.take_timers()
            if t:
                touched = t if touched is None else touched + t
        if msgs:
            self.store.note_appended(msgs, nbytes)
        if timers:
            self.timer.arrived(timers)
        if touched is not None:
            for q in touched:
                q.touched = 0
                self.holds.notify(q.topic.decode(), q.queue_id, q.last_end)
        return immediate

    def end_turn(self, final: bool = True) -> None:
        """The end of a loop turn (or, `final` False, a read handing a frame to the processors,
        which must find the store told of every append before theirs): every connection read
        in it is settled at once; the replies parked in it (under SYNC_FLUSH / SYNC_MASTER), one
        ParkedReplies per connection, wait for durability as one entry (the highest end among
        them) at the turn's end. 50 producers with one send in flight each cost one settle, one
        waiter and one wake-up of the services per turn, not one per send. (The replies the
        kernel answers at once leave at the end of each read: a lone producer's reply waits for
        nothing.)"""
        if final:
            self._scheduled = False
        self._enabled = None
        conns, self._conns = self._conns, []
        immediate = self.settle(conns) + self.latency_immediate
        self.latency_immediate = 0
        batch = None
        end = parked_n = 0
        for conn in conns:
            st = conn.send_conn
            parked = st.parked
            if parked is not None and len(parked):
                if not final:
                    self._conns.append(conn)  # parked at the turn's end
                    continue
                st.parked = ParkedReplies(parked.conn, self._store_host, REGION, TRACE_ON)
                conn.parked_seen = 0
                if batch is None:
                    batch = []
                batch.append(parked)
                parked_n += len(parked)
                if parked.end > end:
                    end = parked.end
            conn.in_turn = False
        if immediate and self.latency is not None:  # the replies written in this turn: answered within it
            self.latency.record(SEND_MESSAGE_V2, SUCCESS, 0, n=immediate)
        if batch is not None:
            store, self._turn_store = self._turn_store, None
            store.wait_put(end, self._release, (store, batch, parked_n, self.latency, time.perf_counter_ns()))

    @staticmethod
    def _release(arg: tuple, status: PutStatus, why: str | None = None) -> None:
        store, batch, parked_n, latency, parked_at = arg
        remark = None
        if status is not PutStatus.PUT_OK:
            store.put_failed[status] += parked_n
            # as the processors answer a failed put (SendMessageProcessor._after_flush)
            remark = STATUS_REMARKS.get(status)
            if why:
                remark = f"{remark}: {why}" if remark else why
        code = STATUS_CODES[status]
        if latency is not None:
            latency.record(SEND_MESSAGE_V2, code, time.perf_counter_ns() - parked_at, n=parked_n)
        encoded = remark.encode() if remark else None
        for parked in batch:
            transport = parked.conn.transport
            if transport is not None:
                transport.write(parked.render(code, encoded))
