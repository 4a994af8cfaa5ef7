"""bench.limits must yield sane figures quickly (quick mode, < 15 s)."""
from __future__ import annotations

import math

from bench.limits import measure_all


def test_measure_all_quick(tmp_path):
    figures = measure_all(str(tmp_path), quick=True)

    assert figures["kernel"] and figures["python"]
    numeric = {k: v for k, v in figures.items() if k not in ("kernel", "python")}
    expected = {
        "cpu_count", "memcpy_GiBps",
        "fdatasync_p50_us", "fdatasync_p99_us", "fdatasync_p999_us", "fdatasync_per_s",
        "seq_durable_MBps", "first_touch_us_per_KiB", "touched_us_per_KiB",
        "loopback_GiBps", "loopback_rtt_p50_us", "loopback_rtt_p99_us",
    }
    assert set(numeric) == expected
    for name, value in numeric.items():
        assert isinstance(value, (int, float)) and not isinstance(value, bool), name
        assert math.isfinite(value) and value > 0, (name, value)

    assert figures["fdatasync_p50_us"] <= figures["fdatasync_p99_us"] <= figures["fdatasync_p999_us"]
    assert figures["loopback_rtt_p50_us"] <= figures["loopback_rtt_p99_us"]
    # Every measurement must have cleaned up its files.
    assert list(tmp_path.iterdir()) == []
