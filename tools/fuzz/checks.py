"""One check per kernel that parses outside data: the compiled kernel against its pure-Python twin
on the same bytes (the same result, or the same class of exception), plus the Python decoders that
sit on top of it. The atheris harnesses call these with fuzzer input; the normal suite replays the
seed corpora and every crash input ever found through them (tests/test_fuzz_regressions.py).

Each check takes raw bytes and derives its parameters from a few leading bytes, so any input
file replays deterministically with no fuzzer present.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import sys

from broker.kernels import client_codec as KCC
from broker.kernels import codec as KC
from broker.kernels import entry_push as KEP
from broker.kernels import ha as KH
from broker.kernels import index_dispatch as KI
from broker.kernels import h2_session as KH2
from broker.kernels import header as KHD
from broker.kernels import pulled as KP
from broker.kernels import receive_reply as KRR
from broker.kernels import remoting as KR
from broker.kernels import send_request as KSR
from broker.kernels import sql92 as KS
from broker.proxy.converter import SYSTEM_PROPERTIES
from broker.remoting.command import VERSION, RemotingCommand, ext_string
from broker.server.filter.sql92 import Sql92Error, compile_sql92
from broker.store.errors import StoreError
from broker.store.message import decode_message, decode_properties
from tests.twins import client_codec_twin as TCC
from tests.twins import codec_twin as TC
from tests.twins import entry_push_twin as TEP
from tests.twins import ha_twin as TH
from tests.twins import index_dispatch_twin as TI
from tests.twins import grpc_message_twin as TG
from tests.twins import header_twin as THD
from tests.twins import pulled_twin as TP
from tests.twins import receive_reply_twin as TRR
from tests.twins import remoting_twin as TR
from tests.twins import send_request_twin as TSR
from tests.twins import sql92_twin as TS
from tests.twins.decoder import decode_record


class Mismatch(AssertionError):
    """The kernel and its twin disagree on one input (the fuzzer reports it as a crash)."""


def _outcome(fn, *args):
    """A call's result, or the name of the exception class it raised. The kernels and twins share
    class names (FrameError, HAFrameError, MessageIllegal) but not classes, so names compare."""
    try:
        return ("ok", fn(*args))
    except (ValueError, OverflowError) as e:
        return ("raised", type(e).__name__)


def _same(what: str, kernel, twin, *args) -> tuple:
    k, t = _outcome(kernel, *args), _outcome(twin, *args)
    if k != t:
        raise Mismatch(f"{what}: kernel {k!r} != twin {t!r}")
    return k


def _range(data: bytes, n: int) -> tuple[int, int]:
    """A start/end pair inside a buffer of n bytes, from two leading bytes."""
    a = data[0] % (n + 1) if data else 0
    b = n - (data[1] % (n + 1 - a)) if len(data) > 1 else n
    return a, max(a, b)


# -- remoting: frame splitter, then the JSON header decoder on every frame it returns -------------
MAX_FRAMES = (KR.DEFAULT_MAX_FRAME, 64, 4096)


def check_frames(data: bytes) -> None:
    if len(data) < 3:
        return
    max_frame = MAX_FRAMES[data[0] % len(MAX_FRAMES)]
    buf = bytearray(data[3:])
    start, end = _range(data[1:3], len(buf))
    kind, res = _same("split_frames", KR.split_frames, TR.split_frames, buf, start, end, max_frame)
    if kind != "ok":
        return
    frames, nxt = res
    if not start <= nxt <= end:
        raise Mismatch(f"split_frames returned next {nxt} outside [{start}, {end}]")
    for stype, hpos, hlen, bpos, blen in frames:
        if stype != 0:
            continue  # ROCKETMQ binary headers are refused by the connection before decoding
        try:
            cmd = RemotingCommand.decode(memoryview(buf)[hpos:hpos + hlen], memoryview(buf)[bpos:bpos + blen])
        except KR.FrameError:
            continue  # the typed refusal the connection turns into a close with a log line
        # what the broker decoded it re-encodes to a header that decodes to the same command
        # (ext values compared as Java's HashMap<String,String> holds them: 310 and "310" alike)
        again = RemotingCommand.decode(cmd.header_bytes(), b"")
        as_java = lambda c: (c.code, c.opaque, c.flag, {k: ext_string(v) for k, v in c.ext.items()})  # noqa: E731
        if as_java(again) != as_java(cmd):
            raise Mismatch(f"header round trip changed {cmd!r} into {again!r}")
    # the receive buffer's compaction (reallocateByteBuffer) on the same range
    _same("reallocate", KR.reallocate, TR.reallocate, bytearray(buf), start, end)


# -- commit-log records: scan (with its properties parse), then the Python decoder ---------------
def check_scan(data: bytes) -> None:
    if len(data) < 4:
        return
    check_crc = bool(data[0] & 1)
    base = struct.unpack_from(">H", data, 2)[0] << 20
    buf = bytearray(data[4:])
    start, end = _range(data[1:3], len(buf)) if data[0] & 2 else (0, len(buf))
    k = _outcome(KC.scan, buf, start, end, base, check_crc)
    t = _outcome(TC.scan, buf, start, end, base, check_crc)
    if k[0] != t[0] or (k[0] == "raised" and k != t):
        raise Mismatch(f"scan: kernel {k!r} != twin {t!r}")
    if k[0] != "ok":
        return
    krecs, kpos, kstatus, _reason = k[1]
    trecs, tpos, tstatus = t[1]
    if (kpos, kstatus) != (tpos, tstatus):
        raise Mismatch(f"scan stopped at {kpos} status {kstatus}, twin at {tpos} status {tstatus}")
    if krecs != trecs:
        raise Mismatch(f"scan records differ:\n kernel {krecs}\n twin   {trecs}")
    for rec in krecs:
        pos = rec["phys_offset"] - base
        msg = decode_message(buf, pos)
        ref = decode_record(buf, pos)
        if msg.size != ref["total_size"] or bytes(msg.body) != ref["body"] or msg.queue_offset != ref["queue_offset"]:
            raise Mismatch(f"decode_message disagrees with the reference decoder at {pos}")
    # the Python decoder must refuse, not crash, anywhere the scan found no record
    if kstatus != KC.SCAN_END and kpos < len(buf):
        try:
            decode_message(buf, kpos)
        except StoreError:
            pass


# -- properties: the kernel's parse (tag hash, KEYS, UNIQ_KEY) on arbitrary property bytes -------
HOST = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"


def check_properties(data: bytes) -> None:
    _same("tag_hash", KC.tag_hash, TC.tag_hash, data)
    props = data[:32767]  # PROPLEN is a signed short
    size = TC.record_length(3, 5, len(props))
    rec_k, rec_t = bytearray(size), bytearray(size)
    args = (0, 7, 1700000000000, b"Topic", 1, b"abc", props, 0, 0, 1, HOST, HOST, 0, 0)
    k = _outcome(KC.encode_record, rec_k, 0, *args)
    t = _outcome(TC.encode_record, rec_t, 0, *args)
    if k != t or rec_k != rec_t:
        raise Mismatch(f"encode_record with properties {props[:60]!r}: kernel {k!r} != twin {t!r}")
    if k[0] != "ok":
        return
    krecs = KC.scan(rec_k, 0, size, 0, True)[0]
    trecs = TC.scan(rec_t, 0, size, 0, True)[0]
    if krecs != trecs or len(krecs) != 1:
        raise Mismatch(f"scan of one record with properties {props[:60]!r}: {krecs} != {trecs}")
    # the Python decoder (clients, tools) reads the same pairs as the store's parse, last one winning
    ref = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in TC._properties_pairs(props)}
    decoded = decode_properties(props)
    if decoded != ref:
        raise Mismatch(f"decode_properties {decoded!r} != {ref!r} for {props[:80]!r}")
    if krecs[0]["keys"].decode("utf-8", "replace") != decoded.get("KEYS", ""):
        raise Mismatch(f"KEYS {decoded.get('KEYS')!r} (Python) != {krecs[0]['keys']!r} (kernel)")


# -- index: the index kernel on records whose KEYS / UNIQ_KEY are any bytes (not only UTF-8) -------
def check_index(data: bytes) -> None:
    if len(data) < 2:
        return
    slots, num = data[0] % 7 + 1, data[1] % 9 + 2  # small files: a record's keys cut across two
    props = data[2:2 + 32767]
    size = TC.record_length(1, 5, len(props))
    buf = bytearray(size * 2)
    pos = 0
    for i in range(2):  # the same keys twice: chains through the slots
        kind, n = _outcome(KC.encode_record, buf, pos, 500 + pos, i, 1_700_000_000_000 + 1000 * i, b"Topic", 0,
                           b"x", props, 0, 0, 0, HOST, HOST)
        if kind != "ok":
            return  # properties the encoder refuses (check_properties compares that refusal)
        pos += n
    scanner = KC.Scanner(4)
    mb = KC.MappedBuffer(buf, False)
    count = scanner.scan(mb, 0, pos, 500, False)[0]
    entries = scanner.entries[:count]
    k, t = KI.IndexDispatcher(), TI.IndexDispatcher()
    files_k, files_t = [TI.new_index_file("kernel", slots, num)], [TI.new_index_file("twin", slots, num)]
    k.register(KC.MappedBuffer(files_k[0], True), slots, num)
    t.register(files_t[0], slots, num)
    TI.dispatch_all("kernel", k, lambda a, b: k.dispatch(scanner, mb, a, b), slots, num, files_k, count)
    TI.dispatch_all("twin", t, lambda a, b: t.dispatch(entries, scanner.topics, bytes(buf), a, b), slots, num,
                    files_t, count)
    if [bytes(f) for f in files_k] != [bytes(f) for f in files_t] or k.keys_indexed != t.keys_indexed:
        raise Mismatch(f"index files differ for properties {props[:80]!r}")


# -- HA: the slave's dispatchReadRequest, the master's report reader, the record boundary ---------
def check_ha(data: bytes) -> None:
    if len(data) < 12:
        return
    expected, max_body = struct.unpack_from(">qi", data, 0)
    if data[0] & 0x80 and data[1] & 1:
        expected = -1  # an empty slave: takes the first frame's offset
    buf = bytearray(data[12:])
    start, end = _range(data[10:12], len(buf))
    _same("dispatch_read_request", KH.dispatch_read_request, TH.dispatch_read_request,
          buf, start, end, expected, max_body)
    _same("last_report", KH.last_report, TH.last_report, buf, start, end)
    _same("record_boundary", KH.record_boundary, TH.record_boundary, buf, start, end)
    _same("reallocate_byte_buffer", KH.reallocate_byte_buffer, TR.reallocate, bytearray(buf), start, end)


# -- DLedger's APPEND push on a follower: the entries checked, then copied into data and index files
PUSH_SEG = 4096


def check_push(data: bytes) -> None:
    """Leading 12 bytes: index, pos (uint16 each, pos x 8), count (uint8), term (uint8; the log
    ends with term - 1), `at` (uint16, into the body), the data file's base (uint8 x PUSH_SEG; odd:
    the kernel's data file is a memfd it is given the descriptor of), where the log ends in it
    (uint16), the index file's first unit (uint8); the rest is the body."""
    if len(data) < 12:
        return
    index, pos, count, term, at, seg_no, rel, first_unit = struct.unpack_from(">HHBBHBHB", data, 0)
    body = data[12:]
    _same("check_entries", KEP.check_entries, TEP.check_entries, body, index, pos * 8, count, term)
    seg_base = seg_no * PUSH_SEG
    ks, ts = bytearray(PUSH_SEG), bytearray(PUSH_SEG)
    ki, ti = bytearray(8 * 32), bytearray(8 * 32)
    args = (at % (len(body) + 2), index, seg_base + rel % (PUSH_SEG + 16), max(term - 1, 0))
    t = _outcome(TEP.append_entries, body, *args, ts, seg_base, ti, first_unit * 32)
    if seg_no & 1:  # the data file a real (memory) file the kernel writes runs into with pwrite
        fd = os.memfd_create("push-seg")
        try:
            os.ftruncate(fd, PUSH_SEG)
            with mmap.mmap(fd, PUSH_SEG) as m:
                k = _outcome(KEP.append_entries, body, *args, m, seg_base, ki, first_unit * 32, fd)
                ks = bytearray(m)
        finally:
            os.close(fd)
    else:
        k = _outcome(KEP.append_entries, body, *args, ks, seg_base, ki, first_unit * 32)
    if k != t or ks != ts or ki != ti:
        raise Mismatch(f"append_entries: kernel {k!r} != twin {t!r} (or the files they wrote differ)")


