"""The send kernel in DLedger mode: single sends are appended in place as entries of the Raft log
(header, record, index unit, through the commit log's Appender in entry mode), their replies
parked until the quorum commits the read's last entry, and answered with an error, never
SEND_OK, when the leader stops leading before that. A one-member group in this process (it
leads alone: an entry is committed once the leader holds it, or in SYNC_FLUSH mode once it is
written back), real sockets and files."""
from __future__ import annotations

import asyncio
import os
import zlib

from broker.raft.config import DLedgerConfig
from broker.kernels import header as KH
from broker.remoting import codes
from broker.remoting.message_batch import encode_batch_body
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.server.broker_config import BrokerConfig
from broker.server.broker_controller import BrokerController
from broker.server.processor.send_processor import STATUS_CODES
from broker.store.config import MessageStoreConfig
from broker.store.results import PutStatus
from tests.conftest import free_port
from tests.helpers.procs import async_wait_until
from tests.test_broker_remoting import Broker
from tests.test_send_batch import _batch_header
from tests.test_send_path import _burst, _queue, _v2
from tests.twins import dledger_twin as twin

SEGMENT = 1 << 20


class Group:
    """A three-member DLedger group's brokers (n0..n2) in this process, on one loop."""

    def __init__(self, tmp_path, **store_kw):
        peer_ports = [free_port() for _ in range(3)]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(peer_ports))
        self.members = []
        for i in range(3):
            store = MessageStoreConfig(storePathRootDir=str(tmp_path / f"n{i}"), listenPort=free_port(),
                                       brokerIP1="127.0.0.1", mappedFileSizeCommitLog=SEGMENT,
                                       enableDLegerCommitLog=True, dLegerSelfId=f"n{i}", **store_kw)
            dledger = DLedgerConfig(enableDLegerCommitLog=True, dLegerGroup="g", dLegerSelfId=f"n{i}", dLegerPeers=peers,
                                    heartBeatTimeIntervalMs=300, minVoteIntervalMs=50, maxVoteIntervalMs=150)
            self.members.append(BrokerController(BrokerConfig(brokerName="g"), store, host="127.0.0.1",
                                                 dledger=dledger))

    async def __aenter__(self):
        try:
            for c in self.members:
                await c.start()
            await async_wait_until(lambda: any(not c.store.is_slave for c in self.members), 30, "a master")
        except BaseException:
            await self.__aexit__()
            raise
        self.leader = next(c for c in self.members if not c.store.is_slave)
        self.port = self.leader.server.port
        self.root = self.leader.store.root
        self.server = self.leader.store.server
        return self

    async def __aexit__(self, *exc):
        for c in self.members:
            await c.close()

    async def route(self, topic: str) -> None:
        """The topic's first send (the processors create it); the kernel has a route after it."""
        r = (await _burst(self.port, _v2(topic, b"first", 0, opaque=1), 1))[1]
        assert r.code == codes.SUCCESS, (r.code, r.remark)
        assert topic.encode() in self.leader.fast.pipeline.routes()


