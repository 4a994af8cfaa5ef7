"""The write buffer (broker.kernels.wbuf) and the framing recipe header.pxd documents: bytes as
written, growth past the inline kilobyte, and no growth, clear or patch while a view is exported."""
from __future__ import annotations

import struct

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.kernels import header as H
from broker.kernels.remoting import frame_prefix
from broker.kernels.wbuf import WBUF_INLINE, WriteBuffer


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=700)),
    st.tuples(st.just("int"), st.integers(-(1 << 63), (1 << 63) - 1), st.sampled_from([0, 2, 4, 8])),
    st.tuples(st.just("json"), st.text(max_size=300).map(lambda s: s.encode("utf-8", "surrogatepass"))),
), max_size=30))
def test_writes_append_exactly(ops):
    w, want = WriteBuffer(), bytearray()
    for op in ops:
        if op[0] == "bytes":
            w.extend(op[1])
            want += op[1]
        elif op[0] == "int":
            v, width = op[1], op[2]
            w.extend_int(v, width)
            want += str(v).encode() if width == 0 else (v & ((1 << 8 * width) - 1)).to_bytes(width, "big")
        else:
            w.extend_json_string(op[1])
            try:  # msgspec's escaping of the same text, where the bytes are valid UTF-8
                want += msgspec.json.encode(op[1].decode("utf-8"))
            except UnicodeDecodeError:  # surrogates (surrogatepass): bytes >= 0x80 pass through
                want += _json_bytes(op[1])
        assert len(w) == len(want)
    assert w.getvalue() == bytes(want) and bytes(w.view()) == bytes(want)


def _json_bytes(b: bytes) -> bytes:
    """The writer escapes bytes, not characters: bytes >= 0x80 pass through whatever they are."""
    out = bytearray(b'"')
    for c in b:
        if c in b'"\\':
            out += b"\\" + bytes([c])
        elif c < 0x20:
            out += {8: b"\\b", 9: b"\\t", 10: b"\\n", 12: b"\\f", 13: b"\\r"}.get(c, b"\\u%04x" % c)
        else:
            out.append(c)
    return bytes(out + b'"')


def test_no_growth_clear_or_patch_while_a_view_is_exported():
    w = WriteBuffer()
    w.extend(b"x" * 100)
    v = w.view()
    assert v.readonly and bytes(v) == b"x" * 100
    w.extend(b"y" * (WBUF_INLINE - 100))  # within capacity: allowed, the view keeps its 100 bytes
    with pytest.raises(BufferError):
        w.extend(b"z")  # would move the memory the view points at
    with pytest.raises(BufferError):
        w.reset()
    with pytest.raises(BufferError):
        w.patch32(0, 1)
    second = memoryview(w)  # a second export is fine; both are read-only
    assert second.readonly and len(second) == WBUF_INLINE
    second.release()
    assert bytes(v) == b"x" * 100
    v.release()
    w.extend(b"z" * 5000)  # grows once every view is gone
    assert w.getvalue() == b"x" * 100 + b"y" * (WBUF_INLINE - 100) + b"z" * 5000
    with pytest.raises(TypeError):
        memoryview(w)[0:1] = b"a"  # read-only
    w.reset()
    assert len(w) == 0 and w.getvalue() == b""


def test_patch_bounds_and_ints():
    w = WriteBuffer()
    w.extend_int(-(1 << 63))
    w.extend_int((1 << 63) - 1)
    assert w.getvalue() == b"-9223372036854775808" + b"9223372036854775807"
    w.patch32(0, 0x41424344)
    assert w.getvalue()[:4] == b"ABCD"
    with pytest.raises(ValueError):
        w.patch32(len(w) - 3, 0)
    with pytest.raises(ValueError):
        w.patch32(-1, 0)
    with pytest.raises(ValueError):
        w.extend_int(1, 3)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([0, 1]), st.integers(-32768, 32767), st.integers(-(1 << 31), (1 << 31) - 1),
       st.one_of(st.none(), st.text(max_size=40)),
       st.dictionaries(st.text(max_size=10), st.text(max_size=40), max_size=6), st.binary(max_size=3000),
       st.binary(max_size=1500))
def test_the_framing_recipe_of_header_pxd(stype, code, opaque, remark, ext, body, before):
    w = WriteBuffer()
    w.extend(before)  # a frame appended after others, as a connection's output buffer holds them
    n = H.encode_frame(w, stype, code, "JAVA", 395, opaque, 1, remark, ext, body)
    header = H.encode_header(stype, code, "JAVA", 395, opaque, 1, remark, ext)
    assert n == 8 + len(header) + len(body)
    assert w.getvalue() == before + frame_prefix(len(header), len(body), stype) + header + body
    total, word = struct.unpack_from(">iI", w.getvalue(), len(before))
    assert total == 4 + len(header) + len(body) and word == (stype << 24) | len(header)


def test_written_into_a_bytes_object_and_handed_over():
    """start_bytes (use_bytes): the buffer writes into a bytes object, grows it past its first
    room, and take() hands that object over (the same bytes getvalue copies); the buffer is empty
    and usable again after, inline or bytes-backed; a view still refuses growth meanwhile."""
    b = WriteBuffer()
    b.start_bytes(16)
    b.extend(b"x" * 10)
    with b.view():
        with pytest.raises(BufferError):
            b.extend(b"y" * 100)  # past the room: would move what the view shows
    b.extend(b"y" * 100)
    b.extend_int(7, 4)
    want = b"x" * 10 + b"y" * 100 + b"\x00\x00\x00\x07"
    assert b.getvalue() == want
    out = b.take()
    assert type(out) is bytes and out == want and len(b) == 0
    b.extend(b"abc")
    assert b.take() == b"abc"  # not bytes-backed now: a copy, as getvalue
    b.start_bytes(4)
    assert b.take() == b""
    b.extend(b"z" * 3000)
    with pytest.raises(BufferError):
        b.start_bytes(10)  # only an empty buffer switches
