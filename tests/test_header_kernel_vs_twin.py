"""The header kernel (broker.kernels.header) against its twin (tests/twins/header_twin.py) and against
Python's json module as a third reading: random valid headers decode to the dict they were made
from, positions and kinds agree, damaged headers fail the same way, and encode/decode round-trip."""
from __future__ import annotations

import json
import struct

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from broker.kernels import header as K
from tests.twins import header_twin as T

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1

# text a header may carry: quotes, backslashes, every control character, DEL, U+2028, non-ASCII,
# astral code points (surrogate pairs once escaped); never a lone surrogate (not encodable)
SPECIALS = '"\\/\x00\x01\x08\t\n\x0b\x0c\r\x1f\x7f\u2028é中😀𝄞\U0010ffff'
text = st.text(st.one_of(st.sampled_from(SPECIALS), st.characters(exclude_categories=("Cs",))), max_size=20)
keys = st.one_of(st.sampled_from(["topic", "queueId", "a", "b", "code", "extFields", "properties"]), text)
i32 = st.one_of(st.sampled_from([0, 1, -1, I32_MIN, I32_MAX]), st.integers(I32_MIN, I32_MAX))
scalars = st.one_of(
    text, st.booleans(), st.none(),
    st.sampled_from([0, -1, I64_MIN, I64_MAX, I64_MAX + 1, I64_MIN - 1, 10 ** 30, -10 ** 30]),
    st.integers(I64_MIN, I64_MAX),
    st.floats(allow_nan=False, allow_infinity=False),
)
nested = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=4)), max_leaves=12)
ext_values = st.one_of(scalars, st.lists(nested, max_size=3), st.dictionaries(keys, nested, max_size=3))
LANGS = st.sampled_from(list(T.LANGUAGE_NAMES) + ["", "UNKNOWN", "java", "NODE"])


@st.composite
def json_headers(draw):
    """(header dict as sent, expected decode tuple)."""
    h = {}
    order = draw(st.permutations(["code", "language", "version", "opaque", "flag", "remark", "extFields",
                                  "serializeTypeCurrentRPC", "other"]))
    expected = {"code": 0, "language": "", "version": 0, "opaque": 0, "flag": 0, "remark": None, "ext": {}}
    for key in order:
        if key != "code" and draw(st.booleans()):
            continue  # absent
        if key in ("code", "version", "opaque", "flag"):
            n = draw(i32)
            h[key] = str(n) if draw(st.integers(0, 4)) == 0 else n  # msgspec's strict=False took "12"
            expected[key] = n
        elif key == "language":
            v = draw(st.one_of(LANGS, text, st.none()))
            h[key] = v
            expected[key] = v or ""
        elif key == "remark":
            v = draw(st.one_of(text, st.none()))
            h[key] = v
            expected[key] = v
        elif key == "extFields":
            v = draw(st.one_of(st.none(), st.dictionaries(keys, ext_values, max_size=8)))
            h[key] = v
            expected["ext"] = v or {}
        elif key == "serializeTypeCurrentRPC":
            h[key] = draw(st.sampled_from(["JSON", "ROCKETMQ"]))
        else:
            h[draw(text.filter(lambda k: k not in h and k not in expected and k != "extFields"))] = draw(nested)
    return h, expected


def dumps(h: dict, draw) -> bytes:
    ascii_only = draw(st.booleans())
    style = draw(st.sampled_from(["compact", "default", "indent", "tabs"]))
    if style == "compact":
        s = json.dumps(h, ensure_ascii=ascii_only, separators=(",", ":"))
    elif style == "default":
        s = json.dumps(h, ensure_ascii=ascii_only)
    elif style == "indent":
        s = json.dumps(h, ensure_ascii=ascii_only, indent=draw(st.integers(0, 3)))
    else:
        s = json.dumps(h, ensure_ascii=ascii_only, indent="\t", separators=(" ,\r\n", " :\t"))
    lead, trail = draw(st.sampled_from(["", " ", "\n", "\r\n\t "])), draw(st.sampled_from(["", "\n", " \t"]))
    return (lead + s + trail).encode("utf-8")


def check_decoded(got: tuple, expected: dict, sent: dict) -> None:
    code, language, version, opaque, flag, remark, ext = got
    assert (code, language, version, opaque, flag, remark) == (
        expected["code"], expected["language"], expected["version"], expected["opaque"], expected["flag"],
        expected["remark"])
    assert ext.keys() == expected["ext"].keys()
    for k, v in expected["ext"].items():
        if isinstance(v, (list, dict)):
            assert isinstance(ext[k], str) and json.loads(ext[k]) == v  # kept as its JSON text
        else:
            assert ext[k] == v and type(ext[k]) is type(v), (k, ext[k], v)


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except ValueError as e:  # HeaderError on both sides: compared by class name
        return ("raised", type(e).__name__)


