"""broker.proxy.send_reply: SendMessage's answer for a stored message, encoded by hand, equal to what
protobuf serializes for the same SendMessageResponse (the gRPC front's send path answers with it)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.send_reply import send_ok
from broker.proxy.status import status


@given(st.text(max_size=300), st.integers(-(1 << 63), (1 << 63) - 1), st.text(max_size=300))
def test_send_ok_is_protobufs_serialization(message_id, offset, recall_handle):
    entry = spb.SendResultEntry(status=status(), message_id=message_id, offset=offset, recall_handle=recall_handle)
    want = spb.SendMessageResponse(status=status(), entries=[entry]).SerializeToString()
    assert send_ok(message_id, offset, recall_handle) == want
    back = spb.SendMessageResponse.FromString(want)
    assert back.entries[0].message_id == message_id and back.entries[0].offset == offset