# -- headers: the JSON and ROCKETMQ header parsers, positions included, then a re-encode ----------
HEADER_CAPS = (0, 1, 2, 4, 64)


def _json_loads(raw):
    """json.loads reading numbers of any length, as the kernel (and Java's fastjson) keep them:
    Python 3.11 refuses integers of over 4,300 digits by default, and the check died on its own
    ValueError over a 4,401-digit ext value the kernel held as text (make fuzz, in CI)."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return json.loads(raw)
    finally:
        sys.set_int_max_str_digits(limit)


def check_headers(data: bytes) -> None:
    """data[0]: bit 0 the serialize type, bits 1.. the ext array's size (HEADER_CAPS); the rest is
    the header."""
    if not data:
        return
    stype = data[0] & 1
    cap = HEADER_CAPS[(data[0] >> 1) % len(HEADER_CAPS)]
    raw = data[1:]
    _same("parse_fields", KHD.parse_fields, THD.parse_fields, stype, raw, 0, len(raw), cap)
    kind, got = _same("decode_header", KHD.decode_header, THD.decode_header, stype, raw, 0, len(raw))
    if kind != "ok":
        return
    code, language, version, opaque, flag, remark, ext = got
    if stype == 0:
        # a third reading: whatever the kernel accepts, Python's json reads to the same values
        j = _json_loads(raw)
        if not isinstance(j, dict) or int(j["code"]) != code or j.get("remark") != remark \
                or (j.get("language") or "") != language:
            raise Mismatch(f"json.loads reads {raw[:200]!r} as {j!r}, the kernel as {got!r}")
        if ext.keys() != (j.get("extFields") or {}).keys():
            raise Mismatch(f"json.loads reads ext keys {list(j.get('extFields') or {})}, the kernel {list(ext)}")
        for k, v in (j.get("extFields") or {}).items():
            mine = _json_loads(ext[k]) if isinstance(v, (list, dict)) else ext[k]
            if mine != v or type(mine) is not type(v):
                raise Mismatch(f"ext {k!r}: json.loads {v!r}, kernel {ext[k]!r}")
        as_java = {k: ext_string(v) for k, v in ext.items()}  # HashMap<String,String>
        want = (code, language, version, opaque, flag, remark, as_java)
    else:
        as_java = {k: v or "" for k, v in ext.items()}  # null goes back as length 0
        want = (code, language if language in THD.LANGUAGE_NAMES else "OTHER", version, opaque, flag, remark,
                ext)
    # what was decoded re-encodes (kernel == twin, byte for byte) and decodes to the same header
    again = KHD.encode_header(stype, code, language, version, opaque, flag, remark, as_java)
    twin = THD.encode_header(stype, code, language, version, opaque, flag, remark, as_java)
    if again != twin:
        raise Mismatch(f"encode_header: kernel {again[:200]!r} != twin {twin[:200]!r}")
    back = KHD.decode_header(stype, again, 0, len(again))
    if back != want:
        raise Mismatch(f"re-encoded header decodes to {back!r}, not {want!r}")


# -- send: the send kernel's pass over a read, against its twin ----------------------------------
SEND_ROUTES = {b"R1": 2, b"R2": 1}
SEND_STORE_HOST = bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")
SEND_BORN_HOST = bytes([10, 1, 2, 3]) + (40000).to_bytes(4, "big")
SEND_MAX_BODY = 300
SEND_SEG = 1 << 20
SEND_BASE = 3 * SEND_SEG
# the timer topic, timerPrecisionMs, the maximum delay (ms), the broker name, the clock (ms)
SEND_TIMER = (b"rmq_sys_wheel_timer", 1000, 3 * 24 * 3600 * 1000, b"broker-a", 1_800_000_000_000)


def _send_replies(data) -> list[tuple]:
    out, pos = [], 0
    data = data or b""
    while pos < len(data):
        n, word = struct.unpack_from(">ii", data, pos)
        hl, stype = word & 0xFFFFFF, word >> 24
        code, lang, version, opaque, flag, remark, ext = THD.decode_header(stype, data, pos + 8, hl)
        if (lang, version, remark) != ("JAVA", VERSION, None) or n != 4 + hl:
            raise Mismatch(f"a reply's header is {(lang, version, remark, n, hl)}")
        out.append((stype, code, opaque, flag, ext))
        pos += 4 + n
    return out


def _blank_store_ts(seg, records) -> bytes:
    """The kernel stamps store times from its clock: blank them where the twin wrote 0."""
    out = bytearray(seg)
    for phys, _ in records:
        at = phys - SEND_BASE
        ts = at + 48 + (20 if int.from_bytes(out[at + 36:at + 40], "big") & 0x10 else 8)
        out[ts:ts + 8] = bytes(8)
    return bytes(out)



def send_pipeline(seg: bytearray, cluster: bytes, parked: bool, enabled: bool):
    """(Appender, SendPipeline) over `seg` with SEND_ROUTES' topics routed: the kernel as the checks
    (and tests/test_send_path_values.py) drive it."""
    from broker.kernels.send_path import SendPipeline
    app = KC.Appender(SEND_STORE_HOST, SEND_MAX_BODY, {}, SEND_BASE)
    app.attach(KC.MappedBuffer(seg, True), SEND_BASE)
    pipe = SendPipeline(app, cluster=cluster)
    for topic, n in SEND_ROUTES.items():
        pipe.set_route(topic, n)
    pipe.enabled, pipe.parked = enabled, parked
    return app, pipe

def send_both(buf: bytes, parked: bool, enabled: bool, rounds: int = 64, yield_after: int | None = None,
              cluster: bytes = b"", timer: bool = False) -> int:
    """Run the send kernel and its twin over `buf` (routes R1 with 2 queues, R2 with 1), resuming
    after every frame handed back, and compare everything: statuses and positions, the frame
    handed back, the records byte for byte, replies, counters, queue offsets. Returns the number of
    records the kernel appended. `cluster`: the broker's, stored as CLUSTER (empty: properties as sent);
    `timer`: timer messages taken into SEND_TIMER's topic at its clock."""
    from broker.kernels.send_path import ParkedReplies, SendConn
    from tests.twins import send_path_twin as TS
    seg_k, seg_t = bytearray(SEND_SEG), bytearray(SEND_SEG)
    app, pipe = send_pipeline(seg_k, cluster, parked, enabled)
    if timer:
        pipe.set_timer(SEND_TIMER[0], SEND_TIMER[1], SEND_TIMER[2], SEND_TIMER[3])
        pipe.timer_clock_ms = SEND_TIMER[4]
    conn = SendConn(SEND_BORN_HOST)
    conn.parked = ParkedReplies(None, SEND_STORE_HOST, b"DefaultRegion", b"true")
    tapp = TS.Appender(seg_t, SEND_BASE, SEND_BASE, SEND_STORE_HOST, SEND_MAX_BODY)
    twin = TS.Pipeline(tapp, SEND_ROUTES, enabled, parked, cluster=cluster, timer=SEND_TIMER if timer else None)
    tconn = TS.Conn(SEND_BORN_HOST)
    if yield_after is None:  # the fuzzers' inputs choose it too (0: never yield)
        yield_after = len(buf) % 4
    pos = 0
    for _ in range(rounds):
        rk = _outcome(pipe.run, conn, buf, pos, len(buf), yield_after)
        rt = _outcome(twin.run, tconn, buf, pos, len(buf), yield_after)
        if rk != rt:
            raise Mismatch(f"run from {pos}: kernel {rk}, twin {rt}")
        if rk[0] == "raised" or rk[1][0] == TS.RUN_DONE:
            break
        if rk[1][0] == TS.RUN_YIELD:
            pos = rk[1][1]
            continue
        got = (conn.slow_type, conn.slow_header_start, conn.slow_header_len, conn.slow_body_start,
               conn.slow_body_len, conn.slow_next)
        if got != tconn.slow:
            raise Mismatch(f"frame handed back: kernel {got}, twin {tconn.slow}")
        pos = conn.slow_next
    if app.wrote != tapp.wrote or _blank_store_ts(seg_k, tapp.records) != bytes(seg_t):
        raise Mismatch(f"records differ (kernel wrote to {app.wrote}, twin to {tapp.wrote})")
    replies, parked_replies = _send_replies(conn.take_replies()), _send_replies(conn.parked.render(0))
    if replies != tconn.replies or parked_replies != tconn.parked:
        raise Mismatch(f"replies: kernel {replies + parked_replies}, twin {tconn.replies + tconn.parked}")
    msgs, nbytes, _, _ = conn.take()
    if msgs != len(tapp.records) or nbytes != sum(s for _, s in tapp.records) or pipe.appended != msgs:
        raise Mismatch(f"counters: {msgs} messages, {nbytes} bytes; the twin {len(tapp.records)}")
    timers = conn.take_timers()
    if timers != twin.timers:
        raise Mismatch(f"timer messages: kernel {timers}, twin {twin.timers}")
    for (topic, qid), nxt in tapp.next.items():
        if app.next_offset(topic, qid) != nxt:
            raise Mismatch(f"next offset of {topic!r}/{qid}: {app.next_offset(topic, qid)}, twin {nxt}")
    return msgs


