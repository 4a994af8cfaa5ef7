"""StoreCheckpoint: RocketMQ's 4 KiB `checkpoint` file, plus our own offsets after its fields.

    0  physicMsgTimestamp   (RocketMQ)  store time of the last flushed record
    8  logicsMsgTimestamp   (RocketMQ)  store time of the last record whose CQ entry is flushed
   16  indexMsgTimestamp    (RocketMQ)
   24  masterFlushedOffset  (RocketMQ 5.x)
   32  confirmPhyOffset     (RocketMQ 5.x)
   64  flushedOffset        commit log durable below this offset      (flush service)
   72  cqFlushedOffset      every CQ entry of records below is durable (reput service)
   80  cleanOffset          commit-log end at the last clean shutdown   (broker)
   88  magic "PYRMQCK1"     our fields are valid

Java brokers ignore bytes past 40, so the file stays readable by RocketMQ. Each field has one
writer process; each writer msyncs the page after writing its fields.
"""
from __future__ import annotations

import mmap
import os
import struct

from broker.store.durable import pwrite_all

SIZE = 4096
MAGIC = b"PYRMQCK1"
_Q = struct.Struct(">q")
FIELDS = {
    "physicMsgTimestamp": 0, "logicsMsgTimestamp": 8, "indexMsgTimestamp": 16,
    "masterFlushedOffset": 24, "confirmPhyOffset": 32,
    "flushedOffset": 64, "cqFlushedOffset": 72, "cleanOffset": 80,
}


class StoreCheckpoint:
    def __init__(self, path: str):
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            have = os.fstat(fd).st_size
            if have < SIZE:
                # zeros written, not a hole made by ftruncate: a later store through the map must
                # never need a block from a disk that has filled up meanwhile (SIGBUS)
                pwrite_all(fd, bytes(SIZE - have), have)
            self._mm = mmap.mmap(fd, SIZE, mmap.MAP_SHARED)
        finally:
            os.close(fd)

    @property
    def has_offsets(self) -> bool:
        return self._mm[88:96] == MAGIC

    def get(self, name: str) -> int:
        return _Q.unpack_from(self._mm, FIELDS[name])[0]

    def set(self, **values: int) -> None:
        for name, v in values.items():
            _Q.pack_into(self._mm, FIELDS[name], v)
        self._mm[88:96] = MAGIC

    def flush(self) -> None:
        self._mm.flush()

    def close(self) -> None:
        self._mm.close()
