"""ReceiveMessage's fast answer in local mode (ConsumerActivity.receive_now, GrpcServer.add_fast_stream):
a receive whose route and group the front holds fresh is popped by the broker at once and answered
without a task or the servicer's async generators. Against a name server, a broker and its local
front in this process, driven by grpcio: the fast answer gives what the method's own path gives
(the same messages and fields, handles that ack), it is taken once the route and group are known,
it declines before popping anything (a FIFO group, an unknown broker name), and a pop that waits
(long polling on an empty queue; SYNC_FLUSH's durable checkpoint) is answered in a task as before."""
from __future__ import annotations

import asyncio
import json
import time

import grpc
import pytest

from broker.namesrv.server import NamesrvConfig, NamesrvController
from broker.proxy.local_mode import LocalGrpcFront
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.protocol import service_pb2_grpc as rpc
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.server.broker_config import BrokerConfig
from broker.server.broker_controller import BrokerController
from broker.store.config import MessageStoreConfig
from tests.conftest import free_port

pytestmark = pytest.mark.timeout(120)

TOPIC = "ReceiveNow"
MD = (("x-mq-client-id", "test-receive-now"),)


class _Front:
    """A name server, a broker (its name server's, grpcServerPort) and the broker's local front."""

    def __init__(self, tmp_path, **store):
        self.tmp_path = tmp_path
        self.store = store

    async def __aenter__(self):
        self.ns = NamesrvController(NamesrvConfig(port=0))
        await self.ns.start()
        self.grpc_port = free_port()
        conf = BrokerConfig(namesrvAddr=f"127.0.0.1:{self.ns.port}", grpcServerPort=self.grpc_port)
        self.c = BrokerController(conf, MessageStoreConfig(
            storePathRootDir=str(self.tmp_path / "store"), listenPort=free_port(), brokerIP1="127.0.0.1",
            mappedFileSizeCommitLog=4 << 20, **self.store), host="127.0.0.1")
        await self.c.start()
        self.front = LocalGrpcFront(conf, "127.0.0.1")
        await self.front.start(self.c.server, self.c.addr)
        await self.admin(codes.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "readQueueNums": 2, "writeQueueNums": 2,
                                                         "perm": 6, "topicFilterType": "SINGLE_TAG"})
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        self.stub = rpc.MessagingServiceStub(self.channel)
        consumers = self.front.service.consumers
        self.fast = []  # what each receive_bytes_now answered: "framed", "later" or None (declined)
        real = consumers.receive_bytes_now

        def spy(request, context):
            r = real(request, context)
            self.fast.append(None if r is None else "framed" if isinstance(r, bytes) else "later")
            return r
        consumers.receive_bytes_now = spy  # (the endpoint's fast answer: the request's bytes)
        return self

    async def __aexit__(self, *exc):
        await self.channel.close()
        await self.front.stop()
        await self.c.close()
        await self.ns.close()

    async def admin(self, code: int, ext: dict, body: bytes = b"") -> None:
        conn = await connect("127.0.0.1", self.c.server.port)
        try:
            r = await conn.request(RemotingCommand.request(code, ext, body), 10)
            assert r.code == codes.SUCCESS, r.remark
        finally:
            conn.close()

    async def send(self, n: int, first: int = 0) -> None:
        conn = await connect("127.0.0.1", self.c.server.port)
        try:
            for i in range(first, first + n):
                r = await conn.request(RemotingCommand.request(codes.SEND_MESSAGE_V2, {
                    "a": "pg", "b": TOPIC, "c": "TBW102", "d": 2, "e": i % 2, "f": 0,
                    "g": int(time.time() * 1000), "h": 0, "i": f"UNIQ_KEY\x01k{i}\x02TAGS\x01t{i % 3}\x02KEYS\x01key{i}\x02",
                    "j": 0, "k": False}, b"body %d" % i), 10)
                assert r.code == codes.SUCCESS
        finally:
            conn.close()
        await self.c.store.wait_dispatched(self.c.store.commit_log.wrote, 10)

    async def receive(self, group: str, n: int = 32, poll_s: int = 0, broker: str | None = None) -> list:
        req = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group), batch_size=n,
            message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC),
                                          broker=pb.Broker(name=broker or self.c.config.brokerName)),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
        req.invisible_duration.FromSeconds(30)
        req.long_polling_timeout.FromSeconds(poll_s)
        return [r async for r in self.stub.ReceiveMessage(req, metadata=MD, timeout=30)]

    async def ack(self, group: str, messages: list) -> spb.AckMessageResponse:
        return await self.stub.AckMessage(spb.AckMessageRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=TOPIC),
            entries=[spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                         receipt_handle=m.system_properties.receipt_handle) for m in messages]),
            metadata=MD, timeout=30)


