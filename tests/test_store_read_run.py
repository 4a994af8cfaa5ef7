"""MessageStore.read_run (the pop's queue read without a GetResult) against get(merge=True), on a
real store: records across consume-queue files and commit-log segments, tag filters, offsets
before, inside and past each queue; read_run's tuple must be get's FOUND answer (views, offsets,
next offset, max offset) and anything else get's own answer, with the same read counters."""
from __future__ import annotations

import asyncio
import random

from broker.services.message_store import MessageStore
from broker.store.results import GetResult, GetStatus
from broker.server.filter.expression_filter import tag_hashes_of
from tests.conftest import small_config

TOPIC = "ReadRun"
QUEUES = 3


def _same(s: MessageStore, queue_id: int, offset: int, max_msgs: int, max_bytes: int, tags) -> str:
    msgs0, bytes0 = s.get_msgs, s.get_bytes
    r = s.read_run(TOPIC, queue_id, offset, max_msgs, max_bytes, tags, None)
    got_counts = (s.get_msgs - msgs0, s.get_bytes - bytes0)
    msgs1, bytes1 = s.get_msgs, s.get_bytes
    g = s.get(TOPIC, queue_id, offset, max_msgs, max_bytes, tags, sql=None, merge=True)
    assert got_counts == (s.get_msgs - msgs1, s.get_bytes - bytes1)
    if type(r) is tuple:
        views, offsets, nxt, hi = r
        assert g.status is GetStatus.FOUND
        assert [bytes(v) for v in views] == [bytes(v) for v in g.messages]
        assert (offsets, nxt, hi) == (g.queue_offsets, g.next_offset, g.max_offset)
        return "tuple"
    assert isinstance(r, GetResult)
    assert (r.status, r.next_offset, r.min_offset, r.max_offset, r.queue_offsets, r.count) == \
        (g.status, g.next_offset, g.min_offset, g.max_offset, g.queue_offsets, g.count)
    assert [bytes(v) for v in r.messages] == [bytes(v) for v in g.messages]
    return r.status.name


def test_read_run_is_gets_answer(tmp_path):
    # 200-entry consume-queue files and 64 KiB segments: reads cross both
    cfg = small_config(tmp_path / "store", mappedFileSizeConsumeQueue=20 * 200, mappedFileSizeCommitLog=64 << 10)
    rnd = random.Random(7)

    async def go():
        async with MessageStore(cfg) as s:
            for i in range(1500):
                await s.put(TOPIC, i % QUEUES, b"b" * rnd.randrange(1, 700), {"TAGS": f"t{i % 4}"})
            await s.wait_dispatched(s.commit_log.wrote)
            seen = set()
            for _ in range(3000):
                q = rnd.randrange(QUEUES + 1)  # (queue 3 does not exist)
                hi = max(s.max_offset(TOPIC, q), 1)
                offset = rnd.choice([0, hi - 1, hi, hi + 5, rnd.randrange(hi), rnd.randrange(hi) // 200 * 200 + 199])
                tags = rnd.choice([None, None, tag_hashes_of("t1"), tag_hashes_of("t9")])
                seen.add(_same(s, q, offset, rnd.choice([1, 7, 32]), rnd.choice([256 * 1024, 2000, 1]), tags))
            # the usual answer as a tuple, the rest as get's statuses
            assert {"tuple", "OFFSET_OVERFLOW_ONE", "OFFSET_OVERFLOW_BADLY", "NO_MATCHED_LOGIC_QUEUE",
                    "NO_MATCHED_MESSAGE"} <= seen, seen
    asyncio.run(go())
