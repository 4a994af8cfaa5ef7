"""The local front's batch ack handed to the broker as values (LocalBroker.batch_ack ->
AckMessageProcessor.batch_ack_code) and AckMessage read from its bytes (ConsumerActivity.ack_now),
against a broker in this process: the same answer and the same acks as BATCH_ACK_MESSAGE's body
on the wire, the wire's guards (a replaying or switching broker declines to the command), the
latency metric kept; ack_now answers what it takes with the all-acked bytes, declines before
acking what it does not take, and answers a batch not taken whole entry by entry."""
from __future__ import annotations

import asyncio
import time

from bench.grpc_ack_micro import LocalClient
from broker.client import pop as _pop
from broker.proxy.ack_reply import ack_ok_of
from broker.proxy.config import ProxyConfig
from broker.proxy.consumer_activity import ConsumerActivity, _batch_ack_body, _typed_acks
from broker.proxy.local_broker import LocalBroker
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.server.broker_config import BrokerConfig
from broker.server.broker_controller import BrokerController
from broker.store.config import MessageStoreConfig
from tests.conftest import free_port

TOPIC, GROUP = "LocalBatchAck", "LocalBatchAckG"


async def _broker(tmp_path, n: int):
    c = BrokerController(BrokerConfig(), MessageStoreConfig(
        storePathRootDir=str(tmp_path / "store"), listenPort=free_port(), brokerIP1="127.0.0.1",
        mappedFileSizeCommitLog=4 << 20), host="127.0.0.1")
    await c.start()
    conn = await connect("127.0.0.1", c.server.port)
    for i in range(n):
        r = await conn.request(RemotingCommand.request(codes.SEND_MESSAGE_V2, {
            "a": "pg", "b": TOPIC, "c": "TBW102", "d": 1, "e": 0, "f": 0, "g": int(time.time() * 1000), "h": 0,
            "i": f"UNIQ_KEY\x01k{i}\x02", "j": 0, "k": False}, b"m%d" % i), 10)
        assert r.code == codes.SUCCESS
    conn.close()
    await c.store.wait_dispatched(c.store.commit_log.wrote, 10)  # every message in its queue
    addr = f"127.0.0.1:{c.server.port}"
    return c, addr, LocalBroker(addr, c.handle, "127.0.0.1:1")


async def _pop_batch(local: LocalBroker, n: int) -> list:
    r = await _pop.pop(local, local.addr, "broker-a", GROUP, TOPIC, 60_000, n, poll_ms=0)
    assert len(r.messages) == n
    return [f"{_pop.handle_of(m)} {m.commit_log_offset}" for m in r.messages]


def _acks(handles: list[str], extra: list[int] = (), **change) -> dict:
    f = handles[0].split(" ")
    key = (f[4], int(f[6]), int(f[0]), int(f[3]), int(f[1]), int(f[2]))
    key = tuple(change.get(name, v) for name, v in zip(("retry", "q", "so", "rq", "pt", "it"), key))
    return {key: [int(h.split(" ")[7]) for h in handles] + list(extra)}


def _left(c, so: int) -> list[int]:
    """The indexes still in flight of the checkpoint at `so` ([] once released)."""
    for ck in c.pop.revive.inflight.values():
        if ck.start_offset == so:
            return [i for i in range(len(ck.offsets())) if not ck.bitmap >> i & 1]
    return []


def _batch_acks_recorded(c) -> int:
    return sum(sum(row[:-1]) for (req, *_), row in c.rpc_latency.series.items()
               if req == "batch_ack_message")


