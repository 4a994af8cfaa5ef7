"""The gRPC endpoint alone, per unary call: H2Connection and GrpcServer (the tree on PYTHONPATH)
fed 64 SendMessage calls a read, as h2load sends them (HPACK-indexed headers after the first
call, one x-mq-client-id), answered by a raw fast unary whose future completes a loop turn later;
no socket (the transport counts writes) and no broker. Prints CPU-us per call; under callgrind
the instructions per call are exact and do not move with the machine's load:

    for n in 50 250; do PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 PYTHONPATH=TREE valgrind --tool=callgrind \\
        --callgrind-out-file=/tmp/cg.$n python bench/grpc_endpoint_micro.py $n; done

(instructions per call = (Collected at 250 - Collected at 50) / (200 * 64)). The requests are made
into a file in the temp directory by the first run of each n and read back by the next ones, so
making them is not counted from the second run on."""
from __future__ import annotations

import asyncio
import os
import pickle
import struct
import sys
import tempfile
import time

import grpc
import uvloop

from broker.proxy.grpc_endpoint.connection import H2Connection
from broker.proxy.grpc_endpoint.server import GrpcServer

SERVICE = "apache.rocketmq.v2.MessagingService"
PATH = f"/{SERVICE}/SendMessage".encode()
HEADERS = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", PATH), (b":authority", b"127.0.0.1:8081"),
           (b"content-type", b"application/grpc"), (b"te", b"trailers"), (b"x-mq-client-id", b"h2load@bench")]
# the first call's headers literal with incremental indexing, every later call's all indexed
FIRST = b"".join(b"\x40" + bytes([len(n)]) + n + bytes([len(v)]) + v for n, v in HEADERS)
INDEXED = bytes(0x80 | (62 + len(HEADERS) - 1 - i) for i in range(len(HEADERS)))
MESSAGE = bytes(range(256)) * 4 + bytes(76)  # about the bench's 1 KiB SendMessageRequest
BODY = b"\0" + struct.pack(">I", len(MESSAGE)) + MESSAGE
REPLY = bytes(90)
PER_READ = 64
WARM = 100


def frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", sid) + payload


class _Transport:
    def __init__(self):
        self.writes = 0

    def write(self, b: bytes) -> None:
        self.writes += 1

    def get_extra_info(self, key, default=None):
        return ("127.0.0.1", 5555) if key == "peername" else default

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def open_connection(server, first: bytes = b""):
    """(an H2Connection of `server` on a _Transport, the transport) past a client's preface and
    SETTINGS, its connection window opened wide; `first`: frames that come with them."""
    conn = H2Connection(server)
    t = _Transport()
    conn.connection_made(t)
    conn.data_received(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"") + frame(8, 0, 0, struct.pack(">I", 1 << 29))
                       + first)
    return conn, t


def _reads(n: int) -> list[bytes]:
    path = os.path.join(tempfile.gettempdir(), f"grpc-endpoint-micro-{n}.pkl")
    if not os.path.exists(path):
        sid, reads = 3, []
        for _ in range(n + WARM):
            parts = [frame(8, 0, 0, struct.pack(">I", PER_READ * 200))]  # the connection's window back
            for _ in range(PER_READ):
                parts += [frame(1, 4, sid, INDEXED), frame(0, 1, sid, BODY)]
                sid += 2
            reads.append(b"".join(parts))
        with open(path, "wb") as f:
            pickle.dump(reads, f)
    with open(path, "rb") as f:
        return pickle.load(f)


async def main(n: int) -> None:
    loop = asyncio.get_running_loop()
    server = GrpcServer()
    server.loop = loop
    server.add_registered_method_handlers(SERVICE, {"SendMessage": grpc.unary_unary_rpc_method_handler(
        lambda request, context: None)})

    def fast(request, context):
        fut = loop.create_future()
        loop.call_soon(fut.set_result, None)
        return fut, lambda done: REPLY
    server.add_fast_unary(PATH.decode(), fast, raw=True)
    reads = _reads(n)
    conn, t = open_connection(server, frame(1, 4, 1, FIRST) + frame(0, 1, 1, BODY))
    for i, data in enumerate(reads):
        if i == WARM:
            c0, w0 = time.process_time(), t.writes
        conn.data_received(data)
        for _ in range(3):
            await asyncio.sleep(0)
    dt = time.process_time() - c0
    assert not conn.calls, f"{len(conn.calls)} calls not answered"
    print(f"{1e6 * dt / (n * PER_READ):.3f} CPU-us per call, {t.writes - w0} writes for {n * PER_READ} calls")


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
