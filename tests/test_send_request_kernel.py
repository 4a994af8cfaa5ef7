"""broker.kernels.send_request.read_send (SendMessage's request read in C) against its pure-Python
twin (read_send_props too: the properties rendered by the kernel, equal to the twin's and to
client_codec.message_properties of read_send's), and both against what the front did before: protobuf's decode, then route_activity's topic
check, converter.to_remoting and send_now's own declines. Whatever the kernel takes must be what
that path would have sent; what it declines goes down that path, so a decline is always allowed,
but a plain message (what every 5.x producer sends) must be taken."""
from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels.client_codec import message_properties
from broker.kernels.send_request import read_send, read_send_props
from broker.proxy.config import ProxyConfig
from broker.proxy.converter import SYSTEM_PROPERTIES
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from tests.twins.send_request_twin import protobuf_path
from tests.twins.send_request_twin import read_send as twin_read_send
from tests.twins.send_request_twin import read_send_props as twin_read_send_props

PEER = "10.1.2.3"


def _limits(config: ProxyConfig) -> tuple:
    return config.maxMessageSize, config.userPropertyMaxNum, config.maxUserPropertySize, SYSTEM_PROPERTIES


def check(payload: bytes, config: ProxyConfig, peer: str = PEER, must_take: bool = False):
    got = read_send(payload, peer, *_limits(config))
    assert got == twin_read_send(payload, peer, *_limits(config))
    rendered = read_send_props(payload, peer, *_limits(config))
    assert rendered == twin_read_send_props(payload, peer, *_limits(config))
    if got is None:
        assert rendered is None
    else:  # what the front's producer would render of read_send's message (its UNIQ_KEY the message id)
        topic, body, tag, keys, props, message_id = got
        assert rendered == (topic, body, message_properties(tag, keys, props)[0], message_id)
        assert message_properties(tag, keys, props)[1] == message_id
    if got is not None or must_take:
        assert got == protobuf_path(payload, peer, config)
    if must_take:
        assert got is not None
    return got


# -- strategies -------------------------------------------------------------------------------------
_graphic = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=12)
_word = st.one_of(_graphic, st.sampled_from(["订单", "é", "ключ", "\u3000订单"]))  # not blank, not ASCII
_any_text = st.text(max_size=12)  # control characters, whitespace, non-ASCII, '|'
_tricky = st.sampled_from(["", " ", "\u3000", "a|b", "x\x01", "\x7f", "é", "  k  ", "\t"])
_text = st.one_of(_graphic, _any_text, _tricky)
_topic = st.one_of(st.from_regex(r"[%|a-zA-Z0-9_-]{1,20}", fullmatch=True), _text,
                   st.just("T" * 127), st.just("T" * 128))
_user_key = st.one_of(_graphic, _text, st.sampled_from(sorted(SYSTEM_PROPERTIES)[:5]))
_ts = st.builds(lambda s, n: (s, n), st.integers(-(1 << 63), (1 << 63) - 1) | st.integers(0, 2_000_000_000),
                st.integers(-(1 << 31), (1 << 31) - 1))


