"""What the replicated-group benchmarks share (bench/dledger_bench.py, bench/controller_bench.py):
a group of `broker serve` processes on loopback routed by a name server, its throughput through the
project's client, and the write outage a client sees after kill -9s of the master.

- `Member`: one `broker serve -c broker.conf` in its own store directory (the mode's keys are the
  caller's); `kill9()` is SIGKILL of the broker process (its service processes follow it by
  PR_SET_PDEATHSIG), `start()` starts it again on the same store.
- `Group`: the members (and whatever else the mode runs, `_start_others`/`_stop_others`); a mode
  says which member is master (`is_master`) and when the group is whole again after a restart
  (`ready`).
- `throughput_cell`: `Producer.send` of 1 KiB bodies, 64 in flight, after a warm-up; msgs/s, p50/p99
  per send, CPU-us per message of each member (its process tree).
- `outage_cell`: four senders send without pause through the project's client (its route from the
  name server, refetched after a failure, as a real client finds a new master); `kills` times the
  master is killed with SIGKILL after 200 SEND_OKs at it, then restarted, and the next kill waits
  for `group.ready()`. The outage of one kill is from the last SEND_OK before the kill to the first
  SEND_OK after it that a live member stored (the store host in its offsetMsgId is not the killed
  member: an answer the dead master sent before it died but the client read after the kill does not
  end the outage); the same first SEND_OK is also timed from the kill itself.

Debugging a cell: BENCH_BROKER_LOG_LEVEL=INFO gives the brokers' logs (broker.err in each member's
directory), and BENCH_KEEP_WORKDIR=1 keeps the directories after the run.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from bench.driver import client_loop
from bench.processes import free_port, stop_process, wait_for_line
from bench.proc_cpu import ProcessTree, cpu_us_per_msg

BODY = 1024
SEGMENT = 256 << 20
IN_FLIGHT = 64
SENDERS = 4  # the outage cell's continuous senders
STEADY_OKS = 200  # SEND_OKs at the master before each kill


class Member:
    """One `broker serve -c` process in its own store; `keys` are the mode's lines of broker.conf."""

    def __init__(self, workdir: str, label: str, broker_name: str, namesrv: str, keys: str = ""):
        self.label = label
        self.port = free_port()
        self.root = tempfile.mkdtemp(prefix=f"{label}-", dir=workdir)
        self.conf = os.path.join(self.root, "broker.conf")
        with open(self.conf, "w") as f:
            f.write(f"brokerName={broker_name}\nbrokerIP1=127.0.0.1\nlistenPort={self.port}\n"
                    f"storePathRootDir={self.root}/store\nnamesrvAddr={namesrv}\nmappedFileSizeCommitLog={SEGMENT}\n"
                    f"autoCreateTopicEnable=true\n{keys}")
        self.proc: subprocess.Popen | None = None
        self.log_level = os.environ.get("BENCH_BROKER_LOG_LEVEL", "WARNING")  # of its log, broker.err in its directory

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        env = dict(os.environ, BROKER_LOG_LEVEL=self.log_level)
        # its warnings (peers refusing while one is down: expected here) go to its own file
        with open(os.path.join(self.root, "broker.err"), "a") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "-c", self.conf,
                                          "--status-interval", "3600"], stdout=subprocess.PIPE, stderr=err, env=env,
                                         text=True)
        wait_for_line(self.proc, "listening on", f"broker {self.label}")
        # drain its output so that it never blocks on a full pipe
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        stop_process(self.proc)


class Group:
    """Members of one broker group; subclasses say who is master and when the group is whole."""

    what = "group"
    master_word = "master"  # how the mode names its master in the CPU figures ("leader" in DLedger mode)

    def __init__(self, members: list[Member]):
        self.members = members
        self._dirs = [m.root for m in members]

    def _start_others(self) -> None:
        """Processes the mode needs before the members (controllers)."""

    def _stop_others(self) -> None:
        pass

    def __enter__(self) -> "Group":
        try:
            self._start_others()
            for m in self.members:
                m.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            for m in self.members:
                if m.proc is not None:
                    stop_process(m.proc)
        finally:
            self._stop_others()
            for d in self._dirs:
                if not os.environ.get("BENCH_KEEP_WORKDIR"):
                    shutil.rmtree(d, ignore_errors=True)

    def is_master(self, status: dict) -> bool:
        raise NotImplementedError

    async def master(self, admin, timeout: float = 60.0, exclude: Member | None = None) -> Member:
        """The member serving as master, by its own runtime table (GET_BROKER_RUNTIME_INFO)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.members:
                if m is exclude or not m.alive():
                    continue
                try:
                    status = await asyncio.wait_for(admin.broker_status(m.addr), 2)
                except Exception:  # noqa: BLE001 - starting, stopping, switching: ask again
                    continue
                if self.is_master(status):
                    return m
            await asyncio.sleep(0.05)
        raise TimeoutError(f"no {self.what} master within {timeout} s")

    async def ready(self, admin, timeout: float = 120.0) -> Member:
        """The master, once the group is whole again (by default: once there is one)."""
        return await self.master(admin, timeout)

    @staticmethod
    async def routed(admin, member: Member, timeout: float = 60.0) -> None:
        """Until the name server routes clients to `member` as master: it says it is master a
        moment before its registration reaches the name server, and a producer asking in between
        finds no route for a topic it would create (RouteNotFound)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if member.addr in await admin.master_addrs():
                    return
            except Exception:  # noqa: BLE001 - no route yet: ask again
                pass
            await asyncio.sleep(0.05)
        raise TimeoutError(f"the name server does not route to {member.addr} within {timeout} s")


