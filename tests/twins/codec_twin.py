"""Pure-Python twin of the ``broker.kernels.codec`` Cython kernel (tests only).

Written from the RocketMQ 4.x formats (docs/formats.md §1-§2), not from the kernel. Same names
and semantics as the kernel; slow and obvious on purpose.

Stored record (V1, big-endian)::

    off  field                       size
      0  TOTALSIZE                   i32   whole record incl. this field
      4  MAGICCODE                   u32   0xDAA320A7
      8  BODYCRC                     i32   zlib.crc32(body) & 0x7FFFFFFF
     12  QUEUEID                     i32
     16  FLAG                        i32
     20  QUEUEOFFSET                 i64
     28  PHYSICALOFFSET              i64
     36  SYSFLAG                     i32   0x10: BORNHOST is IPv6, 0x20: STOREHOST is IPv6
     40  BORNTIMESTAMP               i64
     48  BORNHOST                    8|20  IPv4(4)+port(i32) | IPv6(16)+port(i32)
      .  STORETIMESTAMP              i64
      .  STOREHOST                   8|20
      .  RECONSUMETIMES              i32
      .  PREPAREDTRANSACTIONOFFSET   i64
      .  BODYLEN i32 + BODY
      .  TOPICLEN i8 (signed) + TOPIC
      .  PROPLEN i16 (signed) + PROPERTIES   UTF-8 "k\\x01v\\x02k\\x01v"

Choices where the brief leaves room (kept in one place so a kernel/twin mismatch is easy to spot):

* ``scan`` with ``check_crc=False`` does not compute the CRC at all and reports
  ``body_crc_ok=True`` ("not found bad"); with ``check_crc=True`` a mismatch stops the scan with
  SCAN_CORRUPT, so every returned record has ``body_crc_ok=True`` either way.
* ``scan`` check order at ``next_pos``: fewer than 8 bytes -> PARTIAL; TOTALSIZE==0 and magic==0 ->
  ZERO; blank magic -> BLANK; other unknown magic -> CORRUPT; TOTALSIZE < 91 (signed, so anything
  >= 0x80000000 read unsigned is here too) -> CORRUPT; TOTALSIZE > end-next_pos -> PARTIAL; then the
  record's inner lengths (negative BODYLEN/TOPICLEN/PROPLEN, a length running past TOTALSIZE, the
  recomputed length != TOTALSIZE) -> CORRUPT; then CRC when ``check_crc``.
  TOPICLEN == 0 is accepted by ``scan`` (Java's reader accepts it too); only the encoder rejects it.
* ``max_records``: ``None`` or a negative number means no limit; 0 returns at once (SCAN_END).
* Properties are parsed as RocketMQ >= 4.9.1 ``string2messageProperties`` does: split on \\x02,
  split each piece at its first \\x01, keep it only if key and value are both non-empty (so pieces
  with no \\x01 are ignored, a trailing \\x02 is harmless, the last duplicate wins, and a value may
  contain further \\x01 bytes). Text is decoded as Java does, invalid UTF-8 -> U+FFFD.
* Integer fields out of their Java range (i32/i64) raise OverflowError, as Cython's C conversion
  does; nothing is written to ``buf`` when any check fails.
* ``write_blank`` requires 8 <= remaining <= 0x7FFFFFFF and 8 bytes of room in ``buf``.
* ``encode_batch`` validates every input (topic, hosts, every properties entry, ``limit`` within
  ``buf``) before writing, so a bad batch writes nothing.
* The schedule-topic rule (tagsCode = delivery time for SCHEDULE_TOPIC_XXXX) is not applied here.
"""
from __future__ import annotations

import struct
import zlib

MESSAGE_MAGIC_CODE = 0xDAA320A7
BLANK_MAGIC_CODE = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

SCAN_END = 0
SCAN_BLANK = 1
SCAN_PARTIAL = 2
SCAN_ZERO = 3
SCAN_CORRUPT = 4

FIXED_PART_V4 = 91          # fixed part with IPv4 born and store hosts
V6_HOST_EXTRA = 12          # each IPv6 host adds 16+4 - (4+4)
MAX_TOPIC_LENGTH = 127      # V1: signed byte length
MAX_PROPERTIES_LENGTH = 32767

NAME_VALUE_SEPARATOR = 1
PROPERTY_SEPARATOR = 2
PROPERTY_TAGS = b"TAGS"
PROPERTY_KEYS = b"KEYS"
PROPERTY_UNIQ_KEY = b"UNIQ_KEY"

