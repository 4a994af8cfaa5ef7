"""MessageStore behaviour through its public API, with its real flush and reput processes."""
from __future__ import annotations

import asyncio
import os
import struct

import pytest

from broker.kernels.codec import java_string_hash
from broker.services.message_store import GetStatus, MessageStore, PutStatus
from broker.store.errors import MessageIllegal, ServiceUnavailable, StoreConfigError
from broker.store.message import decode_message


def run(coro):
    return asyncio.run(coro)


def test_put_get_roundtrip_with_properties(store_config):
    async def go():
        async with MessageStore(store_config()) as s:
            r = await s.put("TopicTest", 2, b"hello", {"TAGS": "TagA", "KEYS": "k1 k2", "custom": "v"})
            assert r.status is PutStatus.PUT_OK and r.queue_offset == 0 and r.physical_offset == 0
            r2 = await s.put("TopicTest", 2, b"world")
            assert r2.queue_offset == 1 and r2.physical_offset == r.end_offset
            await s.wait_dispatched(r2.end_offset, 5)
            g = s.get("TopicTest", 2, 0, 10)
            assert g.status is GetStatus.FOUND and g.next_offset == 2 and g.max_offset == 2
            m = decode_message(g.messages[0])
            assert (m.topic, m.queue_id, m.body, m.tags, m.keys) == ("TopicTest", 2, b"hello", "TagA", "k1 k2")
            assert m.properties["custom"] == "v"
            assert m.msg_id == r.msg_id == "7F00000100002A9F" + "%016X" % 0
            assert s.lookup(r2.physical_offset).body == b"world"
            g.release()
    run(go())


