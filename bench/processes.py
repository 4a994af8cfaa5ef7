"""The processes a bench cell starts on loopback: `broker namesrv`, `broker serve` in a fresh store
directory, any `python -m ...` child that prints a ready line; free ports for them; each stopped
with SIGTERM (then waited for) when its cell ends.

Used by the network, HA, DLedger, controller-mode, broker.reliable, Spark and gRPC front cells.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from tools.servers import free_port  # noqa: F401 - the cells import it from here; it reserves the VIP port too


def wait_for_line(proc: subprocess.Popen, marker: str, what: str) -> None:
    for line in proc.stdout:
        if marker in line:
            break
    else:
        raise RuntimeError(f"{what} did not start (exit {proc.wait()})")


def stop_process(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class NamesrvProcess:
    """`broker namesrv` on a free loopback port; stopped (SIGTERM, then waited for) on exit."""

    def __init__(self):
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "NamesrvProcess":
        env = dict(os.environ, BROKER_LOG_LEVEL="WARNING")
        self.proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "namesrv", "--listen", self.addr],
                                     stdout=subprocess.PIPE, env=env, text=True)
        try:
            wait_for_line(self.proc, "listening on", "name server")
        except BaseException:
            stop_process(self.proc)
            raise
        return self

    def __exit__(self, *exc) -> None:
        stop_process(self.proc)


class CliProcess:
    """A `python -m broker.cli ...` child of a bench cell: started, waited for until it prints its
    ready line, its CPU read, stopped (SIGTERM, then waited for)."""

    proc: subprocess.Popen | None = None
    module = "broker.cli"

    def _start(self, args: list[str], ready: str, what: str) -> None:
        env = dict(os.environ, BROKER_LOG_LEVEL="WARNING")
        self.proc = subprocess.Popen([sys.executable, "-m", self.module, *args], stdout=subprocess.PIPE, env=env,
                                     text=True)
        try:
            wait_for_line(self.proc, ready, what)
        except BaseException:
            self.__exit__()
            raise

    def cpu_seconds(self) -> float:
        import psutil
        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def __exit__(self, *exc) -> None:
        stop_process(self.proc)


class BrokerProcess(CliProcess):
    """`broker serve` in a fresh store directory; stopped (SIGTERM, then waited for) on exit."""

    def __init__(self, flush: str, workdir: str, namesrv_addr: str = "", extra: str = ""):
        self.port = free_port()
        self.root = tempfile.mkdtemp(prefix=f"net-{flush}-", dir=workdir)
        self.conf = os.path.join(self.root, "broker.conf")
        with open(self.conf, "w") as f:
            f.write(f"brokerIP1=127.0.0.1\nlistenPort={self.port}\nstorePathRootDir={self.root}/store\n"
                    f"flushDiskType={flush}\nmappedFileSizeCommitLog={256 << 20}\nnamesrvAddr={namesrv_addr}\n{extra}")
        self.proc: subprocess.Popen | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "BrokerProcess":
        self._start(["serve", "-c", self.conf, "--status-interval", "3600"], "listening on", "broker")
        return self

    def __exit__(self, *exc) -> None:
        super().__exit__()
        import shutil
        shutil.rmtree(self.root, ignore_errors=True)