def _messages(responses) -> list:
    return [r.message for r in responses if r.WhichOneof("content") == "message"]


def _comparable(m: pb.Message) -> pb.Message:
    """A received message without what each pop makes its own: its handle, the delivery time."""
    m = pb.Message.FromString(m.SerializeToString())
    m.system_properties.ClearField("receipt_handle")
    m.system_properties.ClearField("delivery_timestamp")
    return m


def test_the_fast_answer_is_the_methods_own_and_its_handles_ack(tmp_path):
    async def go():
        async with _Front(tmp_path) as f:
            await f.send(40)
            fast_got, slow_got = [], []
            # the method's own path for one group: the fast answer declined for it
            real = f.front.service.consumers.receive_bytes_now
            consumers = f.front.service.consumers
            consumers.receive_bytes_now = lambda req, ctx: (
                None if spb.ReceiveMessageRequest.FromString(req).group.name == "Slow" else real(req, ctx))
            while len(fast_got) < 40 or len(slow_got) < 40:
                for group, got in (("Fast", fast_got), ("Slow", slow_got)):
                    responses = await f.receive(group, 16)
                    got.extend(_messages(responses))
                    assert responses[0].status.code == pb.OK or not _messages(responses)
                    if _messages(responses):
                        assert responses[-1].WhichOneof("content") == "delivery_timestamp"
            assert "framed" in f.fast  # the fast answer was taken, once the route and group were known
            key = lambda m: m.system_properties.queue_offset * 2 + m.system_properties.queue_id  # noqa: E731
            assert [_comparable(m) for m in sorted(fast_got, key=key)] == \
                   [_comparable(m) for m in sorted(slow_got, key=key)]
            for group, got in (("Fast", fast_got), ("Slow", slow_got)):
                r = await f.ack(group, got)
                assert r.status.code == pb.OK, r
                assert _messages(await f.receive(group)) == []  # acked: never again
    asyncio.run(go())


def test_it_declines_before_popping_what_it_does_not_answer(tmp_path):
    async def go():
        async with _Front(tmp_path) as f:
            await f.send(4)
            await f.receive("Warm", 1)  # the route and the group cached
            await f.receive("Warm", 1)
            assert f.fast[-1] == "framed"
            n = len(f.fast)
            # a broker name the route does not hold: declined, and the method answers it
            responses = await f.receive("Warm", 4, broker="no-such-broker")
            assert f.fast[n:] == [None] and responses[0].status.code != pb.OK
            # a FIFO group: declined (its pops are orderly), the method pops it in order
            await f.admin(codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                          json.dumps({"groupName": "Fifo", "consumeMessageOrderly": True}).encode())
            got = _messages(await f.receive("Fifo", 4))
            got += _messages(await f.receive("Fifo", 4))
            assert f.fast[n + 1:] and all(a is None for a in f.fast[n + 1:])
            assert got  # served by the method
    asyncio.run(go())


def test_a_pop_that_waits_is_answered_in_a_task(tmp_path):
    async def go():
        async with _Front(tmp_path) as f:
            await f.send(1)
            assert len(_messages(await f.receive("Held", 32))) == 1
            assert len(_messages(await f.receive("Held", 32))) == 0  # route and group known now
            n = len(f.fast)
            # long polling on an empty queue: held in a task, answered by the send that comes
            held = asyncio.ensure_future(f.receive("Held", 32, poll_s=10))
            while len(f.fast) == n:
                await asyncio.sleep(0.01)
            assert f.fast[n] == "later" and not held.done()
            await f.send(1, first=1)
            got = _messages(await asyncio.wait_for(held, 10))
            assert [m.body for m in got] == [b"body 1"]
            assert (await f.ack("Held", got)).status.code == pb.OK
    asyncio.run(go())


def test_sync_flush_answers_once_the_checkpoint_is_durable(tmp_path):
    async def go():
        async with _Front(tmp_path, flushDiskType="SYNC_FLUSH") as f:
            await f.send(3)
            first = _messages(await f.receive("Sync", 1))
            got = _messages(await f.receive("Sync", 32))
            assert f.fast[-1] == "later"  # its checkpoint's revive record waited on the flush
            assert len(got) == 2 and sorted(m.body for m in first + got) == [b"body 0", b"body 1", b"body 2"]
            assert (await f.ack("Sync", first + got)).status.code == pb.OK
    asyncio.run(go())
