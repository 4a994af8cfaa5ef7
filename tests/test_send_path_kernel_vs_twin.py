"""The send kernel equals its pure-Python twin (hypothesis): random reads of sends (both
serializations, both header shapes, numbers typed as ali-ons and the C++ client type them, escaped
properties, oneway) mixed with frames the kernel must hand back (other codes, responses, unrouted
topics, queues out of range, DELAY, transaction flags, oversize bodies, unreadable fields) and a
partial frame at the end: the same statuses at the same positions, the same records byte for byte
(store timestamps aside: the kernel's clock), the same replies."""
from __future__ import annotations

import json
import struct

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels import header as KH
from broker.kernels.codec import Appender, MappedBuffer
from broker.kernels.send_path import SendConn, SendPipeline
from tests.twins import send_path_twin as T
from tools.fuzz.checks import SEND_BORN_HOST as BORN_HOST
from tools.fuzz.checks import SEND_MAX_BODY as MAX_BODY
from tools.fuzz.checks import SEND_STORE_HOST as STORE_HOST
from tools.fuzz.checks import SEND_TIMER, send_both

i32 = st.integers(-2**31, 2**31 - 1)
props_text = st.sampled_from(["", "TAGS\x01t", "TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABCD",
                              "KEYS\x01\u00e9\U0001f600\"\\/", "a\x01b\x02DELAYx\x011", "TAGS\x01t", "DELAY\x013",
                              "TAGS\x01t\x02WAIT\x01true\x02", "WAIT\x01false\x02KEYS\x01k", "WAIT\x01TRUE",
                              "CLUSTER\x01other\x02\x02x\x02WAIT", "a\x01b\x02CLUSTER\x01"])
# timer messages (SEND_TIMER's clock is 1,800,000,000,000 ms): taken, or handed back for each rule
_NOW = SEND_TIMER[4]
timer_props = st.sampled_from([
    "TIMER_DELAY_SEC\x0160\x02UNIQ_KEY\x01AC1F0001", f"TIMER_DELIVER_MS\x01{_NOW + 5500}\x02KEYS\x01k",
    f"TIMER_DELIVER_MS\x01{_NOW + 5000}", "TIMER_DELAY_MS\x01999\x02TAGS\x01t\x02UNIQ_KEY\x01\u00e9x",
    "UNIQ_KEY\x01U\x02TIMER_DELAY_SEC\x013\x02TIMER_DELAY_MS\x019", "TIMER_DELAY_SEC\x0110\x02WAIT\x01false",
    "TIMER_DELAY_SEC\x01-5", f"TIMER_DELIVER_MS\x01{_NOW}", "TIMER_DELAY_SEC\x01999999999",
    "TIMER_DELAY_MS\x01abc", "TIMER_DELAY_MS\x01+5", "TIMER_DELAY_SEC\x011\x02TIMER_DELAY_SEC\x012",
    "TIMER_DELAY_SEC\x011\x02REAL_TOPIC\x01x", "TIMER_DELAY_SEC\x011\x02TIMER_OUT_MS\x011",
    "TIMER_DELAY_SEC\x011\x02TIMER_DEL_UNIQKEY\x01a+b", "TIMER_DELAY_SEC\x011\x02KEYS\x01",
    "TIMER_DELAY_SEC\x011\x02", "TIMER_DELAY_SEC\x011\x02\x02TAGS\x01t", "TIMER_DELAY_SEC\x011\x02noval",
    "TIMER_DEx\x011", "TIMER_DELAY_SEC\x01" + "9" * 16, "CLUSTER\x01c\x02TIMER_DELAY_SEC\x0130"])


