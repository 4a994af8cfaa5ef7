# Interface of the remoting header codec (RocketMQ 4.x RemotingCommand headers; docs/formats.md §4).
#
# Parsing. Two parsers fill one RemotingHeader and the caller's array of HeaderField:
#   parse_json_header      serialize type 0: the JSON object the clients send
#   parse_rocketmq_header  serialize type 1: RocketMQSerializable's binary layout (big-endian)
#       int16 code | int8 language | int16 version | int32 opaque | int32 flag
#       int32 remarkLen + remark (0: none) | int32 extLen + extLen bytes of
#       [int16 keyLen][key][int32 valueLen][value] pairs (valueLen 0: Java's null)
# Both read only [p, p+n), never recurse (nesting deeper than HEADER_MAX_DEPTH is refused), create
# no Python object and allocate nothing unless they raise: each field is a span of the input.
# Errors raise HeaderError(offset, reason) (header.pyx; a ValueError), offset from p.
# Every string span they report is valid UTF-8 (JSON: once unescaped), ROCKETMQ's included.
#
# A caller parses into a stack array and retries only when the header had more fields than it
# had room for:
#     cdef RemotingHeader h
#     cdef HeaderField ext[64]
#     parse_json_header(p, n, &h, ext, 64)
#     if h.ext_total > 64: allocate h.ext_total fields and parse again
#     for i in range(h.n_ext): ... p + ext[i].key_pos ... (the last of equal keys wins, as in Java)
#
# Rendering. The building blocks below write a header into a WriteBuffer. JSON comes out as
#   {"code":C,"language":"L","version":V,"opaque":O,"flag":F[,"remark":"R"][,"extFields":{"k":"v",..}],"serializeTypeCurrentRPC":"JSON"}
# (compact, escaped as msgspec.json.encode escapes; non-ASCII as raw UTF-8). Framing a message into
# one WriteBuffer w:
#     start = w.position()
#     w.write(<const uint8_t *> b"\0\0\0\0\0\0\0\0", 8)     # frame prefix, patched below
#     json_header_begin(w, code, b"JAVA", version, opaque, flag)
#     json_header_remark(w, ...)                             # when there is a remark
#     json_ext_begin(w); json_ext_field(w, k, kn, v, vn, True); ...; json_ext_end(w)   # when ext
#     json_header_end(w)
#       -- or, ROCKETMQ: at = rocketmq_header_begin(w, ...); rocketmq_ext_field(w, ...)...;
#          rocketmq_header_finish(w, at)
#     H = w.position() - start - 8                           # must be <= 0xFFFFFF
#     w.write(body, B)                                       # or hand the body to the transport
#     w.patch_be32(start, 4 + H + B)                         # remoting's length: 4 + H + B
#     w.patch_be32(start + 4, (serialize_type << 24) | H)
# Answer in the request's serialize type only when the client masks the type byte (Java does;
# ali-ons and the C++ client do not, and only ever send JSON).

from libc.stdint cimport int32_t, int64_t, uint8_t

from broker.kernels.wbuf cimport WriteBuffer

cdef enum:
    HEADER_MAX_DEPTH = 32     # the header object is depth 1, extFields' object depth 2
    LANGUAGE_OTHER = 7        # what a language name Java does not know is sent as (ROCKETMQ)

cdef enum ValueKind:
    V_STRING = 0    # JSON string with no escapes: UTF-8 bytes at [val_pos, val_pos+val_len) (between the quotes)
    V_ESCAPED = 1   # JSON string with escapes: raw bytes between the quotes at [val_pos, +val_len); unescape_json gives its UTF-8
    V_INT = 2       # JSON integer that fits int64: ival; the token at [val_pos, +val_len)
    V_NUMBER = 3    # any other JSON number (fraction, exponent, beyond int64): token at [val_pos, +val_len)
    V_TRUE = 4
    V_FALSE = 5
    V_NULL = 6      # JSON null (token span); ROCKETMQ value of length 0 (Java reads it as null)
    V_RAW = 7       # a nested JSON array/object as an ext value: its JSON text at [val_pos, +val_len)
    V_BYTES = 8     # ROCKETMQ binary header value: bytes at [val_pos, +val_len) (UTF-8 as Java wrote it)

