"""The local front's ReceiveMessage in process, endpoint included: H2Connection and GrpcServer (fed
as bench/grpc_endpoint_micro.py feeds them, no socket; each call's headers with the grpc-timeout
and x-mq-client-id build/grpc_receive sends) with ReceiveMessage's fast answer the front's own
(ConsumerActivity: receive_bytes_now on the request's bytes where the tree has it, else
receive_now on the deserialized request) in local mode, against a BrokerController (ASYNC_FLUSH
master) in this process holding N 1 KiB messages in one queue, popped 32 a call by G groups in
turn (each group reads them all), 8 calls a read. Prints CPU-us a receive of 32 (the loop's
thread, and the process), the broker's pop and the answer's encoding included, as in the cell
grpc_receive_h2_local less the socket and the ack. Runs against any tree on PYTHONPATH:

    cd TREE && PYTHONPATH=TREE .venv/bin/python REPO/bench/grpc_receive_front_micro.py [--messages N]
        [--groups G] [--parsed]

(--parsed: receive_now on the deserialized request even where receive_bytes_now exists.)"""
from __future__ import annotations

import argparse
import asyncio
import struct
import time

import grpc
import uvloop

from bench.grpc_ack_micro import LocalClient
from bench.grpc_endpoint_micro import frame, open_connection
from bench.grpc_receive_micro import TOPIC, _request
from bench.local_front_broker import filled_broker
from broker.proxy.config import ProxyConfig
from broker.proxy.consumer_activity import ConsumerActivity
from broker.proxy.grpc_endpoint.server import GrpcServer
from broker.proxy.protocol import service_pb2 as spb

SERVICE = "apache.rocketmq.v2.MessagingService"
PATH = f"/{SERVICE}/ReceiveMessage"
PER_READ = 8
HEADERS = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", PATH.encode()), (b":authority", b"127.0.0.1:8081"),
           (b"content-type", b"application/grpc"), (b"te", b"trailers"), (b"x-mq-client-id", b"receive@bench"),
           (b"x-mq-language", b"JAVA"), (b"x-mq-client-version", b"5.0.7"), (b"x-mq-protocol", b"v2"),
           (b"grpc-timeout", b"31000m")]
# every call's headers as literals without indexing (the same HPACK work in either tree)
BLOCK = b"".join(b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v for n, v in HEADERS)


def _declined(request, context):
    raise SystemExit("a ReceiveMessage declined by the fast answer: the bench measures the fast answer only")


async def main(messages: int, groups: int, parsed: bool) -> None:
    async with filled_broker("grpc-receive-front-micro-", TOPIC, messages) as (c, addr, local):
        act = ConsumerActivity(LocalClient(local), ProxyConfig())
        act.local = local
        names = [f"ReceiveFront{g}" for g in range(groups)]
        for name in names:  # the group's config cached, as a front's first receive leaves it
            await act.groups.get(addr, name)
        server = GrpcServer()
        server.loop = asyncio.get_running_loop()
        server.add_registered_method_handlers(SERVICE, {"ReceiveMessage": grpc.unary_stream_rpc_method_handler(
            _declined, request_deserializer=spb.ReceiveMessageRequest.FromString)})
        raw = hasattr(act, "receive_bytes_now") and not parsed
        if raw:
            server.add_fast_stream(PATH, act.receive_bytes_now, raw=True)
        else:
            server.add_fast_stream(PATH, act.receive_now)
        bodies = [_request(name).SerializeToString() for name in names]
        calls = [b"\0" + struct.pack(">I", len(b)) + b for b in bodies]
        per_group = messages // 32 - 1
        order = [calls[g] for _ in range(per_group) for g in range(groups)]
        sid, reads = 1, []
        for i in range(0, len(order) - PER_READ + 1, PER_READ):
            parts = [frame(8, 0, 0, struct.pack(">I", PER_READ * 60_000))]  # the connection's window back
            for body in order[i:i + PER_READ]:
                parts += [frame(1, 4, sid, BLOCK), frame(0, 1, sid, body)]
                sid += 2
            reads.append(b"".join(parts))
        conn, t = open_connection(server)
        warm = min(4, len(reads) // 4)
        for i, data in enumerate(reads):
            if i == warm:
                c0, l0 = time.process_time(), time.thread_time()
            conn.data_received(data)
            await asyncio.sleep(0)
        cpu, loop_cpu = time.process_time() - c0, time.thread_time() - l0
        n = (len(reads) - warm) * PER_READ
        assert not conn.calls, f"{len(conn.calls)} calls not answered"
        print(f"{'receive_bytes_now' if raw else 'receive_now'}: {n} ReceiveMessage calls of 32, {PER_READ} a read: "
              f"{1e6 * loop_cpu / n:.1f} CPU-us a receive in the loop's thread ({1e6 * cpu / n:.1f} in the process)",
              flush=True)
        act.renewals.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=16000)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--parsed", action="store_true")
    a = p.parse_args()
    uvloop.run(main(a.messages, a.groups, a.parsed))
