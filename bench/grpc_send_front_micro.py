"""The local front's SendMessage in-process, endpoint included: H2Connection and GrpcServer (as
bench/grpc_endpoint_micro.py feeds them: 64 calls a read, as h2load sends them, no socket) with
SendMessage's fast answer the front's own (MessagingService.send_message_now ->
SendMessageActivity.send_bytes_now, its TopicTypes checking the topic's type) in local mode, against
a BrokerController (ASYNC_FLUSH master) in this process. What the cell grpc_send_h2load_local's
"front's share" is (the broker's CPU a call less a remoting send's) without the socket's reads and
writes and without h2load beside it on the host: CPU-us a call of the loop's thread, and of the
process (the store's warm-ahead thread too). Runs against any tree on PYTHONPATH:

    cd TREE && PYTHONPATH=TREE .venv/bin/python REPO/bench/grpc_send_front_micro.py [reads]
"""
from __future__ import annotations

import asyncio
import shutil
import struct
import sys
import time

import grpc
import uvloop

from bench.grpc_endpoint_micro import FIRST, INDEXED, PATH, PER_READ, SERVICE, frame, open_connection
from bench.grpc_send_micro import PEER, TOPIC, request, routed_broker
from broker.proxy.config import ProxyConfig
from broker.proxy.grpc_endpoint.server import GrpcServer
from broker.proxy.local_broker import LocalBroker
from broker.proxy.send_activity import ProxyProducer, SendMessageActivity
from broker.proxy import topic_types
from broker.proxy.topic_types import TopicTypes

WARM = 20


def _declined(request, context):
    raise SystemExit("a SendMessage declined by the fast answer: the bench measures the typed path only")


async def main(n: int) -> None:
    loop = asyncio.get_running_loop()
    c, root, client, addr = await routed_broker("grpc-send-front-micro-", 512 << 20)
    try:
        act = SendMessageActivity(ProxyProducer("proxy-producer", client=client), ProxyConfig())
        payload = request()
        fut, respond = act.send_bytes_now(payload, _Context())  # the topic auto-created, the connection made
        await fut
        respond(fut)
        topic_types.TTL_S = 1e9  # the type read once: a refresh's round trip is not what this measures
        act.topic_types = TopicTypes(client)
        await act.topic_types.get(TOPIC)
        act.local = LocalBroker(addr, c.handle, PEER)

        server = GrpcServer()
        server.loop = loop
        server.add_registered_method_handlers(SERVICE, {"SendMessage": grpc.unary_unary_rpc_method_handler(_declined)})
        server.add_fast_unary(PATH.decode(), act.send_bytes_now, raw=True)
        body = b"\0" + struct.pack(">I", len(payload)) + payload
        sid, reads = 3, []
        for _ in range(n + WARM):
            parts = [frame(8, 0, 0, struct.pack(">I", PER_READ * 2000))]  # the connection's window back
            for _ in range(PER_READ):
                parts += [frame(1, 4, sid, INDEXED), frame(0, 1, sid, body)]
                sid += 2
            reads.append(b"".join(parts))
        conn, t = open_connection(server, frame(1, 4, 1, FIRST) + frame(0, 1, 1, body))
        puts0 = None
        for i, data in enumerate(reads):
            if i == WARM:
                c0, l0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
                puts0 = c.store.put_msgs
            conn.data_received(data)
            await asyncio.sleep(0)  # the turn ends: the sends settle (end_turn)
        cpu, loop_cpu, wall = time.process_time() - c0, time.thread_time() - l0, time.perf_counter() - w0
        calls = n * PER_READ
        await asyncio.sleep(0)
        assert not conn.calls, f"{len(conn.calls)} calls not answered"
        stored = c.store.put_msgs - puts0 if puts0 is not None else calls
        assert stored == calls, f"{stored} stored of {calls}"
        print(f"{calls} SendMessage calls, {PER_READ} a read: {1e6 * loop_cpu / calls:.2f} CPU-us a call in the "
              f"loop's thread ({1e6 * cpu / calls:.2f} in the process), {calls / wall:,.0f} calls/s", flush=True)
    finally:
        await c.close()
        shutil.rmtree(root, ignore_errors=True)


class _Context:
    @staticmethod
    def peer():
        return "ipv4:127.0.0.1:40000"


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1500))
