"""Pure-Python twin of broker.kernels.send_path (tests only), written from its rules (the module
doc of pyx/send_path.pyx) and docs/formats.md §1 and §4, not from its code.

The pass over a read, frame by frame:
- the prefix: length (int32) below 4 or above max_frame, a header length past the frame, a
  serialize type above 1: FrameError; an incomplete frame ends the pass (RUN_DONE, its start);
- the kernel disabled, a response, another code than SEND_MESSAGE (10) / SEND_MESSAGE_V2 (310), a
  header with more than 32 ext fields: the frame goes to Python (RUN_SLOW);
- a send: the fields (V2's letters b e f g h i j, or the long names) read as Java would (integers
  in range, from a JSON number or a string of an optional '-' and at most 18 digits; the topic a
  string with no escapes; the properties a string); a field it cannot read, an escaped key, no
  topic, no queue id, a negative one, transaction bits in sysFlag (0xC), a body over max_body, no
  route for the topic, a queue id past the route's queues, properties over 32767 bytes once
  unescaped (or over 65536 escaped), "DELAY\\x01" in them, "TIMER_DE" in them with no timer topic
  set or in a batch: RUN_SLOW;
- else the record is appended at the write position (RUN_ROLL if it does not fit before the
  segment's 8-byte blank) and the reply rendered (or parked), unless the request is oneway.
- SEND_BATCH_MESSAGE (320) has V2's header; its body is messages back to back, each
  [total int32][magic][crc][flag int32][bodyLen int32][body][propsLen uint16][props], total being
  22 + bodyLen + propsLen; a malformed one, none at all, a body over max_body, or properties over
  32767 once the batch's (the header's) are appended (after a \x02 when a message's own are not
  empty and do not end with one): RUN_SLOW; the whole batch not fitting the segment: RUN_ROLL;
  else every message appended with its own flag, one reply with every msgId comma-joined and
  the first queue offset.
- with a cluster name set, the properties are stored as RocketMQ's SendMessageProcessor stores
  them: split on \x02, empty entries dropped, a CLUSTER entry dropped and one with the broker's
  cluster appended last, a single message's WAIT entry dropped (a batch's kept); entries joined
  by \x02, none after CLUSTER; over 32767 bytes then: RUN_SLOW. WAIT's value other than "true" (any case)
  means the reply is not parked.
- a timer message ("TIMER_DE" in the properties, a timer topic set): after the cluster rule, its
  properties must be well-formed UTF-8, not end with \x02, have at most 64 entries each of a key,
  \x01 and a value, no key twice, none of DELAY, TIMER_OUT_MS, REAL_TOPIC, REAL_QID,
  TIMER_DEL_UNIQKEY; its time is now + TIMER_DELAY_SEC * 1000, else now + TIMER_DELAY_MS, else
  TIMER_DELIVER_MS (a value of an optional '-' and 1 to 15 digits), ahead of now and at most the
  maximum delay ahead; rounded down to the precision (a multiple: one precision earlier). Then
  "\x02TIMER_OUT_MS\x01<time>\x02REAL_TOPIC\x01<topic>\x02REAL_QID\x01<queue id>" is appended
  (at most 32767 bytes in all) and the record goes to the timer topic's queue 0; the reply names
  the queue asked for and, with a UNIQ_KEY, a recallHandle: URL-safe base64 (padded) of
  "v1 <topic> <broker name> <time + 1> <UNIQ_KEY>" (at most 32767 bytes before encoding). A reply
  that would be parked (WAIT not false under parking), or any rule broken: RUN_SLOW.
"""
from __future__ import annotations

import base64
import re
import struct

from tests.twins import codec_twin as C
from tests.twins import header_twin as H

RUN_DONE, RUN_SLOW, RUN_ROLL, RUN_YIELD = 0, 1, 2, 3
SEND, SEND_V2, SEND_BATCH = 10, 310, 320
MAX_EXT = 32
SCRATCH = 65536
LETTERS = {"b": "topic", "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
           "j": "reconsumeTimes"}
LONG = {v: v for v in LETTERS.values()}


class FrameError(ValueError):
    pass


class Slow(Exception):
    """This frame goes to Python."""


