"""Pure-Python twin of broker.kernels.entry_push (tests only), written from DLedger 0.3.1.2's entry
layout (broker/raft/entry_format.py's docstring) with struct and zlib, sharing nothing with the
broker: an entry is a 48-byte big-endian header (magic int32, size int32, index int64, term int64,
pos int64, channel int32, chainCrc int32, bodyCrc int32, bodySize int32) then the body; an index
unit is 32 bytes at index x 32 (magic int32, pos int64, size int32, index int64, term int64)."""
from __future__ import annotations

import os
import struct
import zlib

HEADER = struct.Struct(">iiqqqiiii")
UNIT = struct.Struct(">iqiqq")
BLANK_ROOM = 8


class PushBodyError(ValueError):
    pass


def check_entries(body, index, pos, count, term):
    mv = memoryview(body).cast("B")
    n = len(mv)
    at = 0
    expect = index
    last_end = last_term = first_term = -1
    found = 0
    while at < n:
        room = n - at
        if room < 48:
            raise PushBodyError(f"{room} bytes after entry {expect - 1}, less than a header")
        magic, size, e_index, e_term, e_pos, _, _, crc, body_size = HEADER.unpack_from(mv, at)
        if magic != 1:
            raise PushBodyError(f"entry {e_index}: magic {magic} is not 1")
        if size < 48 or body_size != size - 48:
            raise PushBodyError(f"entry {e_index}: size {size} with bodySize {body_size}")
        if size > room:
            raise PushBodyError(f"entry {e_index}: size {size} runs past the push ({room} bytes left)")
        if e_index < 0 or e_term < 0 or e_pos < 0:
            raise PushBodyError(f"entry index {e_index}, term {e_term}, pos {e_pos}: negative")
        if e_index != expect:
            raise PushBodyError(f"entry {e_index} where entry {expect} belongs")
        if e_term > term:
            raise PushBodyError(f"entry {e_index} of term {e_term} pushed in term {term}")
        if e_term < last_term:
            raise PushBodyError(f"entry {e_index} of term {e_term} after one of term {last_term}")
        if found and e_pos < last_end:
            raise PushBodyError(f"entry {e_index} at pos {e_pos} overlaps the one before (ending at {last_end})")
        if not found and e_pos != pos:
            raise PushBodyError(f"entry {e_index} at pos {e_pos}, the push says {pos}")
        if crc != 0 and zlib.crc32(mv[at + 48:at + size]) & 0x7FFFFFFF != crc:
            raise PushBodyError(f"entry {e_index}: the body does not match its CRC {crc}")
        if not found:
            first_term = e_term
        found += 1
        at += size
        expect += 1
        last_end = e_pos + size
        last_term = e_term
    if found != count:
        raise PushBodyError(f"{found} entries in a push of {count}")
    return first_term, last_term


def append_entries(body, at, index, wrote, min_term, seg, seg_base, iseg, iseg_base, fd=-1):
    mv = memoryview(body).cast("B")
    n = len(mv)
    if not 0 <= at <= n:
        raise ValueError(f"range [{at}, {n}) outside a buffer of {n}")
    rel = wrote - seg_base
    if rel < 0 or rel > len(seg):
        return 0, at, wrote, min_term
    k = 0
    term = min_term
    run = []  # (place in the file, the entry as written)
    while n - at >= 48:
        magic, size, e_index, e_term, e_pos, _, _, crc, body_size = HEADER.unpack_from(mv, at)
        uoff = e_index * 32 - iseg_base
        if (magic != 1 or size < 48 or body_size != size - 48 or size > n - at or e_index != index + k
                or e_pos != seg_base + rel or e_term < term or rel + size + BLANK_ROOM > len(seg)
                or uoff < 0 or uoff + 32 > len(iseg)):
            break
        entry = bytearray(mv[at:at + size])
        HEADER.pack_into(entry, 0, magic, size, e_index, e_term, e_pos, 0, 0, crc, body_size)
        run.append((rel, entry))
        UNIT.pack_into(iseg, uoff, 1, e_pos, size, e_index, e_term)
        term = e_term
        at += size
        rel += size
        k += 1
    for place, entry in run:  # the file's bytes are the same whichever way they get there
        if fd >= 0:
            os.pwrite(fd, entry, place)
        else:
            seg[place:place + len(entry)] = entry
    return k, at, seg_base + rel, term
