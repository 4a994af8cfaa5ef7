"""Pure-Python twin of broker.kernels.receive_reply (tests only): ReceiveMessageResponse{message}
bytes written field by field from the proto (apache/rocketmq/v2 definition.proto, service.proto)
and protobuf's wire format, with broker.proxy.converter.to_proto's rules for what goes in each field."""
from __future__ import annotations

import hashlib

TS_MIN, TS_MAX = -62135596800, 253402300799
DUR_MAX = 315576000000
NORMAL, FIFO, DELAY, TRANSACTION = 1, 2, 3, 4
MD5, IDENTITY = 2, 1


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1  # negatives: ten bytes, two's complement
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def ld(field: int, data: bytes) -> bytes:
    return tag(field, 2) + varint(len(data)) + data


def string(field: int, s: str) -> bytes:
    return ld(field, s.encode())


def integer(field: int, v: int) -> bytes:
    return tag(field, 0) + varint(v)


def seconds_nanos(field: int, seconds: int, nanos: int) -> bytes:
    return ld(field, (integer(1, seconds) if seconds else b"") + (integer(2, nanos) if nanos else b""))


def timestamp(field: int, ms: int) -> bytes:
    if not -(1 << 63) <= ms < 1 << 63:
        raise ValueError(f"Timestamp is not valid: {ms} ms is out of range")
    seconds, nanos = ms // 1000, ms % 1000 * 1_000_000
    if not TS_MIN <= seconds <= TS_MAX:
        raise ValueError(f"Timestamp is not valid: Seconds {seconds}")
    return seconds_nanos(field, seconds, nanos)


def duration(field: int, ms: int) -> bytes:
    seconds, nanos = ms // 1000, ms % 1000 * 1_000_000
    if seconds < 0 and nanos > 0:
        seconds, nanos = seconds + 1, nanos - 1_000_000_000
    if not -DUR_MAX <= seconds <= DUR_MAX:
        raise ValueError(f"Duration is not valid: Seconds {seconds}")
    return seconds_nanos(field, seconds, nanos)


def _digits(s) -> bool:
    return bool(s) and s.isdigit()


def encode_message(m, topic: str, handle: str, invisible_ms: int, system) -> bytes:
    props = m.properties
    sp = bytearray()
    if m.tags:
        sp += string(1, m.tags)
    if props.get("KEYS"):
        for k in props["KEYS"].split(" "):
            if k:
                sp += string(2, k)
    msg_id = props.get("UNIQ_KEY") or m.msg_id
    if msg_id:
        sp += string(3, msg_id)
    body = bytes(m.body_view)
    sp += ld(4, integer(1, MD5) + string(2, hashlib.md5(body).hexdigest().upper()))
    sp += integer(5, IDENTITY)
    group = props.get("__SHARDINGKEY")
    deliver = props.get("TIMER_DELIVER_MS")
    kind = (FIFO if group else TRANSACTION if props.get("TRAN_MSG") == "true" else
            DELAY if _digits(deliver) else NORMAL)
    sp += integer(6, kind)
    born = props.get("BORN_TIMESTAMP")
    sp += timestamp(7, int(born) if _digits(born) else m.born_timestamp)
    born_host = props.get("__BORNHOST") or (m.born_host.rpartition(":")[0] if m.born_host else "")
    if born_host:
        sp += string(8, born_host)
    sp += timestamp(9, m.store_timestamp)
    if m.store_host:
        sp += string(10, m.store_host)
    if kind == DELAY:
        sp += timestamp(11, int(deliver))
    sp += string(12, handle)
    if m.queue_id:
        sp += integer(13, m.queue_id)
    sp += integer(14, m.queue_offset)
    sp += duration(15, invisible_ms)
    attempt = m.reconsume_times + 1
    if not -(1 << 31) <= attempt < 1 << 31:
        raise ValueError(f"Value out of range: {attempt}")
    sp += integer(16, attempt)
    if kind == FIFO:
        sp += string(17, group)
    if props.get("TRACE_CONTEXT"):
        sp += string(18, props["TRACE_CONTEXT"])
    topic = topic or m.topic
    msg = ld(1, string(2, topic) if topic else b"")
    for k, v in props.items():
        if k not in system:
            msg += ld(2, string(1, k) + string(2, v))
    msg += ld(3, bytes(sp))
    if body:
        msg += ld(4, body)
    return ld(2, msg)


