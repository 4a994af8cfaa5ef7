"""Pure-Python twin of broker.kernels.client_codec's reply reader (tests only), written from
docs/formats.md §4 and §4.2, not from the kernel's code.

Headers are read by the header twin (itself written from §4.1); the §4.2 rules are applied
here to its field spans: which responses become Replies, how their integer and string fields
read, and which frames are handed back. A Reply is a tuple (REPLY_FIELDS).
"""
from __future__ import annotations

import json
import re
import struct

from tests.twins import header_twin as H

READ_DONE, READ_SLOW = 0, 1
MAX_EXT = 32
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
INT_FIELDS = {"queueId": INT32, "queueOffset": INT64, "nextBeginOffset": INT64, "minOffset": INT64,
              "maxOffset": INT64, "suggestWhichBrokerId": INT64}
STRING_FIELDS = ("msgId", "transactionId", "recallHandle")
REPLY_FIELDS = ("opaque", "code", "remark", "msg_id", "transaction_id", "recall_handle", "queue_id", "queue_offset",
                "next_begin_offset", "min_offset", "max_offset", "suggest_which_broker_id", "body",
                "header_start", "header_len", "serialize_type")
_NAMES = {"msgId": "msg_id", "transactionId": "transaction_id", "recallHandle": "recall_handle", "queueId": "queue_id", "queueOffset": "queue_offset",
          "nextBeginOffset": "next_begin_offset", "minOffset": "min_offset", "maxOffset": "max_offset",
          "suggestWhichBrokerId": "suggest_which_broker_id"}
_DIGITS = re.compile(rb"-?[0-9]{1,19}")


class FrameError(ValueError):
    pass


class HandBack(Exception):
    """This frame is decoded by Python (a RemotingCommand)."""


def _text(header: bytes, kind: int, pos: int, n: int) -> str | None:
    raw = header[pos:pos + n]
    if kind in (H.V_STRING, H.V_BYTES):
        return raw.decode("utf-8")
    if kind == H.V_ESCAPED:
        return json.loads(b'"' + raw + b'"')
    if kind == H.V_NULL:
        return None
    raise HandBack()


def _integer(header: bytes, kind: int, pos: int, n: int, ival: int, bounds: tuple[int, int]) -> int | None:
    if kind == H.V_NULL:
        return None
    if kind == H.V_INT:
        v = ival
    elif kind in (H.V_STRING, H.V_BYTES) and _DIGITS.fullmatch(header[pos:pos + n]):
        v = int(header[pos:pos + n])
    else:
        raise HandBack()
    if not bounds[0] <= v <= bounds[1]:
        raise HandBack()
    return v


def reply_of(stype: int, data: bytes, hs: int, hl: int, bs: int, bl: int) -> tuple:
    """The Reply tuple of one frame, or HandBack; HeaderError from the header twin."""
    header = data[hs:hs + hl]
    code, _version, opaque, flag, _ordinal, _lang, remark, _n, total, fields = H.parse_fields(stype, header, 0, hl,
                                                                                                MAX_EXT + 1)
    if not flag & 1 or total > MAX_EXT:
        raise HandBack()
    last: dict[str, tuple] = {}
    for f in fields:
        _, _, _, _, _, escaped, _ = f
        if escaped:
            raise HandBack()
        last[header[f[0]:f[0] + f[1]].decode("utf-8")] = f
    out = dict.fromkeys(REPLY_FIELDS)
    out.update(opaque=opaque, code=code, header_start=hs, header_len=hl, serialize_type=stype)
    out["remark"] = _text(header, remark[6], remark[2], remark[3])
    for name, bounds in INT_FIELDS.items():
        if name in last:
            _, _, vp, vl, iv, _, kind = last[name]
            out[_NAMES[name]] = _integer(header, kind, vp, vl, iv, bounds)
    for name in STRING_FIELDS:
        if name in last:
            _, _, vp, vl, _, _, kind = last[name]
            out[_NAMES[name]] = _text(header, kind, vp, vl)
    out["body"] = data[bs:bs + bl]
    return tuple(out[k] for k in REPLY_FIELDS)


def read_replies(buf, pos: int, end: int, max_frame: int = DEFAULT_MAX_FRAME) -> tuple[list, int]:
    """As the kernel's read_replies: (items, pos), each item a Reply tuple or
    ("slow", type, header_start, header_len, body_start, body_len)."""
    data = bytes(buf)
    if pos < 0 or end > len(data) or pos > end:
        raise ValueError("range outside the buffer")
    items: list = []
    while end - pos >= 4:
        (length,) = struct.unpack_from(">i", data, pos)
        if length < 4:
            raise FrameError(pos, "length below 4")
        if length > max_frame:
            raise FrameError(pos, "frame too long")
        if end - pos - 4 < length:
            break
        (word,) = struct.unpack_from(">I", data, pos + 4)
        hl, stype = word & 0xFFFFFF, word >> 24
        if hl > length - 4:
            raise FrameError(pos, "header length past the frame")
        if stype > 1:
            raise FrameError(pos, "unknown serialize type")
        hs, bs, bl = pos + 8, pos + 8 + hl, length - 4 - hl
        try:
            items.append(reply_of(stype, data, hs, hl, bs, bl))
        except HandBack:
            items.append(("slow", stype, hs, hl, bs, bl))
        pos += 4 + length
    return items, pos


