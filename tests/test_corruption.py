"""Damaged stores: durable data that does not verify stops the store with an error naming the file
and the offset (nothing is truncated away); a torn tail past the flushed offset is a crash's leftover,
zeroed on disk, and the log continues there."""
from __future__ import annotations

import asyncio
import os
import struct

import pytest

from broker.services.message_store import GetStatus, MessageStore, PutStatus
from broker.store.checkpoint import StoreCheckpoint
from broker.store.config import MessageStoreConfig
from broker.store.errors import CorruptStoreError
from broker.store.message import decode_message

SEG = 1 << 20
TOPIC = "Dmg"
QUEUES = 2
BODY_AT = 88  # v1 record: 84 bytes of fixed header, then bodyLength int32, then the body


def _config(root) -> MessageStoreConfig:
    return MessageStoreConfig(storePathRootDir=str(root), mappedFileSizeCommitLog=SEG,
                              mappedFileSizeConsumeQueue=20 * 2000)


def _body(i: int) -> bytes:
    return (b"msg-%05d-" % i) * (1 + (i * 37) % 220)


def _segment(cfg, phys: int) -> str:
    return os.path.join(cfg.commitlog_dir, "%020d" % (phys - phys % SEG))


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _flip(path: str, pos: int) -> int:
    with open(path, "r+b") as f:
        f.seek(pos)
        old = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([old ^ 0xFF]))
        os.fsync(f.fileno())
    return old


def _make_store(cfg, n: int = 2000):
    """n messages over two queues (~2.4 MiB: three segments), cleanly closed."""
    async def go():
        async with MessageStore(cfg) as s:
            return [await s.put(TOPIC, i % QUEUES, _body(i), {"TAGS": "t%d" % (i % 3)}) for i in range(n)]
    results = asyncio.run(go())
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert not os.path.exists(os.path.join(cfg.storePathRootDir, "abort"))
    assert results[-1].end_offset > 2 * SEG  # the log reaches the third segment
    return results


def _crash_marker(cfg) -> None:
    """Make the next start a crash recovery, as RocketMQ's abort file does."""
    open(os.path.join(cfg.storePathRootDir, "abort"), "wb").close()


