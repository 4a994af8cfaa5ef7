"""RocketMQ 5's timer files, in its formats (store/timer/TimerLog, TimerWheel, Slot, TimerCheckpoint):

- `timerlog/`: segments of mappedFileSizeTimerLog bytes (named by their first offset, as the
  commit log's) holding 52-byte units, big-endian: size (4, always 52), prev pos (8: the unit
  before it in its slot's list, -1 for the first), magic (4: 1 default, |2 roll, |4 delete),
  current write time (8, ms), delayed time (4: ms after the write time), offsetPy (8: the timer
  message's commit-log offset), sizePy (4), the real topic's Java hashCode (4), reserved (8). A
  segment's tail that cannot hold a unit plus 16 bytes is closed by a blank: its length (4), 0 (8),
  BLANK_MAGIC (4).
- `timerwheel`: slotsTotal * 2 slots of 32 bytes: delayed time / precision (8), first pos (8), last
  pos (8), num (4), magic (4); the slot of time t is t / precision % (slotsTotal * 2), and it holds
  t only when its first field says so (a zeroed slot holds nothing). The timer files are made when
  the broker first stores a timer message, not before (the wheel alone is 38 MiB).
- `config/timercheck`: a 4 KiB file of big-endian longs: lastReadTimeMs, lastTimerLogFlushPos,
  lastTimerQueueOffset, masterTimerQueueOffset, then the data version (stateVersion, timestamp,
  counter). Bytes 56.. are this broker's: the commit-log offset written when the checkpoint was
  taken (what a restart scans for deliveries made after it; Apache RocketMQ ignores them).
"""
from __future__ import annotations

import os

import numpy as np

from broker.store.errors import CorruptStoreError
from broker.store.mapped_file_queue import MappedFileQueue

UNIT_SIZE = 52
MIN_BLANK_LEN = 16
BLANK_MAGIC = -875286124  # Java's int 0xBBCCDDEE ^ 1880681586 + 8 (+ binds first)
MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE = 1, 2, 4
SLOT_SIZE = 32
TIMER_WHEEL_TTL_DAY = 7
DAY_SECS = 24 * 3600
SLOTS_TOTAL = TIMER_WHEEL_TTL_DAY * DAY_SECS

UNIT = np.dtype([("size", ">i4"), ("prev", ">i8"), ("magic", ">i4"), ("write_ms", ">i8"), ("delay", ">i4"),
                 ("offset_py", ">i8"), ("size_py", ">i4"), ("hash", ">i4"), ("reserved", ">i8")])
SLOT = np.dtype([("time", ">i8"), ("first", ">i8"), ("last", ">i8"), ("num", ">i4"), ("magic", ">i4")])
assert UNIT.itemsize == UNIT_SIZE and SLOT.itemsize == SLOT_SIZE