def _int(kind: int, raw: bytes, ival: int, bits: int) -> int:
    if kind == H.V_INT:
        v = ival
    elif kind in (H.V_STRING, H.V_BYTES):
        text = raw.decode("latin-1")
        digits = text[1:] if text.startswith("-") else text
        if not digits or len(digits) > 18 or not all("0" <= ch <= "9" for ch in digits):
            raise Slow
        v = int(text)
    else:
        raise Slow
    if bits == 32 and not -2**31 <= v < 2**31:
        raise Slow
    return v


def stored(props: bytes, cluster: bytes) -> tuple[bytes | None, bool]:
    kept, wait = [], True
    for entry in props.split(b"\x02"):
        name, sep, value = entry.partition(b"\x01")
        if not entry or (sep and name == b"CLUSTER"):
            continue
        if sep and name == b"WAIT":
            wait = value.lower() == b"true"
        kept.append(entry)
    out = b"".join(e + b"\x02" for e in kept) + b"CLUSTER\x01" + cluster
    return (out if len(out) <= 32767 else None), wait


class Appender:
    def __init__(self, segment: bytearray, base: int, wrote: int, store_host: bytes, max_body: int):
        self.segment, self.base, self.wrote = segment, base, wrote
        self.store_host, self.max_body = store_host, max_body
        self.next: dict[tuple[bytes, int], int] = {}
        self.records: list[tuple[int, int]] = []  # (physical offset, size)

    def append(self, topic, qid, body, props, flag, sys_flag, born_ts, born_host, reconsume):
        size = C.record_length(len(body), len(topic), len(props), len(born_host) == 20, len(self.store_host) == 20)
        pos = self.wrote - self.base
        if size + 8 > len(self.segment) - pos:
            return None
        qo = self.next.get((topic, qid), 0)
        # the store timestamp is the kernel's clock: written as 0 here, blanked there to compare
        C.encode_record(self.segment, pos, self.wrote, qo, 0, topic, qid, body, props, flag, sys_flag,
                        born_ts if born_ts >= 0 else 0, born_host, self.store_host, reconsume, 0)
        phys = self.wrote
        self.next[(topic, qid)] = qo + 1
        self.wrote += size
        self.records.append((phys, size))
        return phys, qo, size


class Conn:
    def __init__(self, born_host: bytes):
        self.born_host = born_host
        self.replies: list[tuple] = []   # decoded: (serialize type, code, opaque, flag, ext)
        self.parked: list[tuple] = []
        self.slow: tuple | None = None   # (type, header start, header len, body start, body len, next)


_FORBIDDEN = (b"DELAY", b"TIMER_OUT_MS", b"REAL_TOPIC", b"REAL_QID", b"TIMER_DEL_UNIQKEY")


def _timer_value(v: bytes) -> int:
    if not re.fullmatch(rb"-?[0-9]{1,15}", v):
        raise Slow
    return int(v)


def timer_props(props: bytes, topic: bytes, qid: int, timer: tuple) -> tuple[bytes, bytes | None]:
    """(the properties as stored in the timer topic, the recall handle or None); Slow otherwise."""
    _, precision, max_ms, broker, now = timer
    try:
        props.decode("utf-8")
    except UnicodeDecodeError:
        raise Slow from None
    if not props or props.endswith(b"\x02"):
        raise Slow
    entries = props.split(b"\x02")
    if len(entries) > 64:
        raise Slow
    seen: dict[bytes, bytes] = {}
    for e in entries:
        k, sep, v = e.partition(b"\x01")
        if not k or not sep or not v or k in seen or k in _FORBIDDEN:
            raise Slow
        seen[k] = v
    if b"TIMER_DELAY_SEC" in seen:
        at = now + _timer_value(seen[b"TIMER_DELAY_SEC"]) * 1000
    elif b"TIMER_DELAY_MS" in seen:
        at = now + _timer_value(seen[b"TIMER_DELAY_MS"])
    elif b"TIMER_DELIVER_MS" in seen:
        at = _timer_value(seen[b"TIMER_DELIVER_MS"])
    else:
        raise Slow
    if at <= now or at - now > max_ms:
        raise Slow
    at = at - precision if at % precision == 0 else at // precision * precision
    out = props + b"\x02TIMER_OUT_MS\x01%d\x02REAL_TOPIC\x01%s\x02REAL_QID\x01%d" % (at, topic, qid)
    if len(out) > 32767:
        raise Slow
    handle = None
    if b"UNIQ_KEY" in seen:
        raw = b" ".join((b"v1", topic, broker, b"%d" % (at + 1), seen[b"UNIQ_KEY"]))
        if len(raw) > 32767:
            raise Slow
        handle = base64.urlsafe_b64encode(raw)
    return out, handle


