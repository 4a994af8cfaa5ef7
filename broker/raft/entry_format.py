"""DLedger 0.3.1.2's on-disk entry and index formats (DLedgerEntryCoder, DLedgerMmapFileStore,
MmapFileList), big-endian like Java's ByteBuffer, so that DLedger's own tools read our files.

Data entry, HEADER_SIZE (48) bytes then the body:

    magic int32 (MAGIC_1)   size int32 (header + body)   index int64   term int64
    pos int64 (the entry's own absolute position, for validation)   channel int32 (0)
    chainCrc int32 (0)   bodyCrc int32   bodySize int32   body

DLedger declares bodyCrc but never computes nor reads it (encode writes the entry's field, left 0;
decode and recover skip it). We fill it with the body's CRC32, sign bit cleared (RocketMQ's
UtilAll.crc32), and verify it at recovery when it is not 0: DLedger reads our files unchanged,
ours catches a torn body whose header made it to disk, and a store DLedger wrote (bodyCrc 0)
still opens here, unchecked as DLedger leaves it.

End of a data file: an entry is placed only if it leaves at least MIN_BLANK_LEN bytes behind it
in its file (MmapFileList.preAppend with useBlank), so the rest of a file that cannot take the
next entry is at least 8 bytes and is closed with `[BLANK_MAGIC int32][rest of the file int32]`
followed by zeros, and the entry starts the next file.

Index entry, INDEX_UNIT_SIZE (32) bytes at index × 32 across the index files (no blanks: the
index file size is a multiple of 32):

    magic int32   pos int64   size int32   index int64   term int64
"""
from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

MAGIC_1 = 1
CURRENT_MAGIC = MAGIC_1
BLANK_MAGIC = -1
MIN_BLANK_LEN = 8
HEADER_SIZE = 48          # DLedgerEntry.BODY_OFFSET (its HEADER_SIZE, 44, stops before bodySize)
POS_OFFSET = 24           # where the pos field sits in the header
INDEX_UNIT_SIZE = 32

HEADER = struct.Struct(">iiqqqiiii")
INDEX = struct.Struct(">iqiqq")
BLANK = struct.Struct(">ii")
assert HEADER.size == HEADER_SIZE and INDEX.size == INDEX_UNIT_SIZE and BLANK.size == MIN_BLANK_LEN

# DLedgerConfig defaults
DEFAULT_DATA_FILE_SIZE = 1024 * 1024 * 1024          # mappedFileSizeForEntryData
DEFAULT_INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024   # mappedFileSizeForEntryIndex


class Header(NamedTuple):
    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int


class IndexEntry(NamedTuple):
    magic: int
    pos: int
    size: int
    index: int
    term: int


class Entry(NamedTuple):
    """One entry as read from the map: `body` is a read-only memoryview over the data file (no
    copy), valid until the entry is truncated away (its bytes are then zeroed)."""
    index: int
    term: int
    pos: int
    size: int
    body: memoryview


def body_crc(body) -> int:
    """CRC32 of the body with the sign bit cleared (RocketMQ's UtilAll.crc32)."""
    return zlib.crc32(body) & 0x7FFFFFFF


def byte_view(body) -> memoryview:
    """Any C-contiguous bytes-like object as a flat unsigned-byte view, so it can be copied into
    the map with one slice assignment (no intermediate bytes object)."""
    mv = body if isinstance(body, memoryview) else memoryview(body)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def header_problem(h: Header, at: int, room: int) -> str | None:
    """Why the header read at absolute position `at`, with `room` bytes left in its file, is not an
    entry this store (or DLedger) could have written; None if it is one. The CRC of the body and
    the index/term sequence are the caller's to check."""
    if h.magic != MAGIC_1:
        return f"magic {h.magic} is not {MAGIC_1}"
    if h.size < HEADER_SIZE:
        return f"size {h.size} is smaller than the {HEADER_SIZE}-byte header"
    if h.size + MIN_BLANK_LEN > room:
        return f"size {h.size} runs past the file ({room} bytes left, {MIN_BLANK_LEN} kept for the blank)"
    if h.body_size + HEADER_SIZE != h.size:
        return f"bodySize {h.body_size} + {HEADER_SIZE} != size {h.size}"
    if h.pos != at:
        return f"pos field {h.pos} != its position {at}"
    return None
