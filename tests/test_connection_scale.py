"""What many clients cost the broker's connection layer: the receive buffer of a connection that
sends one small request at a time, and the bookkeeping when its producers' and consumers'
connections close (5,000 clients hanging up at once took the broker 3 s: a megabyte zero-filled
for each EOF, and a scan of every group per closed connection)."""
from __future__ import annotations

import asyncio

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import FIRST_READ, RemotingConnection
from broker.server.client.consumer_manager import ConsumerManager
from broker.server.client.producer_manager import ProducerManager


class _Transport:
    def __init__(self):
        self.written: list[bytes] = []

    def get_extra_info(self, key, default=None):
        return ("127.0.0.1", 40000) if key == "peername" else default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def writelines(self, parts):
        self.written.extend(bytes(p) for p in parts)

    def write(self, data):
        self.written.append(bytes(data))

    def is_closing(self):
        return False

    def close(self):
        pass

    def abort(self):
        pass


def _feed(conn: RemotingConnection, data: bytes) -> None:
    """`data` as the event loop delivers it: into get_buffer's views, as much as each one holds."""
    while data:
        view = conn.get_buffer(len(data))
        n = min(len(view), len(data))
        view[:n] = data[:n]
        conn.buffer_updated(n)
        data = data[n:]


def _connection(handled: list) -> RemotingConnection:
    def handler(cmd, conn):
        handled.append(bytes(cmd.body))
        return cmd.response(codes.SUCCESS)
    conn = RemotingConnection(handler, backpressure=True)
    conn.connection_made(_Transport())
    return conn


def test_a_client_sending_one_small_request_at_a_time_keeps_the_small_buffer_through_its_eof():
    asyncio.run(_small_requests())


async def _small_requests():
    handled: list = []
    conn = _connection(handled)
    for i in range(20):
        _feed(conn, RemotingCommand.request(codes.HEART_BEAT, body=b"x" * 1000 + bytes([i])).encode())
        view = conn.get_buffer(65536)  # the next read: another request, or the peer's EOF
        assert len(conn.buf) == FIRST_READ and len(view) == FIRST_READ
    assert [b[-1] for b in handled] == list(range(20))
    assert len(conn.transport.written) == 20
    assert all(RemotingCommand.decode(w[8:8 + int.from_bytes(w[4:8], "big")], b"").code == codes.SUCCESS
               for w in conn.transport.written)
    conn.connection_lost(None)


def test_a_request_larger_than_the_small_buffer_grows_it_and_arrives_whole():
    asyncio.run(_a_large_request())


async def _a_large_request():
    handled: list = []
    conn = _connection(handled)
    big = bytes(range(256)) * 400  # 100 KiB
    _feed(conn, RemotingCommand.request(codes.HEART_BEAT, body=b"a").encode())
    _feed(conn, RemotingCommand.request(codes.HEART_BEAT, body=big).encode())
    _feed(conn, RemotingCommand.request(codes.HEART_BEAT, body=b"b").encode())
    assert handled == [b"a", big, b"b"]
    assert len(conn.buf) > FIRST_READ
    conn.connection_lost(None)


class _Conn:
    """What the managers see of a connection: its per-connection attributes."""

    def __init__(self):
        self.attrs: dict = {}


def _beat(client_id: str, producer_groups=(), consumer_groups=()) -> dict:
    return {"clientID": client_id, "producerDataSet": [{"groupName": g} for g in producer_groups],
            "consumerDataSet": [{"groupName": g, "subscriptionDataSet": [{"topic": "T", "subString": "*"}]}
                                for g in consumer_groups]}


def test_a_closed_connection_takes_its_own_producers_and_consumers_only():
    producers, consumers = ProducerManager(), ConsumerManager()
    a, b, moved = _Conn(), _Conn(), _Conn()
    for client, conn in (("c1", a), ("c2", b), ("c3", a)):
        producers.heartbeat(_beat(client, ["P1", "P2"]), conn)
        consumers.heartbeat(_beat(client, consumer_groups=["G1", "G2"]), conn)
    # c3 reconnected: its heartbeats now come on another connection, which the old one's close
    # must not undo
    producers.heartbeat(_beat("c3", ["P1"]), moved)
    consumers.heartbeat(_beat("c3", consumer_groups=["G1"]), moved)
    producers.connection_closed(a)
    assert sorted(producers.groups["P1"]) == ["c2", "c3"] and producers.groups["P1"]["c3"][0] is moved
    assert sorted(producers.groups["P2"]) == ["c2"]
    assert sorted(consumers.connection_closed(a)) == ["G1", "G2"]  # both still have members, told to rebalance
    assert consumers.client_ids("G1") == ["c2", "c3"] and consumers.client_ids("G2") == ["c2"]
    assert consumers.connection_closed(a) == []  # closed once: nothing left to do
    producers.connection_closed(b)
    assert consumers.connection_closed(b) == ["G1"]  # G2 lost its last member: gone, nobody to tell
    assert list(producers.groups) == ["P1"] and consumers.client_ids("G2") == []
    producers.connection_closed(moved)
    consumers.connection_closed(moved)
    assert producers.groups == {} and consumers.groups == {}


def test_many_connections_close_in_time_linear_in_their_number():
    producers, consumers = ProducerManager(), ConsumerManager()
    conns = [_Conn() for _ in range(20000)]
    for i, c in enumerate(conns):
        producers.heartbeat(_beat(f"c{i}", ["P"]), c)
        consumers.heartbeat(_beat(f"c{i}", consumer_groups=["G"]), c)
    calls = 0
    real = dict.items

    class CountingDict(dict):  # a scan of a group's members on every close would show here
        def items(self):
            nonlocal calls
            calls += 1
            return real(self)
    producers.groups["P"] = CountingDict(producers.groups["P"])
    consumers.groups["G"].clients = CountingDict(consumers.groups["G"].clients)
    for c in conns:
        producers.connection_closed(c)
        consumers.connection_closed(c)
    assert calls == 0
    assert producers.groups == {} and consumers.groups == {}
