"""Pure-Python twin of broker.kernels.timer_wheel (tests only), written from its rules (the module
doc of pyx/timer_wheel.pyx), docs/formats.md §1 (the stored record) and RocketMQ's TimerLog /
TimerWheel layouts as broker.store.timer_files describes them, not from the kernel's code.

enqueue_records walks the records of a span from `pos`; per record:
- a record that is not a whole message record (fewer than 52 bytes left, another magic, lengths
  past its size, properties not ending it): ENQ_PYTHON at it;
- its properties read as decode_properties reads them (split on \\x02, then on the first \\x01;
  an entry without a key or a value skipped; the last of equal keys counts): no TIMER_OUT_MS, or
  one that is not an optional '-' and 1 to 18 digits: ENQ_PYTHON;
- below (past_qo, past_ms) on both counts: skipped, counted; due before read_ms: ENQ_PYTHON;
- REAL_TOPIC not UTF-8: ENQ_PYTHON (its hash is String.hashCode over UTF-16 units; 0 without it);
- no room for a unit plus a 16-byte tail in the log segment: ENQ_LOG_FULL;
- the roll: a time roll_window slots or more after write_ms gets magic |2 and is parked at
  write_ms + roll_window // 2 slots if it is less than roll_window // 3 slots past the window,
  else at its edge; a delay (time - write_ms) outside an int32: ENQ_PYTHON;
- the unit appended, linked after its slot's last (the slot holding another time counts as empty).
"""
from __future__ import annotations

import re
import struct

ENQ_DONE, ENQ_PYTHON, ENQ_LOG_FULL = 0, 1, 2
MESSAGE_MAGIC = 0xDAA320A7
UNIT = struct.Struct(">iqiqiqiiq")
SLOT = struct.Struct(">qqqii")


def properties(raw: bytes) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for entry in raw.split(b"\x02"):
        k, sep, v = entry.partition(b"\x01")
        if k and sep and v:
            out[k] = v
    return out


def java_hash(text: bytes) -> int | None:
    try:
        units = text.decode("utf-8").encode("utf-16-be", "surrogatepass")
    except UnicodeDecodeError:
        return None
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _record(span: bytes, pos: int):
    """(queue offset, physical offset, size, properties) or None."""
    if len(span) - pos < 52:
        return None
    total, magic = struct.unpack_from(">iI", span, pos)
    (sys_flag,) = struct.unpack_from(">i", span, pos + 36)
    at = 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 12
    if magic != MESSAGE_MAGIC or total < at + 7 or total > len(span) - pos:
        return None
    (blen,) = struct.unpack_from(">i", span, pos + at)
    if blen < 0 or at + 4 + blen + 1 > total:
        return None
    at += 4 + blen
    tlen = span[pos + at]
    if tlen > 127 or at + 1 + tlen + 2 > total:
        return None
    at += 1 + tlen
    (plen,) = struct.unpack_from(">h", span, pos + at)
    if plen < 0 or at + 2 + plen != total:
        return None
    qo, phys = struct.unpack_from(">qq", span, pos + 20)
    return qo, phys, total, properties(bytes(span[pos + at + 2:pos + total]))


def enqueue_records(span, pos, wheel, slots, precision, log, log_base, log_wrote, log_size, write_ms, read_ms,
                    past_qo, past_ms, roll_window) -> tuple:
    count, nxt = 0, -1
    window = roll_window * precision
    status = ENQ_DONE
    while pos < len(span):
        rec = _record(span, pos)
        if rec is None:
            status = ENQ_PYTHON
            break
        qo, phys, size, props = rec
        out = props.get(b"TIMER_OUT_MS")
        if out is None or not re.fullmatch(rb"-?[0-9]{1,18}", out):
            status = ENQ_PYTHON
            break
        delayed = int(out)
        if qo < past_qo and delayed < past_ms:
            pass
        elif delayed < read_ms:
            status = ENQ_PYTHON
            break
        else:
            hashed = java_hash(props[b"REAL_TOPIC"]) if b"REAL_TOPIC" in props else 0
            if hashed is None:
                status = ENQ_PYTHON
                break
            if log_wrote - log_base + 52 + 16 > log_size:
                status = ENQ_LOG_FULL
                break
            magic = 1 | (4 if b"TIMER_DEL_UNIQKEY" in props else 0)
            if delayed - write_ms >= window:
                magic |= 2
                if delayed - write_ms - window < roll_window // 3 * precision:
                    delayed = write_ms + roll_window // 2 * precision
                else:
                    delayed = write_ms + window
            if not -2**31 <= delayed - write_ms < 2**31:
                status = ENQ_PYTHON
                break
            at = delayed // precision % slots * 32
            t, first, last, num, _ = SLOT.unpack_from(wheel, at)
            if t != delayed // precision:
                first, last, num = -1, -1, 0
            UNIT.pack_into(log, log_wrote - log_base, 52, last, magic, write_ms, delayed - write_ms, phys, size,
                           hashed, 0)
            SLOT.pack_into(wheel, at, delayed // precision, log_wrote if first == -1 else first, log_wrote, num + 1, 0)
            log_wrote += 52
        count += 1
        nxt = qo + 1
        pos += size
    return status, pos, count, nxt, log_wrote
