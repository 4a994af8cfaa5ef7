"""An independent reader (and, for building stores DLedger would have written, a writer) of
DLedger 0.3.1.2's entry-store files, for the tests only.

Written with ``struct`` from the format as DLedger's Java source lays it out (DLedgerEntryCoder,
DLedgerMmapFileStore, MmapFileList), sharing nothing with ``broker.raft``:

- ``data/`` and ``index/`` hold fixed-size files named by their 20-digit start offset.
- A data entry is a 48-byte big-endian header, then the body: magic int32 (1), size int32 (header
  and body), index int64, term int64, pos int64 (its own absolute position), channel int32,
  chainCrc int32, bodyCrc int32, bodySize int32.
- An entry is only put in a file if at least 8 bytes stay free after it; otherwise the rest of the
  file becomes a blank: magic -1 int32, the rest's length int32, zeros, and the entry opens the
  next file. 8 zero bytes where an entry would start end the log.
- An index entry is 32 bytes at index × 32 across the index files: magic int32, pos int64,
  size int32, index int64, term int64.
- ``checkpoint`` is ``key=value`` lines (endIndex, committedIndex).

The reader is strict: anything else raises ``ValueError`` naming the file and position.
"""
from __future__ import annotations

import os
import re
import struct
import zlib
from dataclasses import dataclass, field

ENTRY_MAGIC = 1
BLANK_MAGIC = -1
HEADER_LEN = 48
BLANK_MIN = 8
INDEX_LEN = 32
_NAME = re.compile(r"^\d{20}$")


@dataclass(frozen=True)
class DataEntry:
    file: str
    at: int            # where the entry was found (absolute)
    magic: int
    size: int
    index: int
    term: int
    pos: int           # the header's pos field
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int
    body: bytes


@dataclass(frozen=True)
class Blank:
    file: str
    at: int
    size: int


@dataclass(frozen=True)
class IndexUnit:
    at: int
    magic: int
    pos: int
    size: int
    index: int
    term: int


@dataclass
class DataWalk:
    entries: list[DataEntry] = field(default_factory=list)
    blanks: list[Blank] = field(default_factory=list)
    end: int = 0                # the position where the log stops (8 zero bytes, or the end of the files)
    files: list[str] = field(default_factory=list)


def list_files(directory: str, file_size: int) -> list[tuple[int, str]]:
    """(start offset, path) of every file, in order; they must be contiguous and full-sized."""
    if not os.path.isdir(directory):
        return []
    out = sorted((int(n), os.path.join(directory, n)) for n in os.listdir(directory) if _NAME.match(n))
    for i, (base, path) in enumerate(out):
        if base % file_size or (i and base != out[i - 1][0] + file_size):
            raise ValueError(f"{path}: start offset {base} breaks the sequence of {file_size}-byte files")
        if os.path.getsize(path) != file_size:
            raise ValueError(f"{path}: {os.path.getsize(path)} bytes, not {file_size}")
    return out


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def walk_data(directory: str, file_size: int) -> DataWalk:
    walk = DataWalk()
    files = list_files(directory, file_size)
    walk.end = files[0][0] if files else 0
    for base, path in files:
        walk.files.append(path)
        buf = _read(path)
        at = 0
        while True:
            if file_size - at < BLANK_MIN:
                raise ValueError(f"{path}@{base + at}: {file_size - at} bytes left, less than a blank")
            magic, size = struct.unpack_from(">ii", buf, at)
            if magic == 0 and size == 0:
                walk.end = base + at
                return walk
            if magic == BLANK_MAGIC:
                if size != file_size - at:
                    raise ValueError(f"{path}@{base + at}: blank of {size} bytes, {file_size - at} left")
                if buf[at + BLANK_MIN:].count(0) != file_size - at - BLANK_MIN:
                    raise ValueError(f"{path}@{base + at}: the blank is not zeros after its 8 bytes")
                walk.blanks.append(Blank(path, base + at, size))
                walk.end = base + file_size
                break
            if magic != ENTRY_MAGIC:
                raise ValueError(f"{path}@{base + at}: magic {magic}")
            if file_size - at < HEADER_LEN:
                raise ValueError(f"{path}@{base + at}: header cut by the end of the file")
            (magic, size, index, term, pos, channel, chain_crc, body_crc,
             body_size) = struct.unpack_from(">iiqqqiiii", buf, at)
            if size < HEADER_LEN or at + size + BLANK_MIN > file_size:
                raise ValueError(f"{path}@{base + at}: size {size} does not fit the file with a blank after it")
            if body_size != size - HEADER_LEN:
                raise ValueError(f"{path}@{base + at}: bodySize {body_size} with size {size}")
            if pos != base + at:
                raise ValueError(f"{path}@{base + at}: pos field {pos}")
            walk.entries.append(DataEntry(path, base + at, magic, size, index, term, pos, channel, chain_crc,
                                          body_crc, body_size, buf[at + HEADER_LEN:at + size]))
            at += size
            walk.end = base + at
    return walk


