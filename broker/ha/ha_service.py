"""HAService, the HA process's part on a master (broker.ha.ha_process): accepts slaves on
haListenPort and runs one HAConnection per slave. Publishes `acked` (the highest offset a slave
confirmed, RocketMQ's push2SlaveMaxOffset) and the number of linked slaves, and writes the broker's
eventfd so that SYNC_MASTER producers waiting on `acked` complete at once."""
from __future__ import annotations

import logging
import os
import re
import socket
import threading

from broker.ha.ha_connection import HAConnection
from broker.services.process import notify
from broker.store.offset_table import HA_SLAVE_PAIRS, Slot

log = logging.getLogger("ha")
_NAME = re.compile(r"^\d{20}$")


class HAService:
    def __init__(self, config, notify_fd: int, table):
        self.config = config
        self.table = table
        self.notify_fd = notify_fd
        self.connections: set[HAConnection] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: socket.socket | None = None

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

    def serve(self) -> None:
        """The master's part until stop(): listen on haListenPort and link every slave that comes
        (run in a thread of the HA process, broker.ha.ha_process)."""
        t = self.table
        addr = (self.config.brokerIP1, self.config.ha_port)
        with self._lock:
            t.store(Slot.HA_SLAVES, 0)
            for k in range(HA_SLAVE_PAIRS):  # pairs a killed predecessor or an earlier term left
                t.store(Slot.HA_SLAVE_BASE + 2 * k, 0)
            t.store(Slot.ACKED, 0)  # a term of its own: what slaves acknowledged to an earlier one is not ours
        notify(self.notify_fd)
        said = None
        server = None
        while server is None:
            try:
                server = socket.create_server(addr, backlog=16)
            except OSError as e:
                # the broker serves on without slaves rather than failing to start; say why
                if said != str(e):
                    log.error("HA service cannot listen on %s:%d (%s): no slave can connect; retrying", *addr, e)
                    said = str(e)
                if self._stopping.wait(5.0):
                    return
                continue
            with self._lock:
                self._server = server
                if self._stopping.is_set():
                    server.close()
                    return
        log.info("HA service listening on %s:%d", *addr)
        while not self._stopping.is_set():
            try:
                sock, peer = server.accept()  # stop() shuts the socket down: accept fails at once
            except OSError as e:
                if self._stopping.is_set():
                    break
                log.warning("HA service: accept failed: %s", e)  # EMFILE, ECONNABORTED: the next one may do
                self._stopping.wait(0.1)
                continue
            conn = HAConnection(self, sock, f"{peer[0]}:{peer[1]}")
            with self._lock:
                self.connections.add(conn)
                t.store(Slot.HA_SLAVES, len(self.connections))
            notify(self.notify_fd)  # whoever waits for a slave (SYNC_MASTER, status) looks again
            conn.start()

    def stop(self) -> None:
        """From another thread: serve() returns soon (its accept fails on the shut socket)."""
        with self._lock:
            self._stopping.set()
            server = self._server
        if server is not None:
            try:
                server.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """After serve() returned: every slave's link closed, their slots freed."""
        t = self.table
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close("the master is stopping", logging.INFO)
        with self._lock:
            t.store(Slot.HA_SLAVES, 0)
            for k in range(HA_SLAVE_PAIRS):
                t.store(Slot.HA_SLAVE_BASE + 2 * k, 0)
        notify(self.notify_fd)
        log.info("HA service stopped; slaves acknowledged up to %d", t.load(Slot.ACKED))
