"""What every DLedger-mode test checks after its fault, on real brokers: the messages read back
from a member (every queue, offset 0 to its end), dense queue offsets, the DLedger files decoded
by the independent twin, and the history check (nothing acknowledged lost, nothing stored twice,
nothing stored that was never sent, the same consume queues on every member)."""
from __future__ import annotations

import asyncio
import time
import zlib
from collections import Counter
from typing import Iterable

from broker.client import api
from broker.client.errors import ClientError
from broker.client.pull_consumer import PullConsumer
from broker.client.route import MessageQueue
from broker.remoting.connection import connect
from tests.conftest import wait_for
from tests.helpers.dledger_cluster import GROUP, SEGMENT, DLedgerGroup, consume_queue, data_dir
from tests.helpers.history import wait_dispatched
from tests.twins.decoder import decode_record
from tests.twins.dledger_twin import walk_data

TOPIC = "TDL"
QUEUES = 4


async def pull_all(pc: PullConsumer, addr: str, topic: str = TOPIC) -> dict[int, list]:
    """Every message of every queue from `addr`, from offset 0 to the queue's end, in order, once
    the member dispatched all it committed (see history.wait_dispatched)."""
    host, port = addr.rsplit(":", 1)
    conn = await connect(host, int(port))
    try:
        await wait_dispatched(conn)
    finally:
        conn.close()
    out = {}
    for q in range(QUEUES):
        mq = MessageQueue(topic, GROUP, q)
        msgs, offset = [], 0
        while True:
            r = await api.pull(pc.client, addr, pc.group, mq, offset, 64)
            if r.status != "FOUND":
                assert r.status == "NO_NEW_MSG", (q, offset, r.status)
                break
            msgs += r.messages
            offset = r.next_begin_offset
        out[q] = msgs
    return out


def read_all(g: DLedgerGroup, broker, topic: str = TOPIC) -> dict[int, list]:
    async def main():
        async with PullConsumer("cg", g.namesrv.addr) as pc:
            return await pull_all(pc, f"127.0.0.1:{broker.port}", topic)
    return asyncio.run(main())


def check_dense(by_queue: dict[int, list]) -> None:
    for q, msgs in by_queue.items():
        assert [m.queue_offset for m in msgs] == list(range(len(msgs))), f"queue {q} offsets are not dense"


def check_files(broker, expect_bodies: Counter, topic: str = TOPIC) -> None:
    """The DLedger data files, decoded by the twin: every entry with a body is one RocketMQ record
    whose PHYSICALOFFSET is the entry's pos + 48 and whose body CRC holds; empty bodies are the
    leaders' no-ops; the records' queue offsets agree with the consume queues."""
    walk = walk_data(str(data_dir(broker)), SEGMENT)
    assert walk.entries and [e.index for e in walk.entries] == list(range(len(walk.entries)))
    bodies = Counter()
    noops = 0
    by_queue: dict[int, dict[int, int]] = {}
    for e in walk.entries:
        if not e.body:
            noops += 1
            continue
        rec = decode_record(e.body, 0)
        assert rec["total_size"] == e.body_size
        assert rec["physical_offset"] == e.pos + 48
        assert rec["body_crc"] == zlib.crc32(rec["body"]) & 0x7FFFFFFF
        if rec["topic"] == topic:
            bodies[rec["body"]] += 1
            by_queue.setdefault(rec["queue_id"], {})[rec["queue_offset"]] = rec["physical_offset"]
    assert noops >= 1  # the first leader's no-op, at least
    assert bodies == expect_bodies, f"{broker.name}: the bodies in its entries differ from the leader's"
    for q, offsets in by_queue.items():
        cq = consume_queue(broker, topic, q)
        assert sorted(offsets) == list(range(len(cq))), f"{broker.name}: queue {q} offsets are not dense"
        assert [offsets[i] for i in range(len(cq))] == [int(p) for p in cq["phys"]]


def wait_caught_up(members, leader, timeout: float = 60) -> int:
    """Until every member dispatched all the leader has committed."""
    end = leader.info()["commitLogMaxOffset"]
    wait_for(lambda: all(b.info()["dispatchedOffset"] >= end for b in members), timeout,
             f"every member to dispatch up to {end}")
    return end


def queues_of(broker, topic: str = TOPIC) -> list[list]:
    return [consume_queue(broker, topic, q).tolist() for q in range(QUEUES)]


async def send_direct(addr: str, topic: str = TOPIC, body: bytes = b"x", timeout: float = 10):
    """SEND_MESSAGE_V2 straight to `addr` (not through the route): the broker's own answer;
    ClientError "code <c>: <remark>" for anything but SUCCESS."""
    from broker.remoting import codes
    from broker.remoting.command import RemotingCommand
    from broker.remoting.connection import connect
    host, _, port = addr.rpartition(":")
    conn = await connect(host, int(port))
    try:
        r = await conn.request(RemotingCommand.request(codes.SEND_MESSAGE_V2, send_ext(topic), body), timeout)
    finally:
        conn.close()
    if r.code != codes.SUCCESS:
        raise ClientError(f"code {r.code}: {r.remark}")
    return r


def send_ext(topic: str, queue_id: int = -1) -> dict:
    """A SEND_MESSAGE_V2 header as ali-ons sends it (one-letter keys)."""
    return {"a": "pg", "b": topic, "c": "TBW102", "d": str(QUEUES), "e": str(queue_id), "f": "0",
            "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false"}


def check_history(g: DLedgerGroup, acked: Iterable[bytes], tried: Iterable[bytes], members=None) -> Counter:
    """After the faults: the master's messages hold every acknowledged body exactly once, nothing
    never sent, at dense offsets; every member (`members`, default: the live ones) has dispatched
    all of it, with the same consume queues and files that decode to the same bodies. Returns the
    bodies read back."""
    leader = g.wait_master(TOPIC)
    members = list(members if members is not None else g.alive())
    wait_caught_up(members, leader)
    got = read_all(g, leader)
    check_dense(got)
    seen = Counter(m.body for ms in got.values() for m in ms)
    assert [b for b, c in seen.items() if c > 1] == [], "messages stored twice"
    acked = list(acked)
    assert [a for a in acked if seen[a] != 1] == [], "acknowledged messages lost"
    assert set(seen) <= set(tried), "messages stored that were never sent"
    want = queues_of(leader)
    assert sum(len(q) for q in want) == sum(seen.values())
    for b in members:
        assert queues_of(b) == want, f"{b.name}'s consume queues differ from the master {leader.name}'s"
        check_files(b, seen)
    return seen
