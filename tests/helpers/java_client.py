"""The real Java 4.x RocketMQ client (Maven Central org.apache.rocketmq:rocketmq-client 4.9.8,
unmodified) through the driver tests/java/src/main/java/driver/Main.java: one JVM per producer or
consumer, printing one JSON line per result. Built by `make clients` (Makefile target
$(JAVA_CLIENTS)): the driver in tests/java/target/classes, the client and its dependencies in
tests/java/target/lib."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.helpers.procs import REPO, Child

JAVA = REPO / "tests" / "java"
CLIENT_JAR = JAVA / "target" / "lib" / "rocketmq-client-4.9.8.jar"
CLASSPATH = f"{JAVA / 'target' / 'classes'}:{JAVA / 'target' / 'lib'}/*"
# a client JVM needs little: a small heap, the serial collector and C1 only start it in ~0.5 s
JVM_FLAGS = ["-Xmx192m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData"]


def check_installed() -> None:
    """`make test` builds the driver (Makefile target `clients`); missing, it is a setup error to
    report, not a test to skip."""
    assert CLIENT_JAR.exists() and (JAVA / "target" / "classes" / "driver" / "Main.class").exists(), \
        f"the Java client is not built ({CLIENT_JAR}): run `make clients`"


def java_argv(scenario: str, opt: dict, home: Path) -> list[str]:
    """The command line of one driver run. Everything the client writes goes under `home`: its log
    (rocketmq.client.logRoot, at WARN) and a BROADCASTING consumer's local offsets
    (rocketmq.client.localOffsetStoreDir, else ~/.rocketmq_offsets shared by every run). opt "jvm"
    holds more system properties (e.g. rocketmq.serialize.type)."""
    check_installed()
    opt = dict(opt)
    props = {"user.home": str(home), "rocketmq.client.logRoot": str(home / "logs"),
             "rocketmq.client.logLevel": "WARN", "rocketmq.client.localOffsetStoreDir": str(home / "offsets"),
             **opt.pop("jvm", {})}
    return ["java", *JVM_FLAGS, *[f"-D{k}={v}" for k, v in props.items()], "-cp", CLASSPATH,
            "driver.Main", scenario, json.dumps(opt)]


def run(scenario: str, opt: dict, home: Path, timeout: float = 120) -> list[dict]:
    """One one-shot driver run (produce, litepull, transaction); its lines before {"done": true}."""
    home.mkdir(parents=True, exist_ok=True)
    opt.setdefault("deadline", int(timeout) - 5)
    p = subprocess.run(java_argv(scenario, opt, home), capture_output=True, text=True, timeout=timeout,
                       cwd=str(REPO))
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and lines and lines[-1] == {"done": True}, \
        f"java {scenario}: rc={p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
    return lines[:-1]


class JavaProcess:
    """A long-running driver (option "stay"): started, read as its lines come ({"ready": true}
    once its work is done), stopped by closing its stdin ({"closed": true})."""

    def __init__(self, scenario: str, opt: dict, home: Path, name: str):
        home.mkdir(parents=True, exist_ok=True)
        opt = {"deadline": 180, **opt, "stay": True}
        self.child = Child(java_argv(scenario, opt, home), home.parent / f"{name}.err", stdin=subprocess.PIPE)

    def wait(self, predicate, timeout: float, what: str):
        """Wait until `predicate(parsed lines)` is truthy; returns its value."""
        return self.child.wait_lines(lambda ls: predicate([json.loads(x) for x in ls if x.startswith("{")]),
                                     timeout, what)

    def ready(self, timeout: float = 60) -> list[dict]:
        """Its lines up to {"ready": true}."""
        lines = self.wait(lambda ls: ls if {"ready": True} in ls else None, timeout, "the driver's work")
        return lines[:lines.index({"ready": True})]

    def close(self) -> None:
        if self.child.proc.poll() is None:
            self.child.proc.stdin.close()
            self.child.wait_lines(lambda ls: any('"closed"' in x for x in ls), 60, "the driver to close")
            self.child.proc.wait(30)
        self.child.kill_group()

    def __enter__(self) -> "JavaProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SecondBroker:
    """Another broker group (broker-b) beside a real_clients.Cluster's broker-a: its own
    `broker serve` process, port and store, registered with the same name server and cluster."""

    def __init__(self, cluster, root: Path, name: str = "broker-b"):
        import sys
        from tests.conftest import free_port
        self.cluster, self.name, self.port = cluster, name, free_port()
        self.addr = f"127.0.0.1:{self.port}"
        root.mkdir(parents=True, exist_ok=True)
        conf = root / f"{name}.conf"
        own = {"brokerName": name, "listenPort": self.port, "haListenPort": free_port(),
               "storePathRootDir": root / name}
        conf.write_text("".join(f"{k}={own[k]}\n" if k in own else f"{line}\n"
                                for line in cluster.conf.read_text().splitlines() for k in [line.split("=", 1)[0]]))
        self.child = Child([sys.executable, "-m", "broker.cli", "serve", "-c", str(conf)], root / f"{name}.err")
        try:
            self.child.wait_lines(lambda ls: any("listening on" in x for x in ls), 60, f"{name} to listen")
        except BaseException:
            self.child.kill_group()
            raise

    def call(self, code: int, ext: dict, body: bytes = b""):
        import asyncio
        from tests.helpers.real_clients import _request
        return asyncio.run(_request(self.port, code, {k: str(v) for k, v in ext.items()}, body))

    def close(self) -> None:
        self.child.kill_group()

    def __enter__(self) -> "SecondBroker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
