"""The send kernel (broker.kernels.send_path) in a real broker over real sockets: what it appends
is what the processors would have appended and answered, frames it cannot take reach the
processors in order within the same read, a burst rolls across segments, ROCKETMQ-serialized
requests are answered in kind, SYNC_FLUSH replies wait for the flush (and time out as the
processors' do), and held pulls are woken by its sends."""
from __future__ import annotations

import asyncio
import os
import signal
import time

import msgspec

from broker.kernels.header import encode_header
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.store.config import SYNC_FLUSH
from broker.store.offset_table import Slot
from broker.store.results import PutStatus
from tests.helpers.procs import async_wait_until
from tests.test_broker_remoting import Broker, _records


def _v2(topic: str, body: bytes, queue_id: int = 0, opaque: int = 1, props: str = "TAGS\x01T\x02KEYS\x01k",
        serialize_type: int = 0, oneway: bool = False) -> bytes:
    """SEND_MESSAGE_V2 as ali-ons types it (numbers and booleans as JSON ones), framed."""
    ext = {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
           "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false"}
    if serialize_type == 0:
        ext.update(d=4, e=queue_id, f=0, g=int(time.time() * 1000), h=0, j=0, k=False)
        header = msgspec.json.encode({"code": codes.SEND_MESSAGE_V2, "language": "JAVA", "version": 121,
                                      "opaque": opaque, "flag": 2 if oneway else 0, "extFields": ext})
    else:
        header = encode_header(1, codes.SEND_MESSAGE_V2, "JAVA", 395, opaque, 2 if oneway else 0, None, ext)
    return _frame(header, body, serialize_type)


def _request(code: int, ext: dict, opaque: int, body: bytes = b"", serialize_type: int = 0) -> bytes:
    ext = {k: str(v) for k, v in ext.items()}
    return _frame(encode_header(serialize_type, code, "JAVA", 395, opaque, 0, None, ext), body, serialize_type)


def _frame(header: bytes, body: bytes, serialize_type: int) -> bytes:
    return (4 + len(header) + len(body)).to_bytes(4, "big") + ((serialize_type << 24) | len(header)).to_bytes(4, "big") \
        + header + body