def _victim(results):
    """A record in the middle of the last segment (where crash recovery starts scanning), below the
    flushed offset (a clean stop flushed everything)."""
    last_base = results[-1].physical_offset - results[-1].physical_offset % SEG
    in_last = [(i, r) for i, r in enumerate(results) if r.physical_offset >= last_base]
    assert len(in_last) > 10
    return in_last[len(in_last) // 2]


async def _open_expecting_corruption(cfg) -> CorruptStoreError:
    s = MessageStore(cfg)
    with pytest.raises(CorruptStoreError) as ei:
        await s.start()
    # start() cleaned up after itself: the store is usable again once repaired
    assert s.commit_log is None and s.services == {}
    return ei.value


def _assert_all_intact(s: MessageStore, results, extra=()) -> None:
    """Every message of _make_store by offset and by queue, then `extra` (queue id, body) after them."""
    for i, r in enumerate(results):
        m = s.lookup(r.physical_offset)
        assert (m.body, m.queue_offset, m.queue_id) == (_body(i), r.queue_offset, i % QUEUES), i
    for q in range(QUEUES):
        want = [_body(i) for i in range(len(results)) if i % QUEUES == q] + [b for qq, b in extra if qq == q]
        assert s.max_offset(TOPIC, q) == len(want)
        got, off = [], 0
        while off < len(want):
            g = s.get(TOPIC, q, off, max_msgs=512, max_bytes=8 << 20)
            assert g.status is GetStatus.FOUND
            got += [decode_message(v).body for v in g.messages]
            g.release()
            off = g.next_offset
        assert got == want, q


def test_flipped_body_byte_below_flushed_offset_refuses_to_start(tmp_path):
    cfg = _config(tmp_path / "store")
    results = _make_store(cfg)
    i, victim = _victim(results)
    path = _segment(cfg, victim.physical_offset)
    pos = victim.physical_offset % SEG + BODY_AT + len(_body(i)) // 2
    old = _flip(path, pos)
    _crash_marker(cfg)
    before = _read(path)

    async def go():
        err = await _open_expecting_corruption(cfg)
        assert err.path == path and err.offset == victim.physical_offset
        assert path in str(err) and str(victim.physical_offset) in str(err)
        assert "CRC" in err.reason
        # nothing was truncated or zeroed: the damaged record and everything after it are still there
        assert _read(path) == before
        assert os.path.exists(os.path.join(cfg.storePathRootDir, "abort"))
        # repaired, the same crash recovery succeeds and finds every message
        with open(path, "r+b") as f:
            f.seek(pos)
            f.write(bytes([old]))
        async with MessageStore(cfg) as s:
            assert not s.recovery.clean and s.recovery.truncated_at is None
            assert s.recovery.max_offset == results[-1].end_offset
            _assert_all_intact(s, results)

    asyncio.run(go())


def test_flipped_magic_code_refuses_to_start_naming_the_offset(tmp_path):
    cfg = _config(tmp_path / "store")
    results = _make_store(cfg)
    _, victim = _victim(results)
    path = _segment(cfg, victim.physical_offset)
    _flip(path, victim.physical_offset % SEG + 4)
    _crash_marker(cfg)
    before = _read(path)

    async def go():
        err = await _open_expecting_corruption(cfg)
        assert err.path == path and err.offset == victim.physical_offset
        assert path in str(err) and str(victim.physical_offset) in str(err)
        assert "magic" in err.reason
        assert _read(path) == before

    asyncio.run(go())


def test_truncated_segment_refuses_to_start_naming_file_and_sizes(tmp_path):
    cfg = _config(tmp_path / "store")
    results = _make_store(cfg)
    path = _segment(cfg, SEG)  # the middle segment
    short = SEG - 12345
    os.truncate(path, short)

    async def go():
        err = await _open_expecting_corruption(cfg)
        assert err.path == path
        assert path in str(err) and str(short) in str(err) and str(SEG) in str(err)
        assert os.path.getsize(path) == short  # refused, not "repaired"

    asyncio.run(go())
    assert results


@pytest.mark.parametrize("tail", ["partial_record", "garbage"])
@pytest.mark.parametrize("flushed", ["at_tail", "below_tail"])
def test_torn_tail_after_crash_is_zeroed_and_log_continues(tmp_path, tail, flushed):
    cfg = _config(tmp_path / "store")
    results = _make_store(cfg)
    end = results[-1].end_offset
    path = _segment(cfg, end)
    if tail == "partial_record":
        last = results[-1]
        with open(_segment(cfg, last.physical_offset), "rb") as f:
            f.seek(last.physical_offset % SEG)
            record = f.read(last.size)
        junk = record[:BODY_AT + 40]  # a header with valid magic and size, the body cut short
    else:
        junk = b"\x7f\x13" + bytes(range(256)) * 4
    assert struct.unpack_from(">q", junk)[0] != 0
    with open(path, "r+b") as f:
        f.seek(end % SEG)
        f.write(junk)
        os.fsync(f.fileno())
    ckpt = StoreCheckpoint(os.path.join(cfg.storePathRootDir, "checkpoint"))
    try:
        assert ckpt.get("flushedOffset") == end
        # below_tail: durable only up to a record in the previous segment: the scan crosses a segment
        mark = end if flushed == "at_tail" else results[len(results) // 3].physical_offset
        assert flushed == "at_tail" or mark < end - end % SEG
        ckpt.set(flushedOffset=mark)
        ckpt.flush()
    finally:
        ckpt.close()
    _crash_marker(cfg)

    async def go():
        async with MessageStore(cfg) as s:
            rec = s.recovery
            assert not rec.clean
            assert rec.truncated_at == end and rec.max_offset == end
            with open(path, "rb") as f:  # zeroed on disk, not only in our map
                f.seek(end % SEG)
                assert f.read(len(junk) + 64) == bytes(len(junk) + 64)
            _assert_all_intact(s, results)
            r = await s.put(TOPIC, 0, b"after the tail", {"TAGS": "t0"})
            assert r.status is PutStatus.PUT_OK
            assert r.physical_offset == end
            assert r.queue_offset == (len(results) + 1) // 2  # queue 0 held the even-numbered messages
            await s.wait_dispatched(r.end_offset, 10)
            assert s.get(TOPIC, 0, r.queue_offset).queue_offsets == [r.queue_offset]
        async with MessageStore(cfg) as s:
            assert s.recovery.clean and s.recovery.max_offset == r.end_offset
            assert s.lookup(end).body == b"after the tail"
            _assert_all_intact(s, results, [(0, b"after the tail")])

    asyncio.run(go())
