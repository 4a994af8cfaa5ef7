"""The gRPC front's memory under the soak's 5.x client rounds, in minutes rather than an hour:
`python -m soak.front_rounds` starts a name server and broker (tests.helpers.real_clients.Cluster)
and `broker proxy` before them, then runs ROUNDS rounds of a 5.x Producer sending PER messages
and a SimpleConsumer receiving them, each a process of its own as the soak's (soak/clients.py);
RESTART=1 kills the broker (kill -9) and starts it again before each round, as the soak's faults
do. One line per round: the front's RssAnon and descriptors. FRONT_PYTHONPATH runs the front from
another tree (an A/B of a change).

    ROUNDS=12 RESTART=1 python -m soak.front_rounds
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.conftest import free_port
from tests.helpers.grpc_front import py5
from tests.helpers.procs import Child
from tests.helpers.real_clients import Cluster


def rss_anon_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    rounds, per = int(os.environ.get("ROUNDS", "12")), int(os.environ.get("PER", "100"))
    restart = os.environ.get("RESTART", "0") == "1"
    root = Path(tempfile.mkdtemp(prefix="front-rounds-"))
    with Cluster(root / "cluster") as cluster:
        cluster.create_topic("SoakG")
        port = free_port()
        conf = root / "proxy.conf"
        conf.write_text(f"namesrvAddr={cluster.namesrv}\ngrpcServerPort={port}\nbindAddress=127.0.0.1\n")
        argv = [sys.executable, "-m", "broker.cli", "proxy", "-c", str(conf)]
        other = os.environ.get("FRONT_PYTHONPATH")
        if other:  # ahead of the working directory (this tree), which -m puts first
            argv[1:3] = ["-c", f"import runpy, sys; sys.path.insert(0, {other!r}); sys.argv[0] = 'broker'; "
                               "runpy.run_module('broker.cli', run_name='__main__')"]
        front = Child(argv, root / "proxy.err")
        try:
            front.wait_lines(lambda ls: any("grpc proxy listening" in line for line in ls), 60, "the front to listen")
            pid, endpoints, t0 = front.proc.pid, f"127.0.0.1:{port}", time.monotonic()
            print(f"front pid {pid}: RssAnon {rss_anon_mib(pid):.2f} MiB at start", flush=True)
            for r in range(rounds):
                if restart:
                    cluster.procs[1].kill_group()
                    cluster.restart_broker(f"broker{r}.err")
                py5("produce", endpoints, "SoakG", messages=[{"body": f"g{r}-{i}"} for i in range(per)])
                py5("receive", endpoints, "SoakG", group="soak-py5", count=per * 2, rounds=2, awaitSeconds=1)
                print(f"round {r + 1} at {time.monotonic() - t0:.0f}s: front RssAnon {rss_anon_mib(pid):.2f} MiB, "
                      f"descriptors {len(os.listdir(f'/proc/{pid}/fd'))}", flush=True)
        finally:
            front.kill_group()
    pending = (root / "proxy.err").read_text().count("Task was destroyed but it is pending")
    print(f"the front's log: {pending} tasks destroyed while pending", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