_I32 = (-(1 << 31), (1 << 31) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)

# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
_HEAD = struct.Struct(">iIiiiqqiq")
assert _HEAD.size == 48
_I32_BE = struct.Struct(">i")
_U32_BE = struct.Struct(">I")
_I64_BE = struct.Struct(">q")
_I16_BE = struct.Struct(">h")
_I8 = struct.Struct(">b")
_RECONSUME_PREPARED = struct.Struct(">iq")
_BLANK = struct.Struct(">iI")


class MessageIllegal(ValueError):
    """A message the store refuses (RocketMQ's MESSAGE_ILLEGAL / PROPERTIES_SIZE_EXCEEDED)."""


# ------------------------------------------------------------------------------------------ helpers

def _as_bytes_view(buf) -> memoryview:
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.format != "B":
        mv = mv.cast("B")
    return mv


def _check_int(name: str, value: int, bounds: tuple[int, int]) -> int:
    value = int(value)
    lo, hi = bounds
    if not lo <= value <= hi:
        raise OverflowError(f"{name}={value} out of range [{lo}, {hi}]")
    return value


def _host_is_v6(name: str, host: bytes) -> bool:
    if len(host) == 8:
        return False
    if len(host) == 20:
        return True
    raise MessageIllegal(f"{name} must be 8 (IPv4+port) or 20 (IPv6+port) bytes, got {len(host)}")


def _check_topic(topic: bytes) -> None:
    if len(topic) == 0:
        raise MessageIllegal("empty topic")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise MessageIllegal(f"topic is {len(topic)} bytes, more than {MAX_TOPIC_LENGTH}")


def _check_properties(properties: bytes) -> None:
    if len(properties) > MAX_PROPERTIES_LENGTH:
        raise MessageIllegal(f"properties are {len(properties)} bytes, more than {MAX_PROPERTIES_LENGTH}")


def _properties_pairs(data: bytes):
    """Yield (key, value) byte pairs the way RocketMQ >= 4.9.1 string2messageProperties does."""
    n = len(data)
    index = 0
    while index < n:
        new_index = data.find(PROPERTY_SEPARATOR, index)
        if new_index < 0:
            new_index = n
        kv = data.find(NAME_VALUE_SEPARATOR, index, new_index)
        # key non-empty (kv > index) and value non-empty (kv < new_index - 1)
        if kv > index and kv < new_index - 1:
            yield data[index:kv], data[kv + 1:new_index]
        index = new_index + 1


def _property(data: bytes, key: bytes) -> bytes | None:
    found = None
    for k, v in _properties_pairs(data):
        if k == key:
            found = v          # HashMap.put: the last one wins
    return found


# ------------------------------------------------------------------------------------------ API

def record_length(body_len: int, topic_len: int, props_len: int, born_v6: bool = False,
                  store_v6: bool = False) -> int:
    """CommitLog.calMsgLength: 91 + body + topic + properties (+12 per IPv6 host)."""
    return (FIXED_PART_V4 + (V6_HOST_EXTRA if born_v6 else 0) + (V6_HOST_EXTRA if store_v6 else 0)
            + body_len + topic_len + props_len)


def crc32(data) -> int:
    """UtilAll.crc32: CRC32 with the sign bit cleared."""
    return zlib.crc32(data) & 0x7FFFFFFF


def java_string_hash(utf8_bytes) -> int:
    """Java String.hashCode of the UTF-8 decoded text: h = 31*h + unit over UTF-16 code units."""
    text = utf8_bytes if isinstance(utf8_bytes, str) else bytes(utf8_bytes).decode("utf-8", "replace")
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tag_hash(properties_bytes) -> int:
    """tagsCode of a record: hash of the TAGS value, 0 without one."""
    tags = _property(bytes(properties_bytes), PROPERTY_TAGS)
    return java_string_hash(tags) if tags else 0


def parse_properties(data) -> dict[str, str]:
    return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace")
            for k, v in _properties_pairs(bytes(data))}


def encode_properties(d: dict[str, str]) -> bytes:
    """messageProperties2String, 4.9.1+ style (no trailing \\x02); None values are skipped."""
    return "\x02".join(f"{k}\x01{v}" for k, v in d.items() if v is not None).encode("utf-8")


