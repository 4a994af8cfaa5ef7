"""DLedger's election protocol: request codes, response codes, vote results, and the request and
response bodies (DLedger 0.3.1.2 `protocol/`), as RocketMQ remoting requests whose body is the
JSON fastjson writes for the Java object (camelCase fields, enums by name).

A body that is not such JSON, or names a field with the wrong type, raises ProtocolError; the
server answers it with UNEXPECTED_ARGUMENT and logs the peer, and nothing of the member's state
changes (a malformed frame never moves the term).
"""
from __future__ import annotations

import enum

import msgspec


class RequestCode(enum.IntEnum):  # DLedgerRequestCode
    METADATA = 50000
    APPEND = 50001
    GET = 50002
    VOTE = 51001
    HEART_BEAT = 51002
    PULL = 51003
    PUSH = 51004
    LEADERSHIP_TRANSFER = 51005


class ResponseCode(enum.IntEnum):  # DLedgerResponseCode
    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506

    @classmethod
    def of(cls, code: int) -> "ResponseCode":
        """DLedgerResponseCode.valueOf: an unknown number is UNKNOWN, not an error."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


class Role(str, enum.Enum):  # MemberState.Role
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"
    FOLLOWER = "FOLLOWER"


class VoteResult(str, enum.Enum):  # VoteResponse.RESULT
    UNKNOWN = "UNKNOWN"
    ACCEPT = "ACCEPT"
    REJECT_UNKNOWN_LEADER = "REJECT_UNKNOWN_LEADER"
    REJECT_UNEXPECTED_LEADER = "REJECT_UNEXPECTED_LEADER"
    REJECT_EXPIRED_VOTE_TERM = "REJECT_EXPIRED_VOTE_TERM"
    REJECT_ALREADY_VOTED = "REJECT_ALREADY_VOTED"
    REJECT_ALREADY_HAS_LEADER = "REJECT_ALREADY_HAS_LEADER"
    REJECT_TERM_NOT_READY = "REJECT_TERM_NOT_READY"
    REJECT_TERM_SMALL_THAN_LEDGER = "REJECT_TERM_SMALL_THAN_LEDGER"
    REJECT_EXPIRED_LEDGER_TERM = "REJECT_EXPIRED_LEDGER_TERM"
    REJECT_SMALL_LEDGER_END_INDEX = "REJECT_SMALL_LEDGER_END_INDEX"
    REJECT_TAKING_LEADERSHIP = "REJECT_TAKING_LEADERSHIP"


class ParseResult(str, enum.Enum):  # VoteResponse.ParseResult: a candidate's reading of one round
    WAIT_TO_REVOTE = "WAIT_TO_REVOTE"
    REVOTE_IMMEDIATELY = "REVOTE_IMMEDIATELY"
    PASSED = "PASSED"
    WAIT_TO_VOTE_NEXT = "WAIT_TO_VOTE_NEXT"


class VoteRequest(msgspec.Struct, kw_only=True):
    group: str
    leaderId: str  # the candidate asking for the vote
    term: int
    ledgerEndIndex: int = -1
    ledgerEndTerm: int = -1
    remoteId: str | None = None
    localId: str | None = None
    code: int = ResponseCode.SUCCESS


class VoteResponse(msgspec.Struct, kw_only=True):
    group: str | None = None
    leaderId: str | None = None
    term: int = -1
    voteResult: VoteResult = VoteResult.UNKNOWN
    remoteId: str | None = None
    localId: str | None = None
    code: int = ResponseCode.SUCCESS


class HeartBeatRequest(msgspec.Struct, kw_only=True):
    group: str
    leaderId: str
    term: int
    remoteId: str | None = None
    localId: str | None = None
    code: int = ResponseCode.SUCCESS


class HeartBeatResponse(msgspec.Struct, kw_only=True):
    group: str | None = None
    leaderId: str | None = None
    term: int = -1
    remoteId: str | None = None
    localId: str | None = None
    code: int = ResponseCode.SUCCESS


class ProtocolError(ValueError):
    """A body that is not the JSON of the request its code names."""


_decoders = {t: msgspec.json.Decoder(t) for t in (VoteRequest, VoteResponse, HeartBeatRequest, HeartBeatResponse)}
_encoder = msgspec.json.Encoder()


def encode(obj: msgspec.Struct) -> bytes:
    return _encoder.encode(obj)


def decode(typ: type, body) -> msgspec.Struct:
    try:
        return _decoders[typ].decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ProtocolError(f"{typ.__name__}: {e}") from None
