"""IndexFile: one file of RocketMQ's message index (`{root}/index/yyyyMMddHHmmssSSS`), byte for byte.

    header 40 B   beginTimestamp 8, endTimestamp 8, beginPhyOffset 8, endPhyOffset 8,
                  hashSlotCount 4, indexCount 4 (next entry number; starts at 1)
    slots         maxHashSlotNum x 4 B: number of the newest entry of the bucket (0: empty)
    entries       maxIndexNum x 20 B: keyHash 4, phyOffset 8, timeDiff 4 (s after beginTimestamp),
                  prevIndex 4 (the bucket's previous entry)

The reput service writes the file being filled (broker.kernels.index_dispatch); the broker maps
files read-only to answer QUERY_MESSAGE by walking slot -> chain (IndexFile.selectPhyOffset).
"""
from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass

import numpy as np

from broker.kernels.codec import MappedBuffer, java_string_hash
from broker.kernels.index_dispatch import HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, index_file_size
from broker.store.errors import CorruptStoreError
from broker.store.mapped_file import create_segment_file, reserve_blocks

HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")
INT_MAX = 2**31 - 1
RESERVE_CHUNK = 4 << 20  # entries' blocks reserved ahead of the writer this much at a time


def file_name(ms: int) -> str:
    """UtilAll.timeMillisToHumanString: local time as yyyyMMddHHmmssSSS."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"


def is_index_file_name(name: str) -> bool:
    return len(name) == 17 and name.isdigit()


def index_key_hash(topic: str, key: str) -> int:
    """IndexFile.indexKeyHashMethod of `topic#key`: String.hashCode made non-negative (abs, with
    Integer.MIN_VALUE, which abs leaves negative, as 0)."""
    h = abs(java_string_hash(f"{topic}#{key}".encode()))
    return 0 if h > INT_MAX else h


@dataclass(frozen=True)
class IndexHeader:
    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


class IndexFile:
    """A mapped index file. Opening one of the wrong size is a CorruptStoreError naming it (a file
    cut short by a crash, or written with other maxHashSlotNum / maxIndexNum)."""

    def __init__(self, path: str, slots: int, num: int, writable: bool = False):
        size = index_file_size(slots, num)
        actual = os.path.getsize(path)
        if actual != size:
            raise CorruptStoreError(path, actual, f"index file is {actual} bytes, expected {size} "
                                                  f"(maxHashSlotNum {slots}, maxIndexNum {num})")
        self.path = path
        self.name = os.path.basename(path)
        self.slots, self.num, self.size = slots, num, size
        self.mm = np.memmap(path, dtype=np.uint8, mode="r+" if writable else "r", shape=(size,))
        self.buf = MappedBuffer(self.mm, writable) if writable else None
        self.reserved = 0  # bytes from the start known to have blocks (writer side)

    @classmethod
    def create(cls, directory: str, slots: int, num: int, end_phy: int, end_ts: int) -> "IndexFile":
        """A new file (named by the current time, after any existing one) that starts where the last
        one ended, as IndexFile's constructor: begin = end = the previous end values when > 0."""
        ms = time.time_ns() // 1_000_000
        names = sorted(n for n in os.listdir(directory) if is_index_file_name(n))
        while names and file_name(ms) <= names[-1]:
            ms += 1  # two files in one millisecond, or a clock that went back: names must stay in order
        path = os.path.join(directory, file_name(ms))
        # the header and slots reserved (20 MB by default), the entries as they come (reserve_entries):
        # all 420 MB up front would take a small disk at once; none, and a store through the map
        # on a full disk would be a SIGBUS instead of an error naming the file
        create_segment_file(path, index_file_size(slots, num), reserve=INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE)
        f = cls(path, slots, num, writable=True)
        if end_phy > 0:
            struct.pack_into(">qq", f.mm, 16, end_phy, end_phy)
        if end_ts > 0:
            struct.pack_into(">qq", f.mm, 0, end_ts, end_ts)
        return f

    def _need(self, index_count: int, more: int) -> int:
        return min(self.size, INDEX_HEADER_SIZE + self.slots * HASH_SLOT_SIZE + (index_count + more) * INDEX_ENTRY_SIZE)

    def reserved_for(self, index_count: int, more: int) -> bool:
        """Whether `more` entries after the first `index_count` have their blocks already."""
        return self._need(index_count, more) <= self.reserved

    def reserve_entries(self, index_count: int, more: int) -> None:
        """Blocks for `more` entries after the first `index_count` (and everything before them),
        reserved RESERVE_CHUNK at a time: OSError (ENOSPC) here, naming the file."""
        need = self._need(index_count, more)
        if need <= self.reserved:
            return
        upto = min(self.size, -(-need // RESERVE_CHUNK) * RESERVE_CHUNK)
        fd = os.open(self.path, os.O_RDWR)
        try:
            reserve_blocks(fd, self.reserved, upto - self.reserved)
        except OSError as e:
            raise OSError(e.errno, f"{e.strerror} (reserving index entries)", self.path) from e
        finally:
            os.close(fd)
        self.reserved = upto

    def header(self) -> IndexHeader:
        h = HEADER.unpack_from(self.mm, 0)
        return IndexHeader(*h[:5], max(h[5], 1))

    def is_time_matched(self, begin: int, end: int, h: IndexHeader) -> bool:
        b, e = h.begin_timestamp, h.end_timestamp
        return (begin < b and end > e) or b <= begin <= e or b <= end <= e

    def select_phy_offsets(self, out: list[int], key_hash: int, max_num: int, begin: int, end: int,
                           h: IndexHeader) -> None:
        """IndexFile.selectPhyOffset: walk the key's bucket from its newest entry back, keeping the
        entries of this hash stored within [begin, end]; stop at the chain's end or before `begin`."""
        mm = self.mm
        # entries 1 .. count-1 are written; a header or slot a corruption left larger than the file
        # holds must not read past it
        count = min(h.index_count, self.num)
        slot = _SLOT.unpack_from(mm, INDEX_HEADER_SIZE + (key_hash % self.slots) * HASH_SLOT_SIZE)[0]
        if slot <= 0 or slot >= count:
            return
        entries = INDEX_HEADER_SIZE + self.slots * HASH_SLOT_SIZE
        nxt = slot
        while len(out) < max_num:
            kh, phys, diff, prev = _ENTRY.unpack_from(mm, entries + nxt * INDEX_ENTRY_SIZE)
            if diff < 0:
                break
            t = h.begin_timestamp + diff * 1000
            if kh == key_hash and begin <= t <= end:
                out.append(phys)
            # an entry's previous is always an older (smaller) one: anything else is a corrupt chain,
            # which must end the walk rather than cycle in it
            if prev <= 0 or prev >= nxt or t < begin:
                break
            nxt = prev

    def flush(self) -> None:
        self.mm.flush()

    def close(self) -> None:
        if self.buf is not None:
            self.buf.release()
            self.buf = None
        self.mm = None