def check_send(data: bytes) -> None:
    """data[0]: bit 0 parked replies, bit 1 the kernel disabled, bit 2 a cluster name stored as
    CLUSTER, bit 3 timer messages taken; the rest is what a socket read."""
    if data:
        send_both(data[1:], bool(data[0] & 1), not data[0] & 2, cluster=b"DefaultCluster" if data[0] & 4 else b"",
                  timer=bool(data[0] & 8))


# -- replies: the client's reply reader, then the RemotingCommand decode of what it hands back ----
def reply_items(result: tuple) -> tuple:
    """read_replies' (items, pos) with each Reply as the twin's tuple."""
    items, pos = result
    return [i if type(i) is tuple else tuple(getattr(i, f) for f in TCC.REPLY_FIELDS) for i in items], pos


def check_replies(data: bytes) -> None:
    """data[0]: the frame limit (MAX_FRAMES), data[1:3] the range; the rest is what a client's
    socket read."""
    if len(data) < 3:
        return
    max_frame = MAX_FRAMES[data[0] % len(MAX_FRAMES)]
    buf = bytearray(data[3:])
    start, end = _range(data[1:3], len(buf))
    kind, res = _same("read_replies", lambda *a: reply_items(KCC.read_replies(*a)), TCC.read_replies, buf, start,
                      end, max_frame)
    if kind != "ok":
        return
    items, nxt = res
    if not start <= nxt <= end:
        raise Mismatch(f"read_replies returned next {nxt} outside [{start}, {end}]")
    mv = memoryview(buf)
    for item in items:
        if item[0] == "slow":  # what the channel does with a frame handed back
            _, stype, hs, hl, bs, bl = item
            try:
                RemotingCommand.decode(mv[hs:hs + hl], mv[bs:bs + bl], stype)
            except KR.FrameError:
                pass
        else:  # a Reply's header is one the RemotingCommand path reads too, to the same code and opaque
            r = dict(zip(TCC.REPLY_FIELDS, item))
            try:
                cmd = RemotingCommand.decode(mv[r["header_start"]:r["header_start"] + r["header_len"]], b"",
                                             r["serialize_type"])
            except KR.FrameError:
                continue  # Python's own limits (an integer of 4300+ digits in a field not read)
            if (cmd.code, cmd.opaque, cmd.remark) != (r["code"], r["opaque"], r["remark"]):
                raise Mismatch(f"Reply {r} but RemotingCommand {cmd!r} (remark {cmd.remark!r})")


