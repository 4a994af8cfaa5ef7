"""Config files written off the event loop. A topic created by a send, offsets committed every
5 s, delay offsets: each write is a temp file, fsync, rename and directory fsync (write_atomic),
and on a busy disk one fsync took seconds here, stalling every connection of the broker. They go
to one background thread instead; the latest text for a file wins, so a burst of changes costs
one write. `drain` waits for what is pending (shutdown, tests)."""
from __future__ import annotations

import logging
import threading

log = logging.getLogger("store")


class ConfigFileWriter:
    def __init__(self, write):
        self._write = write  # write_atomic(path, text)
        self._pending: dict[str, str] = {}
        self._busy = 0
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, path: str, text: str) -> None:
        with self._cv:
            self._pending[path] = text
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="config-writer", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._pending:
                    self._cv.wait()
                path, text = self._pending.popitem()
                self._busy += 1
            try:
                self._write(path, text)
            except OSError as e:
                log.error("could not write %s: %s (the next change writes it again)", path, e)
            finally:
                with self._cv:
                    self._busy -= 1
                    self._cv.notify_all()

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every submitted file is written; False on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._pending and not self._busy, timeout)