def test_get_statuses_follow_rocketmq(store_config):
    async def go():
        async with MessageStore(store_config()) as s:
            assert s.get("Nope", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
            r = await s.put("T", 0, b"a")
            await s.wait_dispatched(r.end_offset, 5)
            one = s.get("T", 0, 1)
            assert one.status is GetStatus.OFFSET_OVERFLOW_ONE and one.next_offset == 1
            bad = s.get("T", 0, 7)
            assert bad.status is GetStatus.OFFSET_OVERFLOW_BADLY and bad.next_offset == 1
            with pytest.raises(ValueError):
                s.get("T", 0, 0, max_msgs=0)
    run(go())


def test_get_respects_max_bytes_and_tag_filter(store_config):
    async def go():
        async with MessageStore(store_config()) as s:
            for i in range(20):
                await s.put("T", 0, b"x" * 500, {"TAGS": "A" if i % 2 else "B"})
            await s.wait_dispatched(s.offsets()["wrote"], 5)
            g = s.get("T", 0, 0, 32, max_bytes=1500)
            assert len(g.messages) == 2 and g.next_offset == 2  # 2 records of ~600 bytes fit in 1500
            g = s.get("T", 0, 0, 32, max_bytes=10)
            assert len(g.messages) == 1  # the first message is always accepted
            a = s.get("T", 0, 0, 4, tag_hashes={java_string_hash(b"A")})
            assert [decode_message(m).tags for m in a.messages] == ["A"] * 4
            assert a.queue_offsets == [1, 3, 5, 7] and a.next_offset == 8
            none = s.get("T", 0, 0, 4, tag_hashes={java_string_hash(b"C")})
            assert none.status is GetStatus.NO_MATCHED_MESSAGE and none.next_offset == 20
    run(go())


def test_segment_rollover_writes_blank_marker(store_config):
    async def go():
        cfg = store_config()
        async with MessageStore(cfg) as s:
            body = b"y" * 3000
            results = [await s.put("Roll", 1, body) for _ in range(400)]  # ~1.2 MiB: crosses a 1 MiB segment
            await s.wait_dispatched(results[-1].end_offset, 5)
            seg = cfg.mappedFileSizeCommitLog
            last_in_first = [r for r in results if r.end_offset <= seg][-1]
            first_in_second = results[results.index(last_in_first) + 1]
            assert first_in_second.physical_offset == seg
            assert [r.queue_offset for r in results] == list(range(400))
        with open(os.path.join(cfg.commitlog_dir, "%020d" % 0), "rb") as f:
            f.seek(last_in_first.end_offset)
            remaining, magic = struct.unpack(">iI", f.read(8))
        assert magic == 0xCBD43194 and remaining == seg - last_in_first.end_offset
        assert sorted(os.listdir(cfg.commitlog_dir))[:2] == ["%020d" % 0, "%020d" % seg]
    run(go())


def test_limits_are_refused_with_message_illegal(store_config):
    async def go():
        async with MessageStore(store_config(maxMessageSize=1000)) as s:
            with pytest.raises(MessageIllegal, match="maxMessageSize"):
                await s.put("T", 0, b"z" * 1001)
            with pytest.raises(MessageIllegal, match="127"):
                await s.put("t" * 128, 0, b"z")
            with pytest.raises(MessageIllegal, match="properties"):
                await s.put("T", 0, b"z", b"k\x01" + b"v" * 40000)
            assert (await s.put("T", 0, b"z" * 1000)).status is PutStatus.PUT_OK
            assert s.offsets()["wrote"] == (await s.put("T", 0, b"")).physical_offset  # nothing half-written
    run(go())


def test_sync_flush_acknowledges_only_flushed_data(store_config):
    async def go():
        async with MessageStore(store_config(flushDiskType="SYNC_FLUSH")) as s:
            rs = await asyncio.gather(*(s.put("S", i % 4, b"m%d" % i) for i in range(200)))
            assert all(r.status is PutStatus.PUT_OK for r in rs)
            assert s.offsets()["flushed"] >= max(r.end_offset for r in rs)
            br = await s.put_batch("S", 0, [b"b%d" % i for i in range(100)])
            assert br.status is PutStatus.PUT_OK and s.offsets()["flushed"] >= br.end_offset
    run(go())


def test_put_batch_offsets_and_msg_ids(store_config):
    async def go():
        async with MessageStore(store_config()) as s:
            bodies = [b"p" * (i * 37 % 3000) for i in range(1000)]  # crosses segments
            br = await s.put_batch("B", 3, bodies, [b"TAGS\x01t%d" % (i % 3) for i in range(1000)])
            assert br.count == 1000 and br.queue_offset == 0 and len(br.chunks) >= 2
            phys = br.physical_offsets()
            for i in (0, 1, 499, 999):
                m = s.lookup(int(phys[i]))
                assert m.body == bodies[i] and m.queue_offset == i and m.tags == "t%d" % (i % 3)
            assert br.msg_ids()[5] == "7F00000100002A9F%016X" % phys[5]
    run(go())


def test_clean_restart_is_fast_and_continues(store_config):
    async def go():
        cfg = store_config()
        async with MessageStore(cfg) as s:
            for i in range(50):
                await s.put("R", i % 2, b"r%d" % i)
        async with MessageStore(cfg) as s:
            assert s.recovery.clean and s.recovery.scanned_bytes == 0
            r = await s.put("R", 0, b"next")
            assert r.queue_offset == 25
            assert s.max_offset("R", 1) == 25
    run(go())


def test_second_broker_on_same_store_is_refused(store_config):
    async def go():
        cfg = store_config()
        async with MessageStore(cfg):
            with pytest.raises(ServiceUnavailable, match="in use"):
                await MessageStore(cfg).start()
    run(go())


def test_closed_store_refuses_puts(store_config):
    async def go():
        s = MessageStore(store_config())
        await s.start()
        await s.close()
        with pytest.raises(ServiceUnavailable):
            await s.put("T", 0, b"late")
    run(go())


def test_bad_config_names_the_key(tmp_path):
    from broker.conf import load_store_config
    conf = tmp_path / "broker.conf"
    conf.write_text("# comment\nbrokerName = broker-a\nflushDiskType=SYNC_FLUSH\nmappedFileSizeCommitLog=abc\n")
    with pytest.raises(StoreConfigError, match="mappedFileSizeCommitLog"):
        load_store_config(str(conf))
    conf.write_text("flushDiskType=SYNC_FLUSH\nlistenPort : 10999\nmadeUpKey=1\n")
    cfg = load_store_config(str(conf))
    assert cfg.flushDiskType == "SYNC_FLUSH" and cfg.listenPort == 10999
    with pytest.raises(StoreConfigError, match="brokerRole"):
        load_store_config(None, {"brokerRole": "BOSS"})
