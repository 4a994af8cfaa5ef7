"""Pure-Python twin of broker.kernels.ha (tests only), written from docs/formats.md §3."""
from __future__ import annotations

import struct

from tests.twins.remoting_twin import reallocate as reallocate_byte_buffer  # noqa: F401


class HAFrameError(ValueError):
    def __init__(self, pos, reason):
        super().__init__(f"bad HA frame at buffer position {pos}: {reason}")
        self.pos = pos


def dispatch_read_request(buf, start, end, expected, max_body):
    mv = memoryview(buf)
    if not 0 <= start <= end <= len(mv):
        raise ValueError("bad range")
    frames, pos, mismatch = [], start, -1
    while end - pos >= 12:
        phy, size = struct.unpack_from(">qi", mv, pos)
        if phy < 0:
            raise HAFrameError(pos, "phyOffset")
        if size < 0 or size > max_body:
            raise HAFrameError(pos, "bodySize")
        if phy + size > 2**63 - 1:
            raise HAFrameError(pos, "phyOffset + bodySize overflows")
        if end - pos - 12 < size:
            break
        if expected >= 0 and phy != expected:
            mismatch = phy
            break
        if size:
            frames.append((phy, pos + 12, size))
        expected = phy + size
        pos += 12 + size
    return frames, pos, expected, mismatch


def frame_header(phy, size):
    return struct.pack(">qi", phy, size)


def last_report(buf, start, end):
    n = (end - start) // 8
    value = struct.unpack_from(">q", buf, start + (n - 1) * 8)[0] if n else -1
    return value, start + n * 8


BLANK_MAGIC_CODE = 0xCBD43194


def record_boundary(seg, pos, end):
    mv = memoryview(seg)
    if not 0 <= pos <= end <= len(mv):
        raise ValueError("bad range")
    while end - pos >= 8:
        size, magic = struct.unpack_from(">iI", mv, pos)
        if magic == BLANK_MAGIC_CODE:
            if pos + size != len(mv):
                raise ValueError("blank")
            return end if end == len(mv) else pos
        if size < 8 or pos + size > len(mv):
            raise ValueError("size")
        if pos + size > end:
            break
        pos += size
    return pos