@st.composite
def messages(draw, plain: bool = False) -> pb.Message:
    """A v2 Message with any of the fields a client may fill; `plain`: one the kernel must take.
    Otherwise each field is a plain one three times in four, anything else the fourth."""
    def pick(good, bad):
        return draw(good) if plain or draw(st.integers(0, 3)) else draw(bad)

    sp = pb.SystemProperties()
    sp.message_id = pick(_word, _text)
    tag = pick(st.none() | _word.filter(lambda t: "|" not in t), st.none() | _text)
    if tag is not None:
        sp.tag = tag
    sp.keys.extend(pick(st.lists(_word, max_size=3), st.lists(_text, max_size=3)))
    sp.message_type = pick(st.sampled_from([pb.MESSAGE_TYPE_UNSPECIFIED, pb.NORMAL]), st.integers(0, 7))
    sp.body_encoding = pick(st.sampled_from([pb.ENCODING_UNSPECIFIED, pb.IDENTITY]), st.integers(0, 3))
    user = pick(st.dictionaries(_graphic.filter(lambda k: k not in SYSTEM_PROPERTIES), _graphic, max_size=4),
                st.dictionaries(_user_key, _text, max_size=4))
    topic = pick(st.from_regex(r"[%|a-zA-Z0-9_-]{1,40}", fullmatch=True), _topic)
    body = pick(st.binary(min_size=1, max_size=64), st.binary(max_size=64))
    if not plain:
        if draw(st.integers(0, 7)) == 0:
            s, n = draw(_ts)
            sp.delivery_timestamp.seconds, sp.delivery_timestamp.nanos = min(s, 2_000_000_000), n
        if draw(st.integers(0, 7)) == 0:
            sp.message_group = draw(_text)
        if draw(st.integers(0, 5)) == 0:
            sp.orphaned_transaction_recovery_duration.seconds = draw(st.integers(-5, 100_000))
    # what a client adds that to_remoting does not read, or reads as properties
    if draw(st.booleans()):
        sp.born_host = draw(_text)
    if draw(st.booleans()):
        s, n = draw(_ts)
        sp.born_timestamp.seconds, sp.born_timestamp.nanos = s, n
    if draw(st.booleans()):
        sp.trace_context = draw(_text)
    if draw(st.booleans()):
        sp.body_digest.type = draw(st.integers(0, 3))
        sp.body_digest.checksum = draw(_text)
    if draw(st.integers(0, 3)) == 0:
        sp.store_host = draw(_text)
        sp.queue_id = draw(st.integers(-(1 << 31), (1 << 31) - 1))
        sp.queue_offset = draw(st.integers(-(1 << 63), (1 << 63) - 1))
        sp.delivery_attempt = draw(st.integers(0, 100))
        sp.receipt_handle = draw(_text)
        sp.invisible_duration.seconds = draw(st.integers(0, 100))
        sp.store_timestamp.seconds = draw(st.integers(0, 1 << 40))
        sp.dead_letter_queue.topic = draw(_text)
        sp.lite_topic = draw(_text)
        sp.priority = draw(st.integers(0, 9))
    m = pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=sp, user_properties=user)
    if draw(st.integers(0, 5)) == 0:
        m.topic.resource_namespace = draw(_text)
    return m


_configs = st.one_of(st.just(ProxyConfig()), st.just(ProxyConfig()), st.just(ProxyConfig()), st.builds(
    lambda body, num, size: _config(maxMessageSize=body, userPropertyMaxNum=num, maxUserPropertySize=size),
    st.integers(0, 80), st.integers(0, 5), st.integers(0, 60)))


def _config(**kw) -> ProxyConfig:
    c = ProxyConfig()
    for k, v in kw.items():
        setattr(c, k, v)
    return c


_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- the properties -------------------------------------------------------------------------------
@_SETTINGS
@given(messages(plain=True), st.sampled_from(["", PEER]))
def test_plain_messages_are_taken_as_to_remoting_makes_them(m, peer):
    check(spb.SendMessageRequest(messages=[m]).SerializeToString(), ProxyConfig(), peer, must_take=True)


@_SETTINGS
@given(st.one_of(st.lists(messages(), min_size=1, max_size=1), st.lists(messages(), max_size=2)), _configs)
def test_any_request_equals_the_protobuf_path_when_taken(msgs, config):
    check(spb.SendMessageRequest(messages=msgs).SerializeToString(), config)


@_SETTINGS
@given(messages(), st.data())
def test_damaged_bytes_are_declined_or_read_as_protobuf_reads_them(m, data):
    """Bytes cut, flipped, inserted: wire errors, bad UTF-8, wrong wire types, fields repeated."""
    b = bytearray(spb.SendMessageRequest(messages=[m]).SerializeToString())
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "insert", "cut", "dup"]))
        i = data.draw(st.integers(0, max(0, len(b) - 1)))
        if op == "flip" and b:
            b[i] = data.draw(st.integers(0, 255))
        elif op == "insert":
            b[i:i] = data.draw(st.binary(min_size=1, max_size=4))
        elif op == "cut":
            del b[i:i + data.draw(st.integers(1, 8))]
        else:  # a field given twice: the whole request's bytes appended to themselves
            b += b[:i]
    check(bytes(b), ProxyConfig())


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_random_bytes(payload):
    check(payload, ProxyConfig())


