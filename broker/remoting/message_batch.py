"""The body of SEND_BATCH_MESSAGE (320): messages as RocketMQ's MessageDecoder.encodeMessages
writes them, back to back:

    totalSize int32 | magic int32 | bodyCRC int32 | flag int32 | bodyLen int32 | body |
    propertiesLen int16 | properties

Decoding yields views into the request body, so the bodies and properties reach the commit log
with the single copy the append kernel makes.
"""
from __future__ import annotations

import struct

from broker.kernels.codec import crc32
from broker.remoting.command import CommandError

_FIXED = 4 * 5 + 2  # the fixed fields of one batched message


def decode_batch(body) -> tuple[list, list, list[int]]:
    """Split a batch into (bodies, properties, flags), each a list with one entry per message.
    Raises CommandError naming the offset of the first malformed message."""
    mv = memoryview(body).cast("B") if not isinstance(body, memoryview) else body
    n = len(mv)
    bodies: list = []
    props: list = []
    flags: list[int] = []
    pos = 0
    frm = int.from_bytes
    while pos < n:
        if n - pos < _FIXED:
            raise CommandError(f"batch message at offset {pos}: {n - pos} bytes left, a message needs {_FIXED}")
        total = frm(mv[pos:pos + 4], "big", signed=True)
        if total < _FIXED or total > n - pos:
            raise CommandError(f"batch message at offset {pos}: totalSize {total} with {n - pos} bytes left")
        blen = frm(mv[pos + 16:pos + 20], "big", signed=True)
        if blen < 0 or 20 + blen + 2 > total:
            raise CommandError(f"batch message at offset {pos}: bodyLen {blen} does not fit totalSize {total}")
        b = pos + 20
        plen = frm(mv[b + blen:b + blen + 2], "big")
        if 20 + blen + 2 + plen != total:
            raise CommandError(f"batch message at offset {pos}: propertiesLen {plen} does not add up to "
                               f"totalSize {total}")
        flags.append(frm(mv[pos + 12:pos + 16], "big", signed=True))
        bodies.append(mv[b:b + blen])
        props.append(mv[b + blen + 2:b + blen + 2 + plen])
        pos += total
    if not bodies:
        raise CommandError("empty batch")
    return bodies, props, flags


_HEAD = struct.Struct(">iiiii")  # total size, magic 0, body CRC, flag, body length
_PROPS_LEN = struct.Struct(">h")


def encode_batch_body(messages: list[tuple[bytes, bytes, int]]) -> bytes:
    """(body, properties, flag) triples → a 320 body, as the Java client encodes it."""
    parts = []
    for body, properties, flag in messages:
        parts += (_HEAD.pack(_FIXED + len(body) + len(properties), 0, crc32(body) & 0x7FFFFFFF, flag, len(body)),
                  body, _PROPS_LEN.pack(len(properties)), properties)
    return b"".join(parts)
