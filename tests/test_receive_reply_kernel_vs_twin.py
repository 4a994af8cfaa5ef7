"""The receive-reply kernel (broker.kernels.receive_reply) against its twin and against protobuf
(hypothesis): for random messages (every system property the converter reads: UNIQ_KEY, TAGS,
KEYS with empty pieces, BORN_TIMESTAMP, __BORNHOST, __SHARDINGKEY, TRAN_MSG, TIMER_DELIVER_MS,
TRACE_CONTEXT, POP_CK; user properties; IPv4 and IPv6 hosts; empty, compressed and plain bodies;
timestamps at and past protobuf's range; reconsume counts at int32's end), read from real stored
records through the pulled kernel as the front reads them, the kernel's bytes equal the twin's and
parse to the ReceiveMessageResponse the converter's protobuf path builds, with the receipt handle,
delivery attempt and invisible duration the front sets; where protobuf refuses (a timestamp out of
its range), both refuse with ValueError. ConsumerActivity.receive_message (its pop stubbed, the
messages given as read_records' result) answers in one framed piece with the front's receipt
handles, and fails on a message protobuf cannot carry only after the ones before it, as it did
when it built protobuf objects one by one. (encode_popped, the answer written from the popped
records themselves: tests/test_receive_popped.py.)"""
from __future__ import annotations

import socket
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels import pulled as P
from broker.kernels import receive_reply as K
from broker.kernels.pulled import MessageExt
from broker.proxy.converter import SYSTEM_PROPERTIES, to_proto
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.receive_reply import receive_ok
from tests.twins import codec_twin as C
from tests.twins import receive_reply_twin as T

