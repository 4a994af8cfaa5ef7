"""Stub of broker.kernels.header (pyx/header.pyx; C interface in pyx/header.pxd, rules in
docs/formats.md §4.1): RocketMQ remoting headers, JSON (type 0) and ROCKETMQ binary (type 1)."""
from typing import Final

from typing_extensions import Buffer

from broker.kernels.wbuf import WriteBuffer

HEADER_MAX_DEPTH: Final[int]
LANGUAGE_OTHER: Final[int]
LANGUAGE_NAMES: tuple[str, ...]
SERIALIZE_JSON: Final[int]
SERIALIZE_ROCKETMQ: Final[int]
V_STRING: Final[int]
V_ESCAPED: Final[int]
V_INT: Final[int]
V_NUMBER: Final[int]
V_TRUE: Final[int]
V_FALSE: Final[int]
V_NULL: Final[int]
V_RAW: Final[int]
V_BYTES: Final[int]

ExtValue = str | int | float | bool | None
# (key_pos, key_len, val_pos, val_len, ival, key_escaped, kind)
Field = tuple[int, int, int, int, int, int, int]

class HeaderError(ValueError):
    offset: int
    reason: str
    def __init__(self, offset: int, reason: str) -> None: ...

def decode_header(
    serialize_type: int, buf: Buffer, pos: int, n: int
) -> tuple[int, str, int, int, int, str | None, dict[str, ExtValue]]:
    """(code, language, version, opaque, flag, remark, ext); raises HeaderError."""

def parse_fields(
    serialize_type: int, buf: Buffer, pos: int, n: int, cap: int = 64
) -> tuple[int, int, int, int, int, Field, Field, int, int, list[Field]]:
    """(code, version, opaque, flag, language ordinal, lang, remark, n_ext, ext_total, ext)."""

def parse_count(serialize_type: int, buf: Buffer, pos: int, n: int, repeat: int = 1) -> int: ...
def encode_header(
    serialize_type: int,
    code: int,
    language: str,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None = None,
    ext: dict[str, str] | None = None,
) -> bytes: ...
def encode_frame(
    w: WriteBuffer,
    serialize_type: int,
    code: int,
    language: str,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None = None,
    ext: dict[str, str] | None = None,
    body: Buffer = b"",
) -> int: ...
