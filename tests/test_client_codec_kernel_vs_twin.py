"""The client's wire kernel (broker.kernels.client_codec) against its twin and against the path it
replaces (hypothesis):

- sends kept in C (SendSlots): random sends, then random reads of their answers (successes,
  failure codes, other queues, answers to nothing, hand-backs), then deadlines and a closed
  connection complete the same futures with the same SendResults, and hand the same answers to
  the producer, as the twin (the fuzz check sends_both);
- replies: random reads of answers as brokers write them (JSON and ROCKETMQ, numbers and strings,
  the field shapes §4.2 hands back, remarks, bodies, requests from the broker, a partial frame at
  the end) read the same by the kernel and its twin (the fuzz check, tools/fuzz/checks.py);
- requests: render_send / render_batch / render_pull write byte for byte what the client wrote
  before them (RemotingCommand.request(code, ext, body).encode(), Message.wire_properties(),
  encode_batch_body), and the broker's own header kernel reads them back.
"""
from __future__ import annotations

import json
import struct

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.client.message import Message, properties_string
from broker.kernels import client_codec as K
from broker.kernels import header as KH
from broker.kernels.wbuf import WriteBuffer
from broker.remoting.command import RemotingCommand
from broker.remoting.message_batch import encode_batch_body
from tests.twins import client_codec_twin as T
from tools.fuzz.checks import SEND_RING_SIZES, check_replies, reply_items, sends_both

i32 = st.integers(-2**31, 2**31 - 1)
i64 = st.integers(-2**63, 2**63 - 1)
text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)


def _frame(header: bytes, body: bytes, stype: int) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


@st.composite
def field_value(draw, name: str):
    """A known field's value in the shapes brokers write and some they do not."""
    if name in ("msgId", "transactionId", "recallHandle"):
        return draw(st.one_of(text, st.sampled_from(["7F00000100002A9F0000000000000000", "a\\u0041", None, 5])))
    bound = 2**31 if name == "queueId" else 2**63
    n = draw(st.one_of(st.integers(-bound, bound - 1), st.integers(-2 * bound, 2 * bound)))
    return draw(st.sampled_from([str(n), n, str(n), f"00{abs(n)}", f"+{n}", "", None, 1.5, True, "x"]))


@st.composite
def reply_frame(draw):
    stype = draw(st.sampled_from([0, 0, 1]))
    names = draw(st.lists(st.sampled_from(list(T.INT_FIELDS) + list(T.STRING_FIELDS) + ["MSG_REGION", "other"]),
                          max_size=7))
    ext = {n: draw(field_value(n)) if n in T.INT_FIELDS or n in T.STRING_FIELDS else draw(text) for n in names}
    flag = draw(st.sampled_from([1, 1, 1, 3, 0, 2]))  # responses mostly; requests from the broker too
    code, opaque = draw(st.sampled_from([0, 0, 1, 17, 19, 24, 40])), draw(i32)
    remark = draw(st.one_of(st.none(), text))
    body = draw(st.binary(max_size=40))
    if stype == 0:
        h = {"code": code, "language": "JAVA", "version": 395, "opaque": opaque, "flag": flag}
        if remark is not None or draw(st.booleans()):
            h["remark"] = remark
        if ext or draw(st.booleans()):
            h["extFields"] = ext
        header = json.dumps(h).encode() if draw(st.booleans()) else msgspec.json.encode(h)
    else:
        header = KH.encode_header(1, code, "JAVA", 395, opaque, flag, remark,
                                  {k: "" if v is None else v if isinstance(v, str) else json.dumps(v)
                                   for k, v in ext.items()})
    return _frame(header, body, stype)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(reply_frame(), max_size=10), st.binary(max_size=12), st.integers(0, 2), st.integers(0, 255))
def test_kernel_and_twin_read_the_same_replies(frames, tail, limit, skip):
    read = b"".join(frames) + tail
    check_replies(bytes([limit, 0, 0]) + read)  # the whole read
    check_replies(bytes([limit, skip, 0]) + read)  # from a cut somewhere in it


