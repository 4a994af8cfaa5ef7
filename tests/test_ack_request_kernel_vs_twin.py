"""broker.kernels.ack_request.read_ack (AckMessage's request read from its bytes for the local
front's batch ack) against its twin (tests/twins/ack_request_twin.py) on the same bytes, and what
either takes against the protobuf path it stands for: protobuf's parse, receipt_handle.BatchReader
per handle (the same checkpoints and offsets) and ack_reply.ack_ok_of (the same answer bytes)."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from broker.kernels import ack_request as K
from broker.proxy.ack_reply import ack_ok_of
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.receipt_handle import BatchReader
from broker.proxy.status import ProxyError
from tests.twins import ack_request_twin as T

I64 = (1 << 63) - 1
_NUMS = st.one_of(st.integers(0, 1 << 64).map(str), st.sampled_from(
    ["", "-1", "+5", " 7", "1_0", "x", "٣", "007", "0" * 20 + "1", str(I64), str(1 << 63), str(1 << 31),
     str((1 << 31) + 1)]))
_SMALL = st.integers(0, 40).map(str)
_BROKERS = st.sampled_from(["broker-a", "b", "", "a b", "brökér", "x\ty"])


@st.composite
def handles(draw):
    """Handles as a batch's: a few heads (7 shared fields), each with many queue offsets, and some
    of other shapes; most well-formed."""
    heads = []
    for _ in range(draw(st.integers(1, 3))):
        odd = draw(st.integers(0, 9)) == 0
        nums = _NUMS if odd else _SMALL
        heads.append(" ".join([draw(nums), draw(nums), draw(nums), draw(nums),
                               draw(st.sampled_from(["0", "1", "2"] + (["3", ""] if odd else []))),
                               draw(_BROKERS) if odd else "broker-a", draw(nums)]))
    out = []
    for _ in range(draw(st.integers(0, 12))):
        head = draw(st.sampled_from(heads))
        shape = draw(st.sampled_from([7, 8, 10])) if draw(st.integers(0, 30)) == 0 else 9
        tail = [draw(st.integers(40, 60).map(str) if draw(st.integers(0, 30)) else st.one_of(_SMALL, _NUMS))
                for _ in range(shape - 7)]
        out.append(" ".join([head, *tail]) if tail else head)
    return out


@st.composite
def requests(draw):
    hs = draw(handles())
    ids = draw(st.lists(st.one_of(st.text(max_size=8), st.sampled_from(["", "7F0000010001"])),
                        min_size=len(hs), max_size=len(hs)))
    req = spb.AckMessageRequest(
        group=pb.Resource(name=draw(st.sampled_from(["G", "", "grü"])),
                          resource_namespace=draw(st.sampled_from(["", "ns"]))),
        topic=pb.Resource(name=draw(st.sampled_from(["T", "", "t%1"]))),
        entries=[spb.AckMessageEntry(message_id=i, receipt_handle=h) for i, h in zip(ids, hs)])
    if hs and draw(st.integers(0, 9)) == 0:
        req.entries[0].lite_topic = "lite"
    if draw(st.booleans()):
        req.ClearField("group")
    return req.SerializeToString()


def _mutated(data: bytes, cuts: list[tuple[int, int]]) -> bytes:
    b = bytearray(data)
    for at, value in cuts:
        if b:
            b[at % len(b)] = value
    return bytes(b)


def _protobuf_path(payload: bytes):
    """What the protobuf path reads: (group, topic, checkpoints as read_ack lists them, answer),
    with BatchReader's fields; the shape read_ack takes is assumed (9 fields, offsets past checkpoints)."""
    req = spb.AckMessageRequest.FromString(payload)
    reader = BatchReader()
    heads: dict[str, list] = {}
    for e in req.entries:
        info, qo = reader.read(e.receipt_handle)
        head = e.receipt_handle.rsplit(" ", 2)[0]
        heads.setdefault(head, [*info[:7], []])[7].append(qo)
    answer = ack_ok_of([e.message_id for e in req.entries], [e.receipt_handle for e in req.entries])
    return req.group.name, req.topic.name, [tuple(h) for h in heads.values()], answer


def _check(payload: bytes):
    k, t = K.read_ack(payload), T.read_ack(payload)
    assert k == t
    if k is not None:
        assert k == _protobuf_path(payload)
    return k


@settings(max_examples=500, deadline=None)
@given(requests())
def test_kernel_twin_and_protobuf_path_agree(payload):
    _check(payload)


@settings(max_examples=500, deadline=None)
@given(requests(), st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=3),
       st.integers(0, 400))
