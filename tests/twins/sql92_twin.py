"""Pure-Python twin of broker.kernels.sql92 (pyx/sql92_eval.pxd): an SQL92 program (the layout in
broker/server/filter/sql92.py) evaluated on a dict of properties, with RocketMQ's semantics
(ComparisonExpression, UnaryExpression, LogicExpression). Tests only: the kernel must agree."""
from __future__ import annotations

import struct

from broker.server.filter import sql92 as S

MAX_DEPTH = S.MAX_DEPTH


class _JavaException(Exception):
    """An exception RocketMQ's evaluator would throw: the message does not match."""


def decode_properties(raw: bytes) -> dict[bytes, bytes]:
    """MessageDecoder.string2messageProperties on bytes: pieces at \\x02, each split at its first
    \\x01, kept when key and value are both non-empty; a later piece wins."""
    out = {}
    for piece in raw.split(b"\x02"):
        sep = piece.find(b"\x01")
        if sep > 0 and sep < len(piece) - 1:
            out[piece[:sep]] = piece[sep + 1:]
    return out


class _Reader:
    def __init__(self, prog: bytes):
        self.p, self.pos = prog, 0

    def need(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.p):
            raise ValueError("truncated SQL92 program")
        b = self.p[self.pos:self.pos + n]
        self.pos += n
        return b

    def u8(self) -> int:
        return self.need(1)[0]

    def u16(self) -> int:
        return struct.unpack(">H", self.need(2))[0]

    def u32(self) -> int:
        return struct.unpack(">I", self.need(4))[0]

    def blob(self) -> bytes:
        return self.need(self.u32())


_LEAF = {S.NULL, S.TRUE, S.FALSE}
_UNARY = {S.NEG, S.NOT, S.CAST}
_BINARY = {S.EQ, S.GT, S.GE, S.LT, S.LE}
_STROPS = {S.CONTAINS, S.NOT_CONTAINS, S.STARTSWITH, S.NOT_STARTSWITH, S.ENDSWITH, S.NOT_ENDSWITH}


def skip(r: _Reader, depth: int) -> None:
    """Walk over one node, checking its structure (ValueError: a malformed program)."""
    if depth > MAX_DEPTH:
        raise ValueError("SQL92 program nests too deeply")
    op = r.u8()
    if op in _LEAF:
        return
    if op == S.INT:
        r.need(4)
    elif op in (S.LONG, S.DOUBLE):
        r.need(8)
    elif op in (S.STR, S.PROP):
        r.blob()
    elif op in _UNARY:
        skip(r, depth + 1)
    elif op in (S.AND, S.OR):
        n = r.u16()
        if n == 0:
            raise ValueError("AND/OR of no terms")
        for _ in range(n):
            skip(r, depth + 1)
    elif op in _BINARY:
        skip(r, depth + 1)
        skip(r, depth + 1)
    elif op in _STROPS:
        skip(r, depth + 1)
        r.blob()
    elif op in (S.IN, S.NOT_IN):
        skip(r, depth + 1)
        for _ in range(r.u32()):
            r.blob()
    else:
        raise ValueError(f"unknown SQL92 opcode {op}")


def validate(prog: bytes) -> None:
    r = _Reader(prog)
    skip(r, 1)
    if r.pos != len(prog):
        raise ValueError("trailing bytes after the SQL92 program")


def _bool(v):
    """(Boolean) x: null or a Boolean, else Java's ClassCastException."""
    if v is None or v[0] == "B":
        return v
    raise _JavaException("not a Boolean")


