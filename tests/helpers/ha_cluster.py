"""Master/slave set-ups for the HA tests: a name server and brokers as real processes on
loopback, raw remoting calls to them, and a TCP proxy that can stall or cut the HA link."""
from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec

from broker.remoting import codes
from tests.conftest import free_port, wait_for
from tests.helpers.procs import Child
from tests.helpers.real_clients import _request

SEGMENT = 1 << 20


def call(port: int, code: int, ext: dict | None = None, body: bytes = b"", host: str = "127.0.0.1"):
    return asyncio.run(_request(port, code, {k: str(v) for k, v in (ext or {}).items()}, body, host))


def runtime(port: int, host: str = "127.0.0.1") -> dict:
    r = call(port, codes.GET_BROKER_RUNTIME_INFO, host=host)
    table = msgspec.json.decode(bytes(r.body))["table"]
    return {k: (int(v) if v.lstrip("-").isdigit() else v) for k, v in table.items()}


def send_all(port: int, topic: str, bodies: list[bytes], queues: int = 4) -> list:
    """SEND_MESSAGE_V2 of each body, 32 in flight, on one connection; returns the responses."""
    from broker.remoting.command import RemotingCommand
    from broker.remoting.connection import connect

    async def main():
        conn = await connect("127.0.0.1", port)
        sem = asyncio.Semaphore(32)

        async def one(i, body):
            async with sem:
                ext = {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": str(i % queues), "f": "0",
                       "g": str(int(time.time() * 1000)), "h": "0", "i": f"KEYS\x01k{i}\x02", "j": "0", "k": "false"}
                return await conn.request(RemotingCommand.request(codes.SEND_MESSAGE_V2, ext, body), 30)
        try:
            return await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))
        finally:
            conn.close()
    return asyncio.run(main())


class Broker:
    """`broker serve -c broker.conf` in its own process group."""

    def __init__(self, root: Path, name: str, namesrv: str, role: str, broker_id: int, extra: str = "",
                 ha_port: int | None = None, logs: Path | None = None, env: dict | None = None,
                 host: str = "127.0.0.1", wrap: list[str] | None = None):
        self.root, self.name = root / name, name
        self.env = env  # the process's environment (None: this one's), e.g. an LD_PRELOAD fault shim
        # its address (brokerIP1, where it listens) and the argv prefix that starts it there: a
        # network namespace of its own (tests/helpers/netns.py) instead of loopback
        self.host, self.wrap = host, list(wrap or [])
        self.root.mkdir(parents=True, exist_ok=True)
        # where its stderr goes: beside the store unless told otherwise (a test that fills the
        # store's filesystem keeps the log elsewhere, as an operator's logs are)
        self.logs = (logs / name) if logs is not None else self.root
        self.logs.mkdir(parents=True, exist_ok=True)
        self.port, self.ha_port = free_port(), ha_port or free_port()
        self.store = self.root / "store"
        self.conf = self.root / "broker.conf"
        self.conf.write_text(
            f"brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId={broker_id}\nbrokerRole={role}\n"
            f"namesrvAddr={namesrv}\nlistenPort={self.port}\nhaListenPort={self.ha_port}\nbrokerIP1={host}\n"
            f"storePathRootDir={self.store}\nmappedFileSizeCommitLog={SEGMENT}\n"
            f"messageDelayLevel={' '.join(['100ms'] * 18)}\n{extra}")
        self.child: Child | None = None
        self.runs = 0

    def start(self) -> "Broker":
        self.runs += 1
        self.child = Child(self.wrap + [sys.executable, "-m", "broker.cli", "serve", "-c", str(self.conf)],
                           self.logs / f"stderr.{self.runs}", env=self.env)
        self.child.wait_lines(lambda ls: any("listening on" in line for line in ls), 60, f"{self.name} to listen")
        return self

    def stop(self) -> None:
        """SIGTERM and wait: a clean stop."""
        if self.child is not None and self.child.proc.poll() is None:
            self.child.proc.send_signal(signal.SIGTERM)
            self.child.proc.wait(60)
        if self.child is not None:
            self.child.kill_group()

    def kill9(self) -> None:
        self.child.kill_group()

    def stderr(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("stderr.*")))

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def info(self) -> dict:
        return runtime(self.port, self.host)


class NameServer:
    def __init__(self, root: Path, host: str = "127.0.0.1", wrap: list[str] | None = None):
        self.port, self.host = free_port(), host
        self.addr = f"{host}:{self.port}"
        self.child = Child(list(wrap or []) + [sys.executable, "-m", "broker.cli", "namesrv", "--listen", self.addr],
                           root / "namesrv.err")
        self.child.wait_lines(lambda ls: any("listening" in line for line in ls), 30, "the name server")

    def route(self, topic: str) -> dict | None:
        r = call(self.port, codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, host=self.host)
        return msgspec.json.decode(bytes(r.body)) if r.code == codes.SUCCESS else None

    def stop(self) -> None:
        self.child.proc.send_signal(signal.SIGTERM)
        try:
            self.child.proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        self.child.kill_group()


def wait_replicated(master: Broker, slave: Broker, timeout: float = 60) -> int:
    """Until the slave holds (and has dispatched) everything the master wrote."""
    end = master.info()["commitLogMaxOffset"]
    wait_for(lambda: (lambda i: i["commitLogMaxOffset"] >= end and i["dispatchedOffset"] >= end)(slave.info()),
             timeout, f"the slave to reach {end}")
    return end


class Proxy:
    """127.0.0.1:port -> target, forwarding both ways; `stall()` stops forwarding (the link stays
    open and silent), `cut()` closes every link and refuses new ones, `heal()` undoes both."""

    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.refusing = False
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                a, _ = self.server.accept()
            except OSError:
                return
            if self.refusing:
                a.close()
                continue
            try:
                b = socket.create_connection(self.target)
            except OSError:
                a.close()
                continue
            for s in (a, b):  # forward each write as it comes, as the endpoints themselves do
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.socks += [a, b]
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self.flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stall(self) -> None:
        self.flowing.clear()

    def cut(self) -> None:
        self.refusing = True
        with self.lock:
            for s in self.socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.socks.clear()
        self.flowing.set()

    def heal(self) -> None:
        self.refusing = False
        self.flowing.set()

    def close(self) -> None:
        self.server.close()
        self.cut()
