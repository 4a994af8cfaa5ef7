"""Real Redis and PostgreSQL servers on loopback, for the tests of broker.reliable and for its
benchmark (bench/reliable_bench.py), and the free ports they (and the tests' other servers) listen
on. Each server runs on a free loopback port in its own temporary directory and its own process
group, and is stopped (the whole group) on close.

It lives under tools/ because both the tests and the bench start these servers and neither may
import the other: the bench must run from a checkout whatever its tests import.

PostgreSQL refuses to run as root: under euid 0 initdb and postgres run as the `postgres` user that
Debian's package creates, in a data directory chowned to it. Durability is switched off (fsync,
synchronous_commit) unless asked for: the tests check logic, not the disk.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class ServerUnavailable(RuntimeError):
    """A server could not be started: its binaries are missing, or it did not come up."""


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for servers whose port must be known before they start),
    never one handed out before in this run: ports are often chosen for several servers before any
    of them binds, and the kernel may offer a port again while its first taker has not bound it yet
    (a controller-mode broker's HA port once came out equal to a controller's).
    Any port handed out may be a broker's listenPort, and a broker also listens on listenPort - 2
    (its VIP channel, as RocketMQ's): that one is free too and reserved with it, never handed out."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 3 or port in _HANDED_OUT or port - 2 in _HANDED_OUT or not _bindable(port - 2):
            continue
        _HANDED_OUT.update((port, port - 2))
        return port


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind (reuse_address)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait_up(proc: subprocess.Popen, ready, timeout: float, what: str, log_tail) -> None:
    """Poll `ready()` (another process's state: no wake-up exists for it) until it is true; raise
    if the server exits first or the time is up."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while not ready():
        if proc.poll() is not None:
            raise ServerUnavailable(f"{what} exited (status {proc.returncode}): {log_tail()}")
        if time.monotonic() > deadline:
            raise ServerUnavailable(f"{what} did not come up within {timeout:g} s: {log_tail()}")
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.2):
            return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    """Ask the group to stop with `sig`, then SIGKILL whatever is left."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout)


class RedisServer:
    def __init__(self):
        self.binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(self.binary):
            raise ServerUnavailable("redis-server not installed: run `make testdeps` (make test and make bench do)")
        self.dir = tempfile.mkdtemp(prefix="reliable-redis-")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._log = open(os.path.join(self.dir, "redis.log"), "wb")
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir], stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_up(self.proc, self._ping, 20, "redis-server", self.log_tail)
        except BaseException:
            self.close()
            raise

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), 0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def flushall(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), 5) as s:
            s.sendall(b"FLUSHALL\r\n")
            answer = s.recv(16)
        if not answer.startswith(b"+OK"):
            raise RuntimeError(f"redis-server answered FLUSHALL with {answer!r}")

    def log_tail(self) -> str:
        return Path(self.dir, "redis.log").read_bytes()[-3000:].decode(errors="replace")

    def close(self) -> None:
        _stop(self.proc)
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def pg_bindir() -> str:
    """Where initdb and postgres are: `pg_config --bindir`, else Debian's versioned directories."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(candidate, "postgres")):
            return candidate
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True).stdout.strip()
        if os.path.exists(os.path.join(out, "postgres")):
            return out
    raise ServerUnavailable("PostgreSQL server binaries not found: run `make testdeps` (make test and make bench do)")


class PostgresServer:
    """initdb into a fresh directory and run postgres on 127.0.0.1:<free port>, trust auth;
    `durable`: PostgreSQL's own defaults (fsync and synchronous_commit on), for benchmarks."""

    def __init__(self, durable: bool = False):
        bindir = pg_bindir()
        self.dir = tempfile.mkdtemp(prefix="reliable-pg-")
        data, self.sockdir = os.path.join(self.dir, "data"), os.path.join(self.dir, "sock")
        os.mkdir(self.sockdir)
        self.port = free_port()
        self._as = {}
        if os.geteuid() == 0:  # postgres will not run as root: hand the directory to `postgres`
            pw = pwd.getpwnam("postgres")
            for path in (self.dir, self.sockdir):
                os.chown(path, pw.pw_uid, pw.pw_gid)
            os.chmod(self.dir, 0o700)
            self._as = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        env = dict(os.environ, LC_ALL="C", LANG="C")
        init = subprocess.run([os.path.join(bindir, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
                               "-E", "UTF8", "--no-sync"], capture_output=True, text=True, env=env,
                              cwd=self.dir, **self._as)
        if init.returncode != 0:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise ServerUnavailable(f"initdb failed: {init.stdout[-2000:]}\n{init.stderr[-2000:]}")
        self._log_path = os.path.join(self.dir, "postgres.log")
        self._log = open(self._log_path, "wb")
        self.proc = subprocess.Popen(
            [os.path.join(bindir, "postgres"), "-D", data, "-h", "127.0.0.1", "-p", str(self.port),
             "-k", self.sockdir, "-c", "max_connections=200",
             *([] if durable else ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"])],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=self.dir, **self._as)
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._n = 0
        try:
            _wait_up(self.proc, self._ready, 60, "postgres", self.log_tail)
        except BaseException:
            self.close()
            raise

    def _ready(self) -> bool:
        import psycopg
        if not _port_open(self.port):
            return False
        try:
            with psycopg.connect(self.url, connect_timeout=2):
                return True
        except psycopg.OperationalError:  # "the database system is starting up"
            return False

    def new_database(self, prefix: str = "t") -> str:
        """A fresh, empty database; its URL."""
        import psycopg
        self._n += 1
        name = f"{prefix}_{os.getpid()}_{self._n}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def log_tail(self) -> str:
        return Path(self._log_path).read_bytes()[-3000:].decode(errors="replace")

    def close(self) -> None:
        if getattr(self, "proc", None) is not None:
            _stop(self.proc, signal.SIGINT)  # SIGINT: fast shutdown (rolls back, no waiting on clients)
            self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
