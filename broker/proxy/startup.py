"""The gRPC front's process: `broker proxy -c proxy.conf` (cluster mode: brokers found through
namesrvAddr), or `python -m broker.proxy.startup --config JSON --parent PID` as a broker's
supervised child (local mode, grpcServerPort in broker.conf: ServiceProcess starts it so and
restarts it if it dies). The gRPC endpoint (broker.proxy.grpc_endpoint: HTTP/2 on libnghttp2) runs
on the default asyncio loop, with the remoting client (MQClientInstance, the front's Producer) on
the same loop."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import signal
import sys

log = logging.getLogger("proxy")

PRODUCER_GROUP = "PROXY_SEND_GROUP"  # the send header's group; checks go by each message's PGROUP
MAX_MESSAGE = 130 * 1024 * 1024  # the largest request message; above it the call ends RESOURCE_EXHAUSTED
# The grpcio server's channel arguments of bench/grpc_floor.py (grpcio's floor, printed beside the
# front's figures; the front was a grpc.aio server until its own endpoint replaced it).
SERVER_OPTIONS = (("grpc.max_receive_message_length", MAX_MESSAGE),)


async def serve(config, stop: asyncio.Event, ready=None) -> None:
    from broker.client.channel import ClientChannel
    from broker.client.client_instance import MQClientInstance
    from broker.proxy.messaging_service import MessagingService
    from broker.proxy.protocol import service_pb2_grpc as rpc
    from broker.proxy.send_activity import ProxyProducer
    from broker.proxy.inner_credentials import for_front
    from broker.proxy.grpc_endpoint import GrpcServer
    from broker.proxy.tls import server_ssl_context

    tls_context = server_ssl_context(config)  # before anything starts: a refused file names its key

    ClientChannel.coalesce_delay = config.remotingCoalesceMicros / 1e6  # this process is the front alone
    client = MQClientInstance(config.namesrvAddr, credentials=for_front(config), tls=config.tlsEnable,
                            tls_namesrv=config.tlsNamesrv)
    producer = ProxyProducer(PRODUCER_GROUP, client=client)
    await producer.start()
    server = GrpcServer(MAX_MESSAGE)
    service = MessagingService(config, client, producer)
    rpc.add_MessagingServiceServicer_to_server(service, server)
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
    try:
        await stop.wait()
    finally:
        service.channels.end_all()
        await server.stop(config.grpcShutdownTimeSeconds)
        service.consumers.renewals.close()
        await producer.shutdown()
    print("grpc proxy stopped", flush=True)


# What a broker stops its local-mode front with (and what the front gets when its broker dies):
# not SIGTERM, which the whole process group gets when the broker is stopped as a unit.
LOCAL_STOP_SIGNAL = signal.SIGUSR1


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


def main() -> int:
    """Local mode: started by a broker's supervisor (broker.services.supervisor.ServiceProcess)."""
    import ctypes
    import os

    from broker.proxy.config import ProxyConfig
    from broker.services.process import PR_SET_PDEATHSIG, service_args

    args = service_args("proxy")
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, LOCAL_STOP_SIGNAL, 0, 0, 0)
    if os.getppid() != args.parent:  # the broker died before prctl took effect
        return 1
    logging.basicConfig(level=os.environ.get("BROKER_LOG_LEVEL", "INFO"),
                        format="%(asctime)s proxy[%(process)d] %(levelname)s %(message)s")
    fields = {f.name for f in dataclasses.fields(ProxyConfig)}
    config = ProxyConfig(**{k: v for k, v in json.loads(args.config).items() if k in fields})
    # Ctrl-C on `make run`, and a SIGTERM to the whole process group (systemd's KillMode=control-group),
    # reach this child too: the broker got the same signal and stops the child with LOCAL_STOP_SIGNAL
    # in its own order (a child stopping on the group's signal would be restarted by the supervisor)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # blocked by the supervisor until now
    return run(config, (LOCAL_STOP_SIGNAL,))


if __name__ == "__main__":
    sys.exit(main())