def same(fn: str, *args):
    k, t = outcome(getattr(K, fn), *args), outcome(getattr(T, fn), *args)
    assert k == t, f"{fn}{args!r}:\n kernel {k!r}\n twin   {t!r}"
    return k


# ------------------------------------------------------------------------------ valid JSON headers

@SETTINGS
@given(json_headers(), st.data())
def test_valid_json_headers_decode_to_what_was_sent(case, data):
    sent, expected = case
    raw = dumps(sent, data.draw)
    pad = data.draw(st.binary(max_size=5))
    buf = bytearray(pad + raw + b"\xff")  # read through a window of a larger buffer
    got = K.decode_header(0, buf, len(pad), len(raw))
    check_decoded(got, expected, sent)
    assert T.decode_header(0, buf, len(pad), len(raw)) == got
    cap = data.draw(st.sampled_from([0, 1, 3, 64]))
    fields = same("parse_fields", 0, bytes(buf), len(pad), len(raw), cap)[1]
    assert fields[8] == len(expected["ext"]) and fields[7] == min(cap, fields[8])
    assert fields[0] == expected["code"] and fields[4] == (
        T.LANGUAGE_NAMES.index(expected["language"]) if expected["language"] in T.LANGUAGE_NAMES else -1)


@SETTINGS
@given(json_headers(), st.data())
def test_positions_and_kinds_point_at_the_bytes(case, data):
    sent, expected = case
    raw = dumps(sent, data.draw)
    fields = K.parse_fields(0, raw, 0, len(raw))
    assert fields == T.parse_fields(0, raw, 0, len(raw))
    for kp, kl, vp, vl, ival, kesc, kind in fields[9]:
        key = raw[kp:kl + kp]
        assert raw[kp - 1:kp] == b'"' and raw[kp + kl:kp + kl + 1] == b'"'
        assert bool(kesc) == (b"\\" in key)
        token = raw[vp:vp + vl]
        if kind in (K.V_STRING, K.V_ESCAPED):
            assert raw[vp - 1:vp] == b'"' and raw[vp + vl:vp + vl + 1] == b'"'
            assert (kind == K.V_ESCAPED) == (b"\\" in token)
        elif kind == K.V_INT:
            assert int(token) == ival
        elif kind == K.V_NUMBER:
            assert json.loads(token) is not None
        elif kind == K.V_RAW:
            json.loads(token)
        else:
            assert token == {K.V_TRUE: b"true", K.V_FALSE: b"false", K.V_NULL: b"null"}[kind]


# -------------------------------------------------------------------------- damaged and random input

MUTATIONS = ["flip", "delete", "insert", "truncate", "duplicate", "swap"]
INTERESTING = b'"\\{}[],:0-.eE+ \x00\x1f\x7f\x80\xbf\xc0\xc2\xe0\xed\xf0\xf4\xf5\xffu'


def mutate(raw: bytes, draw) -> bytes:
    b = bytearray(raw)
    for _ in range(draw(st.integers(1, 3))):
        if not b:
            break
        i = draw(st.integers(0, len(b) - 1))
        m = draw(st.sampled_from(MUTATIONS))
        if m == "flip":
            b[i] ^= 1 << draw(st.integers(0, 7))
        elif m == "delete":
            del b[i]
        elif m == "insert":
            b.insert(i, draw(st.sampled_from(INTERESTING)))
        elif m == "truncate":
            del b[i:]
        elif m == "duplicate":
            j = draw(st.integers(i, len(b)))
            b[i:i] = b[i:j]
        else:
            b[i] = draw(st.sampled_from(INTERESTING))
    return bytes(b)


@SETTINGS
@given(json_headers(), st.data())
def test_damaged_json_headers_fail_alike(case, data):
    raw = mutate(dumps(case[0], data.draw), data.draw)
    same("parse_fields", 0, raw, 0, len(raw), 64)
    same("decode_header", 0, raw, 0, len(raw))


@SETTINGS
@given(st.binary(max_size=120), st.sampled_from([0, 1]))
@example(b'{"code":1}', 0)
@example(b"\x00" * 21, 1)
def test_random_bytes_fail_alike(raw, stype):
    same("parse_fields", stype, raw, 0, len(raw), 4)
    same("decode_header", stype, raw, 0, len(raw))


