"""The faults of the soak, one at a time, in rotation; their targets alternate between the two
groups where both can take the fault:

- kill9: SIGKILL of a broker's whole process group (the DLedger leader, broker-b's master), a
  pause, then the same broker started again on its store;
- sigstop: SIGSTOP of the group for `hold` seconds, then SIGCONT (a long GC, a paused VM);
- linkcut: the DLedger leader's Raft links cut both ways, or broker-b's HA link, for `hold` s;
- diskfull: broker-b master's tmpfs filled to ENOSPC by a ballast file for `hold` s (needs root);
- fsync: broker-b master's next fdatasync fails with EIO (the LD_PRELOAD shim); the broker then
  refuses writes until restarted, which is what the operator does here.

Each fault is logged with its start and end (s since the run's start) and what happened."""
from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass, field

from tests.conftest import wait_for

KINDS = ("kill9", "sigstop", "linkcut", "diskfull", "fsync")


@dataclass
class FaultRecord:
    kind: str
    target: str
    start: float
    end: float = -1.0
    note: str = ""
    error: str = ""
    extra: dict = field(default_factory=dict)


def fill(path) -> int:
    """A ballast file written until the filesystem says ENOSPC; its size."""
    n = 0
    with open(path, "wb") as f:
        chunk = b"\0" * (1 << 20)
        try:
            while True:
                f.write(chunk)
                f.flush()
                n += len(chunk)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
    return n


class Faults:
    def __init__(self, cluster, t0: float, kinds=KINDS, hold: float = 10.0, log=print):
        self.c, self.t0, self.hold, self.log = cluster, t0, hold, log
        self.kinds = [k for k in kinds if self._possible(k)]
        self.skipped = [k for k in kinds if k not in self.kinds]
        self.records: list[FaultRecord] = []
        self._n = 0
        self._turn: dict[str, int] = {}

    def _possible(self, kind: str) -> bool:
        if kind == "diskfull":
            return self.c.tmpfs is not None
        if kind == "fsync":
            return self.c.shim is not None
        return kind in KINDS

    def now(self) -> float:
        return time.monotonic() - self.t0

    def next(self) -> FaultRecord | None:
        if not self.kinds:
            return None
        kind = self.kinds[self._n % len(self.kinds)]
        self._n += 1
        turn = self._turn.get(kind, 0)
        self._turn[kind] = turn + 1
        on_a = turn % 2 == 0 and kind in ("kill9", "sigstop", "linkcut")
        rec = FaultRecord(kind, "broker-a leader" if on_a else "broker-b master", self.now())
        self.records.append(rec)
        try:
            getattr(self, f"_{kind}")(rec, on_a)
        except Exception as e:  # the run goes on; the report names the fault that did not finish
            rec.error = f"{type(e).__name__}: {e}"[:500]
            self._recover()
        rec.end = self.now()
        self.log(f"fault {len(self.records)} {rec.kind} on {rec.target} at {rec.start:.1f}s-{rec.end:.1f}s "
                 f"{rec.note} {('ERROR ' + rec.error) if rec.error else ''}")
        return rec

    # -- the faults -------------------------------------------------------------------------------
    def _kill9(self, rec: FaultRecord, on_a: bool) -> None:
        b = self.c.dledger.leader(60) if on_a else self.c.master
        rec.target += f" ({b.name})"
        b.kill9()
        time.sleep(self.hold / 2)
        b.start()
        if on_a:
            self.c.dledger.leader(60)
            rec.note = f"new leader {self.c.dledger.leader(60).name}"
        else:
            wait_for(lambda: self.c.master.info()["slaves"] == 1, 60, "broker-b's slave to link again")

    def _sigstop(self, rec: FaultRecord, on_a: bool) -> None:
        if on_a:
            b = self.c.dledger.leader(60)
            rec.target += f" ({b.name})"
            self.c.dledger.freeze(b)
            time.sleep(self.hold)
            self.c.dledger.thaw(b)
            rec.note = f"leader after {self.c.dledger.leader(60).name}"
        else:
            pid = self.c.master.child.proc.pid
            os.killpg(pid, signal.SIGSTOP)
            try:
                time.sleep(self.hold)
            finally:
                os.killpg(pid, signal.SIGCONT)

    def _linkcut(self, rec: FaultRecord, on_a: bool) -> None:
        if on_a:
            b = self.c.dledger.leader(60)
            rec.target += f" ({b.name}, Raft links)"
            self.c.dledger.isolate(b, "cut")
            time.sleep(self.hold)
            self.c.dledger.heal()
            rec.note = f"leader after {self.c.dledger.leader(60).name}"
        else:
            rec.target += " (HA link)"
            self.c.ha_proxy.cut()
            time.sleep(self.hold)
            self.c.ha_proxy.heal()
            wait_for(lambda: self.c.master.info()["slaves"] == 1, 60, "broker-b's slave to link again")

    def _diskfull(self, rec: FaultRecord, on_a: bool) -> None:
        m = self.c.master
        ballast = self.c.tmpfs / "ballast"
        try:
            rec.extra["ballast_bytes"] = fill(ballast)

            def refusing(i: dict) -> bool:
                return i.get("disk_full") == 1 or i.get("dispatch_blocked") == errno.ENOSPC
            wait_for(lambda: refusing(m.info()), 30, "broker-b's master to report the full disk")
            time.sleep(self.hold)
        finally:
            ballast.unlink(missing_ok=True)
        wait_for(lambda: not (lambda i: i.get("disk_full") == 1 or i.get("dispatch_blocked") == errno.ENOSPC)(m.info()),
                 60, "broker-b's master to report space again")

    def _fsync(self, rec: FaultRecord, on_a: bool) -> None:
        m, ctl = self.c.master, self.c.fsync_ctl
        log = ctl.parent / (ctl.name + ".log")
        before = log.read_text().count("\n") if log.exists() else 0
        ctl.write_text("eio-once")
        wait_for(lambda: log.exists() and log.read_text().count("\n") > before, 60, "a failed fdatasync")
        rec.note = "fdatasync failed once; restarted"
        time.sleep(self.hold / 2)  # the broker refuses writes meanwhile
        m.stop()
        m.start()
        wait_for(lambda: self.c.master.info()["slaves"] == 1, 60, "broker-b's slave to link again")

    def _recover(self) -> None:
        """After a fault that broke half-way: everything thawed, healed, running again."""
        c = self.c
        for name in list(c.dledger.frozen):
            c.dledger.thaw(c.dledger.brokers[name])
        if c.dledger.links:
            c.dledger.heal()
        c.ha_proxy.heal()
        c.fsync_ctl.write_text("")
        if c.tmpfs is not None:
            (c.tmpfs / "ballast").unlink(missing_ok=True)
        for b in [*c.dledger.brokers.values(), c.master, c.slave]:
            try:
                os.killpg(b.child.proc.pid, signal.SIGCONT)
            except (ProcessLookupError, AttributeError):
                pass
            if b.child is None or b.child.proc.poll() is not None:
                try:
                    b.start()
                except Exception as e:
                    self.log(f"recovery: {b.name} did not start: {e}")
