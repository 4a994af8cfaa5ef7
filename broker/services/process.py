"""What every service process does at start: die with its parent, stop on SIGTERM, log its role."""
from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import signal
import sys

from broker.store.config import MessageStoreConfig
from broker.store.offset_table import Slot, open_table

PR_SET_PDEATHSIG = 1


class Shutdown(BaseException):
    """Raised in the service's main thread by the broker's SIGTERM: finish the current step and
    exit. A BaseException, as KeyboardInterrupt is: raised from a signal handler it can land inside
    any call, and code that catches Exception (logging's own error handler among them) must never
    swallow it, or the service would not stop on that signal."""


_final = False
_table = None  # the store's offset table, once enter_service has opened it


def _on_signal(signum, frame):  # noqa: ARG001
    # The broker sets SHUTDOWN before it signals us. A SIGTERM without it is one the whole process
    # group got (systemd's KillMode=control-group, a shell's kill of the job): the broker got it
    # too and stops us in its own order, after its last writes and our final work. Exiting now
    # would leave its stop waiting on a service that is gone, or its supervisor restarting it.
    if _table is not None and not _table.load(Slot.SHUTDOWN):
        return
    if not _final:
        raise Shutdown()


def run_service(main_loop, final) -> None:
    """Run `main_loop` until SIGTERM (or its own return), then `final` exactly once with the
    signal disarmed, so a late or second SIGTERM can never cut the final flush short."""
    global _final
    try:
        main_loop()
    except Shutdown:
        pass
    while True:
        try:
            _final = True  # a signal landing before this line is caught below and we retry
            break
        except Shutdown:
            continue
    final()


def service_args(name: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"broker-{name}")
    p.add_argument("--config", required=True, help="MessageStoreConfig as JSON")
    p.add_argument("--parent", type=int, required=True, help="pid of the broker that supervises us")
    p.add_argument("--notify-fd", type=int, default=-1, help="eventfd of the broker's event loop")
    return p.parse_args()


def enter_service(name: str) -> tuple[argparse.Namespace, MessageStoreConfig]:
    args = service_args(name)
    # Die with the broker: a kill -9 of the broker must never leave a service touching the store.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != args.parent:  # the parent died before prctl took effect
        sys.exit(1)
    config = MessageStoreConfig(**json.loads(args.config))
    global _table
    _table = open_table(config.storePathRootDir)  # the broker made it before starting us
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the broker stops us
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # blocked by the supervisor until now
    logging.basicConfig(level=os.environ.get("BROKER_LOG_LEVEL", "INFO"),
                        format=f"%(asctime)s {name}[%(process)d] %(levelname)s %(message)s")
    return args, config


def notify(fd: int) -> None:
    if fd >= 0:
        try:
            os.eventfd_write(fd, 1)
        except OSError:
            pass  # the broker is gone; PDEATHSIG ends us next
