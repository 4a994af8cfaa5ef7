"""Pure-Python twin of broker.kernels.send_request.read_send: a SendMessageRequest's bytes → (topic,
body, tag, keys, properties, message_id) for one plain, valid message, None for anything else;
read_send_props, the same with the properties rendered as the front's producer renders them; and
protobuf_path, what the front sends for the same bytes without the kernel (protobuf's decode,
the topic check, to_remoting and send_now's declines), which whatever the kernel takes must equal."""
from __future__ import annotations

import re

# SystemProperties: strings protobuf checks and to_remoting does not read (store_host, receipt_handle,
# lite_topic); messages it does not read -> their string fields (body_digest, store_timestamp,
# invisible_duration, orphaned_transaction_recovery_duration, dead_letter_queue)
SKIPPED_SP_STRINGS = {10, 12, 21}
SKIPPED_SP_MESSAGES = {4: {2}, 9: set(), 15: set(), 19: set(), 20: {1, 2}}
_TOPIC = re.compile(rb"[%|a-zA-Z0-9_-]{1,127}")
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]")
_GRAPHIC = re.compile(rb"[\x21-\x7e]")


def _blank(raw: bytes) -> bool:
    return not _GRAPHIC.search(raw) and not raw.decode().strip()


class Bad(Exception):
    """Wire data read no further: the kernel's None."""


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    v = shift = 0
    while pos < end:
        b = buf[pos]
        pos += 1
        if shift == 63 and b > 1:
            raise Bad
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, pos
        shift += 7
        if shift > 63:
            raise Bad
    raise Bad


