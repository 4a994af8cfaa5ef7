"""The local front's SendMessage in-process, the gRPC endpoint left out: SendMessageActivity.send_bytes_now
of a 1 KiB plain message, `--inflight` calls started in one loop turn then awaited (as h2load's 64
streams arrive in one read), against a BrokerController (ASYNC_FLUSH master) in this process; its
CPU per call: the loop thread's (the front, the in-process connection, the broker's send path), and
the process's (the store's warm-ahead thread too, which touches the log's pages ahead of the
appends; not the store's service processes). `--mode hop`: the front's producer, a SEND_MESSAGE_V2 frame
over the in-process connection to the send kernel (LocalBroker not given); `--mode typed`: the
message handed to the send kernel as values (LocalBroker.send)."""
from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time

from bench.processes import free_port
from broker.client.client_instance import MQClientInstance
from broker.client.route import TopicRoute, _BrokerData, _QueueData
from broker.proxy.config import ProxyConfig
from broker.proxy.local_broker import LocalBroker
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.send_activity import ProxyProducer, SendMessageActivity
from broker.server.broker_config import BrokerConfig
from broker.server.broker_controller import BrokerController
from broker.store.config import MessageStoreConfig

TOPIC, PEER = "GrpcSendMicro", "127.0.0.1:8081"


class _Context:
    @staticmethod
    def peer():
        return "ipv4:127.0.0.1:40000"


def request() -> bytes:
    m = pb.Message(topic=pb.Resource(name=TOPIC), body=b"x" * 1024)
    sp = m.system_properties
    sp.message_id = "01" + "AB" * 15
    sp.body_encoding = pb.IDENTITY
    sp.message_type = pb.NORMAL
    sp.born_host = "127.0.0.1"
    sp.born_timestamp.FromMilliseconds(int(time.time() * 1000))
    sp.tag = "TagA"
    return spb.SendMessageRequest(messages=[m]).SerializeToString()


async def routed_broker(prefix: str, segment: int):
    """A BrokerController (ASYNC_FLUSH master) in this process, its store under a new temporary
    directory (`segment`: the commit log's file size), started; and a client whose route for TOPIC
    names its 4 queues, reached over the in-process connection: (controller, root, client, addr)."""
    root = tempfile.mkdtemp(prefix=prefix)
    c = BrokerController(BrokerConfig(), MessageStoreConfig(
        storePathRootDir=root + "/store", listenPort=free_port(), brokerIP1="127.0.0.1",
        mappedFileSizeCommitLog=segment), host="127.0.0.1")
    await c.start()
    addr = f"127.0.0.1:{c.server.port}"
    client = MQClientInstance(None)
    client.dialers[addr] = lambda ch: c.server.connect_local(PEER, ch, addr)
    client.routes.ttl = 1e9
    client.routes.routes[TOPIC] = (TopicRoute(queueDatas=[_QueueData("broker-a", 4, 4)], brokerDatas=[
        _BrokerData("broker-a", "DefaultCluster", {"0": addr})]), time.monotonic())
    return c, root, client, addr


async def run(calls: int, inflight: int, mode: str) -> None:
    c, root, client, addr = await routed_broker("grpc-send-micro-", 256 << 20)
    try:
        act = SendMessageActivity(ProxyProducer("proxy-producer", client=client), ProxyConfig())
        payload, ctx = request(), _Context()
        fut, respond = act.send_bytes_now(payload, ctx)  # the topic auto-created, the connection made
        await fut
        respond(fut)
        if mode == "typed":
            act.local = LocalBroker(addr, c.handle, PEER)
        cpu, loop_cpu, done = 0.0, 0.0, 0
        t_wall = time.perf_counter()
        while done < calls:
            t0, l0 = time.process_time(), time.thread_time()
            taken = [act.send_bytes_now(payload, ctx) for _ in range(inflight)]
            for one in taken:
                if type(one) is bytes:  # the typed answer, known at once
                    continue
                f, r = one
                if not f.done():
                    await f
                if type(r(f)) is not bytes:
                    raise SystemExit(f"not stored: {r(f)}")
            await asyncio.sleep(0)  # the turn ends (as the endpoint's read does): the typed sends settle
            cpu += time.process_time() - t0
            loop_cpu += time.thread_time() - l0
            done += inflight
        wall = time.perf_counter() - t_wall
        print(f"{mode}: {done} SendMessage calls, {inflight} a turn: {1e6 * loop_cpu / done:.2f} CPU-us a call in "
              f"the loop's thread ({1e6 * cpu / done:.2f} in the process: the store's warm-ahead thread too), "
              f"{done / wall:,.0f} calls/s", flush=True)
    finally:
        await c.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200_000)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--mode", choices=["hop", "typed"], default="typed")
    a = p.parse_args()
    asyncio.run(run(a.calls, a.inflight, a.mode))
