"""Run the soak: `python -m soak` (`make soak`). Settings from the environment:

    SOAK_HOURS=24          how long the load runs (SOAK_SECONDS, if set, wins: the short test's)
    SOAK_FAULT_EVERY=300   seconds between faults (from one's start to the next's)
    SOAK_FAULTS=kill9,sigstop,linkcut,diskfull,fsync   the rotation ("" for none)
    SOAK_HOLD=10           seconds a fault holds (a stop, a cut, a full disk)
    SOAK_RATE=100          msgs/s of the project's Producer to each group's bulk topic
    SOAK_CLIENTS=java,py5  the real clients beside it ("" for none)
    SOAK_CLIENT_EVERY=60   seconds between the real clients' rounds
    SOAK_OUT=data/soak   the run's files (report.py); SOAK_PLOT the figure (docs/soak/soak.png)
    SOAK_ROOT              where the stores go (a fresh folder under /tmp, removed at the end, if unset)

SIGTERM or SIGINT ends the load early; the drain, the check and the files follow as usual.
Exit status 0 when nothing acknowledged was lost and no process's memory kept growing."""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import check, plot, report, trend
from .clients import JavaConsumer, JavaRounds, Py5Rounds
from .cluster import QUEUES, TOPICS, SoakCluster
from .faults import KINDS, Faults
from .load import OK, RatedSender
from .sampler import Sampler

GRACE = 60.0  # seconds after a fault's end its effects (a resend, a late answer) are charged to it


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def settings() -> dict:
    env = os.environ.get
    seconds = float(env("SOAK_SECONDS") or float(env("SOAK_HOURS", "24")) * 3600)
    return {"seconds": seconds, "fault_every": float(env("SOAK_FAULT_EVERY", "300")),
            "faults": [k for k in env("SOAK_FAULTS", ",".join(KINDS)).split(",") if k],
            "hold": float(env("SOAK_HOLD", "10")), "rate": float(env("SOAK_RATE", "100")),
            "clients": [k for k in env("SOAK_CLIENTS", "java,py5").split(",") if k],
            "client_every": float(env("SOAK_CLIENT_EVERY", "60")),
            "out": env("SOAK_OUT", "data/soak"), "plot": env("SOAK_PLOT", "docs/soak/soak.png")}


def main() -> int:
    s = settings()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    root = Path(os.environ.get("SOAK_ROOT") or tempfile.mkdtemp(prefix="soak-"))
    log(f"settings {s}; stores under {root}")
    t0 = time.monotonic()
    cluster, senders, rounds, consumer, sampler = None, [], [], None, None
    try:
        cluster = SoakCluster(root)
        cluster.start()
        log(f"cluster up in {time.monotonic() - t0:.0f}s: namesrv {cluster.namesrv.addr}, "
            f"front {cluster.front.endpoints}")
        t0 = time.monotonic()  # the run's clock starts with the load
        senders = [RatedSender("d", "SoakD", cluster.namesrv.addr, s["rate"], t0),
                   RatedSender("m", "SoakM", cluster.namesrv.addr, s["rate"], t0)]
        if "java" in s["clients"]:
            consumer = JavaConsumer(cluster.namesrv.addr, root / "java-consumer", s["seconds"])
            rounds.append(JavaRounds(cluster.namesrv.addr, s["client_every"], 200, t0, root / "java"))
        if "py5" in s["clients"]:
            rounds.append(Py5Rounds(cluster.front.endpoints, s["client_every"], 100, t0, root / "py5"))

        def roles() -> dict:
            out = cluster.processes()
            if consumer is not None:
                out["java-consumer"] = consumer.pid
            return out
        sampler = Sampler(roles, t0)
        for th in [*senders, *rounds, sampler]:
            th.start()
        faults = Faults(cluster, t0, s["faults"], s["hold"], log)
        if faults.skipped:
            log(f"faults left out (need root / gcc): {faults.skipped}")
        next_fault, next_note = s["fault_every"], 60.0
        while not stop.is_set():
            now = time.monotonic() - t0
            if now >= s["seconds"]:
                break
            if now >= next_fault and s["seconds"] - now > s["hold"] * 2 + 10:
                faults.next()
                next_fault += s["fault_every"]
            elif now >= next_note:
                acked = {x.topic: sum(1 for o in x.log.outcome[-int(60 * s["rate"]):] if o == OK) for x in senders}
                log(f"t={now:.0f}s sends {[len(x.log) for x in senders]} acked in the last minute {acked} "
                    f"faults {len(faults.records)} samples {len(sampler.rows)}")
                next_note += 60
            stop.wait(1.0)
        seconds = time.monotonic() - t0
        log(f"load ends at {seconds:.0f}s; draining")
        for th in [*senders, *rounds]:
            th.halt()
        for th in [*senders, *rounds]:
            th.stop()
        faults._recover()
        time.sleep(5)  # the last answers' entries committed and dispatched
        stored = check.Stored()
        masters = cluster.masters()
        drained = {}
        for topic, groups in TOPICS.items():
            for g in groups:
                drained[f"{g}/{topic}"] = stored.add(g, topic, masters[g].port, QUEUES)
        log(f"drained {drained}; pull errors {stored.errors[:5]}")
        java_received = None
        if consumer is not None:
            time.sleep(10)  # what the push consumer has yet to be given
            java_received = consumer.received()
        sampler.stop()
        checks = [check.check_bulk(senders[0], "broker-a", stored, faults.records, GRACE).row(),
                  check.check_bulk(senders[1], "broker-b", stored, faults.records, GRACE).row()]
        extra = {"harness_cpu_share_of_a_core": round(time.process_time() / seconds, 3), "drained": drained,
                 "pull_errors": stored.errors[:50], "faults_skipped": faults.skipped,
                 "sender_errors": {x.topic: x.errors for x in senders}}
        for r in rounds:
            java = isinstance(r, JavaRounds)
            name, topic = ("Java 4.x client", "SoakJ") if java else ("Python 5.x client (gRPC front)", "SoakG")
            c = check.check_client(name, topic, r.sends, stored, faults.records, GRACE).row()
            c["rounds"], c["failed_rounds"] = r.sends.rounds, r.sends.failed_rounds
            if java and java_received is not None:
                acked = {b for b, v in r.sends.by_body.items() if v[1] == "ok"}
                c["consumed_by_java_push_consumer"] = len(acked & java_received)
            if not java:
                c["consumed_by_py5_simple_consumer"] = len(r.sends.consumed)
            checks.append(c)
        trends = trend.verdicts(sampler.rows)
        s["seconds"] = seconds
        out = Path(s["out"])
        summary = report.write(out, s, sampler.rows, senders, faults.records, checks, trends, extra)
        plot.plot(out, Path(s["plot"]))
        v = summary["verdict"]
        log(f"messages {summary['messages']}; faults {len(faults.records)} "
            f"({sum(1 for f in faults.records if f.error)} did not finish); verdict {v}")
        log(f"files in {out}, figure {s['plot']}")
        return 0 if v["pass"] else 1
    finally:
        for th in [*senders, *rounds]:
            th.halt()
        for r in rounds:
            r.kill()
        if consumer is not None:
            consumer.close()
        if sampler is not None:
            sampler.stop()
        if cluster is not None:
            cluster.stop()
        if not os.environ.get("SOAK_ROOT"):
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
