"""Decoded view of a stored record and the properties codec (for lookups, tools and clients;
the hot paths never decode in Python)."""
from __future__ import annotations

import functools
import socket
import struct
from dataclasses import dataclass, field

from broker.kernels.codec import (BLANK_MAGIC_CODE, FIXED_LEN_V4, MESSAGE_MAGIC_CODE, SYSFLAG_BORNHOST_V6,
                                  SYSFLAG_STOREHOST_V6, msg_id)
from broker.store.errors import StoreError

_HEAD = struct.Struct(">iIIiiqqiq")  # total, magic, crc, queueId, flag, queueOffset, physOffset, sysFlag, bornTs


def encode_properties(props: dict[str, str] | None) -> bytes:
    """`k\\x01v\\x02k\\x01v`, without the trailing separator (RocketMQ 4.9.1+); None values skipped."""
    if not props:
        return b""
    return "\x02".join(f"{k}\x01{v}" for k, v in props.items() if v is not None).encode()


def decode_properties(data: bytes | memoryview) -> dict[str, str]:
    out: dict[str, str] = {}
    for piece in bytes(data).decode("utf-8", "replace").split("\x02"):
        k, _, v = piece.partition("\x01")
        # Java's string2messageProperties: a pair needs a key and a value (found by the fuzzer:
        # "KEYS\x01" used to give KEYS="" here, while the store's parse and Java have no KEYS)
        if k and v:
            out[k] = v
    return out


@functools.lru_cache(maxsize=4096)
def _host(raw: bytes) -> str:
    # hosts repeat from message to message (a pull decodes thousands with two each): cached
    ip = socket.inet_ntop(socket.AF_INET6 if len(raw) == 20 else socket.AF_INET, raw[:-4])
    return f"{ip}:{int.from_bytes(raw[-4:], 'big')}"


def host_bytes(host: str) -> bytes:
    """"ip:port" (as StoredMessage holds BORNHOST) back to the stored 8 bytes; zeros if unreadable."""
    ip, _, port = host.rpartition(":")
    try:
        return socket.inet_aton(ip) + int(port).to_bytes(4, "big")
    except (OSError, ValueError):
        return bytes(8)


@dataclass
class StoredMessage:
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    store_timestamp: int = 0
    store_host: str = ""
    reconsume_times: int = 0
    body_crc: int = 0
    size: int = 0
    msg_id: str = ""

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> str | None:
        return self.properties.get("KEYS")


def decode_message(buf, pos: int = 0) -> StoredMessage:
    """Decode the record at buf[pos:]; raises StoreError on anything that is not a whole record."""
    mv = memoryview(buf)
    if len(mv) - pos < _HEAD.size:
        raise StoreError(f"no record at {pos}: only {len(mv) - pos} bytes")
    total, magic, crc, qid, flag, qo, phys, sysflag, born_ts = _HEAD.unpack_from(mv, pos)
    if magic == BLANK_MAGIC_CODE:
        raise StoreError(f"blank end-of-segment marker at {pos}")
    if magic != MESSAGE_MAGIC_CODE or total < FIXED_LEN_V4 or total > len(mv) - pos:
        raise StoreError(f"no valid record at {pos} (magic 0x{magic:08X}, size {total})")
    end = pos + total
    bh = 20 if sysflag & SYSFLAG_BORNHOST_V6 else 8
    sh = 20 if sysflag & SYSFLAG_STOREHOST_V6 else 8
    # Every length is checked against the record's own end (found by the fuzzer: a torn record
    # whose fields ran past TOTALSIZE gave a short host and a ValueError from inet_ntop).
    p = pos + _HEAD.size
    if p + bh + 8 + sh + 16 > end:
        raise StoreError(f"record at {pos} of size {total} is too short for its hosts (sysFlag {sysflag:#x})")
    born = bytes(mv[p:p + bh]); p += bh
    store_ts = int.from_bytes(mv[p:p + 8], "big", signed=True); p += 8
    store = bytes(mv[p:p + sh]); p += sh
    reconsume = int.from_bytes(mv[p:p + 4], "big", signed=True); p += 12
    blen = int.from_bytes(mv[p:p + 4], "big", signed=True); p += 4
    if blen < 0 or p + blen + 1 > end:
        raise StoreError(f"record at {pos}: body length {blen} runs past its size {total}")
    body = bytes(mv[p:p + blen]); p += blen
    tlen = int.from_bytes(mv[p:p + 1], "big", signed=True); p += 1
    if tlen < 0 or p + tlen + 2 > end:
        raise StoreError(f"record at {pos}: topic length {tlen} runs past its size {total}")
    topic = bytes(mv[p:p + tlen]).decode("utf-8", "replace"); p += tlen
    plen = int.from_bytes(mv[p:p + 2], "big", signed=True); p += 2
    if plen < 0 or p + plen != end:
        raise StoreError(f"record at {pos}: properties length {plen} does not end at its size {total}")
    props = decode_properties(mv[p:p + plen])
    return StoredMessage(topic, qid, qo, phys, body, props, flag, sysflag, born_ts, _host(born), store_ts,
                         _host(store), reconsume, crc, total, msg_id(store, phys))
