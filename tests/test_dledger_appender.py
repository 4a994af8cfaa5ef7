"""The Appender's entry mode (DLedger's commit log on the send kernel's path): each record is
written as the next entry of the Raft log, header + record + index unit, byte for byte as the
pure-Python twin (tests/twins/dledger_twin.append_entry) and as the entry store's own append
writes it (followers compare headers, recovery checks the body CRC)."""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.kernels.codec import Appender, MappedBuffer
from broker.raft import entry_store
from broker.raft.entry_store import DLedgerEntryStore
from broker.raft.errors import TermRegression
from tests.twins import codec_twin as C
from tests.twins import dledger_twin as twin

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STORE_HOST = bytes([127, 0, 0, 1, 0, 0, 0x27, 0x11])
host = st.one_of(st.binary(min_size=8, max_size=8), st.binary(min_size=20, max_size=20))
message = st.fixed_dictionaries({
    "topic": st.sampled_from([b"T", b"TopicB", b"x" * 60]), "queue_id": st.integers(0, 3),
    "body": st.binary(max_size=300), "properties": st.binary(max_size=40).filter(lambda p: 0 not in p),
    "flag": st.integers(-2**31, 2**31 - 1), "sys_flag": st.integers(0, 3), "born_ts": st.integers(0, 2**50),
    "born_host": host, "reconsume_times": st.integers(0, 16),
})


def kernel_appender(data, data_base, index, index_base, wrote, entry_index, term, offsets):
    app = Appender(STORE_HOST, 4096, {}, 0, entries=True)
    app.place_entries(wrote, entry_index, term)
    app.attach(MappedBuffer(data), data_base)
    app.attach_index(MappedBuffer(index), index_base)
    for (t, q), nxt in offsets.items():
        app.set_next_offset(t, q, nxt)
    return app


@SETTINGS
@given(st.lists(message, min_size=1, max_size=8), st.integers(300, 3000), st.integers(1, 8), st.integers(0, 40),
       st.integers(0, 200), st.integers(0, 2**40), st.integers(0, 1000))
