"""Pure-Python twin of broker.kernels.pulled (tests only), written from docs/formats.md §1 and
§1.1, not from the kernel's code: struct for the fixed fields, bytes.split for the properties.

decode_records gives one dict per record (MESSAGE_FIELDS: what a MessageExt view shows);
record_columns gives the Spark columns as Python lists (COLUMNS).
"""
from __future__ import annotations

import socket
import struct
import zlib

MAGIC = 0xDAA320A7
MESSAGE_FIELDS = ("topic", "body", "queue_id", "queue_offset", "commit_log_offset", "msg_id", "properties",
                  "reconsume_times", "born_timestamp", "store_timestamp", "born_host", "store_host", "sys_flag",
                  "flag", "tags", "keys", "uniq_key", "retry_topic")
def _us(ms: int) -> int:
    """Milliseconds to microseconds in int64, wrapping as the kernel's (and numpy's) arithmetic does."""
    return (ms * 1000 + (1 << 63)) % (1 << 64) - (1 << 63)


COLUMNS = ("topic", "queue_id", "queue_offset", "msg_id", "keys", "tags", "properties", "body", "born_ts",
           "store_ts")


class PulledRecordsError(ValueError):
    def __init__(self, offset, message):
        super().__init__(message)
        self.offset = offset


def _host(raw: bytes) -> str:
    ip = socket.inet_ntop(socket.AF_INET6 if len(raw) == 20 else socket.AF_INET, raw[:-4])
    return f"{ip}:{int.from_bytes(raw[-4:], 'big')}"


def _pairs(props: bytes) -> list[tuple[bytes, bytes]]:
    """Every kept pair, in order: pieces at \\x02, split at the first \\x01, key and value non-empty."""
    out = []
    for piece in props.split(b"\x02"):
        key, sep, value = piece.partition(b"\x01")
        if sep and key and value:
            out.append((key, value))
    return out


def _inflated(body: bytes, msg_id: str, pos: int) -> bytes:
    try:
        return zlib.decompress(body)
    except zlib.error:
        raise PulledRecordsError(pos, f"message {msg_id} is flagged compressed but does not inflate") from None


def _record(data: bytes, pos: int, inflate: bool = True) -> dict:
    """The record at pos, checked in §1.1's order; its body inflated when flagged compressed
    (unless `inflate` is false: the caller decides first whether it wants the record)."""
    left = len(data) - pos
    if left < 8:
        raise PulledRecordsError(pos, f"pulled body is corrupt at byte {pos}: too short")
    total, magic = struct.unpack_from(">iI", data, pos)
    if magic != MAGIC:
        raise PulledRecordsError(pos, f"pulled body is corrupt at byte {pos}: magic")
    if total < 91 or total > left:
        raise PulledRecordsError(pos, f"pulled body is corrupt at byte {pos}: total size")
    rec = data[pos:pos + total]
    _, _, _crc, qid, flag, qoff, phys, sysflag, born_ts = struct.unpack_from(">iIIiiqqiq", rec, 0)
    bh = 20 if sysflag & 0x10 else 8
    sh = 20 if sysflag & 0x20 else 8
    at = 48 + bh
    if at + 8 + sh + 16 > total:
        raise PulledRecordsError(pos, f"pulled body is corrupt at byte {pos}: hosts")
    born = rec[48:at]
    (store_ts,) = struct.unpack_from(">q", rec, at)
    store = rec[at + 8:at + 8 + sh]
    at += 8 + sh
    (reconsume,) = struct.unpack_from(">i", rec, at)
    at += 12
    (blen,) = struct.unpack_from(">i", rec, at)
    at += 4
    if blen < 0 or at + blen + 3 > total:
        raise PulledRecordsError(pos, f"pulled body is corrupt at byte {pos}: body length")
    body = rec[at:at + blen]
    at += blen
    (tlen,) = struct.unpack_from(">b", rec, at)
    at += 1
    if tlen < 0 or at + tlen + 2 > total:
        raise PulledRecordsError(pos, f"pulled body is corrupt at byte {pos}: topic length")
    topic = rec[at:at + tlen]
    at += tlen
    (plen,) = struct.unpack_from(">h", rec, at)
    at += 2
    if plen < 0 or at + plen != total:
        raise PulledRecordsError(pos, f"pulled body is corrupt at byte {pos}: properties length")
    msg_id = (store + phys.to_bytes(8, "big", signed=True)).hex().upper()
    if sysflag & 1 and inflate:
        body = _inflated(body, msg_id, pos)
    return {"size": total, "topic": topic, "body": body, "queue_id": qid, "queue_offset": qoff,
            "commit_log_offset": phys, "msg_id": msg_id, "props": rec[at:at + plen], "reconsume_times": reconsume,
            "born_timestamp": born_ts, "store_timestamp": store_ts, "born_host": born, "store_host": store,
            "sys_flag": sysflag, "flag": flag}


def decode_records(data) -> list[dict]:
    data, pos, out = bytes(data), 0, []
    while pos < len(data):
        r = _record(data, pos)
        pairs = [(k.decode("utf-8", "replace"), v.decode("utf-8", "replace")) for k, v in _pairs(r["props"])]
        props = dict(pairs)
        out.append({"topic": r["topic"].decode("utf-8", "replace"), "body": r["body"], "queue_id": r["queue_id"],
                    "queue_offset": r["queue_offset"], "commit_log_offset": r["commit_log_offset"],
                    "msg_id": r["msg_id"], "properties": props, "reconsume_times": r["reconsume_times"],
                    "born_timestamp": r["born_timestamp"], "store_timestamp": r["store_timestamp"],
                    "born_host": _host(r["born_host"]), "store_host": _host(r["store_host"]),
                    "sys_flag": r["sys_flag"], "flag": r["flag"], "tags": props.get("TAGS"), "keys": props.get("KEYS"),
                    "uniq_key": props.get("UNIQ_KEY"), "retry_topic": props.get("RETRY_TOPIC")})
        pos += r["size"]
    return out


def record_columns(chunks, lo: int, hi: int) -> dict:
    """The rows of records with lo <= queue offset < hi: each column a list (strings and binaries
    as bytes, keys/tags None when absent, properties a list of (key, value) bytes pairs). A record
    outside the range is walked over whole (its layout checked) but not inflated: a compressed
    body there that does not inflate is no row of the read and does not fail it."""
    cols: dict = {c: [] for c in COLUMNS}
    for chunk in chunks:
        data, pos = bytes(chunk), 0
        while pos < len(data):
            r = _record(data, pos, inflate=False)
            at = pos
            pos += r["size"]
            if not lo <= r["queue_offset"] < hi:
                continue
            if r["sys_flag"] & 1:
                r["body"] = _inflated(r["body"], r["msg_id"], at)
            pairs = _pairs(r["props"])
            last = dict(pairs)
            for name, value in (("topic", r["topic"]), ("queue_id", r["queue_id"]),
                                ("queue_offset", r["queue_offset"]), ("msg_id", r["msg_id"].encode()),
                                ("keys", last.get(b"KEYS")), ("tags", last.get(b"TAGS")), ("properties", pairs),
                                ("body", r["body"]), ("born_ts", _us(r["born_timestamp"])),
                                ("store_ts", _us(r["store_timestamp"]))):
                cols[name].append(value)
    return cols
