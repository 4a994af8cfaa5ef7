"""The HA stream codec: kernel == twin on random streams fed in random pieces, offsets checked,
bad headers refused at the same position by both."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.kernels import ha as K
from tests.twins import ha_twin as T

MAX = 4096


@st.composite
def streams(draw):
    """A master's stream: data frames continuing from `start`, heartbeats among them."""
    start = draw(st.integers(0, 1 << 40))
    out, frames, off = bytearray(), [], start
    for _ in range(draw(st.integers(0, 10))):
        data = draw(st.binary(max_size=600)) if draw(st.booleans()) else b""
        out += T.frame_header(off, len(data)) + data
        if data:
            frames.append((off, data))
        off += len(data)
    return start, bytes(out), frames, off


@settings(max_examples=300, deadline=None)
@given(streams(), st.lists(st.integers(1, 300), min_size=1, max_size=20), st.booleans())
def test_incremental_parse_matches_twin_and_reassembles_the_log(stream, cuts, empty_slave):
    start, data, frames, end_off = stream
    assert all(K.frame_header(o, len(d)) == T.frame_header(o, len(d)) for o, d in frames)
    buf_k, buf_t = bytearray(len(data) + 1), bytearray(len(data) + 1)
    fill_k = fill_t = fed = i = 0
    exp_k = exp_t = -1 if empty_slave else start
    got = []
    while fed < len(data):
        n = min(cuts[i % len(cuts)], len(data) - fed)
        i += 1
        buf_k[fill_k:fill_k + n] = data[fed:fed + n]
        buf_t[fill_t:fill_t + n] = data[fed:fed + n]
        fed, fill_k, fill_t = fed + n, fill_k + n, fill_t + n
        rk = K.dispatch_read_request(buf_k, 0, fill_k, exp_k, MAX)
        rt = T.dispatch_read_request(buf_t, 0, fill_t, exp_t, MAX)
        assert rk == rt and rk[3] == -1
        got += [(o, bytes(buf_k[p:p + s])) for o, p, s in rk[0]]
        exp_k, exp_t = rk[2], rt[2]
        fill_k = K.reallocate_byte_buffer(buf_k, rk[1], fill_k)
        fill_t = T.reallocate_byte_buffer(buf_t, rt[1], fill_t)
        assert buf_k[:fill_k] == buf_t[:fill_t]
    assert got == frames and fill_k == 0
    if data:
        assert exp_k == end_off


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 1 << 40), st.integers(1, 1 << 20), st.binary(min_size=1, max_size=50))
def test_a_frame_that_does_not_continue_the_log_stops_the_parse(start, gap, data):
    stream = K.frame_header(start, len(data)) + data + K.frame_header(start + len(data) + gap, 3) + b"abc"
    for mod in (K, T):
        frames, pos, expected, mismatch = mod.dispatch_read_request(stream, 0, len(stream), start, MAX)
        assert frames == [(start, 12, len(data))] and pos == 12 + len(data)
        assert expected == start + len(data) and mismatch == start + len(data) + gap


@pytest.mark.parametrize("header,why", [(b"\x80" + b"\0" * 7 + b"\0\0\0\1", "negative phyOffset"),
                                        (b"\0" * 8 + b"\xff\xff\xff\xff", "bodySize -1"),
                                        (b"\0" * 8 + b"\0\0\x10\x01", "bodySize 4097")])
def test_bad_headers_raise_naming_the_position(header, why):
    stream = K.frame_header(0, 2) + b"ok" + header
    with pytest.raises(K.HAFrameError, match=f"position 14: {why}"):
        K.dispatch_read_request(stream, 0, len(stream), 0, MAX)
    with pytest.raises(T.HAFrameError):
        T.dispatch_read_request(stream, 0, len(stream), 0, MAX)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, (1 << 63) - 1), max_size=5), st.binary(max_size=7))
def test_the_master_takes_the_newest_complete_report(values, tail):
    data = b"".join(v.to_bytes(8, "big") for v in values) + tail
    assert K.last_report(data, 0, len(data)) == T.last_report(data, 0, len(data)) == \
        (values[-1] if values else -1, 8 * len(values))


def test_ranges_outside_the_buffer_are_refused():
    with pytest.raises(ValueError):
        K.dispatch_read_request(b"\0" * 12, 0, 13, 0, MAX)
    with pytest.raises(ValueError):
        K.reallocate_byte_buffer(bytearray(4), 3, 5)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(8, 200), max_size=20), st.integers(0, 64), st.data())
def test_record_boundary_matches_twin_and_stops_at_whole_records(sizes, blank, data):
    seg = bytearray()
    for n in sizes:
        seg += n.to_bytes(4, "big") + b"\xda\xa3\x20\xa7" + bytes(n - 8)
    starts = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    if blank >= 8:
        seg += blank.to_bytes(4, "big") + T.BLANK_MAGIC_CODE.to_bytes(4, "big") + bytes(blank - 8)
    end = data.draw(st.integers(0, len(seg)))
    got = K.record_boundary(bytes(seg), 0, end)
    assert got == T.record_boundary(bytes(seg), 0, end)
    whole = max(s for s in starts if s <= end)
    assert got == (len(seg) if blank >= 8 and end == len(seg) else whole)


def test_record_boundary_refuses_sizes_that_cannot_be_valid():
    seg = (4).to_bytes(4, "big") + bytes(12)
    with pytest.raises(ValueError, match="record at 0 has size 4"):
        K.record_boundary(seg, 0, len(seg))