# -- fast sends (SendSlots) -------------------------------------------------------------------------
# Written from SendSlots' contract (pyx/client_codec.pyx docstring): the send kept under its opaque
# in a ring of `size` slots; an answer that is a plain success completes the caller's future with
# result_type(status, uniq, msgId or "", mq, queueOffset or -1, recallHandle or None), anything else goes to
# owner._send_answer(fut, answer, msg, mq, uniq, channel, deadline, timeout).
MAX_OPAQUE = 0x7FFFFFFF


class SendSlots:
    def __init__(self, channel=None, size: int = 4096, result_type=None, status_of: dict | None = None):
        self.channel, self.size = channel, size
        self.result_type, self.status_of = result_type, status_of or {}
        self.kept: dict[int, list] = {}  # ring index -> [opaque, queue_id, fut, msg, mq, uniq, owner, deadline, timeout]
        self.opaque = 0
        self.armed = float("inf")

    @property
    def in_flight(self) -> int:
        return len(self.kept)

    def next_opaque(self) -> int:
        self.opaque = self.opaque % MAX_OPAQUE + 1
        return self.opaque

    def send(self, fut, owner, msg, mq, queue_id: int, compress_over: int, now: float, timeout: float,
             uniq) -> tuple[int, int | None]:
        """(status, opaque rendered under or None); `uniq`: what the render made."""
        if len(msg.body) > compress_over:
            return -1, None
        opaque = self.opaque % MAX_OPAQUE + 1
        if opaque % self.size in self.kept:
            return -1, None
        self.opaque = opaque
        self.kept[opaque % self.size] = [opaque, queue_id, fut, msg, mq, uniq, owner, now + timeout, timeout]
        if now + timeout < self.armed:
            self.armed = now + timeout
            return 1, opaque
        return 0, opaque

    def _pop(self, opaque: int):
        s = self.kept.get(opaque % self.size)
        if s is None or s[0] != opaque:
            return None
        del self.kept[opaque % self.size]
        return s

    def complete(self, reply: tuple) -> bool:
        """True when the Reply tuple answers a send kept here."""
        r = dict(zip(REPLY_FIELDS, reply))
        s = self._pop(r["opaque"])
        if s is None:
            return False
        _, queue_id, fut, msg, mq, uniq, owner, deadline, timeout = s
        status = self.status_of.get(r["code"])
        if status is None or self.result_type is None or (r["queue_id"] is not None and r["queue_id"] != queue_id):
            owner._send_answer(fut, reply, msg, mq, uniq, self.channel, deadline, timeout)
        elif not fut.done():
            fut.set_result(self.result_type(status, uniq, r["msg_id"] or "", mq,
                                            -1 if r["queue_offset"] is None else r["queue_offset"], r["recall_handle"]))
        return True

    def take(self, opaque: int):
        s = self._pop(opaque)
        return None if s is None else tuple(s[2:])

    def expire(self, now: float) -> list:
        out = []
        for i in sorted(self.kept):  # ring order
            if self.kept[i][7] <= now:
                out.append(tuple(self.kept.pop(i)[2:]))
        self.armed = min((s[7] for s in self.kept.values()), default=float("inf"))
        return out

    def take_all(self) -> list:
        out = [tuple(self.kept[i][2:]) for i in sorted(self.kept)]
        self.kept.clear()
        self.armed = float("inf")
        return out


def read_replies_with(buf, pos: int, end: int, sends: SendSlots, max_frame: int = DEFAULT_MAX_FRAME) -> tuple:
    """read_replies with the sends kept in `sends` completed on the way, frame by frame (an
    error in a later frame leaves the earlier ones completed); they leave no item."""
    items: list = []
    while end - pos >= 4:
        (length,) = struct.unpack_from(">i", bytes(buf[pos:pos + 4]))
        if length < 4 or length > max_frame or end - pos - 4 < length:
            break  # read_replies below raises or stops as it should
        one, nxt = read_replies(buf, pos, pos + 4 + length, max_frame)
        items += [i for i in one if i[0] == "slow" or not sends.complete(i)]
        pos = nxt
    rest, pos = read_replies(buf, pos, end, max_frame)
    return items + rest, pos
