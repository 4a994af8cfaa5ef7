"""Stub of broker.kernels.remoting (pyx/remoting.pyx; C interface in pyx/remoting.pxd, layout in
docs/formats.md §4): remoting frames split out of a receive buffer, frame prefixes built."""
from typing import Final

from typing_extensions import Buffer

FRAME_PREFIX: Final[int]
SERIALIZE_JSON: Final[int]
SERIALIZE_ROCKETMQ: Final[int]
DEFAULT_MAX_FRAME: Final[int]

class FrameError(ValueError):
    offset: int
    reason: str
    def __init__(self, offset: int, reason: str) -> None: ...

# frames: (serialize_type, header_start, header_len, body_start, body_len)
def split_frames(
    buf: Buffer, start: int, end: int, max_frame: int = ...
) -> tuple[list[tuple[int, int, int, int, int]], int]: ...
def reallocate(buf: Buffer, start: int, end: int) -> int: ...
def frame_prefix(header_len: int, body_len: int, serialize_type: int = 0) -> bytes: ...
