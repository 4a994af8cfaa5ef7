"""bench.proc_cpu: a thread that ends inside the measured window (the broker's segment allocation,
which warms 256 MiB under SYNC_FLUSH) is counted under its name once, not in the event loop's
figure, and not again for what it spent before the window."""
from __future__ import annotations

import os
import threading
import time

import pytest

from bench.proc_cpu import ProcessTree, cpu_seconds_by_label
from broker.store.os_thread import name_os_thread
from tests.helpers.procs import wait_until

BURN = 0.3  # CPU seconds: 30 clock ticks, well above the 10 ms resolution


def _burn(seconds: float) -> None:
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        pass


def _allocation(first: float, started: threading.Event, go: threading.Event, then: float) -> threading.Thread:
    def run() -> None:
        name_os_thread("allocate")
        _burn(first)
        started.set()
        go.wait()
        _burn(then)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_thread_that_started_and_ended_in_the_window_counts_under_its_name():
    tree = ProcessTree(os.getpid())
    started, go = threading.Event(), threading.Event()
    go.set()
    before = tree.snapshot()
    t = _allocation(BURN, started, go, 0.0)
    t.join()
    wait_until(lambda: not os.path.exists(f"/proc/{os.getpid()}/task/{t.native_id}"), 10, "the thread's end")
    spent = cpu_seconds_by_label(before, tree.snapshot())
    assert spent["allocate"] == pytest.approx(BURN, abs=0.08)
    assert spent["broker"] < 0.08  # this thread only waited


def test_a_thread_alive_at_the_start_counts_only_what_it_spent_in_the_window():
    tree = ProcessTree(os.getpid())
    started, go = threading.Event(), threading.Event()
    t = _allocation(BURN, started, go, BURN)
    assert started.wait(30)
    before = tree.snapshot()  # it spent BURN already, named and alive
    assert any(label == "allocate" and cpu >= BURN - 0.05 for label, cpu in before.values())
    go.set()
    t.join()
    # join() returns before the OS thread is gone: wait for /proc to drop it
    wait_until(lambda: not os.path.exists(f"/proc/{os.getpid()}/task/{t.native_id}"), 10, "the thread's end")
    after = tree.snapshot()
    assert not any(key.endswith(f"/{t.native_id}") for key in after)  # ended: only "exited" holds it
    spent = cpu_seconds_by_label(before, after)
    assert spent["allocate"] == pytest.approx(BURN, abs=0.08)
    assert spent["broker"] < 0.08
    assert sum(spent.values()) == pytest.approx(BURN, abs=0.1)
