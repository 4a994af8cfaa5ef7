"""The pulled-records kernel (broker.kernels.pulled) against its twin and against the decoders it
replaces (hypothesis): random pulled bodies (IPv4 and IPv6 hosts, compressed bodies, properties
with every oddity, non-UTF-8 bytes, offsets outside the range asked), whole, cut, or with bytes
changed, give the same message views and the same Spark columns as the twin (the fuzz check,
tools/fuzz/checks.py); a valid body's views equal the store's Python decoder's reading, and
its Arrow batch is valid Arrow with the same rows."""
from __future__ import annotations

import socket
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels import pulled as K
from broker.store.message import decode_message
from tests.twins import codec_twin as C
from tests.twins import pulled_twin as T
from tools.fuzz.checks import check_pulled, columns_lists, view_dicts

V4 = socket.inet_aton("10.0.0.7") + (10911).to_bytes(4, "big")
V6 = socket.inet_pton(socket.AF_INET6, "fe80::1") + (40000).to_bytes(4, "big")
piece = st.one_of(st.sampled_from([b"TAGS\x01a", b"TAGS\x01b", b"KEYS\x01k1 k2", b"UNIQ_KEY\x01U", b"KEYS\x01",
                                   b"\x01v", b"lonely", b"RETRY_TOPIC\x01T", b"k\x01v\x01w", b"TAGS\x01\xff\xfe",
                                   b"\xc3\xa9\x01\xe4\xb8\xad", b""]),
                  st.binary(max_size=8))


@st.composite
def record(draw, offset: int):
    props = b"\x02".join(draw(st.lists(piece, max_size=6)))
    body = draw(st.binary(max_size=60))
    sys_flag = draw(st.sampled_from([0, 0, 0, 0x10, 0x20, 0x30]))
    if draw(st.integers(0, 6)) == 0:
        body, sys_flag = zlib.compress(body), sys_flag | 1
    born = V6 if sys_flag & 0x10 else V4
    store = V6 if sys_flag & 0x20 else V4
    topic = draw(st.sampled_from([b"TopicA", b"TopicA", b"T\xc3\xa9", b"\xff"]))
    buf = bytearray(C.record_length(len(body), len(topic), len(props), born == V6, store == V6))
    n = C.encode_record(buf, 0, draw(st.integers(0, 2**40)), offset, draw(st.integers(0, 2**41)), topic,
                        draw(st.integers(0, 7)), body, props, draw(st.integers(-2**31, 2**31 - 1)), sys_flag,
                        draw(st.integers(0, 2**41)), born, store, draw(st.integers(0, 16)), 0)
    return bytes(buf[:n])


@st.composite
def pulled_body(draw):
    start = draw(st.integers(0, 5))
    recs = [draw(record(start + i)) for i in range(draw(st.integers(0, 6)))]
    data = bytearray(b"".join(recs))
    damage = draw(st.sampled_from(["none", "none", "none", "cut", "flip", "tail"]))
    if damage == "cut" and data:
        del data[draw(st.integers(0, len(data) - 1)):]
    elif damage == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        data[i] ^= draw(st.integers(1, 255))
    elif damage == "tail":
        data += draw(st.binary(min_size=1, max_size=12))
    return bytes(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pulled_body(), st.integers(0, 15), st.sampled_from([0, 1, 3, 255]))
def test_kernel_and_twin_read_the_same_records(data, lo, width):
    check_pulled(bytes([lo, width]) + data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(record(0), max_size=6))
def test_views_read_what_the_store_decoder_reads(recs):
    data = b"".join(recs)
    views = K.decode_records(data, "broker-b")
    pos = 0
    for v in views:
        m = decode_message(data, pos)
        body = zlib.decompress(m.body) if m.sys_flag & 1 else m.body
        assert (v.topic, v.body, v.queue_id, v.queue_offset, v.commit_log_offset, v.msg_id, v.properties,
                v.reconsume_times, v.born_timestamp, v.store_timestamp, v.born_host, v.store_host, v.sys_flag,
                v.flag, v.broker_name) == \
               (m.topic, body, m.queue_id, m.queue_offset, m.physical_offset, m.msg_id, m.properties, m.reconsume_times,
                m.born_timestamp, m.store_timestamp, m.born_host, m.store_host, m.sys_flag, m.flag, "broker-b")
        assert (v.tags, v.keys, v.uniq_key) == (m.properties.get("TAGS"), m.properties.get("KEYS"),
                                                m.properties.get("UNIQ_KEY"))
        assert v.body_view == body and v.body_size == len(body)
        pos += m.size
    assert pos == len(data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(record(0), min_size=1, max_size=6), st.integers(0, 3))
