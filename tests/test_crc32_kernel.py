"""The body CRC kernel (pyx/crc32_fast.h: PCLMULQDQ folding, zlib for the rest) equals zlib's
CRC-32 with the sign bit cleared (RocketMQ's UtilAll.crc32), the twin every record twin uses."""
from __future__ import annotations

import platform
import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels import codec as K

SETTINGS = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def twin(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


@SETTINGS
@given(st.binary(max_size=2000), st.integers(0, 15))
def test_equals_zlib_at_every_length_and_alignment(data, skew):
    # the folding takes 64 bytes or more in multiples of 16; the skew moves the start off any
    # alignment the loads might have relied on
    buf = bytes(skew) + data
    assert K.crc32(memoryview(buf)[skew:]) == twin(data)


def test_every_length_around_the_fold_boundaries():
    base = bytes(range(256)) * 40
    for n in list(range(0, 200)) + [1023, 1024, 1025, 4096 + 15, 65536 + 48]:
        assert K.crc32(base[:n]) == twin(base[:n]), n


def test_large_bodies_and_all_ones():
    for data in (b"\xff" * (1 << 20), bytes(1 << 20), bytes(range(256)) * 4097):
        assert K.crc32(data) == twin(data)


def test_the_hardware_path_is_taken_where_the_cpu_has_it():
    # The broker must not silently run the table-driven fallback on a CPU that has PCLMULQDQ.
    flags = ""
    if platform.system() == "Linux":
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    has = platform.machine() == "x86_64" and " pclmulqdq" in flags and " sse4_1" in flags
    assert K.crc32_in_hardware() == has