def java_hash(text: str) -> int:
    """String.hashCode() of `text` (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


class TimerLog:
    def __init__(self, directory: str, file_size: int):
        self.queue = MappedFileQueue(directory, file_size, writable=True, warm=False, ahead=False)
        self.file_size = file_size
        self.wrote = 0

    def load(self, end: int | None = None) -> None:
        """Map the segments; the log ends at `end` (the last unit found by recovery) or at the last
        segment's first blank or zero unit."""
        self.queue.load()
        last = self.queue.last()
        if last is None:
            self.wrote = 0
            return
        if end is not None:
            self.wrote = end
            return
        units = np.frombuffer(last.mm, dtype=UNIT, count=(self.file_size - MIN_BLANK_LEN) // UNIT_SIZE)
        bad = np.nonzero(units["size"] != UNIT_SIZE)[0]
        self.wrote = last.base + (int(bad[0]) if len(bad) else len(units)) * UNIT_SIZE

    def units(self, start: int, end: int) -> np.ndarray:
        """The units in [start, end) of one segment (a blank or an unwritten tail ends them)."""
        mf = self.queue.find(start)
        if mf is None:
            return np.empty(0, UNIT)
        stop = min(end, mf.end) - mf.base
        first = start - mf.base
        n = max(0, (stop - first) // UNIT_SIZE)
        arr = np.frombuffer(mf.mm, dtype=UNIT, count=n, offset=first)
        bad = np.nonzero(arr["size"] != UNIT_SIZE)[0]
        return arr[:int(bad[0])] if len(bad) else arr

    def unit(self, pos: int):
        mf = self.queue.find(pos)
        if mf is None:
            raise CorruptStoreError(self.queue.directory, pos, "timer log unit outside every segment")
        return np.frombuffer(mf.mm, dtype=UNIT, count=1, offset=pos - mf.base)[0]

    def room(self):
        """The segment the next unit goes to, made (and the one before closed by a blank) when
        the last one cannot hold it: the mapped file, whose `mm` and `base` the enqueue kernel
        (broker.kernels.timer_wheel) writes units into from `wrote`."""
        last = self.queue.last()
        if last is None or self.wrote >= last.end:
            last = self.queue.roll(self.wrote - self.wrote % self.file_size if last is None else last.end)
        rel = self.wrote - last.base
        if rel + UNIT_SIZE + MIN_BLANK_LEN > self.file_size:
            blank = np.frombuffer(last.mm, dtype=np.dtype([("len", ">i4"), ("z", ">i8"), ("magic", ">i4")]), count=1,
                                  offset=rel)
            blank[0] = (self.file_size - rel, 0, BLANK_MAGIC)
            last = self.queue.roll(last.end)
            self.wrote = last.base
        return last

    def append(self, prev: int, magic: int, write_ms: int, delay_ms: int, offset_py: int, size_py: int,
               topic_hash: int) -> int:
        """One unit at the end; returns its position."""
        last = self.room()
        rel = self.wrote - last.base
        u = np.frombuffer(last.mm, dtype=UNIT, count=1, offset=rel)
        u[0] = (UNIT_SIZE, prev, magic, write_ms, delay_ms, offset_py, size_py, topic_hash, 0)
        pos = self.wrote
        self.wrote += UNIT_SIZE
        return pos

    def truncate(self, end: int) -> None:
        """Forget everything at and after `end` (a restart's recovery: the units past the
        checkpoint are made again from the timer topic)."""
        self.queue.drop_after(end)
        mf = self.queue.find(end)
        if mf is not None:
            mf.mm[end - mf.base:] = 0
        self.wrote = end

    def flush(self) -> None:
        for mf in self.queue.files[-2:]:
            mf.mm.flush()

    def close(self) -> None:
        self.queue.close()


class TimerWheel:
    def __init__(self, path: str, precision_ms: int, slots_total: int = SLOTS_TOTAL):
        self.path = path
        self.precision = precision_ms
        self.n = slots_total * 2
        length = self.n * SLOT_SIZE
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path) and os.path.getsize(path) not in (0, length):
            raise CorruptStoreError(path, 0, f"timer wheel is {os.path.getsize(path)} bytes, expected {length}")
        with open(path, "ab") as f:
            f.truncate(length)
            # blocks reserved now: a store through the map into a hole of a full disk is a SIGBUS,
            # which would end the broker without a word (ENOSPC here is an error that says so)
            os.posix_fallocate(f.fileno(), 0, length)
        self.slots = np.memmap(path, dtype=SLOT, mode="r+", shape=(self.n,))

    def index(self, time_ms: int) -> int:
        return time_ms // self.precision % self.n

    def get(self, time_ms: int) -> tuple[int, int, int]:
        """(first, last, num) of the slot of `time_ms`; (-1, -1, 0) when it holds another time."""
        s = self.slots[self.index(time_ms)]
        if int(s["time"]) != time_ms // self.precision:
            return -1, -1, 0
        return int(s["first"]), int(s["last"]), int(s["num"])

    def put(self, time_ms: int, first: int, last: int, num: int, magic: int = 0) -> None:
        self.slots[self.index(time_ms)] = (time_ms // self.precision, first, last, num, magic)

    def clear(self, time_ms: int) -> None:
        self.slots[self.index(time_ms)] = (0, -1, -1, 0, 0)

    def reset(self) -> None:
        """Every slot empty (a zeroed slot holds no time), without writing 38 MiB slot by slot."""
        self.slots.flush()
        self.slots = None
        with open(self.path, "r+b") as f:
            f.truncate(0)
            f.truncate(self.n * SLOT_SIZE)
            os.posix_fallocate(f.fileno(), 0, self.n * SLOT_SIZE)  # zeroed, reserved (see __init__)
        self.slots = np.memmap(self.path, dtype=SLOT, mode="r+", shape=(self.n,))

    def flush(self) -> None:
        self.slots.flush()

    def close(self) -> None:
        self.slots.flush()
        self.slots = None


class TimerCheckpoint:
    FIELDS = ("last_read_ms", "flush_pos", "queue_offset", "master_queue_offset", "state_version", "timestamp",
              "counter", "commit_log_offset")

    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        existed = os.path.exists(path)
        with open(path, "ab") as f:
            f.truncate(4096)
            os.posix_fallocate(f.fileno(), 0, 4096)  # no hole to fault on a full disk (TimerWheel)
        self.mm = np.memmap(path, dtype=">i8", mode="r+", shape=(512,))
        self.existed = existed and bool(self.mm[:8].any())

    def __getattr__(self, name):
        if name in TimerCheckpoint.FIELDS:
            return int(self.mm[TimerCheckpoint.FIELDS.index(name)])
        raise AttributeError(name)

    def set(self, **values) -> None:
        for k, v in values.items():
            self.mm[self.FIELDS.index(k)] = v

    def flush(self) -> None:
        self.mm.flush()

    def close(self) -> None:
        self.mm.flush()
        self.mm = None
