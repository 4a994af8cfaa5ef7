"""DLedger's PUSH (request code 51004) over RocketMQ remoting, in our own encoding.

DLedger 0.3.1.2 sends a PushEntryRequest as fastjson JSON with each entry's body base64-encoded
inside it. No Java DLedger node will ever be in one of our groups (a group is all brokers of this
project), so the push is ours, chosen so that neither side copies or re-encodes entry data:

    request  extFields  group, remoteId, leaderId, term, type (APPEND/COMPARE/TRUNCATE/COMMIT),
                        commitIndex, index (APPEND: the first entry; COMPARE/TRUNCATE: the entry
                        compared / the last one kept, -1 for none), pos and count of the entries,
                        prevTerm (APPEND: the term of entry index - 1, -1 if none, Raft's
                        prevLogTerm)
             body       the entries exactly as the leader's data files hold them (48-byte header,
                        then the body), one or several consecutive entries; COMPARE and TRUNCATE
                        carry the 48-byte header of entry `index` (nothing when it is -1); COMMIT
                        carries nothing
    response extFields  group, code (DLedgerResponseCode), term, leaderId (whom the member follows),
                        index (the last entry the push covered), beginIndex, endIndex, localTerm
                        (COMPARE refused: the term of the member's own entry at `index`, -1 if it
                        holds none); remoting code SUCCESS whatever the DLedger code

The leader hands views of its maps to the transport (EntrySpan.views); the follower checks every
header it is sent (magic, size, bodySize, index sequence, term order, position order, the body CRC
when the header carries one) before anything else happens, and appends from the view of its read
buffer. Anything that is not such a push raises ProtocolError, which the follower answers with
UNEXPECTED_ARGUMENT without touching its term or its log.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from broker.kernels.entry_push import PushBodyError, check_entries
from broker.raft.entry_format import HEADER, HEADER_SIZE, MAGIC_1, Header, byte_view
from broker.raft.protocol import ProtocolError, RequestCode, ResponseCode
from broker.remoting.command import RemotingCommand


class PushType(str, enum.Enum):  # PushEntryRequest.Type
    APPEND = "APPEND"
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    COMMIT = "COMMIT"


def _int(ext: dict, key: str, default: int | None = None) -> int:
    v = ext.get(key)
    if v is None:
        if default is None:
            raise ProtocolError(f"PUSH without {key}")
        return default
    if isinstance(v, bool):
        raise ProtocolError(f"PUSH {key}={v!r} is not a number")
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise ProtocolError(f"PUSH {key}={v!r} is not a number") from None
    if not -(1 << 63) <= n < 1 << 63:
        raise ProtocolError(f"PUSH {key}={v!r} is out of range")
    return n


def _str(ext: dict, key: str, required: bool = True) -> str | None:
    v = ext.get(key)
    if v is None:
        if required:
            raise ProtocolError(f"PUSH without {key}")
        return None
    if not isinstance(v, str):
        raise ProtocolError(f"PUSH {key}={v!r} is not a string")
    return v


@dataclass(frozen=True)
class PushEntryRequest:
    group: str
    leader_id: str
    term: int
    type: PushType
    commit_index: int
    index: int = -1
    pos: int = -1
    count: int = 0
    prev_term: int = -1
    remote_id: str | None = None

    def command(self, body=b"", body_len: int = -1) -> RemotingCommand:
        """The remoting request; `body` may be a list of views (sent without being joined)."""
        ext = {"group": self.group, "leaderId": self.leader_id, "term": self.term, "type": self.type.value,
               "commitIndex": self.commit_index, "index": self.index, "pos": self.pos, "count": self.count,
               "prevTerm": self.prev_term}
        if self.remote_id is not None:
            ext["remoteId"] = self.remote_id
        cmd = RemotingCommand.request(int(RequestCode.PUSH), ext, body)
        cmd.body_len = body_len
        return cmd

    @classmethod
    def from_ext(cls, ext: dict) -> "PushEntryRequest":
        try:
            kind = PushType(_str(ext, "type"))
        except ValueError:
            raise ProtocolError(f"PUSH type {ext.get('type')!r} is not one of "
                                f"{', '.join(t.value for t in PushType)}") from None
        req = cls(group=_str(ext, "group"), leader_id=_str(ext, "leaderId"), term=_int(ext, "term"), type=kind,
                  commit_index=_int(ext, "commitIndex", -1), index=_int(ext, "index", -1), pos=_int(ext, "pos", -1),
                  count=_int(ext, "count", 0), prev_term=_int(ext, "prevTerm", -1),
                  remote_id=_str(ext, "remoteId", required=False))
        if req.term < 0:
            raise ProtocolError(f"PUSH term {req.term} is negative")
        if req.index < -1 or req.commit_index < -1:
            raise ProtocolError(f"PUSH index {req.index} / commitIndex {req.commit_index} below -1")
        if kind is PushType.APPEND and (req.count <= 0 or req.index < 0 or req.pos < 0):
            raise ProtocolError(f"APPEND of {req.count} entries from index {req.index} at pos {req.pos}")
        return req


@dataclass(frozen=True)
class PushEntryResponse:
    code: int
    term: int
    index: int = -1
    begin_index: int = -1
    end_index: int = -1
    local_term: int = -1
    leader_id: str | None = None
    group: str | None = None

    @property
    def response_code(self) -> ResponseCode:
        return ResponseCode.of(self.code)

    def ext(self) -> dict:
        ext = {"code": self.code, "term": self.term, "index": self.index, "beginIndex": self.begin_index,
               "endIndex": self.end_index, "localTerm": self.local_term}
        if self.leader_id is not None:
            ext["leaderId"] = self.leader_id
        if self.group is not None:
            ext["group"] = self.group
        return ext

    @classmethod
    def from_ext(cls, ext: dict) -> "PushEntryResponse":
        return cls(code=_int(ext, "code"), term=_int(ext, "term"), index=_int(ext, "index", -1),
                   begin_index=_int(ext, "beginIndex", -1), end_index=_int(ext, "endIndex", -1),
                   local_term=_int(ext, "localTerm", -1), leader_id=_str(ext, "leaderId", required=False),
                   group=_str(ext, "group", required=False))


def parse_header(body) -> Header | None:
    """The one 48-byte header a COMPARE or TRUNCATE carries (None for index -1: an empty body)."""
    view = byte_view(body)
    if len(view) == 0:
        return None
    if len(view) != HEADER_SIZE:
        raise ProtocolError(f"a {len(view)}-byte body where one {HEADER_SIZE}-byte entry header belongs")
    h = Header._make(HEADER.unpack_from(view, 0))
    _check_header(h, len(view) + h.body_size)
    return h


def _check_header(h: Header, room: int) -> None:
    if h.magic != MAGIC_1:
        raise ProtocolError(f"entry {h.index}: magic {h.magic} is not {MAGIC_1}")
    if h.size < HEADER_SIZE or h.body_size != h.size - HEADER_SIZE:
        raise ProtocolError(f"entry {h.index}: size {h.size} with bodySize {h.body_size}")
    if h.size > room:
        raise ProtocolError(f"entry {h.index}: size {h.size} runs past the push ({room} bytes left)")
    if h.index < 0 or h.term < 0 or h.pos < 0:
        raise ProtocolError(f"entry index {h.index}, term {h.term}, pos {h.pos}: negative")


def check_append(req: PushEntryRequest, body) -> memoryview:
    """The body of an APPEND, every entry checked (the entry_push kernel, no Python object per
    entry): exactly `count` entries filling the body, each header DLedger's, indexes consecutive
    from `index`, the first at `pos`, positions increasing, terms never decreasing nor above the
    push's term, the body CRC verified when the header carries one. Positions are only checked
    for order here: where an entry must land is the follower's log's to say (append_at's pos
    check). Returns the body as a flat byte view (no copy)."""
    view = byte_view(body)
    try:
        check_entries(view, req.index, req.pos, req.count, req.term)
    except PushBodyError as e:
        raise ProtocolError(str(e)) from None
    return view
