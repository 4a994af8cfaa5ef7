"""AckMessage's answer when every entry was acked, encoded without protobuf objects
(broker.kernels.receive_reply.encode_ack_ok): the bytes protobuf would serialize for
AckMessageResponse{status: OK, entries: [AckMessageResultEntry{message_id, receipt_handle,
status: OK}, ...]}. A result entry object per acked message cost more than the ack itself;
tests/test_ack_reply.py holds it equal to protobuf's on random input."""
from __future__ import annotations

from broker.kernels.ack_request import read_ack  # noqa: F401 - the request read with this answer
from broker.kernels.receive_reply import encode_ack_ok


def ack_ok(entries) -> bytes:
    """`entries`: the request's AckMessageEntry objects (their message_id and receipt_handle), in order."""
    return encode_ack_ok([e.message_id for e in entries], [e.receipt_handle for e in entries])


def ack_ok_of(message_ids: list[str], handles: list[str]) -> bytes:
    """The same answer from the entries' message ids and receipt handles, read once already."""
    return encode_ack_ok(message_ids, handles)
