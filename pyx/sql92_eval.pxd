# The SQL92 evaluator (program layout: broker/server/filter/sql92.py; semantics: RocketMQ's
# ComparisonExpression, UnaryExpression and LogicExpression; twin: tests/twins/sql92_twin.py).
# Inline here so the consume-queue scan (queue_read.pyx) evaluates each record's stored
# properties in place, without a Python object per message; sql92.pyx wraps it for Python.
#
# A program is checked once (sql_valid) before it is evaluated: sql_eval trusts its structure.
# sql_eval returns 0 with a value, or 1 where Java throws (a failed number conversion, a cast):
# then the message does not match, whatever surrounds the failing part.
from libc.math cimport INFINITY, NAN, isnan
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc, strtod
from libc.string cimport memcmp, memcpy

from bytesex cimport get_be16, get_be32, get_be64
from record cimport RECORD_SYSFLAG_BORNHOST_V6, RECORD_SYSFLAG_STOREHOST_V6

cdef enum:
    OP_NULL = 0x01
    OP_TRUE = 0x02
    OP_FALSE = 0x03
    OP_INT = 0x04
    OP_LONG = 0x05
    OP_DOUBLE = 0x06
    OP_STR = 0x07
    OP_PROP = 0x08
    OP_NEG = 0x10
    OP_NOT = 0x11
    OP_CAST = 0x12
    OP_AND = 0x13
    OP_OR = 0x14
    OP_EQ = 0x15
    OP_GT = 0x16
    OP_GE = 0x17
    OP_LT = 0x18
    OP_LE = 0x19
    OP_CONTAINS = 0x1A
    OP_NOT_CONTAINS = 0x1B
    OP_STARTSWITH = 0x1C
    OP_NOT_STARTSWITH = 0x1D
    OP_ENDSWITH = 0x1E
    OP_NOT_ENDSWITH = 0x1F
    OP_IN = 0x20
    OP_NOT_IN = 0x21
    SQL_MAX_DEPTH = 256

cdef enum:  # a value's Java class
    V_NULL = 0
    V_BOOL = 1
    V_INT = 2
    V_LONG = 3
    V_DOUBLE = 4
    V_STR = 5


cdef struct SqlVal:
    int kind
    int64_t i            # a Boolean (0/1), Integer or Long
    double d
    const uint8_t *s     # a String: bytes in the program or the record's properties
    Py_ssize_t n


cdef struct SqlCtx:
    const uint8_t *p
    Py_ssize_t n
    Py_ssize_t pos
    const uint8_t *props
    Py_ssize_t props_n


# -- structure ------------------------------------------------------------------------------------
cdef inline bint _blob(SqlCtx *c, const uint8_t **s, Py_ssize_t *n) noexcept nogil:
    cdef uint64_t ln
    if c.n - c.pos < 4:
        return False
    ln = get_be32(c.p + c.pos)
    c.pos += 4
    if ln > <uint64_t> (c.n - c.pos):
        return False
    s[0] = c.p + c.pos
    n[0] = <Py_ssize_t> ln
    c.pos += <Py_ssize_t> ln
    return True


