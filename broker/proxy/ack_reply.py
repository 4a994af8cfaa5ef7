"""AckMessage's answer when every entry was acked, encoded by hand: the bytes protobuf would
serialize for AckMessageResponse{status: OK, entries: [AckMessageResultEntry{message_id,
receipt_handle, status: OK}, ...]}. A result entry object per acked message cost more than the
ack itself; tests/test_ack_reply.py holds it equal to protobuf's on random input."""
from __future__ import annotations

from broker.proxy.send_reply import _STATUS_OK, _string, _varint

_TOP_STATUS = b"\x0a" + bytes([len(_STATUS_OK)]) + _STATUS_OK     # AckMessageResponse.status = 1
_ENTRY_STATUS = b"\x1a" + bytes([len(_STATUS_OK)]) + _STATUS_OK   # AckMessageResultEntry.status = 3


def ack_ok(entries) -> bytes:
    """`entries`: (message_id, receipt_handle) of each entry of the request, in its order."""
    out = [_TOP_STATUS]
    for message_id, handle in entries:
        entry = _string(b"\x0a", message_id) + _string(b"\x12", handle) + _ENTRY_STATUS
        out.append(b"\x12" + _varint(len(entry)) + entry)
    return b"".join(out)
