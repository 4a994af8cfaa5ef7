"""The h2_session kernel's events on a client's HTTP/2 bytes: a unary call read whole comes as one
EV_CALL (headers, its one message and its end together), and however the bytes are cut into reads
each stream's events say the same thing in the same order as the uncut read's."""
from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.kernels import h2_session as K

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS
PATH = "/apache.rocketmq.v2.MessagingService/SendMessage"
END_STREAM, END_HEADERS = 0x1, 0x4


def frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", sid) + payload


def literal(name: bytes, value: bytes) -> bytes:
    """HPACK: a literal header field without indexing, new name, no Huffman (lengths under 127)."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def headers(sid: int, end: bool, extra: list[tuple[bytes, bytes]] = ()) -> bytes:
    block = b"".join(literal(n, v) for n, v in [
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", PATH.encode()), (b":authority", b"h"),
        (b"content-type", b"application/grpc"), (b"te", b"trailers"), (b"grpc-accept-encoding", b"gzip"),
        *extra])
    return frame(1, END_HEADERS | (END_STREAM if end else 0), sid, block)


def message(payload: bytes, flag: int = 0) -> bytes:
    return bytes([flag]) + struct.pack(">I", len(payload)) + payload


def data(sid: int, body: bytes, end: bool) -> bytes:
    return frame(0, END_STREAM if end else 0, sid, body)


def test_a_unary_call_read_whole_is_one_event():
    """Headers, one message and the end in one read: one EV_CALL carrying what EV_HEADERS and
    EV_MESSAGE carried (the metadata kept, the headers every call sends left out, -bin decoded)."""
    s = K.ServerSession()
    meta = [(b"x-mq-client-id", b"c1"), (b"grpc-timeout", b"3S"), (b"x-trace-bin", b"AQI")]
    events = s.feed(PREFACE + headers(1, False, meta) + data(1, message(b"hello"), True))
    assert events == [(K.EV_CALL, 1, PATH, [("x-mq-client-id", "c1"), ("x-trace-bin", b"\x01\x02")], "3S", None,
                       0, b"hello")]


def test_a_call_cut_across_reads_gives_its_headers_at_the_end_of_the_first():
    """A stream's headers are never held past the read that brought them: a streaming call's
    handler starts before its first message comes."""
    s = K.ServerSession()
    assert s.feed(PREFACE + headers(1, False)) == [(K.EV_HEADERS, 1, PATH, [], None, None)]
    assert s.feed(data(1, message(b"a"), False)) == [(K.EV_MESSAGE, 1, 0, b"a")]
    assert s.feed(data(1, b"", True)) == [(K.EV_END, 1)]


def test_two_messages_or_none_in_one_read_are_not_a_call():
    s = K.ServerSession()
    events = s.feed(PREFACE + headers(1, False) + data(1, message(b"a") + message(b"b", 1), True)
                    + headers(3, True))
    assert events == [(K.EV_HEADERS, 1, PATH, [], None, None), (K.EV_MESSAGE, 1, 0, b"a"),
                      (K.EV_MESSAGE, 1, 1, b"b"), (K.EV_END, 1),
                      (K.EV_HEADERS, 3, PATH, [], None, None), (K.EV_END, 3)]


def test_a_held_stream_reset_in_the_same_read_is_opened_then_closed():
    s = K.ServerSession()
    rst = frame(3, 0, 1, struct.pack(">I", 8))  # RST_STREAM CANCEL
    events = s.feed(PREFACE + headers(1, False) + data(1, message(b"a"), False) + rst)
    assert events == [(K.EV_HEADERS, 1, PATH, [], None, None), (K.EV_MESSAGE, 1, 0, b"a"), (K.EV_CLOSED, 1, 8)]


def test_a_held_message_too_large_is_said_after_the_headers():
    s = K.ServerSession(max_message=4)
    events = s.feed(PREFACE + headers(1, False) + data(1, message(b"12345"), True))
    assert events[:2] == [(K.EV_HEADERS, 1, PATH, [], None, None), (K.EV_TOO_LARGE, 1, 5)]


def expanded(events: list) -> dict[int, list]:
    """Each stream's events, an EV_CALL written out as the three it stands for."""
    out: dict[int, list] = {}
    for ev in events:
        if ev[0] == K.EV_CALL:
            out.setdefault(ev[1], []).extend([(K.EV_HEADERS, *ev[1:6]), (K.EV_MESSAGE, ev[1], ev[6], ev[7]),
                                              (K.EV_END, ev[1])])
        else:
            out.setdefault(ev[1], []).append(ev)
    return out


