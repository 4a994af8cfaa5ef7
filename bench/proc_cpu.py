"""CPU time of a broker process and each of its service processes, read from /proc.

The broker (`broker serve`) runs its services as child processes (`python -m
broker.services.flush_service`, `reput_service`, `clean_service`, `broker.ha.ha_process`); a benchmark cell wants the CPU each of them spent per message over its measured
window, so that a figure says which process a message costs the most in.

    tree = ProcessTree(broker_pid)
    before = tree.snapshot()
    ...                                   # the measured window
    after = tree.snapshot()
    per_msg = cpu_us_per_msg(before, after, msgs)   # {"broker": .., "flush": .., ..., "total": ..}

Read from /proc/<pid>/stat (utime + stime, in clock ticks) rather than through psutil so that it
works with nothing but the standard library; the resolution is one tick (10 ms), so a service
that did next to nothing in a short window shows 0.
"""
from __future__ import annotations

import os

TICK = os.sysconf("SC_CLK_TCK")

# module of a child process -> its label
LABELS = {"flush_service": "flush", "reput_service": "reput", "clean_service": "clean", "ha_process": "ha"}
ORDER = ("broker", "warm-ahead", "allocate", "flush", "reput", "ha", "clean")
# Threads counted apart from their process, by their OS name: the commit log's warm-ahead thread
# (broker.store.warm_ahead) pays the page cache's first touch of memory, a cost of this machine
# more than of the broker, and a figure says how much of the broker's CPU it is. "allocate": the
# thread that makes the next segment of a log (broker.store.mapped_file_queue), which under
# SYNC_FLUSH writes 256 MiB of zeros (up to a second of CPU) and then ends.
NAMED_THREADS = ("warm-ahead", "allocate")
# A thread that ended took its name with it; what it spent stays in its process's total. That
# part (the total less its live threads) is counted under this label: the threads our processes
# end are their segment allocations.
EXITED = "allocate"


def cpu_seconds(pid: int | str) -> float | None:
    """utime + stime of a process (or "pid/task/tid": a thread), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # the command name (field 2) may hold spaces and parentheses: fields resume after the last ')'
    rest = stat[stat.rindex(b")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / TICK  # fields 14 and 15: utime, stime


def threads(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (OS name, CPU seconds so far) of every live thread of `pid`."""
    out = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                name = f.read().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
        cpu = thread_cpu_seconds(pid, int(t))
        if cpu is not None:
            out[int(t)] = (name, cpu)
    return out


def thread_cpu_seconds(pid: int, tid: int) -> float | None:
    return cpu_seconds(f"{pid}/task/{tid}")


def children(pid: int) -> list[int]:
    """Direct children of `pid`: from /proc/<pid>/task/*/children (Linux 3.5+ with
    CONFIG_PROC_CHILDREN), else by scanning every process's parent pid."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    found_file = False
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                found_file = True
                out += [int(x) for x in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    if found_file:
        return out
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(b")") + 2:].split()[1]) == pid:
                out.append(int(name))
    return out


def label_of(pid: int) -> str:
    """"flush", "reput", "ha", "clean" for a service process; the module's last part (or the
    executable's name) for anything else."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return f"pid{pid}"
    if b"-m" in argv and argv.index(b"-m") + 1 < len(argv):
        module = argv[argv.index(b"-m") + 1].decode(errors="replace").rsplit(".", 1)[-1]
        return LABELS.get(module, module)
    return os.path.basename(argv[0].decode(errors="replace")) or f"pid{pid}"


class ProcessTree:
    """A broker process and every process below it, labelled; looked up again at each snapshot,
    since the supervisor restarts a service that died (with a new pid)."""

    def __init__(self, root_pid: int, root_label: str = "broker", prefix: str = ""):
        """`prefix` goes before the children's labels: a slave's tree, ProcessTree(pid, "slave",
        "slave/"), labels its services "slave/flush", ..."""
        self.root_pid = root_pid
        self.root_label = root_label
        self.prefix = prefix
        self._exited: dict[int, float] = {}  # pid -> the highest "exited" figure read

    def processes(self) -> dict[int, str]:
        out = {self.root_pid: self.root_label}
        todo = [self.root_pid]
        while todo:
            for c in children(todo.pop()):
                if c not in out:
                    out[c] = self.prefix + label_of(c)
                    todo.append(c)
        return out

    def snapshot(self) -> dict[str, tuple[str, float]]:
        """"pid/tid" of each live thread and "pid/exited" (the threads that ended) -> (label, CPU
        seconds so far). A thread's label is its process's, or its name if in NAMED_THREADS."""
        out = {}
        for pid, label in self.processes().items():
            # Read again while a tick lands between the process's total and its threads' (the
            # total is their sum then): the difference, what ended threads spent, must not
            # move by a tick that a live thread took.
            for _ in range(5):
                first = cpu_seconds(pid)
                live = threads(pid)
                cpu = cpu_seconds(pid)
                if cpu == first:
                    break
            if cpu is None:
                continue
            for tid, (name, t) in live.items():
                cpu -= t
                # a slave's warm-ahead: "slave/warm-ahead"
                out[f"{pid}/{tid}"] = (self.prefix + name if name in NAMED_THREADS else label, t)
            # Each figure is truncated to ticks apart (the total and every thread's), so the
            # difference may dip by a tick or two: never below what was read before.
            cpu = self._exited[pid] = max(cpu, self._exited.get(pid, 0.0))
            out[f"{pid}/exited"] = (self.prefix + EXITED, cpu)
        return out


def cpu_seconds_by_label(before: dict, after: dict) -> dict[str, float]:
    """CPU seconds each label spent between two snapshots. A process that appeared in between (a
    restarted service) counts all it spent; one that vanished counts nothing (its last figures
    are not readable)."""
    out: dict[str, float] = {}
    for pid, (label, cpu) in after.items():
        spent = cpu - before[pid][1] if pid in before else cpu
        out[label] = out.get(label, 0.0) + spent
    # A thread that ended in between: all it spent, before the window too, moved into its
    # process's "exited" figure, whose growth counted it; what it spent before is taken back.
    for key, (_, cpu) in before.items():
        if key in after:
            continue
        pid = key.split("/", 1)[0] if isinstance(key, str) else None
        exited = after.get(f"{pid}/exited") if pid is not None and not key.endswith("/exited") else None
        if exited is not None:
            out[exited[0]] = out.get(exited[0], 0.0) - cpu
    return out


def cpu_us_per_msg(before: dict, after: dict, msgs: int) -> dict[str, float]:
    """CPU-µs per message of each process (broker, flush, reput, ha, clean, then any other
    label), and "total"; NaN when no message was counted."""
    spent = cpu_seconds_by_label(before, after)
    labels = [k for k in ORDER if k in spent] + sorted(k for k in spent if k not in ORDER)  # broker first
    scale = 1e6 / msgs if msgs else float("nan")
    out = {k: spent[k] * scale for k in labels}
    out["total"] = sum(spent.values()) * scale
    return out
