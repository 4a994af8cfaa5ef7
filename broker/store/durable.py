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

