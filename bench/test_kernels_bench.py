"""Micro-benchmarks of the codec kernels (pytest-benchmark), each beside a numpy memcpy of the same bytes.

    .venv/bin/python -m pytest bench/test_kernels_bench.py --benchmark-only -q

Every benchmark stores in `extra_info`: the bytes one call moves (`bytes`), records per call,
`bytes_per_s` / `records_per_s` from the median, and `memcpy_s`, the best time of
`np.copyto` over the same number of bytes, measured right after in the same process, with
`x_memcpy` = kernel median / memcpy time (1.0 = as fast as copying the bytes once). For
1 KiB a numpy call's own overhead (~0.3-1 us) dominates memcpy_s, so `bulk_memcpy_pct` also
compares with the bulk memcpy bandwidth (64 MiB copy) measured once per session.

Buffers are reused between rounds (as the broker reuses its mapped segment), so the
targets are cache-warm: these are the kernels' own costs, not page-fault or DRAM costs.
Every kernel benchmark is in a pytest-benchmark group (`--benchmark-group-by=group`) with a
`test_memcpy_<group>` benchmark beside it: np.copyto of the same number of bytes under the same
harness; `python -m bench` prints kernel median / that memcpy median as "x memcpy (bench)".
Groups: encode_record_1k, encode_batch_256x1k, scan_8MiB (Scanner.scan with and without CRC),
dispatch_read_request (broker.kernels.ha, a 4 MiB HA receive buffer of 32 KiB transfer frames),
reallocate_byte_buffer (broker.kernels.ha, a 32 KiB incomplete frame moved to the buffer's front),
split_frames (broker.kernels.remoting, 1 MiB of SEND_MESSAGE_V2 request frames with 1 KiB bodies).

`python -m bench` runs this file and puts the medians in its table.
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from broker.kernels.codec import MappedBuffer, Scanner, encode_batch, encode_record
from broker.kernels.ha import dispatch_read_request, frame_header, reallocate_byte_buffer
from broker.kernels.remoting import split_frames

TOPIC = b"TopicTest"
PROPS = b"TAGS\x01TagA\x02KEYS\x01order-1"
BORN_HOST = bytes([127, 0, 0, 1, 0, 0, 0x2A, 0x9F])
STORE_HOST = bytes([127, 0, 0, 1, 0, 0, 0x2A, 0x9F])
KiB = 1024
BATCH = 256
SCAN_SEGMENT = 8 << 20      # bytes of 1 KiB records the scan benchmark walks
SCAN_MAX_RECORDS = 8192     # the reput service's Scanner size (reput_service.BATCH)

# ------------------------------------------------------------------------------ memcpy reference

_BULK: dict[str, float] = {}


def _memcpy_seconds(nbytes: int, budget: float = 0.05) -> float:
    """Best per-call time of np.copyto over `nbytes` between two pre-faulted arrays."""
    src = np.full(nbytes, 1, dtype=np.uint8)
    dst = np.zeros(nbytes, dtype=np.uint8)
    np.copyto(dst, src)
    # enough calls per sample that the timer's own cost is negligible
    inner = max(1, int(2e-4 * 10e9 / max(nbytes, 1)))  # ~0.2 ms of copying at ~10 GB/s
    best = float("inf")
    deadline = time.perf_counter() + budget
    rounds = 0
    while rounds < 5 or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        for _ in range(inner):
            np.copyto(dst, src)
        best = min(best, (time.perf_counter() - t0) / inner)
        rounds += 1
    return best


def _bulk_memcpy_Bps() -> float:
    if "Bps" not in _BULK:
        size = 64 << 20
        _BULK["Bps"] = size / _memcpy_seconds(size, budget=0.2)
    return _BULK["Bps"]


def _report(benchmark, nbytes: int, records: int) -> None:
    benchmark.extra_info["bytes"] = nbytes
    benchmark.extra_info["records"] = records
    stats = getattr(benchmark, "stats", None)
    if not stats:  # --benchmark-disable: the function ran once, nothing to report
        return
    median = stats.stats.median
    memcpy = _memcpy_seconds(nbytes)
    bulk = _bulk_memcpy_Bps()
    benchmark.extra_info.update(
        median_s=median,
        bytes_per_s=nbytes / median,
        records_per_s=records / median,
        memcpy_s=memcpy,
        memcpy_bytes_per_s=nbytes / memcpy,
        x_memcpy=median / memcpy,
        bulk_memcpy_bytes_per_s=bulk,
        bulk_memcpy_pct=100.0 * (nbytes / median) / bulk,
    )


# ------------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def body_1k() -> bytes:
    return os.urandom(KiB)  # incompressible; the CRC costs the same whatever the bytes


def _record_len(body_len: int) -> int:
    return 91 + body_len + len(TOPIC) + len(PROPS)


@pytest.fixture(scope="module")
def scan_segment(body_1k):
    """SCAN_SEGMENT bytes of 1 KiB records written by encode_batch, as a MappedBuffer."""
    arr = np.zeros(SCAN_SEGMENT, dtype=np.uint8)
    buf = MappedBuffer(arr)
    bodies = [body_1k] * BATCH
    pos, qo, ts = 0, 0, time.time_ns() // 1_000_000
    while True:
        n, end = encode_batch(buf, pos, SCAN_SEGMENT, pos, qo, ts, TOPIC, 0, bodies, PROPS, 0, 0, ts,
                              BORN_HOST, STORE_HOST)
        qo += n
        pos = end
        if n < len(bodies):
            break
    yield arr, buf, pos, qo
    buf.release()


# ---------------------------------------------------------------------------------- benchmarks

def _memcpy_bench(benchmark, nbytes: int) -> None:
    """The group's reference: np.copyto of `nbytes` between two pre-faulted arrays, same harness."""
    src = np.full(nbytes, 1, dtype=np.uint8)
    dst = np.zeros(nbytes, dtype=np.uint8)
    benchmark(np.copyto, dst, src)
    _report(benchmark, nbytes, 1)


