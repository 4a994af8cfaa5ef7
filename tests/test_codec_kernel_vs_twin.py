"""The codec kernel equals its pure-Python twin byte for byte, on random input (hypothesis)."""
from __future__ import annotations

import zlib

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from broker.kernels import codec as K
from tests.twins import codec_twin as T

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
i32 = st.integers(-2**31, 2**31 - 1)
i64 = st.integers(-2**63, 2**63 - 1)
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02"), max_size=12)
props_dict = st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "WAIT", "DELAY"]) | text, text,
                             max_size=5)
host = st.one_of(st.binary(min_size=8, max_size=8), st.binary(min_size=20, max_size=20))
topic = st.binary(min_size=1, max_size=127)
record_args = st.fixed_dictionaries({
    "physical_offset": i64, "queue_offset": i64, "store_ts": i64, "topic": topic, "queue_id": i32,
    "body": st.binary(max_size=600), "properties": props_dict.map(T.encode_properties) | st.binary(max_size=60),
    "flag": i32, "sys_flag": i32, "born_ts": i64, "born_host": host, "store_host": host,
    "reconsume_times": i32, "prepared_tx_offset": i64,
})


def both(fn_name, *args):
    """Call kernel and twin; return (result, buffer) pairs or the exception classes."""
    out = []
    for mod in (K, T):
        try:
            out.append(getattr(mod, fn_name)(*args))
        except Exception as e:  # compared below: the same kind of failure on both sides
            out.append(("raised", _kind(e)))
    return out


def _kind(e: Exception) -> str:
    if type(e).__name__ == "MessageIllegal":
        return "MessageIllegal"
    return "OverflowError" if isinstance(e, OverflowError) else type(e).__mro__[-3].__name__ if isinstance(e, ValueError) else type(e).__name__


@SETTINGS
@given(record_args, st.integers(0, 40))
def test_encode_record_same_bytes(args, pos):
    size = T.record_length(len(args["body"]), len(args["topic"]), len(args["properties"]),
                           len(args["born_host"]) == 20, len(args["store_host"]) == 20)
    bk, bt = bytearray(pos + size + 8), bytearray(pos + size + 8)
    order = ("physical_offset", "queue_offset", "store_ts", "topic", "queue_id", "body", "properties", "flag",
             "sys_flag", "born_ts", "born_host", "store_host", "reconsume_times", "prepared_tx_offset")
    a = [args[k] for k in order]
    rk = K.encode_record(bk, pos, *a)
    rt = T.encode_record(bt, pos, *a)
    assert rk == rt == size
    assert bk == bt


@SETTINGS
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=30), st.integers(100, 6000), topic,
       st.one_of(props_dict.map(T.encode_properties), st.just(None)), host, host, i64, i64)
def test_encode_batch_same_bytes_and_blank_rule(bodies, limit, tp, shared_props, bh, sh, qo, ts):
    props = shared_props if shared_props is not None else [b"TAGS\x01t%d" % i for i in range(len(bodies))]
    bk, bt = bytearray(limit), bytearray(limit)
    rk = K.encode_batch(bk, 0, limit, 1000, qo & 0xFFFFFFFF, ts, tp, 3, bodies, props, 0, 0, 5, bh, sh)
    rt = T.encode_batch(bt, 0, limit, 1000, qo & 0xFFFFFFFF, ts, tp, 3, bodies, props, 0, 0, 5, bh, sh)
    assert rk == rt and bk == bt
    assert limit - rk[1] >= 8 or rk[0] == 0  # room for the blank marker is always left


def _stream(records, blank_at_end):
    buf = bytearray()
    for i, (body, props) in enumerate(records):
        rec = bytearray(T.record_length(len(body), 5, len(props)))
        T.encode_record(rec, 0, len(buf), i, 1700000000000 + i, b"Topic", i % 4, body, props, 0, 0, 1,
                        b"\x7f\0\0\1\0\0\0\1", b"\x7f\0\0\1\0\0\x2a\x9f", 0, 0)
        buf += rec
    if blank_at_end:
        buf += (64).to_bytes(4, "big") + T.BLANK_MAGIC_CODE.to_bytes(4, "big") + bytes(56)
    return buf