cdef struct HeaderField:
    Py_ssize_t key_pos
    Py_ssize_t key_len
    Py_ssize_t val_pos
    Py_ssize_t val_len
    int64_t ival
    uint8_t key_escaped   # the JSON key had escapes (unescape_json gives it)
    uint8_t kind          # ValueKind

cdef struct RemotingHeader:
    int32_t code
    int32_t version
    int32_t opaque
    int32_t flag
    # LanguageCode ordinal (JAVA 0, CPP 1, DOTNET 2, PYTHON 3, DELPHI 4, ERLANG 5, RUBY 6, OTHER 7,
    # HTTP 8, GO 9, PHP 10, OMS 11, RUST 12, NODE_JS 13); JSON: the ordinal of the string, -1 if
    # unknown or absent; ROCKETMQ: the byte, read as Java's signed byte
    int32_t language
    # JSON: the "language" key's and string's spans (kind V_NULL when absent or null; all zero when
    # absent); ROCKETMQ: unused (all zero, V_NULL)
    HeaderField lang
    # kind V_NULL when absent or null (ROCKETMQ: length 0); all zero when absent (and ROCKETMQ's none)
    HeaderField remark
    Py_ssize_t n_ext      # ext fields written into the caller's array (at most cap)
    Py_ssize_t ext_total  # ext fields present (> cap means the array was too small)

cdef int parse_json_header(const uint8_t *p, Py_ssize_t n, RemotingHeader *h, HeaderField *ext, Py_ssize_t cap) except -1
cdef int parse_rocketmq_header(const uint8_t *p, Py_ssize_t n, RemotingHeader *h, HeaderField *ext, Py_ssize_t cap) except -1
cdef Py_ssize_t unescape_json(const uint8_t *p, Py_ssize_t n, uint8_t *out) except -1   # out has room for n bytes; returns the UTF-8 length

# LanguageCode: the ordinal of a name (-1 if Java has none), the name of an ordinal (NULL if none)
cdef int language_ordinal(const uint8_t *name, Py_ssize_t n) noexcept
cdef const char *language_name(int ordinal) noexcept

# JSON rendering (see the top of this file). language is NUL-terminated; every other text is (ptr, len) UTF-8.
cdef int json_header_begin(WriteBuffer w, int32_t code, const char *language, int32_t version, int32_t opaque, int32_t flag) except -1
cdef int json_header_remark(WriteBuffer w, const uint8_t *p, Py_ssize_t n) except -1       # ,"remark":"..."
cdef int json_ext_begin(WriteBuffer w) except -1                                           # ,"extFields":{
cdef int json_ext_field(WriteBuffer w, const uint8_t *k, Py_ssize_t kn, const uint8_t *v, Py_ssize_t vn, bint first) except -1
cdef int json_ext_end(WriteBuffer w) except -1                                             # }
cdef int json_header_end(WriteBuffer w) except -1                                          # ,"serializeTypeCurrentRPC":"JSON"}

# ROCKETMQ rendering: language is the LanguageCode ordinal; begin returns where the ext length
# word sits (for finish to patch). code and version must fit Java's short (OverflowError otherwise),
# a key 32767 bytes (ValueError); a remark of length 0 is "none", a value of length 0 is Java's null.
cdef Py_ssize_t rocketmq_header_begin(WriteBuffer w, int32_t code, int language, int32_t version, int32_t opaque, int32_t flag, const uint8_t *remark, Py_ssize_t remark_len) except -1
cdef int rocketmq_ext_field(WriteBuffer w, const uint8_t *k, Py_ssize_t kn, const uint8_t *v, Py_ssize_t vn) except -1
cdef int rocketmq_header_finish(WriteBuffer w, Py_ssize_t ext_len_at) except -1

# A whole header from Python values (the slow path: ext a dict of str to str, remark a str or
# None), in either serialize type; what encode_header returns as bytes.
cdef int encode_header_into(WriteBuffer w, int serialize_type, int32_t code, str language, int32_t version, int32_t opaque, int32_t flag, object remark, dict ext) except -1
