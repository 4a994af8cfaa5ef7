"""broker.proxy.ack_reply: AckMessage's all-acked answer, encoded by the receive-reply kernel (and
its twin) without protobuf objects, equal to what protobuf serializes for the same
AckMessageResponse (the front answers a fully acked batch with it)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.kernels.receive_reply import encode_ack_ok
from broker.proxy.ack_reply import ack_ok
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.status import status
from tests.twins import receive_reply_twin as T

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300)


@given(st.lists(st.tuples(text, text), max_size=40))
def test_ack_ok_is_protobufs_serialization(pairs):
    entries = [spb.AckMessageEntry(message_id=m, receipt_handle=h) for m, h in pairs]
    want = spb.AckMessageResponse(status=status(), entries=[
        spb.AckMessageResultEntry(message_id=m, receipt_handle=h, status=status()) for m, h in pairs])
    assert ack_ok(entries) == want.SerializeToString()
    ids, handles = [m for m, _ in pairs], [h for _, h in pairs]
    assert T.encode_ack_ok(ids, handles) == want.SerializeToString()
    back = spb.AckMessageResponse.FromString(ack_ok(entries))
    assert [(e.message_id, e.receipt_handle, e.status.code) for e in back.entries] == [
        (m, h, status().code) for m, h in pairs]


def test_ids_and_handles_must_pair():
    with pytest.raises(ValueError, match="2 message ids but 1 receipt handles"):
        encode_ack_ok(["a", "b"], ["h"])
