"""The broker's own gRPC front (grpcServerPort: local mode) pops and batch-acks by a call into the
broker's handler (broker.proxy.local_broker), not over its in-process connection: through a real
`broker serve`, a receive gets every message with a handle that acks it, an AckMessage of a batch
is answered per entry (a stale, a bad and a forged handle each as the broker answers it alone),
and what was acked is never received again. LocalBroker's own contract (the wire's string header
values and one bytes body, a handler's failure as SYSTEM_ERROR, a deadline) is held in-process."""
from __future__ import annotations

import asyncio
import json
import subprocess

import grpc
import pytest

from bench.processes import free_port
from broker.client.errors import BrokerUnreachable
from broker.proxy.local_broker import LocalBroker
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.protocol import service_pb2_grpc as rpc
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from tests.helpers.procs import REPO
from tests.helpers.real_clients import Cluster

pytestmark = pytest.mark.timeout(180)

TOPIC, STORED = "GrpcLocalConsume", 40
MD = (("x-mq-client-id", "test-local-consume"),)


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    port = free_port()
    with Cluster(tmp_path_factory.mktemp("cluster"), f"grpcServerPort={port}\n") as cluster:
        cluster.procs[1].wait_lines(lambda ls: any("grpc proxy listening" in line for line in ls), 60,
                                    "the broker's front to listen")
        cluster.create_topic(TOPIC, queues=1)
        r = subprocess.run([str(REPO / "build" / "loadgen"), "send", "--addr", cluster.addr, "--topic", TOPIC,
                            "--queues", "1", "--count", str(STORED), "--warmup", "0", "--in-flight", "4"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and json.loads(r.stdout)["msgs"] == STORED, r.stdout + r.stderr
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        try:
            yield rpc.MessagingServiceStub(channel)
        finally:
            channel.close()


def _receive(stub, group: str, n: int = 32) -> list[pb.Message]:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=n,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), broker=pb.Broker(name="broker-a")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    req.invisible_duration.FromSeconds(30)
    req.long_polling_timeout.FromSeconds(1)
    return [r.message for r in stub.ReceiveMessage(req, metadata=MD, timeout=30) if r.WhichOneof("content") == "message"]


def _ack(stub, group: str, handles: list[str]) -> spb.AckMessageResponse:
    return stub.AckMessage(spb.AckMessageRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=TOPIC),
        entries=[spb.AckMessageEntry(message_id=f"m{i}", receipt_handle=h) for i, h in enumerate(handles)]),
        metadata=MD, timeout=30)


def test_received_batches_ack_per_entry_and_acked_messages_never_come_back(stub):
    group = "GrpcLocalConsumeG"
    got = _receive(stub, group, 16)
    assert len(got) == 16
    handles = [m.system_properties.receipt_handle for m in got]
    fields = handles[0].split(" ")
    assert len(fields) == 9 and fields[5] == "broker-a"
    # forged: a queue offset before its checkpoint's (no checkpoint holds it); bad: not a handle
    forged = " ".join([str(int(fields[0]) + 1), *fields[1:7], fields[0], fields[8]])
    # in the queue but not popped under this checkpoint: the broker acks the batch's others and
    # names it; acked alone it is refused, the others answer OK (acked already by the batch)
    unpopped = " ".join([*fields[:7], str(STORED - 1), fields[8]])
    r = _ack(stub, group, [handles[0], unpopped, handles[1]])
    assert [e.status.code for e in r.entries] == [pb.Code.OK, pb.Code.INVALID_RECEIPT_HANDLE, pb.Code.OK], r
    r = _ack(stub, group, [*handles[:8], "not a handle", forged])
    assert [e.status.code for e in r.entries] == [pb.Code.OK] * 8 + [pb.Code.INVALID_RECEIPT_HANDLE] * 2, r
    assert r.status.code == pb.Code.MULTIPLE_RESULTS
    r = _ack(stub, group, handles[8:])  # the rest, one batch: the answer encoded whole
    assert r.status.code == pb.Code.OK and [e.receipt_handle for e in r.entries] == handles[8:]
    r = _ack(stub, group, handles[3:5])  # acked already, its checkpoint done: each refused as stale
    assert [e.status.code for e in r.entries] == [pb.Code.INVALID_RECEIPT_HANDLE] * 2, r
    rest = []
    while len(rest) < STORED - 16:
        more = _receive(stub, group)
        assert more, f"only {16 + len(rest)} of {STORED} received"
        rest += more
        assert _ack(stub, group, [m.system_properties.receipt_handle for m in more]).status.code == pb.Code.OK
    offsets = sorted(int(m.system_properties.receipt_handle.split(" ")[7]) for m in got + rest)
    assert offsets == list(range(STORED))  # every message once, none of the acked again
    assert _receive(stub, group) == []


def _run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_local_broker_gives_what_the_wire_would():
    seen = []

    def handler(cmd, conn):
        seen.append((dict(cmd.ext), conn.peer))
        if cmd.code == codes.POP_MESSAGE:
            res = cmd.response(codes.SUCCESS, {"popTime": 5, "order": True}, [memoryview(b"ab"), b"cd"])
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(res)
            return fut  # an answer that waits (a checkpoint's durability)
        if cmd.code == codes.ACK_MESSAGE:
            raise RuntimeError("a bug")
        return None  # a request never answered

    local = LocalBroker("127.0.0.1:1", handler, "127.0.0.1:2")
    r = _run(local.invoke("127.0.0.1:1", RemotingCommand.request(codes.POP_MESSAGE, {"queueId": -1, "order": False,
                                                                                      "topic": "T"}), 5))
    assert seen[-1] == ({"queueId": "-1", "order": "false", "topic": "T"}, "127.0.0.1:2")
    assert (r.code, r.ext, r.body, r.get_int("popTime")) == (codes.SUCCESS, {"popTime": "5", "order": "true"},
                                                             b"abcd", 5)
    r = _run(local.invoke("127.0.0.1:1", RemotingCommand.request(codes.ACK_MESSAGE, {}), 5))
    assert r.code == codes.SYSTEM_ERROR and "internal error" in r.remark
    with pytest.raises(BrokerUnreachable):
        _run(local.invoke("127.0.0.1:1", RemotingCommand.request(codes.HEART_BEAT, {}), 5))

    async def never(cmd, conn):
        await asyncio.Event().wait()
    with pytest.raises(BrokerUnreachable, match="within 0.05 s"):
        _run(LocalBroker("a", never, "p").invoke("a", RemotingCommand.request(codes.POP_MESSAGE, {}), 0.05))
