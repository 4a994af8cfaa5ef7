"""Pure-Python twin of broker.kernels.header (tests only), written from docs/formats.md §4.1.

Slow and literal on purpose: a recursive-descent JSON reader whose recursion is bounded by the
spec's depth limit (the kernel's is iterative), Python's strict UTF-8 decoder for the UTF-8 rules
(the kernel checks bytes by hand), struct for the ROCKETMQ layout. The json module is not used.
"""
from __future__ import annotations

import struct

MAX_DEPTH = 32
LANGUAGE_NAMES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
                  "OMS", "RUST", "NODE_JS")
LANGUAGE_OTHER = 7
V_STRING, V_ESCAPED, V_INT, V_NUMBER, V_TRUE, V_FALSE, V_NULL, V_RAW, V_BYTES = range(9)
I32 = (-(1 << 31), (1 << 31) - 1)
I64 = (-(1 << 63), (1 << 63) - 1)
WS = b" \t\n\r"
SIMPLE_ESCAPES = {ord('"'): '"', ord("\\"): "\\", ord("/"): "/", ord("b"): "\b", ord("f"): "\f", ord("n"): "\n",
                  ord("r"): "\r", ord("t"): "\t"}
HEXDIGITS = b"0123456789abcdefABCDEF"
NULL_FIELD = (0, 0, 0, 0, 0, 0, V_NULL)