@st.composite
def batch_body(draw) -> bytes:
    """SEND_BATCH_MESSAGE's body: messages as the Java client encodes them, sometimes damaged."""
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        body = draw(st.binary(max_size=MAX_BODY // 2) | st.binary(min_size=MAX_BODY + 1, max_size=MAX_BODY + 2))
        props = draw(st.sampled_from([b"", b"TAGS\x01t", b"KEYS\x01k\x02", b"UNIQ_KEY\x01X\x02a\x01b"]))
        parts.append(struct.pack(">iiiii", 22 + len(body) + len(props), 0, 0, draw(i32), len(body)) + body
                     + struct.pack(">H", len(props)) + props)
    data = b"".join(parts)
    if data and draw(st.integers(0, 6)) == 0:  # damaged: a length that does not add up, or cut short
        cut = draw(st.integers(1, len(data)))
        data = data[:cut] if draw(st.booleans()) else data[:-cut] + bytes([0xFF]) * cut
    return data


@st.composite
def send_frame(draw):
    v2 = draw(st.booleans())
    batch = v2 and draw(st.integers(0, 3)) == 0
    stype = draw(st.sampled_from([0, 0, 1]))
    topic = draw(st.sampled_from(["R1", "R2", "R1", "R2", "R1", "U"]))
    fields = {"topic": topic, "queueId": draw(st.sampled_from([0, 0, 1, 0, 0, 1, 0, -1, 2])),
              "sysFlag": draw(st.sampled_from([0, 0, 0, 0, 0, 0, 1, 4, 8])),
              "bornTimestamp": draw(st.integers(0, 2**41)), "flag": draw(i32),
              "properties": draw(timer_props if draw(st.integers(0, 2)) == 0 else props_text), "reconsumeTimes": draw(st.integers(0, 3))}
    # how clients type the values: numbers (ali-ons), strings for 64-bit ones (C++), all strings
    typing = draw(st.sampled_from(["numbers", "cpp", "strings"]))
    ext = {}
    for name, value in fields.items():
        if draw(st.integers(0, 30)) == 0 and name != "topic":
            continue  # a field left out
        if isinstance(value, int) and (typing == "strings" or (typing == "cpp" and name == "bornTimestamp")
                                       or stype == 1):
            value = str(value)
        ext[name] = value
    if draw(st.integers(0, 25)) == 0:
        ext["queueId"] = draw(st.sampled_from(["x", "99999999999", [1], 1.5, "", "-0", "00"]))
    letters = {v: k for k, v in T.LETTERS.items()}
    ext = {(letters[k] if v2 else k): v for k, v in ext.items()}
    ext.update({"a" if v2 else "producerGroup": "pg", "k" if v2 else "unitMode": "false"})
    opaque = draw(i32)
    flag = draw(st.sampled_from([0, 0, 0, 0, 2, 1]))  # request, oneway, response
    oversize = draw(st.integers(0, 9)) == 0
    body = draw(st.binary(min_size=MAX_BODY + 1, max_size=MAX_BODY + 3) if oversize else st.binary(max_size=MAX_BODY))
    code = 320 if batch else 310 if v2 else 10
    if batch:
        body = draw(batch_body())
    if stype == 0:
        h = {"code": code, "language": "JAVA", "version": 121, "opaque": opaque, "flag": flag, "extFields": ext}
        header = msgspec.json.encode(h) if draw(st.booleans()) else json.dumps(h).encode()
    else:
        header = KH.encode_header(1, code, "JAVA", 395, opaque, flag, None, {k: str(v) for k, v in ext.items()})
    return _frame(header, body, stype)


@st.composite
def other_frame(draw):
    h = KH.encode_header(0, draw(st.sampled_from([30, 31, 11, 34])), "JAVA", 395, draw(i32), 0, None, {"topic": "R1"})
    return _frame(h, b"", 0)


def _frame(header: bytes, body: bytes, stype: int) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.one_of(send_frame(), send_frame(), send_frame(), other_frame()), max_size=12),
       st.binary(max_size=12), st.booleans(), st.sampled_from([True, True, True, False]), st.sampled_from([0, 1, 2, 5]),
       st.sampled_from([b"", b"DefaultCluster"]), st.booleans())
def test_kernel_and_twin_take_the_same_frames_the_same_way(frames, tail, parked, enabled, yield_after, cluster, timer):
    # a partial frame (or garbage) may follow; the comparison is the fuzz check's (tools/fuzz);
    # yield_after: the run stops after that many messages (RUN_YIELD) and is resumed from there;
    # cluster: stored as CLUSTER, WAIT left out (and WAIT=false answered without parking);
    # timer: timer messages taken into the timer topic (else handed back)
    send_both(b"".join(frames) + tail, parked, enabled, yield_after=yield_after, cluster=cluster, timer=timer)


def test_a_send_that_does_not_fit_is_handed_back_to_roll():
    seg = bytearray(4096)
    app = Appender(STORE_HOST, 4096, {}, 0)
    app.attach(MappedBuffer(seg, True), 0)
    pipe = SendPipeline(app)
    pipe.set_route(b"R1", 1)
    pipe.enabled = True
    h = KH.encode_header(0, 310, "JAVA", 395, 5, 0, None, {"a": "pg", "b": "R1", "e": "0", "i": ""})
    one = _frame(h, bytes(1500), 0)
    conn = SendConn(BORN_HOST)
    status, pos = pipe.run(conn, one * 3, 0, 3 * len(one))
    assert (status, pos) == (2, 2 * len(one)) and app.wrote > 3000  # two fit, the third must roll
    assert conn.slow_next == 3 * len(one)


@pytest.mark.parametrize("data, reason", [
    (struct.pack(">i", 2) + bytes(8), "below 4"),
    (struct.pack(">ii", 12, 100) + bytes(8), "header length 100"),
    (struct.pack(">ii", 12, 5 << 24 | 2) + bytes(8), "unknown serialize type 5"),
])
def test_bad_frames_raise_as_split_frames_does(data, reason):
    app = Appender(STORE_HOST, 4096, {}, 0)
    pipe = SendPipeline(app)
    pipe.enabled = True
    with pytest.raises(ValueError, match=reason):
        pipe.run(SendConn(BORN_HOST), data, 0, len(data))