def test_entry_mode_writes_what_the_twin_writes(msgs, data_size, index_units, start_index, start_at, term, qbase):
    data_base, index_base = 7 * data_size, (start_index // index_units) * index_units * 32
    wrote = data_base + min(start_at, data_size - 8)
    dk, dt = bytearray(data_size), bytearray(data_size)
    ik, it = bytearray(index_units * 32), bytearray(index_units * 32)
    offsets = {(m["topic"], m["queue_id"]): qbase + m["queue_id"] for m in msgs}
    app = kernel_appender(dk, data_base, ik, index_base, wrote, start_index, term, offsets)
    nxt = dict(offsets)
    at, index = wrote, start_index
    for m in msgs:
        r = app.append(m["topic"], m["queue_id"], m["body"], m["properties"], m["flag"], m["sys_flag"],
                       m["born_ts"], m["born_host"], m["reconsume_times"])
        key = (m["topic"], m["queue_id"])
        t = twin.append_entry(dt, data_base, it, index_base, at, index, term, nxt[key], r[3] if r else 0,
                              m["topic"], m["queue_id"], m["body"], m["properties"], m["flag"], m["sys_flag"],
                              m["born_ts"], m["born_host"], STORE_HOST, m["reconsume_times"])
        if t is None:
            assert r is None  # declined: nothing written, nothing moved
            break
        phys, size = t
        assert r[:3] == (phys, nxt[key], size - 48)
        nxt[key] += 1
        at += size
        index += 1
        assert (app.wrote, app.entry_index) == (at, index)
    assert dk == dt and ik == it
    assert (app.wrote, app.entry_index, app.term) == (at, index, term)
    for key, n in nxt.items():
        assert app.next_offset(*key) == n


def test_a_queue_whose_offset_is_unknown_is_declined():
    data, index = bytearray(4096), bytearray(320)
    app = kernel_appender(data, 0, index, 0, 0, 0, 1, {})
    assert app.append(b"T", 0, b"body", b"", 0, 0, 0, STORE_HOST) is None  # -1: read it from the queue first
    assert (app.wrote, app.entry_index) == (0, 0) and data == bytearray(4096)
    app.set_next_offset(b"T", 0, 5)
    assert app.append(b"T", 0, b"body", b"", 0, 0, 0, STORE_HOST)[:2] == (48, 5)
    app.forget_offsets()
    assert app.next_offset(b"T", 0) == -1


def test_entry_mode_refuses_what_belongs_to_the_ordinary_log():
    app = Appender(STORE_HOST, 4096, {}, 0, entries=True)
    with pytest.raises(ValueError):
        app.append_batch(b"T", 0, [b"a"], b"", 0, 0, 0, STORE_HOST)
    with pytest.raises(ValueError):
        app.rewind(0, b"T", 0, 0)
    with pytest.raises(ValueError):
        Appender(STORE_HOST, 4096, {}, 0).place_entries(0, 0, 1)


def _record(m, phys, qo, ts):
    total = C.record_length(len(m["body"]), len(m["topic"]), len(m["properties"]), len(m["born_host"]) == 20, False)
    rec = bytearray(total)
    C.encode_record(rec, 0, phys, qo, ts, m["topic"], m["queue_id"], m["body"], m["properties"], m["flag"],
                    m["sys_flag"], m["born_ts"], m["born_host"], STORE_HOST, m["reconsume_times"], 0)
    return bytes(rec)


@pytest.mark.parametrize("stage", [entry_store.STAGE_BYTES, 700])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.lists(message, min_size=1, max_size=40))
def test_in_place_appends_equal_the_entry_stores_own(tmp_path_factory, monkeypatch, stage, msgs):
    """An entry store written through place/took (declined entries by its own append, as the
    commit log does) holds the same files as one written by append alone, and recovers them.
    The Appender writes to the store's stage, which `took` writes into the data file: a stage
    larger than the files ends where each file ends; one of 700 bytes ends inside the 2048-byte
    files, where the entry it declines takes the store's own append in the same file."""
    monkeypatch.setattr(entry_store, "STAGE_BYTES", stage)
    root = tmp_path_factory.mktemp("s")
    opts = {"data_file_size": 2048, "index_file_size": 32 * 8, "warm": False}
    a = DLedgerEntryStore(str(root / "a"), **opts)
    b = DLedgerEntryStore(str(root / "b"), **opts)
    app = Appender(STORE_HOST, 4096, {}, 0, entries=True)
    nxt: dict = {}
    for m in msgs:
        key = (m["topic"], m["queue_id"])
        qo = nxt.setdefault(key, 0)
        app.set_next_offset(*key, qo)
        a.place(app, 3)
        r = app.append(m["topic"], m["queue_id"], m["body"], m["properties"], m["flag"], m["sys_flag"],
                       m["born_ts"], m["born_host"], m["reconsume_times"])
        if r is None:  # opens the next data or index file: the store's own append, after a blank
            pos = a.next_pos(48 + len(_record(m, 0, qo, 0)))
            ts = 1234
            a.append(3, _record(m, pos + 48, qo, ts))
        else:
            assert a.took(app) == 1
            pos, ts = r[0] - 48, r[3]
        index, got = b.append(3, _record(m, pos + 48, qo, ts))
        assert (got, index) == (pos, a.ledger_end_index)
        nxt[key] = qo + 1
    assert (a.write_pos, a.ledger_end_index, a.ledger_end_term) == (b.write_pos, b.ledger_end_index, 3)
    for i in range(b.ledger_end_index + 1):
        assert a.entry_header(i) == b.entry_header(i)
        assert bytes(a.get(i).body) == bytes(b.get(i).body)
    a.close()
    b.close()
    walk_a = twin.walk_data(str(root / "a" / "data"), 2048)
    walk_b = twin.walk_data(str(root / "b" / "data"), 2048)
    assert [e.body for e in walk_a.entries] == [e.body for e in walk_b.entries]
    again = DLedgerEntryStore(str(root / "a"), **opts)  # recovery verifies every header and body CRC
    assert (again.ledger_end_index, again.write_pos) == (b.ledger_end_index, b.write_pos)
    again.close()


