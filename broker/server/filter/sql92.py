"""SQL92 subscription expressions: RocketMQ's selector grammar (filter/SelectorParser.jj) parsed and
compiled to a compact program that the pull's consume-queue scan evaluates on each stored
record's properties (broker.kernels.sql92, docs/consumption.md "SQL92").

The language is RocketMQ's, quirks included, because a consumer's expression must select the same
messages here as there:
- the parser stops at the first token that continues no rule: `a > 5 LIKE 'x'` is `a > 5`;
- integer literals are Java ints when they fit, else longs; float literals are doubles and
  `0.0` (anything below Double.MIN_VALUE) does not compile; `-` is an operator, never a literal's;
- `>`, `>=`, `<`, `<=`, BETWEEN refuse string, boolean and NULL constants; `=` refuses NULL;
- IN and CONTAINS / STARTSWITH / ENDSWITH take string literals only, IN only after a property.

Program layout (prefix order, big-endian; every node yields a Java value: null, Boolean, Integer,
Long, Double or String):
  NULL | TRUE | FALSE                        constants
  INT i32 | LONG i64 | DOUBLE f64            numeric constants
  STR u32 len bytes | PROP u32 len name      a string constant, a property's value (a String or null)
  NEG x | NOT x | CAST x                     unary minus, NOT, a property used as a boolean
  AND u16 n x1..xn | OR u16 n x1..xn         three-valued, short-circuit, left to right
  EQ x y | GT x y | GE x y | LT x y | LE x y
  CONTAINS x s | NOT_CONTAINS ... ENDSWITH   s = u32 len bytes
  IN x u32 n s1..sn | NOT_IN x u32 n s1..sn
"""
from __future__ import annotations

import functools
import math
import re
import struct

NULL, TRUE, FALSE, INT, LONG, DOUBLE, STR, PROP = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08
NEG, NOT, CAST, AND, OR = 0x10, 0x11, 0x12, 0x13, 0x14
EQ, GT, GE, LT, LE = 0x15, 0x16, 0x17, 0x18, 0x19
CONTAINS, NOT_CONTAINS, STARTSWITH, NOT_STARTSWITH, ENDSWITH, NOT_ENDSWITH = 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F
IN, NOT_IN = 0x20, 0x21
STRING_OPS = {"CONTAINS": CONTAINS, "STARTSWITH": STARTSWITH, "ENDSWITH": ENDSWITH}
NEGATED_STRING_OPS = {"CONTAINS": NOT_CONTAINS, "STARTSWITH": NOT_STARTSWITH, "ENDSWITH": NOT_ENDSWITH}

MAX_NESTING = 64  # parentheses, NOT and signs inside one another (RocketMQ has no limit but its stack)
MAX_DEPTH = 256   # the program's tree (an `a = 1 = TRUE = ...` chain deepens it without nesting); the kernel's limit
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
DOUBLE_MIN_VALUE = 5e-324  # Java's Double.MIN_VALUE, the smallest positive double


class Sql92Error(ValueError):
    """An expression RocketMQ's SqlFilter.compile refuses (a syntax error or a failed check)."""