def walk_index(directory: str, file_size: int) -> list[IndexUnit]:
    """Index units from the first file's start up to the first all-zero unit."""
    if file_size % INDEX_LEN:
        raise ValueError(f"index files of {file_size} bytes do not hold whole 32-byte units")
    out = []
    for base, path in list_files(directory, file_size):
        buf = _read(path)
        for at in range(0, file_size, INDEX_LEN):
            unit = buf[at:at + INDEX_LEN]
            if unit.count(0) == INDEX_LEN:
                return out
            out.append(IndexUnit(base + at, *struct.unpack(">iqiqq", unit)))
    return out


def first_nonzero_after(directory: str, file_size: int, end: int) -> int | None:
    """The first absolute position at or after `end` holding a non-zero byte, in any file."""
    for base, path in list_files(directory, file_size):
        if base + file_size <= end:
            continue
        buf = _read(path)
        start = max(0, end - base)
        rest = buf[start:]
        stripped = rest.lstrip(b"\0")
        if stripped:
            return base + start + len(rest) - len(stripped)
    return None


def read_checkpoint(path: str) -> dict[str, str]:
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f.read().splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "!")):
                k, _, v = line.partition("=")
                out[k.strip()] = v.strip()
    return out


# -- a writer, for stores "DLedger wrote" ---------------------------------------------------------
def encode_entry(index: int, term: int, pos: int, body: bytes, body_crc: int = 0, magic: int = ENTRY_MAGIC) -> bytes:
    """An entry as DLedger 0.3.1.2 encodes it (it leaves channel, chainCrc and bodyCrc 0)."""
    return struct.pack(">iiqqqiiii", magic, HEADER_LEN + len(body), index, term, pos, 0, 0, body_crc, len(body)) + body


def encode_index(index: int, term: int, pos: int, size: int, magic: int = ENTRY_MAGIC) -> bytes:
    return struct.pack(">iqiqq", magic, pos, size, index, term)


def write_dledger_store(root: str, entries: list[tuple[int, bytes]], data_size: int, index_size: int) -> list[int]:
    """Write `entries` ((term, body), indexes from 0) into data/ and index/ under `root` the way
    DLedger lays them out; returns each entry's position."""
    data = bytearray()
    index = bytearray()
    positions = []
    for i, (term, body) in enumerate(entries):
        size = HEADER_LEN + len(body)
        left = data_size - len(data) % data_size
        if size + BLANK_MIN > left:
            data += struct.pack(">ii", BLANK_MAGIC, left) + bytes(left - BLANK_MIN)
        pos = len(data)
        data += encode_entry(i, term, pos, body)
        index += encode_index(i, term, pos, size)
        positions.append(pos)
    for sub, buf, size in (("data", data, data_size), ("index", index, index_size)):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
        for base in range(0, max(len(buf), 1), size):
            chunk = bytes(buf[base:base + size])
            with open(os.path.join(root, sub, f"{base:020d}"), "wb") as f:
                f.write(chunk + bytes(size - len(chunk)))
    return positions


# -- the leader's append of one RocketMQ record as one entry (the Appender's entry mode) ----------

