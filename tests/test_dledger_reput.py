"""DLedger mode's write and reput halves in one process, over small data files: records encoded
by DLedgerCommitLog with PHYSICALOFFSET = pos + 48 and leader-assigned queue offsets, entries
crossing data files (the blank closing each), the leaders' empty no-op entries, and the reput
(broker.raft.dledger_reput) dispatching exactly the committed prefix into consume queues that
point at pos + 48 — checked against the independent twin decoders."""
from __future__ import annotations

import asyncio
import random

from broker.raft.append_errors import LeaderPendingFull, NotLeader, TermChanged, WaitQuorumAckTimeout
from broker.raft.dledger_commit_log import DLedgerCommitLog, put_status
from broker.raft.dledger_reput import DLedgerReputService
from broker.raft.entry_store import DLedgerEntryStore
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.offset_table import Slot, create_table
from broker.store.results import PutStatus
from tests.conftest import small_config
from tests.twins.decoder import decode_record
from tests.twins.dledger_twin import walk_data

DATA = 64 * 1024
QUEUES = 3


class _Leader:
    """What DLedgerCommitLog needs of a DLedgerServer: its store and a leader's append whose
    quorum answers at once."""

    def __init__(self, store: DLedgerEntryStore):
        self.store = store
        self.term = 1

    def begin_append(self, body):
        self.check_leading()
        index, pos = self.store.append(self.term, body)
        return index, pos, self.appended(index, pos)

    @property
    def state(self):
        return self  # the member's term is this leader's

    def check_leading(self) -> None:
        pass  # always leads

    def appended(self, index, pos):
        fut = asyncio.get_running_loop().create_future()
        fut.set_result((index, pos))
        return fut


def test_records_are_entry_bodies_and_the_reput_dispatches_the_committed_prefix(tmp_path):
    cfg = small_config(tmp_path / "store", mappedFileSizeCommitLog=DATA, enableDLegerCommitLog=True,
                       dLegerSelfId="n0")
    store = DLedgerEntryStore.open(cfg.storePathRootDir, "n0", data_file_size=DATA, index_file_size=32 * 1024,
                                   warm=False)
    rng = random.Random(7)
    sent = []  # (queue, queue offset, phys, body) in entry order
    marks = []  # the write position after some entries: committed prefixes to dispatch up to

    async def write():
        leader = _Leader(store)
        cl = DLedgerCommitLog(cfg, leader, lambda topic, q: 0)
        for i in range(400):
            if i % 97 == 0:
                leader.term += 1
                store.append(leader.term, b"")  # a new leader's no-op
            q = rng.randrange(QUEUES)
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 900)))
            phys, qo, size, ts, fut = cl.append(b"TR", q, body, b"KEYS\x01k\x02TAGS\x01t", 0, 0, -1,
                                                b"\x7f\0\0\1\0\0\0\1")
            assert await fut is PutStatus.PUT_OK
            sent.append((q, qo, phys, body))
            if i % 50 == 49:
                marks.append(store.write_pos)
    asyncio.run(write())
    store.flush()
    end = store.write_pos
    assert end > 3 * DATA  # the log crosses data files: blanks close them

    # the files, by the twin: every non-empty body is a record at pos + 48 with the offsets given
    walk = walk_data(cfg.dledger_data_dir, DATA)
    assert len(walk.blanks) >= 3
    records = [(e, decode_record(e.body, 0)) for e in walk.entries if e.body]
    assert len(records) == len(sent) and sum(1 for e in walk.entries if not e.body) == 5
    for (e, rec), (q, qo, phys, body) in zip(records, sent):
        assert rec["physical_offset"] == e.pos + 48 == phys
        assert (rec["queue_id"], rec["queue_offset"], rec["body"]) == (q, qo, body)
    for q in range(QUEUES):
        assert [qo for qq, qo, _, _ in sent if qq == q] == list(range(sum(1 for s in sent if s[0] == q)))

    # the reput, up to committed prefixes (positions right after an entry), then to the end
    table = create_table(cfg.storePathRootDir)
    reput = DLedgerReputService(cfg, -1)
    reput.log.load()
    reput.cqs.load()
    dispatched = 0
    for mark in marks + [end]:
        table.store(Slot.WROTE, mark)
        dispatched = reput.reput(dispatched, mark)
        assert dispatched == mark == table.load(Slot.DISPATCHED)
        reput.flush_queues(dispatched)
        cqs = ConsumeQueueStore(cfg.consumequeue_dir, cfg.mappedFileSizeConsumeQueue, writable=False)
        cqs.load()
        for q in range(QUEUES):
            want = [(phys, rec["total_size"]) for (qq, _, phys, _), (_, rec) in zip(sent, records)
                    if qq == q and phys < mark]
            cq = cqs.find("TR", q)
            assert cq is not None
            got = [cq.entry(i) for i in range(len(want) + 1)]
            assert [g[:2] for g in got[:len(want)]] == want
            assert got[len(want)] is None or got[len(want)][1] == 0  # nothing past the committed mark
        cqs.close()
    store.close()
    table.close()


def test_append_errors_map_to_rocketmq_put_statuses():
    assert put_status(None) is PutStatus.PUT_OK
    assert put_status(NotLeader("x")) is PutStatus.SERVICE_NOT_AVAILABLE
    assert put_status(WaitQuorumAckTimeout("x")) is PutStatus.OS_PAGECACHE_BUSY
    assert put_status(LeaderPendingFull("x")) is PutStatus.OS_PAGECACHE_BUSY
    assert put_status(TermChanged("x")) is PutStatus.UNKNOWN_ERROR  # RocketMQ's default for codes it does not name