class HeaderError(ValueError):
    def __init__(self, offset, reason):
        super().__init__(f"bad remoting header at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


# ------------------------------------------------------------------------------------------ JSON

class _Json:
    """One pass over a header's bytes; `at` is the cursor."""

    def __init__(self, data: bytes):
        self.d = data
        self.at = 0

    def peek(self) -> int | None:
        return self.d[self.at] if self.at < len(self.d) else None

    def skip_ws(self) -> None:
        while self.at < len(self.d) and self.d[self.at] in WS:
            self.at += 1

    def expect(self, ch: str, what: str) -> None:
        if self.peek() != ord(ch):
            raise HeaderError(self.at, f"expected {what}")
        self.at += 1

    # -- strings -----------------------------------------------------------------------------
    def string(self) -> tuple[int, int, bool, str]:
        """At an opening quote: (start, length between the quotes, had escapes, its text)."""
        self.at += 1
        start = self.at
        out: list[str] = []
        escaped = False
        raw_from = self.at  # start of the current run of raw (unescaped) bytes
        while True:
            c = self.peek()
            if c is None:
                raise HeaderError(self.at, "unterminated string")
            if c == ord('"'):
                out.append(self._utf8(raw_from, self.at))
                end = self.at
                self.at += 1
                return start, end - start, escaped, "".join(out)
            if c < 0x20:
                raise HeaderError(self.at, "control character in a string")
            if c != ord("\\"):
                self.at += 1
                continue
            out.append(self._utf8(raw_from, self.at))
            escaped = True
            esc_at = self.at
            e = self.d[self.at + 1] if self.at + 1 < len(self.d) else None
            if e is None:
                raise HeaderError(esc_at, "unterminated string")
            if e in SIMPLE_ESCAPES:
                out.append(SIMPLE_ESCAPES[e])
                self.at += 2
            elif e == ord("u"):
                unit = self._hex4(self.at + 2, esc_at)
                self.at += 6
                if 0xD800 <= unit <= 0xDBFF:
                    if self.d[self.at:self.at + 2] != b"\\u":
                        raise HeaderError(esc_at, "lone high surrogate")
                    low = self._hex4(self.at + 2, esc_at)
                    if not 0xDC00 <= low <= 0xDFFF:
                        raise HeaderError(esc_at, "lone high surrogate")
                    self.at += 6
                    out.append(chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)))
                elif 0xDC00 <= unit <= 0xDFFF:
                    raise HeaderError(esc_at, "lone low surrogate")
                else:
                    out.append(chr(unit))
            else:
                raise HeaderError(esc_at, "unknown escape")
            raw_from = self.at

    def _hex4(self, at: int, esc_at: int) -> int:
        digits = self.d[at:at + 4]
        if len(digits) != 4 or any(b not in HEXDIGITS for b in digits):
            raise HeaderError(esc_at, "bad \\u escape")
        return int(digits, 16)

    def _utf8(self, a: int, b: int) -> str:
        try:
            return self.d[a:b].decode("utf-8")  # strict: refuses overlongs, surrogates, > U+10FFFF
        except UnicodeDecodeError as e:
            raise HeaderError(a + e.start, "invalid UTF-8") from None

    # -- numbers and literals ------------------------------------------------------------------
    def number(self) -> tuple[int, int, int | None]:
        """(start, length, value if it is an integer within int64 else None)."""
        start = self.at
        d = self.d

        def digits() -> int:
            n = 0
            while self.at < len(d) and 0x30 <= d[self.at] <= 0x39:
                self.at += 1
                n += 1
            return n

        if self.peek() == ord("-"):
            self.at += 1
        first = self.at
        if digits() == 0:
            raise HeaderError(start, "bad number")
        if d[first] == ord("0") and self.at - first > 1:
            raise HeaderError(start, "leading zero")
        integral = True
        if self.peek() == ord("."):
            self.at += 1
            if digits() == 0:
                raise HeaderError(start, "bad fraction")
            integral = False
        if self.peek() in (ord("e"), ord("E")):
            self.at += 1
            if self.peek() in (ord("+"), ord("-")):
                self.at += 1
            if digits() == 0:
                raise HeaderError(start, "bad exponent")
            integral = False
        token = d[start:self.at]
        # int64 has at most 19 digits; longer tokens are not converted here (Python refuses to
        # convert more than 4300 digits, and the parse itself converts nothing)
        value = int(token) if integral and self.at - first <= 19 else None
        if value is not None and not I64[0] <= value <= I64[1]:
            value = None
        return start, self.at - start, value

    def literal(self, word: bytes) -> None:
        if self.d[self.at:self.at + len(word)] != word:
            raise HeaderError(self.at, "unexpected character")
        self.at += len(word)

    # -- values --------------------------------------------------------------------------------
    def value(self, depth: int) -> tuple[int, int, int, int, object]:
        """Any value at the cursor, where a container would be at `depth`:
        (val_pos, val_len, ival, kind, decoded)."""
        c = self.peek()
        if c is None:
            raise HeaderError(self.at, "expected a value")
        if c == ord('"'):
            start, length, esc, text = self.string()
            return start, length, 0, V_ESCAPED if esc else V_STRING, text
        if c == ord("-") or 0x30 <= c <= 0x39:
            start, length, iv = self.number()
            token = self.d[start:start + length]
            if iv is not None:
                return start, length, iv, V_INT, iv
            return start, length, 0, V_NUMBER, _Number(token, start)
        for word, kind, obj in ((b"true", V_TRUE, True), (b"false", V_FALSE, False), (b"null", V_NULL, None)):
            if c == word[0]:
                start = self.at
                self.literal(word)
                return start, len(word), 0, kind, obj
        if c in (ord("["), ord("{")):
            start = self.at
            self.container(depth)
            return start, self.at - start, 0, V_RAW, self.d[start:self.at].decode("utf-8")
        raise HeaderError(self.at, "unexpected character")

    def container(self, depth: int) -> None:
        """Skips (checking) an array or object opened at `depth`; recursion is bounded by MAX_DEPTH."""
        if depth > MAX_DEPTH:
            raise HeaderError(self.at, "nested too deep")
        is_obj = self.d[self.at] == ord("{")
        close = ord("}") if is_obj else ord("]")
        self.at += 1
        self.skip_ws()
        if self.peek() == close:
            self.at += 1
            return
        while True:
            if is_obj:
                if self.peek() != ord('"'):
                    raise HeaderError(self.at, "expected a key")
                self.string()
                self.skip_ws()
                self.expect(":", "':'")
                self.skip_ws()
            self.value(depth + 1)
            self.skip_ws()
            c = self.peek()
            if c == ord(","):
                self.at += 1
                self.skip_ws()
                continue
            if c == close:
                self.at += 1
                return
            raise HeaderError(self.at, "expected ',' or a closing bracket")


class _Number:
    """A number that is not an int64 integer, converted only when decoded (see number_value)."""

    def __init__(self, token: bytes, pos: int):
        self.token = token
        self.pos = pos


def number_value(num: _Number):
    """float(token), but an integer token beyond int64 stays an exact int; one Python cannot
    convert (more than sys.get_int_max_str_digits() digits) is a HeaderError."""
    if any(ch in num.token for ch in b".eE"):
        return float(num.token)
    try:
        return int(num.token)
    except ValueError:
        raise HeaderError(num.pos, "integer too long to convert") from None


def _decoded(obj):
    return number_value(obj) if isinstance(obj, _Number) else obj


def _json_int(j: _Json, key: str) -> int:
    c = j.peek()
    at = j.at
    if c == ord('"'):
        start, length, esc, text = j.string()
        body = j.d[start:start + length]
        ok = not esc and len(body) > 0
        if ok:
            digits = body[1:] if body[:1] == b"-" else body
            ok = len(digits) > 0 and all(0x30 <= b <= 0x39 for b in digits) and \
                not (digits[:1] == b"0" and len(digits) > 1)
        if not ok or len(body) > 11 or not I32[0] <= int(body) <= I32[1]:
            raise HeaderError(at, f"{key} is not a 32-bit integer")
        return int(body)
    if c is not None and (c == ord("-") or 0x30 <= c <= 0x39):
        _, _, iv = j.number()
        if iv is None or not I32[0] <= iv <= I32[1]:
            raise HeaderError(at, f"{key} is not a 32-bit integer")
        return iv
    raise HeaderError(at, f"{key} must be an integer")