# --------------------------------------------------------------------------------- ROCKETMQ binary

i16 = st.integers(-32768, 32767)
str_ext = st.dictionaries(keys.filter(lambda k: len(k.encode()) <= 32767), st.one_of(text, st.just("")), max_size=8)


@SETTINGS
@given(i16, st.one_of(LANGS, text), i16, i32, i32, st.one_of(st.none(), text), str_ext, st.data())
def test_rocketmq_round_trip_and_damage(code, lang, version, opaque, flag, remark, ext, data):
    raw = K.encode_header(1, code, lang, version, opaque, flag, remark, ext)
    assert raw == T.encode_header(1, code, lang, version, opaque, flag, remark, ext)
    # RocketMQSerializable's own layout, written independently here with struct
    body = b"".join(struct.pack(">h", len(k.encode())) + k.encode() + struct.pack(">i", len(v.encode())) + v.encode()
                    for k, v in ext.items())
    r = (remark or "").encode()
    ordinal = T.LANGUAGE_NAMES.index(lang) if lang in T.LANGUAGE_NAMES else 7
    assert raw == struct.pack(">hbhiii", code, ordinal, version, opaque, flag, len(r)) + r + \
        struct.pack(">i", len(body)) + body
    want = (code, lang if lang in T.LANGUAGE_NAMES else "OTHER", version, opaque, flag, remark or None,
            {k: v or None for k, v in ext.items()})  # length 0 is Java's null
    assert K.decode_header(1, raw, 0, len(raw)) == T.decode_header(1, raw, 0, len(raw)) == want
    assert same("parse_fields", 1, raw, 0, len(raw), 64)[0] == "ok"
    bad = mutate(raw, data.draw)
    same("parse_fields", 1, bad, 0, len(bad), 64)
    same("decode_header", 1, bad, 0, len(bad))


def test_rocketmq_refusals():
    good = K.encode_header(1, 10, "JAVA", 395, 7, 0, "r", {"k": "v"})
    assert K.decode_header(1, good, 0, len(good)) == (10, "JAVA", 395, 7, 0, "r", {"k": "v"})
    cases = {
        "too short": good[:16],
        "negative remark length": good[:13] + struct.pack(">i", -1) + good[17:],
        "remark past the end": good[:13] + struct.pack(">i", 999) + good[17:],
        "no ext length": good[:19],
        "negative ext length": good[:18] + struct.pack(">i", -2) + good[22:],
        "ext length past the end": good[:18] + struct.pack(">i", 99) + good[22:],
        "trailing bytes": good + b"\x00",
        "negative key length": good[:22] + struct.pack(">h", -1) + good[24:],
        "value past the block": good[:25] + struct.pack(">i", 2) + good[29:],
        "bad UTF-8 in a value": good[:-1] + b"\xff",
        "overlong in the remark": good[:17] + b"\xc0" + good[18:],
        "pair cut short": good[:18] + struct.pack(">i", 3) + good[22:25],
    }
    for why, raw in cases.items():
        for mod in (K, T):
            with pytest.raises(mod.HeaderError):
                mod.decode_header(1, raw, 0, len(raw))
                pytest.fail(why)
    # an unknown language byte, a null value and an empty key are read, as Java reads them
    raw = struct.pack(">hbhiii", -1, 99, -2, 3, 4, 0) + struct.pack(">i", 13) + b"\x00\x00" + struct.pack(">i", 0) \
        + b"\x00\x01k" + struct.pack(">i", 0)
    assert K.decode_header(1, raw, 0, len(raw)) == T.decode_header(1, raw, 0, len(raw)) == \
        (-1, "UNKNOWN", -2, 3, 4, None, {"": None, "k": None})
    with pytest.raises(OverflowError):
        K.encode_header(1, 40000, "JAVA", 0, 0, 0, None, None)
    with pytest.raises(ValueError):
        K.encode_header(1, 1, "JAVA", 0, 0, 0, None, {"k" * 40000: "v"})


# ---------------------------------------------------------------------------------------- encoding

