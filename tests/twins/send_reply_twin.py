"""Pure-Python twin of broker.kernels.send_request.send_ok: SendMessage's answer for a stored
message, the bytes protobuf would serialize for SendMessageResponse{status: OK, entries:
[SendResultEntry{status: OK, message_id, offset, recall_handle}]}."""
from __future__ import annotations

from broker.proxy.protocol import definition_pb2 as pb

_STATUS_OK = pb.Status(code=pb.Code.OK, message="OK").SerializeToString()
_STATUS_FIELD = b"\x0a" + bytes([len(_STATUS_OK)]) + _STATUS_OK  # field 1 of both messages


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64: two's complement, ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(tag: bytes, s: str) -> bytes:
    if not s:
        return b""  # proto3: a default value is not written
    b = s.encode()
    return tag + _varint(len(b)) + b


def send_ok(message_id: str, offset: int, recall_handle: str) -> bytes:
    entry = (_STATUS_FIELD + _string(b"\x12", message_id) + (b"\x20" + _varint(offset) if offset else b"")
             + _string(b"\x2a", recall_handle))
    return _STATUS_FIELD + b"\x12" + _varint(len(entry)) + entry
