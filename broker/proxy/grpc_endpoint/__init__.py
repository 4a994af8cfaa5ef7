"""The gRPC front's own HTTP/2 endpoint: libnghttp2 through broker.kernels.h2_session, on the
asyncio loop, with the part of grpc.aio.server's surface the front uses (GrpcServer), so that the
generated add_MessagingServiceServicer_to_server registers MessagingService unchanged.

    status.py      codes, grpc-timeout, grpc-message percent-encoding, AbortError
    context.py     the servicer context a handler is given
    calls.py       one call: its handler run as unary or streaming, deadline and cancellation
    connection.py  one connection: the asyncio Protocol feeding its session, writing once per read
    server.py      GrpcServer: handlers, ports (plaintext or TLS with ALPN h2), start and graceful stop
"""
from broker.proxy.grpc_endpoint.calls import Framed
from broker.proxy.grpc_endpoint.server import GrpcServer

__all__ = ["Framed", "GrpcServer"]
