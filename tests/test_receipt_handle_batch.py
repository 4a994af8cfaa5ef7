"""BatchReader (broker.proxy.receipt_handle), the front's batch-ack reading of receipt handles
with their shared seven fields parsed once per batch, against `decode` read handle by handle: for
any handles, in any order, the same fields and queue offset, or the same INVALID_RECEIPT_HANDLE."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from broker.proxy.receipt_handle import BatchReader, decode
from broker.proxy.status import Code, ProxyError

_NUMS = st.one_of(st.integers(0, 1 << 64).map(str), st.sampled_from(["", "-1", "+5", " 7", "1_0", "x", "٣",
                                                                   str((1 << 63) - 1), str(1 << 63)]))
_FIELDS = st.tuples(_NUMS, _NUMS, _NUMS, _NUMS, st.sampled_from(["0", "1", "2", "3", ""]),
                    st.sampled_from(["broker-a", "b", "", "a b"]), _NUMS)


@st.composite
def batches(draw):
    """Handles as a batch's are: a few heads (the 7 shared fields), each with many offsets, and
    some of other shapes (7, 8, 10 fields)."""
    heads = [" ".join(f) for f in draw(st.lists(_FIELDS, min_size=1, max_size=3))]
    out = []
    for _ in range(draw(st.integers(1, 12))):
        head = draw(st.sampled_from(heads))
        shape = draw(st.sampled_from([9, 9, 9, 7, 8, 10]))
        tail = draw(st.lists(_NUMS, min_size=shape - 7, max_size=shape - 7))
        out.append(" ".join([head, *tail]) if tail else head)
    return out


def _decoded(text: str):
    try:
        info = decode(text)
    except ProxyError as e:
        return "error", e.code, e.message
    return info[:7], info.queue_offset


def _read(reader: BatchReader, text: str):
    try:
        info, queue_offset = reader.read(text)
    except ProxyError as e:
        return "error", e.code, e.message
    return info[:7], queue_offset


@settings(max_examples=400, deadline=None)
@given(batches())
def test_batch_reader_answers_as_decode(handles):
    reader = BatchReader()
    for text in handles:
        assert _read(reader, text) == _decoded(text)


def test_shared_fields_parsed_once_then_only_the_offset():
    reader = BatchReader()
    first, qo = reader.read("100 1700000000000 30000 3 0 broker-a 2 105 123456")
    again, qo2 = reader.read("100 1700000000000 30000 3 0 broker-a 2 107 99")
    assert again is first and (qo, qo2) == (105, 107)  # the same parsed fields, each its own offset
    bad = _read(reader, "100 1700000000000 30000 3 0 broker-a 2 -1 99")  # an offset out of range: decode's error
    assert bad[:2] == ("error", Code.INVALID_RECEIPT_HANDLE) and "queueOffset" in bad[2]
