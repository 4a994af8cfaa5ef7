"""Local mode: a broker with grpcServerPort in its broker.conf runs the gRPC front in its own process
and event loop, on its own port (RocketMQ's local-mode proxy). One code path serves both modes:
broker.proxy.startup.serve, whose remoting client reaches this broker over an in-process
connection (RemotingServer.connect_local: no socket, broker.remoting.memory_transport, served as
an accepted connection, with no system call between them; a plain SendMessage skips even that and
is handed to the same send kernel as values: broker.proxy.local_broker.LocalBroker.send) and
other brokers over TCP, found through the broker's name servers as in cluster mode. Its delay
levels are the broker's."""
from __future__ import annotations

import asyncio
import logging
import socket

from broker.proxy.config import ProxyConfig
from broker.proxy.inner_credentials import local_account
from broker.proxy.local_broker import LocalBroker
from broker.store.errors import StoreConfigError

log = logging.getLogger("proxy")


class LocalGrpcFront:
    def __init__(self, broker_config, host: str):
        self.config = ProxyConfig(namesrvAddr=";".join(broker_config.namesrv_addrs),
                                  grpcServerPort=broker_config.grpcServerPort, bindAddress=host,
                                  messageDelayLevel=broker_config.messageDelayLevel,
                                  parentBroker=broker_config.brokerName,
                                  enableACL=broker_config.aclEnable, aclFile=broker_config.acl_file,
                                  tlsMode=broker_config.tlsMode, tlsTestModeEnable=broker_config.tlsTestModeEnable,
                                  tlsKeyPath=broker_config.tlsKeyPath, tlsCertPath=broker_config.tlsCertPath,
                                  # its broker's port takes TLS only: so must its connections
                                  tlsEnable=broker_config.tlsEnable or broker_config.tlsMode == "enforcing",
                                  tlsNamesrv=broker_config.tlsEnable)
        self.config.validate()
        # a port another process holds: the broker refuses to start before it opens its store,
        # naming the key
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, broker_config.grpcServerPort))
            except OSError as e:
                raise StoreConfigError("grpcServerPort", f"{host}:{broker_config.grpcServerPort} cannot be listened "
                                                         f"on: {e.strerror}") from None
        self.task: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self.service = None  # its MessagingService once serving: what its metrics read
        self._local = None  # its broker reached by a call (LocalBroker), for its consumer RPCs

    def metrics_rows(self) -> dict | None:
        """The connected 5.x clients (broker.proxy.proxy_metrics.client_rows), for the broker's
        rocketmq_producer/consumer_connections rows with protocol_type grpc_v2; None: not serving."""
        from broker.proxy.proxy_metrics import client_rows
        return client_rows(self.service) if self.service is not None else None

    async def start(self, remoting, addr: str, acl=None) -> None:
        """Serve on grpcServerPort from this loop; returns once it listens (an error starting it is
        raised here). `remoting`: the broker's RemotingServer, reached in-process wherever a route
        names `addr`, the broker's own address ("brokerIP1:listenPort"). `acl`: the broker's
        PlainAccessValidator when it has aclEnable; the front then signs its requests with an
        account the broker makes for it (broker.proxy.inner_credentials)."""
        from broker.proxy.startup import serve

        peer = f"{self.config.bindAddress}:{self.config.grpcServerPort}"  # the born host of what it sends
        # pops and batch acks by a call into the broker's handler, plain sends handed to its send
        # kernel as values (LocalBroker.send; what it declines keeps the connection, where the same
        # kernel or the processors take the frame); with ACL all over the connection, where the
        # front's signed requests are checked (docs/grpc-front.md, Speed)
        self._local = LocalBroker(addr, remoting.handler, peer) if acl is None else None
        dialers = {addr: lambda channel: remoting.connect_local(peer, channel, addr)}
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        self.task = loop.create_task(serve(self.config, self._stop, lambda: ready.done() or ready.set_result(None),
                                           credentials=local_account(acl) if acl is not None else None,
                                           dialers=dialers, on_service=self._serving), name="grpc front")
        await asyncio.wait([ready, self.task], return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():  # serve ended before listening: its error
            task, self.task = self.task, None
            task.result()
            raise OSError(f"the gRPC front on {peer} stopped while starting")
        self.task.add_done_callback(self._ended)

    def _serving(self, service) -> None:
        self.service = service
        service.consumers.local = self._local
        service.sender.local = self._local  # plain sends handed to the send kernel as values

    def _ended(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None and not self._stop.is_set():
            log.error("the gRPC front stopped: %r", task.exception(), exc_info=task.exception())

    async def stop(self) -> None:
        """Its GOAWAY and the calls' grace (grpcShutdownTimeSeconds), then its client's shutdown:
        before the broker closes."""
        task, self.task = self.task, None
        if task is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), self.config.grpcShutdownTimeSeconds + 5)
        except asyncio.TimeoutError:
            log.warning("the gRPC front did not stop within %d s: cancelled", self.config.grpcShutdownTimeSeconds + 5)
            task.cancel()
        except Exception as e:  # already logged by _ended
            log.debug("the gRPC front ended with %r", e)
