"""The local front's SendMessage handed to the broker's send kernel as values (SendMessageActivity
.send_bytes_now: send_request.read_send_props, then _send_local -> FastSendPath.append_values ->
SendPipeline.append_values; LocalBroker.send makes the same call), against
a broker in this process: the same requests sent the old way (the front's producer, a SEND_MESSAGE_V2
frame over the in-process connection, the send kernel) and the typed way store byte-identical records
(minus what differs by when and where: queue id and offset, commit-log offset, born and store
timestamps) and get the same answers; the put is counted, settled and timed as a frame's; what the
kernel would not answer at once (a topic it has no route to, replies waiting for durability, a body
the producer compresses, a route naming another broker) declines and goes the old way."""
from __future__ import annotations

import asyncio
import time

import pytest

from broker.client.route import TopicRoute, _BrokerData, _QueueData
from broker.client.client_instance import MQClientInstance
from broker.proxy.config import ProxyConfig
from broker.proxy.local_broker import LocalBroker
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.send_activity import ProxyProducer, SendMessageActivity
from broker.server.broker_config import BrokerConfig
from broker.server.broker_controller import BrokerController
from broker.store.config import MessageStoreConfig
from tests.conftest import free_port

TOPIC = "LocalSend"
PEER = "127.0.0.1:8081"  # the front's address: the born host of what it stores


class _Context:
    def peer(self):
        return "ipv4:10.1.2.3:45678"


async def _broker(tmp_path, **store):
    c = BrokerController(BrokerConfig(), MessageStoreConfig(
        storePathRootDir=str(tmp_path / "store"), listenPort=free_port(), brokerIP1="127.0.0.1",
        mappedFileSizeCommitLog=4 << 20, **store), host="127.0.0.1")
    await c.start()
    addr = f"127.0.0.1:{c.server.port}"
    client = MQClientInstance(None)
    client.dialers[addr] = lambda ch: c.server.connect_local(PEER, ch, addr)
    for topic in (TOPIC, "NoSuchTopicYet"):
        client.routes.routes[topic] = (TopicRoute(queueDatas=[_QueueData("broker-a", 4, 4)], brokerDatas=[
            _BrokerData("broker-a", "DefaultCluster", {"0": addr})]), time.monotonic())
    producer = ProxyProducer("proxy-producer", client=client)
    act = SendMessageActivity(producer, ProxyConfig())
    return c, addr, act, LocalBroker(addr, c.handle, PEER)


def _request(i: int, body: bytes = None, topic: str = TOPIC) -> bytes:
    m = pb.Message(topic=pb.Resource(name=topic), body=body if body is not None else b"body %d \xff" % i)
    sp = m.system_properties
    sp.message_id = f"01AB{i:028X}"
    sp.body_encoding = pb.IDENTITY
    sp.message_type = pb.NORMAL
    sp.born_host = "10.9.8.7"
    sp.born_timestamp.FromMilliseconds(1_700_000_000_000 + i)
    if i % 2:
        sp.tag = f"tag{i}"
    if i % 3:
        sp.keys.extend([f"k{i}", "k\u00e9"])
    if i % 4:
        m.user_properties["user"] = f"v{i}\u4e2d"
        m.user_properties["a"] = "b"
    return spb.SendMessageRequest(messages=[m]).SerializeToString()


async def _send(act: SendMessageActivity, payload: bytes):
    taken = act.send_bytes_now(payload, _Context())
    if taken is None:
        return await act.send_message(spb.SendMessageRequest.FromString(payload), _Context())
    if type(taken) is bytes:  # the typed answer, known at once
        return spb.SendMessageResponse.FromString(taken)
    fut, respond = taken
    if not fut.done():  # the producer's answer is a future
        await fut
    r = respond(fut)
    return r if type(r) is not bytes else spb.SendMessageResponse.FromString(r)


