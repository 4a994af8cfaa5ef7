"""Three `broker controller -c controller.conf` processes on loopback with free ports (or three
`broker namesrv -c namesrv.conf` with the controller inside), and what the tests ask them (RocketMQ
5's controller requests, through the project's remoting connection)."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import msgspec

from broker.controller import codes
from tests.conftest import free_port, wait_for
from tests.helpers.dledger_cluster import FAST_RAFT
from tests.helpers.ha_cluster import call
from tests.helpers.procs import Child


class ControllerGroup:
    command = "controller"  # `broker controller -c controller-n0.conf`, ...

    def __init__(self, root: Path, extra: str = "", n: int = 3, hosts=None):
        self.root, self.hosts = root, hosts
        self.ids = [f"n{i}" for i in range(n)]
        self.ports = dict(zip(self.ids, (free_port() for _ in self.ids)))  # the controllers' peer ports
        # with `hosts` (tests/helpers/netns.Hosts) controller `nK` runs on host `cnK`, at its address
        self.addrs = {i: hosts.addr[f"c{i}"] if hosts else "127.0.0.1" for i in self.ids}
        peers = ";".join(f"{i}-{self.addrs[i]}:{p}" for i, p in self.ports.items())
        self.children: dict[str, Child | None] = dict.fromkeys(self.ids)
        self.confs = {}
        for i in self.ids:
            conf = root / f"{self.command}-{i}.conf"
            conf.write_text(f"{self.own_keys(i)}controllerDLegerGroup=cg\ncontrollerDLegerPeers={peers}\n"
                            f"controllerDLegerSelfId={i}\ncontrollerStorePath={root / i}\nmappedFileSize=1048576\n"
                            f"{FAST_RAFT}{extra}")
            self.confs[i] = conf

    def own_keys(self, i: str) -> str:
        """What the process's file says besides the controller's keys."""
        return ""

    def start(self, i: str | None = None) -> "ControllerGroup":
        for j in [i] if i else self.ids:
            wrap = self.hosts.wrap(f"c{j}") if self.hosts else []
            c = self.children[j] = Child(wrap + [sys.executable, "-m", "broker.cli", self.command, "-c",
                                                 str(self.confs[j])], self.root / f"stderr.{j}")
            # the controller's own line (a name server prints its own "listening on" first)
            c.wait_lines(lambda ls: any(line.startswith("controller ") and "listening on" in line for line in ls),
                         60, f"controller {j} to listen")
        return self

    def kill9(self, i: str) -> None:
        self.children[i].kill_group()
        self.children[i] = None

    def stop(self) -> None:
        for i, c in self.children.items():
            if c is not None and c.proc.poll() is None:
                c.proc.send_signal(signal.SIGTERM)
                try:
                    c.proc.wait(30)
                except subprocess.TimeoutExpired:
                    pass
            if c is not None:
                c.kill_group()

    def alive(self) -> list[str]:
        return [i for i, c in self.children.items() if c is not None and c.proc.poll() is None]

    def ask(self, i: str, code: int, ext: dict | None = None, body: bytes = b""):
        return call(self.ports[i], code, ext, body, host=self.addrs[i])

    def metadata(self, i: str) -> dict:
        return self.ask(i, codes.CONTROLLER_GET_METADATA_INFO).ext

    def wait_leader(self, timeout: float = 30, exclude: str | None = None) -> str:
        """The id every live controller names as the leader, once they agree and it says so."""
        def agreed():
            names = {self.metadata(i).get("controllerLeaderId") for i in self.alive()}
            if len(names) != 1:
                return None
            lid = names.pop()
            if lid is None or lid == exclude or lid not in self.alive():
                return None
            return lid if self.metadata(lid).get("isLeader") == "true" else None
        return wait_for(agreed, timeout, "the controllers to agree on a leader")

    def leader_call(self, code: int, ext: dict | None = None, body: bytes = b"", timeout: float = 30):
        """Ask the leader, following CONTROLLER_NOT_LEADER (and retrying while a new leader gets
        ready) as a broker would."""
        def attempt():
            lid = self.wait_leader(timeout)
            r = self.ask(lid, code, ext, body)
            return None if r.code in (codes.CONTROLLER_NOT_LEADER, codes.SYSTEM_ERROR) else r
        return wait_for(attempt, timeout, f"the controller leader to answer request {code}")

    def replica_info(self, name: str) -> dict:
        """The leader's CONTROLLER_GET_REPLICA_INFO for broker group `name`: master and SyncStateSet."""
        r = self.leader_call(codes.CONTROLLER_GET_REPLICA_INFO, {"brokerName": name})
        assert r.code == codes.SUCCESS, r.remark
        return {k: r.ext.get(k) for k in ("masterBrokerId", "masterAddress", "masterEpoch")} | sync_state(r)


class NamesrvControllerGroup(ControllerGroup):
    """Three `broker namesrv -c namesrv.conf` processes with enableControllerInNamesrv=true: each a
    name server on its listenPort and a controller of the group on its controllerDLegerPeers port."""
    command = "namesrv"

    def __init__(self, root: Path, extra: str = "", n: int = 3):
        self.namesrv_ports: dict[str, int] = {}
        super().__init__(root, extra, n)

    def own_keys(self, i: str) -> str:
        self.namesrv_ports[i] = free_port()
        return f"listenPort={self.namesrv_ports[i]}\nenableControllerInNamesrv=true\n"

    def ask_namesrv(self, i: str, code: int, ext: dict | None = None, body: bytes = b""):
        return call(self.namesrv_ports[i], code, ext, body)


class Heartbeats:
    """The brokers' side, reduced to a loop: BROKER_HEARTBEAT from each live broker id to every
    controller (as RocketMQ's brokers send them), every 200 ms, with a 1 s timeout."""

    def __init__(self, group: ControllerGroup, broker_name: str, ids: dict[int, str]):
        self.group, self.broker_name, self.ids = group, broker_name, dict(ids)
        self.beating = set(ids)
        self.rounds = 0  # rounds sent to every live controller: a test waits for one before relying on them
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop_event.is_set():
            for cid in self.group.alive():
                for bid in sorted(self.beating):
                    try:
                        self.group.ask(cid, codes.BROKER_HEARTBEAT, {
                            "clusterName": "c1", "brokerName": self.broker_name, "brokerAddr": self.ids[bid],
                            "brokerId": bid, "epoch": 0, "maxOffset": 100 * bid, "heartbeatTimeoutMills": 1000})
                    except (OSError, ConnectionError, TimeoutError):
                        pass  # a controller killed by the test
            self.rounds += 1
            self.stop_event.wait(0.2)  # the heartbeat period, not a wait for something

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join(10)


def sync_state(r) -> dict:
    return msgspec.json.decode(bytes(r.body))
