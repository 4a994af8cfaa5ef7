"""PopOffsets (broker/server/pop/pop_offsets.py): a pop's move of its group's offset is read by
pops at once, and reaches the offset table (what followers copy and consumerOffset.json keeps)
only once the put of its checkpoint is kept, in log order. The failover it protects is shown
end to end by tests/test_pop_failover.py (a leader killed inside the window); these are the
cases that test does not reach: a put the store did not keep, a move without a record of its
own, a role change with moves held. Real futures on a real loop and a real ConsumerOffsetTable."""
from __future__ import annotations

import asyncio

from broker.server.pop.pop_offsets import PopOffsets
from broker.store.config_files import ConsumerOffsetTable
from broker.store.results import PutStatus

G, T = "G", "T"


class _Store:
    def __init__(self, tmp_path):
        self.consumer_offsets = ConsumerOffsetTable(str(tmp_path))


def _run(fn):
    async def go():
        await fn()
    asyncio.run(go())


async def _turn():
    await asyncio.sleep(0)  # done callbacks run on the loop's next turn
    await asyncio.sleep(0)


def test_a_move_reaches_the_table_once_its_checkpoint_is_kept(tmp_path):
    store = _Store(tmp_path)
    po = PopOffsets(store)

    async def go():
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        po.advance(G, T, 0, 4, first)
        po.advance(G, T, 0, 9, second)
        assert po.query(G, T, 0) == 9 and store.consumer_offsets.query(G, T, 0) == -1
        first.set_result(PutStatus.PUT_OK)
        await _turn()
        assert store.consumer_offsets.query(G, T, 0) == 4 and po.query(G, T, 0) == 9
        second.set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)  # stored, as a send so answered
        await _turn()
        assert store.consumer_offsets.query(G, T, 0) == 9 == po.query(G, T, 0)
        po.advance(G, T, 0, 12)  # nothing held: a move without a record is published at once
        assert store.consumer_offsets.query(G, T, 0) == 12
    _run(go)


def test_a_move_without_a_record_waits_behind_the_queues_held_moves(tmp_path):
    store = _Store(tmp_path)
    po = PopOffsets(store)

    async def go():
        put = asyncio.get_running_loop().create_future()
        po.advance(G, T, 0, 4, put)
        po.advance(G, T, 0, 7)  # messages 4..6 filtered out: after 0..3 only
        po.advance(G, T, 1, 3)  # another queue, nothing held there: at once
        assert store.consumer_offsets.query(G, T, 0) == -1 and po.query(G, T, 0) == 7
        assert store.consumer_offsets.query(G, T, 1) == 3
        put.set_result(PutStatus.PUT_OK)
        await _turn()
        assert store.consumer_offsets.query(G, T, 0) == 7
    _run(go)


def test_a_put_not_kept_holds_its_move_until_a_later_put_is_kept(tmp_path):
    store = _Store(tmp_path)
    po = PopOffsets(store)

    async def go():
        loop = asyncio.get_running_loop()
        lost, later = loop.create_future(), loop.create_future()
        po.advance(G, T, 0, 4, lost)
        lost.set_result(PutStatus.OS_PAGECACHE_BUSY)  # a DLedger quorum that did not answer in time
        await _turn()
        assert store.consumer_offsets.query(G, T, 0) == -1
        assert po.query(G, T, 0) == 4  # its checkpoint is in flight here: pops do not hand it out again
        po.advance(G, T, 1, 2, later)
        later.set_result(PutStatus.PUT_OK)  # later in the log: it covers the one not answered in time
        await _turn()
        assert store.consumer_offsets.query(G, T, 0) == 4 and store.consumer_offsets.query(G, T, 1) == 2
    _run(go)


def test_reset_publishes_nothing_held(tmp_path):
    store = _Store(tmp_path)
    po = PopOffsets(store)

    async def go():
        put = asyncio.get_running_loop().create_future()
        po.advance(G, T, 0, 4, put)
        po.reset()  # no longer the master: the next one replays the checkpoints it got
        assert po.query(G, T, 0) == -1
        put.set_result(PutStatus.PUT_OK)
        await _turn()
        assert store.consumer_offsets.query(G, T, 0) == -1
    _run(go)