def test_kernel_and_twin_agree_on_mutated_and_cut_bytes(payload, cuts, cut):
    data = _mutated(payload, cuts)
    _check(data[:cut] if cut < len(data) else data)
    _check(data + b"\x1a\x00")


def test_a_consumers_acks_are_taken_and_odd_ones_declined():
    hs = [f"100 1700000000000 30000 3 0 broker-a 2 {100 + i} {9000 + i}" for i in range(32)]
    hs[5] = "200 1700000000001 30000 3 1 broker-a 1 200 1"  # a second checkpoint (the retry topic)
    req = spb.AckMessageRequest(group=pb.Resource(name="G"), topic=pb.Resource(name="T"), entries=[
        spb.AckMessageEntry(message_id=f"m{i}", receipt_handle=h) for i, h in enumerate(hs)])
    group, topic, cks, answer = _check(req.SerializeToString())
    assert (group, topic) == ("G", "T")
    assert cks == [(100, 1700000000000, 30000, 3, "0", "broker-a", 2, [100 + i for i in range(32) if i != 5]),
                   (200, 1700000000001, 30000, 3, "1", "broker-a", 1, [200])]
    assert spb.AckMessageResponse.FromString(answer).entries[5].receipt_handle == hs[5]

    def declined(*entries, **kw) -> None:
        r = spb.AckMessageRequest(group=pb.Resource(name="G"), topic=pb.Resource(name="T"),
                                  entries=[spb.AckMessageEntry(message_id="m", receipt_handle=h) for h in entries],
                                  **kw)
        assert _check(r.SerializeToString()) is None
    declined()  # no entry: the protobuf path refuses it
    # one entry (what a 5.x client's ack(message) sends): taken, as a batch of one
    one = spb.AckMessageRequest(group=pb.Resource(name="G"), topic=pb.Resource(name="T"),
                                entries=[spb.AckMessageEntry(message_id="m0", receipt_handle=hs[0])])
    assert _check(one.SerializeToString())[2] == [(100, 1700000000000, 30000, 3, "0", "broker-a", 2, [100])]
    declined(hs[0], "100 1700000000000 30000 3 0 broker-a 2 99 1")  # before its checkpoint: acked alone
    declined(hs[0], "100 1700000000000 30000 3 0 broker-a 2 101")  # 8 fields
    declined(hs[0], "100 1700000000000 30000 3 0 broker-a 2 +101 1")  # int() would take it: protobuf's path
    declined(hs[0], "not a handle")
    try:
        BatchReader().read("not a handle")
    except ProxyError:
        pass


def test_a_handle_that_begins_with_the_last_ones_head_is_read_whole():
    """read_ack reads only the two offsets of a handle whose bytes begin with the last handle's head
    and a space (a receive's handles share it); one that begins with it but goes on otherwise (a
    longer queue id, a field more or less, another tail) is read whole: another checkpoint or
    declined, as the twin and protobuf's path read it."""
    head = "100 1700000000000 30000 3 0 broker-a 1"

    def read(*hs):
        return _check(spb.AckMessageRequest(group=pb.Resource(name="G"), topic=pb.Resource(name="T"), entries=[
            spb.AckMessageEntry(message_id=f"m{i}", receipt_handle=h) for i, h in enumerate(hs)]).SerializeToString())
    _, _, cks, _ = read(f"{head} 100 5", f"{head}2 100 6", f"{head} 101 7", f"{head}2 101 8")
    assert cks == [(100, 1700000000000, 30000, 3, "0", "broker-a", 1, [100, 101]),
                   (100, 1700000000000, 30000, 3, "0", "broker-a", 12, [100, 101])]
    for odd in (f"{head} 101", f"{head} 101 7 8", f"{head}  101 7", f"{head} 99 7", f"{head} 101 x",
                f"{head} 101 7 ", f"{head} {1 << 63} 7", f"{head} 101 {'1' * 20}", head):
        assert read(f"{head} 100 5", odd) is None, odd
    # the shared head read once, the tails of many: an answer as protobuf writes it, message ids
    # absent, empty and long among them
    hs = [f"{head} {100 + i} {9000 + i}" for i in range(200)]
    r = spb.AckMessageRequest(group=pb.Resource(name="G"), topic=pb.Resource(name="T"), entries=[
        spb.AckMessageEntry(message_id=("" if i % 3 == 0 else "x" * (i % 7) * 40), receipt_handle=h)
        for i, h in enumerate(hs)])
    r.entries[1].ClearField("message_id")
    assert _check(r.SerializeToString())[2] == [(100, 1700000000000, 30000, 3, "0", "broker-a", 1,
                                                 list(range(100, 300)))]
