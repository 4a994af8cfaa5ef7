"""Local mode: a broker with grpcServerPort in its broker.conf runs the gRPC front as a supervised
child process (broker.services.supervisor.ServiceProcess: restarted if it dies, dies with the
broker), so the broker's own event loop stays remoting-only and one code path (broker.proxy.startup)
serves both modes. The child reaches brokers through the broker's name servers, as in cluster mode;
its delay levels are the broker's."""
from __future__ import annotations

import asyncio
import os
import socket

from broker.proxy.config import ProxyConfig
from broker.proxy.inner_credentials import make_local
from broker.proxy.startup import LOCAL_STOP_SIGNAL
from broker.services.supervisor import ServiceProcess
from broker.store.errors import StoreConfigError


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
        # a port another process holds would make the child exit at every restart, for ever: the
        # broker refuses to start instead, naming the key
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, broker_config.grpcServerPort))
            except OSError as e:
                raise StoreConfigError("grpcServerPort", f"{host}:{broker_config.grpcServerPort} cannot be listened "
                                                         f"on: {e.strerror}") from None
        self.process: ServiceProcess | None = None
        self._fd = -1

    def start(self, acl=None) -> None:
        """`acl`: the broker's PlainAccessValidator when it has aclEnable; the front then signs its
        requests with an account the broker makes for it (broker.proxy.inner_credentials)."""
        # the supervisor's wake-up for who waits on a service's state: nothing here does
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.process = ServiceProcess("grpc front", "broker.proxy.startup", self.config, self._fd,
                                      asyncio.get_running_loop(), env=make_local(acl) if acl is not None else None,
                                      stop_signal=LOCAL_STOP_SIGNAL)
        self.process.start()

    async def stop(self) -> None:
        if self.process is not None:
            await self.process.stop(self.config.grpcShutdownTimeSeconds + 5)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
