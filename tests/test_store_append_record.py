"""MessageStore.append_record (the revive log's checkpoint and ack records, without a PutResult)
against append(..., lazy_dispatch=True) on two real stores fed the same records: the same bytes in
the log (but the two timestamps, taken at each write), the same queue offsets, counters and, under
SYNC_FLUSH, futures that give the same final status."""
from __future__ import annotations

import asyncio

import pytest

from broker.services.message_store import MessageStore
from broker.store.results import PutStatus
from tests.conftest import small_config

TOPIC = "rmq_sys_REVIVE_LOG_DefaultCluster"
_BORN_TS, _STORE_TS = slice(40, 48), slice(56, 64)  # the record's bornTimestamp and storeTimestamp


def _masked(raw: bytes) -> bytes:
    b = bytearray(raw)
    b[_BORN_TS] = bytes(8)
    b[_STORE_TS] = bytes(8)
    return bytes(b)


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_append_record_writes_what_append_writes(tmp_path, flush):
    records = [(i % 3, b"x" * (i * 37 % 900), f"TAGS\x01ck\x02UNIQ_KEY\x01u{i}".encode()) for i in range(300)]

    async def go():
        cfg = dict(flushDiskType=flush, mappedFileSizeCommitLog=64 << 10)
        async with MessageStore(small_config(tmp_path / "a", **cfg)) as a, \
                MessageStore(small_config(tmp_path / "b", **cfg)) as b:
            offsets_a, offsets_b, futs_a, futs_b = [], [], [], []
            for q, body, props in records:
                r, fa = a.append(TOPIC, q, body, props, lazy_dispatch=True)
                qo, fb = b.append_record(TOPIC, q, body, props)
                offsets_a.append(r.queue_offset)
                offsets_b.append(qo)
                futs_a.append(fa)
                futs_b.append(fb)
            assert offsets_a == offsets_b
            assert (a.put_msgs, a.put_bytes, a.commit_log.wrote) == (b.put_msgs, b.put_bytes, b.commit_log.wrote)
            assert [f is None for f in futs_a] == [f is None for f in futs_b] == [flush == "ASYNC_FLUSH"] * len(records)
            if flush == "SYNC_FLUSH":
                assert await asyncio.gather(*futs_a) == await asyncio.gather(*futs_b) == [PutStatus.PUT_OK] * len(records)
            await a.wait_dispatched(a.commit_log.wrote)
            await b.wait_dispatched(b.commit_log.wrote)
            for q in range(3):
                n = a.max_offset(TOPIC, q)
                assert n == b.max_offset(TOPIC, q) == sum(1 for r in records if r[0] == q)
                ga = a.get(TOPIC, q, 0, n, 1 << 24)
                gb = b.get(TOPIC, q, 0, n, 1 << 24)
                assert ga.queue_offsets == gb.queue_offsets
                assert [_masked(bytes(v)) for v in ga.messages] == [_masked(bytes(v)) for v in gb.messages]
    asyncio.run(go())