# -- cases named -------------------------------------------------------------------------------------
def _request(**sp_fields) -> pb.Message:
    user = sp_fields.pop("user", {})
    topic = sp_fields.pop("topic", "TopicA")
    body = sp_fields.pop("body", b"hello")
    sp = pb.SystemProperties(**{"message_id": "ID1", **sp_fields})
    return spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic), body=body,
                                                       system_properties=sp, user_properties=user)])


@pytest.mark.parametrize("sp_fields", [
    {"message_type": pb.TRANSACTION},
    {"message_group": "g1"},
    {"body_encoding": pb.GZIP},
    {"user": {"KEYS": "x"}},  # a system property's name
    {"user": {"a\x01": "x"}},
    {"tag": "a|b"},
    {"tag": "   "},
    {"keys": [" "]},
    {"message_id": "\u3000"},
    {"topic": "bad topic"},
    {"body": b""},
], ids=lambda d: next(iter(d)))
def test_declined(sp_fields):
    payload = _request(**sp_fields).SerializeToString()
    assert check(payload, ProxyConfig()) is None


def test_delivery_time_declined():
    r = _request()
    r.messages[0].system_properties.delivery_timestamp.seconds = 2_000_000_000
    assert check(r.SerializeToString(), ProxyConfig()) is None


def test_two_messages_declined():
    r = _request()
    r.messages.append(r.messages[0])
    assert check(r.SerializeToString(), ProxyConfig()) is None


def test_taken_with_every_property_to_remoting_sets():
    r = _request(tag="TagA", keys=["k1", "k2"], born_host="192.168.0.9", trace_context="00-ab", user={"u": "v"})
    r.messages[0].system_properties.born_timestamp.seconds = 1_700_000_000
    r.messages[0].system_properties.born_timestamp.nanos = 123_456_789
    got = check(r.SerializeToString(), ProxyConfig(), must_take=True)
    assert got == ("TopicA", b"hello", "TagA", ["k1", "k2"],
                   {"u": "v", "UNIQ_KEY": "ID1", "PGROUP": "TopicA", "TRACE_CONTEXT": "00-ab",
                    "__BORNHOST": "192.168.0.9", "BORN_TIMESTAMP": "1700000000123"}, "ID1")


def test_limits_decline():
    payload = _request(user={"abc": "defg"}, body=b"x" * 10).SerializeToString()
    assert check(payload, _config(maxMessageSize=9)) is None
    assert check(payload, _config(maxMessageSize=10)) is not None
    assert check(payload, _config(userPropertyMaxNum=0)) is None
    assert check(payload, _config(maxUserPropertySize=6)) is None
    assert check(payload, _config(maxUserPropertySize=7)) is not None


def test_invalid_utf8_in_a_field_not_read_is_declined():
    """protobuf refuses a request whose store_host is not UTF-8: so does the kernel."""
    good = _request(store_host="h").SerializeToString()
    bad = good.replace(b"\x52\x01h", b"\x52\x01\xff")
    assert check(good, ProxyConfig()) is not None
    assert bad != good and check(bad, ProxyConfig()) is None
    with pytest.raises(DecodeError):
        spb.SendMessageRequest.FromString(bad)


def test_a_user_property_entry_with_another_field_is_declined():
    """protobuf keeps a map entry holding a field besides key and value among the unknown fields,
    out of user_properties (the fuzzer's find): the kernel declines it rather than read it."""
    r = _request(user={"u": "v"}).SerializeToString()
    odd = r.replace(b"\x12\x06\n\x01u\x12\x01v", b"\x12\x06\n\x01u\xc0\x01v")
    assert odd != r
    assert check(r, ProxyConfig()) is not None
    assert check(odd, ProxyConfig()) is None
    assert dict(spb.SendMessageRequest.FromString(odd).messages[0].user_properties) == {}
