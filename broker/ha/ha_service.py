"""HAService as its own process (master): accepts slaves on haListenPort and runs one
HAConnection per slave. Publishes `acked` (the highest offset a slave confirmed, RocketMQ's
push2SlaveMaxOffset) and the number of linked slaves, and writes the broker's eventfd so that
SYNC_MASTER producers waiting on `acked` complete at once."""
from __future__ import annotations

import logging
import os
import re
import socket
import threading

from broker.ha.ha_connection import HAConnection
from broker.services.process import enter_service, notify, run_service
from broker.store.offset_table import Slot, open_table

log = logging.getLogger("ha")
_NAME = re.compile(r"^\d{20}$")


class HAService:
    def __init__(self, config, notify_fd: int):
        self.config = config
        self.table = open_table(config.storePathRootDir)
        self.notify_fd = notify_fd
        self.connections: set[HAConnection] = set()
        self._lock = threading.Lock()

    def min_offset(self) -> int:
        names = sorted(n for n in os.listdir(self.config.commitlog_dir) if _NAME.match(n))
        return int(names[0]) if names else 0

    def on_ack(self, offset: int) -> None:
        with self._lock:  # this process is the slot's only writer; its threads take turns
            if offset <= self.table.load(Slot.ACKED):
                return
            self.table.store(Slot.ACKED, offset)
        notify(self.notify_fd)

    def connection_closed(self, conn: HAConnection) -> None:
        with self._lock:
            self.connections.discard(conn)
            self.table.store(Slot.HA_SLAVES, len(self.connections))
        notify(self.notify_fd)  # SYNC_MASTER waiters re-check: with no slave they fail at once

    def run(self) -> None:
        t = self.table
        server: socket.socket | None = None

        def main_loop() -> None:
            nonlocal server
            addr = (self.config.brokerIP1, self.config.ha_port)
            t.store(Slot.HA_SLAVES, 0)
            t.store(Slot.HA_PID, os.getpid())
            notify(self.notify_fd)
            said = None
            while server is None:
                try:
                    server = socket.create_server(addr, backlog=16)
                except OSError as e:
                    # the broker serves on without slaves rather than failing to start; say why
                    if said != str(e):
                        log.error("HA service cannot listen on %s:%d (%s): no slave can connect; retrying", *addr, e)
                        said = str(e)
                    t.wait_change(Slot.SHUTDOWN, 0, 5.0)
                    if t.load(Slot.SHUTDOWN):
                        return
            log.info("HA service listening on %s:%d", *addr)
            while not t.load(Slot.SHUTDOWN):
                sock, peer = server.accept()  # a SIGTERM interrupts this with Shutdown
                conn = HAConnection(self, sock, f"{peer[0]}:{peer[1]}")
                with self._lock:
                    self.connections.add(conn)
                    t.store(Slot.HA_SLAVES, len(self.connections))
                notify(self.notify_fd)  # whoever waits for a slave (SYNC_MASTER, status) looks again
                conn.start()

        def final() -> None:
            if server is not None:
                server.close()
            for conn in list(self.connections):
                conn.close("the master is stopping", logging.INFO)
            t.store(Slot.HA_SLAVES, 0)
            t.store(Slot.HA_PID, 0)
            notify(self.notify_fd)
            log.info("HA service stopped; slaves acknowledged up to %d", t.load(Slot.ACKED))

        run_service(main_loop, final)


def main() -> None:
    args, config = enter_service("ha")
    HAService(config, args.notify_fd).run()


if __name__ == "__main__":
    main()