# -- sends: the answers of sends kept in C (SendSlots) completed by the reply reader -------------
SEND_RING_SIZES = (4, 8, 4096)


class _Fut:
    """An asyncio future's two methods SendSlots calls."""

    def __init__(self, cancelled: bool = False):
        self.result, self.cancelled = None, cancelled

    def done(self) -> bool:
        return self.cancelled or self.result is not None

    def set_result(self, r) -> None:
        if self.done():
            raise Mismatch(f"a future completed twice ({self.result} then {r})")
        self.result = r


class _Owner:
    """A producer's _send_answer, recording what it was given (a Reply as the twin's tuple)."""

    def __init__(self, futs: list):
        self.futs, self.answers = futs, []

    def _send_answer(self, fut, answer, msg, mq, uniq, channel, deadline, timeout) -> None:
        if type(answer) is KCC.Reply:
            answer = tuple(getattr(answer, f) for f in TCC.REPLY_FIELDS)
        self.answers.append((self.futs.index(fut), answer, msg, mq, uniq, channel, deadline, timeout))


def _slot_items(items: list, futs: list, owner) -> list:
    """Slots handed over, their future as its index; the owner checked and left out."""
    if any(t[4] is not owner for t in items):
        raise Mismatch(f"a slot handed over with another owner: {items}")
    return [(futs.index(t[0]),) + tuple(t[1:4]) + tuple(t[5:]) for t in items]


