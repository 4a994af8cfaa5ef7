"""DLedgerCommitLog: the commit log of DLedger mode (RocketMQ's DLedgerCommitLog), RocketMQ
records as the bodies of the entries of the group's Raft log.

The record is the stored-message layout of the ordinary commit log, byte for byte; it starts at
the entry's pos + 48 (the DLedger header before it), and that is its PHYSICALOFFSET, the offset
its msgId names and its consume-queue entries point at. RocketMQ patches the field from
DLedger's append hook once the position is known; here the position is asked first
(DLedgerEntryStore.next_pos) and the record encoded with it, then appended in the same
synchronous step, so nothing can come between (and the entry's bodyCrc covers the final bytes).

Queue offsets are assigned here, on the leader, at append time, in the order of the entries:
everything runs on the broker's event loop and `append` does not yield between assigning the
offset and appending the entry. A queue's next offset is taken from its consume queue the first
time the queue is written in a leadership (the role change handler clears the table when this
member becomes leader, after the reput dispatched every committed entry), then counted here. As
RocketMQ does, an offset is used once the entry is in the leader's log, whatever the quorum then
says: an entry that times out may still be committed later. An entry that is truncated away
instead (the leader was deposed) leaves no gap: the next leader counts from its consume queues.

Appends go through one Appender in entry mode (broker.kernels.codec), placed at the log's end
(DLedgerEntryStore.place): it writes the entry's header, the record and the index entry in
place, as the entry store's own append would; the send kernel appends a whole read's sends
through the same Appender (its queue states are the queue table), and `took_in_place` then moves
the log's end and tells the leader's quorum once for them all. An entry the Appender declines
(it opens the next data or index file) is encoded into a scratch buffer and appended by the
entry store, which writes DLedger's blank first; the Appender is placed again after it.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from broker.kernels.codec import Appender, MappedBuffer, record_length
from broker.raft.append_errors import AppendError, LeaderPendingFull, NotLeader
from broker.raft.divided_commit_log import DividedFileQueue
from broker.raft.entry_format import HEADER_SIZE, MIN_BLANK_LEN
from broker.raft.errors import DLedgerBusy
from broker.raft.protocol import ResponseCode
from broker.raft.server import DLedgerServer
from broker.store.config import MessageStoreConfig
from broker.store.errors import MessageIllegal, ServiceUnavailable, StoreError
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.results import PutFuture, PutStatus

log = logging.getLogger("raft")

# DLedgerCommitLog.putMessage's mapping of the append's DLedgerResponseCode (what is not named
# here, TERM_CHANGED among them, is RocketMQ's UNKNOWN_ERROR)
_STATUS = {ResponseCode.NOT_LEADER: PutStatus.SERVICE_NOT_AVAILABLE,
           ResponseCode.INCONSISTENT_LEADER: PutStatus.SERVICE_NOT_AVAILABLE,
           ResponseCode.LEADER_NOT_READY: PutStatus.SERVICE_NOT_AVAILABLE,
           ResponseCode.DISK_FULL: PutStatus.SERVICE_NOT_AVAILABLE,
           ResponseCode.DISK_ERROR: PutStatus.SERVICE_NOT_AVAILABLE,
           # "Do not return flush_slave_timeout to the client, for the ons client will ignore it"
           ResponseCode.WAIT_QUORUM_ACK_TIMEOUT: PutStatus.OS_PAGECACHE_BUSY,
           ResponseCode.LEADER_PENDING_FULL: PutStatus.OS_PAGECACHE_BUSY}


def put_status(err: BaseException | None) -> PutStatus:
    """The put's status for the outcome of its append (None: a majority holds it)."""
    if err is None:
        return PutStatus.PUT_OK
    if isinstance(err, AppendError):
        return _STATUS.get(err.code, PutStatus.UNKNOWN_ERROR)
    return PutStatus.UNKNOWN_ERROR


# what a failed put's remark adds to the failure (a client's history checker reads it as "outcome unknown")
UNACKNOWLEDGED = "not acknowledged: a later leader may still commit the message or drop it"


