"""Stub of broker.kernels.entry_push (pyx/entry_push.pyx): a follower's DLedger APPEND push in
bulk, checked in one call and written into the data file per run of entries (through its map, or
with pwrite given its descriptor)."""
from typing_extensions import Buffer

class PushBodyError(ValueError): ...

# (first entry's term, last entry's term)
def check_entries(body: Buffer, index: int, pos: int, count: int, term: int) -> tuple[int, int]: ...

# (entries appended, body position after them, the log's end after them, the last one's term)
def append_entries(
    body: Buffer, at: int, index: int, wrote: int, min_term: int, seg: Buffer, seg_base: int, iseg: Buffer, iseg_base: int,
    fd: int = -1,
) -> tuple[int, int, int, int]: ...
