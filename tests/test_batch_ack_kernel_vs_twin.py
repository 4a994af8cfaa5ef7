"""broker.kernels.batch_ack (the batch ack's bookkeeping on one in-flight checkpoint, and its
BatchAckMsg record) against its twin (tests/twins/batch_ack_twin.py), which is the Python path it
stands for: PopCheckPoint.index_of per offset, the acks not made already, BatchAckMsg.to_json and
ReviveLog.append's TAGS/UNIQ_KEY properties."""
from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from broker.kernels import batch_ack as K
from broker.store.message import encode_properties
from tests.twins import batch_ack_twin as T

I64 = 1 << 63
_NAMES = st.one_of(st.sampled_from(["G", "T", "broker-a", "%RETRY%G_T", "brökér", "", "a\"b", "a\\b", "x\ty",
                                    "a\x7fb", "\u2028", "\ud800"]),
                   st.text(max_size=12),
                   # long names: the record no longer fits the kernel's stack buffer (4 KiB), it writes on the heap
                   st.integers(1000, 3000).map(lambda n: "n" * n))
_BIG = st.sampled_from([0, 1, I64 - 1, -1, -I64, I64, 1 << 64, -(1 << 64)])


@st.composite
def checkpoints(draw):
    """(offsets, so, diffs, num, bitmap, topic, queue id, group, pop time, broker name): mostly a
    pop's (consecutive or rising diffs), some odd (repeated or unordered diffs, old-format, big
    numbers), the offsets mostly popped ones, in order or not, some not popped or repeated."""
    so = draw(st.one_of(st.integers(0, 10 ** 6), st.integers(0, 1 << 62), _BIG))
    kind = draw(st.sampled_from(["range", "rising", "any", "old", "big"]))
    n = draw(st.integers(0, 70 if kind == "big" else 33))
    if kind == "range":
        diffs = list(range(n))
    elif kind == "rising":
        diffs = sorted(draw(st.sets(st.integers(0, 200), min_size=n, max_size=n)))
    elif kind == "any":
        diffs = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    elif kind == "old":
        diffs = []
    else:
        diffs = draw(st.lists(st.one_of(st.integers(0, 40), _BIG), min_size=n, max_size=n))
    num = draw(st.integers(0, 70)) if kind == "old" else n
    popped = [so + d for d in diffs] if diffs else [so + i for i in range(num)]
    pool = popped + [so - 1, so + 500, so + 10 ** 9] if popped else [so, so + 1]
    offsets = draw(st.lists(st.one_of(st.sampled_from(pool), st.integers(-5, 10 ** 6), _BIG), max_size=40))
    if draw(st.booleans()):
        offsets = sorted(set(o for o in offsets if -I64 <= o < I64))
    m = len(diffs) if diffs else num
    bitmap = draw(st.one_of(st.just(0), st.integers(0, (1 << max(m, 0)) - 1), _BIG))
    return (offsets, so, diffs, num, bitmap, draw(_NAMES), draw(st.integers(0, 1 << 31)), draw(_NAMES),
            draw(st.one_of(st.integers(0, 1 << 42), _BIG)), draw(_NAMES))


def _call(f, args):
    try:
        return f(*args)
    except (OverflowError, TypeError) as e:  # an argument outside a C parameter's type
        return type(e)


@settings(max_examples=2000, deadline=None)
@given(checkpoints())
def test_kernel_and_twin_agree(args):
    k = _call(K.ack_record, args)
    t = _call(T.ack_record, args)
    if k is OverflowError:  # so, num, queue id or pop time outside int64: the twin may still say something
        return
    assert k == t


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.integers(-3, 50), _BIG), max_size=40))
def test_ascending_is_sorted_set(offsets):
    got = K.ascending(list(offsets))
    assert got == T.ascending(offsets)
    if all(a < b for a, b in zip(offsets, offsets[1:])):
        assert got == offsets


def test_a_batch_of_a_pop_is_rocketmqs_record():
    """32 consecutive offsets of one pop, then the rest: the body and properties as RocketMQ's
    BatchAckMsg and genBatchAckUniqueId, the bitmap and the checkpoint done at the last."""
    so, pt = 1000, 1_700_000_000_000
    got = K.ack_record([so + 1, so + 5, so + 2], so, list(range(8)), 8, 0b1, "T", 2, "G", pt, "broker-a")
    bitmap, full, body, props, single, missing = got
    assert (bitmap, full, single, missing) == (0b100111, False, -1, [])
    assert body == b'{"aol":[1001,1002,1005],"so":1000,"c":"G","t":"T","q":2,"pt":1700000000000,"bn":"broker-a"}'
    assert json.loads(body)["aol"] == [1001, 1002, 1005]
    assert props == encode_properties({"TAGS": "bAck", "UNIQ_KEY": f"T@2@[1001, 1002, 1005]@G@{pt}@broker-a@bAck"})
    rest = K.ack_record([so + i for i in range(8)] + [so + 9], so, list(range(8)), 8, bitmap, "T", 2, "G", pt,
                        "broker-a")
    assert rest[:2] == (0xFF, True) and rest[5] == [so + 9]
    one = K.ack_record([so + 3, so + 3], so, [], 8, 0, "T", 2, "G", pt, "b")
    assert one == (0, False, None, None, 3, [])  # one ack now: PopReviveService.ack writes it as an AckMsg


def test_declines_what_the_python_path_writes_otherwise():
    assert K.ack_record([1, 2], 0, list(range(65)), 65, 0, "T", 0, "G", 1, "b") is None  # > 64 messages
    assert K.ack_record([1, 2], 0, [], 4, 1 << 64, "T", 0, "G", 1, "b") is None
    assert K.ack_record([1, 2], 0, [], 4, 0, 'T"', 0, "G", 1, "b") is None  # JSON would escape it
    assert K.ack_record([1, 2], 0, [], 4, 0, "T", 0, "G\n", 1, "b") is None
    assert K.ack_record([1, 2], 0, [], 4, 0, "T", 0, "G", 1, "\ud800") is None
    assert K.ack_record([1, 1 << 63], 0, [], 4, 0, "T", 0, "G", 1, "b") is None


def test_a_record_past_the_stack_buffer_is_the_twins():
    """Names long enough that the body and properties (about 2 x 2.5 KB here) are written in a
    heap block, not the kernel's 4 KiB stack buffer; and just at the bound either side."""
    so, pt = 10 ** 9, 1_700_000_000_000
    for n in [1, 500, 560, 580, 600, 1200, 2500]:
        topic, group, broker = "t" * n, "g" * (n // 2), "b" * (n // 3 + 1)
        args = (list(range(so, so + 32)), so, list(range(32)), 32, 0, topic, 7, group, pt, broker)
        got = K.ack_record(*args)
        assert got == T.ack_record(*args)
        assert got[2].endswith(b'"bn":"' + broker.encode() + b'"}') and got[3].endswith(b"@bAck")
