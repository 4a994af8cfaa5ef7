"""The real Java 5.x RocketMQ client (Maven Central org.apache.rocketmq:rocketmq-client-java 5.2.0,
unmodified, gRPC) through the gRPC front, driven by tests/java5/src/main/java/driver5/: one JVM
plays a list of steps (produce, receive, push, awaitPushed, close, pause) on clients it keeps by
name, printing one JSON line per result, each naming its step. Built by the Makefile target
tests/java5/target/.built (part of `make clients`): the driver in tests/java5/target/classes, the
client (a shaded jar) and gson in tests/java5/target/lib."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.helpers.java_client import JVM_FLAGS
from tests.helpers.procs import REPO, Child

JAVA5 = REPO / "tests" / "java5"
CLIENT_JAR = JAVA5 / "target" / "lib" / "rocketmq-client-java-5.2.0.jar"
CLASSPATH = f"{JAVA5 / 'target' / 'classes'}:{JAVA5 / 'target' / 'lib'}/*"


def check_installed() -> None:
    """`make test` builds the driver (Makefile target `clients`); missing, it is a setup error to
    report, not a test to skip."""
    assert CLIENT_JAR.exists() and (JAVA5 / "target" / "classes" / "driver5" / "Main.class").exists(), \
        f"the Java 5.x client is not built ({CLIENT_JAR}): run `make tests/java5/target/.built`"


def java5_argv(opt: dict, home: Path) -> list[str]:
    """The command line of one driver run. The client's log (rocketmq.log.root, at WARN) and
    anything else it writes under the user's home go under `home`."""
    check_installed()
    props = {"user.home": str(home), "rocketmq.log.root": str(home / "logs"), "rocketmq.log.level": "WARN"}
    return ["java", *JVM_FLAGS, *[f"-D{k}={v}" for k, v in props.items()], "-cp", CLASSPATH,
            "driver5.Main", json.dumps(opt)]


def parse(lines: list[str]) -> list[dict]:
    return [json.loads(x) for x in lines if x.startswith("{")]


def of_step(lines: list[dict], step: int, key: str) -> list:
    """The values of `key` in step `step`'s lines, in order."""
    return [x[key] for x in lines if x.get("step") == step and key in x]


def run(endpoints: str, steps: list[dict], home: Path, timeout: float = 60) -> list[dict]:
    """One driver run to its end; its lines before {"done": true}."""
    home.mkdir(parents=True, exist_ok=True)
    opt = {"endpoints": endpoints, "deadline": int(timeout) - 5, "steps": steps}
    p = subprocess.run(java5_argv(opt, home), capture_output=True, text=True, timeout=timeout, cwd=str(REPO))
    (home / "driver.err").write_text(p.stderr)  # when each step ended, and what went wrong
    lines = parse(p.stdout.splitlines())
    assert p.returncode == 0 and lines and lines[-1] == {"done": True}, \
        f"java5 run: rc={p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
    return lines[:-1]


class Java5Process:
    """A driver run read as its lines come: `wait` for what a test needs, `go` to answer a pause
    step (a line on stdin), `finish` for the rest of its lines up to {"done": true}."""

    def __init__(self, endpoints: str, steps: list[dict], home: Path, name: str, deadline: int = 80):
        home.mkdir(parents=True, exist_ok=True)
        opt = {"endpoints": endpoints, "deadline": deadline, "steps": steps}
        self.child = Child(java5_argv(opt, home), home.parent / f"{name}.err", stdin=subprocess.PIPE)

    def wait(self, predicate, timeout: float, what: str):
        """Until `predicate(parsed lines)` is truthy; returns its value. A fatal line fails at once."""
        def check(lines):
            parsed = parse(lines)
            fatal = [x for x in parsed if "fatal" in x]
            assert not fatal, f"the driver failed: {fatal}\n{self.child.stderr_tail()}"
            return predicate(parsed)
        return self.child.wait_lines(check, timeout, what)

    def paused(self, step: int, timeout: float = 60) -> list[dict]:
        return self.wait(lambda ls: ls if any(x.get("step") == step and "paused" in x for x in ls) else None,
                         timeout, f"step {step} to pause")

    def go(self) -> None:
        self.child.proc.stdin.write(b"go\n")
        self.child.proc.stdin.flush()

    def finish(self, timeout: float = 60) -> list[dict]:
        lines = self.wait(lambda ls: ls if {"done": True} in ls else None, timeout, "the driver's steps")
        self.child.proc.wait(30)
        return lines[:-1]

    def close(self) -> None:
        self.child.kill_group()

    def __enter__(self) -> "Java5Process":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