async def _burst(port: int, data: bytes, replies: int) -> dict[int, RemotingCommand]:
    """Write every frame in one write (the broker reads them together), read `replies` answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        out = {}
        for _ in range(replies):
            n = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 20), "big")
            rest = await reader.readexactly(n)
            hl = int.from_bytes(rest[:4], "big") & 0xFFFFFF
            r = RemotingCommand.decode(rest[4:4 + hl], rest[4 + hl:], rest[0])
            out[r.opaque] = r
        return out
    finally:
        writer.close()


async def _queue(b: Broker, topic: str, queue_id: int, n: int) -> list:
    store = b.controller.store
    await store.wait_dispatched(store.offsets()["wrote"], 10)
    got = []
    while len(got) < n:
        r = await b.pull(topic, queue_id, len(got), sys_flag=0)
        assert r.code == codes.SUCCESS, (r.code, r.remark)
        got += _records(bytes(r.body))
    return got


def test_the_kernel_stores_and_answers_what_the_processors_do(tmp_path):
    """The first send to a new topic goes to the processors (auto-creation); the topic's route is
    then installed and the next send is the kernel's. Same record but for offsets and store time,
    same reply fields (a 4.9 broker's: msgId, queueId, queueOffset, MSG_REGION, TRACE_ON)."""
    async def go():
        async with Broker(tmp_path) as b:
            pipe = b.controller.fast.pipeline
            slow = (await _burst(b.port, _v2("Same", b"body", 1, opaque=7), 1))[7]
            assert pipe.appended == 0 and b"Same" in pipe.routes()
            fast = (await _burst(b.port, _v2("Same", b"body", 1, opaque=8), 1))[8]
            assert pipe.appended == 1
            for r in (slow, fast):
                assert r.code == codes.SUCCESS and set(r.ext) == {"msgId", "queueId", "queueOffset", "MSG_REGION",
                                                                  "TRACE_ON"}, r.ext
                assert all(isinstance(v, str) for v in r.ext.values())
            assert (slow.ext["queueOffset"], fast.ext["queueOffset"]) == ("0", "1") and fast.ext["queueId"] == "1"
            a, c = await _queue(b, "Same", 1, 2)
            assert [a.msg_id, c.msg_id] == [slow.ext["msgId"], fast.ext["msgId"]]
            for field in ("topic", "queue_id", "body", "properties", "flag", "sys_flag", "store_host",
                          "reconsume_times", "body_crc"):
                assert getattr(a, field) == getattr(c, field), field
            assert a.born_host.split(":")[0] == c.born_host.split(":")[0] == "127.0.0.1"  # two connections
            assert c.queue_offset == 1 and c.physical_offset == a.physical_offset + a.size
    asyncio.run(go())


def test_frames_it_cannot_take_reach_the_processors_in_order_within_one_read(tmp_path):
    """One read: kernel sends, a DELAY send (the schedule topic: processors), a pull (processors),
    a oneway send (stored, not answered), a send to a queue out of range (refused by the
    processors, naming it), more kernel sends. Every request is answered once, queue 0 holds the
    kernel's sends in order at dense offsets, nothing refused was stored."""
    async def go():
        # 1 s: long enough that the delayed one is not back before queue 0 is read, on a loaded machine too
        async with Broker(tmp_path, broker_kw={"messageDelayLevel": " ".join(["1s"] * 18)}) as b:
            await _burst(b.port, _v2("Mix", b"warm-up", 0, opaque=1), 1)  # the route, made by the processors
            data = b"".join([
                _v2("Mix", b"m1", 0, opaque=10), _v2("Mix", b"m2", 0, opaque=11),
                _v2("Mix", b"later", 0, opaque=12, props="DELAY\x012\x02TAGS\x01T"),
                _request(codes.GET_MIN_OFFSET, {"topic": "Mix", "queueId": 0}, 13),
                _v2("Mix", b"m3", 0, opaque=14, oneway=True),
                _v2("Mix", b"bad", 9, opaque=15),
                _v2("Mix", b"m4", 0, opaque=16),
            ])
            appended = b.controller.fast.pipeline.appended
            got = await _burst(b.port, data, 6)
            assert sorted(got) == [10, 11, 12, 13, 15, 16]
            assert all(got[o].code == codes.SUCCESS for o in (10, 11, 12, 13, 16)), {o: got[o].code for o in got}
            assert got[15].code == codes.INVALID_PARAMETER and "queueId[9] is illegal" in got[15].remark
            assert b.controller.fast.pipeline.appended - appended == 4  # m1, m2, m3, m4
            msgs = await _queue(b, "Mix", 0, 5)
            assert [m.body for m in msgs] == [b"warm-up", b"m1", b"m2", b"m3", b"m4"]
            assert [m.queue_offset for m in msgs] == list(range(5))
            await async_wait_until(lambda: b.controller.store.max_offset("Mix", 0) == 5, 10, "nothing more in queue 0")
            # the delayed one comes back to its queue once due, through the schedule topic
            await async_wait_until(lambda: b.controller.store.max_offset("Mix", 0) == 6, 10, "the delayed message")
    asyncio.run(go())


def test_a_burst_rolls_across_segments_at_dense_offsets(tmp_path):
    async def go():
        async with Broker(tmp_path, mappedFileSizeCommitLog=64 * 1024) as b:
            await _burst(b.port, _v2("Roll", b"first", 2, opaque=1), 1)
            bodies = [os.urandom(1000) for _ in range(200)]  # ~230 KiB: four segments
            got = await _burst(b.port, b"".join(_v2("Roll", body, 2, opaque=100 + i) for i, body in enumerate(bodies)), 200)
            assert all(r.code == codes.SUCCESS for r in got.values())
            assert [int(got[100 + i].ext["queueOffset"]) for i in range(200)] == list(range(1, 201))
            msgs = await _queue(b, "Roll", 2, 201)
            assert [m.body for m in msgs[1:]] == bodies
            assert len({m.physical_offset // (64 * 1024) for m in msgs}) >= 4
    asyncio.run(go())


def test_rocketmq_serialized_requests_are_answered_in_kind(tmp_path):
    """A Java client with rocketmq.serialize.type=ROCKETMQ: its sends (the kernel's) and its other
    requests (the processors') are answered in the binary serialization; JSON gets JSON."""
    async def go():
        async with Broker(tmp_path) as b:
            await _burst(b.port, _v2("Bin", b"route", 0, opaque=1), 1)
            data = _v2("Bin", b"binary", 0, opaque=2, serialize_type=1) + \
                _request(codes.GET_MIN_OFFSET, {"topic": "Bin", "queueId": 0}, 3, serialize_type=1) + \
                _v2("Bin", b"json", 0, opaque=4)
            appended = b.controller.fast.pipeline.appended
            reader, writer = await asyncio.open_connection("127.0.0.1", b.port)
            writer.write(data)
            kinds = {}
            for _ in range(3):
                n = int.from_bytes(await reader.readexactly(4), "big")
                rest = await reader.readexactly(n)
                hl = int.from_bytes(rest[:4], "big") & 0xFFFFFF
                r = RemotingCommand.decode(rest[4:4 + hl], rest[4 + hl:], rest[0])
                kinds[r.opaque] = (rest[0], r)
            writer.close()
            assert {o: k for o, (k, _) in kinds.items()} == {2: 1, 3: 1, 4: 0}
            assert b.controller.fast.pipeline.appended - appended == 2  # both sends by the kernel
            assert kinds[2][1].code == codes.SUCCESS and kinds[2][1].ext["queueOffset"] == "1"
            assert kinds[3][1].code == codes.SUCCESS and kinds[3][1].ext["offset"] == "0"
            assert [m.body for m in await _queue(b, "Bin", 0, 3)] == [b"route", b"binary", b"json"]
    asyncio.run(go())


def test_sync_flush_replies_wait_for_the_flush_and_time_out_as_the_processors_do(tmp_path):
    async def go():
        async with Broker(tmp_path, flushDiskType=SYNC_FLUSH, syncFlushTimeout=700) as b:
            store = b.controller.store
            await _burst(b.port, _v2("Sync", b"route", 0, opaque=1), 1)
            got = await _burst(b.port, b"".join(_v2("Sync", b"x%d" % i, 0, opaque=10 + i) for i in range(50)), 50)
            assert all(r.code == codes.SUCCESS for r in got.values())
            assert store.table.load(Slot.FLUSHED) >= store.offsets()["wrote"]
            flush = store.services["flush"].pid
            os.kill(flush, signal.SIGSTOP)  # no flush: the replies must say so, not lie
            try:
                t0 = time.monotonic()
                got = await _burst(b.port, b"".join(_v2("Sync", b"y%d" % i, 0, opaque=100 + i) for i in range(20)), 20)
                waited = time.monotonic() - t0
            finally:
                os.kill(flush, signal.SIGCONT)
            assert {r.code for r in got.values()} == {codes.FLUSH_DISK_TIMEOUT} and waited >= 0.6
            assert store.put_status_counts()[PutStatus.FLUSH_DISK_TIMEOUT] == 20
            assert len(await _queue(b, "Sync", 0, 71)) == 71  # stored all the same
    asyncio.run(go())


def test_held_pulls_are_woken_by_the_kernels_sends(tmp_path):
    async def go():
        async with Broker(tmp_path) as b:
            await _burst(b.port, _v2("Held", b"route", 3, opaque=1), 1)
            await b.controller.store.wait_dispatched(b.controller.store.offsets()["wrote"], 10)
            for round_ in range(2):  # the queue's mark is reset after each wake
                pull = asyncio.ensure_future(b.pull("Held", 3, 1 + round_, suspend_ms=10_000))
                await async_wait_until(lambda: b.controller.holds.held() == 1, 10, "the pull to be held")
                t0 = time.monotonic()
                await _burst(b.port, _v2("Held", b"wake-%d" % round_, 3, opaque=10 + round_), 1)
                r = await asyncio.wait_for(pull, 10)
                assert r.code == codes.SUCCESS and [m.body for m in _records(bytes(r.body))] == [b"wake-%d" % round_]
                assert time.monotonic() - t0 < 5
    asyncio.run(go())


class _SpyPipeline:
    """The kernel's pipeline, each run's part and what it appended recorded."""
    def __init__(self, inner, reads):
        object.__setattr__(self, "inner", inner)
        object.__setattr__(self, "reads", reads)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        setattr(self.inner, name, value)

    def run(self, st, buf, pos, end, part):
        before = self.inner.appended
        r = self.inner.run(st, buf, pos, end, part)
        self.reads[-1].append((part, self.inner.appended - before))
        return r


def _spy_reads(fast) -> list[list[tuple[int, int]]]:
    """Per read of the send kernel (each run of FastSendPath's pipeline after its before_read):
    a list of (the part it was run with, messages it appended)."""
    reads: list[list[tuple[int, int]]] = []
    before_read = fast.before_read

    def spy_before_read(st, conn):
        reads.append([])
        before_read(st, conn)
    fast.before_read = spy_before_read
    fast.pipeline = _SpyPipeline(fast.pipeline, reads)
    return reads


def test_replies_to_a_long_read_leave_in_growing_parts(tmp_path):
    """A burst of 100 sends in one write: the broker's read of them answers the first 16 before
    appending the rest, then parts of 32, 64, ... (connection.REPLY_FIRST), so a pipelining client
    refills while the broker works. Seen from the kernel's side of each read (each run of
    FastSendPath's pipeline after its before_read), with every reply received once."""
    from broker.remoting.connection import REPLY_FIRST

    async def go():
        async with Broker(tmp_path) as b:
            await _burst(b.port, _v2("Parts", b"warm-up", 0, opaque=1), 1)  # the route, made by the processors
            reads = _spy_reads(b.controller.fast)
            data = b"".join(_v2("Parts", b"x" * 200, 0, opaque=100 + i) for i in range(100))
            got = await _burst(b.port, data, 100)
            assert sorted(got) == list(range(100, 200)) and all(r.code == codes.SUCCESS for r in got.values())
            parts = [[n for _, n in p] for p in reads if any(n for _, n in p)]
            assert sum(map(sum, parts)) == 100
            # not vacuous: at least one read held more than the first part
            assert any(sum(p) > REPLY_FIRST for p in parts), parts
            for p in reads:
                assert [part for part, _ in p] == [REPLY_FIRST << i for i in range(len(p))], reads
                assert all(n <= part for part, n in p), reads
    asyncio.run(go())


def test_sync_flush_publishes_a_long_read_at_once(tmp_path):
    """Under SYNC_FLUSH no reply can leave before the flush, so a read is not cut into parts: the
    write position is published once, after its last append. Published part by part, a flush
    service coming back from its last round took the first parts alone and the rest waited for a
    second fdatasync (at 64 in flight, up to half the rounds paid two)."""
    from broker.remoting.connection import REPLY_FIRST

    async def go():
        async with Broker(tmp_path, flushDiskType=SYNC_FLUSH) as b:
            await _burst(b.port, _v2("Whole", b"warm-up", 0, opaque=1), 1)  # the route, made by the processors
            store = b.controller.store
            reads = _spy_reads(b.controller.fast)
            published: list[int] = []
            note_appended = store.note_appended

            def spy_note_appended(msgs, nbytes):
                published.append(msgs)
                note_appended(msgs, nbytes)
            store.note_appended = spy_note_appended
            data = b"".join(_v2("Whole", b"x" * 200, 0, opaque=100 + i) for i in range(100))
            got = await _burst(b.port, data, 100)
            assert sorted(got) == list(range(100, 200)) and all(r.code == codes.SUCCESS for r in got.values())
            assert store.table.load(Slot.FLUSHED) >= store.offsets()["wrote"]
            appended = [sum(n for _, n in p) for p in reads if any(n for _, n in p)]
            assert sum(appended) == 100
            assert max(appended) > REPLY_FIRST, reads  # not vacuous: a read that ASYNC_FLUSH would cut
            assert all([part for part, _ in p] == [0] for p in reads), reads
            assert published == appended, (published, reads)
    asyncio.run(go())
