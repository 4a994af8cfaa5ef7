"""An independent decoder for stored CommitLog records and ConsumeQueue entries (tests only).

Written with ``struct`` straight from the RocketMQ 4.x field table (docs/formats.md §1-§2), field by
field in file order like ``MessageDecoder.decode``; it deliberately shares no code with
``codec_twin`` so the two can check each other. It does not verify the body CRC (it reports the
stored value as ``body_crc``); it raises ``ValueError`` on a wrong magic, a length running past the
buffer or a TOTALSIZE that disagrees with the field lengths.

Text fields are decoded as UTF-8 with ``surrogateescape`` so that ``s.encode("utf-8",
"surrogateescape")`` gives back the exact stored bytes even when they are not valid UTF-8.
Hosts are rendered "a.b.c.d:port" (IPv4) and "[v6addr]:port" (IPv6); the port is the stored int32.
"""
from __future__ import annotations

import ipaddress
import struct

MAGIC_MESSAGE = -626843481      # 0xDAA320A7 as Java's int
MAGIC_BLANK = -875286124        # 0xCBD43194 as Java's int
BORNHOST_V6_FLAG = 1 << 4
STOREHOST_V6_FLAG = 1 << 5
CQ_STORE_UNIT_SIZE = 20


class _Reader:
    """A cursor over a buffer, reading big-endian Java primitives like ByteBuffer.getX()."""

    def __init__(self, buf, pos: int):
        self.mv = memoryview(buf).cast("B") if memoryview(buf).format != "B" else memoryview(buf)
        self.pos = pos

    def _take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos < 0 or self.pos + size > len(self.mv):
            raise ValueError(f"read of {size} bytes at {self.pos} runs past the buffer ({len(self.mv)})")
        (value,) = struct.unpack_from(fmt, self.mv, self.pos)
        self.pos += size
        return value

    def get_byte(self) -> int:
        return self._take(">b")

    def get_short(self) -> int:
        return self._take(">h")

    def get_int(self) -> int:
        return self._take(">i")

    def get_long(self) -> int:
        return self._take(">q")

    def get_bytes(self, n: int) -> bytes:
        if n < 0:
            raise ValueError(f"negative length {n} at {self.pos}")
        if self.pos + n > len(self.mv):
            raise ValueError(f"{n} bytes at {self.pos} run past the buffer ({len(self.mv)})")
        out = self.mv[self.pos:self.pos + n].tobytes()
        self.pos += n
        return out


def _host(r: _Reader, v6: bool) -> str:
    ip = ipaddress.ip_address(r.get_bytes(16 if v6 else 4))
    port = r.get_int()
    return f"[{ip}]:{port}" if v6 else f"{ip}:{port}"


def _properties(text: str) -> dict[str, str]:
    """string2messageProperties (4.9.1+): pieces split on \\x02, key\\x01value, both non-empty."""
    out: dict[str, str] = {}
    for piece in text.split("\x02"):
        key, sep, value = piece.partition("\x01")
        if sep and key and value:
            out[key] = value
    return out


def decode_record(buf, pos: int) -> dict:
    r = _Reader(buf, pos)
    rec: dict = {}
    rec["total_size"] = r.get_int()
    rec["magic"] = r.get_int() & 0xFFFFFFFF
    if rec["magic"] != MAGIC_MESSAGE & 0xFFFFFFFF:
        raise ValueError(f"not a message at {pos}: magic {rec['magic']:#010x}")
    rec["body_crc"] = r.get_int()
    rec["queue_id"] = r.get_int()
    rec["flag"] = r.get_int()
    rec["queue_offset"] = r.get_long()
    rec["physical_offset"] = r.get_long()
    rec["sys_flag"] = r.get_int()
    rec["born_timestamp"] = r.get_long()
    rec["born_host"] = _host(r, bool(rec["sys_flag"] & BORNHOST_V6_FLAG))
    rec["store_timestamp"] = r.get_long()
    rec["store_host"] = _host(r, bool(rec["sys_flag"] & STOREHOST_V6_FLAG))
    rec["reconsume_times"] = r.get_int()
    rec["prepared_transaction_offset"] = r.get_long()
    rec["body"] = r.get_bytes(r.get_int())
    rec["topic"] = r.get_bytes(r.get_byte()).decode("utf-8", "surrogateescape")
    rec["properties"] = _properties(r.get_bytes(r.get_short()).decode("utf-8", "surrogateescape"))
    consumed = r.pos - pos
    if consumed != rec["total_size"]:
        raise ValueError(f"record at {pos}: fields take {consumed} bytes, TOTALSIZE says {rec['total_size']}")
    return rec


def decode_cq_entry(buf, pos: int) -> tuple[int, int, int]:
    """One 20-byte ConsumeQueue unit: (commitLogOffset i64, size i32, tagsCode i64)."""
    r = _Reader(buf, pos)
    return r.get_long(), r.get_int(), r.get_long()


def walk_segment(buf, base_offset: int) -> list[dict]:
    """Decode records from the start of a segment until a blank, zeros or fewer than 8 bytes.

    Each dict is ``decode_record``'s plus ``commit_log_offset`` = base_offset + its position.
    """
    out = []
    size = len(memoryview(buf).cast("B")) if memoryview(buf).format != "B" else len(memoryview(buf))
    pos = 0
    while pos + 8 <= size:
        head = _Reader(buf, pos)
        total, magic = head.get_int(), head.get_int()
        if magic == MAGIC_BLANK or (total == 0 and magic == 0):
            break
        rec = decode_record(buf, pos)
        rec["commit_log_offset"] = base_offset + pos
        out.append(rec)
        pos += rec["total_size"]
    return out
