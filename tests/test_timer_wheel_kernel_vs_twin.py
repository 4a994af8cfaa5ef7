"""The timer enqueue kernel (broker.kernels.timer_wheel) equals its pure-Python twin (hypothesis):
runs of timer-topic records with delivery times in the window, past the roll window, before the
read time, below a takeover's (queue offset, read time), unreadable or missing; REAL_TOPIC in
ASCII, in other scripts, not UTF-8 or absent; delete markers; keys twice and entries without a
value; a damaged record; a wheel with a few slots already holding times; a small timer log
segment that fills up. Both are resumed where they stop as the service resumes them (a record
for Python skipped over, a full segment given a new one): the same statuses, positions and
counts, the same wheel and timer log bytes."""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels.codec import encode_record
from broker.kernels.timer_wheel import ENQ_DONE, ENQ_LOG_FULL, ENQ_PYTHON, enqueue_records, topic_hash
from broker.store.timer_files import java_hash
from tests.twins import timer_wheel_twin as T

HOST = bytes([127, 0, 0, 1, 0, 0, 0x2A, 0x9F])
HOST6 = bytes(15) + b"\x01" + bytes([0, 0, 0x2A, 0x9F])
PRECISION, SLOTS, ROLL = 1000, 64, 40
WRITE_MS = 1_800_000_000_000
READ_MS = WRITE_MS - 3000
LOG_SIZE = 52 * 6 + 16 + 30  # room for 6 units: full often

times = st.one_of(st.integers(READ_MS, WRITE_MS + 39_999),                         # in the window
                  st.integers(WRITE_MS + 40_000, WRITE_MS + 90_000),              # rolled (both ways)
                  st.integers(READ_MS - 5000, READ_MS - 1),                       # due now
                  st.just(WRITE_MS + 2**31 + 5))                                  # a delay past an int
out_value = st.one_of(times.map(lambda t: str(t).encode()),
                      st.sampled_from([b"", b" 5", b"+5", b"x", b"1" * 19, b"-"]))
topic = st.sampled_from([b"Orders", b"\xc3\xa9t\xc3\xa9", b"\xf0\x9f\x98\x80q", b"bad\xff", b"\xe2\x82", None])


@st.composite
def timer_props(draw) -> bytes:
    entries = []
    if draw(st.integers(0, 12)):
        entries.append(b"TIMER_OUT_MS\x01" + draw(out_value))
    t = draw(topic)
    if t is not None:
        entries.append(b"REAL_TOPIC\x01" + t)
    if draw(st.integers(0, 5)) == 0:
        entries.append(b"TIMER_DEL_UNIQKEY\x01T+U")
    if draw(st.integers(0, 6)) == 0:  # a key twice: the last counts
        entries.append(b"TIMER_OUT_MS\x01" + str(draw(times)).encode())
    if draw(st.integers(0, 6)) == 0:  # no value: skipped
        entries.append(draw(st.sampled_from([b"TIMER_OUT_MS\x01", b"REAL_TOPIC\x01", b"TIMER_DEL_UNIQKEY\x01",
                                             b"\x01x", b""])))
    entries.insert(draw(st.integers(0, len(entries))), b"UNIQ_KEY\x01ABC")
    return b"\x02".join(entries)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(timer_props(), st.binary(max_size=20), st.booleans()), min_size=1, max_size=24),
       st.integers(0, 30), st.integers(0, 8), st.lists(st.tuples(st.integers(0, SLOTS - 1), st.integers(-2, 3)),
                                                         max_size=6), st.integers(0, 40))
def test_enqueue_same_wheel_and_log_as_the_twin(records, first_qo, past, prefill, damage_at):
    span = bytearray(64 * 1024)
    pos = 0
    for i, (props, body, v6) in enumerate(records):
        pos += encode_record(span, pos, 5000 + pos, first_qo + i, 0, b"rmq_sys_wheel_timer", 0, body, props, 0, 0,
                             0, HOST6 if v6 else HOST, HOST)
    span = span[:pos]
    if damage_at < len(records) and damage_at % 5 == 4:  # a record whose magic is not a message's
        at = _offset(span, damage_at)
        span[at + 4:at + 8] = b"\0\0\0\0"
    wheel = bytearray(SLOTS * 32)
    for idx, rel in prefill:  # slots already holding this time (a list to extend) or another one
        t = (WRITE_MS // PRECISION + idx + rel * SLOTS) if rel else 0
        struct.pack_into(">qqqii", wheel, idx * 32, t, 7 * 52, 9 * 52, 3, 0)
    past_qo, past_ms = first_qo + past, WRITE_MS + 10_000
    results = {}
    for name, fn in (("kernel", enqueue_records), ("twin", T.enqueue_records)):
        w = bytearray(wheel)
        logs = [bytearray(LOG_SIZE)]
        base, wrote, at, calls = 0, 0, 0, []
        while True:
            r = fn(bytes(span), at, w, SLOTS, PRECISION, logs[-1], base, wrote, LOG_SIZE, WRITE_MS, READ_MS,
                   past_qo, past_ms, ROLL)
            calls.append(r)
            status, at, _, _, wrote = r
            if status == ENQ_DONE:
                break
            if status == ENQ_LOG_FULL:  # the service rolls the log
                base += LOG_SIZE
                wrote = base
                logs.append(bytearray(LOG_SIZE))
            else:
                assert status == ENQ_PYTHON
                at += struct.unpack_from(">i", span, at)[0]  # the service takes that one
                if at >= len(span) or struct.unpack_from(">i", span, at)[0] <= 0:
                    break
        results[name] = (calls, bytes(w), [bytes(x) for x in logs])
    assert results["kernel"] == results["twin"]


def _offset(span: bytes, index: int) -> int:
    at = 0
    for _ in range(index):
        at += struct.unpack_from(">i", span, at)[0]
    return at


@given(st.text(max_size=30))
def test_topic_hash_is_java_string_hashcode(text):
    assert topic_hash(text.encode()) == java_hash(text) == T.java_hash(text.encode())


def test_a_topic_that_is_not_utf8_has_no_hash():
    with pytest.raises(ValueError):
        topic_hash(b"bad\xff")
