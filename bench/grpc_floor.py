"""The bare grpcio floor of the gRPC front: a server with the front's own channel arguments
(broker.proxy.startup.SERVER_OPTIONS) whose SendMessage parses the request and answers one OK
entry at once, no broker behind it. bench/grpc_bench.py drives it with the front's driver in the
same cell, so the front's CPU per message reads beside what grpcio alone costs on this machine at
that moment.

    python -m bench.grpc_floor PORT [MODE]     # prints "grpc floor listening" once it serves

MODE: `aio` (grpc.aio, the front's server until its own endpoint; the default), `h2` (the front's
own endpoint, broker.proxy.grpc_endpoint on libnghttp2, with the same servicer), `syncN` (the synchronous grpc.server with N
pool threads), `bridgeN` (syncN whose handler awaits a coroutine on an asyncio loop in another
thread, as a synchronous front would reach its asyncio remoting client). `python -m bench.grpc_bench
floors` drives each.
"""
from __future__ import annotations

import asyncio
import signal
import sys
import threading


def _answer():
    from broker.proxy.protocol import definition_pb2 as pb
    from broker.proxy.protocol import service_pb2 as spb

    ok = pb.Status(code=pb.Code.OK, message="OK")

    def answer(request):
        entries = [spb.SendResultEntry(status=ok, message_id=m.system_properties.message_id) for m in request.messages]
        return spb.SendMessageResponse(status=ok, entries=entries)
    return answer


async def serve_aio(port: int, own_endpoint: bool = False) -> None:
    import grpc

    from broker.proxy.protocol import service_pb2_grpc as rpc
    from broker.proxy.startup import MAX_MESSAGE, SERVER_OPTIONS

    answer = _answer()

    class Floor(rpc.MessagingServiceServicer):
        async def SendMessage(self, request, context):
            return answer(request)

    if own_endpoint:
        from broker.proxy.grpc_endpoint import GrpcServer
        server = GrpcServer(MAX_MESSAGE)
    else:
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


def serve_sync(port: int, threads: int, bridge: bool) -> None:
    from concurrent import futures

    import grpc

    from broker.proxy.protocol import service_pb2_grpc as rpc
    from broker.proxy.startup import SERVER_OPTIONS

    answer = _answer()
    loop = asyncio.new_event_loop()
    if bridge:
        threading.Thread(target=loop.run_forever, daemon=True).start()

    async def answered(request):
        return answer(request)

    class Floor(rpc.MessagingServiceServicer):
        def SendMessage(self, request, context):
            if bridge:
                return asyncio.run_coroutine_threadsafe(answered(request), loop).result()
            return answer(request)

    server = grpc.server(futures.ThreadPoolExecutor(threads), options=SERVER_OPTIONS)
    rpc.add_MessagingServiceServicer_to_server(Floor(), server)
    if server.add_insecure_port(f"127.0.0.1:{port}") == 0:
        raise OSError(f"cannot listen on 127.0.0.1:{port}")
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("grpc floor listening", flush=True)
    stop.wait()
    server.stop(0)


if __name__ == "__main__":
    port, mode = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "aio")
    if mode in ("aio", "h2"):
        asyncio.run(serve_aio(port, own_endpoint=mode == "h2"))
    elif mode.startswith(("sync", "bridge")):
        threads = mode.removeprefix("sync").removeprefix("bridge")
        serve_sync(port, int(threads or 8), mode.startswith("bridge"))
    else:
        sys.exit(f"unknown mode {mode!r}: aio, h2, syncN or bridgeN")
