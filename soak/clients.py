"""The real RocketMQ clients beside the bulk load, each at a few messages a second:

- the Java 4.x client (tests/java's driver): a one-shot `produce` JVM every `every` seconds
  sending a round of bodies "j<round>-<i>" to SoakJ (its default two retries on failure may store
  a body twice: the check counts those duplicates by fault), and one long-running push consumer
  of SoakJ;
- the 5.x Python client through the gRPC front: every `every` seconds a `produce` of bodies
  "g<round>-<i>" to SoakG, then a SimpleConsumer `receive` of what it can get.

A round that fails as a whole (a JVM that dies, a front that does not answer) leaves its bodies
unknown; every body a client names SEND_OK is acknowledged and checked like the bulk's."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from tests.helpers.grpc_front import py5_argv
from tests.helpers.java_client import JavaProcess, java_argv
from tests.helpers.procs import REPO


class Sends:
    """body -> (began s since t0, outcome "ok" | "degraded" | "failed" | "unknown", queue, offset, broker)."""

    def __init__(self):
        self.by_body: dict[bytes, tuple] = {}
        self.consumed: set[bytes] = set()
        self.rounds = self.failed_rounds = 0
        self.lock = threading.Lock()


class Rounds(threading.Thread):
    def __init__(self, tag: str, every: float, per_round: int, t0: float, home: Path):
        super().__init__(name=f"soak-{tag}", daemon=True)
        self.tag, self.every, self.per_round, self.t0, self.home = tag, every, per_round, t0, home
        self.sends = Sends()
        self._halt = threading.Event()
        self.proc: subprocess.Popen | None = None
        home.mkdir(parents=True, exist_ok=True)

    def halt(self) -> None:
        self._halt.set()

    def stop(self) -> None:
        self.halt()
        self.join(240)
        self.kill()

    def kill(self) -> None:
        """The round's client process, if one still runs (its whole session)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def run(self) -> None:
        n = 0
        while not self._halt.wait(0 if n == 0 else self.every):
            began = time.monotonic() - self.t0
            try:
                self.round(n, began)
            except Exception as e:  # a round that broke as a whole: its sends stay unknown
                self.sends.failed_rounds += 1
                with open(self.home / "rounds.err", "a") as f:
                    f.write(f"round {n} at {began:.0f}s: {type(e).__name__}: {e}\n")
            self.sends.rounds += 1
            n += 1

    def _run(self, argv: list[str], timeout: float, cwd: Path) -> list[dict]:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(cwd),
                                     start_new_session=True)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        if self.proc.returncode != 0:
            with open(self.home / "rounds.err", "a") as f:
                f.write(f"rc={self.proc.returncode}\n{err[-2000:]}\n")
        return [json.loads(x) for x in out.splitlines() if x.startswith("{")]

    def round(self, n: int, began: float) -> None:
        raise NotImplementedError


class JavaRounds(Rounds):
    def __init__(self, namesrv: str, every: float, per_round: int, t0: float, home: Path):
        super().__init__("java", every, per_round, t0, home)
        self.namesrv = namesrv

    def round(self, n: int, began: float) -> None:
        bodies = [b"j%d-%d" % (n, i) for i in range(self.per_round)]
        with self.sends.lock:
            for b in bodies:
                self.sends.by_body[b] = (began, "unknown", -1, -1, "")
        opt = {"nameSrv": self.namesrv, "group": "soak-java", "topic": "SoakJ", "count": self.per_round,
               "template": {"body": f"j{n}"}, "timeout": 3000, "deadline": int(self.every * 3)}
        for line in self._run(java_argv("produce", opt, self.home), self.every * 3, REPO):
            if "i" not in line:
                continue
            b = bodies[line["i"]]
            if "status" in line:
                outcome = "ok" if line["status"] == "SEND_OK" else "degraded"
                rec = (began, outcome, line["queueId"], line["queueOffset"], line["brokerName"])
            else:  # the client gave up after its retries: any attempt may have been stored
                rec = (began, "unknown", -1, -1, "")
            with self.sends.lock:
                self.sends.by_body[b] = rec


class JavaConsumer:
    """The Java push consumer of SoakJ for the whole run; `received()` the bodies it was given."""

    def __init__(self, namesrv: str, home: Path, seconds: float):
        self.proc = JavaProcess("consume", {"nameSrv": namesrv, "group": "soak-java-consumer", "topic": "SoakJ",
                                            "deadline": int(seconds) + 900}, home, "java-consumer")
        self.proc.wait(lambda ls: {"ready": True} in ls, 90, "the Java push consumer to start")

    @property
    def pid(self) -> int:
        return self.proc.child.proc.pid

    def received(self) -> set[bytes]:
        return {x["body"].encode() for x in (json.loads(line) for line in list(self.proc.child.lines)
                                              if line.startswith('{"topic"')) if x.get("body")}

    def close(self) -> None:
        try:
            self.proc.close()
        except Exception:
            self.proc.child.kill_group()


class Py5Rounds(Rounds):
    def __init__(self, endpoints: str, every: float, per_round: int, t0: float, home: Path):
        super().__init__("py5", every, per_round, t0, home)
        self.endpoints = endpoints

    def round(self, n: int, began: float) -> None:
        bodies = [b"g%d-%d" % (n, i) for i in range(self.per_round)]
        with self.sends.lock:
            for b in bodies:
                self.sends.by_body[b] = (began, "unknown", -1, -1, "")
        lines = self._run(py5_argv("produce", {"endpoints": self.endpoints, "topic": "SoakG",
                                               "messages": [{"body": b.decode()} for b in bodies]}),
                          self.every * 2, REPO / "tests" / "clients")
        receipts = [x for x in lines if "messageId" in x or "error" in x]
        for b, r in zip(bodies, receipts):  # one line per message, in the order sent
            if "messageId" in r:
                with self.sends.lock:
                    self.sends.by_body[b] = (began, "ok", -1, r.get("offset", -1), "")
        got = self._run(py5_argv("receive", {"endpoints": self.endpoints, "topic": "SoakG", "group": "soak-py5",
                                             "count": self.per_round * 2, "rounds": 2, "awaitSeconds": 1}),
                        self.every * 2, REPO / "tests" / "clients")
        with self.sends.lock:
            self.sends.consumed.update(x["body"].encode() for x in got if x.get("acked"))