class EntryPositionMismatch(RuntimeError):
    """A bug: the entry did not land where the record says it is."""


class DLedgerCommitLog:
    def __init__(self, config: MessageStoreConfig, server: DLedgerServer,
                 queue_end: Callable[[bytes, int], int], old: MappedFileQueue | None = None):
        self.config = config
        self.server = server
        # the commit log written before DLedger mode, read below the divided offset (None: none)
        self.divided = DividedFileQueue(old, server.store.data) if old is not None else None
        self.store_host = config.store_host
        self.max_body = config.maxMessageSize
        self._queue_end = queue_end  # (topic, queue id) -> next offset as its consume queue says
        # the leader's writer; its queue states hold the next offsets (-1: not read this leadership)
        self.appender = Appender(self.store_host, self.max_body, {}, 0, entries=True)
        self._placed_truncations = -1
        self._scratch = bytearray(0)
        self._scratch_buf: MappedBuffer | None = None

    # -- what the readers use (the data files hold the records at their physical offsets) --------
    @property
    def queue(self):
        """The files by physical offset, as a MappedFileQueue: the data files (a record's physical
        offset is its place in them), below the divided offset the old commit log's segments
        (DividedFileQueue)."""
        return self.divided if self.divided is not None else self.server.store.data

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def committed_pos(self) -> int:
        """Where the committed entries end (the consumers' end of the log: RocketMQ's getMaxOffset);
        before any, where the DLedger log starts (the old log's end, if there is one)."""
        pos = self.server.store.committed_pos
        if pos >= 0:
            return pos
        return self.divided.divided if self.divided is not None else self.min_offset

    @property
    def begin_pos(self) -> int:
        """Where the reput starts: the old commit log's first record, else the first entry still
        on disk."""
        if self.divided is not None:
            return self.divided.min_offset
        st = self.server.store
        if st.ledger_begin_index < 0:
            return st.write_pos
        return st.position(st.ledger_begin_index)[0]

    def close(self) -> None:
        """The old segments' maps (the data files are the entry store's, closed with it)."""
        if self.divided is not None:
            self.divided.close()

    # -- the queue table -------------------------------------------------------------------------
    def note_wrote(self, wrote: int) -> None:
        """The store published a new position (CommitLog's hook for its warm-ahead thread). The
        entry files are DLedger's, written through its own maps: not warmed ahead (later work)."""

    def reset_queue_table(self) -> None:
        """A new leadership: next offsets are read again from the consume queues."""
        self.appender.forget_offsets()

    def next_offset(self, topic: bytes, queue_id: int) -> int:
        q = self.appender.queue(topic, queue_id)
        if q.next_offset < 0:
            q.next_offset = self._queue_end(topic, queue_id)
        return q.next_offset

    # -- the Appender at the log's end -----------------------------------------------------------
    def place(self) -> None:
        """Put the Appender at the log's end in the current term, unless it is there already
        (nothing else appended, truncated or changed term since)."""
        app = self.appender
        st = self.server.store
        term = self.server.state.term
        if (app.segment_end < 0 or app.index_end < 0 or app.wrote != st.write_pos or app.term != term
                or app.entry_index != st.ledger_end_index + 1 or self._placed_truncations != st.truncations):
            st.place(app, term)
            self._placed_truncations = st.truncations

    def ready_in_place(self) -> bool:
        """Right before the send kernel runs a read: whether this member may append (it leads in
        its quorum's term, with room for more waits), with the Appender placed at the log's end."""
        server = self.server
        if not server.leading or len(server.quorum.pending) >= server.quorum.max_pending:
            return False
        try:
            self.place()
        except (OSError, StoreError) as e:  # a file not made (a full disk): the processors say why
            log.warning("dledger: the send kernel is off for this read: %s", e)
            return False
        return True

    def took_in_place(self) -> int:
        """After the send kernel appended through the Appender: the log's end follows it and the
        leader's quorum counts the entries. Returns the last entry's index (-1: none appended)."""
        server = self.server
        if server.store.took(self.appender) == 0:
            return -1
        last = server.store.ledger_end_index
        server.appended_in_place(last)
        return last

    # -- appends ---------------------------------------------------------------------------------
    def _scratch_for(self, need: int) -> MappedBuffer:
        if len(self._scratch) < need:
            self._scratch = bytearray(max(need, 2 * len(self._scratch), 4096))
            self._scratch_buf = MappedBuffer(self._scratch, True)
        return self._scratch_buf

    def append(self, topic: bytes, queue_id: int, body, properties: bytes, flag: int, sys_flag: int,
               born_ts: int, born_host: bytes, reconsume_times: int = 0
               ) -> tuple[int, int, int, int, asyncio.Future]:
        """Append one record as the next entry. Returns (physical offset, queue offset, size, store
        timestamp, future): the future gives the PutStatus once the quorum answered. Raises
        ServiceUnavailable when this member does not lead, DLedgerBusy when too many appends wait
        for their quorum, MessageIllegal for a record no entry can hold; nothing is appended then."""
        if len(body) > self.max_body:
            raise MessageIllegal(f"body of {len(body)} bytes exceeds maxMessageSize {self.max_body}")
        size = record_length(len(body), len(topic), len(properties), len(born_host) == 20,
                             len(self.store_host) == 20)
        server = self.server
        store = server.store
        if HEADER_SIZE + size + MIN_BLANK_LEN > store.data.file_size:
            raise MessageIllegal(f"a record of {size} bytes does not fit in a {store.data.file_size}-byte "
                                 f"DLedger data file (mappedFileSizeCommitLog)")
        try:
            server.check_leading()
        except NotLeader as e:
            raise ServiceUnavailable(f"not the DLedger leader: {e}") from None
        except LeaderPendingFull as e:
            raise DLedgerBusy(str(e)) from None
        app = self.appender
        q = app.queue(topic, queue_id)
        qo = self.next_offset(topic, queue_id)
        self.place()
        r = app.append(topic, queue_id, body, properties, flag, sys_flag, born_ts, born_host, reconsume_times)
        if r is not None:
            phys, _, got_size, ts = r
            if got_size != size:
                raise EntryPositionMismatch(f"record of {size} bytes encoded as {r}")
            store.took(app)
            ack = server.appended(store.ledger_end_index, phys - HEADER_SIZE)
        else:
            # the entry opens the next data (or index) file: the entry store writes the blank
            pos = store.next_pos(HEADER_SIZE + size)
            phys = pos + HEADER_SIZE
            buf = self._scratch_for(size + MIN_BLANK_LEN)
            scratch = Appender(self.store_host, self.max_body, {(topic, queue_id): qo}, phys)
            scratch.attach(buf, phys)
            r = scratch.append(topic, queue_id, body, properties, flag, sys_flag, born_ts, born_host,
                               reconsume_times)
            if r is None or r[2] != size:
                raise EntryPositionMismatch(f"record of {size} bytes encoded as {r}")
            ts = r[3]
            _, got, ack = server.begin_append(memoryview(self._scratch)[:size])
            if got != pos:
                raise EntryPositionMismatch(f"entry at {got}, its record says {phys - HEADER_SIZE}")
            q.next_offset = qo + 1
            self.place()
        out = PutFuture(loop=ack.get_loop())

        def done(f: asyncio.Future) -> None:
            err = None if f.cancelled() else f.exception()
            status = PutStatus.UNKNOWN_ERROR if f.cancelled() else put_status(err)
            if err is not None:
                # RocketMQ answers TERM_CHANGED with a bare UNKNOWN_ERROR: say which member stopped
                # leading (or which entry no majority held), and that the outcome is unknown
                out.remark = f"{err}; {UNACKNOWLEDGED}"
            if not out.done():
                out.set_result(status)
        ack.add_done_callback(done)
        return phys, qo, size, ts, out
