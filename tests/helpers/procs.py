"""Real child processes for the fault tests: started in their own process group, their stdout read
line by line in a thread, killed as a whole group with SIGKILL; and bounded waits for conditions
(another process's state) that have no wake-up we could sleep on."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def wait_until(predicate, timeout: float, what: str):
    """Poll `predicate` until it is truthy; fail after `timeout` seconds naming `what`."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


async def async_wait_until(predicate, timeout: float = 10.0, what: str = "condition"):
    """`wait_until` for code running on the event loop (the loop keeps serving the store meanwhile)."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, process group) of a process, or None if it no longer exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return fields[0], int(fields[2])


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a zombie holds no files, maps or locks)."""
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes of a process group. Orphans that died are reaped by
    whatever adopted them; until then they are zombies and count as gone."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None and st[1] == pgid and st[0] not in ("Z", "X"):
                out.append(int(name))
    return out


class Child:
    """A child in its own session/process group whose stdout lines are collected as they come."""

    def __init__(self, argv: list[str], stderr_path: Path, env: dict | None = None, stdin=subprocess.DEVNULL):
        self.stderr_path = Path(stderr_path)
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr, stdin=stdin,
                                     start_new_session=True, cwd=str(REPO), env=env)
        self.pgid = self.proc.pid  # start_new_session: the child leads its own group
        self.lines: list[str] = []
        self.partial = b""  # bytes after the last newline at EOF (a torn line)
        self.eof = False
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._read, name=f"child-{self.pgid}-stdout", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            raw = out.readline()
            if not raw:
                break
            with self._cv:
                if raw.endswith(b"\n"):
                    self.lines.append(raw[:-1].decode())
                else:
                    self.partial = raw
                self._cv.notify_all()
        with self._cv:
            self.eof = True
            self._cv.notify_all()

    def stderr_tail(self, n: int = 4000) -> str:
        self._stderr.flush()
        data = self.stderr_path.read_bytes()
        return data[-n:].decode("utf-8", "replace")

    def wait_lines(self, predicate, timeout: float, what: str):
        """Wait until `predicate(lines)` is truthy (woken by the reader thread at each new line)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                value = predicate(self.lines)
                if value:
                    return value
                left = deadline - time.monotonic()
                if self.eof or left <= 0:
                    why = "the child's stdout closed" if self.eof else f"{timeout}s passed"
                    raise AssertionError(f"{why} before {what}; child rc={self.proc.poll()}; stderr:\n"
                                         f"{self.stderr_tail()}")
                self._cv.wait(left)

    def kill_group(self, timeout: float = 20.0) -> None:
        """SIGKILL the whole group (the child and every service it started), then wait until none of
        them is left and the stdout pipe reached EOF (every line the group wrote has been read)."""
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout)
        finally:
            wait_until(lambda: not group_members(self.pgid), timeout, f"every process of group {self.pgid} to die")
            self._thread.join(timeout)
            assert not self._thread.is_alive(), "stdout of the killed group did not reach EOF"
            self.proc.stdout.close()
            self._stderr.close()


def service_pids(broker_pid: int) -> dict[str, int]:
    """The broker's child processes: the module each runs -> its pid."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != broker_pid:
                continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # it ended meanwhile
        if b"-m" in argv:
            out[argv[argv.index(b"-m") + 1].decode()] = int(d)
    return out
