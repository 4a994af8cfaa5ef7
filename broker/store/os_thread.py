"""The OS name of the calling thread (/proc/self/task/<tid>/comm), by which the benchmarks count a
thread's CPU apart from its process's (bench.proc_cpu.NAMED_THREADS)."""
from __future__ import annotations

import threading


def name_os_thread(name: str) -> None:
    """Name the calling thread for the OS (at most 15 bytes are kept); nothing where /proc is not."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write(name)
    except OSError:
        pass
