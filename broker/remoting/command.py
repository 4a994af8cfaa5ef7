"""RemotingCommand: one request or response of RocketMQ 4.x remoting, JSON-serialized.

Requests arrive with extFields of mixed JSON types (ali-ons sends numbers and `false`, the C++
client ints for some keys and strings for 64-bit ones): accessors coerce. Responses always carry
string-valued extFields, since the C++ client ignores anything that is not a JSON string, and
always serialize type 0 (JSON), since neither client masks the serialize-type byte.
"""
from __future__ import annotations

import itertools
from typing import Any

import msgspec

from broker.kernels.remoting import FrameError, frame_prefix
from broker.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE
from broker.remoting.headers import _int, ext_string
from broker.remoting.refusals import BadRequest



class _Header(msgspec.Struct):
    """The JSON header as the clients write it; unknown keys (serializeTypeCurrentRPC) ignored."""
    code: int
    language: str = ""
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    extFields: dict[str, Any] | None = None


# a typed decode is a third faster than a dict and .get()s; strict=False takes "12" for 12
_decode_header = msgspec.json.Decoder(_Header, strict=False).decode
_encode = msgspec.json.encode
_opaques = itertools.count(1)

LANGUAGE = "JAVA"
VERSION = 395  # V4_9_4: what a 4.9 broker reports


# A request whose header is missing a field or has one of the wrong type: answered SYSTEM_ERROR
# naming the field (the processors read typed headers, broker.remoting.headers; the name server
# and the client still read single fields with the accessors below).
CommandError = BadRequest

# The header fields RocketMQ declares Integer; every other integer field is a Long.
_INT32_KEYS = frozenset(("queueId", "sysFlag", "flag", "reconsumeTimes", "maxReconsumeTimes", "defaultTopicQueueNums",
                         "maxMsgNums", "delayLevel", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag",
                         "brokerId"))


class RemotingCommand:
    __slots__ = ("code", "language", "version", "opaque", "flag", "remark", "ext", "body")

    def __init__(self, code: int, ext: dict | None = None, body=b"", remark: str | None = None,
                 opaque: int = 0, flag: int = 0, language: str = LANGUAGE, version: int = VERSION):
        self.code = code
        self.ext = ext if ext is not None else {}
        self.body = body
        self.remark = remark
        self.opaque = opaque
        self.flag = flag
        self.language = language
        self.version = version

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def request(cls, code: int, ext: dict | None = None, body=b"", oneway: bool = False) -> RemotingCommand:
        return cls(code, ext, body, opaque=next(_opaques), flag=FLAG_ONEWAY if oneway else 0)

    def response(self, code: int, ext: dict | None = None, body=b"", remark: str | None = None) -> RemotingCommand:
        """The reply to this request: echoes its opaque."""
        return RemotingCommand(code, ext, body, remark, opaque=self.opaque, flag=FLAG_RESPONSE)

    @classmethod
    def decode(cls, header, body) -> RemotingCommand:
        """From a JSON header (bytes-like) and a body (kept as given: bytes or a memoryview)."""
        try:
            h = _decode_header(header)
        except msgspec.ValidationError as e:
            raise FrameError(0, f"bad header {bytes(header[:200])!r}: {e}") from None
        except (msgspec.DecodeError, UnicodeDecodeError) as e:
            raise FrameError(0, f"header is not a JSON object: {e}") from None
        except RecursionError:
            # Hostile input (issue 7): a header nested thousands deep ({"extFields":{"a":[[[[...)
            # raised out of buffer_updated into uvloop's fatal-error path (a traceback, no reason).
            raise FrameError(0, f"header nests too deep to decode: {bytes(header[:60])!r}...") from None
        return cls(h.code, h.extFields or {}, body, h.remark, h.opaque, h.flag, h.language, h.version)

    # -- wire ----------------------------------------------------------------------------------
    def header_bytes(self) -> bytes:
        h: dict[str, Any] = {"code": self.code, "language": self.language, "version": self.version,
                             "opaque": self.opaque, "flag": self.flag}
        if self.remark is not None:
            h["remark"] = self.remark
        if self.ext:
            h["extFields"] = {k: v if type(v) is str else ext_string(v) for k, v in self.ext.items()}
        h["serializeTypeCurrentRPC"] = "JSON"
        return _encode(h)

    def encode_parts(self) -> list:
        """[prefix + header, body parts...] for transport.writelines: the body is not copied."""
        header = self.header_bytes()
        body = self.body
        if isinstance(body, list):  # several views (a pull response's records)
            n = sum(len(b) for b in body)
            return [frame_prefix(len(header), n) + header, *body]
        if body:
            return [frame_prefix(len(header), len(body)) + header, body]
        return [frame_prefix(len(header), 0) + header]

    def encode(self) -> bytes:
        return b"".join(bytes(p) for p in self.encode_parts())

    # -- flags ---------------------------------------------------------------------------------
    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    # -- typed access to extFields ---------------------------------------------------------------
    def get_str(self, key: str, default: str | None = None) -> str:
        v = self.ext.get(key)
        if v is None:
            if default is None:
                raise CommandError(f"the request has no {key}")
            return default
        return ext_string(v)

    def get_int(self, key: str, default: int | None = None) -> int:
        v = self.ext.get(key)
        if v is None or v == "":
            if default is None:
                raise CommandError(f"the request has no {key}")
            return default
        return _int(key, v, 32 if key in _INT32_KEYS else 64)

    def get_bool(self, key: str, default: bool = False) -> bool:
        v = self.ext.get(key)
        if v is None:
            return default
        if isinstance(v, bool):
            return v
        return str(v).lower() == "true"

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "request"
        return f"<{kind} code={self.code} opaque={self.opaque} ext={self.ext} body={len(self.body)}B>"