def encode_record(buf, pos, physical_offset, queue_offset, store_ts, topic, queue_id, body, properties,
                  flag, sys_flag, born_ts, born_host, store_host, reconsume_times,
                  prepared_tx_offset) -> int:
    topic = bytes(topic)
    body = bytes(body)
    properties = bytes(properties)
    born_host = bytes(born_host)
    store_host = bytes(store_host)
    _check_topic(topic)
    _check_properties(properties)
    born_v6 = _host_is_v6("born_host", born_host)
    store_v6 = _host_is_v6("store_host", store_host)

    physical_offset = _check_int("physical_offset", physical_offset, _I64)
    queue_offset = _check_int("queue_offset", queue_offset, _I64)
    store_ts = _check_int("store_ts", store_ts, _I64)
    queue_id = _check_int("queue_id", queue_id, _I32)
    flag = _check_int("flag", flag, _I32)
    sys_flag = _check_int("sys_flag", sys_flag, _I32)
    born_ts = _check_int("born_ts", born_ts, _I64)
    reconsume_times = _check_int("reconsume_times", reconsume_times, _I32)
    prepared_tx_offset = _check_int("prepared_tx_offset", prepared_tx_offset, _I64)

    sys_flag &= ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    if born_v6:
        sys_flag |= SYSFLAG_BORNHOST_V6
    if store_v6:
        sys_flag |= SYSFLAG_STOREHOST_V6

    total = record_length(len(body), len(topic), len(properties), born_v6, store_v6)
    if total > _I32[1]:
        raise MessageIllegal(f"record of {total} bytes")
    mv = _as_bytes_view(buf)
    pos = int(pos)
    if pos < 0 or pos + total > len(mv):
        raise ValueError(f"record of {total} bytes does not fit at {pos} in a buffer of {len(mv)}")

    record = b"".join((
        _HEAD.pack(total, MESSAGE_MAGIC_CODE, crc32(body), queue_id, flag, queue_offset,
                   physical_offset, sys_flag, born_ts),
        born_host,
        _I64_BE.pack(store_ts),
        store_host,
        _RECONSUME_PREPARED.pack(reconsume_times, prepared_tx_offset),
        _I32_BE.pack(len(body)), body,
        _I8.pack(len(topic)), topic,
        _I16_BE.pack(len(properties)), properties,
    ))
    assert len(record) == total
    mv[pos:pos + total] = record
    return total


def write_blank(buf, pos, remaining) -> None:
    """End-of-file filler: [remaining i32][BLANK_MAGIC_CODE]."""
    remaining = _check_int("remaining", remaining, _I32)
    if remaining < END_FILE_MIN_BLANK_LENGTH:
        raise ValueError(f"blank of {remaining} bytes, fewer than {END_FILE_MIN_BLANK_LENGTH}")
    mv = _as_bytes_view(buf)
    pos = int(pos)
    if pos < 0 or pos + END_FILE_MIN_BLANK_LENGTH > len(mv):
        raise ValueError(f"blank does not fit at {pos} in a buffer of {len(mv)}")
    _BLANK.pack_into(mv, pos, remaining, BLANK_MAGIC_CODE)


def encode_batch(buf, pos, limit, physical_base, queue_offset, store_ts, topic, queue_id, bodies,
                 properties, flag, sys_flag, born_ts, born_host, store_host) -> tuple[int, int]:
    topic = bytes(topic)
    born_host = bytes(born_host)
    store_host = bytes(store_host)
    bodies = [bytes(b) for b in bodies]
    if isinstance(properties, (bytes, bytearray, memoryview)):
        props_list = [bytes(properties)] * len(bodies)
    else:
        props_list = [bytes(p) for p in properties]
        if len(props_list) != len(bodies):
            raise ValueError(f"{len(props_list)} properties for {len(bodies)} bodies")
    _check_topic(topic)
    for p in props_list:
        _check_properties(p)
    born_v6 = _host_is_v6("born_host", born_host)
    store_v6 = _host_is_v6("store_host", store_host)
    mv = _as_bytes_view(buf)
    pos = int(pos)
    limit = int(limit)
    if pos < 0 or limit > len(mv):
        raise ValueError(f"pos {pos} / limit {limit} outside a buffer of {len(mv)}")

    cur = pos
    count = 0
    for i, body in enumerate(bodies):
        n = record_length(len(body), len(topic), len(props_list[i]), born_v6, store_v6)
        if n + END_FILE_MIN_BLANK_LENGTH > limit - cur:
            break
        cur += encode_record(mv, cur, physical_base + (cur - pos), queue_offset + i, store_ts, topic,
                             queue_id, body, props_list[i], flag, sys_flag, born_ts, born_host,
                             store_host, 0, 0)
        count += 1
    return count, cur