@pytest.mark.benchmark(group="encode_record_1k")
def test_encode_record_1k(benchmark, body_1k):
    arr = np.zeros(64 * KiB, dtype=np.uint8)
    buf = MappedBuffer(arr)
    ts = time.time_ns() // 1_000_000
    total = benchmark(encode_record, buf, 0, 0, 0, ts, TOPIC, 0, body_1k, PROPS, 0, 0, ts,
                      BORN_HOST, STORE_HOST)
    assert total == _record_len(KiB)
    _report(benchmark, total, 1)
    buf.release()


@pytest.mark.benchmark(group="encode_record_1k")
def test_memcpy_encode_record_1k(benchmark):
    _memcpy_bench(benchmark, _record_len(KiB))


@pytest.mark.benchmark(group="encode_batch_256x1k")
def test_encode_batch_256x1k(benchmark, body_1k):
    size = BATCH * _record_len(KiB) + 4096
    arr = np.zeros(size, dtype=np.uint8)
    buf = MappedBuffer(arr)
    bodies = [body_1k] * BATCH
    ts = time.time_ns() // 1_000_000
    n, end = benchmark(encode_batch, buf, 0, size, 0, 0, ts, TOPIC, 0, bodies, PROPS, 0, 0, ts,
                       BORN_HOST, STORE_HOST)
    assert n == BATCH and end == BATCH * _record_len(KiB)
    _report(benchmark, end, n)
    buf.release()


@pytest.mark.benchmark(group="encode_batch_256x1k")
def test_memcpy_encode_batch_256x1k(benchmark):
    _memcpy_bench(benchmark, BATCH * _record_len(KiB))


@pytest.mark.benchmark(group="scan_8MiB")
def test_scanner_scan_1k_segment(benchmark, scan_segment):
    """What the reput service runs per wake-up: no CRC, up to 8192 records per call."""
    _, buf, end, records = scan_segment
    scanner = Scanner(SCAN_MAX_RECORDS)

    def scan_all():
        pos = count = 0
        while pos < end:
            n, pos, status = scanner.scan(buf, pos, end, 0, False)
            count += n
        return count

    assert benchmark(scan_all) == records
    _report(benchmark, end, records)


