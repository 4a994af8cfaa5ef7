"""Producer.send's fast path (SendSlots, client_codec.pyx): the answer to a send whose topic route
is cached and whose broker is connected completes the caller's future in C. Against a scripted
broker on 127.0.0.1 (a real socket, answers chosen per request), the future gets the SendResult
send() always gave, and everything that is no plain success takes the paths it took before: a
failure code fails or is retried with the same UNIQ_KEY, silence times out, a closed connection
is retried on a new one, another queue in the answer is the result's queue."""
from __future__ import annotations

import asyncio
import time
import zlib

import pytest

from broker.client.errors import SendFailed
from broker.client.message import COMPRESSED_FLAG, Message
from broker.client.producer import FLUSH_DISK_TIMEOUT, SEND_OK, Producer
from broker.client.route import MessageQueue, single_broker_route
from broker.remoting import codes
from broker.remoting.command import RemotingCommand

TOPIC = "FastT"


class ScriptedBroker:
    """Reads SEND_MESSAGE_V2 requests and answers each with answer(request, n) (n counts from 1):
    a RemotingCommand, None (silence) or "close" (the connection closed)."""

    def __init__(self, answer):
        self.answer = answer
        self.requests: list[RemotingCommand] = []
        self.connections = 0

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.addr = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _serve(self, reader, writer) -> None:
        self.connections += 1
        buf = b""
        try:
            while data := await reader.read(1 << 16):
                buf += data
                while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                    n = int.from_bytes(buf[:4], "big")
                    frame, buf = buf[4:4 + n], buf[4 + n:]
                    hl = int.from_bytes(frame[:4], "big") & 0xFFFFFF
                    cmd = RemotingCommand.decode(frame[4:4 + hl], frame[4 + hl:], frame[0])
                    if cmd.code != codes.SEND_MESSAGE_V2:
                        if not cmd.is_oneway:
                            writer.write(cmd.response(codes.SUCCESS).encode())
                        continue
                    self.requests.append(cmd)
                    res = self.answer(cmd, len(self.requests))
                    if res == "close":
                        writer.close()
                        return
                    if res is not None:
                        writer.write(res.encode())
        except ConnectionError:
            pass


def stored(cmd: RemotingCommand, code: int = codes.SUCCESS, queue_id: int | None = None, offset: int = 7,
           **ext) -> RemotingCommand:
    """An answer to a send as a broker writes it (queueId the one asked unless given)."""
    return cmd.response(code, {"msgId": "7F00000100002A9F0000000000001234",
                               "queueId": str(cmd.get_int("e") if queue_id is None else queue_id),
                               "queueOffset": str(offset), "MSG_REGION": "DefaultRegion", **ext})


def uniq_key(cmd: RemotingCommand) -> str:
    return dict(p.split("\x01", 1) for p in cmd.get_str("i").split("\x02"))["UNIQ_KEY"]


async def producer_for(broker: ScriptedBroker, retry_times: int = 2) -> Producer:
    """A producer whose route to TOPIC is cached (4 queues on broker-a at the scripted broker) and
    whose connection is open: its sends take the fast path."""
    p = Producer("pg-fast", retry_times=retry_times)
    p.client.routes.routes[TOPIC] = (single_broker_route("broker-a", broker.addr, 4, 4), time.monotonic())
    await p.client.connection(broker.addr)
    return p


def run(coro):
    asyncio.run(asyncio.wait_for(coro, 60))


def test_a_fast_send_completes_with_the_send_result_send_always_gave():
    async def go():
        answers = {1: codes.SUCCESS, 2: codes.FLUSH_DISK_TIMEOUT}
        async with ScriptedBroker(lambda c, n: stored(c, answers.get(n, codes.SUCCESS), offset=40 + n)) as b:
            p = await producer_for(b)
            futs = [p.send(Message(TOPIC, b"m%d" % i, tags="t")) for i in range(3)]
            assert all(isinstance(f, asyncio.Future) for f in futs), "a cached route and an open connection: no coroutine"
            results = await asyncio.gather(*futs)
            assert [r.status for r in results] == [SEND_OK, FLUSH_DISK_TIMEOUT, SEND_OK]
            assert [r.msg_id for r in results] == [uniq_key(c) for c in b.requests]
            assert [r.offset_msg_id for r in results] == ["7F00000100002A9F0000000000001234"] * 3
            assert [r.queue_offset for r in results] == [41, 42, 43]
            assert [r.queue for r in results] == [MessageQueue(TOPIC, "broker-a", c.get_int("e")) for c in b.requests]
            assert len({r.queue.queue_id for r in results}) == 3, "round-robin over the queues"
            assert p.client.conns[b.addr].sends.in_flight == 0
            await p.client.shutdown()
    run(go())


def test_an_answer_naming_another_queue_is_the_results_queue():
    async def go():
        async with ScriptedBroker(lambda c, n: stored(c, queue_id=3 if c.get_int("e") != 3 else 0)) as b:
            p = await producer_for(b)
            r = await p.send(Message(TOPIC, b"x"))
            assert r.queue.queue_id != b.requests[0].get_int("e") and r.status == SEND_OK
            await p.client.shutdown()
    run(go())


