"""DLedger mode's figures (issue 17): a group of three `broker serve` members on loopback.

    python -m bench.dledger_bench [--seconds S] [--kills N] [--workdir DIR]

- **throughput**: the project's client (`Producer.send`, 1 KiB, 64 in flight) against the group,
  routed by a name server: msgs/s, p50/p99 per send, and the CPU-µs per message of each member.
  Read it beside the mode matrix's SYNC_MASTER + slave row of the same `make bench` run.
- **outage**: the write outage after a kill -9 of the leader, as a client sees it: four senders
  send without pause through the project's client; the outage of one kill is from the last
  SEND_OK before the kill to the first SEND_OK after it (only the new leader can give that one).
  The killed member is restarted and rejoins as a follower before the next kill. Measured with
  DLedger's defaults (heartBeatTimeIntervalMs=2000, maxHeartBeatLeak=3) and with
  heartBeatTimeIntervalMs=500; p50 and max over the kills.
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
import time

from bench.network_bench import NamesrvProcess, _client_loop, _free_port, _stop, _wait_for_line
from bench.proc_cpu import ProcessTree, cpu_us_per_msg

GROUP = "RaftNode00"
BROKER_NAME = "broker-dl"
TOPIC = "DLedgerBench"
BODY = 1024
SEGMENT = 256 << 20


class Member:
    """One DLedger member: `broker serve -c` with RocketMQ's DLedger keys, in its own store."""

    def __init__(self, workdir: str, self_id: str, peers: str, namesrv: str, extra: str = ""):
        self.self_id = self_id
        self.port = _free_port()
        self.root = tempfile.mkdtemp(prefix=f"dledger-{self_id}-", dir=workdir)
        self.conf = os.path.join(self.root, "broker.conf")
        with open(self.conf, "w") as f:
            f.write(f"brokerName={BROKER_NAME}\nbrokerIP1=127.0.0.1\nlistenPort={self.port}\n"
                    f"storePathRootDir={self.root}/store\nnamesrvAddr={namesrv}\nmappedFileSizeCommitLog={SEGMENT}\n"
                    f"enableDLegerCommitLog=true\ndLegerGroup={GROUP}\ndLegerPeers={peers}\ndLegerSelfId={self_id}\n"
                    f"autoCreateTopicEnable=true\n{extra}")
        self.proc: subprocess.Popen | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        env = dict(os.environ, BROKER_LOG_LEVEL="WARNING")
        # its warnings (peers refusing while one is down: expected here) go to its own file
        with open(os.path.join(self.root, "broker.err"), "a") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "-c", self.conf,
                                          "--status-interval", "3600"], stdout=subprocess.PIPE, stderr=err, env=env,
                                         text=True)
        _wait_for_line(self.proc, "listening on", f"DLedger member {self.self_id}")
        # drain its output so that it never blocks on a full pipe
        import threading
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        _stop(self.proc)