def _parse_json(data: bytes, cap: int):
    """The spec's reading of a JSON header: (header dict of its parts, ext fields in order)."""
    j = _Json(data)
    h = {"code": None, "version": 0, "opaque": 0, "flag": 0, "lang": NULL_FIELD, "lang_text": None,
         "remark": NULL_FIELD, "remark_text": None}
    ext: list[tuple] = []  # (field tuple, key text, decoded value)
    j.skip_ws()
    if j.peek() != ord("{"):
        raise HeaderError(j.at, "not an object")
    j.at += 1
    j.skip_ws()
    if j.peek() == ord("}"):
        j.at += 1
    else:
        while True:
            if j.peek() != ord('"'):
                raise HeaderError(j.at, "expected a key")
            kpos, klen, kesc, key = j.string()
            j.skip_ws()
            j.expect(":", "':'")
            j.skip_ws()
            if j.peek() is None:
                raise HeaderError(j.at, "expected a value")
            if key in ("code", "version", "opaque", "flag"):
                h[key] = _json_int(j, key)
            elif key in ("language", "remark"):
                at = j.at
                vpos, vlen, ival, kind, obj = j.value(2)
                if kind not in (V_STRING, V_ESCAPED, V_NULL):
                    raise HeaderError(at, f"{key} must be a string or null")
                short = "lang" if key == "language" else "remark"
                h[short] = (kpos, klen, vpos, vlen, 0, int(kesc), kind)
                h[short + "_text"] = obj
            elif key == "extFields":
                ext = []
                if j.peek() == ord("n"):
                    j.literal(b"null")
                elif j.peek() == ord("{"):
                    ext = _ext_object(j)
                else:
                    raise HeaderError(j.at, "extFields must be an object or null")
            else:
                j.value(2)
            j.skip_ws()
            c = j.peek()
            if c == ord(","):
                j.at += 1
                j.skip_ws()
                continue
            if c == ord("}"):
                j.at += 1
                break
            raise HeaderError(j.at, "expected ',' or '}'")
    j.skip_ws()
    if j.at != len(data):
        raise HeaderError(j.at, "trailing bytes")
    if h["code"] is None:
        raise HeaderError(0, "no code")
    text = h["lang_text"]
    h["ordinal"] = LANGUAGE_NAMES.index(text) if text in LANGUAGE_NAMES else -1
    h["language"] = text if text is not None else ""
    return h, ext


def _ext_object(j: _Json) -> list[tuple]:
    out = []
    j.at += 1
    j.skip_ws()
    if j.peek() == ord("}"):
        j.at += 1
        return out
    while True:
        if j.peek() != ord('"'):
            raise HeaderError(j.at, "expected a key")
        kpos, klen, kesc, key = j.string()
        j.skip_ws()
        j.expect(":", "':'")
        j.skip_ws()
        vpos, vlen, ival, kind, obj = j.value(3)
        out.append(((kpos, klen, vpos, vlen, ival, int(kesc), kind), key, obj))
        j.skip_ws()
        c = j.peek()
        if c == ord(","):
            j.at += 1
            j.skip_ws()
            continue
        if c == ord("}"):
            j.at += 1
            return out
        raise HeaderError(j.at, "expected ',' or '}'")


# -------------------------------------------------------------------------------------- ROCKETMQ

def _utf8_span(data: bytes, a: int, b: int) -> str:
    try:
        return data[a:b].decode("utf-8")
    except UnicodeDecodeError as e:
        raise HeaderError(a + e.start, "invalid UTF-8") from None