def test_spark_batches_are_valid_arrow_with_the_twins_rows(recs, cut):
    pytest.importorskip("pyspark")
    from broker.spark.arrow import ColumnBuffers, records_to_batch
    chunks = [b"".join(recs[:cut]), b"".join(recs[cut:])]
    buffers = ColumnBuffers()
    for _ in range(2):  # the second time through reused buffers
        batch = records_to_batch(chunks, "broker-c", 0, 1 << 62, None, buffers)
        batch.validate(full=True)
        want = T.record_columns(chunks, 0, 1 << 62)
        rows = batch.to_pydict()
        assert rows["queueOffset"] == want["queue_offset"] and rows["queueId"] == want["queue_id"]
        assert rows["body"] == want["body"] and rows["msgId"] == [m.decode() for m in want["msg_id"]]
        assert rows["topic"] == [t.decode("utf-8", "replace") for t in want["topic"]]
        assert rows["tags"] == [None if t is None else t.decode("utf-8", "replace") for t in want["tags"]]
        assert [list(p) for p in rows["properties"]] == \
               [[(k.decode("utf-8", "replace"), v.decode("utf-8", "replace")) for k, v in p] for p in want["properties"]]


def test_a_view_built_from_fields_and_a_bad_body():
    m = K.MessageExt("T", b"hi", 1, 2, 3, "ID", {"TAGS": "a"}, broker_name="b")
    assert (m.topic, m.body, m.tags, m.keys, m.msg_id, m.queue_offset, m.broker_name) == \
           ("T", b"hi", "a", None, "ID", 2, "b")
    m.topic = "U"
    assert m.topic == "U" and bytes(m.body_view) == b"hi"
    with pytest.raises(K.PulledRecordsError) as e:
        K.decode_records(b"\x00\x00\x00\x10" + bytes(12))
    assert e.value.offset == 0 and "bad magic code" in str(e.value)


def _three_records() -> bytes:
    out = []
    for i in range(3):
        buf = bytearray(C.record_length(3, 1, 0))
        C.encode_record(buf, 0, 100 * i, i, 1, b"T", 0, b"abc", b"", 0, 0, 1, V4, V4, 0, 0)
        out.append(bytes(buf))
    return b"".join(out)


def test_columns_refuse_to_reset_while_an_array_holds_them():
    cols = K.RecordColumns()
    assert cols.add(_three_records(), 1, 10) == 2
    view = memoryview(cols.buffers()["body_data"])
    with pytest.raises(BufferError):
        cols.reset()
    view.release()
    cols.reset()
    assert cols.rows == 0 and columns_lists(cols)["body"] == []


def _host_record(born: bytes, store: bytes) -> bytes:
    sys_flag = (0x10 if len(born) == 20 else 0) | (0x20 if len(store) == 20 else 0)
    buf = bytearray(C.record_length(1, 1, 0, len(born) == 20, len(store) == 20))
    n = C.encode_record(buf, 0, 0, 0, 0, b"T", 0, b"x", b"", 0, sys_flag, 0, born, store, 0, 0)
    return bytes(buf[:n])


def test_hosts_are_each_records_own_past_the_host_cache():
    """The kernel keeps a host's text by its stored bytes (MessageExt._host): every record still reads
    its own born and store host, ports and IPv6 included, past the cache's 4,096 entries (emptied)."""
    hosts = [socket.inet_aton(f"10.{i // 256}.{i % 256}.1") + (1000 + i).to_bytes(4, "big") for i in range(5000)]
    hosts += [socket.inet_pton(socket.AF_INET6, f"fe80::{i:x}") + (65535 - i).to_bytes(4, "big") for i in range(300)]
    for i in (0, 1, 4095, 4096, 4097, 4999, 0, 5000, 5299, 1):
        born, store = hosts[i], hosts[(i * 7 + 3) % len(hosts)]
        (v,) = K.decode_records(_host_record(born, store), "b")
        m = decode_message(_host_record(born, store), 0)
        assert (v.born_host, v.store_host) == (m.born_host, m.store_host)
    for h in hosts:  # all of them through the cache, wrapping it
        (v,) = K.decode_records(_host_record(h, hosts[0]), "b")
        assert v.born_host == decode_message(_host_record(h, hosts[0]), 0).born_host