@pytest.mark.benchmark(group="scan_8MiB")
def test_scanner_scan_1k_segment_crc(benchmark, scan_segment):
    """Recovery's scan: the same walk with the body CRC checked."""
    _, buf, end, records = scan_segment
    scanner = Scanner(SCAN_MAX_RECORDS)

    def scan_all():
        pos = count = 0
        while pos < end:
            n, pos, status = scanner.scan(buf, pos, end, 0, True)
            count += n
        return count

    assert benchmark(scan_all) == records
    _report(benchmark, end, records)


@pytest.mark.benchmark(group="scan_8MiB")
def test_memcpy_scan_8MiB(benchmark, scan_segment):
    _memcpy_bench(benchmark, scan_segment[2])


# ---------------------------------------------------------------------- HA and remoting kernels

HA_BUFFER = 4 << 20         # the slave's receive buffer (ha_client)
HA_FRAME = 32 << 10         # haTransferBatchSize
HA_MAX_BODY = 1 << 30


@pytest.fixture(scope="module")
def ha_buffer():
    """HA_BUFFER bytes of whole transfer frames (12-byte header + HA_FRAME of log) from offset 0."""
    phy, out = 0, bytearray()
    data = os.urandom(HA_FRAME)
    while len(out) + 12 + HA_FRAME <= HA_BUFFER:
        out += frame_header(phy, HA_FRAME) + data
        phy += HA_FRAME
    return out, phy


@pytest.mark.benchmark(group="dispatch_read_request")
def test_dispatch_read_request_4MiB(benchmark, ha_buffer):
    buf, end_phy = ha_buffer
    frames, pos, expected, mismatch = benchmark(dispatch_read_request, buf, 0, len(buf), 0, HA_MAX_BODY)
    assert pos == len(buf) and expected == end_phy and mismatch == -1
    _report(benchmark, len(buf), len(frames))


@pytest.mark.benchmark(group="dispatch_read_request")
def test_memcpy_dispatch_read_request(benchmark, ha_buffer):
    _memcpy_bench(benchmark, len(ha_buffer[0]))


@pytest.mark.benchmark(group="reallocate_byte_buffer")
def test_reallocate_byte_buffer_32k(benchmark):
    buf = bytearray(os.urandom(HA_BUFFER))
    start = HA_BUFFER - HA_FRAME
    assert benchmark(reallocate_byte_buffer, buf, start, HA_BUFFER) == HA_FRAME
    _report(benchmark, HA_FRAME, 1)


@pytest.mark.benchmark(group="reallocate_byte_buffer")
def test_memcpy_reallocate_byte_buffer(benchmark):
    _memcpy_bench(benchmark, HA_FRAME)


REMOTING_BUFFER = 1 << 20


@pytest.fixture(scope="module")
def remoting_buffer(body_1k):
    """REMOTING_BUFFER bytes (at most) of whole SEND_MESSAGE_V2 request frames with 1 KiB bodies."""
    from broker.remoting import codes
    from broker.remoting.command import RemotingCommand
    ext = {"a": "bench", "b": "TopicTest", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0,
           "i": "TAGS\x01bench\x02", "j": 0, "k": False}
    cmd = RemotingCommand.request(codes.SEND_MESSAGE_V2, ext, body_1k)
    frame = _encode_frame(cmd)
    n = REMOTING_BUFFER // len(frame)
    return bytearray(frame * n), n


def _encode_frame(cmd) -> bytes:
    """One frame as it crosses the wire: [length][serialize type | header length][header][body]."""
    return bytes(cmd.encode())


@pytest.mark.benchmark(group="split_frames")
def test_split_frames_1MiB(benchmark, remoting_buffer):
    buf, n = remoting_buffer
    frames, pos = benchmark(split_frames, buf, 0, len(buf))
    assert len(frames) == n and pos == len(buf)
    _report(benchmark, len(buf), n)


@pytest.mark.benchmark(group="split_frames")
def test_memcpy_split_frames(benchmark, remoting_buffer):
    _memcpy_bench(benchmark, len(remoting_buffer[0]))


# ------------------------------------------------------------------------------ remoting headers

