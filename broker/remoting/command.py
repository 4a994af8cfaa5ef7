"""RemotingCommand: one request or response of RocketMQ 4.x remoting.

Headers are decoded and encoded by the header kernel (broker.kernels.header), in either
serialization: JSON (type 0), which every client here sends, or RocketMQ's binary ROCKETMQ
(type 1), which Java clients send with rocketmq.serialize.type=ROCKETMQ. A response is written in
its request's serialization (a JSON request gets JSON: ali-ons and the C++ client read the header
length without masking the type byte). Requests arrive with extFields of mixed JSON types (ali-ons
sends numbers and `false`, the C++ client ints for some keys and strings for 64-bit ones):
accessors coerce. Responses always carry string-valued extFields, since the C++ client ignores
anything that is not a JSON string.
"""
from __future__ import annotations

import itertools

from broker.kernels.header import HeaderError, decode_header, encode_header
from broker.kernels.remoting import FrameError, frame_prefix
from broker.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE
from broker.remoting.headers import _int, ext_string
from broker.remoting.refusals import BadRequest

_opaques = itertools.count(1)

LANGUAGE = "JAVA"
VERSION = 401  # V4_9_4 (MQVersion.Version ordinal; 395 is V4_9_1): what a 4.9 broker reports


# A request whose header is missing a field or has one of the wrong type: answered SYSTEM_ERROR
# naming the field (the processors read typed headers, broker.remoting.headers; the name server
# and the client still read single fields with the accessors below).
CommandError = BadRequest

# The header fields RocketMQ declares Integer; every other integer field is a Long.
_INT32_KEYS = frozenset(("queueId", "sysFlag", "flag", "reconsumeTimes", "maxReconsumeTimes", "defaultTopicQueueNums",
                         "maxMsgNums", "delayLevel", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag",
                         "brokerId"))


class RemotingCommand:
    __slots__ = ("code", "language", "version", "opaque", "flag", "remark", "ext", "body", "serialize_type",
                 "body_len")

    def __init__(self, code: int, ext: dict | None = None, body=b"", remark: str | None = None,
                 opaque: int = 0, flag: int = 0, language: str = LANGUAGE, version: int = VERSION,
                 serialize_type: int = 0):
        self.code = code
        self.ext = ext if ext is not None else {}
        self.body = body
        self.remark = remark
        self.opaque = opaque
        self.flag = flag
        self.language = language
        self.version = version
        self.serialize_type = serialize_type
        self.body_len = -1  # a body of several views: their total, when the sender knows it

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def request(cls, code: int, ext: dict | None = None, body=b"", oneway: bool = False) -> RemotingCommand:
        return cls(code, ext, body, opaque=next(_opaques), flag=FLAG_ONEWAY if oneway else 0)

    def response(self, code: int, ext: dict | None = None, body=b"", remark: str | None = None) -> RemotingCommand:
        """The reply to this request: echoes its opaque, in its serialization."""
        return RemotingCommand(code, ext, body, remark, opaque=self.opaque, flag=FLAG_RESPONSE,
                               serialize_type=self.serialize_type)

    @classmethod
    def decode(cls, header, body, serialize_type: int = 0) -> RemotingCommand:
        """From a header (bytes-like, either serialization) and a body (kept as given: bytes or a
        memoryview). A header that cannot be one raises FrameError naming the offset."""
        try:
            code, language, version, opaque, flag, remark, ext = decode_header(serialize_type, header, 0, len(header))
        except HeaderError as e:
            raise FrameError(e.offset, e.reason) from None
        return cls(code, ext, body, remark, opaque, flag, language, version, serialize_type)

    # -- wire ----------------------------------------------------------------------------------
    def header_bytes(self) -> bytes:
        ext = {k: v if type(v) is str else ext_string(v) for k, v in self.ext.items()} if self.ext else {}
        return encode_header(self.serialize_type, self.code, self.language, self.version, self.opaque, self.flag,
                             self.remark, ext)

    def encode_parts(self) -> list:
        """[prefix + header, body parts...] for transport.writelines: the body is not copied."""
        header = self.header_bytes()
        body = self.body
        st = self.serialize_type
        if isinstance(body, list):  # several views (a pull response's records)
            n = self.body_len if self.body_len >= 0 else sum(len(b) for b in body)
            return [frame_prefix(len(header), n, st) + header, *body]
        if body:
            return [frame_prefix(len(header), len(body), st) + header, body]
        return [frame_prefix(len(header), 0, st) + header]

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