calls = st.lists(st.lists(st.binary(max_size=40), max_size=3), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(calls, st.lists(st.integers(0, 4000), max_size=10), st.booleans())
def test_cutting_the_reads_anywhere_changes_no_streams_events(bodies, cuts, interleave):
    """Calls of 0 to 3 messages (one DATA frame per message, the end on the last or on a DATA of
    its own), sent one after another or interleaved: each stream's expanded events are the same
    whether the bytes come in one read or cut anywhere."""
    sids = [2 * i + 1 for i in range(len(bodies))]
    parts: list[list[bytes]] = []
    for sid, msgs in zip(sids, bodies):
        if not msgs:
            parts.append([headers(sid, True)])
            continue
        frames = [headers(sid, False)] + [data(sid, message(m), i == len(msgs) - 1 and sid % 4 == 1)
                                          for i, m in enumerate(msgs)]
        if sid % 4 == 3:
            frames.append(data(sid, b"", True))
        parts.append(frames)
    order: list[bytes] = []
    if interleave:
        while any(parts):
            for p in parts:
                if p:
                    order.append(p.pop(0))
    else:
        order = [f for p in parts for f in p]
    stream = PREFACE + b"".join(order)

    whole = K.ServerSession().feed(stream)
    s, got, at = K.ServerSession(), [], 0
    for c in sorted(set(min(c, len(stream)) for c in cuts)) + [len(stream)]:
        got.extend(s.feed(stream[at:c]))
        at = c
    assert expanded(got) == expanded(whole)
    want = {sid: [(K.EV_HEADERS, sid, PATH, [], None, None)] + [(K.EV_MESSAGE, sid, 0, m) for m in msgs]
            + [(K.EV_END, sid)] for sid, msgs in zip(sids, bodies)}
    assert expanded(whole) == want


def test_metadata_the_same_on_every_call_and_metadata_that_changes():
    """The session reuses what it decoded of a header a client sends the same on every call; a
    header whose value changes (a request id) is read anew each time, never answered from before."""
    s = K.ServerSession()
    got = []
    for i, sid in enumerate(range(1, 12, 2)):
        meta = [(b"x-mq-client-id", b"c1"), (b"x-mq-request-id", str(i % 3).encode()), (b"x-trace-bin", b"AQI")]
        evs = s.feed((PREFACE if sid == 1 else b"") + headers(sid, False, meta) + data(sid, message(b"m"), True))
        got.append(evs[0][3])
    assert got == [[("x-mq-client-id", "c1"), ("x-mq-request-id", str(i % 3)), ("x-trace-bin", b"\x01\x02")]
                   for i in range(6)]
    # a client whose id changes on a later call is read as it says
    evs = s.feed(headers(13, False, [(b"x-mq-client-id", b"c2")]) + data(13, message(b"m"), True))
    assert evs[0][3] == [("x-mq-client-id", "c2")]


def frames(out: bytes) -> list[tuple[int, int, int, bytes]]:
    """The server's bytes as (type, flags, stream id, payload) frames, checked whole."""
    got, pos = [], 0
    while pos < len(out):
        n = int.from_bytes(out[pos:pos + 3], "big")
        assert pos + 9 + n <= len(out), "a frame cut short"
        got.append((out[pos + 3], out[pos + 4], int.from_bytes(out[pos + 5:pos + 9], "big") & 0x7FFFFFFF,
                    out[pos + 9:pos + 9 + n]))
        pos += 9 + n
    return got


@settings(max_examples=60, deadline=None)
@given(pieces=st.lists(st.tuples(st.sampled_from(["framed", "message"]), st.binary(max_size=9000)),
                       min_size=1, max_size=6),
       window=st.integers(min_value=1, max_value=20_000), step=st.integers(min_value=1, max_value=30_000),
       drain_between=st.booleans())
def test_answers_held_and_written_through_a_small_window(pieces, window, step, drain_between):
    """A stream's answer (framed bytes held without a copy, messages copied into its buffer, in any
    order) under a client's stream window smaller than it: each DATA frame is deferred at the
    window and resumed by WINDOW_UPDATE, and the stream's DATA, whatever the frames' cuts, is
    the answer's bytes in the order queued, then the trailers."""
    settings_frame = frame(4, 0, 0, struct.pack(">HI", 4, window))  # SETTINGS_INITIAL_WINDOW_SIZE
    s = K.ServerSession()
    s.feed(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings_frame + headers(1, False) + data(1, message(b"q"), True))
    want = b""
    for kind, body in pieces:
        if kind == "framed":
            framed = message(body) + message(body[:3])
            assert s.send_framed(1, framed)
            want += framed
        else:
            assert s.send_message(1, body)
            want += message(body)
        if drain_between:
            got = frames(s.drain())
            assert sum(len(p) for t, _, sid, p in got if t == 0 and sid == 1) <= window
            want_sent = b"".join(p for t, _, sid, p in got if t == 0 and sid == 1)
            assert want.startswith(want_sent)
            want = want[len(want_sent):]
    assert s.finish(1, 0)
    sent, trailers, credit = b"", None, 0
    for _ in range(10_000):
        for t, flags, sid, payload in frames(s.drain()):
            if sid != 1:
                continue
            if t == 0:
                assert trailers is None and not flags & END_STREAM
                sent += payload
            elif t == 1 and sent == want:
                trailers = (flags, payload)
        if trailers is not None:
            break
        s.feed(frame(8, 0, 1, struct.pack(">I", step)) + frame(8, 0, 0, struct.pack(">I", step)))  # WINDOW_UPDATEs
    assert sent == want
    assert trailers is not None and trailers[0] & END_STREAM


def test_a_framed_answer_is_held_not_copied():
    """send_framed on an empty stream keeps the caller's bytes until its DATA frames are written;
    nothing the caller keeps changes what is sent, and the object is let go once sent."""
    import sys
    s = K.ServerSession()
    s.feed(PREFACE + headers(1, False) + data(1, message(b"q"), True))
    framed = message(b"x" * 40_000)
    before = sys.getrefcount(framed)
    assert s.send_framed(1, framed)
    assert sys.getrefcount(framed) == before + 1  # held by the stream
    s.finish(1, 0)
    got = frames(s.drain())
    assert b"".join(p for t, _, sid, p in got if t == 0 and sid == 1) == framed
    assert sys.getrefcount(framed) == before  # let go once written