# An ali-ons SEND_MESSAGE_V2 request header in the shape the client writes it (tests/
# test_header_real_clients.py has the captured original): raw JS values, \u-escaped property
# separators, about 400 bytes with a realistic group, topic and properties.
ONS_SEND_V2_HEADER = (
    b'{"code":310,"language":"JAVA","opaque":1024,"flag":0,"version":121,"extFields":{'
    b'"a":"CID_order_service_producer","b":"TopicOrderCreated","c":"TBW102","d":4,"e":3,"f":0,'
    b'"g":1795582575548,"h":0,"i":"TAGS\\u0001TagOrderCreated\\u0002KEYS\\u0001order-20261125-000123'
    b'\\u0002UNIQ_KEY\\u0001C0A8000100002A9F00000000000012AB\\u0002WAIT\\u0001true\\u0002region\\u0001'
    b'eu-west\\u0002traceId\\u00017c1f9a20b44d4e7a\\u0002","j":0,"k":false,"m":false}}')
HEADER_REPEAT = 1000  # C parses per benchmark call in the "_c" cases: ns/call = median / this


def _MsgspecHeader():
    """command.py's msgspec Struct from before the kernel (built here: msgspec resolves its
    annotations in this module's globals)."""
    import typing

    import msgspec
    return msgspec.defstruct("_Header", [("code", int), ("language", str, ""), ("version", int, 0),
                                         ("opaque", int, 0), ("flag", int, 0), ("remark", typing.Optional[str], None),
                                         ("extFields", typing.Optional[dict[str, typing.Any]], None)])


def _header_report(benchmark, calls: int) -> None:
    benchmark.extra_info["bytes"] = len(ONS_SEND_V2_HEADER)
    stats = getattr(benchmark, "stats", None)
    if stats:
        benchmark.extra_info["ns_per_header"] = stats.stats.median / calls * 1e9


@pytest.mark.benchmark(group="header_send_v2")
def test_header_parse_json_c(benchmark):
    """parse_json_header as a kernel calls it (no Python object): HEADER_REPEAT parses per call."""
    from broker.kernels.header import parse_count
    h = ONS_SEND_V2_HEADER
    assert benchmark(parse_count, 0, h, 0, len(h), HEADER_REPEAT) == 12
    _header_report(benchmark, HEADER_REPEAT)


@pytest.mark.benchmark(group="header_send_v2")
def test_header_parse_rocketmq_c(benchmark):
    """parse_rocketmq_header on the same header in ROCKETMQ binary, HEADER_REPEAT parses per call."""
    import json

    from broker.kernels.header import encode_header, parse_count
    j = json.loads(ONS_SEND_V2_HEADER)
    ext = {k: v if isinstance(v, str) else json.dumps(v) for k, v in j["extFields"].items()}
    h = encode_header(1, j["code"], j["language"], j["version"], j["opaque"], j["flag"], None, ext)
    assert benchmark(parse_count, 1, h, 0, len(h), HEADER_REPEAT) == 12
    _header_report(benchmark, HEADER_REPEAT)


@pytest.mark.benchmark(group="header_send_v2")
def test_header_parse_json_one_call(benchmark):
    """One parse per Python call: the C parse plus the call's own overhead."""
    from broker.kernels.header import parse_count
    h = ONS_SEND_V2_HEADER
    assert benchmark(parse_count, 0, h, 0, len(h), 1) == 12
    _header_report(benchmark, 1)


@pytest.mark.benchmark(group="header_send_v2")
def test_header_decode_json_to_python(benchmark):
    """decode_header: the parse and the tuple and dict of Python values (the slow path's cost)."""
    from broker.kernels.header import decode_header
    h = ONS_SEND_V2_HEADER
    assert benchmark(decode_header, 0, h, 0, len(h))[0] == 310
    _header_report(benchmark, 1)


@pytest.mark.benchmark(group="header_send_v2")
def test_header_msgspec_decode(benchmark):
    """What broker/remoting/command.py did before the kernel: msgspec's typed decode (strict=False)
    of the same bytes into a Struct of the header's fields."""
    import msgspec

    decode = msgspec.json.Decoder(_MsgspecHeader(), strict=False).decode
    h = ONS_SEND_V2_HEADER
    assert benchmark(decode, h).code == 310
    _header_report(benchmark, 1)


@pytest.mark.benchmark(group="header_send_v2")
def test_memcpy_header_send_v2(benchmark):
    _memcpy_bench(benchmark, len(ONS_SEND_V2_HEADER))