def _sent_uniq(frame: bytes) -> tuple[int, str]:
    """The opaque and UNIQ_KEY of a SEND_MESSAGE_V2 frame the kernel rendered."""
    n, word = struct.unpack_from(">ii", frame, 0)
    hl = word & 0xFFFFFF
    cmd = RemotingCommand.decode(frame[8:8 + hl], frame[8 + hl:4 + n], word >> 24)
    props = dict(p.split("\x01", 1) for p in cmd.get_str("i", "").split("\x02"))
    return cmd.opaque, props["UNIQ_KEY"]


def sends_both(read: bytes, n_sends: int, size: int, skip: int, qid_bits: int, expire_at: float,
               cancelled_bits: int = 0, max_frame: int = KR.DEFAULT_MAX_FRAME) -> None:
    """`n_sends` messages kept in the kernel's SendSlots and its twin's (a ring of `size`, after
    `skip` opaques taken by other requests; send i asks queue i % 4, or 5 when bit i of qid_bits
    is set; timeouts 1-5 s from t=100; a body over the 8 bytes compress_over every third one;
    bit i of cancelled_bits: its caller cancelled it), then `read` read by both, then the sends
    left expired at `expire_at`, then the rest taken (a closed connection): the same statuses,
    opaques, deadlines, items handed on, SendResults and answers to the owner at every step."""
    from broker.client.message import Message
    from broker.client.producer import _SEND_STATUS, SendResult
    from broker.client.route import MessageQueue
    from broker.kernels.wbuf import WriteBuffer
    kern, twin = KCC.SendSlots("ch", size), TCC.SendSlots("ch", size, SendResult, _SEND_STATUS)
    for _ in range(skip):
        if kern.next_opaque() != twin.next_opaque():
            raise Mismatch("next_opaque differs")
    fk, ft = [], []
    ok, ot = _Owner(fk), _Owner(ft)
    w = WriteBuffer()
    for i in range(n_sends):
        qid = 5 if qid_bits >> i & 1 else i % 4
        msg = Message("T", b"b" * (9 if i % 3 == 2 else 1), tags="t")
        mq = MessageQueue("T", "broker-a", qid)
        fk.append(_Fut(bool(cancelled_bits >> i & 1)))
        ft.append(_Fut(bool(cancelled_bits >> i & 1)))
        before = len(w)
        rk = kern.send(w, fk[-1], ok, "g", msg, mq, qid, 4, 8, 100.0, 1.0 + i * 7 % 5)
        frame = w.getvalue()[before:]
        opaque, uniq = _sent_uniq(frame) if rk >= 0 else (None, None)
        rt, topaque = twin.send(ft[-1], ot, msg, mq, qid, 8, 100.0, 1.0 + i * 7 % 5, uniq)
        if (rk, opaque) != (rt, topaque) or (rk < 0 and frame):
            raise Mismatch(f"send {i}: kernel {rk} under {opaque} ({len(frame)} bytes), twin {rt} under {topaque}")
        if (kern.armed, kern.in_flight) != (twin.armed, twin.in_flight):
            raise Mismatch(f"after send {i}: kernel armed {kern.armed} with {kern.in_flight} in flight, twin "
                           f"{twin.armed} with {twin.in_flight}")
    kind, res = _same("read_replies with sends", lambda *a: reply_items(KCC.read_replies(*a, sends=kern)),
                      lambda *a: TCC.read_replies_with(*a[:3], twin, a[3]), bytearray(read), 0, len(read), max_frame)

    def state(step: str) -> None:
        if [f.result for f in fk] != [f.result for f in ft] or ok.answers != ot.answers:
            raise Mismatch(f"{step}: kernel {[f.result for f in fk]} {ok.answers}, twin {[f.result for f in ft]} "
                           f"{ot.answers}")
        if kern.in_flight != twin.in_flight:
            raise Mismatch(f"{step}: {kern.in_flight} in flight, twin {twin.in_flight}")
    state("read")
    if kind == "ok":
        ek, et = kern.expire(expire_at), twin.expire(expire_at)
        if _slot_items(ek, fk, ok) != _slot_items(et, ft, ot) or kern.armed != twin.armed:
            raise Mismatch(f"expire({expire_at}): kernel {ek} armed {kern.armed}, twin {et} armed {twin.armed}")
        state("expire")
    ak, at = kern.take_all(), twin.take_all()
    if _slot_items(ak, fk, ok) != _slot_items(at, ft, ot) or kern.in_flight or kern.armed != float("inf"):
        raise Mismatch(f"take_all: kernel {ak}, twin {at}")


