"""The real Go remoting client (github.com/apache/rocketmq-client-go/v2, pinned in tests/go/go.mod)
driven through its driver build/go/rmqgo (tests/go/*.go, built by `make clients`): one scenario
per run, one JSON line per event."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.helpers.procs import REPO, Child
from tests.helpers.real_clients import Cluster

# RMQGO=<path> runs the tests with a driver built against another version of the client
RMQGO = Path(os.environ.get("RMQGO") or REPO / "build" / "go" / "rmqgo")


def check_installed() -> None:
    """`make test` builds the driver (Makefile target `clients`); a missing one is a setup error."""
    assert RMQGO.exists(), f"{RMQGO} missing: run `make clients` (or `make test`)"


def _argv(cmd: str, opt: dict) -> list[str]:
    check_installed()
    return [str(RMQGO), cmd, json.dumps(opt)]


def go(cmd: str, cluster: Cluster, **opt) -> list[dict]:
    """Run scenario `cmd` (produce, transaction, pull) to its end; its JSON lines but the last
    {"done": true}."""
    opt.setdefault("nameSrv", cluster.namesrv)
    p = subprocess.run(_argv(cmd, opt), capture_output=True, text=True, timeout=180, cwd=str(REPO))
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and lines and lines[-1] == {"done": True}, \
        f"go {cmd}: rc={p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
    return lines[:-1]


def produce(cluster: Cluster, topic: str, messages: list[dict], mode: str = "sync", group: str = "go-pg") -> list[dict]:
    """The send results (or {"error"}) in the order of `messages`; one for a batch."""
    return go("produce", cluster, group=group, topic=topic, mode=mode, messages=messages)


class GoConsumer:
    """The Go push consumer (CLUSTERING) in its own process; `got` holds its deliveries as they come."""

    def __init__(self, cluster: Cluster, tmp: Path, topic: str, group: str, name: str, **opt):
        opt.update(nameSrv=cluster.namesrv, group=group, topic=topic, instanceName=name)
        opt.setdefault("maxSeconds", 150)  # it shuts down on its own by then
        # HOME: where a broadcasting consumer keeps its offsets (~/.rocketmq_client_go)
        home = tmp / "go-home"
        home.mkdir(exist_ok=True)
        self.child = Child(_argv("consume", opt), tmp / f"go-{name}.err", env=dict(os.environ, HOME=str(home)),
                           stdin=subprocess.PIPE)
        try:
            self.child.wait_lines(lambda ls: '{"ready":true}' in ls, 60, f"the Go consumer {name} to start")
        except BaseException:
            self.child.kill_group()
            raise

    @staticmethod
    def _deliveries(lines) -> list[dict]:
        return [d for d in map(json.loads, list(lines)) if "topic" in d]

    @property
    def got(self) -> list[dict]:
        return self._deliveries(self.child.lines)

    def wait(self, predicate, timeout: float, what: str) -> list[dict]:
        """Wait until `predicate(deliveries)` holds; woken by each line the consumer prints."""
        def check(lines):
            got = self._deliveries(lines)
            return got if predicate(got) else None
        return self.child.wait_lines(check, timeout, what)

    def close(self) -> None:
        """Closes stdin: the driver shuts its consumer down (committing offsets) and exits."""
        try:
            if self.child.proc.poll() is None:
                self.child.proc.stdin.close()
                self.child.wait_lines(lambda ls: '{"closed":true}' in ls, 60, "the Go consumer to close")
                self.child.proc.wait(30)
        finally:
            self.child.kill_group()

    def __enter__(self) -> "GoConsumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
