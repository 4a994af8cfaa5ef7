"""The shared offset table: counters cross processes and a sleeper is woken, not polling."""
import subprocess
import sys
import time

from broker.kernels.atomics import OffsetTable

CHILD = """
import sys, time
from broker.kernels.atomics import OffsetTable
t = OffsetTable(sys.argv[1], 4)
print("ready", flush=True)
v = t.wait_until_ge(0, 42, 10.0)
print(v, t.load(1), flush=True)
"""


def test_futex_wakes_another_process(tmp_path):
    path = str(tmp_path / "table")
    t = OffsetTable(path, 4, True)
    child = subprocess.Popen([sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 5
        while t.waiters(0) == 0:  # the child registers before it sleeps
            assert time.monotonic() < deadline
        t.store(1, 7)
        t0 = time.monotonic()
        t.store(0, 42)
        out = child.stdout.readline().split()
        woke = time.monotonic() - t0
        assert out == ["42", "7"]  # the value stored before the wake-up is visible (release/acquire)
        assert woke < 1.0  # woken by the store, far before its 10 s timeout
    finally:
        child.kill()
        child.wait()


def test_wait_times_out_and_bounds_are_checked(tmp_path):
    t = OffsetTable(str(tmp_path / "t"), 2, True)
    t0 = time.monotonic()
    assert t.wait_until_ge(0, 1, 0.05) == 0
    assert 0.04 < time.monotonic() - t0 < 1.0
    assert t.wait_change(1, 5, 0.01) == 0  # already different: returns at once
    assert t.add(1, 3) == 3
    import pytest
    with pytest.raises(IndexError):
        t.load(2)
    t.close()
    with pytest.raises(ValueError):
        t.load(0)
