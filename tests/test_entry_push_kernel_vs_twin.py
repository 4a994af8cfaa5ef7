"""The entry_push kernel equals its twin (hypothesis): pushes of random entries (bodies with and
without a CRC, terms, gaps between positions as a blank leaves them), then a byte flipped, the body
cut or the request's index, pos, count and term moved; check_entries gives the same terms or the
same error message. append_entries into random data and index files (sizes, bases, where the log
ends, the term it ends with) leaves the same bytes in both and returns the same figures, the
kernel's data file a bytearray or a real file it writes with pwrite (given its descriptor)."""
from __future__ import annotations

import contextlib
import mmap
import os
import struct
import tempfile
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels import entry_push as K
from tests.twins import entry_push_twin as T

SETTINGS = settings(database=None, deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
HEADER = struct.Struct(">iiqqqiiii")

entry_spec = st.tuples(st.integers(0, 300), st.integers(0, 2), st.booleans(), st.sampled_from([0, 0, 0, 8, 100]))


def build(first_index: int, first_pos: int, first_term: int, specs) -> tuple[bytes, int]:
    """A push body: entries back to back, each (body length, term step, with a CRC, gap before the
    next one's pos). Returns (body, the last entry's term)."""
    out = bytearray()
    pos, term = first_pos, first_term
    for i, (n, step, with_crc, gap) in enumerate(specs):
        term += step if i else 0
        body = os.urandom(n)
        crc = zlib.crc32(body) & 0x7FFFFFFF if with_crc else 0
        out += HEADER.pack(1, 48 + n, first_index + i, term, pos, 0, 0, crc, n) + body
        pos += 48 + n + gap
    return bytes(out), term


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except (K.PushBodyError, T.PushBodyError) as e:
        return ("PushBodyError", str(e))
    except ValueError:
        return ("ValueError",)


@SETTINGS
@given(st.integers(0, 1 << 40), st.integers(0, 1 << 40), st.integers(0, 50), st.lists(entry_spec, min_size=0, max_size=8),
       st.sampled_from(["none", "flip", "cut", "index", "pos", "count", "term"]), st.data())
def test_check_entries_same_as_the_twin(index, pos, term, specs, change, data):
    body, last_term = build(index, pos, term, specs)
    count, push_term = len(specs), last_term + data.draw(st.integers(0, 2))
    body = bytearray(body)
    if change == "flip" and body:
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] ^= 1 << data.draw(st.integers(0, 7))
    elif change == "cut" and body:
        del body[data.draw(st.integers(0, len(body) - 1)):]
    elif change == "index":
        index += data.draw(st.sampled_from([-1, 1]))
    elif change == "pos":
        pos += data.draw(st.sampled_from([-8, 8]))
    elif change == "count":
        count += data.draw(st.sampled_from([-1, 1]))
    elif change == "term":
        push_term = last_term - 1
    got = outcome(K.check_entries, bytes(body), index, pos, count, push_term)
    assert got == outcome(T.check_entries, bytes(body), index, pos, count, push_term)
    if change == "none" and specs:
        assert got == ("ok", (term, last_term))


@SETTINGS
@given(st.lists(entry_spec, min_size=1, max_size=10), st.integers(0, 3), st.integers(0, 2),
       st.integers(200, 3000), st.integers(0, 5), st.integers(0, 6), st.data())
def test_append_entries_same_as_the_twin(specs, seg_no, term, seg_size, iseg_units, skip, data):
    seg_base = seg_no * seg_size
    wrote = seg_base + data.draw(st.integers(0, seg_size // 2))
    index = data.draw(st.integers(0, 40))
    body, _ = build(index, wrote, term, specs)
    skip = min(skip, len(specs))  # start the copy past the first entries: `at` inside the body
    at = sum(48 + s[0] for s in specs[:skip])
    index += skip
    wrote += sum(48 + s[0] + s[3] for s in specs[:skip])
    wrote += data.draw(st.sampled_from([0, 0, 0, 8]))  # the log's end elsewhere than the pushed pos
    min_term = term + data.draw(st.sampled_from([0, 0, 1, -1]))
    iseg_base = data.draw(st.sampled_from([0, max(0, index - 2) * 32, (index + 1) * 32]))
    iseg_size = iseg_units * 32 + 32
    seg_init = os.urandom(seg_size)
    iseg_init = os.urandom(iseg_size)
    ks, ki = bytearray(seg_init), bytearray(iseg_init)
    ts, ti = bytearray(seg_init), bytearray(iseg_init)
    if data.draw(st.booleans()):  # every channel and chainCrc the leader sent are written 0 here
        body = bytearray(body)
        body[32:40] = os.urandom(8)
        body = bytes(body)
    with data_file(seg_init, data.draw(st.booleans())) as (kseg, fd):
        got = outcome(K.append_entries, body, at, index, wrote, min_term, kseg, seg_base, ki, iseg_base, fd)
        want = outcome(T.append_entries, body, at, index, wrote, min_term, ts, seg_base, ti, iseg_base)
        assert got == want
        assert bytes(kseg) == bytes(ts) and ki == ti


@contextlib.contextmanager
def data_file(init: bytes, real: bool):
    """(the data file's bytes, its descriptor): a bytearray and -1, or a real file's map and the
    file opened for writing (the kernel then writes runs with pwrite)."""
    if not real:
        yield bytearray(init), -1
        return
    with tempfile.TemporaryFile() as f:
        f.write(init)
        f.flush()
        m = mmap.mmap(f.fileno(), len(init))
        try:
            yield m, f.fileno()
        finally:
            m.close()


def test_a_run_written_with_pwrite_is_in_the_map_and_a_failed_one_leaves_zeros():
    body, _ = build(0, 0, 1, [(100, 0, True, 0), (200, 0, False, 0)])
    with data_file(bytes(4096), True) as (seg, fd):
        iseg = bytearray(64)
        assert K.append_entries(body, 0, 0, 0, 1, seg, 0, iseg, 0, fd) == (2, len(body), len(body), 1)
        assert bytes(seg[:len(body)]) == body and not any(seg[len(body):])
        assert struct.unpack(">iqiqq", iseg[32:64]) == (1, 148, 248, 1, 1)
    body2, _ = build(2, len(body), 1, [(50, 0, True, 0)])
    with data_file(bytes(4096), True) as (seg, fd):
        ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
        try:
            iseg = bytearray(96)
            with pytest.raises(OSError) as e:  # EBADF: a descriptor not open for writing
                K.append_entries(body2, 0, 2, len(body), 1, seg, 0, iseg, 0, ro)
        finally:
            os.close(ro)
        assert "pwrite" in str(e.value) and not any(bytes(seg)) and not any(iseg)


def test_append_entries_refuses_a_position_outside_the_body():
    seg, iseg = bytearray(4096), bytearray(64)
    body, _ = build(0, 0, 1, [(10, 0, True, 0)])
    with pytest.raises(ValueError):
        K.append_entries(body, len(body) + 1, 0, 0, 1, seg, 0, iseg, 0)
    with pytest.raises(ValueError):
        K.append_entries(body, -1, 0, 0, 1, seg, 0, iseg, 0)
    assert K.append_entries(body, 0, 0, 0, 1, seg, 0, iseg, 0) == (1, len(body), len(body), 1)
    assert bytes(seg[:len(body)]) == body and struct.unpack(">iqiqq", iseg[:32]) == (1, 0, len(body), 0, 1)
