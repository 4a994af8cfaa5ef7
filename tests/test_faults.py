"""Fault loops with a history checker (OpenChaos style), on real processes on loopback.

Each cell runs a producer that records every send (tests/helpers/history.py), injects one kind of
fault twice at random moments while it sends, heals, drains every queue and checks the history:
- every mode: no duplicates, one message per queue offset, dense offsets, every SEND_OK message
  at the queue offset its ack named, nothing answered with an error stored anyway;
- SYNC_FLUSH and SYNC_MASTER: nothing acknowledged SEND_OK is lost, whatever the fault, a power
  cut included (for SYNC_MASTER the slave holds what the master's disk lost);
- ASYNC_FLUSH: a kill -9 loses nothing (the page cache survives it); a power cut loses only
  messages past the flushed offset at the moment of the cut.
The table of faults x modes x (sends, lost, duplicates) is written to build/fault-report.md.
"""
from __future__ import annotations

import concurrent.futures
import errno
import os
import random
import signal
import time
from pathlib import Path

import pytest

from broker.store.offset_table import Slot, open_table
from tests.conftest import wait_for
from tests.helpers.dledger_cluster import DLedgerGroup
from tests.helpers.ha_cluster import SEGMENT, Broker, NameServer, Proxy, call
from tests.helpers.history import History, Workload, drain
from tests.helpers.procs import group_members
from broker.raft.entry_format import DEFAULT_INDEX_FILE_SIZE
from broker.remoting import codes

REPORT = Path(__file__).resolve().parents[1] / "build" / "fault-report.md"
ROUNDS = 2
TOPIC = "Chaos"
MODES = {
    "ASYNC_FLUSH": ("ASYNC_MASTER", "ASYNC_FLUSH", False),
    "SYNC_FLUSH": ("ASYNC_MASTER", "SYNC_FLUSH", False),
    "SYNC_MASTER": ("SYNC_MASTER", "ASYNC_FLUSH", True),
}
# faults a mode meets (HA faults need a slave; the disk fills on a tmpfs)
CELLS = [(f, m) for m in MODES for f in
         ("kill-broker", "kill-flush", "kill-reput", "kill-cleaner", "pause-master", "power-cut")] + \
        [(f, "SYNC_MASTER") for f in ("kill-ha-write", "kill-ha-read", "ha-cut", "ha-stall")] + \
        [("disk-full", m) for m in ("ASYNC_FLUSH", "SYNC_FLUSH")]
# The index file's slots (maxHashSlotNum x 4 B, 20 MB by default) are reserved when it is made, and
# its entries 4 MiB ahead: sized here for the disk-full cells' 48 MiB filesystem, which the defaults
# would fill on their own.
QUICK = ("syncFlushTimeout=1500\nhaSendHeartbeatInterval=300\nhaHousekeepingInterval=2000\n"
         "cleanResourceInterval=200\ncleanFileForciblyEnable=false\ndiskMaxUsedSpaceRatio=99\n"
         "fileReservedTime=10000\nflushIntervalCommitLog=200\nmaxHashSlotNum=100000\nmaxIndexNum=400000\n")

_rows: list[tuple[str, str, dict]] = []


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    if not _rows:
        return
    cols = ["ok", "degraded", "failed", "unknown", "lost", "lost degraded", "duplicates", "failed but stored",
            "misplaced", "holes"]
    lines = ["| fault | mode | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for fault, mode, row in _rows:
        lines.append(f"| {fault} | {mode} | " + " | ".join(str(row.get(c, 0)) for c in cols) + " |")
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))