cdef inline bint sql_skip(SqlCtx *c, int depth) noexcept nogil:
    """Over one node, checking it: False for a malformed program."""
    cdef int op
    cdef uint64_t k, cnt
    cdef const uint8_t *s = NULL
    cdef Py_ssize_t n = 0
    if depth > SQL_MAX_DEPTH or c.pos >= c.n:
        return False
    op = c.p[c.pos]
    c.pos += 1
    if op == OP_NULL or op == OP_TRUE or op == OP_FALSE:
        return True
    if op == OP_INT:
        if c.n - c.pos < 4:
            return False
        c.pos += 4
        return True
    if op == OP_LONG or op == OP_DOUBLE:
        if c.n - c.pos < 8:
            return False
        c.pos += 8
        return True
    if op == OP_STR or op == OP_PROP:
        return _blob(c, &s, &n)
    if op == OP_NEG or op == OP_NOT or op == OP_CAST:
        return sql_skip(c, depth + 1)
    if op == OP_AND or op == OP_OR:
        if c.n - c.pos < 2:
            return False
        cnt = get_be16(c.p + c.pos)
        c.pos += 2
        if cnt == 0:
            return False
        for k in range(cnt):
            if not sql_skip(c, depth + 1):
                return False
        return True
    if OP_EQ <= op <= OP_LE:
        return sql_skip(c, depth + 1) and sql_skip(c, depth + 1)
    if OP_CONTAINS <= op <= OP_NOT_ENDSWITH:
        return sql_skip(c, depth + 1) and _blob(c, &s, &n)
    if op == OP_IN or op == OP_NOT_IN:
        if not sql_skip(c, depth + 1) or c.n - c.pos < 4:
            return False
        cnt = get_be32(c.p + c.pos)
        c.pos += 4
        for k in range(cnt):
            if not _blob(c, &s, &n):
                return False
        return True
    return False


