"""broker.kernels.send_request.send_ok and its twin: SendMessage's answer for a stored message,
encoded by hand, equal to what protobuf serializes for the same SendMessageResponse (the gRPC
front's send path answers with it)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.proxy.protocol import service_pb2 as spb
from broker.kernels.send_request import send_ok
from broker.proxy.status import status
from tests.twins.send_reply_twin import send_ok as twin_send_ok


@given(st.text(max_size=300), st.integers(-(1 << 63), (1 << 63) - 1), st.text(max_size=300))
def test_send_ok_is_protobufs_serialization(message_id, offset, recall_handle):
    entry = spb.SendResultEntry(status=status(), message_id=message_id, offset=offset, recall_handle=recall_handle)
    want = spb.SendMessageResponse(status=status(), entries=[entry]).SerializeToString()
    assert send_ok(message_id, offset, recall_handle) == want
    assert twin_send_ok(message_id, offset, recall_handle) == want
    back = spb.SendMessageResponse.FromString(want)
    assert back.entries[0].message_id == message_id and back.entries[0].offset == offset


def test_a_text_that_is_no_utf8_is_refused_as_protobuf_refuses_it():
    with pytest.raises(UnicodeEncodeError):
        send_ok("\ud800", 1, "")
    with pytest.raises(UnicodeEncodeError):
        twin_send_ok("\ud800", 1, "")