class Cell:
    """A name server, a master (and a slave linked through a proxy when the mode wants one)."""

    def __init__(self, root: Path, mode: str, store_root: Path | None = None):
        self.role, flush, self.has_slave = MODES[mode]
        self.ns = NameServer(root)
        self.master = Broker(store_root or root, "master", self.ns.addr, self.role, 0,
                             f"flushDiskType={flush}\n{QUICK}", logs=root)
        self.master.start()
        self.proxy = self.slave = None
        if self.has_slave:
            self.proxy = Proxy(self.master.ha_port)
            self.slave = Broker(root, "slave", self.ns.addr, "SLAVE", 1,
                                f"haMasterAddress=127.0.0.1:{self.proxy.port}\n{QUICK}").start()
            wait_for(lambda: self.master.info()["slaves"] == 1, 30, "the slave to link")
        r = call(self.master.port, codes.UPDATE_AND_CREATE_TOPIC,
                 {"topic": TOPIC, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6})
        assert r.code == codes.SUCCESS, r.remark

    def close(self) -> None:
        for b in (self.slave, self.master):
            if b is not None:
                b.kill9()
        if self.proxy is not None:
            self.proxy.close()
        self.ns.stop()

    def slot(self, broker: Broker, slot: Slot) -> int:
        t = open_table(str(broker.store))
        try:
            return t.load(slot)
        finally:
            t.close()

    def kill_service(self, broker: Broker, slot: Slot) -> None:
        """kill -9 one service process; its supervisor must start another."""
        pid = wait_for(lambda: self.slot(broker, slot), 30, f"{slot.name} to be published")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: self.slot(broker, slot) not in (0, pid), 30, f"a new process for {slot.name}")

    def restart_master(self) -> None:
        self.master.start()
        if self.has_slave:
            wait_for(lambda: self.master.info()["slaves"] == 1, 30, "the slave to link again")


def zero_from(directory: Path, durable: int, file_size: int) -> None:
    """What a power cut leaves of preallocated files (commit-log segments, DLedger's data and index files) written back up to `durable`: the
    bytes after it read back as zeros, the files that start after it are gone. (ftruncate down
    and up again: a hole reads as zeros, without writing a file's worth of them.)"""
    for f in sorted(directory.iterdir()):
        if not f.name.isdigit():
            continue  # a file being prepared (.tmp) stays as the cut left it: recovery must cope
        base = int(f.name)
        if base > durable or (base == durable and base > 0):
            f.unlink()
        elif base <= durable < base + file_size:
            with open(f, "r+b") as fh:
                fh.truncate(durable - base)
                fh.truncate(file_size)


def power_cut(broker: Broker) -> int:
    """kill -9 the whole broker, then lose what was not flushed, as a power cut would: the commit
    log's bytes from the flushed offset on become zeros (segments are preallocated, so a lost page
    reads back as zeros), and later segments vanish. Returns the flushed offset.

    FLUSHED is read once every process of the group is dead: read before the kill, a flush that
    completed in between (and the SYNC_FLUSH acks it released) was zeroed here as if it had never
    reached the disk, and the checker reported those acknowledged messages lost (power-cut-
    SYNC_FLUSH failed 3 times in 25 rounds of tools/fault_loop.py, the last few sends lost)."""
    broker.kill9()
    flushed = open_table(str(broker.store)).load(Slot.FLUSHED)
    zero_from(broker.store / "commitlog", flushed, SEGMENT)
    return flushed


def fill(path: Path) -> None:
    """Write a ballast file until the filesystem says ENOSPC."""
    with open(path, "wb") as f:
        chunk = b"\0" * (1 << 20)
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC, e