def _tag(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    key, pos = _varint(buf, pos, end)
    number, wire = key >> 3, key & 7
    if number == 0 or number > 536870911:
        raise Bad
    return number, wire, pos


def _len(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    n, pos = _varint(buf, pos, end)
    if n > end - pos:
        raise Bad
    return pos, pos + n


def _skip(buf: bytes, pos: int, end: int, wire: int) -> int:
    if wire == 0:
        return _varint(buf, pos, end)[1]
    if wire == 1 or wire == 5:
        size = 8 if wire == 1 else 4
        if end - pos < size:
            raise Bad
        return pos + size
    if wire == 2:
        return _len(buf, pos, end)[1]
    raise Bad


def _text(buf: bytes, s: int, e: int) -> str:
    try:
        return buf[s:e].decode("utf-8")
    except UnicodeDecodeError:
        raise Bad from None


def _checked(buf: bytes, pos: int, end: int, strings: set) -> None:
    while pos < end:
        number, wire, pos = _tag(buf, pos, end)
        if wire == 2 and number in strings:
            s, pos = _len(buf, pos, end)
            _text(buf, s, pos)
        else:
            pos = _skip(buf, pos, end, wire)


def _timestamp_ms(buf: bytes, pos: int, end: int) -> int:
    seconds = nanos = 0
    while pos < end:
        number, wire, pos = _tag(buf, pos, end)
        if number in (1, 2):
            if wire != 0:
                raise Bad
            v, pos = _varint(buf, pos, end)
            if number == 1:
                seconds = v - (1 << 64) if v >> 63 else v
            else:
                v &= 0xFFFFFFFF
                nanos = v - (1 << 32) if v >> 31 else v
        else:
            pos = _skip(buf, pos, end, wire)
    return seconds * 1000 + nanos // 1_000_000


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def read_send(payload: bytes, peer: str, max_body: int, max_user_props: int, max_user_prop_size: int,
              system_names) -> tuple | None:
    try:
        return _read(bytes(payload), peer, max_body, max_user_props, max_user_prop_size, system_names)
    except Bad:
        return None


def _read(buf, peer, max_body, max_user_props, max_user_prop_size, system_names):
    n = len(buf)
    if n == 0:
        raise Bad
    pos = 0
    message = None
    while pos < n:
        number, wire, pos = _tag(buf, pos, n)
        if number == 1:
            if wire != 2 or message is not None:
                raise Bad
            message = _len(buf, pos, n)
            pos = message[1]
        else:
            pos = _skip(buf, pos, n, wire)
    if message is None:
        raise Bad
    pos, end = message
    topic_span = sp_span = None
    body = (0, 0)
    user: dict[str, str] = {}
    entries = size = 0
    while pos < end:
        number, wire, pos = _tag(buf, pos, end)
        if number in (1, 3):
            if wire != 2:
                raise Bad
            span = _len(buf, pos, end)
            pos = span[1]
            if number == 1:
                if topic_span is not None:
                    raise Bad
                topic_span = span
            else:
                if sp_span is not None:
                    raise Bad
                sp_span = span
        elif number == 2:
            if wire != 2:
                raise Bad
            es, ee = _len(buf, pos, end)
            pos = ee
            k = v = b""
            while es < ee:
                num, w, es = _tag(buf, es, ee)
                if num in (1, 2):
                    if w != 2:
                        raise Bad
                    s, es = _len(buf, es, ee)
                    _text(buf, s, es)
                    if num == 1:
                        k = buf[s:es]
                    else:
                        v = buf[s:es]
                else:  # an entry with another field: protobuf keeps it out of the map
                    raise Bad
            if not k or _CONTROL.search(k) or _CONTROL.search(v):
                raise Bad
            key, value = k.decode(), v.decode()
            if key in system_names:
                raise Bad
            user[key] = value
            entries += 1
            size += len(k) + len(v)
        elif number == 4:
            if wire != 2:
                raise Bad
            body = _len(buf, pos, end)
            pos = body[1]
        else:
            pos = _skip(buf, pos, end, wire)
    if len(user) != entries or entries > max_user_props:
        raise Bad
    if topic_span is None:
        raise Bad
    name = None
    pos, end = topic_span
    while pos < end:
        number, wire, pos = _tag(buf, pos, end)
        if number in (1, 2):
            if wire != 2:
                raise Bad
            s, pos = _len(buf, pos, end)
            _text(buf, s, pos)
            if number == 2:
                name = buf[s:pos]
        else:
            pos = _skip(buf, pos, end, wire)
    if name is None or not _TOPIC.fullmatch(name):
        raise Bad
    topic = name.decode()
    body_len = body[1] - body[0]
    if body_len == 0 or 0 < max_body < body_len:
        raise Bad
    if sp_span is None:
        raise Bad
    pos, end = sp_span
    tag = message_id = born_host = trace = b""
    keys: list[str] = []
    born = None
    while pos < end:
        number, wire, pos = _tag(buf, pos, end)
        if number in (1, 2, 3, 8, 18):
            if wire != 2:
                raise Bad
            s, pos = _len(buf, pos, end)
            raw = buf[s:pos]
            if number == 2:
                if _CONTROL.search(raw):
                    raise Bad
                keys.append(_text(buf, s, pos))
                if _blank(raw):
                    raise Bad
                size += len(raw)
                continue
            _text(buf, s, pos)
            if number == 1:
                tag = raw
            elif number == 3:
                message_id = raw
            elif number == 8:
                born_host = raw
            else:
                trace = raw
        elif number in (5, 6):
            if wire != 0:
                raise Bad
            v, pos = _varint(buf, pos, end)
            if _int32(v) == (2 if number == 5 else 4):
                raise Bad
        elif number == 7:
            if wire != 2 or born is not None:
                raise Bad
            born = _len(buf, pos, end)
            pos = born[1]
        elif number in (11, 17):
            raise Bad
        elif wire == 2 and number in SKIPPED_SP_STRINGS:
            s, pos = _len(buf, pos, end)
            _text(buf, s, pos)
        elif wire == 2 and number in SKIPPED_SP_MESSAGES:
            s, pos = _len(buf, pos, end)
            _checked(buf, s, pos, SKIPPED_SP_MESSAGES[number])
        else:
            pos = _skip(buf, pos, end, wire)
    tag_text = None
    if tag:
        if _CONTROL.search(tag) or b"|" in tag or _blank(tag):
            raise Bad
        tag_text = tag.decode()
        size += len(tag)
    if size > max_user_prop_size:
        raise Bad
    if _blank(message_id):
        raise Bad
    born_ms = _timestamp_ms(buf, *born) if born is not None else None
    props = user
    props["UNIQ_KEY"] = message_id.decode()
    props["PGROUP"] = topic
    if trace:
        props["TRACE_CONTEXT"] = trace.decode()
    if born_host or peer:
        props["__BORNHOST"] = born_host.decode() or peer
    if born_ms is not None:
        props["BORN_TIMESTAMP"] = str(born_ms)
    return topic, buf[body[0]:body[1]], tag_text, keys or None, props, message_id.decode()


def read_send_props(payload: bytes, peer: str, max_body: int, max_user_props: int, max_user_prop_size: int,
                    system_names) -> tuple | None:
    """(topic, body, properties bytes, message_id): read_send's properties, then TAGS, KEYS and WAIT
    as Message.wire_properties() adds them, rendered as encode_properties does (k\x01v joined by
    \x02); the UNIQ_KEY is already among them (the message id)."""
    got = read_send(payload, peer, max_body, max_user_props, max_user_prop_size, system_names)
    if got is None:
        return None
    topic, body, tag, keys, props, message_id = got
    pairs = dict(props)
    if tag:
        pairs["TAGS"] = tag
    if keys:
        pairs["KEYS"] = " ".join(keys)
    pairs["WAIT"] = "true"
    return topic, body, "\x02".join(f"{k}\x01{v}" for k, v in pairs.items()).encode(), message_id


def protobuf_path(payload: bytes, peer: str, config) -> tuple | None:
    """What send_now sends for `payload`: (topic, body, tag, keys, properties, message_id), or None
    when it sends nothing itself (a refusal, a decline, a request protobuf cannot read)."""
    from google.protobuf.message import DecodeError

    from broker.proxy.converter import TRAN_MSG, to_remoting
    from broker.proxy.protocol import service_pb2 as spb
    from broker.proxy.route_activity import validate_topic
    from broker.proxy.status import ProxyError
    try:
        request = spb.SendMessageRequest.FromString(payload)
    except DecodeError:
        return None
    if len(request.messages) != 1:
        return None
    pm = request.messages[0]
    if pm.system_properties.message_group:
        return None
    try:
        topic = validate_topic(pm.topic)
        msg = to_remoting(pm, topic, config, peer)
    except ProxyError:
        return None
    if msg.properties.get(TRAN_MSG) == "true":
        return None
    return msg.topic, msg.body, msg.tags, msg.keys, msg.properties, pm.system_properties.message_id