SETTINGS = settings(database=None, deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
V4 = socket.inet_aton("10.0.0.7") + (10911).to_bytes(4, "big")
V6 = socket.inet_pton(socket.AF_INET6, "fe80::1") + (40000).to_bytes(4, "big")
MS_MAX = 253402300799999  # protobuf Timestamp's last millisecond

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02"), max_size=12)
ms = st.one_of(st.integers(0, 2**41), st.sampled_from([0, MS_MAX, MS_MAX + 1, 2**62]))
digits = st.one_of(ms.map(str), st.sampled_from(["", "12a", "\u00b2", "\u0663", " 5"]))
system_value = {
    "UNIQ_KEY": text, "TAGS": text,
    "KEYS": st.lists(st.sampled_from(["k1", "", "k 2", "\u00e9"]), max_size=4).map(" ".join),
    "BORN_TIMESTAMP": digits, "__BORNHOST": st.sampled_from(["", "1.2.3.4", "::1"]), "__SHARDINGKEY": text,
    "TRAN_MSG": st.sampled_from(["true", "false", ""]), "TIMER_DELIVER_MS": digits, "TRACE_CONTEXT": text,
    "POP_CK": st.just("0 1 30000 0 0 b 1 0"), "1ST_POP_TIME": st.just("1"), "WAIT": st.just("true"),
}


@st.composite
def properties(draw) -> dict:
    props = {}
    for key in draw(st.lists(st.sampled_from(sorted(system_value)), max_size=6, unique=True)):
        props[key] = draw(system_value[key])
    for key, value in draw(st.dictionaries(text.filter(bool), text, max_size=3)).items():
        props.setdefault(key, value)
    return props


@st.composite
def message(draw) -> MessageExt:
    """A message as the front gets it: a stored record read by the pulled kernel."""
    props = draw(properties())
    raw = "\x02".join(f"{k}\x01{v}" for k, v in props.items() if v).encode()  # an empty value is not stored
    body = draw(st.binary(max_size=80))
    sys_flag = draw(st.sampled_from([0, 0, 0x10, 0x20, 0x30]))
    if body and draw(st.integers(0, 5)) == 0:
        body, sys_flag = zlib.compress(body), sys_flag | 1
    born, store = (V6 if sys_flag & 0x10 else V4), (V6 if sys_flag & 0x20 else V4)
    buf = bytearray(C.record_length(len(body), 6, len(raw), born == V6, store == V6))
    n = C.encode_record(buf, 0, draw(st.integers(0, 2**40)), draw(st.integers(0, 2**40)), draw(ms), b"TopicA",
                        draw(st.integers(0, 7)), body, raw, 0, sys_flag, draw(ms), born, store,
                        draw(st.sampled_from([0, 1, 15, 2**31 - 2, 2**31 - 1])), 0)
    (m,) = P.decode_records(bytes(buf[:n]), "broker-a")
    return m


def protobufs(m, topic: str, handle: str, invisible_ms: int) -> bytes:
    """What the front answered before the kernel: the converter's Message, then its fields set."""
    msg = to_proto(m, topic)
    sp = msg.system_properties
    sp.receipt_handle = handle
    sp.delivery_attempt = m.reconsume_times + 1
    sp.invisible_duration.FromMilliseconds(invisible_ms)
    return spb.ReceiveMessageResponse(message=msg).SerializeToString(deterministic=True)


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except ValueError:
        return ("ValueError",)


invisible = st.one_of(st.integers(10_000, 12 * 3600 * 1000), st.sampled_from([0, 1, 999, 1000, 60_000]))


@SETTINGS
@given(message(), st.sampled_from(["TopicA", "", "T\u00e9"]), text, invisible)
def test_one_message_equals_the_twin_and_protobuf(m, topic, handle, invisible_ms):
    k = outcome(K.encode_message, m, topic, handle, invisible_ms, SYSTEM_PROPERTIES)
    assert k == outcome(T.encode_message, m, topic, handle, invisible_ms, SYSTEM_PROPERTIES)
    want = outcome(protobufs, m, topic, handle, invisible_ms)
    if k[0] != "ok":
        assert want == k  # protobuf refuses it too
        return
    # field by field: the kernel's bytes parse to the same message (presence included)
    back = spb.ReceiveMessageResponse.FromString(k[1])
    assert want == ("ok", back.SerializeToString(deterministic=True))
    sp = back.message.system_properties
    assert sp.receipt_handle == handle and sp.delivery_attempt == m.reconsume_times + 1
    assert back.message.body == m.body


@SETTINGS
@given(st.lists(message(), min_size=1, max_size=5), invisible)
def test_a_batch_is_each_message_framed(msgs, invisible_ms):
    handles = [f"h{i}" for i in range(len(msgs))]
    k = outcome(K.encode_messages, msgs, "TopicA", handles, invisible_ms, SYSTEM_PROPERTIES)
    assert k == outcome(T.encode_messages, msgs, "TopicA", handles, invisible_ms, SYSTEM_PROPERTIES)
    if k[0] != "ok":
        return
    data, pos = k[1], 0
    for m, h in zip(msgs, handles):
        assert data[pos] == 0
        n = int.from_bytes(data[pos + 1:pos + 5], "big")
        assert data[pos + 5:pos + 5 + n] == K.encode_message(m, "TopicA", h, invisible_ms, SYSTEM_PROPERTIES)
        pos += 5 + n
    assert pos == len(data)


def test_messages_and_handles_must_pair():
    m = MessageExt("T", b"x")
    with pytest.raises(ValueError, match="1 messages but 0 receipt handles"):
        K.encode_messages([m], "T", [], 30_000, SYSTEM_PROPERTIES)


def test_the_whole_answer_is_status_messages_then_delivery_time():
    """receive_ok: Status OK, each message, the delivery timestamp, as the stream carried them one
    response at a time before."""
    msgs = [MessageExt("T", b"body%d" % i, queue_id=1, queue_offset=i, properties={"UNIQ_KEY": f"U{i}", "a": "b"},
                       born_timestamp=1_700_000_000_000, store_timestamp=1_700_000_000_001,
                       born_host="1.2.3.4:5", store_host="5.6.7.8:9") for i in range(3)]
    data = receive_ok(msgs, "T", ["h0", "h1", "h2"], 30_000, 1_700_000_000_123)
    responses, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos + 1:pos + 5], "big")
        responses.append(spb.ReceiveMessageResponse.FromString(data[pos + 5:pos + 5 + n]))
        pos += 5 + n
    assert [r.WhichOneof("content") for r in responses] == ["status", "message", "message", "message",
                                                             "delivery_timestamp"]
    assert responses[0].status.code == 20000
    assert [r.message.system_properties.message_id for r in responses[1:4]] == ["U0", "U1", "U2"]
    assert [r.message.system_properties.receipt_handle for r in responses[1:4]] == ["h0", "h1", "h2"]
    assert responses[1].message.user_properties == {"a": "b"}
    assert responses[4].delivery_timestamp.ToMilliseconds() == 1_700_000_000_123