def inject(cell: Cell, fault: str, rng: random.Random, cuts: list[int]) -> None:
    m = cell.master
    if fault == "kill-broker":
        m.kill9()
        cell.restart_master()
    elif fault == "power-cut":
        cuts.append(power_cut(m))
        if cell.has_slave:
            return  # the master lost acknowledged bytes the slave holds: a human decides (no failover)
        cell.restart_master()
    elif fault == "kill-flush":
        cell.kill_service(m, Slot.FLUSH_PID)
    elif fault == "kill-reput":
        cell.kill_service(m, Slot.REPUT_PID)
    elif fault == "kill-cleaner":
        cell.kill_service(m, Slot.CLEAN_PID)
    elif fault == "kill-ha-write":
        cell.kill_service(m, Slot.HA_PID)
    elif fault == "kill-ha-read":
        cell.kill_service(cell.slave, Slot.HA_PID)
    elif fault == "pause-master":
        pids = group_members(m.child.proc.pid)
        for p in pids:
            os.kill(p, signal.SIGSTOP)
        time.sleep(rng.uniform(0.5, 1.5))  # the fault's length: what a GC pause or a stalled VM does
        for p in pids:
            os.kill(p, signal.SIGCONT)
    elif fault == "ha-cut":
        cell.proxy.cut()
        wait_for(lambda: m.info()["slaves"] == 0, 30, "the master to see the cut")
        time.sleep(rng.uniform(0.3, 1.0))  # sends meet SLAVE_NOT_AVAILABLE meanwhile
        cell.proxy.heal()
        wait_for(lambda: m.info()["slaves"] == 1, 30, "the slave to link again")
    elif fault == "ha-stall":
        cell.proxy.stall()
        time.sleep(rng.uniform(1.6, 2.5))  # past syncFlushTimeout: sends meet FLUSH_SLAVE_TIMEOUT
        cell.proxy.heal()
        wait_for(lambda: m.info()["slaves"] == 1, 30, "the slave to be linked after the stall")
    elif fault == "disk-full":
        ballast = m.root.parent / "ballast"
        fill(ballast)
        # The broker's own word over the wire, not its log: a log on the full disk could not say it.
        # Either refusal counts: usage above diskSpaceWarningLevelRatio (the cleaner's DISK_FULL),
        # or, when the ballast took the last room while a 6 MB consume-queue file was being made
        # (freed again when that failed, leaving usage under the ratio), the reput's hold on ENOSPC.
        def refusing(i: dict) -> bool:
            return i["disk_full"] == 1 or i["dispatch_blocked"] == errno.ENOSPC
        wait_for(lambda: refusing(m.info()), 30, "the broker to report the full disk")
        time.sleep(rng.uniform(0.3, 0.8))  # sends are refused meanwhile
        ballast.unlink()
        wait_for(lambda: not refusing(m.info()), 30, "the broker to report space again")
        log = m.stderr()
        assert "disk full: refusing writes" in log or "consume queues cannot be written (No space left" in log
        assert "exited with" not in m.stderr(), "a service died on the full disk (its supervisor restarted it)"
    else:  # pragma: no cover
        raise AssertionError(fault)


