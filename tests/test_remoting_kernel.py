"""The remoting frame codec: kernel == twin on random streams fed in random pieces; bad frames raise."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.kernels import remoting as K
from tests.twins import remoting_twin as T

frame = st.tuples(st.sampled_from([0, 1]), st.binary(max_size=300), st.binary(max_size=600))


def build(frames):
    out = bytearray()
    for t, h, b in frames:
        out += T.frame_prefix(len(h), len(b), t) + h + b
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(frame, max_size=12), st.lists(st.integers(1, 400), min_size=1, max_size=30))
def test_incremental_split_matches_twin_and_round_trips(frames, cuts):
    stream = build(frames)
    assert all(K.frame_prefix(len(h), len(b), t) == T.frame_prefix(len(h), len(b), t) for t, h, b in frames)
    # feed the stream in pieces through a fixed receive buffer, as the protocol class will
    buf_k, buf_t = bytearray(len(stream) + 1), bytearray(len(stream) + 1)
    filled_k = filled_t = 0
    got, fed, i = [], 0, 0
    while fed < len(stream):
        n = min(cuts[i % len(cuts)], len(stream) - fed)
        i += 1
        buf_k[filled_k:filled_k + n] = stream[fed:fed + n]
        buf_t[filled_t:filled_t + n] = stream[fed:fed + n]
        fed += n
        filled_k += n
        filled_t += n
        fk, pk = K.split_frames(buf_k, 0, filled_k)
        ft, pt = T.split_frames(buf_t, 0, filled_t)
        assert (fk, pk) == (ft, pt)
        for typ, hs, hl, bs, bl in fk:
            got.append((typ, bytes(buf_k[hs:hs + hl]), bytes(buf_k[bs:bs + bl])))
        filled_k = K.reallocate(buf_k, pk, filled_k)
        filled_t = T.reallocate(buf_t, pt, filled_t)
        assert buf_k[:filled_k] == buf_t[:filled_t]
    assert got == [tuple(f) for f in frames] and filled_k == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=4, max_size=64), st.integers(8, 64))
def test_garbage_raises_the_same_error_at_the_same_offset(garbage, max_frame):
    for mod in (K, T):
        try:
            r = mod.split_frames(garbage, 0, len(garbage), max_frame)
        except mod.FrameError as e:
            r = ("error", e.offset)
        if mod is K:
            rk = r
    assert rk == r


def test_refuses_oversized_and_inconsistent_frames():
    with pytest.raises(K.FrameError, match="exceeds the limit"):
        K.split_frames((17 * 1024 * 1024).to_bytes(4, "big") + bytes(4), 0, 8)
    with pytest.raises(K.FrameError, match="header length"):
        K.split_frames((10).to_bytes(4, "big") + (20).to_bytes(4, "big") + bytes(6), 0, 14)
    with pytest.raises(K.FrameError, match="below 4") as e:
        K.split_frames(build([(0, b"{}", b"")]) + (2).to_bytes(4, "big"), 0, 14)
    assert e.value.offset == 10  # names where the bad frame starts (after a good 10-byte frame)
    assert K.split_frames(bytes(3), 0, 3) == ([], 0)  # too short to tell: wait for more
    assert K.split_frames((100).to_bytes(4, "big"), 0, 4) == ([], 0)  # announced, not yet arrived