def test_the_typed_batch_ack_answers_and_acks_as_the_wire(tmp_path):
    async def go():
        c, addr, local = await _broker(tmp_path, 24)
        try:
            wire, typed = await _pop_batch(local, 8), await _pop_batch(local, 8)
            wire_so, typed_so = int(wire[0].split()[0]), int(typed[0].split()[0])
            assert wire_so != typed_so

            async def both(pick, extra_of=lambda so: [], **change):
                w = _acks(pick(wire), extra_of(wire_so), **change)
                t = _acks(pick(typed), extra_of(typed_so), **change)
                res = await local.invoke(addr, RemotingCommand.request(
                    codes.BATCH_ACK_MESSAGE, {}, _batch_ack_body("broker-a", GROUP, TOPIC, w)), 5)
                typed_acks = _typed_acks(GROUP, TOPIC, t)
                before = _batch_acks_recorded(c)
                code = local.batch_ack(typed_acks)
                assert _batch_acks_recorded(c) == before + 1  # rocketmq_rpc_latency's BATCH_ACK_MESSAGE
                assert code == res.code, res.remark
                assert _left(c, typed_so) == _left(c, wire_so)
                return code
            assert await both(lambda h: h[:3]) == codes.SUCCESS
            # one offset in the queue the checkpoint did not pop (the other batch's): the rest acked
            assert await both(lambda h: h[3:4], lambda so: [so + 16]) == codes.NO_MESSAGE
            assert await both(lambda h: h[4:6], pt=1) == codes.NO_MESSAGE  # no such checkpoint
            assert await both(lambda h: h[4:6], q=7) == codes.NO_MESSAGE  # no such queue
            assert _left(c, typed_so) == [4, 5, 6, 7]
            assert await both(lambda h: h[4:]) == codes.SUCCESS
            assert _left(c, typed_so) == [] == _left(c, wire_so)
        finally:
            await c.close()
    asyncio.run(go())


def test_a_broker_not_serving_at_once_declines_to_the_command(tmp_path):
    async def go():
        c, addr, local = await _broker(tmp_path, 4)
        try:
            handles = await _pop_batch(local, 4)
            acks = _typed_acks(GROUP, TOPIC, _acks(handles))
            c.pop.ready.clear()  # a new master replaying its revive log
            assert local.batch_ack(acks) is None
            c.pop.ready.set()
            c._switching = True  # controller mode: the store restarting in its new role
            assert local.batch_ack(acks) is None
            c._switching = False
            assert LocalBroker(addr, lambda cmd, conn: None, "p").batch_ack(acks) is None  # not a broker's handler
            assert local.batch_ack(acks) == codes.SUCCESS
        finally:
            await c.close()
    asyncio.run(go())


def test_ack_now_takes_a_consumers_acks_and_declines_the_rest_before_acking(tmp_path):
    async def go():
        c, addr, local = await _broker(tmp_path, 40)
        try:
            act = ConsumerActivity(LocalClient(local), ProxyConfig())
            act.local = local

            def request(handles: list[str]) -> bytes:
                return spb.AckMessageRequest(group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC), entries=[
                    spb.AckMessageEntry(message_id=f"m{i}", receipt_handle=h)
                    for i, h in enumerate(handles)]).SerializeToString()
            handles = await _pop_batch(local, 16)
            so = int(handles[0].split()[0])
            # every entry acked at once: the response's bytes themselves (add_fast_unary's answer)
            assert act.ack_now(request(handles[:8]), None) == ack_ok_of([f"m{i}" for i in range(8)], handles[:8])
            assert _left(c, so) == list(range(8, 16))
            # one entry (a 5.x client's ack(message)): taken too, a batch of one
            assert act.ack_now(request(handles[15:16]), None) == ack_ok_of(["m0"], handles[15:16])
            assert _left(c, so) == list(range(8, 15))
            # declined, nothing acked: a broker elsewhere, a renewed handle, another front's
            other = handles[9].replace("broker-a", "broker-b")
            assert act.ack_now(request([handles[8], other]), None) is None
            act.renewals.add("client", GROUP, TOPIC, handles[10], 60_000)
            assert act.ack_now(request(handles[8:11]), None) is None
            act.renewals.handles.clear()
            assert act.ack_now(request([handles[8], handles[9].rsplit(" ", 1)[0]]), None) is None
            assert _left(c, so) == list(range(8, 15))
            # a batch not taken whole: each entry acked alone, each its own status
            stale = handles[0]  # acked above, its checkpoint still out: acked again, OK
            unpopped = " ".join([*handles[8].split()[:7], str(so + 30), "1"])
            task, respond = act.ack_now(request([handles[8], unpopped, handles[9], stale]), None)
            await task
            r = respond(task)
            assert [e.status.code for e in r.entries] == [pb.Code.OK, pb.Code.INVALID_RECEIPT_HANDLE, pb.Code.OK,
                                                          pb.Code.OK], r
            assert r.status.code == pb.Code.MULTIPLE_RESULTS
            assert _left(c, so) == list(range(10, 15))
        finally:
            act.renewals.close()
            await c.close()
    asyncio.run(go())