def check_sends(data: bytes) -> None:
    """data[0]: the ring size (SEND_RING_SIZES) and, bits 2-4, opaques taken before the sends;
    data[1]: how many sends (0-15); data[2]: which ask queue 5; data[3]: when the rest expire
    and, bits 4-7, which were cancelled; the rest is what the socket read."""
    if len(data) < 4:
        return
    sends_both(data[4:], data[1] % 16, SEND_RING_SIZES[data[0] % 3], data[0] >> 2 & 7, data[2],
               100.0 + data[3] % 8, data[3] >> 4, MAX_FRAMES[(data[0] >> 5) % 3])


# -- pulled: the pulled-records kernel's views and Spark columns against its twin -----------------
def view_dicts(msgs: list) -> list[dict]:
    return [{f: getattr(m, f) for f in TP.MESSAGE_FIELDS} for m in msgs]


def columns_lists(cols) -> dict:
    """A RecordColumns' buffers as the twin's lists."""
    import numpy as np
    b = cols.buffers()
    n = cols.rows

    def arr(name, dtype):
        return np.frombuffer(b[name], dtype=dtype) if len(b[name]) else np.zeros(0, dtype)

    def strings(offsets, data, valid=None):
        off, raw = arr(offsets, "<i4"), bytes(b[data])
        ok = arr(valid, "u1") if valid else None
        return [None if ok is not None and not ok[i] else raw[off[i]:off[i + 1]] for i in range(len(off) - 1)]
    keys, values = strings("key_offsets", "key_data"), strings("value_offsets", "value_data")
    moff = arr("map_offsets", "<i4")
    return {"topic": [cols.topics[i] for i in arr("topic_idx", "<i4")], "queue_id": arr("queue_id", "<i4").tolist(),
            "queue_offset": arr("queue_offset", "<i8").tolist(), "msg_id": strings("msg_id_offsets", "msg_id_data"),
            "keys": strings("keys_offsets", "keys_data", "keys_valid"),
            "tags": strings("tags_offsets", "tags_data", "tags_valid"),
            "properties": [list(zip(keys[moff[i]:moff[i + 1]], values[moff[i]:moff[i + 1]])) for i in range(n)],
            "body": strings("body_offsets", "body_data"), "born_ts": arr("born_ts", "<i8").tolist(),
            "store_ts": arr("store_ts", "<i8").tolist()}