@SETTINGS
@given(i32, st.one_of(LANGS, text), i32, i32, i32, st.one_of(st.none(), text), st.dictionaries(keys, text, max_size=8))
def test_json_encode_is_msgspecs_and_round_trips(code, lang, version, opaque, flag, remark, ext):
    raw = K.encode_header(0, code, lang, version, opaque, flag, remark, ext)
    assert raw == T.encode_header(0, code, lang, version, opaque, flag, remark, ext)
    d = {"code": code, "language": lang, "version": version, "opaque": opaque, "flag": flag}
    if remark is not None:
        d["remark"] = remark
    if ext:
        d["extFields"] = ext
    d["serializeTypeCurrentRPC"] = "JSON"
    assert json.loads(raw) == d
    assert raw == msgspec.json.encode(d)  # what command.py sent before: nothing changes for clients
    want = (code, lang, version, opaque, flag, remark, ext)
    assert K.decode_header(0, raw, 0, len(raw)) == T.decode_header(0, raw, 0, len(raw)) == want


def test_encode_refuses_what_it_cannot_write():
    for mod in (K, T):
        with pytest.raises(TypeError):
            mod.encode_header(0, 1, "JAVA", 0, 0, 0, None, {"k": 1})
        with pytest.raises(TypeError):
            mod.encode_header(0, 1, "JAVA", 0, 0, 0, 5, None)
        with pytest.raises(OverflowError):
            mod.encode_header(0, 1 << 31, "JAVA", 0, 0, 0, None, None)
        with pytest.raises(UnicodeEncodeError):
            mod.encode_header(0, 1, "JAVA", 0, 0, 0, "\ud800", None)
        with pytest.raises(ValueError):
            mod.encode_header(2, 1, "JAVA", 0, 0, 0, None, None)


# ------------------------------------------------------------------------------ the spec's corners

ACCEPTED = [
    (b'{"code":"-0"}', (0, "", 0, 0, 0, None, {})),
    (b' {"code" : 1 , "code":2}\r\n', (2, "", 0, 0, 0, None, {})),
    (b'{"\\u0063ode":3,"l\\u0061nguage":"J\\u0041VA"}', (3, "JAVA", 0, 0, 0, None, {})),
    (b'{"code":1,"language":null,"remark":null,"extFields":null}', (1, "", 0, 0, 0, None, {})),
    (b'{"code":1,"extFields":{"a":"1"},"extFields":{"b":2}}', (1, "", 0, 0, 0, None, {"b": 2})),
    (b'{"code":1,"extFields":{"a":"1"},"extFields":null}', (1, "", 0, 0, 0, None, {})),
    (b'{"code":1,"extFields":{"a":"1","a":"2"}}', (1, "", 0, 0, 0, None, {"a": "2"})),
    (b'{"code":1,"remark":"","extFields":{}}', (1, "", 0, 0, 0, "", {})),
    (b'{"code":-2147483648,"flag":2147483647,"opaque":"-2147483648"}', (-2147483648, "", 0, -2147483648, 2147483647, None, {})),
    (b'{"code":1,"extFields":{"e":-0,"f":1E+2,"g":0.5e-3,"h":9223372036854775808,"i":"\\ud83d\\ude00\\/"}}',
     (1, "", 0, 0, 0, None, {"e": 0, "f": 100.0, "g": 0.0005, "h": 9223372036854775808, "i": "😀/"})),
    (b'{"code":1,"x":{"y":[1,2,{"z":[]}]},"extFields":{"r":[ 1 ,{} ]}}', (1, "", 0, 0, 0, None, {"r": "[ 1 ,{} ]"})),
    (b'{"code":1,"extFields":{"a":' + b"[" * 30 + b"]" * 30 + b"}}",
     (1, "", 0, 0, 0, None, {"a": "[" * 30 + "]" * 30})),
    (b'{"code":1,"x":' + b"[" * 31 + b"]" * 31 + b"}", (1, "", 0, 0, 0, None, {})),
    ('{"code":1,"remark":"\U0010ffff\ud7ff\ue000\x7f"}'.encode(), (1, "", 0, 0, 0, "\U0010ffff\ud7ff\ue000\x7f", {})),
]
REFUSED = [
    b"", b" ", b"[]", b'"code"', b"{", b'{"code":1', b'{"code":1,}', b'{"code":1}x', b'{"code":1}{}', b"{}",
    b'{"version":1}', b'{"code":1.0}', b'{"code":1e2}', b'{"code":"012"}', b'{"code":"+1"}', b'{"code":" 1"}',
    b'{"code":""}', b'{"code":"1.5"}', b'{"code":"\\u0031"}', b'{"code":null}', b'{"code":true}', b'{"code":[1]}',
    b'{"code":2147483648}', b'{"code":"-2147483649"}', b'{"code":01}', b'{"code":+1}', b'{"code":-}',
    b'{"code":1,"language":1}', b'{"code":1,"remark":false}', b'{"code":1,"extFields":[]}',
    b'{"code":1,"extFields":"a"}', b'{"code":1,"extFields":{"a":NaN}}', b'{"code":1,"extFields":{"a":Infinity}}',
    b'{"code":1,"extFields":{"a":1.}}', b'{"code":1,"extFields":{"a":.5}}', b'{"code":1,"extFields":{"a":1e}}',
    b'{"code":1,"extFields":{"a":tru}}', b'{"code":1,"extFields":{"a":"\x01"}}', b'{"code":1,"extFields":{"a":"\\x"}}',
    b'{"code":1,"extFields":{"a":"\\ud800"}}', b'{"code":1,"extFields":{"a":"\\udc00"}}',
    b'{"code":1,"extFields":{"a":"\\ud800\\u0041"}}', b'{"code":1,"extFields":{"a":"\\u12"}}',
    b'{"code":1,"extFields":{"a":"\xc0\xaf"}}', b'{"code":1,"extFields":{"a":"\xe0\x80\xaf"}}',
    b'{"code":1,"extFields":{"a":"\xed\xa0\x80"}}', b'{"code":1,"extFields":{"a":"\xf4\x90\x80\x80"}}',
    b'{"code":1,"extFields":{"a":"\xf5\x80\x80\x80"}}', b'{"code":1,"extFields":{"a":"\x80"}}',
    b'{"code":1,"extFields":{"a":"\xe4\xb8"}}', b'{"code":1,"extFields":{"\xff":"a"}}',
    b'\xef\xbb\xbf{"code":1}', b'{"code":1,"extFields":{"a":[1,]}}', b'{"code":1,"extFields":{"a":{"b"}}}',
    b'{"code":1,"extFields":{"a":{"b":1,}}}', b'{"code":1,"extFields":{"a":[1 2]}}',
    b'{"code":1,"extFields":{"a":' + b"[" * 31 + b"]" * 31 + b"}}",
    b'{"code":1,"x":' + b"[" * 32 + b"]" * 32 + b"}",
    b'{"code":1,"x":' + b"[" * 100000 + b"}",
    b'{"code":1,"extFields":{"a":1' + b"0" * 5000 + b"}}",  # parses; too long to become an int
]