class Pipeline:
    def __init__(self, app: Appender, routes: dict[bytes, int], enabled=True, parked=False,
                 max_frame=16 * 1024 * 1024, cluster: bytes = b"", timer: tuple | None = None):
        self.app, self.routes, self.enabled, self.parked, self.max_frame = app, routes, enabled, parked, max_frame
        self.cluster = cluster
        # (timer topic, precision ms, max delay ms, broker name, now ms) or None
        self.timer = timer
        self.timers = 0

    def run(self, c: Conn, buf: bytes, pos: int, end: int, yield_after: int = 0) -> tuple[int, int]:
        msgs0 = len(self.app.records)
        while end - pos >= 4:
            length = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
            if length < 4:
                raise FrameError(pos, f"length {length} is below 4")
            if length > self.max_frame:
                raise FrameError(pos, "too long")
            if end - pos - 4 < length:
                break
            word = int.from_bytes(buf[pos + 4:pos + 8], "big")
            hl, st = word & 0xFFFFFF, word >> 24
            if hl > length - 4:
                raise FrameError(pos, "header length")
            if st > 1:
                raise FrameError(pos, "serialize type")
            hs, bs, bl, nxt = pos + 8, pos + 8 + hl, length - 4 - hl, pos + 4 + length
            try:
                status = self._frame(c, buf, st, hs, hl, bs, bl)
            except Slow:
                c.slow = (st, hs, hl, bs, bl, nxt)
                return RUN_SLOW, pos
            if status == RUN_ROLL:
                c.slow = (st, hs, hl, bs, bl, nxt)
                return RUN_ROLL, pos
            pos = nxt
            if yield_after > 0 and len(self.app.records) - msgs0 >= yield_after and end - pos >= 4:
                return RUN_YIELD, pos
        return RUN_DONE, pos

    def append_values(self, c: Conn, topic: bytes, qid: int, body: bytes, props: bytes, flag: int = 0,
                      sys_flag: int = 0, born_ts: int = -1) -> int:
        """SendPipeline.append_values: what _frame appends for a SEND_MESSAGE_V2 of these values
        (reconsumeTimes 0, answered at once); the queue offset, or -1 where _frame hands it back,
        parks its reply or rolls."""
        if not self.enabled or self.parked or qid < 0 or sys_flag & 0xC:
            return -1
        if topic not in self.routes or qid >= self.routes[topic]:
            return -1
        if len(props) > 32767 or b"DELAY\x01" in props or b"TIMER_DE" in props:
            return -1
        if self.cluster:
            props, _ = stored(props, self.cluster)
            if props is None:
                return -1
        if len(body) > self.app.max_body:
            return -1
        r = self.app.append(topic, qid, bytes(body), props, flag, sys_flag, born_ts, c.born_host, 0)
        return -1 if r is None else r[1]

    def _frame(self, c: Conn, buf: bytes, st, hs, hl, bs, bl) -> int:
        if not self.enabled:
            raise Slow
        h, ext = H._parse(st, buf, hs, hl)  # HeaderError propagates, as the kernel's does
        if h["flag"] & 1 or len(ext) > MAX_EXT or h["code"] not in (SEND, SEND_V2, SEND_BATCH):
            raise Slow
        batch = h["code"] == SEND_BATCH
        names = LONG if h["code"] == SEND else LETTERS
        hdr = bytes(buf[hs:hs + hl])
        fields: dict[str, tuple] = {}
        for (kpos, klen, vpos, vlen, ival, kesc, kind), key, _ in ext:
            if kesc:
                raise Slow
            name = names.get(key)
            if name is not None:
                fields[name] = (kind, hdr[vpos:vpos + vlen], ival)  # the last of equal keys wins
        if "topic" not in fields or fields["topic"][0] not in (H.V_STRING, H.V_BYTES):
            raise Slow
        topic = fields["topic"][1]
        if "queueId" not in fields:
            raise Slow
        qid = _int(*fields["queueId"], 32)
        sys_flag = _int(*fields["sysFlag"], 32) if "sysFlag" in fields else 0
        flag = _int(*fields["flag"], 32) if "flag" in fields else 0
        born = _int(*fields["bornTimestamp"], 64) if "bornTimestamp" in fields else 0
        reconsume = _int(*fields["reconsumeTimes"], 32) if "reconsumeTimes" in fields else 0
        props = b""
        if "properties" in fields:
            kind, raw, _ = fields["properties"]
            if kind in (H.V_STRING, H.V_BYTES):
                props = raw
            elif kind == H.V_ESCAPED:
                if len(raw) > SCRATCH:
                    raise Slow
                props = H._Json(b'"' + raw + b'"').string()[3].encode("utf-8")
            else:
                raise Slow
        if qid < 0 or sys_flag & 0xC or (bl > self.app.max_body and not batch):
            raise Slow
        if topic not in self.routes or qid >= self.routes[topic]:
            raise Slow
        if len(props) > 32767 or b"DELAY\x01" in props:
            raise Slow
        timed = b"TIMER_DE" in props
        if timed and (self.timer is None or batch):
            raise Slow
        wait = True
        if self.cluster and not batch:
            props, wait = stored(props, self.cluster)
            if props is None:
                raise Slow
        parked = self.parked and wait
        if batch:
            return self._batch(c, h, st, topic, qid, bytes(buf[bs:bs + bl]), props, sys_flag, born, reconsume, parked)
        handle, into, into_qid = None, topic, qid
        if timed:
            if parked:
                raise Slow
            props, handle = timer_props(props, topic, qid, self.timer)
            into, into_qid = self.timer[0], 0
        r = self.app.append(into, into_qid, bytes(buf[bs:bs + bl]), props, flag, sys_flag, born, c.born_host, reconsume)
        if r is None:
            return RUN_ROLL
        phys, qo, _ = r
        self.timers += timed
        if not h["flag"] & 2:
            ext_out = {"msgId": (self.app.store_host + phys.to_bytes(8, "big", signed=True)).hex().upper(),
                       "queueId": str(qid), "queueOffset": str(qo), "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
            if handle is not None:
                ext_out["recallHandle"] = handle.decode()
            (c.parked if parked else c.replies).append((st, 0, h["opaque"], 1, ext_out))
        return RUN_DONE

    def _batch(self, c, h, st, topic, qid, body, bprops, sys_flag, born, reconsume, parked) -> int:
        msgs, pos = [], 0
        while pos < len(body):
            if len(body) - pos < 22:
                raise Slow
            total, _magic, _crc, flag, blen = struct.unpack_from(">iiiii", body, pos)
            if total < 22 or total > len(body) - pos or blen < 0 or 22 + blen > total:
                raise Slow
            (plen,) = struct.unpack_from(">H", body, pos + 20 + blen)
            if 22 + blen + plen != total or blen > self.app.max_body:
                raise Slow
            own = body[pos + 22 + blen:pos + 22 + blen + plen]
            merged = own + (b"\x02" if own and bprops and own[-1] != 2 else b"") + bprops
            if len(merged) > 32767:
                raise Slow
            msgs.append((body[pos + 20:pos + 20 + blen], merged, flag))
            pos += total
        if not msgs:
            raise Slow
        need = sum(C.record_length(len(b), len(topic), len(p), len(c.born_host) == 20, len(self.app.store_host) == 20)
                   for b, p, _ in msgs)
        if need + 8 > len(self.app.segment) - (self.app.wrote - self.app.base):
            return RUN_ROLL
        ids, first = [], None
        for b, p, flag in msgs:
            phys, qo, _ = self.app.append(topic, qid, b, p, flag, sys_flag, born, c.born_host, reconsume)
            first = qo if first is None else first
            ids.append((self.app.store_host + phys.to_bytes(8, "big", signed=True)).hex().upper())
        if not h["flag"] & 2:
            ext_out = {"msgId": ",".join(ids), "queueId": str(qid), "queueOffset": str(first),
                       "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
            (c.parked if parked else c.replies).append((st, 0, h["opaque"], 1, ext_out))
        return RUN_DONE
