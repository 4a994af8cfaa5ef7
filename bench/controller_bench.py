"""Controller mode's figures (RocketMQ 5, issue 18): a group of two `broker serve` brokers with
enableControllerMode=true, given their roles by three `broker controller` processes, on loopback.

    python -m bench.controller_bench [--seconds S] [--kills N] [--workdir DIR] [--configs defaults,short]

- **throughput**: the project's client (`Producer.send`, 1 KiB, 64 in flight: DLedger's cell, the
  same code, bench/failover.py) against the group routed by a name server, with
  allAckInSyncStateSet=true: a send is answered once both brokers of the SyncStateSet hold it (two
  copies; DLedger's cell answers at a majority of three). msgs/s, p50/p99 per send, and the CPU-us
  per message of each broker. Measured with RocketMQ's defaults (the first config).
- **outage**: the write outage after a kill -9 of the master, as a client sees it, measured as
  bench/dledger_bench.py does it (the same code): four senders send without pause through the
  project's client, which finds the new master through the name server's route (refetched after a
  failed send); the outage of one kill is from the last SEND_OK before the kill to the first
  SEND_OK after it that the surviving broker stored (its offsetMsgId names it), also timed from the
  kill itself. The killed broker is restarted and the next kill waits until it is a slave in the
  master's SyncStateSet again. min, p50 and max over the kills.

The controller elects at once when a master's heartbeat connection closes (a kill -9 closes it), so
scanInactiveMasterInterval and controllerHeartBeatTimeoutMills only bound the outage of a master
that hangs without dying; they are measured anyway at two settings, both at or below RocketMQ's
defaults (CONFIGS): RocketMQ's defaults themselves, and tests/helpers/controller_mode.py's short
ones. The controllers' own Raft timings are DLedger's defaults (no controller is killed here).
"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from bench import failover
from bench.failover import Member
from bench.processes import NamesrvProcess, free_port

BROKER_NAME = "broker-cm"
TOPIC = "ControllerBench"
GOAL_S = 3.0  # the goal: outage after a master kill, at RocketMQ's default intervals or lower

# RocketMQ 5's defaults (BrokerConfig, MessageStoreConfig, ControllerConfig), written out so that the
# run states them; "short" are tests/helpers/controller_mode.py's FAST_BROKER / FAST_CONTROLLER
CONFIGS = {
    "defaults": {
        "broker": {"brokerHeartbeatInterval": 1000, "controllerHeartBeatTimeoutMills": 10000,
                   "syncBrokerMetadataPeriod": 5000, "checkSyncStateSetPeriod": 5000,
                   "haMaxTimeSlaveNotCatchup": 15000, "haSendHeartbeatInterval": 5000,
                   "haHousekeepingInterval": 20000},
        "controller": {"scanInactiveMasterInterval": 5000, "scanNotActiveBrokerInterval": 5000},
    },
    "short": {
        "broker": {"brokerHeartbeatInterval": 200, "controllerHeartBeatTimeoutMills": 1500,
                   "syncBrokerMetadataPeriod": 1000, "checkSyncStateSetPeriod": 500,
                   "haMaxTimeSlaveNotCatchup": 3000, "haSendHeartbeatInterval": 500,
                   "haHousekeepingInterval": 3000},
        "controller": {"scanInactiveMasterInterval": 500, "scanNotActiveBrokerInterval": 5000},
    },
}
# RocketMQ's defaults, the ceiling the issue sets for these three
CEILINGS = {"brokerHeartbeatInterval": 1000, "controllerHeartBeatTimeoutMills": 10000,
            "scanInactiveMasterInterval": 5000}
GROUP_KEYS = "allAckInSyncStateSet=true\n"  # every ack: both brokers hold the message


def _keys(d: dict) -> str:
    return "".join(f"{k}={v}\n" for k, v in d.items())


def settings_line(name: str, only=None) -> str:
    """The config's keys as `k=v, ...` (`only`: just those keys, in that order)."""
    c = CONFIGS[name]["broker"] | CONFIGS[name]["controller"]
    return ", ".join(f"{k}={c[k]}" for k in (only or c))


