"""broker.proxy.ack_reply: AckMessage's all-acked answer, encoded by hand, equal to what protobuf
serializes for the same AckMessageResponse (the front answers a fully acked batch with it)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.proxy.ack_reply import ack_ok
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.status import status


@given(st.lists(st.tuples(st.text(max_size=200), st.text(max_size=300)), max_size=40))
def test_ack_ok_is_protobufs_serialization(entries):
    want = spb.AckMessageResponse(status=status(), entries=[
        spb.AckMessageResultEntry(message_id=m, receipt_handle=h, status=status()) for m, h in entries])
    assert ack_ok(entries) == want.SerializeToString()
    back = spb.AckMessageResponse.FromString(ack_ok(entries))
    assert [(e.message_id, e.receipt_handle, e.status.code) for e in back.entries] == [
        (m, h, status().code) for m, h in entries]
