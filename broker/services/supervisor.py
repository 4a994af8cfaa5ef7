"""Starts the store's service processes and restarts any that dies, woken by its pidfd."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time

log = logging.getLogger("supervisor")


def _service_env() -> dict[str, str]:
    # A service is one thread of work: numpy's BLAS pool would only add threads that a SIGTERM
    # may be delivered to and that compete with the broker for 2 cores.
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    return env


class ServiceProcess:
    """One supervised service: `python -m <module>` with the store config, our pid and an eventfd."""

    def __init__(self, name: str, module: str, config, notify_fd: int, loop: asyncio.AbstractEventLoop,
                 env: dict[str, str] | None = None, stop_signal: int = signal.SIGTERM):
        self.name = name
        self.env = env or {}  # what the child alone gets (a secret stays off its command line)
        self.module = module
        self.config = config
        self.notify_fd = notify_fd
        self.loop = loop
        self.stop_signal = stop_signal  # the store's services: SIGTERM after SHUTDOWN is set (process.py)
        self.proc: subprocess.Popen | None = None
        self.pidfd = -1
        self.stopping = False
        self.restarts = 0
        self._recent: list[float] = []
        self.exited = asyncio.Event()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        cfg = json.dumps(dataclasses.asdict(self.config))
        # The child starts with SIGTERM blocked (a mask survives fork and exec) and unblocks it once
        # its own handling is installed (process.enter_service, the front's main): a SIGTERM to the
        # whole process group while it starts stays pending for that handling instead of killing it.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module, "--config", cfg, "--parent", str(os.getpid()),
                 "--notify-fd", str(self.notify_fd)],
                pass_fds=(self.notify_fd,), stdin=subprocess.DEVNULL, env={**_service_env(), **self.env})
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        self.exited.clear()
        self.pidfd = os.pidfd_open(self.proc.pid)
        self.loop.add_reader(self.pidfd, self._on_exit)

    def _on_exit(self) -> None:
        self.loop.remove_reader(self.pidfd)
        os.close(self.pidfd)
        self.pidfd = -1
        rc = self.proc.wait()
        self.exited.set()
        # whoever waits on a condition about this service (readiness, a restart) re-checks it now
        try:
            os.eventfd_write(self.notify_fd, 1)
        except OSError:
            pass  # the store is tearing down
        if self.stopping:
            return
        self.restarts += 1
        now = time.monotonic()
        self._recent = [t for t in self._recent if now - t < 10] + [now]
        # Back off only when it keeps dying at once (a bad disk, a bug): restart at once otherwise.
        delay = 0 if len(self._recent) < 3 else min(5.0, 0.2 * 2 ** (len(self._recent) - 3))
        log.warning("%s service (pid %d) exited with %s; restarting%s", self.name, self.proc.pid, rc,
                    f" in {delay:.1f}s" if delay else "")
        if delay:
            self.loop.call_later(delay, self._restart)
        else:
            self._restart()

    def _restart(self) -> None:
        if not self.stopping:
            self.start()

    def signal(self, sig: int) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    async def stop(self, timeout: float = 30.0) -> None:
        self.stopping = True
        if self.proc is None or self.proc.poll() is not None:
            if self.pidfd >= 0:
                self.loop.remove_reader(self.pidfd)
                os.close(self.pidfd)
                self.pidfd = -1
            return
        self.signal(self.stop_signal)
        try:
            await asyncio.wait_for(self.exited.wait(), timeout)
        except asyncio.TimeoutError:
            log.error("%s service did not stop in %.0fs; killing it", self.name, timeout)
            self.signal(signal.SIGKILL)
            await self.exited.wait()