@pytest.mark.parametrize("raw,want", ACCEPTED)
def test_accepted(raw, want):
    assert K.decode_header(0, raw, 0, len(raw)) == T.decode_header(0, raw, 0, len(raw)) == want


@pytest.mark.parametrize("raw", REFUSED)
def test_refused(raw):
    for mod in (K, T):
        with pytest.raises(mod.HeaderError) as e:
            mod.decode_header(0, raw, 0, len(raw))
        assert 0 <= e.value.offset <= len(raw)
    same("parse_fields", 0, raw, 0, len(raw), 64)


def test_errors_name_the_key_and_offset():
    raw = b'{"code":1, "opaque":"x"}'
    with pytest.raises(K.HeaderError) as e:
        K.decode_header(0, raw, 0, len(raw))
    assert e.value.offset == raw.index(b'"x"') and "opaque" in e.value.reason
    assert isinstance(e.value, ValueError)


def test_bad_ranges_and_types():
    for mod in (K, T):
        with pytest.raises(ValueError):
            mod.decode_header(0, b'{"code":1}', 5, 10)
        with pytest.raises(ValueError):
            mod.decode_header(0, b'{"code":1}', -1, 3)
        with pytest.raises(ValueError):
            mod.decode_header(3, b'{"code":1}', 0, 10)
    # any bytes-like object: bytearray, memoryview, a numpy array's buffer
    raw = b'xx{"code":7}'
    assert K.decode_header(0, memoryview(bytearray(raw)), 2, 10)[0] == 7


def test_many_ext_fields_beyond_the_stack_array():
    ext = {f"k{i}": str(i) for i in range(500)}
    raw = K.encode_header(0, 1, "JAVA", 0, 0, 0, None, ext)
    assert K.decode_header(0, raw, 0, len(raw))[6] == ext
    f = K.parse_fields(0, raw, 0, len(raw), 10)
    assert f[7:9] == (10, 500) and f == T.parse_fields(0, raw, 0, len(raw), 10)
    raw = K.encode_header(1, 1, "JAVA", 0, 0, 0, None, ext)
    assert K.decode_header(1, raw, 0, len(raw))[6] == ext
    assert K.parse_count(1, raw, 0, len(raw), 3) == 500
