# cython: language_level=3
"""Parses and renders RocketMQ 4.x remoting headers: JSON (serialize type 0) and RocketMQSerializable's
binary layout (type 1, what Java clients send with rocketmq.serialize.type=ROCKETMQ).

The C interface is header.pxd: the parsers fill a RemotingHeader and the caller's HeaderField array
with spans of the input, creating no Python object; the acceptance rules are docs/formats.md §4.
The Python functions here (decode_header, encode_header, parse_fields) serve the slow path, the
tests and the fuzz harness. Bad input raises HeaderError naming the offset; nothing is read outside
[p, p+n) and nothing recurses (containers are skipped with a fixed stack of HEADER_MAX_DEPTH).
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport INT32_MAX, INT64_MAX, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, strlen

from bytesex cimport get_be16, get_be32
from utf8 cimport UTF8_BAD_LEAD, UTF8_TRUNCATED, utf8_sequence

cdef extern from "Python.h":
    ctypedef struct PyObject
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    object _PyDict_NewPresized(Py_ssize_t minused)
    void *PyUnicode_DATA(PyObject *o)
    Py_ssize_t PyUnicode_GET_LENGTH(PyObject *o)
    void Py_INCREF(PyObject *o)
    void Py_XDECREF(PyObject *o)

globals()["HEADER_MAX_DEPTH"] = HEADER_MAX_DEPTH
globals()["LANGUAGE_OTHER"] = LANGUAGE_OTHER
for _name, _v in (("V_STRING", V_STRING), ("V_ESCAPED", V_ESCAPED), ("V_INT", V_INT), ("V_NUMBER", V_NUMBER),
                  ("V_TRUE", V_TRUE), ("V_FALSE", V_FALSE), ("V_NULL", V_NULL), ("V_RAW", V_RAW),
                  ("V_BYTES", V_BYTES)):
    globals()[_name] = _v
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1


class HeaderError(ValueError):
    """A header that cannot be valid: the request is refused (and its connection closed)."""

    def __init__(self, offset, reason):
        super().__init__(f"bad remoting header at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


# ---------------------------------------------------------------------------------------------
# Tables

cdef enum:
    C_TAB = 9
    C_LF = 10
    C_CR = 13
    C_SPACE = 32
    C_QUOTE = 34
    C_PLUS = 43
    C_COMMA = 44
    C_MINUS = 45
    C_DOT = 46
    C_ZERO = 48
    C_NINE = 57
    C_COLON = 58
    C_LBRACKET = 91
    C_BACKSLASH = 92
    C_RBRACKET = 93
    C_LBRACE = 123
    C_RBRACE = 125
    EXT_STACK = 64          # ext fields decode_header parses into without allocating

# LanguageCode (remoting/protocol/LanguageCode.java): the ordinal is the index. NODE_JS is 5.x's.
LANGUAGE_NAMES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
                  "OMS", "RUST", "NODE_JS")
cdef int N_LANGS = 14
cdef const char *LANGS[14]
LANGS[:] = [b"JAVA", b"CPP", b"DOTNET", b"PYTHON", b"DELPHI", b"ERLANG", b"RUBY", b"OTHER", b"HTTP", b"GO", b"PHP",
            b"OMS", b"RUST", b"NODE_JS"]

cdef uint8_t PLAIN[256]      # 1: a byte a JSON string holds as is (printable ASCII but " and \)
cdef uint8_t UNESC[256]      # the byte a 2-character escape stands for, 0 if not an escape
cdef int8_t HEXVAL[256]
cdef int _i
for _i in range(256):
    PLAIN[_i] = 1 if 0x20 <= _i < 0x80 and _i != C_QUOTE and _i != C_BACKSLASH else 0
    UNESC[_i] = 0
    HEXVAL[_i] = -1
for _i in range(10):
    HEXVAL[48 + _i] = _i
for _i in range(6):
    HEXVAL[65 + _i] = 10 + _i
    HEXVAL[97 + _i] = 10 + _i
for _i, _c in ((C_QUOTE, C_QUOTE), (C_BACKSLASH, C_BACKSLASH), (47, 47), (98, 8), (102, 12), (110, 10),
               (114, 13), (116, 9)):
    UNESC[_i] = _c
cdef uint8_t EMPTY[1]


cdef int language_ordinal(const uint8_t *name, Py_ssize_t n) noexcept:
    cdef int i
    for i in range(N_LANGS):
        if <Py_ssize_t> strlen(LANGS[i]) == n and memcmp(LANGS[i], name, n) == 0:
            return i
    return -1


cdef const char *language_name(int ordinal) noexcept:
    if 0 <= ordinal < N_LANGS:
        return LANGS[ordinal]
    return NULL


# ---------------------------------------------------------------------------------------------
# JSON scanning. Every function takes the buffer end n and checks before it reads.

cdef int _fail(Py_ssize_t offset, reason) except -1:
    raise HeaderError(offset, reason)


cdef inline Py_ssize_t _ws(const uint8_t *p, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    while i < n and (p[i] == C_SPACE or p[i] == C_LF or p[i] == C_CR or p[i] == C_TAB):
        i += 1
    return i


cdef inline bint _is_digit(uint8_t c) noexcept nogil:
    return C_ZERO <= c <= C_NINE


cdef inline int _hex4(const uint8_t *q) noexcept nogil:
    """The value of 4 hex digits, -1 if one is not."""
    cdef int a = HEXVAL[q[0]], b = HEXVAL[q[1]], c = HEXVAL[q[2]], d = HEXVAL[q[3]]
    if (a | b | c | d) < 0:
        return -1
    return (a << 12) | (b << 8) | (c << 4) | d


cdef extern from *:
    """
    /* bytesex.h already takes the host for little-endian; the string scan's first-byte trick too */
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    #error "broker.kernels.header assumes a little-endian host"
    #endif
    static inline int hdr_ctz64(uint64_t x) { return __builtin_ctzll(x); }
    """
    int hdr_ctz64(uint64_t x) noexcept nogil


cdef inline uint64_t _word_special(uint64_t x) noexcept nogil:
    """The high bit of each of 8 bytes (loaded little-endian) a string scan must look at: < 0x20,
    '"', '\\', or non-ASCII (SWAR). A borrow can mark bytes above a marked one, never below,
    so the lowest mark is exact: it is where the scan stops."""
    cdef uint64_t ones = 0x0101010101010101ULL
    cdef uint64_t q = x ^ (ones * C_QUOTE)
    cdef uint64_t b = x ^ (ones * C_BACKSLASH)
    return (x | ((x - ones * 0x20) & ~x) | ((q - ones) & ~q) | ((b - ones) & ~b)) & (ones * 0x80)


cdef Py_ssize_t _utf8(const uint8_t *p, Py_ssize_t n, Py_ssize_t i) except -1:
    """Past the UTF-8 sequence whose lead byte (>= 0x80) is at i. Refuses what the Unicode standard
    calls ill-formed: continuation or C0/C1 leads (overlong), E0 below A0 and F0 below 90
    (overlong), ED above 9F (a surrogate), F4 above 8F and F5.. (beyond U+10FFFF)."""
    cdef Py_ssize_t k = utf8_sequence(p, n, i)
    if k > 0:
        return i + k
    if k == UTF8_BAD_LEAD:
        return _fail(i, f"invalid UTF-8 byte 0x{p[i]:02x}")
    if k == UTF8_TRUNCATED:
        return _fail(i, "truncated UTF-8 sequence")
    return _fail(i, "invalid UTF-8 sequence")


cdef int _check_utf8(const uint8_t *p, Py_ssize_t start, Py_ssize_t end) except -1:
    """A ROCKETMQ string span [start, end) must be valid UTF-8, as every span the parsers report."""
    cdef Py_ssize_t i = start
    cdef uint64_t x
    while i < end:
        while end - i >= 8:
            memcpy(&x, p + i, 8)
            if x & 0x8080808080808080ULL:
                break
            i += 8
        while i < end and p[i] < 0x80:
            i += 1
        if i < end:
            i = _utf8(p, end, i)
    return 0


cdef Py_ssize_t _string(const uint8_t *p, Py_ssize_t n, Py_ssize_t i, uint8_t *escaped) except -1:
    """i is just past an opening quote: the position of the closing quote. Checks escapes
    (surrogate pairs whole), UTF-8, and that no raw control character is inside."""
    cdef uint64_t x, m
    cdef uint8_t c
    cdef int cu, lo
    escaped[0] = 0
    while True:
        while n - i >= 8:
            memcpy(&x, p + i, 8)
            m = _word_special(x)
            if m:
                i += hdr_ctz64(m) >> 3
                break
            i += 8
        while i < n and PLAIN[p[i]]:
            i += 1
        if i >= n:
            return _fail(i, "unterminated string")
        c = p[i]
        if c == C_QUOTE:
            return i
        if c == C_BACKSLASH:
            escaped[0] = 1
            if n - i < 2:
                return _fail(i, "unterminated string")
            c = p[i + 1]
            if c == 117:  # \uXXXX
                if n - i < 6 or _hex4(p + i + 2) < 0:
                    return _fail(i, "bad \\u escape")
                cu = _hex4(p + i + 2)
                if 0xD800 <= cu <= 0xDBFF:
                    # a high surrogate counts only with its low half right after it
                    if n - i < 12 or p[i + 6] != C_BACKSLASH or p[i + 7] != 117:
                        return _fail(i, "lone surrogate escape")
                    lo = _hex4(p + i + 8)
                    if lo < 0xDC00 or lo > 0xDFFF:
                        return _fail(i, "lone surrogate escape")
                    i += 12
                elif 0xDC00 <= cu <= 0xDFFF:
                    return _fail(i, "lone surrogate escape")
                else:
                    i += 6
            elif UNESC[c]:
                i += 2
            else:
                return _fail(i, f"bad escape \\{chr(c)!r}")
        elif c < 0x20:
            return _fail(i, f"control character 0x{c:02x} inside a string")
        else:
            i = _utf8(p, n, i)


cdef Py_ssize_t _number(const uint8_t *p, Py_ssize_t n, Py_ssize_t i, int64_t *ival, uint8_t *kind) except -1:
    """A JSON number at i (JSON's grammar: no '+', no leading zero, digits after '.' and 'e');
    its end. V_INT with its value when it is an integer within int64, else V_NUMBER."""
    cdef Py_ssize_t start = i
    cdef bint neg = False, integral = True, overflow = False
    cdef uint64_t m = 0, d
    if p[i] == C_MINUS:
        neg = True
        i += 1
    if i >= n or not _is_digit(p[i]):
        return _fail(start, "bad number")
    if p[i] == C_ZERO:
        i += 1
        if i < n and _is_digit(p[i]):
            return _fail(start, "number with a leading zero")
    else:
        while i < n and _is_digit(p[i]):
            d = p[i] - C_ZERO
            # m * 10 + d would pass 2^64 - 1 = 18446744073709551615 (no division per digit: it
            # cost a header of 30 numbers 60 % of its parse)
            if overflow or m > 1844674407370955161ULL or (m == 1844674407370955161ULL and d > 5):
                overflow = True
            else:
                m = m * 10 + d
            i += 1
    if i < n and p[i] == C_DOT:
        i += 1
        if i >= n or not _is_digit(p[i]):
            return _fail(start, "bad number: no digit after '.'")
        while i < n and _is_digit(p[i]):
            i += 1
        integral = False
    if i < n and (p[i] == 101 or p[i] == 69):  # e E
        i += 1
        if i < n and (p[i] == C_PLUS or p[i] == C_MINUS):
            i += 1
        if i >= n or not _is_digit(p[i]):
            return _fail(start, "bad number: no digit in the exponent")
        while i < n and _is_digit(p[i]):
            i += 1
        integral = False
    if integral and not overflow and (m <= <uint64_t> INT64_MAX or (neg and m == (<uint64_t> INT64_MAX) + 1)):
        kind[0] = V_INT
        ival[0] = <int64_t> ((<uint64_t> 0) - m) if neg else <int64_t> m
    else:
        kind[0] = V_NUMBER
        ival[0] = 0
    return i


cdef Py_ssize_t _literal(const uint8_t *p, Py_ssize_t n, Py_ssize_t i, const char *word, Py_ssize_t wl) except -1:
    if n - i < wl or memcmp(p + i, word, wl) != 0:
        return _fail(i, f"unexpected character {chr(p[i])!r}")
    return i + wl


cdef Py_ssize_t _member_value(const uint8_t *p, Py_ssize_t n, Py_ssize_t i) except -1:
    """At a member of a skipped object: past `"key" :` to the value (which must be there)."""
    cdef uint8_t esc
    if i >= n or p[i] != C_QUOTE:
        return _fail(i, "expected a key")
    i = _ws(p, n, _string(p, n, i + 1, &esc) + 1)
    if i >= n or p[i] != C_COLON:
        return _fail(i, "expected ':'")
    i = _ws(p, n, i + 1)
    if i >= n:
        return _fail(i, "expected a value")
    return i


cdef Py_ssize_t _skip_container(const uint8_t *p, Py_ssize_t n, Py_ssize_t i, int depth) except -1:
    """p[i] opens an array or object at `depth`: the position after its close. Iterative: the
    open containers are a fixed stack, so hostile nesting costs no C stack (issue 7)."""
    cdef uint8_t stack[HEADER_MAX_DEPTH + 1]
    cdef int top = 0
    cdef uint8_t c, esc, kind
    cdef int64_t iv
    while True:
        c = p[i]  # i < n: every path to here checked it
        if c == C_LBRACKET or c == C_LBRACE:
            if depth + top > HEADER_MAX_DEPTH:
                return _fail(i, f"nested deeper than {HEADER_MAX_DEPTH}")
            stack[top] = c
            top += 1
            i = _ws(p, n, i + 1)
            if i >= n:
                return _fail(i, "unterminated array or object")
            if p[i] == c + 2:  # ']' is '[' + 2, '}' is '{' + 2
                top -= 1
                i += 1
            else:
                if c == C_LBRACE:
                    i = _member_value(p, n, i)
                continue
        elif c == C_QUOTE:
            i = _string(p, n, i + 1, &esc) + 1
        elif c == C_MINUS or _is_digit(c):
            i = _number(p, n, i, &iv, &kind)
        elif c == 116:
            i = _literal(p, n, i, b"true", 4)
        elif c == 102:
            i = _literal(p, n, i, b"false", 5)
        elif c == 110:
            i = _literal(p, n, i, b"null", 4)
        else:
            return _fail(i, f"unexpected character {chr(c)!r}")
        # a value ended: close what it ends, or move to the next element
        while True:
            if top == 0:
                return i
            i = _ws(p, n, i)
            if i >= n:
                return _fail(i, "unterminated array or object")
            c = p[i]
            if c == C_COMMA:
                i = _ws(p, n, i + 1)
                if stack[top - 1] == C_LBRACE:
                    i = _member_value(p, n, i)
                elif i >= n:
                    return _fail(i, "expected a value")
                break
            if c == stack[top - 1] + 2:
                top -= 1
                i += 1
                continue
            return _fail(i, "expected ',' or the end of an array or object")


cdef Py_ssize_t _value(const uint8_t *p, Py_ssize_t n, Py_ssize_t i, int depth, HeaderField *f) except -1:
    """Any JSON value at i (i < n): its span and kind into f; its end. A container here would be
    at `depth`."""
    cdef uint8_t c = p[i], esc
    cdef Py_ssize_t e
    f.ival = 0
    f.val_pos = i
    if c == C_QUOTE:
        e = _string(p, n, i + 1, &esc)
        f.val_pos = i + 1
        f.val_len = e - i - 1
        f.kind = V_ESCAPED if esc else V_STRING
        return e + 1
    if c == C_MINUS or _is_digit(c):
        e = _number(p, n, i, &f.ival, &f.kind)
    elif c == 116:
        e = _literal(p, n, i, b"true", 4)
        f.kind = V_TRUE
    elif c == 102:
        e = _literal(p, n, i, b"false", 5)
        f.kind = V_FALSE
    elif c == 110:
        e = _literal(p, n, i, b"null", 4)
        f.kind = V_NULL
    elif c == C_LBRACKET or c == C_LBRACE:
        e = _skip_container(p, n, i, depth)
        f.kind = V_RAW
    else:
        return _fail(i, f"unexpected character {chr(c)!r}")
    f.val_len = e - i
    return e


cdef inline void _null_field(HeaderField *f) noexcept nogil:
    f.key_pos = f.key_len = f.val_pos = f.val_len = 0
    f.ival = 0
    f.key_escaped = 0
    f.kind = V_NULL


cdef void _init(RemotingHeader *h) noexcept nogil:
    h.code = h.version = h.opaque = h.flag = 0
    h.language = -1
    _null_field(&h.lang)
    _null_field(&h.remark)
    h.n_ext = h.ext_total = 0


cdef enum TopKey:
    K_OTHER, K_CODE, K_LANGUAGE, K_VERSION, K_OPAQUE, K_FLAG, K_REMARK, K_EXT


cdef int _top_key(const uint8_t *k, Py_ssize_t kl, uint8_t escaped) except -1:
    cdef uint8_t tmp[64]
    if escaped:
        # the longest key we know, "extFields", is 54 bytes even with every letter \u-escaped
        if kl > 64:
            return K_OTHER
        kl = unescape_json(k, kl, tmp)
        k = tmp
    if kl == 4:
        if memcmp(k, b"code", 4) == 0:
            return K_CODE
        if memcmp(k, b"flag", 4) == 0:
            return K_FLAG
    elif kl == 6:
        if memcmp(k, b"opaque", 6) == 0:
            return K_OPAQUE
        if memcmp(k, b"remark", 6) == 0:
            return K_REMARK
    elif kl == 7:
        if memcmp(k, b"version", 7) == 0:
            return K_VERSION
    elif kl == 8:
        if memcmp(k, b"language", 8) == 0:
            return K_LANGUAGE
    elif kl == 9:
        if memcmp(k, b"extFields", 9) == 0:
            return K_EXT
    return K_OTHER


cdef bint _decimal32(const uint8_t *s, Py_ssize_t n, int32_t *out) noexcept:
    """A string's contents as an int32 when they are a JSON integer token (-?(0|[1-9][0-9]*)), as
    msgspec's strict=False took "12" for 12."""
    cdef Py_ssize_t i = 0
    cdef bint neg = False
    cdef int64_t v = 0
    if n > 0 and s[0] == C_MINUS:
        neg = True
        i = 1
    if i >= n or not _is_digit(s[i]):
        return False
    if s[i] == C_ZERO:
        if i + 1 != n:
            return False
        out[0] = 0
        return True
    while i < n:
        if not _is_digit(s[i]):
            return False
        v = v * 10 + (s[i] - C_ZERO)
        if v > 2147483648:
            return False
        i += 1
    if neg:
        v = -v
    if v > INT32_MAX:
        return False
    out[0] = <int32_t> v
    return True


cdef Py_ssize_t _int_field(const uint8_t *p, Py_ssize_t n, Py_ssize_t i, int key, int32_t *out) except -1:
    """code/version/opaque/flag: a JSON integer or a string holding one, within Java's int."""
    cdef uint8_t esc, kind
    cdef int64_t iv
    cdef Py_ssize_t e
    if p[i] == C_QUOTE:
        e = _string(p, n, i + 1, &esc)
        if esc or not _decimal32(p + i + 1, e - i - 1, out):
            return _fail(i, f"{_KEY_NAMES[key]} is the string {p[i:e + 1]!r}, not a 32-bit integer")
        return e + 1
    if p[i] == C_MINUS or _is_digit(p[i]):
        e = _number(p, n, i, &iv, &kind)
        if kind != V_INT or iv < -2147483648 or iv > 2147483647:
            return _fail(i, f"{_KEY_NAMES[key]} is {p[i:e]!r}, not a 32-bit integer")
        out[0] = <int32_t> iv
        return e
    return _fail(i, f"{_KEY_NAMES[key]} must be an integer")


_KEY_NAMES = {K_CODE: "code", K_VERSION: "version", K_OPAQUE: "opaque", K_FLAG: "flag"}


cdef Py_ssize_t _ext_object(const uint8_t *p, Py_ssize_t n, Py_ssize_t i, RemotingHeader *h, HeaderField *ext,
                            Py_ssize_t cap) except -1:
    """extFields' object at i: every member reported in order (the consumer takes the last)."""
    cdef HeaderField scratch
    cdef HeaderField *f
    cdef Py_ssize_t e
    i = _ws(p, n, i + 1)
    if i < n and p[i] == C_RBRACE:
        return i + 1
    while True:
        if i >= n or p[i] != C_QUOTE:
            return _fail(i, "expected a key in extFields")
        # written in place: filling a local and copying it made the copy's wide loads wait on the
        # narrow stores just made (store forwarding), half of this function's time
        f = &ext[h.ext_total] if h.ext_total < cap else &scratch
        e = _string(p, n, i + 1, &f.key_escaped)
        f.key_pos = i + 1
        f.key_len = e - i - 1
        i = _ws(p, n, e + 1)
        if i >= n or p[i] != C_COLON:
            return _fail(i, "expected ':'")
        i = _ws(p, n, i + 1)
        if i >= n:
            return _fail(i, "expected a value")
        i = _value(p, n, i, 3, f)
        if h.ext_total < cap:
            h.n_ext += 1
        h.ext_total += 1
        i = _ws(p, n, i)
        if i < n and p[i] == C_COMMA:
            i = _ws(p, n, i + 1)
            continue
        if i < n and p[i] == C_RBRACE:
            return i + 1
        return _fail(i, "expected ',' or '}' in extFields")


cdef int _language_of(const uint8_t *p, HeaderField *f) except -2:
    cdef uint8_t tmp[64]
    cdef Py_ssize_t n
    if f.kind == V_STRING:
        return language_ordinal(p + f.val_pos, f.val_len)
    if f.kind == V_ESCAPED and f.val_len <= 64:
        n = unescape_json(p + f.val_pos, f.val_len, tmp)
        return language_ordinal(tmp, n)
    return -1


cdef int parse_json_header(const uint8_t *p, Py_ssize_t n, RemotingHeader *h, HeaderField *ext,
                           Py_ssize_t cap) except -1:
    cdef Py_ssize_t i, ks, ke
    cdef uint8_t kesc
    cdef bint have_code = False
    cdef HeaderField f
    cdef int key
    _init(h)
    i = _ws(p, n, 0)
    if i >= n or p[i] != C_LBRACE:
        return _fail(i, "a header must be a JSON object")
    i = _ws(p, n, i + 1)
    if i < n and p[i] == C_RBRACE:
        i += 1
    else:
        while True:
            if i >= n or p[i] != C_QUOTE:
                return _fail(i, "expected a key")
            ks = i + 1
            ke = _string(p, n, ks, &kesc)
            i = _ws(p, n, ke + 1)
            if i >= n or p[i] != C_COLON:
                return _fail(i, "expected ':'")
            i = _ws(p, n, i + 1)
            if i >= n:
                return _fail(i, "expected a value")
            key = _top_key(p + ks, ke - ks, kesc)
            if key == K_CODE:
                i = _int_field(p, n, i, key, &h.code)
                have_code = True
            elif key == K_VERSION:
                i = _int_field(p, n, i, key, &h.version)
            elif key == K_OPAQUE:
                i = _int_field(p, n, i, key, &h.opaque)
            elif key == K_FLAG:
                i = _int_field(p, n, i, key, &h.flag)
            elif key == K_LANGUAGE or key == K_REMARK:
                f.key_pos = ks
                f.key_len = ke - ks
                f.key_escaped = kesc
                ke = i
                i = _value(p, n, i, 2, &f)
                if f.kind != V_STRING and f.kind != V_ESCAPED and f.kind != V_NULL:
                    return _fail(ke, f"{'language' if key == K_LANGUAGE else 'remark'} must be a string or null")
                if key == K_LANGUAGE:
                    h.lang = f
                    h.language = _language_of(p, &f)
                else:
                    h.remark = f
            elif key == K_EXT:
                # the last extFields wins, as for every top-level key
                h.n_ext = h.ext_total = 0
                if p[i] == C_LBRACE:
                    i = _ext_object(p, n, i, h, ext, cap)
                elif p[i] == 110:
                    i = _literal(p, n, i, b"null", 4)
                else:
                    return _fail(i, "extFields must be an object or null")
            else:
                i = _value(p, n, i, 2, &f)  # unknown keys (serializeTypeCurrentRPC): checked, skipped
            i = _ws(p, n, i)
            if i < n and p[i] == C_COMMA:
                i = _ws(p, n, i + 1)
                continue
            if i < n and p[i] == C_RBRACE:
                i += 1
                break
            return _fail(i, "expected ',' or '}'")
    i = _ws(p, n, i)
    if i != n:
        return _fail(i, "bytes after the header object")
    if not have_code:
        return _fail(0, "the header has no code")
    return 0


cdef Py_ssize_t unescape_json(const uint8_t *p, Py_ssize_t n, uint8_t *out) except -1:
    cdef Py_ssize_t i = 0, o = 0
    cdef uint8_t c
    cdef int cp, lo
    while i < n:
        c = p[i]
        if c != C_BACKSLASH:
            out[o] = c
            o += 1
            i += 1
            continue
        if n - i < 2:
            return _fail(i, "truncated escape")
        c = p[i + 1]
        if c != 117:
            if not UNESC[c]:
                return _fail(i, "bad escape")
            out[o] = UNESC[c]
            o += 1
            i += 2
            continue
        if n - i < 6 or _hex4(p + i + 2) < 0:
            return _fail(i, "bad \\u escape")
        cp = _hex4(p + i + 2)
        if 0xD800 <= cp <= 0xDBFF:
            if n - i < 12 or p[i + 6] != C_BACKSLASH or p[i + 7] != 117:
                return _fail(i, "lone surrogate escape")
            lo = _hex4(p + i + 8)
            if lo < 0xDC00 or lo > 0xDFFF:
                return _fail(i, "lone surrogate escape")
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
            i += 12
        elif 0xDC00 <= cp <= 0xDFFF:
            return _fail(i, "lone surrogate escape")
        else:
            i += 6
        # UTF-8 of cp: never longer than the escape it came from, so out keeps within n
        if cp < 0x80:
            out[o] = <uint8_t> cp
            o += 1
        elif cp < 0x800:
            out[o] = <uint8_t> (0xC0 | (cp >> 6))
            out[o + 1] = <uint8_t> (0x80 | (cp & 0x3F))
            o += 2
        elif cp < 0x10000:
            out[o] = <uint8_t> (0xE0 | (cp >> 12))
            out[o + 1] = <uint8_t> (0x80 | ((cp >> 6) & 0x3F))
            out[o + 2] = <uint8_t> (0x80 | (cp & 0x3F))
            o += 3
        else:
            out[o] = <uint8_t> (0xF0 | (cp >> 18))
            out[o + 1] = <uint8_t> (0x80 | ((cp >> 12) & 0x3F))
            out[o + 2] = <uint8_t> (0x80 | ((cp >> 6) & 0x3F))
            out[o + 3] = <uint8_t> (0x80 | (cp & 0x3F))
            o += 4
    return o


# ---------------------------------------------------------------------------------------------
# ROCKETMQ binary (RocketMQSerializable.rocketMQProtocolDecode, stricter: see formats.md §4)

cdef int parse_rocketmq_header(const uint8_t *p, Py_ssize_t n, RemotingHeader *h, HeaderField *ext,
                               Py_ssize_t cap) except -1:
    cdef Py_ssize_t i, end
    cdef int64_t rl, el, kl, vl
    cdef HeaderField f
    _init(h)
    if n < 17:
        return _fail(n, f"a ROCKETMQ header has at least 21 bytes, this one {n}")
    h.code = <int16_t> get_be16(p)
    h.language = <int8_t> p[2]
    h.version = <int16_t> get_be16(p + 3)
    h.opaque = <int32_t> get_be32(p + 5)
    h.flag = <int32_t> get_be32(p + 9)
    rl = <int32_t> get_be32(p + 13)
    if rl < 0 or rl > n - 17:
        return _fail(13, f"remark length {rl} outside 0..{n - 17}")
    if rl:
        _check_utf8(p, 17, 17 + rl)
        h.remark.val_pos = 17
        h.remark.val_len = rl
        h.remark.kind = V_BYTES
    i = 17 + rl
    if n - i < 4:
        return _fail(i, "no ext length")
    el = <int32_t> get_be32(p + i)
    if el < 0 or el > n - i - 4:
        return _fail(i, f"ext length {el} outside 0..{n - i - 4}")
    if el < n - i - 4:
        return _fail(i + 4 + el, f"{n - i - 4 - el} bytes after the ext fields")
    i += 4
    end = n
    while i < end:
        if end - i < 2:
            return _fail(i, "truncated key length")
        kl = <int16_t> get_be16(p + i)
        if kl < 0 or kl > end - i - 2:
            return _fail(i, f"key length {kl} outside 0..{end - i - 2}")
        f.key_pos = i + 2
        f.key_len = kl
        _check_utf8(p, i + 2, i + 2 + kl)
        i += 2 + kl
        if end - i < 4:
            return _fail(i, "truncated value length")
        vl = <int32_t> get_be32(p + i)
        if vl < 0 or vl > end - i - 4:
            return _fail(i, f"value length {vl} outside 0..{end - i - 4}")
        f.val_pos = i + 4
        f.val_len = vl
        _check_utf8(p, i + 4, i + 4 + vl)
        i += 4 + vl
        f.ival = 0
        f.key_escaped = 0
        f.kind = V_BYTES if vl else V_NULL  # Java's readStr: length 0 is null
        if h.ext_total < cap:
            ext[h.ext_total] = f
            h.n_ext += 1
        h.ext_total += 1
    return 0


cdef int _parse(int serialize_type, const uint8_t *p, Py_ssize_t n, RemotingHeader *h, HeaderField *ext,
                Py_ssize_t cap) except -1:
    if serialize_type == 0:
        return parse_json_header(p, n, h, ext, cap)
    if serialize_type == 1:
        return parse_rocketmq_header(p, n, h, ext, cap)
    raise ValueError(f"unknown serialize type {serialize_type}")


# ---------------------------------------------------------------------------------------------
# Python side: buffers in, tuples out

cdef struct Src:
    const uint8_t *ptr
    Py_ssize_t size
    bint owned
    Py_buffer view


cdef int _acquire(object obj, Src *b) except -1:
    b.owned = False
    if PyBytes_CheckExact(obj):
        b.ptr = <const uint8_t *> PyBytes_AS_STRING(obj)
        b.size = PyBytes_GET_SIZE(obj)
        return 0
    PyObject_GetBuffer(obj, &b.view, PyBUF_SIMPLE)
    b.owned = True
    b.ptr = <const uint8_t *> b.view.buf if b.view.buf != NULL else EMPTY
    b.size = b.view.len
    return 0


cdef inline void _release(Src *b) noexcept:
    if b.owned:
        PyBuffer_Release(&b.view)
        b.owned = False


cdef int _check_range(Src *b, Py_ssize_t pos, Py_ssize_t n) except -1:
    if pos < 0 or n < 0 or pos > b.size or n > b.size - pos:
        raise ValueError(f"header range [{pos}, {pos} + {n}) outside a buffer of {b.size}")
    return 0


# Short ASCII strings recur in every request (ext keys, "JAVA", group and topic names): a
# direct-mapped cache of the str objects saves their allocation and decoding, as msgspec's key
# cache does. Entries are owned references, replaced on a collision; only pure ASCII is cached,
# so a hit is a byte compare with the cached str's compact ASCII data.
cdef enum:
    STR_CACHE_SIZE = 1024       # a power of two
    STR_CACHE_MAX = 32          # longest string cached
cdef PyObject *STR_CACHE[STR_CACHE_SIZE]


cdef str _short_str(const uint8_t *p, Py_ssize_t n):
    cdef uint32_t h = 2166136261u
    cdef Py_ssize_t i
    cdef PyObject *hit
    cdef str s
    if n > STR_CACHE_MAX:
        return PyUnicode_DecodeUTF8(<const char *> p, n, NULL)
    for i in range(n):
        if p[i] & 0x80:
            return PyUnicode_DecodeUTF8(<const char *> p, n, NULL)
        h = (h ^ p[i]) * 16777619u
    h = (h ^ (h >> 15)) & (STR_CACHE_SIZE - 1)
    hit = STR_CACHE[h]
    if hit != NULL and PyUnicode_GET_LENGTH(hit) == n and memcmp(PyUnicode_DATA(hit), p, n) == 0:
        return <str> hit
    s = PyUnicode_DecodeUTF8(<const char *> p, n, NULL)
    Py_XDECREF(hit)
    Py_INCREF(<PyObject *> s)
    STR_CACHE[h] = <PyObject *> s
    return s


cdef str _text(const uint8_t *p, Py_ssize_t pos, Py_ssize_t n, bint escaped):
    cdef uint8_t small[256]
    cdef uint8_t *tmp
    cdef Py_ssize_t m
    if not escaped:
        return _short_str(p + pos, n)
    tmp = small
    if n > 256:
        tmp = <uint8_t *> PyMem_Malloc(n)
        if tmp == NULL:
            raise MemoryError()
    try:
        m = unescape_json(p + pos, n, tmp)
        return PyUnicode_DecodeUTF8(<const char *> tmp, m, NULL)
    finally:
        if tmp != small:
            PyMem_Free(tmp)


cdef object _value_object(const uint8_t *p, HeaderField *f):
    cdef bytes token
    k = f.kind
    if k == V_STRING or k == V_BYTES:
        return _short_str(p + f.val_pos, f.val_len)
    if k == V_ESCAPED:
        return _text(p, f.val_pos, f.val_len, True)
    if k == V_INT:
        return f.ival
    if k == V_NUMBER:
        token = PyBytes_FromStringAndSize(<const char *> p + f.val_pos, f.val_len)
        if b"." in token or b"e" in token or b"E" in token:
            return float(token)
        try:
            return int(token)  # an integer beyond int64 stays exact
        except ValueError:  # beyond sys.get_int_max_str_digits() (4300): hostile, refuse it typed
            raise HeaderError(f.val_pos, f"an integer of {f.val_len} digits is too long to convert") from None
    if k == V_TRUE:
        return True
    if k == V_FALSE:
        return False
    if k == V_NULL:
        return None
    return PyUnicode_DecodeUTF8(<const char *> p + f.val_pos, f.val_len, NULL)  # V_RAW: its JSON text


cdef tuple _decoded(int serialize_type, const uint8_t *p, RemotingHeader *h, HeaderField *ext):
    cdef const char *name
    cdef Py_ssize_t i
    cdef HeaderField *f
    cdef dict fields = _PyDict_NewPresized(h.n_ext)  # no resizes while it fills
    if serialize_type == 0:
        language = "" if h.lang.kind == V_NULL else _text(p, h.lang.val_pos, h.lang.val_len, h.lang.kind == V_ESCAPED)
    else:
        name = language_name(h.language)
        language = "UNKNOWN" if name == NULL else name.decode("ascii")
    remark = None if h.remark.kind == V_NULL else _value_object(p, &h.remark)
    for i in range(h.n_ext):
        f = &ext[i]
        fields[_text(p, f.key_pos, f.key_len, f.key_escaped)] = _value_object(p, f)
    return (h.code, language, h.version, h.opaque, h.flag, remark, fields)


def decode_header(int serialize_type, buf, Py_ssize_t pos, Py_ssize_t n) -> tuple:
    """The header in buf[pos:pos+n] as (code, language, version, opaque, flag, remark, ext).
    JSON: language is the string ("" when absent or null); ext values keep their JSON types
    (str, int, float, True/False/None, and nested arrays or objects as their JSON text).
    ROCKETMQ: language is the LanguageCode name ("UNKNOWN" for a byte Java has no name for), ext
    values are str, or None for Java's null (length 0). Raises HeaderError."""
    cdef Src b
    cdef RemotingHeader h
    cdef HeaderField stack[EXT_STACK]
    cdef HeaderField *ext = stack
    cdef Py_ssize_t total
    _acquire(buf, &b)
    try:
        _check_range(&b, pos, n)
        _parse(serialize_type, b.ptr + pos, n, &h, ext, EXT_STACK)
        if h.ext_total > EXT_STACK:
            total = h.ext_total
            ext = <HeaderField *> PyMem_Malloc(total * sizeof(HeaderField))
            if ext == NULL:
                raise MemoryError()
            _parse(serialize_type, b.ptr + pos, n, &h, ext, total)
        return _decoded(serialize_type, b.ptr + pos, &h, ext)
    finally:
        if ext != stack:
            PyMem_Free(ext)
        _release(&b)


cdef tuple _field_tuple(HeaderField *f):
    return (f.key_pos, f.key_len, f.val_pos, f.val_len, f.ival, f.key_escaped, f.kind)


def parse_fields(int serialize_type, buf, Py_ssize_t pos, Py_ssize_t n, Py_ssize_t cap=64) -> tuple:
    """The C parsers' output as Python values, for tests and the fuzz harness: (code, version,
    opaque, flag, language, lang, remark, n_ext, ext_total, ext) with each field a tuple
    (key_pos, key_len, val_pos, val_len, ival, key_escaped, kind); `cap` is the array's size."""
    cdef Src b
    cdef RemotingHeader h
    cdef HeaderField *ext
    cdef Py_ssize_t i
    if cap < 0:
        raise ValueError(f"cap {cap} is negative")
    ext = <HeaderField *> PyMem_Malloc((cap if cap else 1) * sizeof(HeaderField))
    if ext == NULL:
        raise MemoryError()
    _acquire(buf, &b)
    try:
        _check_range(&b, pos, n)
        _parse(serialize_type, b.ptr + pos, n, &h, ext, cap)
        return (h.code, h.version, h.opaque, h.flag, h.language, _field_tuple(&h.lang), _field_tuple(&h.remark),
                h.n_ext, h.ext_total, [_field_tuple(&ext[i]) for i in range(h.n_ext)])
    finally:
        PyMem_Free(ext)
        _release(&b)


def parse_count(int serialize_type, buf, Py_ssize_t pos, Py_ssize_t n, Py_ssize_t repeat=1) -> int:
    """Runs the C parser `repeat` times on one header and returns its ext field count: what a
    kernel pays per request, without building Python objects (the benchmarks use it)."""
    cdef Src b
    cdef RemotingHeader h
    cdef HeaderField ext[EXT_STACK]
    cdef Py_ssize_t r
    _acquire(buf, &b)
    try:
        _check_range(&b, pos, n)
        for r in range(repeat):
            _parse(serialize_type, b.ptr + pos, n, &h, ext, EXT_STACK)
        return h.ext_total if repeat > 0 else 0
    finally:
        _release(&b)


# ---------------------------------------------------------------------------------------------
# Rendering

cdef int _json_begin(WriteBuffer w, int32_t code, const uint8_t *language, Py_ssize_t ln, int32_t version,
                     int32_t opaque, int32_t flag) except -1:
    w.write(<const uint8_t *> b'{"code":', 8)
    w.write_ascii_int(code)
    w.write(<const uint8_t *> b',"language":', 12)
    w.write_json_string(language, ln)
    w.write(<const uint8_t *> b',"version":', 11)
    w.write_ascii_int(version)
    w.write(<const uint8_t *> b',"opaque":', 10)
    w.write_ascii_int(opaque)
    w.write(<const uint8_t *> b',"flag":', 8)
    w.write_ascii_int(flag)
    return 0


cdef int json_header_begin(WriteBuffer w, int32_t code, const char *language, int32_t version, int32_t opaque,
                           int32_t flag) except -1:
    return _json_begin(w, code, <const uint8_t *> language, strlen(language), version, opaque, flag)


cdef int json_header_remark(WriteBuffer w, const uint8_t *p, Py_ssize_t n) except -1:
    w.write(<const uint8_t *> b',"remark":', 10)
    return w.write_json_string(p, n)


cdef int json_ext_begin(WriteBuffer w) except -1:
    return w.write(<const uint8_t *> b',"extFields":{', 14)


cdef int json_ext_field(WriteBuffer w, const uint8_t *k, Py_ssize_t kn, const uint8_t *v, Py_ssize_t vn,
                        bint first) except -1:
    if not first:
        w.write_byte(C_COMMA)
    w.write_json_string(k, kn)
    w.write_byte(C_COLON)
    return w.write_json_string(v, vn)


cdef int json_ext_end(WriteBuffer w) except -1:
    return w.write_byte(C_RBRACE)


cdef int json_header_end(WriteBuffer w) except -1:
    return w.write(<const uint8_t *> b',"serializeTypeCurrentRPC":"JSON"}', 34)


cdef Py_ssize_t rocketmq_header_begin(WriteBuffer w, int32_t code, int language, int32_t version, int32_t opaque,
                                      int32_t flag, const uint8_t *remark, Py_ssize_t remark_len) except -1:
    cdef Py_ssize_t at
    # Java writes (short) code and (short) version and reads them back sign-extended: refuse what
    # would come back as another number instead of truncating it
    if not -32768 <= code <= 32767:
        raise OverflowError(f"code {code} does not fit the ROCKETMQ header's int16")
    if not -32768 <= version <= 32767:
        raise OverflowError(f"version {version} does not fit the ROCKETMQ header's int16")
    if not -128 <= language <= 127:
        raise OverflowError(f"language {language} does not fit a byte")
    if remark_len < 0 or remark_len > INT32_MAX:
        raise ValueError(f"remark length {remark_len} outside 0..{INT32_MAX}")
    w.write_be16(<uint16_t> <int16_t> code)
    w.write_byte(<uint8_t> <int8_t> language)
    w.write_be16(<uint16_t> <int16_t> version)
    w.write_be32(<uint32_t> opaque)
    w.write_be32(<uint32_t> flag)
    w.write_be32(<uint32_t> remark_len)
    if remark_len:
        w.write(remark, remark_len)
    at = w.position()
    w.write_be32(0)
    return at


cdef int rocketmq_ext_field(WriteBuffer w, const uint8_t *k, Py_ssize_t kn, const uint8_t *v, Py_ssize_t vn) except -1:
    if kn < 0 or kn > 32767:
        raise ValueError(f"ext key of {kn} bytes: a ROCKETMQ key length is an int16")
    if vn < 0 or vn > INT32_MAX:
        raise ValueError(f"ext value of {vn} bytes: a ROCKETMQ value length is an int32")
    w.write_be16(<uint16_t> kn)
    w.write(k, kn)
    w.write_be32(<uint32_t> vn)
    return w.write(v, vn)


cdef int rocketmq_header_finish(WriteBuffer w, Py_ssize_t ext_len_at) except -1:
    cdef Py_ssize_t n = w.position() - ext_len_at - 4
    if n < 0 or n > INT32_MAX:
        raise ValueError(f"ext block of {n} bytes at {ext_len_at}")
    return w.patch_be32(ext_len_at, <uint32_t> n)


cdef int encode_header_into(WriteBuffer w, int serialize_type, int32_t code, str language, int32_t version,
                            int32_t opaque, int32_t flag, object remark, dict ext) except -1:
    cdef const char *lang
    cdef const char *r = NULL
    cdef const char *ks
    cdef const char *vs
    cdef Py_ssize_t ln, rn = 0, kn, vn, at
    cdef bint first = True
    cdef int ordinal
    if language is None:
        raise TypeError("language must be a str")
    lang = PyUnicode_AsUTF8AndSize(language, &ln)
    if remark is not None:
        if type(remark) is not str:
            raise TypeError(f"remark must be a str or None, not {type(remark).__name__}")
        r = PyUnicode_AsUTF8AndSize(remark, &rn)
    if serialize_type == 0:
        _json_begin(w, code, <const uint8_t *> lang, ln, version, opaque, flag)
        if r != NULL:
            json_header_remark(w, <const uint8_t *> r, rn)
        if ext:
            json_ext_begin(w)
            for k, v in ext.items():
                if type(k) is not str or type(v) is not str:
                    raise TypeError(f"ext field {k!r}: {v!r}: keys and values must be str")
                ks = PyUnicode_AsUTF8AndSize(k, &kn)
                vs = PyUnicode_AsUTF8AndSize(v, &vn)
                json_ext_field(w, <const uint8_t *> ks, kn, <const uint8_t *> vs, vn, first)
                first = False
            json_ext_end(w)
        return json_header_end(w)
    if serialize_type == 1:
        # LanguageCode.valueOf(name) would throw on a name Java lacks; OTHER is its own catch-all
        ordinal = language_ordinal(<const uint8_t *> lang, ln)
        at = rocketmq_header_begin(w, code, ordinal if ordinal >= 0 else LANGUAGE_OTHER, version, opaque, flag,
                                   <const uint8_t *> r, rn)
        if ext:
            for k, v in ext.items():
                if type(k) is not str or type(v) is not str:
                    raise TypeError(f"ext field {k!r}: {v!r}: keys and values must be str")
                ks = PyUnicode_AsUTF8AndSize(k, &kn)
                vs = PyUnicode_AsUTF8AndSize(v, &vn)
                rocketmq_ext_field(w, <const uint8_t *> ks, kn, <const uint8_t *> vs, vn)
        return rocketmq_header_finish(w, at)
    raise ValueError(f"unknown serialize type {serialize_type}")


def encode_header(int serialize_type, int32_t code, str language, int32_t version, int32_t opaque, int32_t flag,
                  remark=None, dict ext=None) -> bytes:
    """A header as the broker sends it. JSON: {"code","language","version","opaque","flag"[,"remark"]
    [,"extFields"],"serializeTypeCurrentRPC":"JSON"}, compact, as msgspec would write that dict.
    ROCKETMQ: RocketMQSerializable's layout; a language Java has no name for goes as OTHER, code and
    version must fit an int16. ext keys and values must be str (TypeError)."""
    cdef WriteBuffer w = WriteBuffer()
    encode_header_into(w, serialize_type, code, language, version, opaque, flag, remark, ext)
    return w.getvalue()


def encode_frame(WriteBuffer w, int serialize_type, int32_t code, str language, int32_t version, int32_t opaque,
                 int32_t flag, remark=None, dict ext=None, body=b"") -> int:
    """Appends a whole frame (prefix, header, body) to w the way header.pxd tells kernels to:
    reserve the prefix, render the header, patch the prefix. Returns the frame's length."""
    cdef Py_ssize_t start = w.position(), hlen, blen
    cdef Py_buffer v
    PyObject_GetBuffer(body, &v, PyBUF_SIMPLE)
    try:
        blen = v.len
        w.write(<const uint8_t *> b"\0\0\0\0\0\0\0\0", 8)
        encode_header_into(w, serialize_type, code, language, version, opaque, flag, remark, ext)
        hlen = w.position() - start - 8
        if hlen > 0xFFFFFF or 4 + hlen + blen > INT32_MAX:
            raise ValueError(f"a frame with a {hlen}-byte header and a {blen}-byte body is too long")
        w.write(<const uint8_t *> v.buf, blen)
        w.patch_be32(start, <uint32_t> (4 + hlen + blen))
        w.patch_be32(start + 4, (<uint32_t> serialize_type << 24) | <uint32_t> hlen)
        return 8 + hlen + blen
    finally:
        PyBuffer_Release(&v)