class Group:
    def __init__(self, workdir: str, namesrv: str, extra: str = "", n: int = 3):
        ports = [_free_port() for _ in range(n)]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
        self.members = [Member(workdir, f"n{i}", peers, namesrv, extra) for i in range(n)]

    def __enter__(self) -> "Group":
        try:
            for m in self.members:
                m.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for m in self.members:
            if m.proc is not None:
                _stop(m.proc)
            shutil.rmtree(m.root, ignore_errors=True)

    async def master(self, admin, timeout: float = 60.0, exclude: Member | None = None) -> Member:
        """The member serving as master (its own word: brokerRole SYNC_MASTER)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.members:
                if m is exclude or m.proc is None or m.proc.poll() is not None:
                    continue
                try:
                    status = await asyncio.wait_for(admin.broker_status(m.addr), 2)
                except Exception:  # noqa: BLE001 - starting, stopping: ask again
                    continue
                if status.get("brokerRole") == "SYNC_MASTER":
                    return m
            await asyncio.sleep(0.05)
        raise TimeoutError(f"no DLedger master within {timeout} s")


async def throughput_cell(namesrv: str, group: Group, seconds: float, in_flight: int = 64) -> dict:
    from broker.client.admin import Admin
    from broker.client.message import Message
    from broker.client.producer import Producer
    async with Admin(namesrv) as admin:
        leader = await group.master(admin)
    body = os.urandom(BODY)
    producer = Producer("dledger_bench", namesrv)
    await producer.start()
    try:
        def call():
            return producer.send(Message(TOPIC, body))
        await _client_loop(call, in_flight, min(1.0, seconds / 2), 1)  # the route, the connection
        trees = {m.self_id + ("(leader)" if m is leader else ""): ProcessTree(m.proc.pid) for m in group.members}
        before = {k: t.snapshot() for k, t in trees.items()}
        n, lat, dt = await _client_loop(call, in_flight, seconds, 1)
        cpu = {k: cpu_us_per_msg(before[k], t.snapshot(), n)["total"] for k, t in trees.items()}
    finally:
        await producer.shutdown()
    lat.sort()
    return {"msgs_per_s": n / dt, "p50_us": lat[len(lat) // 2] / 1e3, "p99_us": lat[int(len(lat) * 0.99)] / 1e3,
            "in_flight": in_flight, "cpu_us_per_msg": cpu}


async def outage_cell(namesrv: str, group: Group, kills: int, progress=print) -> dict:
    """`kills` kill -9s of the leader under four continuous senders; the outage of each."""
    from broker.client.admin import Admin
    from broker.client.message import Message
    from broker.client.producer import Producer
    body = os.urandom(BODY)
    producer = Producer("dledger_outage", namesrv)
    await producer.start()
    oks: list[float] = []  # monotonic time of every SEND_OK
    stop = False

    async def sender() -> None:
        while not stop:
            try:
                r = await producer.send(Message(TOPIC, body), timeout=3.0)
            except Exception:  # noqa: BLE001 - the outage: failed sends are retried by the loop
                await asyncio.sleep(0.01)
                continue
            if r.status == "SEND_OK":
                oks.append(time.monotonic())

    outages: list[float] = []
    tasks = [asyncio.ensure_future(sender()) for _ in range(4)]
    try:
        async with Admin(namesrv) as admin:
            for k in range(kills):
                leader = await group.master(admin)
                start = len(oks)
                while len(oks) < start + 200:  # steady sends at this leader first
                    await asyncio.sleep(0.05)
                t_kill = time.monotonic()
                leader.kill9()
                deadline = t_kill + 120
                while not oks or oks[-1] <= t_kill:
                    if time.monotonic() > deadline:
                        raise TimeoutError("no SEND_OK within 120 s of the leader's kill")
                    await asyncio.sleep(0.01)
                before = max(t for t in oks if t <= t_kill)
                after = min(t for t in oks if t > t_kill)
                outages.append(after - before)
                progress(f"    kill {k + 1}/{kills}: outage {after - before:.2f} s")
                await asyncio.get_running_loop().run_in_executor(None, leader.start)
                await group.master(admin)
    finally:
        stop = True
        await asyncio.gather(*tasks, return_exceptions=True)
        await producer.shutdown()
    return {"kills": kills, "outage_p50_s": statistics.median(outages), "outage_max_s": max(outages),
            "outages_s": outages}


CONFIGS = {"defaults": "", "heartbeat 500 ms": "heartBeatTimeIntervalMs=500\n"}


async def run_all(seconds: float, kills: int, workdir: str, progress=print) -> dict:
    out: dict = {"outage": {}}
    with NamesrvProcess() as ns:
        with Group(workdir, ns.addr) as g:
            progress("  throughput (Producer.send, 1 KiB, 64 in flight, defaults)")
            out["throughput"] = t = await throughput_cell(ns.addr, g, seconds)
            progress(f"    {t['msgs_per_s']:,.0f} msgs/s, p50 {t['p50_us']:,.0f} us, p99 {t['p99_us']:,.0f} us; "
                     f"CPU-us/msg " + ", ".join(f"{k} {v:.1f}" for k, v in t["cpu_us_per_msg"].items()))
    for name, extra in CONFIGS.items():
        with NamesrvProcess() as ns:
            with Group(workdir, ns.addr, extra) as g:
                progress(f"  outage after kill -9 of the leader, {name}")
                out["outage"][name] = o = await outage_cell(ns.addr, g, kills, progress)
                progress(f"    p50 {o['outage_p50_s']:.2f} s, max {o['outage_max_s']:.2f} s over {kills} kills")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="dledger-bench-", dir=args.workdir)
    try:
        asyncio.run(run_all(args.seconds, args.kills, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
