"""Pure-Python twin of broker.kernels.ack_request (pyx/ack_request.pyx): AckMessage's request read
from its protobuf bytes for the local front's batch ack, or None when it is not the plain shape.
Used only by the tests (tests/test_ack_request_kernel_vs_twin.py) and the fuzz check."""
from __future__ import annotations

I64 = (1 << 63) - 1
I31 = 1 << 31
STATUS_OK = b"\x08\xa0\x9c\x01\x12\x02OK"
MAX_GROUPS = 64


class _Bad(Exception):
    pass


def _varint(b: bytes, pos: int, end: int) -> tuple[int, int]:
    v = shift = 0
    while pos < end:
        c = b[pos]
        pos += 1
        if shift == 63 and c > 1:
            raise _Bad
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, pos
        shift += 7
        if shift > 63:
            raise _Bad
    raise _Bad


def _fields(b: bytes, pos: int, end: int):
    """(number, value start, value end) of each length-delimited field; _Bad for anything else."""
    while pos < end:
        tag, pos = _varint(b, pos, end)
        if tag & 7 != 2 or tag >> 3 == 0:
            raise _Bad
        n, pos = _varint(b, pos, end)
        if n > end - pos:
            raise _Bad
        yield tag >> 3, pos, pos + n
        pos += n


def _utf8(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise _Bad from None


def _name(b: bytes, s: int, e: int) -> str:
    name = None
    for number, vs, ve in _fields(b, s, e):
        if number > 2:
            raise _Bad
        text = _utf8(b[vs:ve])
        if number == 2:
            if name is not None:
                raise _Bad
            name = text
    return name or ""


def _number(text: bytes, limit: int) -> int:
    if not 1 <= len(text) <= 19 or not all(0x30 <= c <= 0x39 for c in text):
        raise _Bad
    v = int(text)
    if v > limit:
        raise _Bad
    return v


def _handle(h: bytes):
    parts = h.split(b" ")
    if len(parts) != 9:
        raise _Bad
    ck, pt, it = _number(parts[0], I64), _number(parts[1], I64), _number(parts[2], I64)
    rq = _number(parts[3], I31)
    if parts[4] not in (b"0", b"1", b"2"):
        raise _Bad
    if not parts[5] or not all(0x21 <= c <= 0x7E for c in parts[5]):
        raise _Bad
    qid, qo = _number(parts[6], I31), _number(parts[7], I64)
    _number(parts[8], I64)
    if qo < ck:
        raise _Bad
    return b" ".join(parts[:7]), (ck, pt, it, rq, parts[4].decode(), parts[5].decode(), qid), qo


def _len_varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _put(tag: int, value: bytes) -> bytes:
    return bytes([tag]) + _len_varint(len(value)) + value


def read_ack(payload: bytes):
    try:
        return _read(payload)
    except _Bad:
        return None


def _read(b: bytes):
    n = len(b)
    group = topic = None
    heads: dict[bytes, tuple] = {}
    answer = [_put(0x0A, STATUS_OK)]
    entries = 0
    for number, s, e in _fields(b, 0, n):
        if number == 1:
            if group is not None:
                raise _Bad
            group = (s, e)
        elif number == 2:
            if topic is not None:
                raise _Bad
            topic = (s, e)
        elif number == 3:
            mid = handle = None
            for f, vs, ve in _fields(b, s, e):
                if f > 2:
                    raise _Bad
                if f == 1:
                    if mid is not None:
                        raise _Bad
                    _utf8(b[vs:ve])
                    mid = b[vs:ve]
                else:
                    if handle is not None:
                        raise _Bad
                    handle = b[vs:ve]
            if handle is None:
                raise _Bad
            head, fields, qo = _handle(handle)
            if head not in heads:
                if len(heads) == MAX_GROUPS:
                    raise _Bad
                heads[head] = (*fields, [])
            heads[head][7].append(qo)
            entry = (_put(0x0A, mid) if mid else b"") + _put(0x12, handle) + _put(0x1A, STATUS_OK)
            answer.append(_put(0x12, entry))
            entries += 1
        else:
            raise _Bad
    if entries < 1:  # (an AckMessage of no entry is the protobuf path's refusal)
        raise _Bad
    g = _name(b, *group) if group is not None else ""
    t = _name(b, *topic) if topic is not None else ""
    return g, t, list(heads.values()), b"".join(answer)