class Controller:
    """`broker controller -c controller-nI.conf`: one of the controllers' Raft group."""

    def __init__(self, workdir: str, self_id: str, peers: str, keys: str):
        self.self_id = self_id
        self.root = tempfile.mkdtemp(prefix=f"controller-{self_id}-", dir=workdir)
        self.conf = os.path.join(self.root, "controller.conf")
        with open(self.conf, "w") as f:
            f.write(f"controllerDLegerGroup=bench\ncontrollerDLegerPeers={peers}\ncontrollerDLegerSelfId={self_id}\n"
                    f"controllerStorePath={self.root}/store\nmappedFileSize={64 << 20}\n{keys}")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = dict(os.environ, BROKER_LOG_LEVEL="WARNING")
        with open(os.path.join(self.root, "controller.err"), "a") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "controller", "-c", self.conf],
                                         stdout=subprocess.PIPE, stderr=err, env=env, text=True)
        for line in self.proc.stdout:
            if line.startswith("controller ") and "listening on" in line:
                break
        else:
            raise RuntimeError(f"controller {self.self_id} did not start (exit {self.proc.wait()})")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Group(failover.Group):
    """`n` brokers in controller mode and three controllers; the master is the broker whose runtime
    table says controllerRole=master, and the group is whole once every other broker is its slave
    and in its SyncStateSet."""

    what = "controller-mode"

    def __init__(self, workdir: str, namesrv: str, config: str = "defaults", n: int = 2, extra: str = GROUP_KEYS):
        c = CONFIGS[config]
        ports = {f"n{i}": free_port() for i in range(3)}
        peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in ports.items())
        self.controllers = [Controller(workdir, i, peers, _keys(c["controller"])) for i in ports]
        ctl = ";".join(f"127.0.0.1:{p}" for p in ports.values())
        super().__init__([Member(workdir, f"b{i}", BROKER_NAME, namesrv,
                                 f"enableControllerMode=true\ncontrollerAddr={ctl}\nhaListenPort={free_port()}\n"
                                 f"{_keys(c['broker'])}{extra}") for i in range(n)])
        self._dirs += [x.root for x in self.controllers]

    def _start_others(self) -> None:
        for c in self.controllers:
            c.start()

    def _stop_others(self) -> None:
        for c in self.controllers:
            c.stop()

    def __exit__(self, *exc) -> None:
        # the controllers first: a master stopped before its slave would have the slave elected
        # while it stops too (a role switch racing the stop, which the broker does not survive
        # cleanly yet); without controllers the brokers stop in their roles
        try:
            self._stop_others()
        finally:
            super().__exit__(*exc)

    def is_master(self, status: dict) -> bool:
        return status.get("controllerRole") == "master"

    async def ready(self, admin, timeout: float = 120.0) -> Member:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            statuses = {}
            for m in self.members:
                if not m.alive():
                    continue
                try:
                    statuses[m] = await asyncio.wait_for(admin.broker_status(m.addr), 2)
                except Exception:  # noqa: BLE001 - starting, switching: ask again
                    pass
            masters = [m for m, s in statuses.items() if self.is_master(s)]
            if len(statuses) == len(self.members) and len(masters) == 1:
                sset = [x for x in str(statuses[masters[0]].get("syncStateSet", "")).split(",") if x]
                slaves = [m for m, s in statuses.items() if s.get("controllerRole") == "slave"]
                if len(sset) == len(self.members) and len(slaves) == len(self.members) - 1:
                    return masters[0]
            await asyncio.sleep(0.05)
        raise TimeoutError(f"the controller-mode group not whole (every broker in the SyncStateSet) within {timeout} s")


async def throughput_cell(namesrv: str, group: Group, seconds: float, in_flight: int = failover.IN_FLIGHT) -> dict:
    return await failover.throughput_cell(namesrv, group, seconds, TOPIC, "controller_bench", in_flight)


async def outage_cell(namesrv: str, group: Group, kills: int, progress=print) -> dict:
    return await failover.outage_cell(namesrv, group, kills, TOPIC, "controller_outage", progress)


def _check_ceilings() -> None:
    for name, c in CONFIGS.items():
        for k, ceiling in CEILINGS.items():
            v = (c["broker"] | c["controller"])[k]
            assert v <= ceiling, f"{name}: {k}={v} is above RocketMQ's default {ceiling}"


async def run_all(seconds: float, kills: int, workdir: str, progress=print, configs: list[str] | None = None) -> dict:
    _check_ceilings()
    configs = configs or list(CONFIGS)
    out: dict = {"brokers": 2, "copies": 2, "group_keys": GROUP_KEYS.strip(), "goal_s": GOAL_S,
                 "settings": {name: CONFIGS[name] for name in configs}, "outage": {}}
    with NamesrvProcess() as ns:
        with Group(workdir, ns.addr, configs[0]) as g:
            progress(f"  throughput (Producer.send, 1 KiB, 64 in flight, two brokers, allAckInSyncStateSet=true, "
                     f"{configs[0]}: {settings_line(configs[0])})")
            out["throughput"] = t = await throughput_cell(ns.addr, g, seconds)
            t["config"] = configs[0]
            progress("    " + failover.throughput_line(t))
    for name in configs:
        with NamesrvProcess() as ns:
            with Group(workdir, ns.addr, name) as g:
                progress(f"  outage after kill -9 of the master, {name}: {settings_line(name)}")
                out["outage"][name] = o = await outage_cell(ns.addr, g, kills, progress)
                o["settings"] = settings_line(name, CEILINGS)  # the three the goal is stated for
                o["settings_all"] = settings_line(name)
                o["goal_met"] = o["outage_max_s"] <= GOAL_S
                progress("    " + failover.outage_line(o) + f"; goal <= {GOAL_S:g} s "
                         + ("met" if o["goal_met"] else "MISSED"))
    return out


def main(argv: list[str] | None = None) -> int:
    def more(ap):
        ap.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"comma-separated, of {', '.join(CONFIGS)}; the first is also the throughput cell's")
    ap, args = failover.cli(__doc__, argv, more)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown or not configs:
        ap.error(f"unknown config(s) {unknown}; known: {', '.join(CONFIGS)}")
    return failover.run_in_workdir("controller-bench-", args.workdir,
                                   lambda workdir: run_all(args.seconds, args.kills, workdir, configs=configs))


if __name__ == "__main__":
    sys.exit(main())