def test_a_send_reply_as_the_broker_writes_it_is_a_reply():
    h = KH.encode_header(0, 0, "JAVA", 395, 77, 1, None, {"msgId": "AB", "queueId": "2", "queueOffset": "9",
                                                          "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})
    data = _frame(h, b"", 0)
    [r], pos = K.read_replies(data, 0, len(data))
    assert (r.opaque, r.code, r.msg_id, r.queue_id, r.queue_offset, r.next_begin_offset, r.body) == \
           (77, 0, "AB", 2, 9, None, b"")
    assert pos == len(data) and reply_items(([r], pos)) == T.read_replies(data, 0, len(data))


def test_a_request_from_the_broker_is_handed_back_and_the_walk_resumes_after_it():
    req = _frame(KH.encode_header(0, 40, "JAVA", 395, 5, 0, None, {"consumerGroup": "g"}), b"", 0)
    rep = _frame(KH.encode_header(0, 1, "JAVA", 395, 6, 1, "failed", None), b"x", 0)
    reader = K.ReplyReader()
    buf = req + rep
    assert reader.read(buf, 0, len(buf)) == (K.READ_SLOW, 0)
    assert (reader.slow_header_start, reader.slow_next) == (8, len(req)) and reader.take() == []
    assert reader.read(buf, reader.slow_next, len(buf)) == (K.READ_DONE, len(buf))
    [r] = reader.take()
    assert (r.opaque, r.code, r.remark, r.body) == (6, 1, "failed", b"x")


@pytest.mark.parametrize("data, reason", [
    (struct.pack(">i", 2) + bytes(8), "below 4"),
    (struct.pack(">ii", 12, 100) + bytes(8), "header length 100"),
    (struct.pack(">ii", 12, 5 << 24 | 2) + bytes(8), "unknown serialize type 5"),
    (struct.pack(">ii", 12, 8) + b"{notjson", "bad remoting header"),
])
def test_bad_frames_raise(data, reason):
    with pytest.raises(ValueError, match=reason):
        K.read_replies(data, 0, len(data))


# -- requests: byte for byte what the RemotingCommand path wrote --------------------------------------

def _wire_props(tags, keys, props, delay, uniq) -> str:
    m = Message("T", b"", tags, keys, props, delay)
    p = m.wire_properties()
    p.setdefault("UNIQ_KEY", uniq)
    return properties_string(p)


prop_key = st.sampled_from(["TAGS", "KEYS", "DELAY", "WAIT", "UNIQ_KEY", "color", "k\u00e9y", "a\"b\\c"])
prop_value = st.one_of(text, st.none())


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), text), st.one_of(st.none(), text, st.lists(text, max_size=3)),
       st.dictionaries(prop_key, prop_value, max_size=5), st.integers(0, 18), i32, i32, st.binary(max_size=64),
       st.integers(0, 2), st.integers(-1, 16))
def test_render_send_writes_what_remoting_command_wrote(tags, keys, props, delay, opaque, queue_id, body, reconsume,
                                                         max_reconsume):
    w = WriteBuffer()
    w.extend(b"before")  # a frame is appended to what the turn rendered so far
    uniq = K.render_send(w, opaque, False, "pg", "Topic\u00e9", 4, queue_id, 1, 7, body, tags, keys, props, delay,
                         reconsume, max_reconsume, None, 1700000000000)
    want_props = _wire_props(tags, keys, props, delay, uniq)
    assert uniq == (props["UNIQ_KEY"] if "UNIQ_KEY" in props else uniq)
    ext = {"a": "pg", "b": "Topic\u00e9", "c": "TBW102", "d": 4, "e": queue_id, "f": 1, "g": 1700000000000,
           "h": 7, "i": want_props, "j": reconsume, "k": False, "m": False}
    if max_reconsume >= 0:
        ext["l"] = max_reconsume
    cmd = RemotingCommand(310, ext, body, opaque=opaque)
    assert w.getvalue() == b"before" + cmd.encode()
    # and the broker's header kernel reads the properties back as sent
    got = KH.decode_header(0, w.getvalue(), 14, len(cmd.header_bytes()))
    assert got[6]["i"] == want_props and got[3] == opaque