cdef inline bint sql_valid(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    cdef SqlCtx c
    c.p, c.n, c.pos = p, n, 0
    return sql_skip(&c, 1) and c.pos == n


# -- Java's conversions ---------------------------------------------------------------------------
cdef inline int _parse_integer(const uint8_t *s, Py_ssize_t n, bint is_long, int64_t *out) noexcept nogil:
    """Integer.valueOf / Long.valueOf (ASCII digits): 0, or 1 where Java throws."""
    cdef Py_ssize_t i = 0
    cdef bint neg = False
    cdef uint64_t acc = 0, lim, d
    if n == 0:
        return 1
    if s[0] == 43 or s[0] == 45:  # + -
        neg = s[0] == 45
        i = 1
        if n == 1:
            return 1
    lim = (<uint64_t> 9223372036854775807 if is_long else <uint64_t> 2147483647) + (1 if neg else 0)
    while i < n:
        if s[i] < 48 or s[i] > 57:
            return 1
        d = s[i] - 48
        if acc > (lim - d) // 10:
            return 1
        acc = acc * 10 + d
        i += 1
    out[0] = <int64_t> (<uint64_t> 0 - acc) if neg else <int64_t> acc
    return 0


cdef inline bint _is_digit(uint8_t ch) noexcept nogil:
    return 48 <= ch <= 57


cdef inline int _parse_double(const uint8_t *s, Py_ssize_t n, double *out) noexcept nogil:
    """Double.valueOf (decimal forms, NaN, Infinity; not hexadecimal): 0, or 1 where Java throws."""
    cdef Py_ssize_t a = 0, b = n, i, digits = 0, end
    cdef bint neg = False
    cdef char small[64]
    cdef char *buf
    while a < b and s[a] <= 32:
        a += 1
    while b > a and s[b - 1] <= 32:
        b -= 1
    i = a
    if i < b and (s[i] == 43 or s[i] == 45):
        neg = s[i] == 45
        i += 1
    if b - i == 3 and memcmp(s + i, b"NaN", 3) == 0:
        out[0] = NAN
        return 0
    if b - i == 8 and memcmp(s + i, b"Infinity", 8) == 0:
        out[0] = -INFINITY if neg else INFINITY
        return 0
    while i < b and _is_digit(s[i]):
        i += 1
        digits += 1
    if i < b and s[i] == 46:  # .
        i += 1
        while i < b and _is_digit(s[i]):
            i += 1
            digits += 1
    if digits == 0:
        return 1
    if i < b and (s[i] == 101 or s[i] == 69):  # e E
        i += 1
        if i < b and (s[i] == 43 or s[i] == 45):
            i += 1
        if i >= b or not _is_digit(s[i]):
            return 1
        while i < b and _is_digit(s[i]):
            i += 1
    end = i
    if i < b and (s[i] == 102 or s[i] == 70 or s[i] == 100 or s[i] == 68):  # f F d D
        i += 1
    if i != b:
        return 1
    buf = &small[0]
    if end - a >= 64:
        buf = <char *> malloc(end - a + 1)
    if buf == NULL:
        return 1
    memcpy(buf, s + a, end - a)
    buf[end - a] = 0
    out[0] = strtod(buf, NULL)
    if buf != &small[0]:
        free(buf)
    return 0


cdef inline int64_t _double_bits(double x) noexcept nogil:
    cdef int64_t bits
    if isnan(x):
        return 0x7ff8000000000000
    memcpy(&bits, &x, 8)
    return bits


cdef inline int _double_compare(double a, double b) noexcept nogil:
    """Double.compareTo: NaN above everything and equal to itself, -0.0 below 0.0."""
    cdef int64_t x, y
    if a < b:
        return -1
    if a > b:
        return 1
    x, y = _double_bits(a), _double_bits(b)
    return 0 if x == y else (-1 if x < y else 1)


cdef inline int _to_kind(SqlVal *v, int kind) noexcept nogil:
    """A String or number converted to a numeric class (valueOf / widening): 0, or 1 (Java throws)."""
    if v.kind == V_STR:
        if kind == V_DOUBLE:
            if _parse_double(v.s, v.n, &v.d):
                return 1
        elif _parse_integer(v.s, v.n, kind == V_LONG, &v.i):
            return 1
    elif kind == V_DOUBLE and v.kind != V_DOUBLE:
        v.d = <double> v.i
    v.kind = kind
    return 0


cdef inline bint _ascii_true(const uint8_t *s, Py_ssize_t n) noexcept nogil:
    """Boolean.valueOf: "true", any case."""
    return n == 4 and (s[0] | 0x20) == 116 and (s[1] | 0x20) == 114 and (s[2] | 0x20) == 117 \
        and (s[3] | 0x20) == 101


cdef inline int sql_compare(SqlVal l, SqlVal r, int *res) noexcept nogil:
    """ComparisonExpression.__compare with string conversion on: 0 with res, or 1 (Java throws)."""
    cdef int target
    cdef Py_ssize_t m
    cdef int k
    if l.kind != r.kind:
        if l.kind == V_BOOL:
            if r.kind == V_STR:
                return 1  # Boolean cast to String: ClassCastException
            res[0] = -1
            return 0
        if l.kind == V_INT or l.kind == V_LONG or l.kind == V_DOUBLE:
            if r.kind == V_STR:
                if _to_kind(&r, l.kind):
                    return 1
            elif r.kind == V_INT or r.kind == V_LONG or r.kind == V_DOUBLE:
                target = V_DOUBLE if (l.kind == V_DOUBLE or r.kind == V_DOUBLE) else V_LONG
                _to_kind(&l, target)
                _to_kind(&r, target)
            else:
                res[0] = -1
                return 0
        elif l.kind == V_STR:
            if r.kind == V_BOOL:
                l.i = _ascii_true(l.s, l.n)
                l.kind = V_BOOL
            elif r.kind == V_INT or r.kind == V_LONG or r.kind == V_DOUBLE:
                if _to_kind(&l, r.kind):
                    return 1
            else:
                res[0] = -1
                return 0
        else:
            res[0] = -1
            return 0
    if l.kind == V_DOUBLE:
        res[0] = _double_compare(l.d, r.d)
    elif l.kind == V_STR:
        m = l.n if l.n < r.n else r.n
        k = memcmp(l.s, r.s, m) if m else 0
        res[0] = (1 if k > 0 else -1) if k else (0 if l.n == r.n else (-1 if l.n < r.n else 1))
    else:
        res[0] = 0 if l.i == r.i else (-1 if l.i < r.i else 1)
    return 0


# -- properties -----------------------------------------------------------------------------------
cdef inline bint sql_property(const uint8_t *props, Py_ssize_t pn, const uint8_t *name, Py_ssize_t nn,
                              SqlVal *out) noexcept nogil:
    """MessageDecoder.string2messageProperties' value of `name`: pieces at \\x02, each split at its
    first \\x01, kept with a non-empty key and value; the last such piece wins."""
    cdef Py_ssize_t i = 0, j, k
    cdef bint found = False
    while i < pn:
        j = i
        while j < pn and props[j] != 2:
            j += 1
        k = i
        while k < j and props[k] != 1:
            k += 1
        if i < k < j - 1 and k - i == nn and memcmp(props + i, name, nn) == 0:
            out.kind, out.s, out.n = V_STR, props + k + 1, j - k - 1
            found = True
        i = j + 1
    return found


# -- evaluation -----------------------------------------------------------------------------------
cdef inline int sql_eval(SqlCtx *c, SqlVal *out) noexcept nogil:
    cdef int op = c.p[c.pos]
    cdef SqlVal a, b
    cdef const uint8_t *s = NULL
    cdef const uint8_t *t = NULL
    cdef Py_ssize_t n = 0, m = 0, start, end
    cdef uint64_t k, cnt, left
    cdef uint64_t bits
    cdef int cmp, decide
    cdef bint saw_null, hit
    c.pos += 1
    out.kind = V_NULL
    if op == OP_NULL:
        return 0
    if op == OP_TRUE or op == OP_FALSE:
        out.kind, out.i = V_BOOL, op == OP_TRUE
        return 0
    if op == OP_INT:
        out.kind, out.i = V_INT, <int32_t> get_be32(c.p + c.pos)
        c.pos += 4
        return 0
    if op == OP_LONG:
        out.kind, out.i = V_LONG, <int64_t> get_be64(c.p + c.pos)
        c.pos += 8
        return 0
    if op == OP_DOUBLE:
        bits = get_be64(c.p + c.pos)
        memcpy(&out.d, &bits, 8)
        out.kind = V_DOUBLE
        c.pos += 8
        return 0
    if op == OP_STR:
        _blob(c, &out.s, &out.n)
        out.kind = V_STR
        return 0
    if op == OP_PROP:
        _blob(c, &s, &n)
        sql_property(c.props, c.props_n, s, n, out)
        return 0
    if op == OP_NEG:
        if sql_eval(c, &a):
            return 1
        if a.kind == V_INT:
            out.kind, out.i = V_INT, <int32_t> (<uint64_t> 0 - <uint64_t> a.i)
        elif a.kind == V_LONG:
            out.kind, out.i = V_LONG, <int64_t> (<uint64_t> 0 - <uint64_t> a.i)
        elif a.kind == V_DOUBLE:
            out.kind, out.d = V_DOUBLE, -a.d
        return 0
    if op == OP_NOT or op == OP_CAST:
        if sql_eval(c, &a):
            return 1
        if a.kind == V_NULL:
            return 0
        if op == OP_NOT:
            if a.kind != V_BOOL:
                return 1  # (Boolean) of another class
            out.kind, out.i = V_BOOL, not a.i
        else:
            out.kind, out.i = V_BOOL, a.i if a.kind == V_BOOL else 0
        return 0
    if op == OP_AND or op == OP_OR:
        cnt = get_be16(c.p + c.pos)
        c.pos += 2
        decide = op == OP_OR  # the value that settles it: TRUE for OR, FALSE for AND
        saw_null = False
        for k in range(cnt):
            if sql_eval(c, &a):
                return 1
            if a.kind != V_NULL and a.kind != V_BOOL:
                return 1
            if a.kind == V_BOOL and a.i == decide:
                for left in range(cnt - k - 1):
                    sql_skip(c, 1)
                out.kind, out.i = V_BOOL, decide
                return 0
            saw_null = saw_null or a.kind == V_NULL
        if not saw_null:
            out.kind, out.i = V_BOOL, not decide
        return 0
    if op == OP_EQ:
        if sql_eval(c, &a) or sql_eval(c, &b):
            return 1
        if (a.kind == V_NULL) != (b.kind == V_NULL):
            if a.kind != V_NULL:
                out.kind, out.i = V_BOOL, 0
            return 0
        if a.kind == V_NULL:
            out.kind, out.i = V_BOOL, 1
            return 0
        if sql_compare(a, b, &cmp):
            return 1
        out.kind, out.i = V_BOOL, cmp == 0
        return 0
    if OP_GT <= op <= OP_LE:
        if sql_eval(c, &a):
            return 1
        if a.kind == V_NULL:
            sql_skip(c, 1)
            return 0
        if sql_eval(c, &b):
            return 1
        if b.kind == V_NULL:
            return 0
        if a.kind == V_STR and b.kind == V_STR:
            if _to_kind(&a, V_DOUBLE) or _to_kind(&b, V_DOUBLE):
                return 1
        if sql_compare(a, b, &cmp):
            return 1
        out.kind = V_BOOL
        out.i = cmp > 0 if op == OP_GT else (cmp >= 0 if op == OP_GE else (cmp < 0 if op == OP_LT else cmp <= 0))
        return 0
    if OP_CONTAINS <= op <= OP_NOT_ENDSWITH:
        start = c.pos
        sql_skip(c, 1)
        _blob(c, &t, &m)
        out.kind, out.i = V_BOOL, 0
        if m == 0:
            return 0
        end = c.pos
        c.pos = start
        if sql_eval(c, &a):
            return 1
        c.pos = end
        if a.kind != V_STR:
            return 0
        if op == OP_CONTAINS or op == OP_NOT_CONTAINS:
            hit = False
            for n in range(a.n - m + 1):
                if memcmp(a.s + n, t, m) == 0:
                    hit = True
                    break
        elif op == OP_STARTSWITH or op == OP_NOT_STARTSWITH:
            hit = a.n >= m and memcmp(a.s, t, m) == 0
        else:
            hit = a.n >= m and memcmp(a.s + a.n - m, t, m) == 0
        out.i = hit != ((op - OP_CONTAINS) & 1)
        return 0
    if op == OP_IN or op == OP_NOT_IN:
        if sql_eval(c, &a):
            return 1
        cnt = get_be32(c.p + c.pos)
        c.pos += 4
        hit = False
        for k in range(cnt):
            _blob(c, &t, &m)
            if a.kind == V_STR and m == a.n and memcmp(t, a.s, m) == 0:
                hit = True
        if a.kind == V_STR:
            out.kind, out.i = V_BOOL, hit != (op == OP_NOT_IN)
        return 0
    return 1  # (sql_valid refuses every other opcode)


cdef inline bint sql_matches(const uint8_t *prog, Py_ssize_t n, const uint8_t *props, Py_ssize_t pn) noexcept nogil:
    """Whether a message with these stored properties matches a checked program (sql_valid)."""
    cdef SqlCtx c
    cdef SqlVal v
    c.p, c.n, c.pos, c.props, c.props_n = prog, n, 0, props, pn
    if sql_eval(&c, &v):
        return False
    return v.kind == V_BOOL and v.i == 1


cdef inline bint record_properties(const uint8_t *rec, Py_ssize_t size, const uint8_t **props,
                                   Py_ssize_t *pn) noexcept nogil:
    """A stored record's properties field (docs/formats.md §1); False if the record is too short
    for the lengths it states."""
    cdef Py_ssize_t pos
    cdef uint64_t sys_flag, body
    if size < 91 - 16:
        return False
    sys_flag = get_be32(rec + 36)
    pos = 48 + (20 if sys_flag & RECORD_SYSFLAG_BORNHOST_V6 else 8) + 8
    pos += (20 if sys_flag & RECORD_SYSFLAG_STOREHOST_V6 else 8) + 4 + 8
    if pos + 4 > size:
        return False
    body = get_be32(rec + pos)
    if body > <uint64_t> (size - pos - 4):
        return False
    pos += 4 + <Py_ssize_t> body
    if pos + 1 > size:
        return False
    pos += 1 + rec[pos]
    if pos + 2 > size:
        return False
    pn[0] = get_be16(rec + pos)
    pos += 2
    if pn[0] > size - pos:
        return False
    props[0] = rec + pos
    return True
