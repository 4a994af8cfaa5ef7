"""The index-building kernel equals its pure-Python twin byte for byte (hypothesis): random records
of several topics with UNIQ_KEY / KEYS (non-ASCII, empty tokens, repeated keys), every transaction
type and store timestamps that jump back, indexed into small files that fill up (a record's keys
cut across two files), then the whole scan dispatched again (a re-dispatch after recovery), which
must change nothing."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels.codec import MappedBuffer, Scanner, encode_record, java_string_hash
from broker.kernels.index_dispatch import IndexDispatcher, index_file_size
from tests.twins.index_dispatch_twin import IndexDispatcher as Twin
from tests.twins.index_dispatch_twin import dispatch_all, index_key_hash, java_hash, new_index_file

HOST = bytes(8)
key = st.one_of(st.text(alphabet=st.sampled_from(list("ab ") + ["é", "中", "😀"]), max_size=6),
                st.text(alphabet="ab ", min_size=60, max_size=140))  # more keys than the kernel queues at once
record = st.tuples(st.sampled_from([b"A", b"Topic-B", "Tö".encode()]), st.one_of(st.none(), key),
                   st.one_of(st.none(), key), st.sampled_from([0, 0, 0x4, 0x8, 0xC]), st.integers(-3000, 5000))


def _props(uniq, keys) -> bytes:
    parts = []
    if uniq is not None:
        parts.append(b"UNIQ_KEY\x01" + uniq.encode())
    if keys is not None:
        parts.append(b"KEYS\x01" + keys.encode())
    parts.append(b"TAGS\x01t")
    return b"\x02".join(parts)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=50), st.integers(1, 7), st.integers(2, 9))
def test_index_same_bytes_as_the_twin(records, slots, num):
    buf = bytearray(256 * 1024)
    pos, ts = 0, 1_700_000_000_000
    for i, (topic, uniq, keys, sys_flag, dt) in enumerate(records):
        ts += dt
        pos += encode_record(buf, pos, 500 + pos, i, ts, topic, 0, b"x", _props(uniq, keys), 0, sys_flag, 0,
                             HOST, HOST)
    scanner = Scanner(4096)
    mb = MappedBuffer(buf, False)
    count, _, _ = scanner.scan(mb, 0, pos, 500, False)
    assert count == len(records)
    entries = scanner.entries[:count]
    k, t = IndexDispatcher(), Twin()
    files_k = [new_index_file("kernel", slots, num, None)]
    files_t = [new_index_file("twin", slots, num, None)]
    k.register(MappedBuffer(files_k[0], True), slots, num)
    t.register(files_t[0], slots, num)
    for _ in range(2):  # the second pass is a re-dispatch of what is indexed already
        dispatch_all("kernel", k, lambda a, b: k.dispatch(scanner, mb, a, b), slots, num, files_k, count)
        dispatch_all("twin", t, lambda a, b: t.dispatch(entries, scanner.topics, bytes(buf), a, b), slots, num, files_t, count)
        assert [bytes(f) for f in files_k] == [bytes(f) for f in files_t]
        assert k.keys_indexed == t.keys_indexed
    indexable = sum(1 for _, u, ks, sf, _ in records if sf & 0xC not in (0x4, 0xC)
                    for _ in ([u] if u else []) + [x for x in (ks or "").split(" ") if x])
    assert k.keys_indexed == indexable


def test_index_hash_is_rocketmqs_for_java_known_values():
    # "TopicTest#KEY1".hashCode() etc. computed by the twin's UTF-16 fold and by the codec kernel
    for text in ("TopicTest#KEY1", "Tö#中😀", "A#" + "z" * 40):
        assert java_hash(text) == java_string_hash(text.encode())
    assert java_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE: abs() leaves it negative
    assert index_key_hash("polygenelubricants") == 0


def test_register_refuses_a_buffer_too_small_or_read_only():
    k = IndexDispatcher()
    with pytest.raises(ValueError):
        k.register(MappedBuffer(np.zeros(index_file_size(4, 4) - 1, np.uint8), True), 4, 4)
    with pytest.raises(ValueError):
        k.register(MappedBuffer(bytes(index_file_size(4, 4)), False), 4, 4)
    with pytest.raises(ValueError):
        k.register(MappedBuffer(np.zeros(100, np.uint8), True), 1, 1)
    with pytest.raises(ValueError):
        k.dispatch(Scanner(1), MappedBuffer(b"", False), 0, 0)  # nothing registered
