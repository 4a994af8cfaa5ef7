"""gRPC's status codes, the grpc-timeout header and the grpc-message encoding (gRPC over HTTP2,
PROTOCOL-HTTP2.md of grpc/grpc)."""
from __future__ import annotations

import re

OK = 0
CANCELLED = 1
UNKNOWN = 2
DEADLINE_EXCEEDED = 4
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14

_TIMEOUT = re.compile(r"(\d{1,8})([HMSmun])\Z")
_UNIT_SECONDS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_NOT_PLAIN = re.compile(rb"[^\x20-\x24\x26-\x7e]")  # what grpc-message percent-encodes (and '%')


class AbortError(Exception):
    """Raised by context.abort(): the call ends with the status set on its context."""


def code_of(code) -> int:
    """A grpc.StatusCode (its value is (int, name)) or a plain int → the int."""
    if isinstance(code, int):
        return code
    return code.value[0]


def timeout_seconds(value: str | None) -> float | None:
    """grpc-timeout ('100m', '5S', '1H') in seconds; None when absent or malformed (no deadline)."""
    if not value:
        return None
    m = _TIMEOUT.match(value)
    if m is None:
        return None
    return int(m.group(1)) * _UNIT_SECONDS[m.group(2)]


def encode_message(details: str | None) -> bytes | None:
    """grpc-message: UTF-8, bytes outside printable ASCII and '%' as %XX."""
    if not details:
        return None
    raw = details.encode("utf-8", "replace")
    if _NOT_PLAIN.search(raw) is None:
        return raw
    return _NOT_PLAIN.sub(lambda m: b"%%%02X" % m.group(0)[0], raw)
