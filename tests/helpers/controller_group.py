"""Three `broker controller -c controller.conf` processes on loopback with free ports, and what the
tests ask them (RocketMQ 5's controller requests, through the project's remoting connection)."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import msgspec

from broker.controller import codes
from tests.conftest import free_port, wait_for
from tests.helpers.dledger_cluster import FAST_RAFT
from tests.helpers.ha_cluster import call
from tests.helpers.procs import Child


class ControllerGroup:
    def __init__(self, root: Path, extra: str = "", n: int = 3):
        self.root = root
        self.ids = [f"n{i}" for i in range(n)]
        self.ports = dict(zip(self.ids, (free_port() for _ in self.ids)))
        peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in self.ports.items())
        self.children: dict[str, Child | None] = dict.fromkeys(self.ids)
        self.confs = {}
        for i in self.ids:
            conf = root / f"controller-{i}.conf"
            conf.write_text(f"controllerDLegerGroup=cg\ncontrollerDLegerPeers={peers}\ncontrollerDLegerSelfId={i}\n"
                            f"controllerStorePath={root / i}\nmappedFileSize=1048576\n{FAST_RAFT}{extra}")
            self.confs[i] = conf

    def start(self, i: str | None = None) -> "ControllerGroup":
        for j in [i] if i else self.ids:
            c = self.children[j] = Child([sys.executable, "-m", "broker.cli", "controller", "-c", str(self.confs[j])],
                                         self.root / f"stderr.{j}")
            c.wait_lines(lambda ls: any("listening on" in line for line in ls), 60, f"controller {j} to listen")
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
        return call(self.ports[i], code, ext, body)

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


def sync_state(r) -> dict:
    return msgspec.json.decode(bytes(r.body))