def store_host(offset_msg_id: str) -> str:
    """ip:port of the broker that stored a message, from its offsetMsgId (IPv4, port, offset in hex)."""
    h = offset_msg_id[:16]
    return ".".join(str(int(h[i:i + 2], 16)) for i in range(0, 8, 2)) + f":{int(h[8:16], 16)}"


async def throughput_cell(namesrv: str, group: Group, seconds: float, topic: str, producer_group: str,
                          in_flight: int = IN_FLIGHT) -> dict:
    from broker.client.admin import Admin
    from broker.client.message import Message
    from broker.client.producer import Producer
    async with Admin(namesrv) as admin:
        leader = await group.ready(admin)
        await group.routed(admin, leader)
    body = os.urandom(BODY)
    producer = Producer(producer_group, namesrv)
    await producer.start()
    try:
        def call():
            return producer.send(Message(topic, body))
        await client_loop(call, in_flight, min(1.0, seconds / 2), 1)  # the route, the connection
        trees = {m.label + (f"({group.master_word})" if m is leader else ""): ProcessTree(m.proc.pid)
                 for m in group.members}
        before = {k: t.snapshot() for k, t in trees.items()}
        n, lat, dt = await client_loop(call, in_flight, seconds, 1)
        cpu = {k: cpu_us_per_msg(before[k], t.snapshot(), n)["total"] for k, t in trees.items()}
    finally:
        await producer.shutdown()
    lat.sort()
    return {"msgs_per_s": n / dt, "p50_us": lat[len(lat) // 2] / 1e3, "p99_us": lat[int(len(lat) * 0.99)] / 1e3,
            "in_flight": in_flight, "body": BODY, "seconds": dt, "cpu_us_per_msg": cpu}


async def outage_cell(namesrv: str, group: Group, kills: int, topic: str, producer_group: str,
                      progress=print) -> dict:
    """`kills` kill -9s of the master under SENDERS continuous senders; the outage of each."""
    from broker.client.admin import Admin
    from broker.client.message import Message
    from broker.client.producer import Producer
    body = os.urandom(BODY)
    producer = Producer(producer_group, namesrv)
    await producer.start()
    oks: list[tuple[float, str]] = []  # (monotonic time, store host) of every SEND_OK
    stop = False

    async def sender() -> None:
        while not stop:
            try:
                r = await producer.send(Message(topic, body), timeout=3.0)
            except Exception:  # noqa: BLE001 - the outage: failed sends are retried by the loop
                await asyncio.sleep(0.01)
                continue
            if r.status == "SEND_OK":
                oks.append((time.monotonic(), store_host(r.offset_msg_id)))

    outages: list[float] = []
    from_kill: list[float] = []
    tasks = [asyncio.ensure_future(sender()) for _ in range(SENDERS)]
    try:
        async with Admin(namesrv) as admin:
            for k in range(kills):
                leader = await group.ready(admin)
                start = len(oks)
                while len(oks) < start + STEADY_OKS:  # steady sends at this master first
                    await asyncio.sleep(0.05)
                t_kill, seen = time.monotonic(), len(oks)  # SEND_OKs from here on came after the kill
                before = oks[-1][0]
                leader.kill9()
                deadline = t_kill + 120
                while (after := next((t for t, host in oks[seen:] if host != leader.addr), None)) is None:
                    if time.monotonic() > deadline:
                        raise TimeoutError("no SEND_OK from a live member within 120 s of the master's kill")
                    seen = len(oks)  # all of them were the dead master's answers: scan only newer ones
                    await asyncio.sleep(0.01)
                outages.append(after - before)
                from_kill.append(after - t_kill)
                progress(f"    kill {k + 1}/{kills}: outage {after - before:.2f} s "
                         f"(from the kill {after - t_kill:.2f} s)")
                await asyncio.get_running_loop().run_in_executor(None, leader.start)
            await group.ready(admin)
    finally:
        stop = True
        await asyncio.gather(*tasks, return_exceptions=True)
        await producer.shutdown()
    return {"kills": kills, "outage_min_s": min(outages), "outage_p50_s": statistics.median(outages),
            "outage_max_s": max(outages), "outages_s": outages, "from_kill_p50_s": statistics.median(from_kill),
            "from_kill_max_s": max(from_kill), "from_kill_s": from_kill, "sends_ok": len(oks)}


def outage_line(o: dict) -> str:
    return (f"min {o['outage_min_s']:.2f} s, p50 {o['outage_p50_s']:.2f} s, max {o['outage_max_s']:.2f} s over "
            f"{o['kills']} kills (kill to the first SEND_OK: p50 {o['from_kill_p50_s']:.2f} s, "
            f"max {o['from_kill_max_s']:.2f} s)")


def throughput_line(t: dict) -> str:
    return (f"{t['msgs_per_s']:,.0f} msgs/s, p50 {t['p50_us']:,.0f} us, p99 {t['p99_us']:,.0f} us; "
            "CPU-us/msg " + ", ".join(f"{k} {v:.1f}" for k, v in t["cpu_us_per_msg"].items()))


def cli(doc: str, argv: list[str] | None, more=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The failover benches' command line: --seconds (throughput cell), --kills, --workdir; `more(ap)`
    adds a bench's own arguments."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--workdir", default=None)
    if more is not None:
        more(ap)
    return ap, ap.parse_args(argv)


def run_in_workdir(prefix: str, parent: str | None, run) -> int:
    """asyncio.run(run(workdir)) in a fresh directory under `parent`, removed afterwards."""
    workdir = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        asyncio.run(run(workdir))
    finally:
        if not os.environ.get("BENCH_KEEP_WORKDIR"):
            shutil.rmtree(workdir, ignore_errors=True)
    return 0
