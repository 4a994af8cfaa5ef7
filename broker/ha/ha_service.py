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
from broker.store.offset_table import HA_SLAVE_PAIRS, Slot, open_table

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

    # -- controller mode: which slave acknowledged what ---------------------------------------------
    def claim_pair(self, broker_id: int) -> int:
        """A slot pair for a slave that said hello (its ack is published there); -1: none free."""
        with self._lock:
            for k in range(HA_SLAVE_PAIRS):
                slot = Slot.HA_SLAVE_BASE + 2 * k
                if not self.table.load(slot):
                    self.table.store(slot + 1, -1)
                    self.table.store(slot, broker_id + 1)
                    return slot
        return -1

    def on_slave_ack(self, slot: int, offset: int) -> None:
        """Every slave's progress wakes the broker (the SyncStateSet may need a slower one)."""
        if self.table.load(slot + 1) == offset:
            return
        self.table.store(slot + 1, offset)
        with self._lock:
            if offset > self.table.load(Slot.ACKED):
                self.table.store(Slot.ACKED, offset)
        if self.table.load(Slot.ISR_MASK):
            self.table.add(Slot.REPUT_WAKE, 1)  # the reput dispatches up to the SyncStateSet's acks
        notify(self.notify_fd)

    def connection_closed(self, conn: HAConnection) -> None:
        with self._lock:
            if conn.pair >= 0:
                self.table.store(conn.pair, 0)
                conn.pair = -1
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
            for k in range(HA_SLAVE_PAIRS):  # pairs a killed predecessor left
                t.store(Slot.HA_SLAVE_BASE + 2 * k, 0)
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
            for k in range(HA_SLAVE_PAIRS):
                t.store(Slot.HA_SLAVE_BASE + 2 * k, 0)
            t.store(Slot.HA_PID, 0)
            notify(self.notify_fd)
            log.info("HA service stopped; slaves acknowledged up to %d", t.load(Slot.ACKED))

        run_service(main_loop, final)


def main() -> None:
    args, config = enter_service("ha")
    HAService(config, args.notify_fd).run()


if __name__ == "__main__":
    main()
