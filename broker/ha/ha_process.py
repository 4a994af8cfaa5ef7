"""The HA process: the store's one replication service, in whichever role the broker gives it.

On a master it runs HAService (listens for slaves, streams them the log), on a slave HAClient (follows
the master named in runtime/ha_master, the log's only writer), and idles in between. The role is a
word of the offset table (Slot.HA_ROLE, with HA_EPOCH and HA_BROKER_ID for controller mode's hello),
taken up whenever the broker bumps HA_MASTER: the part serving now is stopped (its sockets shut down,
so a blocked accept, connect or recv returns at once) and joined, the new one started, and the
value of HA_MASTER served by is published in HA_ROLE_ACK. The broker waits for that acknowledgement
before it writes the log itself (a slave becoming master), so the log never has two writers.
A role switch in controller mode is thereby a few milliseconds, not a restart of this process.
"""
from __future__ import annotations

import logging
import os
import threading

from broker.ha.ha_client import HAClient
from broker.ha.ha_service import HAService
from broker.services.process import enter_service, notify, run_service
from broker.store.offset_table import HA_ROLE_MASTER, HA_ROLE_SLAVE, Slot, open_table

log = logging.getLogger("ha")


class HAProcess:
    def __init__(self, config, notify_fd: int):
        self.config = config
        self.table = open_table(config.storePathRootDir)
        self.notify_fd = notify_fd
        self.part: HAService | HAClient | None = None
        self.thread: threading.Thread | None = None

    def _enter(self, role: int) -> None:
        if role == HA_ROLE_MASTER:
            self.part = HAService(self.config, self.notify_fd, self.table)
        elif role == HA_ROLE_SLAVE:
            self.part = HAClient(self.config, self.notify_fd, self.table)
        else:
            return
        self.thread = threading.Thread(target=self.part.serve, name=f"ha-{type(self.part).__name__}", daemon=True)
        self.thread.start()

    def _leave(self) -> None:
        """Stop the part serving now and wait until it did: past this nothing of it writes the log."""
        part, thread = self.part, self.thread
        if part is None:
            return
        part.stop()
        if thread.ident is not None:  # a SIGTERM may land between making the part and starting it
            thread.join()
        part.close()
        self.part = self.thread = None

    def run(self) -> None:
        t = self.table

        def main_loop() -> None:
            ready = False
            while not t.load(Slot.SHUTDOWN):
                gen = t.load(Slot.HA_MASTER)
                self._enter(t.load(Slot.HA_ROLE))
                t.store(Slot.HA_ROLE_ACK, gen)
                if not ready:
                    t.store(Slot.HA_PID, os.getpid())
                    ready = True
                notify(self.notify_fd)
                while t.load(Slot.HA_MASTER) == gen and not t.load(Slot.SHUTDOWN):
                    t.wait_change(Slot.HA_MASTER, gen, 5.0)
                self._leave()

        def final() -> None:
            self._leave()
            t.store(Slot.HA_LINK, 0)
            t.store(Slot.HA_PID, 0)
            notify(self.notify_fd)

        run_service(main_loop, final)


def main() -> None:
    args, config = enter_service("ha")
    HAProcess(config, args.notify_fd).run()


if __name__ == "__main__":
    main()