def encode_messages(msgs: list, topic: str, handles: list, invisible_ms: int, system) -> bytes:
    if len(handles) != len(msgs):
        raise ValueError(f"{len(msgs)} messages but {len(handles)} receipt handles")
    out = bytearray()
    for m, h in zip(msgs, handles):
        one = encode_message(m, topic, h, invisible_ms, system)
        out += b"\x00" + len(one).to_bytes(4, "big") + one
    return bytes(out)


STATUS_OK = b"\x08\xa0\x9c\x01\x12\x02OK"  # Status{code: OK (20000), message: "OK"}


def encode_ack_ok(message_ids: list, handles: list) -> bytes:
    if len(handles) != len(message_ids):
        raise ValueError(f"{len(message_ids)} message ids but {len(handles)} receipt handles")
    out = bytearray(ld(1, STATUS_OK))
    for m, h in zip(message_ids, handles):
        out += ld(2, (string(1, m) if m else b"") + (string(2, h) if h else b"") + ld(3, STATUS_OK))
    return bytes(out)


# -- encode_popped ----------------------------------------------------------------------------------
_READ = ("TAGS", "KEYS", "UNIQ_KEY", "__SHARDINGKEY", "TRAN_MSG", "TIMER_DELIVER_MS", "BORN_TIMESTAMP",
         "__BORNHOST", "TRACE_CONTEXT", "POP_CK")


class _Popped:
    """A record as encode_message reads a message (the pulled twin's fields)."""

    def __init__(self, rec: dict, props: dict):
        import socket
        self.properties = props
        self.tags = props.get("TAGS")
        self.msg_id = rec["msg_id"]
        self.body_view = rec["body"]
        self.born_timestamp, self.store_timestamp = rec["born_timestamp"], rec["store_timestamp"]
        born, store = rec["born_host"], rec["store_host"]
        self.born_host = f"{socket.inet_ntoa(born[:4])}:{int.from_bytes(born[4:], 'big')}"
        self.store_host = f"{socket.inet_ntoa(store[:4])}:{int.from_bytes(store[4:], 'big')}"
        self.queue_id, self.queue_offset = rec["queue_id"], rec["queue_offset"]
        self.reconsume_times = rec["reconsume_times"]
        self.topic = rec["topic"].decode("utf-8", "replace")


def _declined_number(value: str | None) -> bool:
    """A value str.isdigit may read past ASCII, or more digits than the kernel reads."""
    return value is not None and (not value.isascii() or (value.isdigit() and len(value) > 18))


def encode_popped(body, topic: str, starts: dict, middle: str, broker_name: str, invisible_ms: int, system,
                  now_ms: int, want_handles: bool):
    """What the kernel's encode_popped returns: (bytes, handles or None), or None where it declines."""
    from tests.twins import pulled_twin as P
    if not topic or not body:
        return None
    data, pos = bytes(body), 0
    out, handles = bytearray(b"\x00\x00\x00\x00\x0a" + ld(1, STATUS_OK)), []
    while pos < len(data):
        try:
            rec = P._record(data, pos, inflate=False)
        except ValueError:
            return None
        if rec["sys_flag"] & 0x31:
            return None
        try:  # the whole properties string UTF-8 (a piece the dict drops included)
            rec["props"].decode()
        except UnicodeDecodeError:
            return None
        pairs = [(k.decode(), v.decode()) for k, v in P._pairs(rec["props"])]
        user = [k for k, _ in pairs if k not in system]
        props = dict(pairs)
        if len(user) != len(set(user)) or len(user) > 64 or "POP_CK" in props or "UNIQ_KEY" not in props:
            return None
        kind_read = not props.get("__SHARDINGKEY") and props.get("TRAN_MSG") != "true"
        if _declined_number(props.get("BORN_TIMESTAMP")) or (kind_read and _declined_number(
                props.get("TIMER_DELIVER_MS"))):
            return None
        t = rec["topic"]
        flag = ("2" if b"+" in t[7:] else "1") if t.startswith(b"%RETRY%") else "0"
        start = starts.get(f"{flag}@{rec['queue_id']}")
        if type(start) is not int or not 0 <= start < 1 << 63:
            return None
        handle = (f"{start} {middle} {flag} {broker_name} {rec['queue_id']} {rec['queue_offset']} "
                  f"{rec['commit_log_offset']}")
        try:
            one = encode_message(_Popped(rec, props), topic, handle, invisible_ms, system)
        except ValueError:
            return None
        out += b"\x00" + len(one).to_bytes(4, "big") + one
        handles.append(handle)
        pos += rec["size"]
    try:
        ts = timestamp(3, now_ms)
    except ValueError:
        return None
    out += b"\x00" + len(ts).to_bytes(4, "big") + ts
    return bytes(out), handles if want_handles else None
