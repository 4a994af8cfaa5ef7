"""The consume-queue dispatch kernel equals its pure-Python twin byte for byte (hypothesis): random
records of several topics and queues, encoded and scanned as the reput does, dispatched into files
registered at random boundaries, the pass resumed each time it stops for a missing file."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels.codec import MappedBuffer, Scanner, encode_record
from broker.kernels.cq_dispatch import CqDispatcher
from tests.twins.cq_dispatch_twin import CQ_UNIT
from tests.twins.cq_dispatch_twin import CqDispatcher as Twin

HOST = bytes(8)
record = st.tuples(st.sampled_from([b"A", b"Topic-B", b"%RETRY%g"]), st.integers(0, 3), st.binary(max_size=40),
                   st.sampled_from([b"", b"TAGS\x01x", b"TAGS\x01yy\x02KEYS\x01k"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=60), st.integers(1, 7), st.integers(0, 5))
def test_dispatch_same_bytes_as_the_twin(records, per_file, skip):
    buf = bytearray(64 * 1024)
    pos, next_qo = 0, {}
    for i, (topic, qid, body, props) in enumerate(records):
        qo = next_qo.get((topic, qid), skip)  # queues that start past 0, as after a deletion
        next_qo[(topic, qid)] = qo + 1
        pos += encode_record(buf, pos, 1000 + pos, qo, 1_700_000_000_000 + i, topic, qid, body, props, 0, 0, 0,
                             HOST, HOST)
    scanner = Scanner(4096)
    count, nxt, status = scanner.scan(MappedBuffer(buf, False), 0, pos, 1000, False)
    assert count == len(records)
    entries = scanner.entries[:count]
    k, t = CqDispatcher(4), Twin()
    files_k: dict[tuple[int, int], np.ndarray] = {}
    files_t: dict[tuple[int, int], bytearray] = {}
    for name, d, files, dispatch in (("kernel", k, files_k, lambda a, b: k.dispatch(scanner, a, b)),
                                     ("twin", t, files_t, lambda a, b: t.dispatch(entries, a, b))):
        i = 0
        while True:
            i = dispatch(i, count)
            if i >= count:
                break
            first = d.missing_offset - d.missing_offset % per_file
            fkey = (d.missing_key, first)
            if fkey not in files:
                files[fkey] = np.zeros(per_file * CQ_UNIT, np.uint8) if name == "kernel" else bytearray(per_file * CQ_UNIT)
            d.register(d.missing_key, MappedBuffer(files[fkey], True) if name == "kernel" else files[fkey], first, per_file)
    assert files_k.keys() == files_t.keys()
    for fkey in files_k:
        assert bytes(files_k[fkey]) == bytes(files_t[fkey]), fkey
    assert k.last_store_ts == t.last_store_ts == 1_700_000_000_000 + len(records) - 1


def test_registration_outside_the_buffer_and_entries_outside_a_file_are_refused_or_skipped():
    k = CqDispatcher()
    small = np.zeros(40, np.uint8)
    import pytest
    with pytest.raises(ValueError):
        k.register(1, MappedBuffer(small, True), 0, 3)  # 3 entries need 60 bytes
    with pytest.raises(ValueError):
        k.register(-1, MappedBuffer(small, True), 0, 2)
    assert k.register(1, MappedBuffer(small, True), 0, 2) == -1