def test_single_sends_are_entries_appended_in_place_and_answered_once_committed(tmp_path):
    async def go():
        async with Group(tmp_path) as m:
            await m.route("K")
            pipe = m.leader.fast.pipeline
            store = m.server.store
            before, end0 = pipe.appended, store.ledger_end_index
            n = 40
            got = await _burst(m.port, b"".join(_v2("K", b"k%d" % i, i % 2, opaque=10 + i) for i in range(n)), n)
            # every one by the kernel but queue 1's first: a queue's next offset is read from its
            # consume queue at its first send in a leadership, by the processors
            assert pipe.appended - before == n - 1
            assert all(got[10 + i].code == codes.SUCCESS for i in range(n)), {o: r.code for o, r in got.items()}
            assert store.ledger_end_index == end0 + n and store.committed_index == store.ledger_end_index
            # queue offsets continue from the processors' first send, per queue, in entry order
            assert [int(got[10 + i].ext["queueOffset"]) for i in range(0, n, 2)] == list(range(1, n // 2 + 1))
            assert [int(got[10 + i].ext["queueOffset"]) for i in range(1, n, 2)] == list(range(n // 2))
            # each record is the body of its own entry: its physical offset is the entry's pos + 48
            for i in range(n):
                e = store.get(end0 + 1 + i)
                phys = int(got[10 + i].ext["msgId"][16:], 16)
                assert phys == e.pos + 48
                assert int.from_bytes(e.body[28:36], "big") == phys  # the record's PHYSICALOFFSET
            b = Broker.__new__(Broker)  # test_broker_remoting's client, on the leader
            b.controller, b.conn = m.leader, await connect("127.0.0.1", m.port)
            q0 = await _queue(b, "K", 0, n // 2 + 1)
            b.conn.close()
            assert [x.body for x in q0] == [b"first"] + [b"k%d" % i for i in range(0, n, 2)]
            assert [x.msg_id for x in q0[1:]] == [got[10 + i].ext["msgId"] for i in range(0, n, 2)]
            # within one read, a send the kernel hands to the processors (a new topic's first)
            # between two of its own: the entries follow the frames, the kernel's log end with them
            end1 = store.ledger_end_index
            mixed = await _burst(m.port, _v2("K", b"a", 1, opaque=90) + _v2("K2", b"b", 0, opaque=91)
                                 + _v2("K", b"c", 1, opaque=92), 3)
            assert all(mixed[o].code == codes.SUCCESS for o in (90, 91, 92))
            assert store.ledger_end_index == end1 + 3
            assert [int(mixed[o].ext["msgId"][16:], 16) for o in (90, 91, 92)] == \
                [store.get(end1 + i).pos + 48 for i in (1, 2, 3)]
            # the followers hold the same entries byte for byte (the pusher sent the kernel's)
            end = store.ledger_end_index
            followers = [c.store.server.store for c in m.members if c is not m.leader]
            await async_wait_until(lambda: all(f.ledger_end_index == end for f in followers), 10, "followers caught up")
            for f in followers:
                for i in range(end + 1):
                    assert f.entry_header(i) == store.entry_header(i)
                    assert bytes(f.get(i).body) == bytes(store.get(i).body)
        # the files as DLedger lays them out, every entry's body CRC and index unit as written
        walk = twin.walk_data(os.path.join(m.root, f"dledger-{m.server.self_id}", "data"), SEGMENT)
        assert len(walk.entries) >= n + 3
        for e in walk.entries:
            assert e.body_crc == zlib.crc32(e.body) & 0x7FFFFFFF
    asyncio.run(go())


def test_a_batch_is_one_entry_per_message_in_place(tmp_path):
    """SEND_BATCH_MESSAGE through the kernel: each message its own entry (as the processors' append,
    and RocketMQ's DLedgerCommitLog), consecutive queue offsets, one reply naming every record."""
    msgs = [(b"b%d" % i * (i + 1), f"TAGS\x01T{i}\x02KEYS\x01k{i}".encode(), 0) for i in range(6)]

    async def go():
        async with Group(tmp_path) as m:
            await m.route("B")
            pipe = m.leader.fast.pipeline
            store = m.server.store
            before, end0 = pipe.appended, store.ledger_end_index
            header = KH.encode_header(0, codes.SEND_BATCH_MESSAGE, "JAVA", 395, 50, 0, None,
                                      {k: str(v) for k, v in _batch_header("B", 0).items()})
            body = encode_batch_body(msgs)
            frame = (4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + body
            r = (await _burst(m.port, frame, 1))[50]
            assert r.code == codes.SUCCESS, r.remark
            assert pipe.appended - before == len(msgs)  # the kernel's
            assert store.ledger_end_index == end0 + len(msgs) and r.ext["queueOffset"] == "1"
            ids = r.ext["msgId"].split(",")
            for i, (mid, (b, _, _)) in enumerate(zip(ids, msgs)):
                e = store.get(end0 + 1 + i)
                assert int(mid[16:], 16) == e.pos + 48
                assert bytes(e.body).find(b) > 0 and int.from_bytes(e.body[20:28], "big") == 1 + i  # queue offset
    asyncio.run(go())


def test_a_log_end_the_kernel_cannot_take_leaves_the_send_to_the_processors(tmp_path):
    """The entry store cannot place the Appender (a data file not made: a full disk): the kernel
    stays off for the read (the connection lives on), the processors answer with an error, and
    nothing is appended."""
    async def go():
        async with Group(tmp_path) as m:
            await m.route("F")
            store = m.server.store
            pipe = m.leader.fast.pipeline
            before, end0 = pipe.appended, store.ledger_end_index
            real = store.place

            def full_disk(app, term):
                raise OSError(28, "No space left on device")
            store.place = full_disk
            m.leader.store.commit_log.appender.place_entries(0, 0, 0)  # out of step: it must be placed again
            r = (await _burst(m.port, _v2("F", b"f", 0, opaque=60), 1))[60]
            assert r.code == codes.SYSTEM_ERROR, (r.code, r.remark)
            assert pipe.appended == before and store.ledger_end_index == end0
            store.place = real
            r = (await _burst(m.port, _v2("F", b"g", 0, opaque=61), 1))[61]
            assert r.code == codes.SUCCESS and pipe.appended == before + 1
    asyncio.run(go())


def test_a_leader_deposed_before_the_commit_answers_errors_not_send_ok(tmp_path):
    """Both followers stopped: the leader's kernel still appends (it leads until its heartbeats
    fail), nothing is committed, and the leader stepping down fails every parked reply."""
    async def go():
        async with Group(tmp_path) as m:
            await m.route("D")
            s = m.server
            for c in m.members:
                if c is not m.leader:
                    await c.close()  # no majority left to hold the entries
            pipe = m.leader.fast.pipeline
            store = s.store
            before, end0 = pipe.appended, store.ledger_end_index
            n = 8
            reader, writer = await asyncio.open_connection("127.0.0.1", m.port)
            writer.write(b"".join(_v2("D", b"d%d" % i, 0, opaque=20 + i) for i in range(n)))
            await writer.drain()
            await async_wait_until(lambda: store.ledger_end_index == end0 + n, 10, "the kernel's entries in the log")
            assert pipe.appended - before == n and store.committed_index == end0
            s.elector.change_role_to_candidate(s.state.term + 1)
            replies = []
            for _ in range(n):
                size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
                rest = await reader.readexactly(size)
                hl = int.from_bytes(rest[:4], "big") & 0xFFFFFF
                replies.append(RemotingCommand.decode(rest[4:4 + hl], rest[4 + hl:], rest[0]))
            writer.close()
            assert [r.code for r in replies] == [STATUS_CODES[PutStatus.UNKNOWN_ERROR]] * n
            assert sorted(r.opaque for r in replies) == list(range(20, 20 + n))
            # as the processors answer it: the outcome is unknown (a later leader may commit it)
            assert all("may still commit" in r.remark and "term" in r.remark for r in replies), replies[0].remark
    asyncio.run(go())


def test_parked_replies_render_a_remark_in_both_serialize_types():
    """ParkedReplies.render(code, remark): each reply as the processors' response would carry it."""
    from broker.kernels.codec import Appender, MappedBuffer
    from broker.kernels.send_path import ParkedReplies, SendConn, SendPipeline
    host = bytes([127, 0, 0, 1, 0, 0, 0x27, 0x11])
    seg = bytearray(1 << 16)
    app = Appender(host, 4096, {}, 0)
    app.attach(MappedBuffer(seg), 0)
    pipe = SendPipeline(app)
    pipe.enabled = pipe.parked = True
    pipe.set_route(b"R", 1)
    conn = SendConn(host)
    conn.parked = ParkedReplies(None, host, b"DefaultRegion", b"true")
    frames = _v2("R", b"x", 0, opaque=5) + _v2("R", b"y", 0, opaque=6, serialize_type=1)
    pipe.run(conn, frames, 0, len(frames))
    assert len(conn.parked) == 2
    for remark in (None, "term 3 began; not acknowledged \u00e9 \"quoted\"".encode()):
        data = conn.parked.render(STATUS_CODES[PutStatus.UNKNOWN_ERROR], remark)
        got, at = [], 0
        while at < len(data):
            n = int.from_bytes(data[at:at + 4], "big")
            rest = data[at + 4:at + 4 + n]
            hl = int.from_bytes(rest[:4], "big") & 0xFFFFFF
            got.append((rest[0], RemotingCommand.decode(rest[4:4 + hl], rest[4 + hl:], rest[0])))
            at += 4 + n
        assert [(t, r.opaque) for t, r in got] == [(0, 5), (1, 6)]
        for _, r in got:
            assert r.code == STATUS_CODES[PutStatus.UNKNOWN_ERROR] and r.ext["queueId"] == "0"
            assert r.remark == (remark.decode() if remark else None)