def _receive(messages: list, monkeypatch, auto_renew: bool = False):
    """ConsumerActivity.receive_message's pieces for a pop that found `messages` (the broker and
    its client stubbed: only the answer's encoding runs), and the error it ended with."""
    import asyncio

    from broker.client import pop as pop_api
    from broker.proxy.config import ProxyConfig
    from broker.proxy.consumer_activity import ConsumerActivity
    from broker.proxy.grpc_endpoint import Framed
    from broker.proxy.protocol import definition_pb2 as pb

    async def fake_pop_records(*args, **kwargs):
        return pop_api.PoppedRecords(pop_api.FOUND, b"", 1, 30_000)  # no records: encode_popped declines

    def fake_read_records(popped, broker_name, topic):
        return pop_api.PopResult(pop_api.FOUND, messages, 1, 30_000)

    class Groups:
        async def get(self, addr, group):
            return {}

    async def addr(topic, broker):
        return "127.0.0.1:1"

    monkeypatch.setattr(pop_api, "pop_records", fake_pop_records)
    monkeypatch.setattr(pop_api, "read_records", fake_read_records)
    activity = ConsumerActivity.__new__(ConsumerActivity)
    activity.client, activity.config, activity.groups, activity._broker_addr = None, ProxyConfig(), Groups(), addr
    activity.renewals = type("R", (), {"added": [], "add": lambda self, *a: self.added.append(a)})()
    request = spb.ReceiveMessageRequest(group=pb.Resource(name="g"), batch_size=32, auto_renew=auto_renew,
                                        message_queue=pb.MessageQueue(topic=pb.Resource(name="T"),
                                                                      broker=pb.Broker(name="b")))
    request.invisible_duration.FromSeconds(30)
    context = type("C", (), {"invocation_metadata": lambda self: (("x-mq-client-id", "c1"),)})()

    async def run():
        out, error = [], None
        try:
            async for piece in activity.receive_message(request, context):
                assert type(piece) is Framed
                out.append(piece)
        except ValueError as e:
            error = e
        return out, error
    out, error = asyncio.run(run())
    data, responses = b"".join(out), []
    pos = 0
    while pos < len(data):
        n = int.from_bytes(data[pos + 1:pos + 5], "big")
        responses.append(spb.ReceiveMessageResponse.FromString(data[pos + 5:pos + 5 + n]))
        pos += 5 + n
    return responses, error, activity.renewals.added


def _popped(i: int, born: int = 1_700_000_000_000) -> MessageExt:
    return MessageExt("T", b"m%d" % i, queue_id=0, queue_offset=i, commit_log_offset=100 + i,
                      properties={"UNIQ_KEY": f"U{i}", "POP_CK": f"0 1 30000 0 0 b 0 {i}"}, born_timestamp=born)


def test_a_receive_answers_in_one_piece_with_the_front_s_handles(monkeypatch):
    responses, error, renewed = _receive([_popped(0), _popped(1)], monkeypatch, auto_renew=True)
    assert error is None
    assert [r.WhichOneof("content") for r in responses] == ["status", "message", "message", "delivery_timestamp"]
    handles = [r.message.system_properties.receipt_handle for r in responses[1:3]]
    assert handles == ["0 1 30000 0 0 b 0 0 100", "0 1 30000 0 0 b 0 1 101"]  # the commit log offset appended
    assert [a[3] for a in renewed] == handles  # a PushConsumer's messages are renewed by the front


def test_a_message_protobuf_cannot_carry_fails_the_call_after_the_ones_before_it(monkeypatch):
    """As when the front built protobuf objects one by one: Status OK and the messages before the
    one whose timestamp is past protobuf's range go out, then the call fails on it."""
    msgs = [_popped(0), _popped(1, born=MS_MAX + 1), _popped(2)]
    responses, error, renewed = _receive(msgs, monkeypatch, auto_renew=True)
    assert isinstance(error, ValueError)
    assert [r.WhichOneof("content") for r in responses] == ["status", "message"]
    assert responses[1].message.system_properties.message_id == "U0"
    assert len(renewed) == 1
