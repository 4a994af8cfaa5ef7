"""Peer brokers measured in the same benchmark run as ours, so results read as ratios project/peer.

    python -m bench.peers --seconds 3      # smoke matrix: both peers, each mode, 1 KiB, 1 and 64 in flight

Peers (Debian packages, installed by `available()` with apt-get when missing):

* Redis Streams (redis-server 7.0.x), one `XADD bench * d <body>` per message on one loopback
  connection. ASYNC_FLUSH = `--appendonly yes --appendfsync everysec`, SYNC_FLUSH = `--appendfsync
  always` (redis fsyncs the AOF before answering; it groups the writes of one event-loop pass),
  SYNC_MASTER = everysec master plus a replica (`--replicaof`, same AOF settings) and every XADD
  pipelined with `WAIT 1 <timeout>` in the same round trip (the answer comes once the replica has
  acknowledged the write). RDB snapshots are off (`--save ''`).
* NATS JetStream (nats-server 2.9.x, `-js`), a file-storage stream "BENCH" on subject "bench",
  one `PUB bench <reply> <body>` per message, timed until its JetStream ack (`{"stream":..,"seq":..}`)
  arrives. ASYNC_FLUSH = default file storage (2.9 writes each message to the block file without
  fsync and syncs in the background; there is no knob in 2.9: `sync_interval` arrived in 2.10).
  SYNC_FLUSH: not possible on 2.9 (no `sync_interval: always`), so PeerUnavailable. SYNC_MASTER =
  3-node cluster (routes on loopback), stream with num_replicas=3, default file storage: the ack
  comes after a RAFT quorum (2 of 3) holds the message.

Drivers (both ours, asyncio Protocol with uvloop when importable, pre-encoded requests, closed
loop with `in_flight` requests outstanding; an answer immediately releases the next request, the
writes of one read batched into one transport.write): raw RESP for redis, on one connection
pipelining all `in_flight` requests, except SYNC_MASTER, where WAIT blocks its connection, so
`in_flight` connections with one XADD+WAIT outstanding each; raw NATS protocol for JetStream on one
connection (acks are matched to requests by a reply subject per slot). Latency is per request in ns from the write to the parse of its
answer. Counted: requests answered inside the timed window; outstanding ones are drained after.
`server_cpu_s` is the user+system CPU time of all server processes (master and replica, every
cluster node) over the timed window, via psutil; `driver_cpu_s` (extra key) is this process's CPU
time over the same window, to show the driver was not the limit.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

PEER_MODES = ("ASYNC_FLUSH", "SYNC_FLUSH", "SYNC_MASTER")
PEERS = ("redis", "nats")
WAIT_TIMEOUT_MS = 5000          # WAIT 1 <timeout>: a replica that never acks fails the cell, not hangs it
START_TIMEOUT = 30.0


class PeerUnavailable(Exception):
    """The peer cannot run this cell (missing binary, or a mode it has no equivalent for)."""


# ------------------------------------------------------------------------------------ install
_BINARIES = {"redis": ("redis-server", "redis-server"), "nats": ("nats-server", "nats-server")}


def _which(binary: str) -> str | None:
    return shutil.which(binary) or next((p for p in (f"/usr/bin/{binary}", f"/usr/sbin/{binary}")
                                         if os.access(p, os.X_OK)), None)


def _apt_install(pkgs: list[str], progress) -> str | None:
    """None on success, else the reason."""
    if not shutil.which("apt-get"):
        return "apt-get not found"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-qq", *pkgs]
    try:
        progress(f"peers: apt-get install {' '.join(pkgs)}")
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
        if r.returncode != 0:
            progress("peers: install failed, apt-get update and retry")
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, text=True, timeout=600, check=False)
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
        if r.returncode != 0:
            return f"apt-get install {' '.join(pkgs)} failed: {(r.stderr or r.stdout).strip()[-300:]}"
    except Exception as e:  # noqa: BLE001 - never raises
        return f"apt-get install {' '.join(pkgs)} failed: {e!r}"
    return None


def _version(binary: str) -> str:
    """"redis-server 7.0.15" / "nats-server 2.9.10"."""
    import re
    try:
        r = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=False)
        m = re.search(r"v=?(\d+\.\d+\.\d+)", r.stdout or r.stderr)
        return f"{os.path.basename(binary)} {m.group(1) if m else '?'}"
    except Exception:  # noqa: BLE001
        return f"{os.path.basename(binary)} ?"


def available(progress=print) -> dict[str, str | None]:
    """{"redis": None or the reason it can't run, "nats": ...}; installs the Debian packages
    redis-server and nats-server when missing. Never raises."""
    out: dict[str, str | None] = {}
    try:
        missing = [pkg for peer, (binary, pkg) in _BINARIES.items() if not _which(binary)]
        reason = _apt_install(missing, progress) if missing else None
        for peer, (binary, pkg) in _BINARIES.items():
            out[peer] = None if _which(binary) else (reason or f"{binary} not found after installing {pkg}")
        try:
            import psutil  # noqa: F401
        except Exception as e:  # noqa: BLE001
            for peer, why in out.items():
                out[peer] = why or f"psutil missing: {e!r}"
    except Exception as e:  # noqa: BLE001
        for peer in _BINARIES:
            out.setdefault(peer, f"availability check failed: {e!r}")
    return out


# ------------------------------------------------------------------------------------ processes
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} at start: {_tail(proc)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f}s")


def _tail(proc: subprocess.Popen) -> str:
    log = getattr(proc, "_bench_log", None)
    if not log:
        return ""
    try:
        with open(log, "rb") as f:
            return f.read()[-500:].decode(errors="replace")
    except OSError:
        return ""


def _spawn(cmd: list[str], log: str) -> subprocess.Popen:
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    proc._bench_log = log  # type: ignore[attr-defined]
    return proc


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _cpu(procs: list[subprocess.Popen]) -> float:
    import psutil
    total = 0.0
    for p in procs:
        try:
            t = psutil.Process(p.pid).cpu_times()
            total += t.user + t.system
        except Exception:  # noqa: BLE001, S110 - a dead process counts nothing
            pass
    return total


# ------------------------------------------------------------------------------------ closed loop
class _Loop(asyncio.Protocol):
    """Closed loop on one connection: `in_flight` requests outstanding, each answer releases one.

    Subclasses parse answers in `feed(buf) -> (consumed, list of slots answered)`. Requests are
    pre-encoded per slot (`self.req[slot]`). Redis answers in order, so a FIFO of slots suffices;
    NATS acks carry the slot in the reply subject.
    """

    def __init__(self, reqs: list[bytes], in_flight: int):
        self.reqs = reqs
        self.in_flight = in_flight
        self.sent_at = [0] * in_flight
        self.buf = bytearray()
        self.lat: list[int] = []
        self.count = 0
        self.outstanding = 0
        self.stop_at = 0.0          # perf_counter; 0 = not started
        self.counting = False
        self.error: BaseException | None = None
        self.drained: asyncio.Future | None = None
        self.transport = None
        self.conn_lost: asyncio.Future | None = None

    # transport callbacks
    def connection_made(self, transport) -> None:
        self.transport = transport
        try:
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except Exception:  # noqa: BLE001, S110
            pass

    def connection_lost(self, exc) -> None:
        self._fail(exc or ConnectionError("server closed the connection"))

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        if self.drained is not None and not self.drained.done():
            self.drained.set_exception(self.error)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        try:
            used, slots = self.feed(self.buf)
        except BaseException as e:  # noqa: BLE001
            self._fail(e)
            self.transport.close()
            return
        if used:
            del self.buf[:used]
        if not slots:
            return
        now = time.perf_counter_ns()
        again = time.perf_counter() < self.stop_at
        out = []
        sent_at = self.sent_at
        for s in slots:
            if self.counting:
                self.lat.append(now - sent_at[s])
                self.count += 1
            if again:
                sent_at[s] = now
                out.append(self.reqs[s])
            else:
                self.outstanding -= 1
        if out:
            self.resent(slots)
            self.transport.write(b"".join(out))
        elif self.outstanding == 0 and self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def feed(self, buf: bytearray) -> tuple[int, list[int]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def resent(self, slots: list[int]) -> None:
        pass

    def begin(self) -> None:
        self.drained = asyncio.get_running_loop().create_future()
        self.stop_at = float("inf")
        now = time.perf_counter_ns()
        for s in range(self.in_flight):
            self.sent_at[s] = now
        self.outstanding = self.in_flight
        self.transport.write(b"".join(self.reqs))


async def _closed_loop(protos: list[_Loop], seconds: float, warmup: float, on_start, on_end
                       ) -> tuple[int, list[int], float, float]:
    """Run the protocols' closed loops together: `warmup` uncounted, then `seconds` counted; then
    stop issuing, drain what is outstanding. Returns (answers counted, latencies ns, elapsed s,
    driver CPU s over the window)."""
    for p in protos:
        p.begin()
    if warmup > 0:
        await asyncio.sleep(warmup)
    for p in protos:
        if p.error:
            raise p.error
    on_start()
    c0 = time.process_time()
    t0 = time.perf_counter()
    for p in protos:
        p.lat.clear()
        p.count = 0
        p.counting = True
        p.stop_at = t0 + seconds
    await asyncio.sleep(seconds)
    for p in protos:
        p.counting = False
    elapsed = time.perf_counter() - t0
    driver_cpu = time.process_time() - c0
    on_end()
    count = sum(p.count for p in protos)
    lat = [x for p in protos for x in p.lat]
    await asyncio.wait_for(asyncio.gather(*(p.drained for p in protos)), 60)
    for p in protos:
        if p.error:
            raise p.error
    return count, lat, elapsed, driver_cpu


def _new_loop() -> tuple[asyncio.AbstractEventLoop, str]:
    try:
        import uvloop
        return uvloop.new_event_loop(), "uvloop"
    except Exception:  # noqa: BLE001
        return asyncio.new_event_loop(), "asyncio"


# ------------------------------------------------------------------------------------ redis
def _resp(*args: bytes | str) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def _resp_one(buf: bytearray, pos: int) -> int:
    """End of one RESP reply starting at pos, or -1 if incomplete; raises on an error reply."""
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        return -1
    t = buf[pos]
    if t in (0x2B, 0x3A):                 # + :
        return nl + 2
    if t == 0x2D:                          # -
        raise RuntimeError(f"redis error: {bytes(buf[pos + 1:nl]).decode(errors='replace')}")
    if t == 0x24:                          # $
        n = int(buf[pos + 1:nl])
        if n < 0:
            return nl + 2
        end = nl + 2 + n + 2
        return end if end <= len(buf) else -1
    if t == 0x2A:                          # * (not expected; parse generically)
        n = int(buf[pos + 1:nl])
        p = nl + 2
        for _ in range(max(0, n)):
            p = _resp_one(buf, p)
            if p < 0:
                return -1
        return p
    raise RuntimeError(f"unexpected RESP byte {chr(t)!r}")


class _RedisLoop(_Loop):
    def __init__(self, reqs: list[bytes], in_flight: int, replies_per_req: int, check_wait: bool):
        super().__init__(reqs, in_flight)
        self.per = replies_per_req
        self.check_wait = check_wait
        self.fifo: collections.deque[int] = collections.deque()
        self.pending = 0                   # replies parsed of the head request

    def feed(self, buf: bytearray) -> tuple[int, list[int]]:
        pos = 0
        slots = []
        n = len(buf)
        while pos < n:
            start = pos
            end = _resp_one(buf, pos)
            if end < 0:
                break
            pos = end
            self.pending += 1
            if self.pending == self.per:
                if self.check_wait and buf[start] == 0x3A and int(buf[start + 1:end - 2]) < 1:
                    raise RuntimeError("WAIT 1 timed out: the replica did not acknowledge")
                self.pending = 0
                slots.append(self.fifo.popleft())
        return pos, slots

    def resent(self, slots: list[int]) -> None:
        self.fifo.extend(slots)          # answers come in the order the requests were written

    def begin(self) -> None:
        self.fifo.extend(range(self.in_flight))
        super().begin()


def _redis_cmd(port: int, *args: str, timeout: float = 10.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(_resp(*args))
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            buf = bytearray(data)
            if _resp_one(buf, 0) > 0:
                return data
    return data


def _redis_server(port: int, root: str, fsync: str, replicaof: int | None = None) -> subprocess.Popen:
    d = tempfile.mkdtemp(prefix=f"redis-{port}-", dir=root)
    cmd = [_which("redis-server") or "redis-server", "--bind", "127.0.0.1", "--port", str(port),
           "--dir", d, "--appendonly", "yes", "--appendfsync", fsync, "--save", "",
           "--protected-mode", "yes", "--daemonize", "no", "--logfile", "", "--loglevel", "warning"]
    if replicaof:
        cmd += ["--replicaof", "127.0.0.1", str(replicaof)]
    proc = _spawn(cmd, os.path.join(d, "server.log"))
    _wait_port(port, proc, "redis-server")
    return proc


def _redis_cell(mode: str, body: int, in_flight: int, seconds: float, root: str, progress) -> dict:
    procs: list[subprocess.Popen] = []
    try:
        fsync = "always" if mode == "SYNC_FLUSH" else "everysec"
        port = _free_port()
        procs.append(_redis_server(port, root, fsync))
        if mode == "SYNC_MASTER":
            rport = _free_port()
            procs.append(_redis_server(rport, root, fsync, replicaof=port))
            deadline = time.monotonic() + START_TIMEOUT
            while b"master_link_status:up" not in _redis_cmd(rport, "INFO", "replication"):
                if time.monotonic() > deadline:
                    raise RuntimeError("redis replica did not link to its master")
                time.sleep(0.1)
        payload = os.urandom(body // 2 + 1).hex()[:body].encode()
        xadd = _resp("XADD", "bench", "*", "d", payload)
        if mode == "SYNC_MASTER":
            req, per = xadd + _resp("WAIT", "1", str(WAIT_TIMEOUT_MS)), 2
        else:
            req, per = xadd, 1
        # WAIT blocks its connection (redis runs nothing more from it until the replica acks), so
        # SYNC_MASTER keeps its requests outstanding on one connection each; the other modes
        # pipeline all of them on one connection (fastest for redis and for the driver).
        shares = [1] * in_flight if per == 2 else [in_flight]
        loop, loop_name = _new_loop()
        cpu = [0.0, 0.0]
        try:
            async def go():
                protos = []
                try:
                    for slots in shares:
                        _, proto = await loop.create_connection(
                            lambda n=slots: _RedisLoop([req] * n, n, per, per == 2), "127.0.0.1", port)
                        protos.append(proto)
                    return await _closed_loop(protos, seconds, min(0.5, seconds / 4),
                                              lambda: cpu.__setitem__(0, _cpu(procs)),
                                              lambda: cpu.__setitem__(1, _cpu(procs)))
                finally:
                    for proto in protos:
                        proto.transport.close()
            count, lat, elapsed, driver_cpu = loop.run_until_complete(go())
        finally:
            loop.close()
        driver = (f"raw RESP over {loop_name} Protocol, {len(shares)} connection{'s' * (len(shares) > 1)}"
                  f" x {shares[0]} pipelined, pre-encoded XADD"
                  + (" + WAIT 1 pipelined in the same write per request" if per == 2 else "")
                  + f"; {_version(_which('redis-server') or 'redis-server')}; appendfsync {fsync}"
                  + (", 1 replica" if mode == "SYNC_MASTER" else ""))
        return _result("redis", mode, body, in_flight, count, elapsed, lat, cpu[1] - cpu[0], driver, driver_cpu)
    finally:
        for p in reversed(procs):
            _stop(p)


# ------------------------------------------------------------------------------------ nats
INBOX = b"_INBOX.bench."


class _NatsLoop(_Loop):
    """Parses MSG/HMSG/PING/+OK/-ERR; a MSG on INBOX<slot> is the JetStream ack of that slot."""

    def __init__(self, reqs: list[bytes], in_flight: int):
        super().__init__(reqs, in_flight)
        self.control: asyncio.Queue | None = None      # non-slot messages (API answers, PONG)

    def feed(self, buf: bytearray) -> tuple[int, list[int]]:
        pos = 0
        slots = []
        n = len(buf)
        while pos < n:
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                break
            op = buf[pos:pos + 4]
            if op == b"MSG " or op == b"HMSG":
                head = bytes(buf[pos:nl]).split()
                hmsg = op == b"HMSG"
                total = int(head[-1])
                end = nl + 2 + total + 2
                if end > n:
                    break
                subject = head[1]
                payload = bytes(buf[nl + 2:nl + 2 + total])
                pos = end
                if subject.startswith(INBOX) and subject[len(INBOX):].isdigit():
                    if hmsg or payload.startswith(b'{"error"') or b'"error"' in payload[:200]:
                        raise RuntimeError(f"JetStream publish failed: {payload[:300]!r}")
                    slots.append(int(subject[len(INBOX):]))
                else:
                    self._control((subject, payload))
            elif op == b"PING":
                self.transport.write(b"PONG\r\n")
                pos = nl + 2
            elif op == b"PONG":
                self._control((b"PONG", b""))
                pos = nl + 2
            elif op[:3] == b"+OK" or op == b"INFO":
                pos = nl + 2
            elif op == b"-ERR":
                raise RuntimeError(f"nats error: {bytes(buf[pos:nl]).decode(errors='replace')}")
            else:
                raise RuntimeError(f"unexpected NATS line {bytes(buf[pos:nl])[:100]!r}")
        return pos, slots

    def _control(self, item) -> None:
        if self.control is not None:
            self.control.put_nowait(item)

    async def request(self, subject: str, payload: bytes, timeout: float = 10.0) -> bytes:
        self.transport.write(b"PUB %s %sctl %d\r\n%s\r\n" % (subject.encode(), INBOX, len(payload), payload))
        while True:
            subj, data = await asyncio.wait_for(self.control.get(), timeout)
            if subj == INBOX + b"ctl":
                return data


def _nats_servers(root: str, nodes: int) -> tuple[list[subprocess.Popen], list[int]]:
    procs, ports = [], [_free_port() for _ in range(nodes)]
    cports = [_free_port() for _ in range(nodes)] if nodes > 1 else []
    try:
        for i in range(nodes):
            d = tempfile.mkdtemp(prefix=f"nats-{i}-", dir=root)
            cmd = [_which("nats-server") or "nats-server", "-a", "127.0.0.1", "-p", str(ports[i]), "-js",
                   "-sd", os.path.join(d, "store"), "-n", f"bench{i}", "-m", "0"]
            if nodes > 1:
                cmd += ["--cluster_name", "bench", "--cluster", f"nats://127.0.0.1:{cports[i]}",
                        "--routes", ",".join(f"nats://127.0.0.1:{cports[j]}" for j in range(nodes) if j != i)]
            procs.append(_spawn(cmd, os.path.join(d, "server.log")))
        for p, port in zip(procs, ports):
            _wait_port(port, p, "nats-server")
    except BaseException:
        for p in procs:
            _stop(p)
        raise
    return procs, ports


def _nats_cell(mode: str, body: int, in_flight: int, seconds: float, root: str, progress) -> dict:
    if mode == "SYNC_FLUSH":
        raise PeerUnavailable("nats-server 2.9 has no per-message fsync (`sync_interval: always` "
                              "arrived in 2.10); Debian bookworm ships 2.9.x")
    nodes = 3 if mode == "SYNC_MASTER" else 1
    procs, ports = _nats_servers(root, nodes)
    try:
        payload = os.urandom(body // 2 + 1).hex()[:body].encode()
        reqs = [b"PUB bench %s%d %d\r\n%s\r\n" % (INBOX, s, body, payload) for s in range(in_flight)]
        loop, loop_name = _new_loop()
        cpu = [0.0, 0.0]
        try:
            async def go():
                # read INFO first, then CONNECT
                _, proto = await loop.create_connection(lambda: _NatsLoop(reqs, in_flight), "127.0.0.1", ports[0])
                proto.control = asyncio.Queue()
                connect = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True,
                           "lang": "python-raw", "version": "0", "protocol": 1}
                proto.transport.write(b"CONNECT " + json.dumps(connect).encode()
                                      + b"\r\nSUB " + INBOX + b"* 1\r\nPING\r\n")
                try:
                    while (await asyncio.wait_for(proto.control.get(), 10))[0] != b"PONG":
                        pass
                    cfg = {"name": "BENCH", "subjects": ["bench"], "storage": "file", "num_replicas": nodes,
                           "retention": "limits", "discard": "old"}
                    deadline = time.monotonic() + START_TIMEOUT
                    while True:       # a fresh cluster answers "temporarily unavailable" until its meta leader
                        try:
                            ans = json.loads(await proto.request("$JS.API.STREAM.CREATE.BENCH",
                                                                 json.dumps(cfg).encode(), timeout=5))
                        except TimeoutError:
                            ans = {"error": {"description": "timeout"}}
                        if "error" not in ans:
                            break
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"JetStream stream create failed: {ans['error']}")
                        await asyncio.sleep(0.25)
                    if nodes > 1:     # the stream's own RAFT group needs a leader before acks flow
                        while True:
                            info = json.loads(await proto.request("$JS.API.STREAM.INFO.BENCH", b"", timeout=5))
                            if info.get("cluster", {}).get("leader"):
                                break
                            if time.monotonic() > deadline:
                                raise RuntimeError(f"JetStream stream has no leader: {info}")
                            await asyncio.sleep(0.25)
                    return await _closed_loop([proto], seconds, min(0.5, seconds / 4),
                                              lambda: cpu.__setitem__(0, _cpu(procs)),
                                              lambda: cpu.__setitem__(1, _cpu(procs)))
                finally:
                    proto.transport.close()
            count, lat, elapsed, driver_cpu = loop.run_until_complete(go())
        finally:
            loop.close()
        driver = (f"raw NATS protocol over {loop_name} Protocol, 1 connection, pre-encoded PUB with a reply "
                  f"inbox per slot, timed to the JetStream ack; {_version(_which('nats-server') or 'nats-server')}; "
                  + ("3-node cluster, stream R=3, file storage, default sync" if nodes > 1
                     else "1 node, stream R=1, file storage, default sync (no fsync per message)"))
        return _result("nats", mode, body, in_flight, count, elapsed, lat, cpu[1] - cpu[0], driver, driver_cpu)
    finally:
        for p in reversed(procs):
            _stop(p)


# ------------------------------------------------------------------------------------ cells
def _pct_us(s: list[int], q: float) -> float:
    if not s:
        return float("nan")
    return s[min(len(s) - 1, int(q * len(s)))] / 1000


def _result(peer, mode, body, in_flight, count, elapsed, lat, cpu_s, driver, driver_cpu_s) -> dict:
    lat = sorted(lat)
    return {"peer": peer, "mode": mode, "body": body, "in_flight": in_flight, "msgs": count,
            "seconds": elapsed, "msgs_per_s": count / elapsed if elapsed else 0.0,
            "mb_per_s": count * body / elapsed / 1e6 if elapsed else 0.0,
            "p50_us": _pct_us(lat, 0.5), "p99_us": _pct_us(lat, 0.99), "p999_us": _pct_us(lat, 0.999),
            "server_cpu_s": cpu_s, "driver": driver,
            # the driver's own CPU over the window: near `seconds` means the driver, not the server, was the limit
            "driver_cpu_s": driver_cpu_s}


def run_peer(peer: str, mode: str, body: int, in_flight: int, seconds: float, workdir: str,
             progress=print) -> dict:
    """One cell (see the module doc); raises PeerUnavailable for a mode the peer cannot do."""
    if peer not in PEERS:
        raise PeerUnavailable(f"unknown peer {peer!r}")
    if mode not in PEER_MODES:
        raise PeerUnavailable(f"{peer} has no equivalent of {mode}")
    binary = _BINARIES[peer][0]
    if not _which(binary):
        raise PeerUnavailable(f"{binary} not installed (call available() first)")
    os.makedirs(workdir, exist_ok=True)
    root = tempfile.mkdtemp(prefix=f"peer-{peer}-{mode}-", dir=workdir)
    try:
        cell = _redis_cell if peer == "redis" else _nats_cell
        return cell(mode, body, max(1, int(in_flight)), seconds, root, progress)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def line(r: dict) -> str:
    return (f"{r['peer']} {r['mode']} body {r['body']} in flight {r['in_flight']}: "
            f"{r['msgs_per_s']:,.0f} msgs/s ({r['mb_per_s']:,.1f} MB/s), p50 {r['p50_us']:,.0f} us "
            f"p99 {r['p99_us']:,.0f} us p999 {r['p999_us']:,.0f} us; server CPU "
            f"{1e6 * r['server_cpu_s'] / max(1, r['msgs']):.2f} us/msg, driver CPU "
            f"{100 * r.get('driver_cpu_s', 0) / max(1e-9, r['seconds']):.0f}%")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--in-flight", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--peers", nargs="+", default=list(PEERS))
    ap.add_argument("--modes", nargs="+", default=list(PEER_MODES))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None, help="write the cells to this file")
    a = ap.parse_args(argv)
    avail = available()
    workdir = a.workdir or tempfile.mkdtemp(prefix="bench-peers-")
    cells, drivers = [], {}
    try:
        for peer in a.peers:
            if avail.get(peer):
                print(f"{peer}: unavailable: {avail[peer]}", flush=True)
                continue
            for mode in a.modes:
                for n in a.in_flight:
                    try:
                        r = run_peer(peer, mode, a.body, n, a.seconds, workdir)
                    except PeerUnavailable as e:
                        print(f"{peer} {mode} in flight {n}: unavailable: {e}", flush=True)
                        break
                    cells.append(r)
                    drivers[(peer, mode)] = r["driver"]
                    print(line(r), flush=True)
        for (peer, mode), d in drivers.items():
            print(f"driver {peer} {mode}: {d}")
    finally:
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(cells, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