def test_place_refuses_an_earlier_term(tmp_path):
    s = DLedgerEntryStore(str(tmp_path), data_file_size=4096, index_file_size=320, warm=False)
    s.append(5, b"x")
    app = Appender(STORE_HOST, 4096, {}, 0, entries=True)
    with pytest.raises(TermRegression):
        s.place(app, 4)
    s.place(app, 5)
    assert (app.wrote, app.entry_index, app.term) == (s.write_pos, 1, 5)
    s.close()


# -- the reput's walk: Scanner.scan_entries ---------------------------------------------------------

def kernel_scan_entries(buf, start, end, base_offset, check_crc, max_records):
    """Scanner.scan_entries' records as codec.scan (the kernel's convenience form) reports them."""
    from broker.kernels.codec import Scanner
    s = Scanner(64)
    count, pos, status = s.scan_entries(buf, start, end, base_offset, check_crc, max_records)
    data = bytes(buf)
    out = []
    for i in range(count):
        e = s.entries[i]
        kp, kl, up, ul = int(e["keys_pos"]), int(e["keys_len"]), int(e["uniq_pos"]), int(e["uniq_len"])
        out.append({"phys_offset": int(e["phys_offset"]), "size": int(e["size"]), "queue_id": int(e["queue_id"]),
                    "queue_offset": int(e["queue_offset"]), "tag_hash": int(e["tag_hash"]),
                    "store_ts": int(e["store_ts"]), "sys_flag": int(e["sys_flag"]), "topic": s.topics[e["topic_idx"]],
                    "keys": data[kp:kp + kl] if kp >= 0 else b"", "uniq": data[up:up + ul] if up >= 0 else b"",
                    "body_crc_ok": True})
    return out, pos, status


@st.composite
def entry_log(draw):
    """A data file's bytes: entries (records, no-ops), then a blank, zeros, or a damaged entry."""
    buf = bytearray()
    index = draw(st.integers(0, 50))
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.integers(0, 5)) == 0:
            body = b""  # a leader's no-op
        else:
            m = draw(message)
            props = draw(st.sampled_from([b"", b"TAGS\x01t", b"KEYS\x01k1 k2\x02UNIQ_KEY\x01U\x02TAGS\x01x"]))
            body = _record({**m, "properties": props}, len(buf) + 48, draw(st.integers(0, 99)), 7)
        buf += struct.pack(">iiqqqiiii", 1, 48 + len(body), index, 2, len(buf), 0, 0, 0, len(body)) + body
        index += 1
    tail = draw(st.sampled_from(["end", "blank", "zeros", "damage", "cut"]))
    if tail == "blank":
        buf += struct.pack(">ii", -1, 64) + bytes(56)
    elif tail == "zeros":
        buf += bytes(16)
    elif buf and tail in ("damage", "cut"):
        at = draw(st.integers(0, len(buf) - 1))
        if tail == "cut":
            del buf[at:]
        else:
            buf[at] ^= 1 << draw(st.integers(0, 7))
    return bytes(buf)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entry_log(), st.booleans(), st.one_of(st.just(-1), st.integers(0, 6)), st.integers(0, 1 << 40))
def test_scan_entries_reads_what_the_twin_reads(data, check_crc, max_records, base):
    k = kernel_scan_entries(data, 0, len(data), base, check_crc, max_records)
    t = twin.scan_entries(data, 0, len(data), base, check_crc, max_records)
    assert k == t
