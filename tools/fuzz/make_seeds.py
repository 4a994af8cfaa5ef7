"""Writes the seed corpora (valid inputs) under tools/fuzz/seeds/<check>/: the fuzzer mutates
from whole frames and records, which random bytes almost never reach (a 4-byte magic, a length
that must equal the sum of its fields). Run once; the seeds are checked in.

    .venv/bin/python tools/fuzz/make_seeds.py
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import zlib
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from broker.remoting.command import RemotingCommand  # noqa: E402
from tests.twins import codec_twin as T  # noqa: E402

SEEDS = Path(__file__).resolve().parent / "seeds"
V4 = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
V6 = bytes(15) + b"\x01" + b"\x00\x00\x2a\x9f"


def records(n: int, v6: bool = False, blank_to: int | None = None, props=None) -> bytes:
    buf = bytearray()
    for i in range(n):
        p = props if props is not None else T.encode_properties({"TAGS": f"t{i % 3}", "KEYS": f"k{i}",
                                                                 "UNIQ_KEY": f"7F00000100002A9F{i:016X}"})
        body = bytes([i % 251]) * (i * 7 % 40)
        rec = bytearray(T.record_length(len(body), 5, len(p), v6, v6))
        T.encode_record(rec, 0, len(buf), i, 1700000000000 + i, b"Topic", i % 4, body, p, 0,
                        0x30 if v6 else 0, 1700000000000, V6 if v6 else V4, V6 if v6 else V4, 0, 0)
        buf += rec
    if blank_to is not None and blank_to - len(buf) >= 8:
        blank = bytearray(blank_to - len(buf))
        T.write_blank(blank, 0, len(blank))
        buf += blank
    return bytes(buf)


def frames_seeds() -> list[bytes]:
    send = RemotingCommand.request(310, {"a": "PG", "b": "TopicTest", "c": "TBW102", "d": "4", "e": "1",
                                         "f": "0", "g": "1700000000000", "h": "0", "i": "TAGS\x01a", "j": "0",
                                         "k": "false", "m": "false"}, b"hello").encode()
    pull = RemotingCommand.request(11, {"consumerGroup": "g", "topic": "T", "queueId": "0", "queueOffset": "5",
                                        "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0",
                                        "suspendTimeoutMillis": "15000", "subscription": "*",
                                        "subVersion": "0"}).encode()
    hb = RemotingCommand.request(34, None, b'{"clientID":"c"}').encode()
    resp = RemotingCommand(0, {"msgId": "X", "queueOffset": "3"}, b"", "ok", opaque=9, flag=1).encode()
    return [b"\x00\x00\x00" + send, b"\x00\x00\x00" + send + pull + hb, b"\x02\x00\x00" + resp + pull[:20],
            b"\x00\x05\x03" + hb + resp]


def scan_seeds() -> list[bytes]:
    return [b"\x00\x00\x00\x00" + records(3), b"\x01\x00\x00\x01" + records(5, blank_to=2048),
            b"\x03\x07\x09\x00" + records(2, v6=True) + bytes(64), b"\x00\x00\x00\x00" + records(4)[:-9]]


def properties_seeds() -> list[bytes]:
    return [T.encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AB12"}),
            b"TAGS\x01a\x02KEYS\x01b\x02", b"a\x01b\x02TAGS\x01\xe4\xbd\xa0", b"UNIQ_KEY\x01x\x02UNIQ_KEY\x01y"]


def ha_seeds() -> list[bytes]:
    log = records(4, blank_to=1024)
    out = []
    for expected, cut in ((0, len(log)), (-1, 300), (0, 100)):
        body = log[:cut]
        frames = struct.pack(">qi", 0, len(body)) + body + struct.pack(">qi", len(body), 0)
        out.append(struct.pack(">qi", expected, 1 << 20) + frames)
    return out


def push_seeds() -> list[bytes]:
    """check_push input: a push of three entries (one without a CRC) continuing a log at its end, the
    same cut short, and one whose second entry is of an older term."""
    def entry(index, term, pos, body, crc=True):
        c = zlib.crc32(body) & 0x7FFFFFFF if crc else 0
        return struct.pack(">iiqqqiiii", 1, 48 + len(body), index, term, pos, 0, 0, c, len(body)) + body
    pos = 80 * 8
    three = entry(5, 2, pos, b"a" * 100) + entry(6, 2, pos + 148, b"", crc=False) + entry(7, 3, pos + 196, b"b" * 7)
    older = entry(5, 2, pos, b"a" * 100) + entry(6, 1, pos + 148, b"c")
    head = struct.pack(">HHBBHBHB", 5, 80, 3, 3, 0, 0, pos, 0)
    return [head + three, head + three[:-3], struct.pack(">HHBBHBHB", 5, 80, 2, 3, 0, 0, pos, 0) + older]


def headers_seeds() -> list[bytes]:
    """check_headers input: a flags byte (bit 0 the serialize type, bits 1.. the ext array size
    index; 8 = 64 fields), then a header. The real clients' headers as captured from them, the
    same content in ROCKETMQ binary, and the corners of docs/formats.md §4.1."""
    from broker.kernels.header import encode_header
    from tests.test_header_real_clients import SAMPLES
    out = [b"\x08" + raw for raw in SAMPLES]
    for raw in SAMPLES:
        j = json.loads(raw)
        ext = {k: v if isinstance(v, str) else json.dumps(v) for k, v in j.get("extFields", {}).items()}
        out.append(b"\x09" + encode_header(1, j["code"], j.get("language", ""), j.get("version", 0),
                                            j.get("opaque", 0), j.get("flag", 0), j.get("remark") or None, ext))
    out += [
        b'\x00{"code":"-0","\\u0063ode":2,"language":null,"remark":"\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\"\\\\",'
        b'"extFields":{"a":[1,{"b":[true,false,null]}],"e":-1.5E+3,"h":9223372036854775808,'
        b'"a":"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80"}}',
        b'\x02 {"code":1 , "extFields" : {"x":1,"y":2,"z":3} , "extFields":null, "flag":"2147483647"}\r\n',
        b'\x04{"code":1,"x":' + b"[" * 31 + b"]" * 31 + b',"extFields":{"a":' + b'{"k":' * 30 + b"0" + b"}" * 30
        + b"}}",
        b'\x00{"code":1,"extFields":{"a":"\xed\x9f\xbf\xee\x80\x80\xf4\x8f\xbf\xbf"}}',
        b"\x01" + encode_header(1, -1, "NODE_JS", 32767, -2147483648, 3, "r\u00e9mark", {"": "", "k": "v" * 300}),
        b"\x09" + encode_header(1, 10, "OTHER", 0, 0, 0, None, {f"k{i}": str(i) for i in range(70)}),
        # refusals the check must see both sides make: nesting past the limit, a lone surrogate
        # escape, an integer Python will not convert (found writing the twin: a bare ValueError)
        b'\x08{"code":1,"extFields":{"a":' + b"[" * 31 + b"]" * 31 + b"}}",
        b'\x08{"code":1,"extFields":{"\\udc00":"x"}}',
        b'\x08{"code":1,"extFields":{"n":1' + b"0" * 4400 + b"}}",
    ]
    return out


def send_seeds() -> list[bytes]:
    """check_send input: a flags byte (bit 0 parked replies, bit 1 the kernel off, bit 2 a cluster,
    bit 3 timer messages taken), then a read: sends as ali-ons (V2, JSON numbers) and the C++
    client (long names, strings) write them, a ROCKETMQ-serialized one, other codes, timer
    messages (taken, refused, due already), and a torn frame at the end."""
    from broker.kernels.header import encode_header

    def frame(code, ext, body, stype=0, opaque=1, flag=0):
        h = encode_header(stype, code, "JAVA", 395, opaque, flag, None, {k: str(v) for k, v in ext.items()})
        return struct.pack(">ii", 4 + len(h) + len(body), (stype << 24) | len(h)) + h + body
    v2 = {"a": "pg", "b": "R1", "c": "TBW102", "d": 4, "e": 1, "f": 0, "g": 1700000000000, "h": 0,
          "i": "TAGS\x01t\x02UNIQ_KEY\x01ABC", "j": 0, "k": "false"}
    v1 = {"producerGroup": "pg", "topic": "R2", "queueId": 0, "sysFlag": 0, "bornTimestamp": "1700000000000",
          "flag": 0, "properties": "KEYS\x01k1 k2", "reconsumeTimes": 0}
    read = (frame(310, v2, b"hello") + frame(10, v1, b"world", opaque=2) + frame(310, v2, b"bin", stype=1, opaque=3)
            + frame(30, {"topic": "R1", "queueId": 0}, b"", opaque=4) + frame(310, {**v2, "b": "U"}, b"slow", opaque=5)
            + frame(310, {**v2, "i": "DELAY\x012"}, b"later", opaque=6) + frame(310, v2, b"oneway", opaque=7, flag=2))
    timers = (frame(310, {**v2, "i": "TIMER_DELAY_SEC\x0160\x02UNIQ_KEY\x01ABC"}, b"t1", opaque=8)
              + frame(310, {**v2, "i": "TIMER_DELIVER_MS\x011800000005500"}, b"t2", stype=1, opaque=9)
              + frame(310, {**v2, "i": "TIMER_DELAY_SEC\x0199999999"}, b"refused", opaque=10)
              + frame(310, {**v2, "i": "TIMER_DELIVER_MS\x011"}, b"due", opaque=11))
    return [bytes([0]) + read, bytes([1]) + read, bytes([2]) + read, bytes([0]) + read + read[:17],
            bytes([0]) + frame(310, v2, bytes(400)), bytes([0]) + b"\x00\x00\x00\x02garbage",
            bytes([8]) + timers + read, bytes([12]) + timers]


def replies_seeds() -> list[bytes]:
    """check_replies input: the frame limit index, the range (2 bytes), then a read as a client gets
    it: send and pull answers as the broker writes them (JSON and ROCKETMQ), an error with a
    remark, a request the broker sends (NOTIFY_CONSUMER_IDS_CHANGED), the field shapes §4.2 hands
    back, and a torn frame."""
    from broker.kernels.header import encode_header

    def frame(code, ext, body=b"", stype=0, opaque=1, flag=1, remark=None):
        h = encode_header(stype, code, "JAVA", 395, opaque, flag, remark, ext)
        return struct.pack(">ii", 4 + len(h) + len(body), (stype << 24) | len(h)) + h + body

    def raw_json(header: bytes, body=b""):
        return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body
    send = {"msgId": "7F00000100002A9F0000000000000000", "queueId": "3", "queueOffset": "42",
            "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    pull = {"nextBeginOffset": "64", "minOffset": "0", "maxOffset": "100", "suggestWhichBrokerId": "0"}
    read = (frame(0, send) + frame(0, send, stype=1, opaque=2) + frame(0, pull, records(3), opaque=3)
            + frame(0, pull, records(2), stype=1, opaque=4) + frame(17, {}, remark="topic not exist", opaque=5)
            + frame(40, {"consumerGroup": "cg"}, flag=0, opaque=6) + frame(19, {"nextBeginOffset": "5"}, opaque=7))
    odd = (raw_json(b'{"code":0,"opaque":8,"flag":1,"extFields":{"queueId":3,"queueOffset":"-0","msgId":"a\\u0041b"}}')
           + raw_json(b'{"code":0,"opaque":9,"flag":1,"extFields":{"queueOffset":"+1"}}')
           + raw_json(b'{"code":0,"opaque":10,"flag":1,"extFields":{"queueId":"2147483648"}}')
           + raw_json(b'{"code":0,"opaque":11,"flag":1,"extFields":{"\\u006dsgId":"x"}}')
           + raw_json(b'{"code":0,"opaque":12,"flag":1,"remark":null,"extFields":{"maxOffset":null,"msgId":1}}')
           + raw_json(b'{"code":0,"opaque":13,"flag":1,"extFields":{"minOffset":"0009223372036854775807"}}'))
    return [b"\x00\x00\x00" + read, b"\x00\x00\x00" + odd, b"\x02\x05\x03" + read + read[:30],
            b"\x01\x00\x00" + frame(0, send) + frame(0, pull, records(40), opaque=3)]


def sends_seeds() -> list[bytes]:
    """check_sends input: ring size and opaques skipped, how many sends, which ask queue 5, when
    the rest expire and which were cancelled, then a read answering them: plain successes (JSON
    and ROCKETMQ), a flush timeout, a failure code, another queue than asked, no queueId, an
    answer to no send, a hand-back, an answer twice, a torn frame."""
    from broker.kernels.header import encode_header

    def frame(code, ext, opaque, stype=0, flag=1, remark=None, body=b""):
        h = encode_header(stype, code, "JAVA", 395, opaque, flag, remark, ext)
        return struct.pack(">ii", 4 + len(h) + len(body), (stype << 24) | len(h)) + h + body

    def ok(opaque, qid, offset, stype=0):
        return frame(0, {"msgId": "7F00000100002A9F00000000000000%02X" % opaque, "queueId": str(qid),
                         "queueOffset": str(offset), "MSG_REGION": "DefaultRegion"}, opaque, stype)
    read = (ok(1, 0, 10) + ok(2, 1, 11, stype=1) + frame(10, {"queueId": "2", "queueOffset": "5", "msgId": "m"}, 3)
            + frame(17, {}, 4, remark="topic not exist") + ok(5, 3, 12) + frame(0, {"queueOffset": "7"}, 6)
            + ok(99, 0, 1) + frame(40, {"consumerGroup": "cg"}, 7, flag=0) + ok(1, 0, 10)
            + frame(0, {"msgId": "a\\u0041"}, 8))
    return [b"\x00\x0c\x00\x07" + read, b"\x01\x0c\x10\x35" + read, b"\x02\x0c\x00\xa0" + read + read[:25],
            b"\x00\x05\x00\x00" + read[:40] + b"\x00\x00\x00\x02xx", b"\x0c\x06\x00\x03" + read]


def pulled_seeds() -> list[bytes]:
    """check_pulled input: the offset range (low end, width; 255 all), then a pulled body: plain
    records, IPv6 hosts, a compressed body, properties with every oddity, a torn record."""
    import zlib
    odd = T.encode_properties({"TAGS": "t\u00e9", "KEYS": "k1 k2"}) + b"\x02lonely\x02\x01v\x02KEYS\x01\x02UNIQ_KEY\x01u\x02"
    body = zlib.compress(b"inflate me " * 20)
    rec = bytearray(T.record_length(len(body), 5, 0))
    T.encode_record(rec, 0, 0, 7, 1700000000000, b"Topic", 1, body, b"", 0, 1, 1700000000000, V4, V4, 0, 0)
    return [b"\x00\xff" + records(5), b"\x01\x02" + records(6), b"\x00\xff" + records(3, v6=True),
            b"\x00\xff" + records(2, props=odd) + bytes(rec), b"\x00\xff" + records(4)[:-9],
            b"\x00\xff" + records(2) + b"\x00" * 12]


def receive_seeds() -> list[bytes]:
    """check_receive input: the invisible time's index, the topic bit, then a pulled body whose
    records carry what the converter reads: FIFO, transaction and delay messages, a born time and
    host in properties, keys with empty pieces, user properties, IPv6 hosts, a compressed body."""
    import zlib
    fifo = T.encode_properties({"UNIQ_KEY": "U1", "TAGS": "t", "KEYS": "a  b", "__SHARDINGKEY": "g1", "x": "y",
                                "POP_CK": "1 2 3", "TRACE_CONTEXT": "tc"})
    tx = T.encode_properties({"TRAN_MSG": "true", "BORN_TIMESTAMP": "1700000000123", "__BORNHOST": "10.0.0.9"})
    delay = T.encode_properties({"TIMER_DELIVER_MS": "1700000099000", "u\u00e9": "v\u4e2d"})
    far = T.encode_properties({"TIMER_DELIVER_MS": "253402300800000", "BORN_TIMESTAMP": "\u0663"})
    body = zlib.compress(b"inflate me " * 20)
    rec = bytearray(T.record_length(len(body), 5, len(fifo)))
    T.encode_record(rec, 0, 0, 7, 1700000000000, b"Topic", 1, body, fifo, 0, 1, 1700000000000, V4, V4, 3, 0)
    return [b"\x00\x00" + records(3), b"\x01\x01" + records(2, props=fifo) + bytes(rec),
            b"\x02\x00" + records(2, v6=True, props=tx), b"\x03\x00" + records(1, props=delay),
            b"\x04\x01" + records(1, props=far), b"\x05\x00" + records(2)]


def sql92_seeds() -> list[bytes]:
    """check_sql92 input: expressions as text (mode 1) and as compiled programs (mode 0), each with
    properties that make them match, fail a conversion, or miss."""
    from broker.server.filter.sql92 import compile_sql92
    exprs = ["a > 5 AND b = TRUE", "a BETWEEN -3 AND 2.5 OR c IS NULL", "a IN ('x', 'abc') AND NOT (b <> 'true')",
             "a CONTAINS 'b' OR a NOT STARTSWITH 'x' OR a ENDSWITH 'c'", "a = 1e2 AND -a < 0 AND a >= 2147483648",
             "(a = 1) = FALSE OR a"]
    props = [b"a\x0110\x02b\x01true\x02TAGS\x01t", b"a\x01x\x02b\x01TRUE\x02", b"a\x01 1e2\x02a\x01abc\x02\x02\x01v",
             b"c\x01NaN\x02a\x01-Infinity"]
    out = []
    for i, e in enumerate(exprs):
        text, prog = e.encode(), compile_sql92(e)
        p = props[i % len(props)]
        out.append(b"\x01" + struct.pack(">H", len(text)) + text + p)
        out.append(b"\x00" + struct.pack(">H", len(prog)) + prog + p)
    return out


def grpc_seeds() -> list[bytes]:
    """A grpcio-like client's first bytes (preface put by check_grpc: data[0] bit 0), a unary call
    to /apache.rocketmq.v2.MessagingService/SendMessage; and a bare stream of gRPC messages."""
    def frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", sid) + payload

    def literal(name: bytes, value: bytes) -> bytes:
        return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value

    block = (b"\x83\x86" + literal(b":path", b"/apache.rocketmq.v2.MessagingService/SendMessage")
             + literal(b":authority", b"127.0.0.1:8081") + literal(b"content-type", b"application/grpc")
             + literal(b"te", b"trailers") + literal(b"grpc-timeout", b"3S") + literal(b"x-mq-client-id", b"c1"))
    msg = b"\x00" + struct.pack(">I", 11) + b"hello world"
    call = frame(1, 4, 1, block) + frame(0, 0, 1, msg[:7]) + frame(0, 1, 1, msg[7:])
    two = call + frame(1, 4, 3, block) + frame(0, 1, 3, msg) + frame(3, 0, 3, struct.pack(">I", 8))
    return [b"\x01" + call, b"\x09" + two, b"\x06" + msg * 3, b"\x00" + b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"]


def send_request_seeds() -> list[bytes]:
    """SendMessageRequests (check_send_request: data[0] the limits and peer): a bench client's plain
    message, one with every property to_remoting sets, a transactional one, a FIFO one, two messages."""
    from broker.proxy.protocol import definition_pb2 as pb
    from broker.proxy.protocol import service_pb2 as spb

    def request(**sp) -> pb.Message:
        user = sp.pop("user", {})
        return pb.Message(topic=pb.Resource(name="TopicTest"), body=b"hello", user_properties=user,
                          system_properties=pb.SystemProperties(message_id="0A0B0C0D0E0F", **sp))
    plain = request(tag="TagA", keys=["k1"], message_type=pb.NORMAL, body_encoding=pb.IDENTITY)
    full = request(tag="TagA", keys=["k1", "k2"], born_host="10.1.1.1", trace_context="00-ab", user={"u": "v"},
                   born_timestamp={"seconds": 1700000000, "nanos": 5_000_000}, store_host="h",
                   body_digest={"type": pb.CRC32, "checksum": "1A2B"})
    tx = request(message_type=pb.TRANSACTION, orphaned_transaction_recovery_duration={"seconds": 30})
    fifo = request(message_type=pb.FIFO, message_group="g1")
    one = spb.SendMessageRequest(messages=[plain]).SerializeToString()
    return [b"\x00" + one, b"\x04" + spb.SendMessageRequest(messages=[full]).SerializeToString(),
            b"\x02" + spb.SendMessageRequest(messages=[tx]).SerializeToString(),
            b"\x00" + spb.SendMessageRequest(messages=[fifo]).SerializeToString(),
            b"\x01" + spb.SendMessageRequest(messages=[plain, full]).SerializeToString(), b"\x03" + one[:-3]]


def ack_request_seeds() -> list[bytes]:
    """AckMessageRequests (check_ack_request): a SimpleConsumer's acks of one receive (taken), of two
    checkpoints, one with a handle of another shape, one with an entry's lite_topic, one cut short,
    one whose handles begin with another's head, one over read_ack's stack buffer."""
    from broker.proxy.protocol import definition_pb2 as pb
    from broker.proxy.protocol import service_pb2 as spb

    def request(handles, **kw) -> bytes:
        return spb.AckMessageRequest(group=pb.Resource(name="G"), topic=pb.Resource(name="T"), entries=[
            spb.AckMessageEntry(message_id=f"7F00000100002A9F{i:016X}", receipt_handle=h, **kw)
            for i, h in enumerate(handles)]).SerializeToString()
    one = [f"100 1700000000000 30000 3 0 broker-a 2 {100 + i} {9000 + 1024 * i}" for i in range(32)]
    two = one[:4] + ["7 1700000000001 60000 0 1 broker-a 0 9 77", "7 1700000000001 60000 0 1 broker-a 0 8 78"]
    # handles that begin with the last one's head and go on otherwise (queue 2 and queue 21: read
    # whole, not as the last head's tail), and a request over read_ack's stack buffer (16 KiB)
    longer = [one[0], "100 1700000000000 30000 3 0 broker-a 21 100 5", one[1],
              "100 1700000000000 30000 3 0 broker-a 2 102 7"]
    big = spb.AckMessageRequest(group=pb.Resource(name="G"), topic=pb.Resource(name="T"), entries=[
        spb.AckMessageEntry(message_id="m" * (i % 300), receipt_handle=f"100 1700000000000 30000 3 0 broker-a 2 "
                                                                      f"{100 + i} {9000 + 1024 * i}")
        for i in range(160)]).SerializeToString()
    return [request(one), request(two), request(one[:3] + ["100 1700000000000 30000 3 0 broker-a 2 101"]),
            request(one[:2], lite_topic="l"), request(one)[:-5], request(longer), big]


def main() -> None:
    for name, make in (("frames", frames_seeds), ("scan", scan_seeds), ("properties", properties_seeds),
                       ("ha", ha_seeds), ("push", push_seeds), ("headers", headers_seeds),
                       ("send", send_seeds), ("replies", replies_seeds), ("sends", sends_seeds), ("pulled", pulled_seeds),
                       ("sql92", sql92_seeds), ("grpc", grpc_seeds), ("send_request", send_request_seeds),
                       ("receive", receive_seeds),
                       ("ack_request", ack_request_seeds)):
        d = SEEDS / name
        d.mkdir(parents=True, exist_ok=True)
        for data in make():
            (d / hashlib.sha1(data).hexdigest()).write_bytes(data)
        print(f"{name}: {len(list(d.iterdir()))} seeds in {d}")


if __name__ == "__main__":
    main()