def _records(c) -> dict:
    """Every record of the commit log by its UNIQ_KEY: (raw bytes masked, queue id, queue offset)."""
    out = {}
    phys, wrote = 0, c.store.commit_log.wrote
    while phys < wrote:
        v = bytes(c.store.record_view(phys))
        size = int.from_bytes(v[:4], "big")
        rec = bytearray(v[:size])
        qid, qo = int.from_bytes(rec[12:16], "big"), int.from_bytes(rec[20:28], "big")
        for at, n in ((12, 4), (20, 8), (28, 8), (40, 8), (56, 8)):  # queue id, offsets, born/store time
            rec[at:at + n] = bytes(n)
        m = c.store.lookup(phys)
        out.setdefault(m.properties["UNIQ_KEY"], []).append((bytes(rec), qid, qo, m))
        phys += size
    return out


def _typed_counter(local: LocalBroker) -> list:
    """The result of every send handed as values (FastSendPath.append_values, the call the front's
    _send_local and LocalBroker.send make)."""
    taken = []
    fast = local.sender()[0]
    append = fast.append_values

    def counted(*a):
        r = append(*a)
        taken.append(r)
        return r
    fast.append_values = counted
    return taken


def test_typed_sends_store_the_records_and_answer_as_the_remoting_hop(tmp_path):
    async def go():
        c, addr, act, local = await _broker(tmp_path)
        try:
            await _send(act, _request(999))  # the topic's first send: its route, the producer's connection
            n = 24
            old = [await _send(act, _request(i)) for i in range(n)]
            act.local = local
            taken = _typed_counter(local)
            puts0 = c.store.put_msgs
            typed = [await _send(act, _request(i)) for i in range(n)]
            assert len(taken) == n and all(t >= 0 for t in taken)  # every one went the typed way
            await asyncio.sleep(0)  # the turn's end (end_turn) settles the typed puts
            recs = _records(c)
            for i in range(n):
                a, b = old[i], typed[i]
                assert a.status.code == b.status.code == pb.OK
                assert len(a.entries) == len(b.entries) == 1
                ea, eb = a.entries[0], b.entries[0]
                assert ea.message_id == eb.message_id == f"01AB{i:028X}"
                assert (ea.transaction_id, ea.recall_handle) == (eb.transaction_id, eb.recall_handle)
                pair = recs[f"01AB{i:028X}"]
                assert len(pair) == 2
                (ra, qa, oa, ma), (rb, qb, ob, mb) = pair
                assert ra == rb, (ma, mb)  # byte for byte, born host, CLUSTER and properties included
                assert ea.offset == oa and eb.offset == ob
                assert 0 <= qb < 4
            typed_queues = [recs[f"01AB{i:028X}"][1][1] for i in range(n)]
            assert sorted(typed_queues.count(q) for q in range(4)) == [n // 4] * 4  # round robin, as the producer's
            if puts0 is not None:
                assert c.store.put_msgs == puts0 + n  # counted as puts, as the frames' are
            # timed as SEND_MESSAGE_V2 answered at once, as the kernel's frames are
            sent = sum(sum(row[:-1]) for (req, *_), row in c.rpc_latency.series.items() if req == "send_message_v2")
            assert sent >= 2 * n
        finally:
            await c.close()
    asyncio.run(go())


def test_what_the_kernel_would_not_answer_at_once_goes_the_old_way(tmp_path):
    async def go():
        c, addr, act, local = await _broker(tmp_path)
        try:
            await _send(act, _request(999))
            act.local = local
            taken = _typed_counter(local)
            # a topic the broker has no route for yet (auto-created by the processors): declined
            r = await _send(act, _request(1, topic="NoSuchTopicYet"))
            assert taken == [-1] and r.status.code == pb.OK  # auto-created by the processors, as the old way does
            # a send declined leaves the rotation as it was; once the topic exists (the old way
            # created it) the next one is taken, on the queue the declined one would have had
            nxt = act._local_queues["NoSuchTopicYet"][3]
            r = await _send(act, _request(3, topic="NoSuchTopicYet"))
            assert taken[-1] >= 0 and r.status.code == pb.OK and act._local_queues["NoSuchTopicYet"][3] == nxt + 1
            # a body the producer compresses: not handed over at all
            taken.clear()
            r = await _send(act, _request(2, body=b"z" * (act.producer.compress_over + 1)))
            assert taken == [] and r.status.code == pb.OK
            # a route naming another broker for the topic: the producer's way
            route = TopicRoute(queueDatas=[_QueueData("broker-a", 4, 4), _QueueData("broker-b", 4, 4)], brokerDatas=[
                _BrokerData("broker-a", "DefaultCluster", {"0": addr}),
                _BrokerData("broker-b", "DefaultCluster", {"0": "127.0.0.1:1"})])
            assert act._send_local(TOPIC, b"x", b"UNIQ_KEY\x01u", "u") is not None
            act.producer.client.routes.routes[TOPIC] = (route, time.monotonic())
            assert act._send_local(TOPIC, b"x", b"UNIQ_KEY\x01u2", "u2") is None
            # a broker switching roles, or with ACL: declined
            act.producer.client.routes.routes[TOPIC] = (TopicRoute(queueDatas=[_QueueData("broker-a", 4, 4)],
                                                                   brokerDatas=[_BrokerData("broker-a", "DefaultCluster",
                                                                                            {"0": addr})]),
                                                        time.monotonic())
            c._switching = True
            assert local.send(TOPIC.encode(), 0, b"x", b"UNIQ_KEY\x01u3") == -1
            c._switching = False
            # replies that would wait for durability (SYNC_FLUSH): declined
            c.fast.pipeline.parked = True
            assert local.send(TOPIC.encode(), 0, b"x", b"UNIQ_KEY\x01u4") == -1
            c.fast.pipeline.parked = False
            # a queue outside the route, DELAY, a timer property, a transaction flag: declined
            assert local.send(TOPIC.encode(), 4, b"x", b"UNIQ_KEY\x01u5") == -1
            assert local.send(TOPIC.encode(), 0, b"x", b"DELAY\x012\x02UNIQ_KEY\x01u6") == -1
            assert local.send(TOPIC.encode(), 0, b"x", b"TIMER_DELAY_SEC\x015\x02UNIQ_KEY\x01u7") == -1
            assert c.fast.pipeline.append_values(local._send_target[1].send_conn, TOPIC.encode(), 0, b"x",
                                                 b"UNIQ_KEY\x01u8", 0, 4) == -1
            assert local.send(TOPIC.encode(), 0, b"x" * (c.store.config.maxMessageSize + 1), b"UNIQ_KEY\x01u9") == -1
            assert local.send(TOPIC.encode(), 0, b"x", b"UNIQ_KEY\x01ok") >= 0
        finally:
            await c.close()
    asyncio.run(go())


def test_a_send_declined_on_the_usual_path_goes_the_producer_s_way_and_keeps_the_rotation(tmp_path):
    """send_bytes_now's in-line case (the topic's queues known for its cached route): a send the
    broker's kernel declines there is answered by the producer, and the round robin moves only for
    the sends taken, as _send_local's."""
    async def go():
        c, addr, act, local = await _broker(tmp_path)
        try:
            await _send(act, _request(999))
            act.local = local
            fast = local.sender()[0]
            append, results, decline = fast.append_values, [], [False]

            def maybe(*a):
                r = -1 if decline[0] else append(*a)
                results.append(r)
                return r
            fast.append_values = maybe
            assert (await _send(act, _request(1))).status.code == pb.OK  # the topic's entry made
            assert results[-1] >= 0
            route = act.producer.client.routes.peek(TOPIC)
            assert act._local_queues[TOPIC][0] is route  # the next send takes the in-line case
            nxt = act._local_queues[TOPIC][3]
            decline[0] = True
            r = await _send(act, _request(2))
            assert results[-1] == -1 and r.status.code == pb.OK  # the producer's answer
            assert r.entries[0].message_id == f"01AB{2:028X}"
            assert act._local_queues[TOPIC][3] == nxt  # not moved by the send declined
            decline[0] = False
            r = await _send(act, _request(3))
            assert results[-1] >= 0 and r.status.code == pb.OK and act._local_queues[TOPIC][3] == nxt + 1
            await asyncio.sleep(0)
            recs = _records(c)
            assert all(len(recs[f"01AB{i:028X}"]) == 1 for i in (1, 2, 3))  # each stored once
        finally:
            await c.close()
    asyncio.run(go())


def test_a_message_naming_no_born_host_is_born_at_its_own_call_s_peer(tmp_path):
    """send_bytes_now parses the peer's host once per peer string: a call from another peer (another
    connection) is born at that peer's host, not the last one's."""
    class Peer:
        def __init__(self, peer):
            self._peer = peer

        def peer(self):
            return self._peer

    def request(i: int) -> bytes:
        m = pb.Message(topic=pb.Resource(name=TOPIC), body=b"b%d" % i)
        m.system_properties.message_id = f"01CD{i:028X}"
        m.system_properties.message_type = pb.NORMAL
        return spb.SendMessageRequest(messages=[m]).SerializeToString()

    async def go():
        c, addr, act, local = await _broker(tmp_path)
        try:
            await _send(act, _request(999))
            act.local = local
            peers = ["ipv4:10.0.0.1:1000", "ipv6:[fd00::2]:2000", "ipv4:10.0.0.1:1000", "ipv4:10.0.0.3:3000", "x", None]
            for i, peer in enumerate(peers):
                answer = act.send_bytes_now(request(i), Peer(peer))
                assert type(answer) is bytes  # the typed way
            await asyncio.sleep(0)
            recs = _records(c)
            born = [recs[f"01CD{i:028X}"][0][3].properties.get("__BORNHOST") for i in range(len(peers))]
            assert born == ["10.0.0.1", "fd00::2", "10.0.0.1", "10.0.0.3", None, None]  # no host: none named
        finally:
            await c.close()
    asyncio.run(go())


@pytest.mark.parametrize("flush", ["SYNC_FLUSH"])
def test_a_sync_flush_broker_answers_typed_sends_the_old_way(tmp_path, flush):
    async def go():
        c, addr, act, local = await _broker(tmp_path, flushDiskType=flush)
        try:
            await _send(act, _request(999))
            act.local = local
            taken = _typed_counter(local)
            r = await _send(act, _request(1))
            assert taken == [] and not local.takes_sends() and r.status.code == pb.OK  # not even prepared
        finally:
            await c.close()
    asyncio.run(go())


def test_a_real_broker_s_front_stores_and_answers_sends_given_as_values(tmp_path):
    """Through `broker serve` with grpcServerPort: SendMessage answered OK with the message's id and
    its queue offset, and the message received back with its body, tag, keys and properties."""
    import grpc

    from broker.proxy.protocol import service_pb2_grpc as rpc
    from tests.helpers.real_clients import Cluster
    port = free_port()
    md = (("x-mq-client-id", "test-local-send"),)
    with Cluster(tmp_path / "cluster", f"grpcServerPort={port}\n") as cluster:
        cluster.procs[1].wait_lines(lambda ls: any("grpc proxy listening" in line for line in ls), 60,
                                    "the broker's front to listen")
        cluster.create_topic(TOPIC, queues=1)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = rpc.MessagingServiceStub(channel)
            offsets = []
            for i in range(6):
                r = stub.SendMessage(spb.SendMessageRequest.FromString(_request(i)), metadata=md, timeout=30)
                assert r.status.code == pb.OK and r.entries[0].message_id == f"01AB{i:028X}"
                offsets.append(r.entries[0].offset)
            assert offsets == sorted(offsets) and len(set(offsets)) == 6  # one queue: consecutive offsets
            req = spb.ReceiveMessageRequest(
                group=pb.Resource(name="LocalSendG"), batch_size=32,
                message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), broker=pb.Broker(name="broker-a")),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
            req.invisible_duration.FromSeconds(30)
            req.long_polling_timeout.FromSeconds(1)
            got = {}
            for _ in range(10):
                for r in stub.ReceiveMessage(req, metadata=md, timeout=30):
                    if r.WhichOneof("content") == "message":
                        got[r.message.system_properties.message_id] = r.message
                if len(got) == 6:
                    break
            assert len(got) == 6
            for i in range(6):
                sent = spb.SendMessageRequest.FromString(_request(i)).messages[0]
                m = got[f"01AB{i:028X}"]
                assert m.body == sent.body and dict(m.user_properties) == dict(sent.user_properties)
                assert m.system_properties.tag == sent.system_properties.tag
                assert list(m.system_properties.keys) == list(sent.system_properties.keys)
                assert m.system_properties.born_host == "10.9.8.7"
