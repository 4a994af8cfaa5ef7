"""Stub of broker.kernels.queue_read (pyx/queue_read.pyx; no .pxd, layout in docs/formats.md §2): a
queue's messages as zero-copy views of the mapped commit log."""
from typing import Any, Container, Final

from typing_extensions import Buffer

COLLECT_END: Final[int]
COLLECT_FULL: Final[int]
COLLECT_NO_SEGMENT: Final[int]

class Collected:
    views: list[memoryview]
    queue_offsets: list[int] | None  # None unless made with_offsets
    count: int
    total: int
    next_index: int
    last_phys: int
    def __init__(self, start_index: int, with_offsets: bool = False, merge: bool = False) -> None: ...
    def finish(self) -> Collected: ...

# segments: the mapped commit-log segments in order, objects with .base (int) and .mv (memoryview or None)
def collect(
    c: Collected, cq: Buffer, first_index: int, start: int, stop: int, segments: list[Any], segment_size: int,
    max_msgs: int, max_bytes: int, tags: Container[int] | None = None, sql: Buffer | None = None,
) -> int: ...