def scan(buf, start, end, base_offset, check_crc, max_records=None):
    """Walk records in buf[start:end]; see the module docstring for the status rules."""
    mv = _as_bytes_view(buf)
    start = int(start)
    end = int(end)
    if not 0 <= start <= end <= len(mv):
        raise ValueError(f"bad range [{start}, {end}) for a buffer of {len(mv)}")
    unlimited = max_records is None or max_records < 0
    records: list[dict] = []
    pos = start
    while True:
        if not unlimited and len(records) >= max_records:
            return records, pos, SCAN_END
        if pos == end:
            return records, pos, SCAN_END
        left = end - pos
        if left < 8:
            return records, pos, SCAN_PARTIAL
        total = _I32_BE.unpack_from(mv, pos)[0]
        magic = _U32_BE.unpack_from(mv, pos + 4)[0]
        if total == 0 and magic == 0:
            return records, pos, SCAN_ZERO
        if magic == BLANK_MAGIC_CODE:
            return records, pos, SCAN_BLANK
        if magic != MESSAGE_MAGIC_CODE or total < FIXED_PART_V4:
            return records, pos, SCAN_CORRUPT
        if total > left:
            return records, pos, SCAN_PARTIAL
        rec = _check_record(mv, pos, total, check_crc)
        if rec is None:
            return records, pos, SCAN_CORRUPT
        rec["phys_offset"] = base_offset + pos
        records.append(rec)
        pos += total


def _check_record(mv: memoryview, pos: int, total: int, check_crc: bool) -> dict | None:
    """Parse one record known to have the message magic and total bytes available; None if bad."""
    (_, _, body_crc, queue_id, _flag, queue_offset, _phys, sys_flag, _born_ts) = _HEAD.unpack_from(mv, pos)
    born_v6 = bool(sys_flag & SYSFLAG_BORNHOST_V6)
    store_v6 = bool(sys_flag & SYSFLAG_STOREHOST_V6)
    fixed = record_length(0, 0, 0, born_v6, store_v6)
    if total < fixed:
        return None
    end = pos + total
    p = pos + _HEAD.size + (20 if born_v6 else 8)
    store_ts = _I64_BE.unpack_from(mv, p)[0]
    p += 8 + (20 if store_v6 else 8) + _RECONSUME_PREPARED.size
    body_len = _I32_BE.unpack_from(mv, p)[0]
    p += 4
    if body_len < 0 or p + body_len + 1 > end:
        return None
    body_at = p
    p += body_len
    topic_len = _I8.unpack_from(mv, p)[0]
    p += 1
    if topic_len < 0 or p + topic_len + 2 > end:
        return None
    topic = bytes(mv[p:p + topic_len])
    p += topic_len
    props_len = _I16_BE.unpack_from(mv, p)[0]
    p += 2
    if props_len < 0 or p + props_len > end:
        return None
    if record_length(body_len, topic_len, props_len, born_v6, store_v6) != total:
        return None
    if check_crc and crc32(mv[body_at:body_at + body_len]) != body_crc:
        return None
    props = bytes(mv[p:p + props_len])
    tags = keys = uniq = None
    for k, v in _properties_pairs(props):
        if k == PROPERTY_TAGS:
            tags = v
        elif k == PROPERTY_KEYS:
            keys = v
        elif k == PROPERTY_UNIQ_KEY:
            uniq = v
    return {
        "phys_offset": None,          # filled in by scan
        "size": total,
        "queue_id": queue_id,
        "queue_offset": queue_offset,
        "tag_hash": java_string_hash(tags) if tags else 0,
        "store_ts": store_ts,
        "sys_flag": sys_flag,
        "topic": topic,
        "keys": keys or b"",
        "uniq": uniq or b"",
        "body_crc_ok": True,          # checked above when check_crc, not computed otherwise
    }


def msg_id(store_host, physical_offset) -> str:
    """offsetMsgId: hex(store IP + port i32 + physical offset i64), upper case."""
    store_host = bytes(store_host)
    if len(store_host) not in (8, 20):
        raise ValueError(f"store_host must be 8 or 20 bytes, got {len(store_host)}")
    physical_offset = _check_int("physical_offset", physical_offset, _I64)
    return (store_host + _I64_BE.pack(physical_offset)).hex().upper()