def _parse_rocketmq(data: bytes):
    n = len(data)
    if n < 17:
        raise HeaderError(n, "too short")
    code, lang, version, opaque, flag, rl = struct.unpack_from(">hbhiii", data, 0)
    h = {"code": code, "version": version, "opaque": opaque, "flag": flag, "ordinal": lang, "lang": NULL_FIELD,
         "language": LANGUAGE_NAMES[lang] if 0 <= lang < len(LANGUAGE_NAMES) else "UNKNOWN",
         "remark": NULL_FIELD, "remark_text": None}
    if not 0 <= rl <= n - 17:
        raise HeaderError(13, "remark length")
    if rl:
        h["remark_text"] = _utf8_span(data, 17, 17 + rl)
        h["remark"] = (0, 0, 17, rl, 0, 0, V_BYTES)
    at = 17 + rl
    if n - at < 4:
        raise HeaderError(at, "no ext length")
    (el,) = struct.unpack_from(">i", data, at)
    if el < 0 or at + 4 + el > n:
        raise HeaderError(at, "ext length")
    if at + 4 + el != n:
        raise HeaderError(at + 4 + el, "trailing bytes")
    at += 4
    ext = []
    while at < n:
        if n - at < 2:
            raise HeaderError(at, "key length")
        (kl,) = struct.unpack_from(">h", data, at)
        if kl < 0 or at + 2 + kl > n:
            raise HeaderError(at, "key length")
        key = _utf8_span(data, at + 2, at + 2 + kl)
        kpos = at + 2
        at += 2 + kl
        if n - at < 4:
            raise HeaderError(at, "value length")
        (vl,) = struct.unpack_from(">i", data, at)
        if vl < 0 or at + 4 + vl > n:
            raise HeaderError(at, "value length")
        value = _utf8_span(data, at + 4, at + 4 + vl) if vl else None
        ext.append(((kpos, kl, at + 4, vl, 0, 0, V_BYTES if vl else V_NULL), key, value))
        at += 4 + vl
    return h, ext


# ------------------------------------------------------------------------------------ public API

def _window(buf, pos: int, n: int) -> bytes:
    data = bytes(buf)
    if pos < 0 or n < 0 or pos + n > len(data):
        raise ValueError("header range outside the buffer")
    return data[pos:pos + n]


def _parse(serialize_type: int, buf, pos: int, n: int):
    data = _window(buf, pos, n)
    if serialize_type == 0:
        return _parse_json(data, 0)
    if serialize_type == 1:
        return _parse_rocketmq(data)
    raise ValueError("unknown serialize type")


def decode_header(serialize_type: int, buf, pos: int, n: int) -> tuple:
    h, ext = _parse(serialize_type, buf, pos, n)
    return (h["code"], h["language"], h["version"], h["opaque"], h["flag"], h["remark_text"],
            {key: _decoded(value) for _, key, value in ext})


def parse_fields(serialize_type: int, buf, pos: int, n: int, cap: int = 64) -> tuple:
    if cap < 0:
        raise ValueError("negative cap")
    h, ext = _parse(serialize_type, buf, pos, n)
    shown = [f for f, _, _ in ext[:cap]]
    return (h["code"], h["version"], h["opaque"], h["flag"], h["ordinal"], h["lang"], h["remark"],
            len(shown), len(ext), shown)


# ------------------------------------------------------------------------------------- encoding

def json_string(s: str) -> bytes:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif o < 0x20:
            out.append({8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}.get(o, "\\u%04x" % o))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out).encode("utf-8")  # a lone surrogate raises UnicodeEncodeError (a ValueError)


def encode_header(serialize_type: int, code: int, language: str, version: int, opaque: int, flag: int,
                  remark: str | None = None, ext: dict | None = None) -> bytes:
    for name, v in (("code", code), ("version", version), ("opaque", opaque), ("flag", flag)):
        if not I32[0] <= v <= I32[1]:
            raise OverflowError(f"{name} {v} is not an int32")
    if not isinstance(language, str):
        raise TypeError("language must be a str")
    if remark is not None and type(remark) is not str:
        raise TypeError("remark must be a str or None")
    for k, v in (ext or {}).items():
        if type(k) is not str or type(v) is not str:
            raise TypeError("ext keys and values must be str")
    if serialize_type == 0:
        out = b'{"code":%d,"language":%s,"version":%d,"opaque":%d,"flag":%d' % (
            code, json_string(language), version, opaque, flag)
        if remark is not None:
            out += b',"remark":' + json_string(remark)
        if ext:
            out += b',"extFields":{' + b",".join(json_string(k) + b":" + json_string(v) for k, v in ext.items()) + b"}"
        return out + b',"serializeTypeCurrentRPC":"JSON"}'
    if serialize_type == 1:
        if not -32768 <= code <= 32767 or not -32768 <= version <= 32767:
            raise OverflowError("code and version must fit an int16")
        lang = LANGUAGE_NAMES.index(language) if language in LANGUAGE_NAMES else LANGUAGE_OTHER
        r = remark.encode("utf-8") if remark else b""
        body = b""
        for k, v in (ext or {}).items():
            kb, vb = k.encode("utf-8"), v.encode("utf-8")
            if len(kb) > 32767:
                raise ValueError("key longer than an int16")
            body += struct.pack(">h", len(kb)) + kb + struct.pack(">i", len(vb)) + vb
        return struct.pack(">hbhiii", code, lang, version, opaque, flag, len(r)) + r + struct.pack(">i", len(body)) + body
    raise ValueError("unknown serialize type")