def _eval(r: _Reader, props: dict[bytes, bytes]):
    """A node's value: None (null) or (kind, value), kinds B, I, L, D, S (S values are bytes)."""
    op = r.u8()
    if op == S.NULL:
        return None
    if op in (S.TRUE, S.FALSE):
        return ("B", op == S.TRUE)
    if op == S.INT:
        return ("I", struct.unpack(">i", r.need(4))[0])
    if op == S.LONG:
        return ("L", struct.unpack(">q", r.need(8))[0])
    if op == S.DOUBLE:
        return ("D", struct.unpack(">d", r.need(8))[0])
    if op == S.STR:
        return ("S", r.blob())
    if op == S.PROP:
        v = props.get(r.blob())
        return None if v is None else ("S", v)
    if op == S.NEG:
        v = _eval(r, props)
        if v is None or v[0] not in "ILD":
            return None
        k, x = v
        if k == "I":
            return ("I", ((-x + (1 << 31)) % (1 << 32)) - (1 << 31))
        if k == "L":
            return ("L", ((-x + (1 << 63)) % (1 << 64)) - (1 << 63))
        return ("D", -x)
    if op == S.NOT:
        v = _bool(_eval(r, props))
        return None if v is None else ("B", not v[1])
    if op == S.CAST:
        v = _eval(r, props)
        if v is None:
            return None
        return v if v[0] == "B" else ("B", False)
    if op in (S.AND, S.OR):
        n = r.u16()
        stop = op == S.OR  # the value that decides: TRUE for OR, FALSE for AND
        saw_null = False
        for i in range(n):
            v = _bool(_eval(r, props))
            if v is not None and v[1] == stop:
                for _ in range(n - i - 1):
                    skip(r, 1)
                return ("B", stop)
            saw_null = saw_null or v is None
        return None if saw_null else ("B", not stop)
    if op == S.EQ:
        lv = _eval(r, props)
        rv = _eval(r, props)
        if (lv is None) != (rv is None):
            return None if lv is None else ("B", False)
        if lv is None:
            return ("B", True)
        return ("B", _compare(lv, rv) == 0)
    if op in (S.GT, S.GE, S.LT, S.LE):
        lv = _eval(r, props)
        if lv is None:
            skip(r, 1)
            return None
        rv = _eval(r, props)
        if rv is None:
            return None
        if lv[0] == "S" and rv[0] == "S":
            try:
                c = S.java_double_compare(S.java_parse("D", _text(lv[1])), S.java_parse("D", _text(rv[1])))
            except ValueError:
                raise _JavaException("strings compared by >, <") from None
        else:
            c = _compare(lv, rv)
        return ("B", {S.GT: c > 0, S.GE: c >= 0, S.LT: c < 0, S.LE: c <= 0}[op])
    if op in _STROPS:
        start = r.pos
        skip(r, 1)
        search = r.blob()
        if not search:
            return ("B", False)
        end = r.pos
        r.pos = start
        v = _eval(r, props)
        r.pos = end
        if v is None or v[0] != "S":
            return ("B", False)
        s = v[1]
        hit = {S.CONTAINS: search in s, S.STARTSWITH: s.startswith(search), S.ENDSWITH: s.endswith(search)}
        base = op if op in hit else op - 1
        return ("B", hit[base] != (op != base))
    if op in (S.IN, S.NOT_IN):
        v = _eval(r, props)
        values = [r.blob() for _ in range(r.u32())]
        if v is None or v[0] != "S":
            return None
        return ("B", (v[1] in values) != (op == S.NOT_IN))
    raise ValueError(f"unknown SQL92 opcode {op}")


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _compare(lv, rv) -> int:
    lk, rk = lv[0], rv[0]
    lx = _text(lv[1]) if lk == "S" else lv[1]
    rx = _text(rv[1]) if rk == "S" else rv[1]
    if lk == rk == "S":
        return (lv[1] > rv[1]) - (lv[1] < rv[1])
    try:
        return S.java_compare((lk, lx), (rk, rx))
    except (ValueError, TypeError):
        raise _JavaException("conversion failed") from None


def evaluate(prog: bytes, props: dict) -> bool:
    """Whether a message with these properties (str or bytes keys and values) matches; ValueError
    for a malformed program."""
    validate(prog)
    p = {(k.encode() if isinstance(k, str) else k): (v.encode() if isinstance(v, str) else v)
         for k, v in props.items()}
    try:
        v = _eval(_Reader(prog), p)
    except _JavaException:
        return False
    return v == ("B", True)


def record_properties(rec: bytes) -> bytes | None:
    """A stored record's properties field (docs/formats.md §1), or None when the record is too short
    for the lengths it states."""
    if len(rec) < 75:
        return None
    sys_flag = struct.unpack_from(">I", rec, 36)[0]
    pos = 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 4 + 8
    if pos + 4 > len(rec):
        return None
    body = struct.unpack_from(">I", rec, pos)[0]
    pos += 4
    if body > len(rec) - pos:
        return None
    pos += body
    if pos + 1 > len(rec):
        return None
    pos += 1 + rec[pos]
    if pos + 2 > len(rec):
        return None
    n = struct.unpack_from(">H", rec, pos)[0]
    pos += 2
    return rec[pos:pos + n] if n <= len(rec) - pos else None


def record_matches(prog: bytes, record: bytes) -> bool:
    validate(prog)
    props = record_properties(bytes(record))
    return props is not None and matches(prog, props)


def matches(prog: bytes, properties: bytes) -> bool:
    """The kernel's signature: the stored properties bytes."""
    return evaluate(prog, decode_properties(bytes(properties)))