def test_a_retry_keeps_its_uniq_key_and_a_failed_render_leaves_nothing():
    w = WriteBuffer()
    first = K.render_send(w, 1, False, "pg", "T", 4, 0, 0, 0, b"x", None, None, {}, 0)
    again = K.render_send(w, 2, False, "pg", "T", 4, 1, 0, 0, b"x", None, None, {}, 0, uniq_key=first)
    assert again == first and w.getvalue().count(first.encode()) == 2
    size = len(w)
    with pytest.raises(TypeError):
        K.render_send(w, 3, False, "pg", "T", 4, 0, 0, 0, b"x", None, [1, 2], {}, 0)  # keys must be str
    with pytest.raises(TypeError):
        K.render_batch(w, 4, "pg", "T", 4, 0, 0, [Message("T", b"ok"), Message("T", None)])
    assert len(w) == size


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=40), st.one_of(st.none(), text), st.one_of(st.none(), text),
                          st.dictionaries(prop_key, text, max_size=3), i32), min_size=1, max_size=5), i32, i32)
def test_render_batch_writes_what_encode_batch_body_wrote(entries, opaque, queue_id):
    msgs = [Message("T", b, tags, keys, props, 0, flag) for b, tags, keys, props, flag in entries]
    w = WriteBuffer()
    uniqs = K.render_batch(w, opaque, "pg", "T", 4, queue_id, msgs[0].flag, msgs, None, 1700000000000)
    body = encode_batch_body([(m.body, _wire_props(m.tags, m.keys, m.properties, 0, u).encode(), m.flag)
                              for m, u in zip(msgs, uniqs)])
    ext = {"a": "pg", "b": "T", "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": 1700000000000,
           "h": msgs[0].flag, "i": "", "j": 0, "k": False, "m": True}
    assert w.getvalue() == RemotingCommand(320, ext, body, opaque=opaque).encode()
    again = WriteBuffer()
    assert K.render_batch(again, opaque, "pg", "T", 4, queue_id, msgs[0].flag, msgs, uniqs, 1700000000000) == uniqs
    assert again.getvalue() == w.getvalue()


@settings(max_examples=100, deadline=None)
@given(i32, text, st.integers(0, 2**31 - 1), i64, st.integers(1, 1024), st.integers(0, 7), i64, i64, text)
def test_render_pull_writes_what_remoting_command_wrote(opaque, topic, queue_id, offset, n, sys_flag, commit, suspend,
                                                        sub):
    w = WriteBuffer()
    K.render_pull(w, opaque, "cg", topic, queue_id, offset, n, sys_flag, commit, suspend, sub, 0)
    ext = {"consumerGroup": "cg", "topic": topic, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": n,
           "sysFlag": sys_flag, "commitOffset": commit, "suspendTimeoutMillis": suspend, "subscription": sub,
           "subVersion": 0}
    assert w.getvalue() == RemotingCommand(11, ext, b"", opaque=opaque).encode()


def test_uniq_keys_share_one_counter_and_are_32_hex_digits():
    from broker.client.message import _ID_PREFIX, new_uniq_key
    a, (_, b), c = new_uniq_key(), K.message_properties(None, None, {}), new_uniq_key()
    assert len({a, b, c}) == 3 and all(len(x) == 32 and x.startswith(_ID_PREFIX) for x in (a, b, c))
    assert (int(b[-4:], 16) - int(a[-4:], 16)) % 65536 == 1 and (int(c[-4:], 16) - int(b[-4:], 16)) % 65536 == 1