def append_entry(data, data_base: int, index, index_base: int, wrote: int, entry_index: int, term: int,
                 queue_offset: int, store_ts: int, topic: bytes, queue_id: int, body: bytes, properties: bytes,
                 flag: int, sys_flag: int, born_ts: int, born_host: bytes, store_host: bytes,
                 reconsume_times: int):
    """Write entry `entry_index` at absolute position `wrote` of the data file `data` (starting at
    `data_base`): the 48-byte header, then the stored record (codec_twin.encode_record) whose
    PHYSICALOFFSET is wrote + 48, and its 32-byte index unit at entry_index x 32 of the index file
    `index` (starting at byte `index_base`). None, nothing written, when the entry would leave
    fewer than 8 bytes in its data file or its index unit does not fit in the index file.
    Returns (physical offset, entry size)."""
    from tests.twins import codec_twin as C
    total = C.record_length(len(body), len(topic), len(properties), len(born_host) == 20, len(store_host) == 20)
    size = HEADER_LEN + total
    at = wrote - data_base
    iat = entry_index * INDEX_LEN - index_base
    if size + BLANK_MIN > len(data) - at or iat < 0 or iat + INDEX_LEN > len(index):
        return None
    record = bytearray(total)
    phys = wrote + HEADER_LEN
    C.encode_record(record, 0, phys, queue_offset, store_ts, topic, queue_id, body, properties, flag, sys_flag,
                    born_ts, born_host, store_host, reconsume_times, 0)
    crc = zlib.crc32(record) & 0x7FFFFFFF
    data[at:at + HEADER_LEN] = struct.pack(">iiqqqiiii", ENTRY_MAGIC, size, entry_index, term, wrote, 0, 0, crc,
                                           total)
    data[at + HEADER_LEN:at + size] = record
    index[iat:iat + INDEX_LEN] = struct.pack(">iqiqq", ENTRY_MAGIC, wrote, size, entry_index, term)
    return phys, size


def scan_entries(buf, start: int, end: int, base_offset: int, check_crc: bool, max_records: int | None = None):
    """The records of the DLedger entries in buf[start:end] (the reput of DLedger's commit log), as
    codec_twin.scan reports records: (records, next_pos, status). Each entry is a 48-byte header
    and one record filling its body exactly (phys_offset: the record's, entry pos + 48); an entry
    with an empty body (a leader's no-op) is stepped over and not counted. Checked at next_pos,
    in this order: fewer than 8 bytes -> PARTIAL; magic -1 -> BLANK; magic and size 0 -> ZERO;
    magic not 1 or size < 48 -> CORRUPT; size past `end` -> PARTIAL; bodySize != size - 48 ->
    CORRUPT; a body that is not exactly one valid record -> CORRUPT. next_pos is an entry's start."""
    from tests.twins import codec_twin as C
    mv = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
    out = []
    pos = start
    limit = None if max_records is None or max_records < 0 else max_records
    while limit is None or len(out) < limit:
        avail = end - pos
        if avail == 0:
            return out, pos, C.SCAN_END
        if avail < BLANK_MIN:
            return out, pos, C.SCAN_PARTIAL
        magic, size = struct.unpack_from(">ii", mv, pos)
        if magic == BLANK_MAGIC:
            return out, pos, C.SCAN_BLANK
        if magic == 0 and size == 0:
            return out, pos, C.SCAN_ZERO
        if magic != ENTRY_MAGIC or size < HEADER_LEN:
            return out, pos, C.SCAN_CORRUPT
        if size > avail:
            return out, pos, C.SCAN_PARTIAL
        (body_size,) = struct.unpack_from(">i", mv, pos + 44)
        if body_size != size - HEADER_LEN:
            return out, pos, C.SCAN_CORRUPT
        if body_size:
            recs, nxt, status = C.scan(mv, pos + HEADER_LEN, pos + size, base_offset, check_crc, 1)
            if len(recs) != 1 or nxt != pos + size or status != C.SCAN_END:
                return out, pos, C.SCAN_CORRUPT
            out.append(recs[0])
        pos += size
    return out, pos, C.SCAN_END