# -- tokens ---------------------------------------------------------------------------------------
KEYWORDS = {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH", "ENDSWITH"}
_SKIP = re.compile(r"[ \t\n\r\f]+|--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^*/][^*]*\*+)*/")
_FLOAT = re.compile(r"(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)")
_DECIMAL = re.compile(r"(?:0|[1-9][0-9]*[lL]?)")
_STRING = re.compile(r"'(?:''|[^'])*'")
_ID = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_PUNCT = ("<>", ">=", "<=", "=", ">", "<", "(", ")", ",", "+", "-")


class _Lexer:
    """JavaCC's token manager: the longest match, keywords before identifiers, made lazily (a bad
    character after the last token the parser looks at is never read, as in RocketMQ)."""

    def __init__(self, text: str):
        self.text, self.pos, self.ahead = text, 0, []

    def _next(self) -> tuple[str, str]:
        t = self.text
        while True:
            m = _SKIP.match(t, self.pos)
            if not m:
                break
            self.pos = m.end()
        if self.pos >= len(t):
            return ("EOF", "")
        cands = []
        for kind, rx in (("FLOAT", _FLOAT), ("DECIMAL", _DECIMAL), ("STRING", _STRING), ("ID", _ID)):
            m = rx.match(t, self.pos)
            if m:
                cands.append((len(m.group()), kind, m.group()))
        for p in _PUNCT:
            if t.startswith(p, self.pos):
                cands.append((len(p), p, p))
                break
        if not cands:
            raise Sql92Error(f"Lexical error at column {self.pos + 1}: encountered {t[self.pos]!r}")
        # longest first; on a tie the token defined first in the grammar (FLOAT/DECIMAL before ID)
        n, kind, image = max(cands, key=lambda c: c[0])
        self.pos += n
        if kind == "ID" and image.upper() in KEYWORDS:
            kind = image.upper()
        return (kind, image)

    def peek(self, k: int = 0) -> tuple[str, str]:
        while len(self.ahead) <= k:
            self.ahead.append(self._next())
        return self.ahead[k]

    def take(self, kind: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if kind is not None and tok[0] != kind:
            raise Sql92Error(f"Encountered {tok[1] or '<EOF>'!r}, expected {kind}")
        self.ahead.pop(0)
        return tok


# -- the tree -------------------------------------------------------------------------------------
class _Node:
    __slots__ = ("op", "kids", "value", "boolconst")

    def __init__(self, op, kids=(), value=None, boolconst=False):
        self.op, self.kids, self.value, self.boolconst = op, list(kids), value, boolconst


_BOOLEAN_OPS = {NOT, CAST, AND, OR, EQ, GT, GE, LT, LE, IN, NOT_IN, *STRING_OPS.values(), *NEGATED_STRING_OPS.values()}
_CONSTS = {NULL, TRUE, FALSE, INT, LONG, DOUBLE, STR}


def _is_boolean(n: _Node) -> bool:
    return n.op in _BOOLEAN_OPS or n.boolconst


def _as_boolean(n: _Node) -> _Node:
    """SelectorParser.asBooleanExpression: a property is cast, a number or string refused."""
    if _is_boolean(n):
        return n
    if n.op == PROP:
        return _Node(CAST, [n])
    raise Sql92Error("Expression will not result in a boolean value")


def _check_less_than_operand(n: _Node) -> None:
    if n.op in _CONSTS:
        if n.op in (INT, LONG, DOUBLE):
            return
        raise Sql92Error("a string, boolean or NULL constant cannot be compared by >, >=, <, <=")
    if _is_boolean(n):
        raise Sql92Error("a boolean expression cannot be compared by >, >=, <, <=")


def _relational(op: int, left: _Node, right: _Node) -> _Node:
    _check_less_than_operand(left)
    _check_less_than_operand(right)
    return _Node(op, [left, right])


def _equal(left: _Node, right: _Node) -> _Node:
    for n in (left, right):
        if n.op == NULL:
            raise Sql92Error("NULL cannot be compared by = or <> (use IS NULL)")
    if left.op in _CONSTS and right.op in _CONSTS and left.boolconst and not right.boolconst:
        raise Sql92Error("a boolean constant cannot be compared with a non-boolean one")
    return _Node(EQ, [left, right])


def _logic(op: int, left: _Node, right: _Node) -> _Node:
    """A chain of one operator is one node (the same result: three-valued AND and OR are
    associative, and evaluate left to right either way), so no tree deepens with its length.
    The parser's nodes are never shared, so the left one grows in place."""
    node = left if left.op == op else _Node(op, [left])
    node.kids.extend(right.kids if right.op == op else [right])
    return node


def _between(value: _Node, low: _Node, high: _Node) -> _Node:
    if low.op in _CONSTS and high.op in _CONSTS:
        if low.op == NULL or high.op == NULL:
            raise Sql92Error("Illegal values of between, values can not be null!")
        lv, hv = _typed(low), _typed(high)
        try:
            wrong = java_compare(hv, lv) < 0
        except (ValueError, TypeError):
            raise Sql92Error("Illegal values of between: they cannot be compared") from None
        if wrong:
            raise Sql92Error("Illegal values of between, left value must less than or equal to right value")
    return _logic(AND, _relational(GE, value, low), _relational(LE, value, high))


def _typed(n: _Node):
    if n.op == TRUE:
        return ("B", True)
    if n.op == FALSE:
        return ("B", False)
    return ({INT: "I", LONG: "L", DOUBLE: "D", STR: "S"}[n.op], n.value)


# Java's String-to-number conversions, as the evaluator applies them to property values
INTEGER_RE = re.compile(r"[+-]?[0-9]+\Z", re.ASCII)
DOUBLE_RE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)\Z", re.ASCII)


def java_parse(kind: str, s: str):
    """Integer.valueOf / Long.valueOf / Double.valueOf of a string, or ValueError."""
    if kind in ("I", "L"):
        if not INTEGER_RE.match(s):
            raise ValueError(s)
        v = int(s)
        lo, hi = (INT_MIN, INT_MAX) if kind == "I" else (LONG_MIN, LONG_MAX)
        if not lo <= v <= hi:
            raise ValueError(s)
        return v
    t = s.strip("".join(map(chr, range(33))))  # String.trim: every char <= ' '
    if not DOUBLE_RE.match(t):
        raise ValueError(s)
    t = t.rstrip("fFdD")
    return float(t.replace("Infinity", "inf").replace("NaN", "nan"))


def java_double_compare(a: float, b: float) -> int:
    """Double.compareTo: NaN above everything and equal to itself, -0.0 below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    ka = (1, 0) if math.isnan(a) else (0, math.copysign(1, a))
    kb = (1, 0) if math.isnan(b) else (0, math.copysign(1, b))
    return (ka > kb) - (ka < kb)


def java_compare(lv: tuple, rv: tuple) -> int:
    """ComparisonExpression.__compare with convertStringExpressions on: typed values (kind, value),
    kinds I, L, D, S, B. ValueError: a failed conversion; TypeError: Java's ClassCastException."""
    lk, lx = lv
    rk, rx = rv
    if lk != rk:
        if lk == "B":
            if rk == "S":
                raise TypeError("Boolean cannot be cast to String")
            return -1
        if lk in "ILD":
            if rk == "S":
                rk, rx = lk, java_parse(lk, rx)
            elif rk in "ILD":
                kind = "D" if "D" in (lk, rk) else "L"
                lk = rk = kind
                if kind == "D":
                    lx, rx = float(lx), float(rx)
            else:
                return -1
        elif lk == "S":
            if rk == "B":
                lk, lx = "B", lx.isascii() and lx.lower() == "true"  # Boolean.valueOf
            elif rk in "ILD":
                lk, lx = rk, java_parse(rk, lx)
            else:
                return -1
    if lk == "D":
        return java_double_compare(lx, rx)
    if lk == "S":  # only equality reads a string comparison's sign (== 0)
        return (lx > rx) - (lx < rx)
    return (lx > rx) - (lx < rx)


# -- the parser -----------------------------------------------------------------------------------
class _Parser:
    def __init__(self, text: str):
        self.lx = _Lexer(text)
        self.depth = 0

    def _nest(self):
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise Sql92Error(f"the expression nests deeper than {MAX_NESTING} levels")

    def selector(self) -> _Node:
        # JmsSelector: orExpression, then nothing more is read (no <EOF> in RocketMQ's grammar)
        return _as_boolean(self.or_expr())

    def or_expr(self) -> _Node:
        left = self.and_expr()
        while self.lx.peek()[0] == "OR":
            self.lx.take()
            left = _logic(OR, _as_boolean(left), _as_boolean(self.and_expr()))
        return left

    def and_expr(self) -> _Node:
        left = self.equality()
        while self.lx.peek()[0] == "AND":
            self.lx.take()
            left = _logic(AND, _as_boolean(left), _as_boolean(self.equality()))
        return left

    def equality(self) -> _Node:
        lx = self.lx
        left = self.comparison()
        while True:
            kind = lx.peek()[0]
            if kind == "=":
                lx.take()
                left = _equal(left, self.comparison())
            elif kind == "<>":
                lx.take()
                left = _Node(NOT, [_equal(left, self.comparison())])
            elif kind == "IS":
                if lx.peek(1)[0] == "NULL":
                    lx.take(), lx.take()
                    left = _Node(EQ, [left, _Node(NULL, boolconst=True)])
                else:
                    lx.take(), lx.take("NOT"), lx.take("NULL")
                    left = _Node(NOT, [_Node(EQ, [left, _Node(NULL, boolconst=True)])])
            else:
                return left

    def _strings(self) -> list[str]:
        self.lx.take("(")
        out = [self.string()]
        while self.lx.peek()[0] == ",":
            self.lx.take()
            out.append(self.string())
        self.lx.take(")")
        return out

    def comparison(self) -> _Node:
        lx = self.lx
        left = self.unary()
        rel = {">": GT, ">=": GE, "<": LT, "<=": LE}
        while True:
            kind = lx.peek()[0]
            if kind in rel:
                lx.take()
                left = _relational(rel[kind], left, self.unary())
            elif kind in STRING_OPS:
                lx.take()
                left = _Node(STRING_OPS[kind], [left], self.string())
            elif kind == "BETWEEN":
                lx.take()
                low = self.unary()
                lx.take("AND")
                left = _between(left, low, self.unary())
            elif kind == "IN":
                lx.take()
                left = self._in(IN, left)
            elif kind == "NOT":
                nxt = lx.peek(1)[0]
                if nxt in NEGATED_STRING_OPS:
                    lx.take(), lx.take()
                    left = _Node(NEGATED_STRING_OPS[nxt], [left], self.string())
                elif nxt == "BETWEEN":
                    lx.take(), lx.take()
                    low = self.unary()
                    lx.take("AND")
                    high = self.unary()
                    left = _logic(OR, _relational(LT, left, low), _relational(GT, left, high))
                else:
                    lx.take(), lx.take("IN")
                    left = self._in(NOT_IN, left)
            else:
                return left

    def _in(self, op: int, left: _Node) -> _Node:
        values = self._strings()
        if left.op != PROP:
            raise Sql92Error("Expected a property for In expression")
        return _Node(op, [left], values)

    def string(self) -> str:
        image = self.lx.take("STRING")[1]
        return image[1:-1].replace("''", "'")

    def unary(self) -> _Node:
        lx = self.lx
        kind = lx.peek()[0]
        if kind in ("+", "-", "NOT"):
            lx.take()
            self._nest()
            inner = self.unary()
            self.depth -= 1
            if kind == "+":
                return inner
            if kind == "-":
                return _Node(NEG, [inner])
            return _Node(NOT, [_as_boolean(inner)])
        return self.primary()

    def primary(self) -> _Node:
        kind, image = self.lx.take()
        if kind == "STRING":
            return _Node(STR, value=image[1:-1].replace("''", "'"))
        if kind == "DECIMAL":
            try:
                v = int(image.rstrip("lL"))
            except ValueError:
                raise Sql92Error(f"{image} is not a number") from None
            if not LONG_MIN <= v <= LONG_MAX:
                raise Sql92Error(f"{image} does not fit in a long")
            return _Node(INT if INT_MIN <= v <= INT_MAX else LONG, value=v)
        if kind == "FLOAT":
            v = float(image)
            if v > 1.7976931348623157e308:
                raise Sql92Error(f"{image} is greater than Double.MAX_VALUE")
            if v < DOUBLE_MIN_VALUE:
                raise Sql92Error(f"{image} is less than Double.MIN_VALUE")
            return _Node(DOUBLE, value=v)
        if kind in ("TRUE", "FALSE", "NULL"):
            return _Node({"TRUE": TRUE, "FALSE": FALSE, "NULL": NULL}[kind], boolconst=True)
        if kind == "ID":
            return _Node(PROP, value=image)
        if kind == "(":
            self._nest()
            inner = self.or_expr()
            self.depth -= 1
            self.lx.take(")")
            return inner
        raise Sql92Error(f"Encountered {image or '<EOF>'!r} where a value was expected")


# -- the program ----------------------------------------------------------------------------------
def _blob(s: str) -> bytes:
    b = s.encode("utf-8", "surrogatepass")
    return struct.pack(">I", len(b)) + b


def _emit(n: _Node, out: bytearray) -> None:
    op = n.op
    out.append(op)
    if op == INT:
        out += struct.pack(">i", n.value)
    elif op == LONG:
        out += struct.pack(">q", n.value)
    elif op == DOUBLE:
        out += struct.pack(">d", n.value)
    elif op in (STR, PROP):
        out += _blob(n.value)
    elif op in (AND, OR):
        if len(n.kids) > 0xFFFF:
            raise Sql92Error("more than 65535 terms joined by one operator")
        out += struct.pack(">H", len(n.kids))
        for k in n.kids:
            _emit(k, out)
    elif op in (IN, NOT_IN):
        _emit(n.kids[0], out)
        out += struct.pack(">I", len(n.value))
        for s in n.value:
            out += _blob(s)
    elif op in STRING_OPS.values() or op in NEGATED_STRING_OPS.values():
        _emit(n.kids[0], out)
        out += _blob(n.value)
    else:
        for k in n.kids:
            _emit(k, out)


def _depth(tree: _Node) -> int:
    deepest, todo = 0, [(tree, 1)]
    while todo:
        n, d = todo.pop()
        deepest = max(deepest, d)
        todo.extend((k, d + 1) for k in n.kids)
    return deepest


@functools.lru_cache(maxsize=1024)
def _compile_cached(expression: str) -> bytes | Sql92Error:
    try:
        tree = _Parser(expression).selector()
        if _depth(tree) > MAX_DEPTH:
            raise Sql92Error(f"the expression nests deeper than {MAX_DEPTH} levels")
        out = bytearray()
        _emit(tree, out)
        return bytes(out)
    except Sql92Error as e:
        return e


def compile_sql92(expression: str) -> bytes:
    """The program of an SQL92 expression (cached by its text, errors too, as RocketMQ's
    SelectorParser caches), or Sql92Error."""
    if not isinstance(expression, str):
        raise Sql92Error("the expression is not a string")
    r = _compile_cached(expression)
    if isinstance(r, Sql92Error):
        raise Sql92Error(str(r))
    return r