@st.composite
def send_answer(draw):
    """An answer to one of the first 16 opaques as a broker writes a send's (or does not)."""
    stype = draw(st.sampled_from([0, 0, 1]))
    ext = {"msgId": draw(st.sampled_from(["7F00000100002A9F0000000000000000", "", None, "a\\u0041"]))}
    for name, values in (("queueId", [0, 1, 2, 3, 5, -1, None, "x"]), ("queueOffset", [0, 7, 2**40, -1, None, "+1"])):
        if draw(st.booleans()):
            ext[name] = draw(st.sampled_from(values))
    if draw(st.booleans()):
        ext["MSG_REGION"] = "DefaultRegion"
    if draw(st.integers(0, 2)) == 0:  # a timer message's
        ext["recallHandle"] = draw(st.sampled_from(["djEgVCBiIDEgVQ==", "", None, "a\\u0041"]))
    code = draw(st.sampled_from([0, 0, 0, 10, 11, 12, 1, 17, 2]))
    flag = draw(st.sampled_from([1, 1, 1, 1, 0]))
    opaque = draw(st.integers(0, 17))
    ext = {k: v for k, v in ext.items() if v is not None or stype == 0}
    if stype == 0:
        header = json.dumps({"code": code, "language": "JAVA", "version": 395, "opaque": opaque, "flag": flag,
                             "extFields": ext}).encode()
    else:
        header = KH.encode_header(1, code, "JAVA", 395, opaque, flag, None,
                                  {k: v if isinstance(v, str) else json.dumps(v) for k, v in ext.items()})
    return _frame(header, draw(st.binary(max_size=8)), stype)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(send_answer(), max_size=20), st.binary(max_size=6), st.integers(0, 15), st.sampled_from(SEND_RING_SIZES),
       st.integers(0, 7), st.integers(0, 2**16 - 1), st.integers(100, 106), st.integers(0, 2**16 - 1))
def test_sends_kept_in_c_complete_as_the_twin_completes_them(answers, tail, n, size, skip, qids, expire_at,
                                                              cancelled):
    sends_both(b"".join(answers) + tail, n, size, skip, qids, float(expire_at), cancelled)


def test_a_ring_slot_still_taken_refuses_the_send_and_renders_nothing():
    from broker.client.message import Message
    from broker.client.route import MessageQueue
    slots, w = K.SendSlots(None, 4), WriteBuffer()

    class Fut:
        def done(self):
            return False
    mq = MessageQueue("T", "b", 0)
    assert [slots.send(w, Fut(), None, "g", Message("T", b"x"), mq, 0, 4, 1024, 0.0, 3.0) for _ in range(4)] == [
        1, 0, 0, 0]
    size = len(w)
    assert slots.send(w, Fut(), None, "g", Message("T", b"x"), mq, 0, 4, 1024, 0.0, 3.0) == -1  # opaque 5: slot 1
    assert len(w) == size and slots.in_flight == 4
    assert slots.next_opaque() == 5  # the refused send took no opaque
    assert slots.send(w, Fut(), None, "g", Message("T", b"x" * 2000), mq, 0, 4, 1024, 0.0, 3.0) == -1  # to compress
    assert [t[5] for t in slots.expire(3.0)] == [3.0] * 4 and slots.in_flight == 0 and slots.armed == float("inf")


def test_a_send_result_is_the_dataclass_its_init_makes_and_another_result_type_is_called():
    """SendSlots fills a plain slots dataclass's slots instead of calling its __init__ (the twin
    checks above compare those with the twin's result_type(...) calls); a result type that is not
    one is called as before."""
    from broker.client.producer import _SEND_STATUS, SendResult
    from broker.client.route import MessageQueue
    from tools.fuzz.checks import _Fut

    def one_answer(result_type):
        K.send_result_setup(result_type, _SEND_STATUS)
        slots, w, fut = K.SendSlots(None, 4), WriteBuffer(), _Fut()
        mq = MessageQueue("T", "b", 2)
        assert slots.send(w, fut, None, "g", Message("T", b"x"), mq, 2, 4, 1024, 0.0, 3.0) == 1
        cmd = RemotingCommand.request(310, {})
        cmd.opaque = 1
        answer = cmd.response(0, {"msgId": "ID", "queueId": "2", "queueOffset": "41"}).encode()
        assert K.read_replies(bytearray(answer), 0, len(answer), sends=slots) == ([], len(answer))
        return fut.result, mq

    class Called:
        def __init__(self, *args):
            self.args = args
    try:
        made, mq = one_answer(SendResult)
        assert type(made) is SendResult and made == SendResult("SEND_OK", made.msg_id, "ID", mq, 41, None)
        assert len(made.msg_id) == 32 and str(made).startswith("SEND_OK msgId=")
        other, mq = one_answer(Called)
        assert type(other) is Called and other.args == ("SEND_OK", other.args[1], "ID", mq, 41, None)
    finally:
        K.send_result_setup(SendResult, _SEND_STATUS)
