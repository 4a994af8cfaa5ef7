"""Stub of broker.kernels.ha (pyx/ha.pyx; C interface in pyx/ha.pxd, layout in docs/formats.md §3):
the HA stream, the slave's frame reader and the master's headers and report reader."""
from typing import Final

from typing_extensions import Buffer

HA_HEADER: Final[int]
HA_REPORT: Final[int]

class HAFrameError(ValueError):
    pos: int
    reason: str
    def __init__(self, pos: int, reason: str) -> None: ...

# (frames, next_pos, expected, mismatch); frames: (phy_offset, data_pos, size)
def dispatch_read_request(
    buf: Buffer, start: int, end: int, expected: int, max_body: int
) -> tuple[list[tuple[int, int, int]], int, int, int]: ...

# broker.kernels.remoting.reallocate, re-exported under RocketMQ's name
def reallocate_byte_buffer(buf: Buffer, start: int, end: int) -> int: ...
def record_boundary(seg: Buffer, pos: int, end: int) -> int: ...
def frame_header(phy: int, size: int) -> bytes: ...
def last_report(buf: Buffer, start: int, end: int) -> tuple[int, int]: ...
