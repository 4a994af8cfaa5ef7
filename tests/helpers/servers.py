"""Real Redis and PostgreSQL servers for the reliable-processing tests (issue 9), and a name server
plus broker as two processes. Each server runs on a free loopback port in its own temporary
directory and its own process group, and is stopped (the whole group) on close.

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
from pathlib import Path

from tests.conftest import free_port
from tests.helpers.procs import wait_until

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
        assert os.path.exists(self.binary), "redis-server not installed: run `make test` (it installs it)"
        self.dir = tempfile.mkdtemp(prefix="reliable-redis-")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._log = open(os.path.join(self.dir, "redis.log"), "wb")
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir], stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until(lambda: self.proc.poll() is not None or self._ping(), 20, "redis-server to answer PING")
            assert self.proc.poll() is None, f"redis-server exited: {self.log_tail()}"
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
            assert s.recv(16).startswith(b"+OK")

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
    raise AssertionError("PostgreSQL server binaries not found: run `make test` (it installs postgresql)")


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
            raise AssertionError(f"initdb failed: {init.stdout[-2000:]}\n{init.stderr[-2000:]}")
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
            wait_until(lambda: self.proc.poll() is not None or self._ready(), 60, "postgres to accept connections")
            assert self.proc.poll() is None, f"postgres exited: {self.log_tail()}"
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