def kernel_columns(chunks, lo: int, hi: int) -> dict:
    cols = KP.RecordColumns()
    for c in chunks:
        cols.add(c, lo, hi)
    out = columns_lists(cols)
    if len({len(v) for v in out.values()}) != 1 or len(out["body"]) != cols.rows:
        raise Mismatch(f"columns of unequal lengths: { {k: len(v) for k, v in out.items()} }, rows {cols.rows}")
    return out


def check_pulled(data: bytes) -> None:
    """data[0]: the queue-offset range's low end (0..15), data[1] its width (255: all); the rest is
    a pulled body, given to the columns whole and cut at its first record (when that is one)."""
    if len(data) < 2:
        return
    lo = data[0] % 16
    hi = 1 << 62 if data[1] == 255 else lo + data[1]
    body = data[2:]
    kind, _ = _same("decode_records", lambda b: view_dicts(KP.decode_records(b)), TP.decode_records, body)
    _same("RecordColumns", kernel_columns, TP.record_columns, [body], lo, hi)
    if kind == "ok" and len(body) >= 4:
        cut = int.from_bytes(body[:4], "big")
        if 0 < cut < len(body):
            _same("RecordColumns in two chunks", kernel_columns, TP.record_columns, [body[:cut], body[cut:]], lo, hi)


# -- receive_reply: ReceiveMessage's messages encoded from pulled records -----------------------------
RECEIVE_INVISIBLE_MS = (30_000, 10_000, 43_200_000, 0, 1, -1_500)


def check_receive(data: bytes) -> None:
    """data[0]: the invisible time (RECEIVE_INVISIBLE_MS), data[1] bit 0 an empty topic (the
    message's own); the rest a pulled body, whose messages (as the pulled kernel reads them) the
    receive-reply kernel and its twin encode alike, one by one and as one framed batch, and the
    all-acked AckMessage answer of their ids and handles; and the whole answer written from the
    body itself (encode_popped, any bytes: a body that is not whole records is declined alike),
    data[1] bit 1 leaving queue 1's start offsets out."""
    if len(data) < 2:
        return
    invisible = RECEIVE_INVISIBLE_MS[data[0] % len(RECEIVE_INVISIBLE_MS)]
    topic = "" if data[1] & 1 else "Topic"
    starts = {f"{f}@{q}": 7 * q for f in "012" for q in range(-1, 9) if q != 1 or not data[1] & 2}
    _same("encode_popped", KRR.encode_popped, TRR.encode_popped, data[2:], "Topic", starts, "1700000000000 30000 3",
          "broker-a", invisible, SYSTEM_PROPERTIES, 1_700_000_000_123, bool(data[1] & 4))
    try:
        msgs = KP.decode_records(data[2:], "broker-a")
    except ValueError:
        return  # the pulled check's concern
    handles = [f"0 1700000000000 {invisible} 0 0 broker-a {m.queue_id} {m.queue_offset} {i}"
               for i, m in enumerate(msgs)]
    for m, h in zip(msgs, handles):
        _same("encode_message", KRR.encode_message, TRR.encode_message, m, topic, h, invisible, SYSTEM_PROPERTIES)
    _same("encode_messages", KRR.encode_messages, TRR.encode_messages, msgs, topic, handles, invisible,
          SYSTEM_PROPERTIES)
    _same("encode_ack_ok", KRR.encode_ack_ok, TRR.encode_ack_ok, [m.uniq_key or "" for m in msgs], handles)


# -- sql92: the SQL92 evaluator on any program and properties; the compiler on any text ----------
def check_sql92(data: bytes) -> None:
    """data[0] bit 0: 0 = [u16 program length][program][properties], the evaluator kernel against
    its twin on raw program bytes (both refuse a malformed one); 1 = [u16 text length][expression
    text][properties], the compiler (only Sql92Error) and then both evaluators on its program."""
    if len(data) < 3:
        return
    n = struct.unpack_from(">H", data, 1)[0]
    head, props = data[3:3 + n], data[3 + n:]
    if data[0] & 1:
        try:
            prog = compile_sql92(head.decode("utf-8", "replace"))
        except Sql92Error:
            return
        except RecursionError:
            raise Mismatch(f"the compiler recursed too deep on {head[:80]!r}") from None
        KS.validate(prog)
    else:
        prog = head
    _same("sql92 matches", KS.matches, TS.matches, prog, props)