def _kernel_scan(buf, start, end, base, crc, max_records):
    recs, nxt, status, _reason = K.scan(buf, start, end, base, crc, max_records)
    return recs, nxt, status


@SETTINGS
@given(st.lists(st.tuples(st.binary(max_size=200), props_dict.map(T.encode_properties)), max_size=12),
       st.booleans(), st.booleans(), st.data())
def test_scan_same_on_valid_and_damaged_streams(records, blank, crc, data):
    buf = _stream(records, blank)
    assume(len(buf) > 0)
    mutation = data.draw(st.sampled_from(["none", "flip", "truncate", "zero_tail", "garbage"]))
    if mutation == "flip":
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] ^= data.draw(st.integers(1, 255))
    elif mutation == "truncate":
        buf = buf[:data.draw(st.integers(0, len(buf)))]
    elif mutation == "zero_tail":
        buf += bytes(data.draw(st.integers(1, 100)))
    elif mutation == "garbage":
        buf += data.draw(st.binary(min_size=1, max_size=120))
    end = len(buf)
    start = 0
    max_records = data.draw(st.integers(0, 20))
    base = data.draw(st.integers(0, 2**40))
    assert _kernel_scan(buf, start, end, base, crc, max_records) == T.scan(buf, start, end, base, crc, max_records)


@SETTINGS
@given(st.text(max_size=30))
def test_java_hash_same_on_text(s):
    b = s.encode("utf-8", "surrogatepass")
    assert K.java_string_hash(b) == T.java_string_hash(b)


@SETTINGS
@given(st.binary(max_size=40))
def test_java_hash_same_on_any_bytes(b):
    # invalid UTF-8 is decoded with replacement characters on both sides, as Java's String(bytes, UTF_8)
    assert K.java_string_hash(b) == T.java_string_hash(b)


@SETTINGS
@given(props_dict.map(T.encode_properties) | st.binary(max_size=80))
def test_tag_hash_same(p):
    assert K.tag_hash(p) == T.tag_hash(p)


@SETTINGS
@given(st.binary(max_size=2000))
def test_crc_and_msg_id(b):
    assert K.crc32(b) == T.crc32(b) == zlib.crc32(b) & 0x7FFFFFFF
    h = b"\x0a\x00\x00\x01\x00\x00\x2a\x9f"
    assert K.msg_id(h, len(b)) == T.msg_id(h, len(b))


def test_refusals_agree():
    buf = bytearray(4096)
    args = [0, 0, 0, b"t" * 128, 0, b"x", b"", 0, 0, 0, b"\0" * 8, b"\0" * 8, 0, 0]
    assert both("encode_record", buf, 0, *args)[0] == both("encode_record", buf, 0, *args)[1] == ("raised", "MessageIllegal")
    args[3] = b"t"
    args[6] = b"p" * 40000
    assert both("encode_record", buf, 0, *args) == [("raised", "MessageIllegal")] * 2
    args[6] = b""
    args[10] = b"\0" * 5
    assert both("encode_record", buf, 0, *args) == [("raised", "MessageIllegal")] * 2
    args[10] = b"\0" * 8
    k, t = both("encode_record", bytearray(50), 0, *args)  # does not fit
    assert k[0] == t[0] == "raised"
    # a batch with one bad properties entry writes nothing on either side
    bk, bt = bytearray(4096), bytearray(4096)
    props = [b"", b"", b"p" * 40000]
    for mod, b in ((K, bk), (T, bt)):
        with pytest.raises(ValueError):
            mod.encode_batch(b, 0, 4096, 0, 0, 0, b"t", 0, [b"a", b"b", b"c"], props, 0, 0, 0, b"\0" * 8, b"\0" * 8)
    assert bk == bt == bytearray(4096)