def test_an_answer_only_python_reads_completes_the_send_as_well():
    async def go():  # 40 ext fields: more than the kernel reads, handed back as a RemotingCommand
        async with ScriptedBroker(lambda c, n: stored(c, offset=9, **{f"x{i}": "v" for i in range(40)})) as b:
            p = await producer_for(b)
            r = await p.send(Message(TOPIC, b"wide"))
            assert (r.status, r.queue_offset, r.msg_id) == (SEND_OK, 9, uniq_key(b.requests[0]))
            assert r.queue == MessageQueue(TOPIC, "broker-a", b.requests[0].get_int("e"))
            await p.client.shutdown()
    run(go())


def test_a_failure_code_fails_the_send_without_retry_and_a_retryable_one_is_retried_with_its_uniq_key():
    async def go():
        def answer(c, n):
            if c.get_str("b") == TOPIC and n == 1:
                return c.response(codes.MESSAGE_ILLEGAL, remark="illegal")
            if n == 2:
                return c.response(codes.SYSTEM_BUSY, remark="busy")
            return stored(c)
        async with ScriptedBroker(answer) as b:
            p = await producer_for(b)
            with pytest.raises(SendFailed) as e:
                await p.send(Message(TOPIC, b"bad"))
            assert len(b.requests) == 1 and "illegal" in str(e.value)
            # the retry refetches the route: give it the cached one again
            p.client.routes.fetch = _cached_route(b)
            r = await p.send(Message(TOPIC, b"busy once"))
            assert r.status == SEND_OK and len(b.requests) == 3
            assert uniq_key(b.requests[1]) == uniq_key(b.requests[2]) == r.msg_id
            await p.client.shutdown()
    run(go())


def _cached_route(b: ScriptedBroker):
    async def fetch(topic: str):
        return single_broker_route("broker-a", b.addr, 4, 4)
    return fetch


def test_a_send_nobody_answers_times_out_naming_the_broker():
    async def go():
        async with ScriptedBroker(lambda c, n: None) as b:
            p = await producer_for(b, retry_times=0)
            t0 = time.monotonic()
            with pytest.raises(SendFailed) as e:
                await p.send(Message(TOPIC, b"silence"), timeout=0.3)
            assert 0.25 < time.monotonic() - t0 < 5
            assert "no answer" in str(e.value) and b.addr in str(e.value)
            assert p.client.conns[b.addr].sends.in_flight == 0
            await p.client.shutdown()
    run(go())


def test_sends_in_flight_on_a_connection_that_closes_are_retried_on_a_new_one():
    async def go():
        async with ScriptedBroker(lambda c, n: "close" if n == 1 else stored(c)) as b:
            p = await producer_for(b)
            p.client.routes.fetch = _cached_route(b)
            r = await p.send(Message(TOPIC, b"again"))
            assert r.status == SEND_OK and b.connections == 2
            assert uniq_key(b.requests[0]) == uniq_key(b.requests[1]) == r.msg_id
            nxt = p.send(Message(TOPIC, b"next"))  # the fast path again, on the new connection
            assert isinstance(nxt, asyncio.Future) and (await nxt).status == SEND_OK and b.connections == 2
            await p.client.shutdown()
    run(go())


def test_a_cancelled_send_leaves_the_others_answered():
    async def go():
        async with ScriptedBroker(lambda c, n: stored(c, offset=n)) as b:
            p = await producer_for(b)
            futs = [p.send(Message(TOPIC, b"c%d" % i)) for i in range(3)]
            futs[1].cancel()
            assert [r.queue_offset for r in await asyncio.gather(futs[0], futs[2])] == [1, 3]
            assert futs[1].cancelled()
            await p.client.shutdown()
    run(go())


def test_the_producers_settings_changed_after_its_first_sends_hold_for_the_next():
    async def go():  # the fast path keeps group and compress_over per topic: a change must reach it
        async with ScriptedBroker(lambda c, n: stored(c)) as b:
            p = await producer_for(b)
            assert (await p.send(Message(TOPIC, b"x" * 100))).status == SEND_OK
            p.compress_over, p.group = 10, "pg-other"
            assert (await p.send(Message(TOPIC, b"x" * 100))).status == SEND_OK
            first, second = b.requests
            assert (first.get_int("f"), first.get_str("a")) == (0, "pg-fast")
            assert (second.get_int("f"), second.get_str("a")) == (COMPRESSED_FLAG, "pg-other")
            assert zlib.decompress(second.body) == b"x" * 100
            p.compress_over = 4096
            fut = p.send(Message(TOPIC, b"y" * 100))
            assert isinstance(fut, asyncio.Future) and (await fut).status == SEND_OK, "the fast path again"
            assert b.requests[2].get_int("f") == 0 and b.requests[2].get_str("a") == "pg-other"
            await p.client.shutdown()
    run(go())


def test_a_route_the_cache_replaced_is_sent_on_as_the_new_one_says():
    async def go():  # a refetched route (a new cache entry) with fewer queues: the fast path follows it
        async with ScriptedBroker(lambda c, n: stored(c)) as b:
            p = await producer_for(b)
            await asyncio.gather(*(p.send(Message(TOPIC, b"a")) for _ in range(8)))
            assert {c.get_int("e") for c in b.requests} == {0, 1, 2, 3}
            p.client.routes.routes[TOPIC] = (single_broker_route("broker-a", b.addr, 1, 1), time.monotonic())
            futs = [p.send(Message(TOPIC, b"b")) for _ in range(4)]
            assert all(isinstance(f, asyncio.Future) for f in futs)
            assert [r.queue.queue_id for r in await asyncio.gather(*futs)] == [0] * 4
            assert {c.get_int("e") for c in b.requests[8:]} == {0}
            await p.client.shutdown()
    run(go())