# -- the gRPC endpoint: nghttp2's server session on client bytes, and the message reassembly ---------
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
GRPC_LIMITS = (0, 5, 64, 1 << 20)


def check_grpc(data: bytes) -> None:
    """data[0]: bit 0 the client preface and an empty SETTINGS put before the rest (so nghttp2's
    frame parser, not only its preface check, sees the garbage), bits 1-2 the reader's limit, bits
    3-7 the cut step; the rest is fed to a server session in pieces, each read's streams answered
    (a message, a message then messages framed by the caller then a status, a status, a reset in
    turn) and its output drained, as the endpoint does; the same bytes go through the message
    reader and its twin."""
    if len(data) < 2:
        return
    rest = data[1:]
    if data[0] & 1:
        rest = H2_PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + rest
    limit = GRPC_LIMITS[(data[0] >> 1) & 3]
    step = 1 + (data[0] >> 3) * 7
    session = KH2.ServerSession(limit)
    session.drain()
    for at in range(0, len(rest), step):
        try:
            events = session.feed(rest[at:at + step])
        except KH2.H2Error:
            break
        for ev in events:
            if ev[0] == KH2.EV_HEADERS or ev[0] == KH2.EV_CALL:
                sid = ev[1]
                turn = (sid >> 1) % 4  # client streams are odd: sid % 4 alone never gave turns 0 and 2
                if turn == 0:  # some answers above a DATA frame's 16 KiB (copied out in pieces)
                    session.unary(sid, (ev[2].encode() if ev[2] else b"") * (1 + sid % 5) + b"u" * (sid * 997 % 40000))
                elif turn == 1:
                    session.send_message(sid, b"x" * (sid % 300))
                    session.send_framed(sid, b"\x00\x00\x00\x00\x02ab" * (sid % 5))
                    session.finish(sid, 2, b"a%20b")
                elif turn == 2:
                    session.finish(sid, 12, None)
                else:
                    session.reset(sid)
        try:
            session.drain()
        except KH2.H2Error:
            break
        if not session.want_io():
            break
    k, t = KH2.MessageReader(limit), TG.MessageReader(limit)
    for at in range(0, len(rest), step):
        kr = _outcome(k.feed, rest[at:at + step])
        if kr != _outcome(t.feed, rest[at:at + step]):
            raise Mismatch(f"MessageReader: kernel {kr!r} != twin")
        if kr[0] == "raised":
            break


# -- the gRPC front's SendMessage request reader: kernel against twin, and protobuf when taken -------
SEND_REQUEST_LIMITS = ((4 * 1024 * 1024, 128, 16 * 1024), (0, 0, 0), (8, 2, 24), (1, 1, 1))


def check_send_request(data: bytes) -> None:
    """data[0]: bits 0-1 the limits (body, user properties, their size), bit 2 the peer; the rest is
    a SendMessageRequest's bytes. Kernel and twin give the same; what they take, protobuf's path
    (decode, topic check, to_remoting) must give too, field for field."""
    if not data:
        return
    from broker.proxy.config import ProxyConfig
    from broker.proxy.converter import SYSTEM_PROPERTIES
    body, num, size = SEND_REQUEST_LIMITS[data[0] & 3]
    peer = "10.0.0.1" if data[0] & 4 else ""
    payload = data[1:]
    k = _same("read_send", KSR.read_send, TSR.read_send, payload, peer, body, num, size, SYSTEM_PROPERTIES)
    r = _same("read_send_props", KSR.read_send_props, TSR.read_send_props, payload, peer, body, num, size,
              SYSTEM_PROPERTIES)
    if (r[1] is None) != (k[1] is None):
        raise Mismatch(f"read_send took {k[1]!r}, read_send_props {r[1]!r}")
    if k[1] is not None:
        config = ProxyConfig()
        config.maxMessageSize, config.userPropertyMaxNum, config.maxUserPropertySize = body, num, size
        ref = TSR.protobuf_path(payload, peer, config)
        if ref != k[1]:
            raise Mismatch(f"read_send took {k[1]!r}, protobuf's path gives {ref!r}")


CHECKS = {
    "frames": check_frames,
    "scan": check_scan,
    "properties": check_properties,
    "index": check_index,
    "ha": check_ha,
    "push": check_push,
    "headers": check_headers,
    "send": check_send,
    "replies": check_replies,
    "sends": check_sends,
    "pulled": check_pulled,
    "sql92": check_sql92,
    "grpc": check_grpc,
    "send_request": check_send_request,
    "receive": check_receive,
}


# -- the gRPC front's AckMessage request reader (local mode's batch ack): kernel against twin, and
# what they take against protobuf's parse, receipt_handle.BatchReader and ack_reply's answer --------
def check_ack_request(data: bytes) -> None:
    """data: an AckMessageRequest's bytes."""
    from broker.kernels import ack_request as KAR
    from tests.test_ack_request_kernel_vs_twin import _protobuf_path
    from tests.twins import ack_request_twin as TAR
    k = _same("read_ack", KAR.read_ack, TAR.read_ack, bytes(data))
    if k[1] is not None:
        ref = _protobuf_path(bytes(data))
        if ref != k[1]:
            raise Mismatch(f"read_ack took {k[1]!r}, protobuf's path gives {ref!r}")


CHECKS["ack_request"] = check_ack_request