@pytest.mark.parametrize("fault,mode", CELLS, ids=[f"{f}-{m}" for f, m in CELLS])
def test_fault_loop(tmp_path, request, fault, mode):
    seed = int(os.environ.get("FAULT_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"FAULT_SEED={seed}")
    store_root = request.getfixturevalue("small_fs") if fault == "disk-full" else None
    cell = Cell(tmp_path, mode, store_root)
    history, cuts = History(), []
    if fault == "power-cut" and cell.has_slave:
        # the slave serves a topic once SlaveSynchronize has copied its config from the master (every
        # 10 s), as RocketMQ's does: after the master's power cut nothing could copy it any more
        wait_for(lambda: TOPIC.encode() in bytes(call(cell.slave.port, codes.GET_ALL_TOPIC_CONFIG).body), 30,
                 "the slave to learn the topic")
    try:
        work = Workload(history, lambda: cell.master.port, TOPIC).start()
        try:
            for i in range(ROUNDS if fault != "power-cut" or not cell.has_slave else 1):
                before = work.acked()
                wait_for(lambda: work.acked() > before + rng.randrange(150, 400), 60, "sends before the fault")
                inject(cell, fault, rng, cuts)
            if not (fault == "power-cut" and cell.has_slave):
                before = work.acked()
                wait_for(lambda: work.acked() > before + 100, 60, "sends after healing")
        finally:
            work.stop()
        if fault == "power-cut" and cell.has_slave:
            reader = cell.slave  # what SYNC_MASTER promises: the slave holds every acknowledged message
        else:
            reader = cell.master
            if cell.has_slave:  # and the slave holds the master's whole log once caught up
                end = cell.master.info()["commitLogMaxOffset"]
                wait_for(lambda: cell.slave.info()["dispatchedOffset"] >= end, 60, "the slave to catch up")
        wait_for(lambda: (lambda i: i["dispatchedOffset"] >= i["commitLogMaxOffset"])(reader.info()), 60,
                 "the reader to dispatch everything")
        drain(history, reader.port, TOPIC)
        v = history.check()
        _rows.append((fault, mode, v.row()))
        print(f"{fault} {mode}: {v.row()}")
        assert v.sends.get("ok", 0) > 150, v.sends
        assert v.duplicates == 0 and not v.failed_seen and not v.holes, v.row()
        if fault == "power-cut" and mode == "ASYNC_FLUSH":
            # only what lay past the flushed offset at a cut may go, and the queues stay consistent
            late = [mid for mid in v.lost if history.sends[mid].phys < min(cuts)]
            assert not late, f"lost below the flushed offset {min(cuts)}: {late[:10]}"
            assert not set(v.misplaced) - set(v.lost) - {m for m, s in history.sends.items()
                                                          if s.phys >= min(cuts)}, v.misplaced[:10]
        else:
            assert not v.lost, f"{len(v.lost)} acknowledged messages lost, e.g. {v.lost[:10]}"
            assert not v.misplaced, f"acknowledged at another offset: {v.misplaced[:10]}"
        if fault == "kill-broker":
            assert "recover" in cell.master.stderr().lower()
    except BaseException:
        # the brokers' own account goes into the report: a timing failure may not come back
        for b in (cell.master, cell.slave):
            if b is not None:
                print(f"---- {b.root.name} log (tail) ----\n{b.stderr()[-30000:]}")
        raise
    finally:
        cell.close()


# -- DLedger mode: the leader killed or paused while a producer sends ------------------------------------
# (fault, flushDiskType): a power cut of the whole group only under the durable quorum, the one
# setting that promises to survive it (the default acknowledges from a majority's page cache, as DLedger)
DLEDGER_CELLS = [("kill-leader", "ASYNC_FLUSH"), ("pause-leader", "ASYNC_FLUSH"), ("power-cut", "SYNC_FLUSH")]


DLEDGER_DATA_FILE = SEGMENT  # the members' mappedFileSizeCommitLog, DLedger's data file size
DLEDGER_INDEX_FILE = DEFAULT_INDEX_FILE_SIZE


def dledger_cell_id(fault: str, flush: str) -> str:
    return f"{fault}-DLEDGER" + ("-SYNC_FLUSH" if flush == "SYNC_FLUSH" else "")


def power_cut_group(group: DLedgerGroup) -> dict[str, tuple[int, int]]:
    """Every member loses power at once: SIGKILL to the three process groups in one go, then
    each member keeps only what it had written back, its entry data up to its FLUSHED slot and its
    index up to ENTRY_INDEX_FLUSHED (read once all are dead: a write-back that completed before the
    kill counts, as in power_cut). The term/vote and checkpoint files are written with fsync and
    rename, and stay. Returns each member's (data, index) durable marks."""
    members = group.alive()
    for b in members:
        try:
            os.killpg(b.child.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    marks = {}
    for b in members:
        b.kill9()  # waits for every process of its group to be gone
        t = open_table(str(b.store))
        try:
            data, index = t.load(Slot.FLUSHED), t.load(Slot.ENTRY_INDEX_FLUSHED)
        finally:
            t.close()
        d = b.store / f"dledger-{b.name}"
        zero_from(d / "data", data, DLEDGER_DATA_FILE)
        zero_from(d / "index", index, DLEDGER_INDEX_FILE)
        marks[b.name] = (data, index)
    return marks


class DLedgerCell:
    """Three DLedger members (short Raft intervals); `leader_port()` is where the producer sends:
    the member serving as master, looked up again when the old one stops answering."""

    def __init__(self, root: Path, flush: str = "ASYNC_FLUSH"):
        self.group = DLedgerGroup(root, extra=QUICK + f"flushDiskType={flush}\n").start()
        self.cuts: list[dict[str, tuple[int, int]]] = []
        self._port = self.group.leader().port
        for b in self.group.brokers.values():  # every member knows the topic, whoever leads later
            r = call(b.port, codes.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "readQueueNums": 4, "writeQueueNums": 4,
                                                             "perm": 6})
            assert r.code == codes.SUCCESS, r.remark

    def leader_port(self) -> int:
        """Asked from the producer's event loop (Workload): the lookups (each an asyncio.run) go
        to a thread of their own."""
        def lookup() -> int:
            for b in self.group.alive():
                try:
                    if b.info().get("brokerRole") == "SYNC_MASTER":
                        return b.port
                except Exception:  # noqa: BLE001 - paused, starting or stopping: ask the next one
                    continue
            return self._port
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            self._port = ex.submit(lookup).result()
        return self._port

    def inject(self, fault: str, rng: random.Random) -> None:
        old = self.group.leader()
        if fault == "kill-leader":
            old.kill9()
            self.group.leader(timeout=60)  # a new one among the others
            old.start()
        elif fault == "power-cut":
            self.cuts.append(power_cut_group(self.group))
            for b in self.group.brokers.values():
                b.start()
            self.group.leader(timeout=60)
        elif fault == "pause-leader":  # longer than the followers' election timeout (3 x 200 ms)
            pids = group_members(old.child.proc.pid)
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            try:
                wait_for(lambda: any(b is not old and b.info().get("brokerRole") == "SYNC_MASTER"
                                     for b in self.group.alive()), 60, "a leader while the old one is paused")
                time.sleep(rng.uniform(0.0, 1.0))  # the fault's length past the election, at random
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
        else:  # pragma: no cover
            raise AssertionError(fault)
        # the old leader is a follower again (or leads again after a new election: either is fine)
        wait_for(lambda: len([b for b in self.group.alive()
                              if b.info().get("brokerRole") in ("SYNC_MASTER", "SLAVE")]) == 3, 60,
                 "all three members serving again")

    def close(self) -> None:
        self.group.stop()


@pytest.mark.parametrize("fault,flush", DLEDGER_CELLS, ids=[dledger_cell_id(f, m) for f, m in DLEDGER_CELLS])
def test_fault_loop_dledger(tmp_path, fault, flush):
    """The history checker on DLedger mode: nothing acknowledged SEND_OK is lost across a leader's
    kill -9 or pause (a majority held each acknowledged message), nor, with flushDiskType=SYNC_FLUSH
    (a majority had it on disk), across a power cut of every member at once; nothing is stored
    twice, every acknowledged message sits at the queue offset its answer named, offsets dense, on
    the final leader and on every member (equal consume queues)."""
    seed = int(os.environ.get("FAULT_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"FAULT_SEED={seed}")
    cell = DLedgerCell(tmp_path, flush)
    history = History()
    try:
        work = Workload(history, cell.leader_port, TOPIC, reconnect_on=frozenset({codes.SERVICE_NOT_AVAILABLE}),
                        outcome_unknown=lambda r: "may still commit" in (r.remark or "")).start()
        try:
            for _ in range(ROUNDS):
                before = work.acked()
                wait_for(lambda: work.acked() > before + rng.randrange(150, 400), 60, "sends before the fault")
                cell.inject(fault, rng)
            before = work.acked()
            wait_for(lambda: work.acked() > before + 100, 60, "sends after healing")
        finally:
            work.stop()
        reader = cell.group.leader()
        wait_for(lambda: all((lambda i: i["dispatchedOffset"] >= i["commitLogMaxOffset"] ==
                              reader.info()["commitLogMaxOffset"])(b.info()) for b in cell.group.alive()), 60,
                 "every member to dispatch the whole committed log")
        drain(history, reader.port, TOPIC)
        v = history.check()
        mode = "DLEDGER" + (" SYNC_FLUSH" if flush == "SYNC_FLUSH" else "")
        _rows.append((fault, mode, v.row()))
        print(f"{fault} {mode}: {v.row()} cuts {cell.cuts}")
        assert v.sends.get("ok", 0) > 150, v.sends
        assert v.duplicates == 0 and not v.failed_seen and not v.holes, v.row()
        assert not v.lost, f"{len(v.lost)} acknowledged messages lost, e.g. {v.lost[:10]}"
        assert not v.misplaced, f"acknowledged at another offset: {v.misplaced[:10]}"
        # every member holds the same queues (the followers' reads are the leader's)
        from tests.helpers.dledger_cluster import consume_queue
        queues = {b.name: [consume_queue(b, TOPIC, q).tolist() for q in range(4)] for b in cell.group.alive()}
        assert all(q == queues[reader.name] for q in queues.values())
    except BaseException:
        for b in cell.group.brokers.values():
            try:
                info = {k: v for k, v in b.info().items() if k.startswith(("dledger", "dLedger", "commitLog",
                                                                          "dispatched", "brokerRole"))}
            except Exception as e:  # noqa: BLE001 - dead or paused
                info = repr(e)
            print(f"---- {b.name}: {info}\n---- {b.name} log (tail) ----\n{b.stderr()[-30000:]}")
        raise
    finally:
        cell.close()
