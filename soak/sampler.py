"""Every `every` seconds, from /proc, for every process of every role's process group (a broker's
service processes included): VmRSS, RssAnon, open descriptors and CPU time.

VmRSS counts the pages of the commit log and consume queues a process has mapped and touched,
which grow with the log by design; RssAnon is the process's own memory (heap, stacks), the figure
a leak would show in. Both are kept; the verdict (trend.py) is on RssAnon."""
from __future__ import annotations

import os
import threading
import time

from tests.helpers.procs import group_members


def label_of(pid: int) -> str:
    """A process's name within its role: the service module a broker runs it as
    (`python -m broker.services.flush_service` -> flush_service), `main` for the broker or server
    itself, `java` for a JVM."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return "gone"
    if b"-m" in argv:
        mod = argv[argv.index(b"-m") + 1].decode()
        return "main" if mod == "broker.cli" else mod.rsplit(".", 1)[-1]
    return os.path.basename(argv[0].decode()) if argv and argv[0] else "?"


def status(pid: int) -> tuple[int, int] | None:
    """(VmRSS, RssAnon) in bytes."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "RssAnon:")):
                    out[line.split(":")[0]] = int(line.split()[1]) * 1024
    except OSError:
        return None
    return out.get("VmRSS", 0), out.get("RssAnon", 0)


def open_files(pid: int) -> tuple[int, int]:
    """(descriptors on the store's files, every other descriptor: sockets, pipes, eventfds, other
    files). The first grows with the log kept (a 1 MiB segment each, until the cleaner deletes
    them after fileReservedTime); the second is what a leak of connections would show in."""
    store = other = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if "/store/" in target:
                store += 1
            else:
                other += 1
    except OSError:
        return -1, -1
    return store, other


def cpu_seconds(pid: int) -> float:
    """utime + stime so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return -1.0
    return (int(fields[11]) + int(fields[12])) / TICKS


TICKS = os.sysconf("SC_CLK_TCK")
COLUMNS = ["t_s", "role", "process", "pid", "vm_rss", "rss_anon", "store_fds", "other_fds", "cpu_s"]


class Sampler(threading.Thread):
    """rows: (t s since t0, role, label, pid, VmRSS, RssAnon, store fds, other fds, CPU seconds)."""

    def __init__(self, roles, t0: float, every: float = 10.0):
        super().__init__(name="soak-sampler", daemon=True)
        self.roles, self.t0, self.every = roles, t0, every  # roles(): {role: group leader pid}
        self.rows: list[tuple] = []
        self._halt = threading.Event()

    def sample(self) -> None:
        t = time.monotonic() - self.t0
        for role, leader in self.roles().items():
            for pid in sorted(group_members(leader)):
                st = status(pid)
                if st is None:
                    continue
                self.rows.append((round(t, 1), role, label_of(pid), pid, st[0], st[1], *open_files(pid),
                                  round(cpu_seconds(pid), 2)))

    def run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # a process that went away between listing and reading: next time
                pass
            if self._halt.wait(self.every):
                return

    def stop(self) -> None:
        self._halt.set()
        self.join(30)
