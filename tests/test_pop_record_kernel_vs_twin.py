"""broker.kernels.pop_record.check_point_record (a pop's checkpoint record for the revive log)
against its twin (tests/twins/pop_record_twin.py) on the same fields, and what either writes
against what it stands for: PopCheckPoint.to_json (RocketMQ's JSON, tests/test_pop_check_point_json.py)
and the properties encode_properties writes of {"TAGS": "ck", "UNIQ_KEY": genCkUniqueId}."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from broker.kernels import pop_record as K
from broker.store.message import encode_properties
from broker.store.pop_check_point import PopCheckPoint
from tests.twins import pop_record_twin as T

I64 = st.integers(-(1 << 63), (1 << 63) - 1)
_NAMES = st.one_of(st.sampled_from(["T", "%RETRY%G_T", "broker-a", "", "a|b-c_9", "grü", "x\ty", 'q"', "b\\",
                                    "\u2028", "\x7f", "\ud800", "日本"]),
                   st.text(max_size=12))
_DIFFS = st.one_of(st.lists(st.integers(0, 1 << 20), max_size=40),
                   st.lists(st.one_of(I64, st.integers(-(1 << 70), 1 << 70), st.booleans()), max_size=6),
                   st.integers(0, 32).map(lambda n: list(range(n))))


def _expected(so, pt, it, n, q, t, c, bn, diffs):
    """What the record stands for: to_json's body and encode_properties' pair."""
    body = PopCheckPoint(so, pt, it, n, q, t, c, bn, diffs).to_json()
    uniq = "@".join(map(str, (t, q, so, c, pt, bn, "ck")))
    return body, encode_properties({"TAGS": "ck", "UNIQ_KEY": uniq})


@settings(max_examples=3000, deadline=None)
@given(I64, I64, I64, I64, I64, _NAMES, _NAMES, _NAMES, _DIFFS)
def test_kernel_equals_twin_and_both_write_the_record_to_json_writes(so, pt, it, n, q, t, c, bn, diffs):
    k = K.check_point_record(so, pt, it, n, q, t, c, bn, diffs)
    assert k == T.check_point_record(so, pt, it, n, q, t, c, bn, diffs)
    if k is None:
        return
    assert k == _expected(so, pt, it, n, q, t, c, bn, diffs)
    assert PopCheckPoint.from_json(k[0]) == PopCheckPoint(so, pt, it, n, q, t, c, bn, [int(d) for d in diffs])


def test_a_pops_record_is_taken_and_names_to_escape_are_declined():
    so, pt = 1_000_000, 1_700_000_000_000
    body, props = K.check_point_record(so, pt, 30_000, 3, 2, "T", "G", "broker-a", [0, 1, 5])
    assert body == (b'{"so":1000000,"pt":1700000000000,"it":30000,"bm":0,"n":3,"q":2,"t":"T","c":"G","ro":0,'
                    b'"d":[0,1,5],"bn":"broker-a"}')
    assert props == b"TAGS\x01ck\x02UNIQ_KEY\x01T@2@1000000@G@1700000000000@broker-a@ck"
    assert json.loads(body)["d"] == [0, 1, 5]
    assert K.check_point_record(so, pt, 1, 1, 0, "T", 'G"', "b", [0]) is None  # JSON would escape it
    assert K.check_point_record(so, pt, 1, 1, 0, "T", "G", "b\n", [0]) is None
    assert K.check_point_record(so, pt, 1, 1, 0, "T\ud800", "G", "b", [0]) is None  # not UTF-8 encodable
    assert K.check_point_record(so, pt, 1, 1, 0, "T", "G", "b", [True]) is None  # JSON's true, not 1
    assert K.check_point_record(so, pt, 1, 1, 0, "T", "G", "b", [1 << 63]) is None
    assert K.check_point_record(-(1 << 63), pt, 1, 1, 0, "T", "G", "b", [-(1 << 63)])[0].startswith(
        b'{"so":-9223372036854775808,')
    with pytest.raises(OverflowError):
        K.check_point_record(1 << 63, pt, 1, 1, 0, "T", "G", "b", [0])
    with pytest.raises(TypeError):
        K.check_point_record(so, pt, 1, 1, 0, None, "G", "b", [0])
