"""The gRPC front: `broker proxy -c proxy.conf` (cluster mode: a process of its own, brokers found
through namesrvAddr), or a task in a broker's own loop (local mode, grpcServerPort in broker.conf:
broker.proxy.local_mode, its broker reached in-process). The gRPC endpoint
(broker.proxy.grpc_endpoint: HTTP/2 on libnghttp2) runs on the process's event loop, with the
remoting client (MQClientInstance, the front's Producer) on the same loop."""
from __future__ import annotations

import asyncio
import logging
import signal
import sys

log = logging.getLogger("proxy")

PRODUCER_GROUP = "PROXY_SEND_GROUP"  # the send header's group; checks go by each message's PGROUP
MAX_MESSAGE = 130 * 1024 * 1024  # the largest request message; above it the call ends RESOURCE_EXHAUSTED
# The grpcio server's channel arguments of bench/grpc_floor.py (grpcio's floor, printed beside the
# front's figures; the front was a grpc.aio server until its own endpoint replaced it).
SERVER_OPTIONS = (("grpc.max_receive_message_length", MAX_MESSAGE),)


async def serve(config, stop: asyncio.Event, ready=None, *, credentials=None, dialers=None, on_service=None) -> None:
    """Run the front until `stop` is set. `credentials`: what its requests to brokers are signed
    with (default: inner_credentials.for_front); `dialers`: brokers reached in-process, not over
    TCP (local mode: the front's own broker, MQClientInstance.dialers). `ready()` is called once
    it listens; `on_service(service)` once its MessagingService exists (local mode: the broker's
    metrics read its clients)."""
    from broker.client.channel import ClientChannel
    from broker.client.client_instance import MQClientInstance
    from broker.proxy.messaging_service import MessagingService
    from broker.proxy.protocol import service_pb2_grpc as rpc
    from broker.proxy.send_activity import ProxyProducer
    from broker.proxy.inner_credentials import for_front
    from broker.proxy.grpc_endpoint import GrpcServer
    from broker.proxy.tls import server_ssl_context

    tls_context = server_ssl_context(config)  # before anything starts: a refused file names its key

    if dialers is None:
        ClientChannel.coalesce_delay = config.remotingCoalesceMicros / 1e6  # this process is the front alone
    client = MQClientInstance(config.namesrvAddr, credentials=credentials if credentials is not None
                              else for_front(config), tls=config.tlsEnable, tls_namesrv=config.tlsNamesrv)
    if dialers:  # in a broker's process: only the front's own channels coalesce
        client.dialers.update(dialers)
        client.dialed_coalesce_delay = config.remotingCoalesceMicros / 1e6
    producer = ProxyProducer(PRODUCER_GROUP, client=client)
    await producer.start()
    server = service = metrics = None
    try:
        server = GrpcServer(MAX_MESSAGE)
        service = MessagingService(config, client, producer)
        if on_service is not None:
            on_service(service)
        elif config.metricsExporterType == "PROM":  # cluster mode: its own /metrics
            from broker.proxy.proxy_metrics import start_cluster_mode
            metrics = start_cluster_mode(service, config)
        rpc.add_MessagingServiceServicer_to_server(service, server)
        server.add_fast_unary("/apache.rocketmq.v2.MessagingService/SendMessage", service.send_message_now,
                              raw=True)
        server.add_fast_unary("/apache.rocketmq.v2.MessagingService/AckMessage", service.ack_message_now,
                              raw=True)
        server.add_fast_stream("/apache.rocketmq.v2.MessagingService/ReceiveMessage", service.receive_bytes_now,
                               raw=True)
        addr = f"{config.bindAddress}:{config.grpcServerPort}"
        bound = server.add_insecure_port(addr) if tls_context is None else server.add_secure_port(addr, tls_context)
        if bound == 0:
            raise OSError(f"cannot listen on {addr}")
        await server.start()
        tls = "" if tls_context is None else (" (TLS, a self-signed test certificate)" if config.tlsTestModeEnable
                                              else f" (TLS, {config.tlsCertPath})")
        print(f"grpc proxy listening on {addr}{tls}; name servers {config.namesrvAddr}"
              + (f"; started by broker {config.parentBroker}" if config.parentBroker else ""), flush=True)
        if ready is not None:
            ready()
        await stop.wait()
    finally:
        # a front in a broker's process that failed to start leaves nothing behind in it either
        if service is not None:
            service.channels.end_all()
        if server is not None:
            await server.stop(config.grpcShutdownTimeSeconds)
        if service is not None:
            service.consumers.renewals.close()
        if metrics is not None:
            metrics.shutdown()
            metrics.server_close()
        await producer.shutdown()
    print("grpc proxy stopped", flush=True)


def run(config, stop_signals=(signal.SIGINT, signal.SIGTERM)) -> int:
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in stop_signals:
            loop.add_signal_handler(sig, stop.set)
        await serve(config, stop)
    from broker.store.errors import StoreError
    try:
        asyncio.run(main())
    except (OSError, StoreError) as e:
        print(f"broker proxy: {e}", file=sys.stderr)
        return 2
    return 0
