"""A Spark standalone cluster started from the pyspark pip package: one master and two workers,
each a JVM in its own process group on 127.0.0.1, started with the package's bin/spark-class as
`start-master.sh`/`start-worker.sh` would (the wheel's sbin/ lacks those two scripts).

Executors are what the workers launch for each application: JVMs that are children of a worker
(so in its process group), each with its own Python daemon (which moves itself into a group of
its own). Stopping kills the three groups, then any process still working inside the cluster's
directory (a Python daemon sits in its executor's work directory), and waits until none is left.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.request
from pathlib import Path

from tests.helpers.procs import group_members, pid_alive, wait_until

# daemon JVMs that start fast and stay small: the machine has 2 cores and others work on it
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
DAEMON_MEMORY = "256m"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def pyspark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).resolve().parent


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


class StandaloneSpark:
    """`with StandaloneSpark(root) as s:` master and two workers up and registered; `s.url` is
    the master (spark://127.0.0.1:PORT), `s.state()` its JSON view."""

    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.root = Path(root)
        self.home = pyspark_home()
        self.url: str | None = None  # spark://127.0.0.1:PORT, once the master has bound its port
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self.procs: dict[str, subprocess.Popen] = {}
        self.ui: str | None = None  # the master's web UI, for its JSON state

    def _start(self, name: str, main_class: str, *args: str) -> None:
        log = open(self.root / f"{name}.log", "wb")
        env = dict(os.environ, SPARK_HOME=str(self.home),
                   # no spark-env.sh or spark-defaults.conf from elsewhere
                   SPARK_CONF_DIR=str(self.root),
                   # nothing binds the host name's address (it may not be loopback)
                   SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
                   # the master's REST submission server would take the fixed port 6066
                   SPARK_DAEMON_JAVA_OPTS=f"{FAST_JVM} -Dspark.master.rest.enabled=false")
        # spark-class execs the JVM (same pid) after the launcher has built its command line;
        # it also sets SPARK_SCALA_VERSION, which a worker needs to build its executors' class path
        argv = [str(self.home / "bin" / "spark-class"), main_class, *args]
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            cwd=str(self.root), env=env, start_new_session=True)
        log.close()

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def _check_alive(self) -> None:
        for name, p in self.procs.items():
            assert p.poll() is None, f"spark {name} exited with {p.returncode}:\n{self.log(name)[-3000:]}"

    def __enter__(self) -> StandaloneSpark:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            # port 0: the master binds a free port itself (no race with other tests for one picked
            # beforehand) and logs it, as it logs its web UI's
            self._start("master", "org.apache.spark.deploy.master.Master",
                        "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
            bound = re.compile(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)(?s:.*)"
                               r"Bound MasterWebUI to 127\.0\.0\.1, and started at http://[^:]+:(\d+)")

            def master_ports():
                self._check_alive()
                return bound.search(self.log("master"))
            m = wait_until(master_ports, 120, "the Spark master to bind its port and web UI")
            self.url, self.ui = m.group(1), f"http://127.0.0.1:{m.group(2)}"
            for i in range(self.n_workers):
                work = self.root / f"worker{i}"
                work.mkdir(exist_ok=True)
                self._start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                            "--host", "127.0.0.1", "--webui-port", "0", "--cores", str(self.cores),
                            "--memory", self.memory, "--work-dir", str(work))

            def registered():
                self._check_alive()
                alive = [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]
                return len(alive) == self.n_workers and alive
            wait_until(registered, 120, f"{self.n_workers} workers to register with the master")
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def state(self) -> dict:
        """The master's JSON state (workers, applications), as its web UI serves it."""
        try:
            with urllib.request.urlopen(f"{self.ui}/json/", timeout=10) as r:
                return json.load(r)
        except OSError:  # the UI is up before the master answers: not ready yet
            return {}

    @property
    def worker_pids(self) -> set[int]:
        return {p.pid for name, p in self.procs.items() if name.startswith("worker")}

    def _leftovers(self) -> list[int]:
        """Processes of ours still inside the cluster's directory (a Python daemon of an executor
        moved itself into its own process group, so the group kill does not reach it)."""
        root = str(self.root)
        return [pid for pid in _all_pids() if pid != os.getpid() and pid_alive(pid)
                and (_cwd(pid) + "/").startswith(root + "/")]

    def stop(self) -> None:
        for p in self.procs.values():  # TERM first: a worker's shutdown hook stops its executors
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for name, p in self.procs.items():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(20)
            wait_until(lambda: not group_members(p.pid), 20, f"every process of spark {name}'s group to die")
        for pid in self._leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_until(lambda: not self._leftovers(), 20, f"no process left working in {self.root}")


def _all_pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]
