"""NamesrvController: a name server listening on host:port (`broker namesrv`)."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from broker.namesrv.config import NamesrvConfig
from broker.namesrv.processor import NamesrvProcessor
from broker.namesrv.route_info import RouteInfoManager
from broker.remoting.connection import RemotingServer
from broker.remoting.tls import server_context

__all__ = ["NamesrvConfig", "NamesrvController"]

log = logging.getLogger("namesrv")


class NamesrvController:
    def __init__(self, config: NamesrvConfig | None = None, clock: Callable[[], float] = time.monotonic):
        self.config = config or NamesrvConfig()
        self.routes = RouteInfoManager(clock, self.config.autoCreateTopicEnable, self.config.defaultTopicQueueNums,
                                       self.config.brokerExpiredSeconds)
        self.processor = NamesrvProcessor(self.routes, self.config.properties_text)
        self.server: RemotingServer | None = None
        self._scan: asyncio.TimerHandle | None = None

    @property
    def port(self) -> int:
        return self.server.port if self.server else self.config.port

    @property
    def addr(self) -> str:
        return f"{self.config.host}:{self.port}"

    async def start(self) -> None:
        cfg = self.config
        self.server = RemotingServer(self.processor.handle, cfg.host, cfg.port, tls_mode=cfg.tlsMode,
                                     ssl_context=server_context(cfg.tlsMode, cfg.tlsTestModeEnable, cfg.tlsCertPath,
                                                                cfg.tlsKeyPath))
        self.server.on_close.append(self.routes.connection_closed)
        await self.server.start()
        self._schedule_scan()
        # debug: `broker namesrv` prints its own "name server listening on" line (what tests and
        # operators wait for on stdout); at info both showed, each start-up line twice
        log.debug("name server listening on %s", self.addr)

    def _schedule_scan(self) -> None:
        def tick():
            self.routes.scan_not_active_brokers()
            self._schedule_scan()
        self._scan = asyncio.get_running_loop().call_later(self.config.scanNotActiveBrokerInterval, tick)

    async def close(self) -> None:
        if self._scan is not None:
            self._scan.cancel()
            self._scan = None
        if self.server is not None:
            await self.server.close()
            self.server = None
