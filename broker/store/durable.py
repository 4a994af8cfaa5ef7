"""Small durability helpers shared by the store's files."""
from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """Make a rename/create/unlink in `path` durable."""
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)



class ShortWrite(OSError):
    """pwrite wrote nothing of what was left: the file cannot take the bytes (never retried blindly)."""


def pwrite_all(fd: int, data, offset: int) -> None:
    """pwrite every byte of `data` at `offset`. pwrite may write less than asked (a signal, a
    filling disk): the rest is written by the next call, which also reports the error if there is
    one. A call that writes nothing without an error would loop forever, so it is raised."""
    mv = memoryview(data).cast("B")
    done = 0
    while done < len(mv):
        n = os.pwrite(fd, mv[done:], offset + done)
        if n <= 0:
            raise ShortWrite(f"pwrite at offset {offset + done} wrote nothing of {len(mv) - done} bytes")
        done += n
