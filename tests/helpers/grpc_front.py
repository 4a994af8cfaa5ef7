"""The gRPC front (`broker proxy`) beside a real name server and broker, and the real 5.x Python
client (PyPI rocketmq-python-client 5.1.2 in .venv-rocketmq5) driven through
tests/clients/py5_client.py, one JSON line per event."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import free_port
from tests.helpers.procs import REPO, Child
from tests.helpers.real_clients import CLIENTS, FAST_DELAYS, Cluster

PY5_PYTHON = REPO / ".venv-rocketmq5" / "bin" / "python"


def check_installed() -> None:
    assert PY5_PYTHON.exists(), f"{PY5_PYTHON} missing: run `make clients` (or `make test`)"


class GrpcFront:
    """`broker proxy -c proxy.conf` pointed at `cluster`'s name server (cluster mode)."""

    def __init__(self, cluster: Cluster, root: Path, extra_conf: str = ""):
        self.port = free_port()
        self.endpoints = f"127.0.0.1:{self.port}"
        conf = root / "proxy.conf"
        # the broker's delay levels, so that a delivery time maps to the level the broker applies
        conf.write_text(f"namesrvAddr={cluster.namesrv}\ngrpcServerPort={self.port}\nbindAddress=127.0.0.1\n"
                        f"messageDelayLevel={FAST_DELAYS}\n{extra_conf}")
        self.child = Child([sys.executable, "-m", "broker.cli", "proxy", "-c", str(conf)], root / "proxy.err")
        try:
            self.child.wait_lines(lambda ls: any("grpc proxy listening" in line for line in ls), 60, "the front to listen")
        except BaseException:
            self.child.kill_group()
            raise

    def close(self) -> None:
        self.child.kill_group()


def py5_argv(cmd: str, opt: dict) -> list[str]:
    check_installed()
    return [str(PY5_PYTHON), str(CLIENTS / "py5_client.py"), cmd, json.dumps(opt)]


def py5(cmd: str, endpoints: str, topic: str, env: dict | None = None, **opt) -> list[dict]:
    """Run the 5.x client's `cmd` (produce, receive) to the end; its JSON lines but the last {"done"}.
    `env`: variables added to the client's environment."""
    opt.update(endpoints=endpoints, topic=topic)
    p = subprocess.run(py5_argv(cmd, opt), capture_output=True, text=True, timeout=180, cwd=str(CLIENTS),
                       env=None if env is None else {**os.environ, **env})
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and lines and lines[-1] == {"done": True}, \
        f"5.x {cmd}: rc={p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
    return lines[:-1]


def py5_produce(endpoints: str, topic: str, messages: list[dict], **opt) -> list[dict]:
    """The 5.x producer's receipts (or {"error": ...}), in the order of `messages`."""
    return py5("produce", endpoints, topic, messages=messages, **opt)
