"""MappedFileQueue: the ordered segments of one log (commit log), with one segment prepared ahead."""
from __future__ import annotations

import logging
import os
import re
import threading

from broker.store.errors import CorruptStoreError
from broker.store.mapped_file import WARM_CHUNK_ASYNC_FLUSH, MappedFile, create_segment_file, offset_to_name
from broker.store.os_thread import name_os_thread

log = logging.getLogger(__name__)
_NAME = re.compile(r"^\d{20}$")


class MappedFileQueue:
    def __init__(self, directory: str, file_size: int, writable: bool, warm: bool = True,
                 warm_chunk: int = WARM_CHUNK_ASYNC_FLUSH, ahead: bool = True):
        self.directory = directory
        self.file_size = file_size
        self.writable = writable
        self.warm = warm
        self.warm_chunk = warm_chunk
        self.ahead = ahead  # make the next segment before it is needed (the commit log's writer)
        self.files: list[MappedFile] = []
        self._ahead: threading.Thread | None = None
        self._ahead_error: BaseException | None = None
        os.makedirs(directory, exist_ok=True)

    # -- loading ------------------------------------------------------------------------------
    def segment_names(self) -> list[str]:
        names = sorted(n for n in os.listdir(self.directory) if _NAME.match(n))
        for prev, cur in zip(names, names[1:]):
            if int(cur) - int(prev) != self.file_size:
                raise CorruptStoreError(os.path.join(self.directory, cur), 0,
                                        f"segment does not follow {prev} (gap or wrong mappedFileSize)")
        for n in names:
            if int(n) % self.file_size:
                raise CorruptStoreError(os.path.join(self.directory, n), 0,
                                        f"start offset is not a multiple of the segment size {self.file_size}")
        return names

    def load(self) -> None:
        if self.writable:  # only the writer may clear a segment whose creation was interrupted
            for leftover in (n for n in os.listdir(self.directory) if n.endswith(".tmp")):
                os.unlink(os.path.join(self.directory, leftover))
        self.files = [MappedFile(os.path.join(self.directory, n), self.file_size, self.writable)
                      for n in self.segment_names()]

    def refresh(self) -> None:
        """Readers (other processes): map segments the writer created since the last look."""
        have = {f.base for f in self.files}
        for n in self.segment_names():
            if int(n) not in have:
                self.files.append(MappedFile(os.path.join(self.directory, n), self.file_size, self.writable))
        self.files.sort(key=lambda f: f.base)

    # -- lookup -------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.files[0].base if self.files else 0

    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding `offset` (O(1): segments are contiguous)."""
        if not self.files:
            return None
        i = (offset - self.files[0].base) // self.file_size
        if 0 <= i < len(self.files):
            return self.files[i]
        return None

    # -- growth -------------------------------------------------------------------------------
    def _path(self, base: int) -> str:
        return os.path.join(self.directory, offset_to_name(base))

    def _prepare(self, base: int) -> None:
        # Warming a SYNC_FLUSH segment (256 MiB of zeros) takes up to a second of CPU: the
        # benchmarks count it apart from the event loop's by this name (bench.proc_cpu)
        name_os_thread("allocate")
        try:
            if not os.path.exists(self._path(base)):
                create_segment_file(self._path(base), self.file_size, self.warm, self.warm_chunk)
        except BaseException as e:  # reported to the writer when it needs the segment
            self._ahead_error = e

    def prepare_ahead(self) -> None:
        """Create the segment after the last one in a background thread (AllocateMappedFileService)."""
        if self._ahead is not None and self._ahead.is_alive():
            return
        nxt = (self.files[-1].end) if self.files else 0
        self._ahead = threading.Thread(target=self._prepare, args=(nxt,), name="allocate-mapped-file", daemon=True)
        self._ahead.start()

    def roll(self, base: int) -> MappedFile:
        """Return the segment starting at `base`, creating it (or waiting for the one made ahead)."""
        if self._ahead is not None:
            self._ahead.join()
            self._ahead = None
            if self._ahead_error is not None:
                err, self._ahead_error = self._ahead_error, None
                log.warning("segment pre-allocation failed, retrying inline: %s", err)
        if not os.path.exists(self._path(base)):
            create_segment_file(self._path(base), self.file_size, self.warm, self.warm_chunk)
        mf = MappedFile(self._path(base), self.file_size, self.writable)
        self.files.append(mf)
        if self.writable and self.ahead:
            self.prepare_ahead()
        return mf

    # -- truncation ---------------------------------------------------------------------------
    def drop_after(self, offset: int) -> None:
        """Delete every segment that starts after `offset` (recovery of a torn tail); the segment
        holding `offset` stays, the caller zeroes it from there."""
        keep = []
        for f in self.files:
            if f.base > offset:
                f.close()
                os.unlink(f.path)
                log.warning("deleted segment %s past the recovered end %d", f.path, offset)
            else:
                keep.append(f)
        self.files = keep

    def drop_before(self, offset: int) -> int:
        """Let go of segments wholly below `offset` (the cleaner deleted them): their pages are
        freed once the last view a reader still holds is released. Returns how many."""
        keep = [f for f in self.files if f.end > offset]
        gone = len(self.files) - len(keep)
        for f in self.files[:gone]:
            f.close()
        self.files = keep
        return gone

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.join()
            self._ahead = None
        for f in self.files:
            f.close()
        self.files = []
