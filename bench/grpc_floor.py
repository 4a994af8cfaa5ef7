"""The bare grpcio floor of the gRPC front: a grpc.aio server with the front's own channel
arguments (broker.proxy.startup.SERVER_OPTIONS) whose SendMessage parses the request and answers
one OK entry at once, no broker behind it. bench/grpc_bench.py drives it with the front's driver
in the same cell, so the front's CPU per message reads beside what grpcio alone costs on this
machine at that moment.

    python -m bench.grpc_floor PORT     # prints "grpc floor listening" once it serves
"""
from __future__ import annotations

import asyncio
import signal
import sys


async def serve(port: int) -> None:
    import grpc

    from broker.proxy.protocol import definition_pb2 as pb
    from broker.proxy.protocol import service_pb2 as spb
    from broker.proxy.protocol import service_pb2_grpc as rpc
    from broker.proxy.startup import SERVER_OPTIONS

    ok = pb.Status(code=pb.Code.OK, message="OK")

    class Floor(rpc.MessagingServiceServicer):
        async def SendMessage(self, request, context):
            entries = [spb.SendResultEntry(status=ok, message_id=m.system_properties.message_id)
                       for m in request.messages]
            return spb.SendMessageResponse(status=ok, entries=entries)

    server = grpc.aio.server(options=SERVER_OPTIONS)
    rpc.add_MessagingServiceServicer_to_server(Floor(), server)
    if server.add_insecure_port(f"127.0.0.1:{port}") == 0:
        raise OSError(f"cannot listen on 127.0.0.1:{port}")
    await server.start()
    print("grpc floor listening", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0)


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
