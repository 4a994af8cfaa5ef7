"""The SQL92 compiler (broker.server.filter.sql92) and the evaluator kernel (broker.kernels.sql92)
against its pure-Python twin (tests/twins/sql92_twin.py) on random expressions and properties.
Differential tests against RocketMQ's own broker: tests/test_sql92_filter.py."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels import sql92 as K
from broker.server.filter.sql92 import Sql92Error, compile_sql92
from tests.twins import sql92_twin as T


def _raw(props: dict) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()


def test_compile_refuses_what_rocketmq_refuses_and_caches():
    for bad in ("a > '5'", "a = NULL", "a BETWEEN 3 AND 1", "TRUE = 1", "1 IN ('a')", "a > 0.0", "NOT a > 5", "'x'",
                "a > 9223372036854775808", "(" * 70 + "a" + ")" * 70, "a = 1" + " = TRUE" * 300):
        with pytest.raises(Sql92Error):
            compile_sql92(bad)
    assert compile_sql92("a > 5") is compile_sql92("a > 5")
    assert compile_sql92("a = 1 LIKE #") == compile_sql92("a = 1")  # RocketMQ reads no further


def test_the_kernel_refuses_a_malformed_program():
    good = compile_sql92("a > 5 AND b IN ('x', 'y')")
    for bad in (b"", good[:-1], good + b"\x01", b"\x13\x00\x00", b"\xff", b"\x11" * 300 + b"\x02"):
        with pytest.raises(ValueError):
            K.matches(bad, b"a\x015")
        with pytest.raises(ValueError):
            T.matches(bad, b"a\x015")
    assert K.matches(good, b"a\x016\x02b\x01y") and T.matches(good, b"a\x016\x02b\x01y")


def test_the_kernel_reads_a_stored_records_properties():
    from tests.twins import codec_twin as C
    props = _raw({"a": "10", "TAGS": "t"})
    for v6 in (False, True):
        host = bytes(16) + b"\x00\x00\x2a\x9f" if v6 else b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
        rec = bytearray(C.record_length(3, 4, len(props), v6, v6))
        C.encode_record(rec, 0, 0, 0, 0, b"SqlT", 0, b"abc", props, 0, 0x30 if v6 else 0, 0, host, host, 0, 0)
        assert K.record_matches(compile_sql92("a > 5"), rec)
        assert not K.record_matches(compile_sql92("a < 5"), rec)
        assert not K.record_matches(compile_sql92("TRUE"), rec[:60])  # too short for its lengths: no match


VALUES = st.sampled_from(["1", "10", "-3", "2.5", " 7", "1e2", "0x10", "x", "abc", "true", "TRUE", "false", "NaN",
                          "-Infinity", "2147483648", "-2147483649", "9223372036854775808", "+5", "1.5f", "-0", "0.0",
                          "-0.0", ".5", "5.", "1e", "", "é", "a'b", "\x01", "007"])
NAMES = st.sampled_from(["a", "b", "c"])
LITERALS = st.sampled_from(["1", "-1", "0", "10", "2.5", "-2.5", "1e2", "2147483648", "-2147483649", "'x'", "'1'",
                            "'true'", "''", "TRUE", "FALSE", "NULL", "'a''b'", ".5", "- -3"])


@st.composite
def _operand(draw):
    return draw(st.one_of(NAMES, LITERALS, st.builds(lambda n: f"-{n}", NAMES)))


@st.composite
def _expr(draw, depth=0):
    kind = draw(st.integers(0, 9 if depth < 3 else 5))
    a, b = draw(_operand()), draw(_operand())
    if kind == 0:
        return f"{a} {draw(st.sampled_from(['=', '<>', '>', '>=', '<', '<=']))} {b}"
    if kind == 1:
        return f"{a} {draw(st.sampled_from(['', 'NOT ']))}BETWEEN {b} AND {draw(_operand())}"
    if kind == 2:
        values = ", ".join(draw(st.lists(LITERALS, min_size=1, max_size=3)))
        return f"{draw(NAMES)} {draw(st.sampled_from(['', 'NOT ']))}IN ({values})"
    if kind == 3:
        return f"{a} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == 4:
        op = draw(st.sampled_from(['CONTAINS', 'STARTSWITH', 'ENDSWITH', 'NOT CONTAINS', 'NOT ENDSWITH']))
        return f"{a} {op} {draw(st.sampled_from(['', 'a', '1', 'x', '.']))!r}"
    if kind == 5:
        return draw(NAMES)
    if kind == 6:
        return f"NOT ({draw(_expr(depth + 1))})"
    if kind == 7:
        return f"({draw(_expr(depth + 1))}) = {draw(st.sampled_from(['TRUE', 'FALSE', 'a', '1']))}"
    return f"{draw(_expr(depth + 1))} {draw(st.sampled_from(['AND', 'OR']))} {draw(_expr(depth + 1))}"


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_expr(), st.dictionaries(NAMES, VALUES, max_size=3), st.data())
def test_kernel_equals_twin_on_random_expressions(expr, props, data):
    try:
        prog = compile_sql92(expr)
    except Sql92Error:
        return
    raw = _raw(props)
    assert K.matches(prog, raw) == T.matches(prog, raw), (expr, props)
    dup = raw + _raw({data.draw(NAMES): data.draw(VALUES)})  # a later piece wins, as in Java's map
    assert K.matches(prog, dup) == T.matches(prog, dup), (expr, dup)
