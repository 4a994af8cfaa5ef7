"""DLedger mode, step 2 (issue 17): the entry store (broker.raft.entry_store), DLedger 0.3.1.2's
on-disk log.

Every test works on real files in tmp_path with small files (64 KiB data files, index files of 64
entries) and checks the files through tests/twins/dledger_twin.py, a reader written separately
from the format: header fields, positions, the blank closing each data file, index units, nothing
left after the end. Then: appends, follower appends, truncation (durable, the same bytes as a log
that never held the dropped entries), the checkpoint, recovery (torn tails cut, the index rebuilt,
committed entries that do not verify refused), a store written the way DLedger writes it, and a
writer process killed with SIGKILL while it appends.
"""
from __future__ import annotations

import os
import random
import shutil
import struct
import sys
import tempfile
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import broker.raft.entry_files as entry_files
from broker.raft.entry_store import DLedgerEntryStore
from broker.raft.errors import (EntryStoreError, EntryTooLarge, InconsistentIndex, InconsistentPos, IndexOutOfRange,
                                StoreClosed, TermRegression, TruncateCommitted)
from broker.raft.protocol import ResponseCode
from broker.store import paths
from broker.store.errors import CorruptStoreError, StoreConfigError
from tests.helpers.dledger_writer import body_for
from tests.helpers.procs import Child
from tests.twins import dledger_twin as twin

DATA = 64 * 1024
INDEX = 32 * 64


def open_store(d, data=DATA, index=INDEX) -> DLedgerEntryStore:
    return DLedgerEntryStore(str(d), data_file_size=data, index_file_size=index)


def data_dir(d) -> str:
    return os.path.join(str(d), "data")


def index_dir(d) -> str:
    return os.path.join(str(d), "index")


def body(seed, n: int) -> bytes:
    return random.Random(repr(seed)).randbytes(n)


def canonical_pos(prev_end: int, size: int, data: int) -> int:
    """Where the format puts an entry of `size` bytes after a log ending at prev_end."""
    room = data - prev_end % data
    return prev_end if size + 8 <= room else prev_end + room


def check_files(d, expected: list[tuple[int, bytes]], data=DATA, index=INDEX) -> twin.DataWalk:
    """The twin reads the store's files: the expected (term, body) entries from index 0, each header as
    DLedger writes it, each entry where the format puts it (blank when it does not fit), one index
    unit per entry pointing at it, and nothing but zeros after the end of either log."""
    walk = twin.walk_data(data_dir(d), data)
    assert [(e.term, e.body) for e in walk.entries] == expected
    end = 0
    blanks = []
    for i, e in enumerate(walk.entries):
        assert (e.magic, e.size, e.index, e.pos, e.channel, e.chain_crc, e.body_size) == \
               (1, 48 + len(e.body), i, e.at, 0, 0, len(e.body))
        assert e.body_crc == zlib.crc32(e.body) & 0x7FFFFFFF
        want = canonical_pos(end, e.size, data)
        assert e.at == want, f"entry {i} at {e.at}, the format puts it at {want}"
        if e.at != end:
            blanks.append((end, e.at - end))
        end = e.at + e.size
    assert [(b.at, b.size) for b in walk.blanks] == blanks
    assert walk.end == end
    units = twin.walk_index(index_dir(d), index)
    assert [(u.at, u.magic, u.pos, u.size, u.index, u.term) for u in units] == \
           [(i * 32, 1, e.at, e.size, i, e.term) for i, e in enumerate(walk.entries)]
    assert twin.first_nonzero_after(data_dir(d), data, end) is None
    assert twin.first_nonzero_after(index_dir(d), index, len(units) * 32) is None
    return walk


def check_reads(s: DLedgerEntryStore, expected: list[tuple[int, bytes]]) -> None:
    assert s.ledger_end_index == len(expected) - 1
    assert s.ledger_begin_index == (0 if expected else -1)
    assert s.ledger_end_term == (expected[-1][0] if expected else -1)
    for i, (term, b) in enumerate(expected):
        e = s.get(i)
        assert (e.index, e.term, e.size, bytes(e.body)) == (i, term, 48 + len(b), b)
        assert s.entry_term(i) == term and s.position(i) == (e.pos, e.size)


def fill(s: DLedgerEntryStore, sizes, term=1, seed=0) -> list[tuple[int, bytes]]:
    out = []
    for k, n in enumerate(sizes):
        b = body((seed, k), n)
        s.append(term, b)
        out.append((term, b))
    return out


# -- the format --------------------------------------------------------------------------------------
def test_entries_on_disk_in_dledger_format(tmp_path):
    s = open_store(tmp_path)
    assert (s.ledger_begin_index, s.ledger_end_index, s.ledger_end_term, s.committed_index) == (-1, -1, -1, -1)
    assert s.append(1, b"") == (0, 0)
    assert s.append(1, b"a") == (1, 48)
    assert s.append(2, bytearray(b"x" * 1000)) == (2, 48 + 49)
    s.flush()
    with open(os.path.join(data_dir(tmp_path), "0" * 20), "rb") as f:
        raw = f.read(48 + 49)
    # the 48-byte header of entry 1, field by field, big-endian
    assert struct.unpack(">iiqqqiiii", raw[48:96]) == (1, 49, 1, 1, 48, 0, 0, zlib.crc32(b"a") & 0x7FFFFFFF, 1)
    assert raw[96:97] == b"a"
    assert raw[:8] == struct.pack(">ii", 1, 48)
    check_files(tmp_path, [(1, b""), (1, b"a"), (2, b"x" * 1000)])
    s.close()
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "data", "index"]


def test_blank_closes_a_file_exactly_when_an_entry_would_leave_fewer_than_8_bytes(tmp_path):
    s = open_store(tmp_path)
    # entry 0 leaves `room`; entry 1 fills it but for 8 bytes: it fits
    s.append(1, bytes(1000))
    room = DATA - 1048
    assert s.append(1, bytes(room - 8 - 48))[1] == 1048
    # 8 bytes left: any entry (>= 48 bytes) goes to the next file behind an 8-byte blank
    assert s.append(1, b"")[1] == DATA
    # in file 2: an entry one byte too big for the rest (it would leave 7 bytes) moves on
    room2 = DATA - 48
    assert s.append(1, bytes(room2 - 7 - 48))[1] == 2 * DATA
    walk = check_files(tmp_path, [(1, bytes(1000)), (1, bytes(room - 56)), (1, b""), (1, bytes(room2 - 55))])
    assert [(b.at, b.size) for b in walk.blanks] == [(DATA - 8, 8), (DATA + 48, room2)]
    # the largest entry a file can hold, and one byte more
    big = bytes(DATA - 56)
    s.append(1, big)
    with pytest.raises(EntryTooLarge) as ei:
        s.append(1, bytes(DATA - 55))
    assert ei.value.code == ResponseCode.UNEXPECTED_ARGUMENT and "mappedFileSizeForEntryData" in str(ei.value)
    assert s.ledger_end_index == 4
    check_reads(s, [(1, bytes(1000)), (1, bytes(room - 56)), (1, b""), (1, bytes(room2 - 55)), (1, big)])
    s.close()


def test_round_trip_across_many_data_and_index_files(tmp_path):
    s = open_store(tmp_path)
    rnd = random.Random(7)
    sizes = [rnd.choice([0, 1, 100, 3000, 9000, 20000, DATA - 56]) for _ in range(300)]
    expected = fill(s, sizes)
    s.flush()
    check_reads(s, expected)
    walk = check_files(tmp_path, expected)
    assert len(walk.files) > 20 and len(walk.blanks) > 20
    s.settle()
    assert len(os.listdir(index_dir(tmp_path))) >= 300 * 32 // INDEX  # the index spans several files
    s.close()
    on_disk = len(os.listdir(data_dir(tmp_path)))  # the walked ones and the one prepared ahead
    s = open_store(tmp_path)
    check_reads(s, expected)
    assert s.recovered.cut_at is None and s.recovered.index_rewritten == 0
    assert s.recovered.scanned_from == (on_disk - 3) * DATA  # DLedger's start: the third file from the end
    s.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 33000)), min_size=1, max_size=30),
       st.sampled_from(["bytes", "bytearray", "memoryview", "numpy-u8", "numpy-u32"]))
def test_any_bodies_round_trip_and_reopen(steps, kind):
    data = 32 * 1024
    with tempfile.TemporaryDirectory() as d:
        s = open_store(d, data=data)
        expected = []
        term = 1
        for k, (bump, n) in enumerate(steps):
            term += bump
            b = body(k, min(n, data - 56) // 4 * 4)
            obj = {"bytes": b, "bytearray": bytearray(b), "memoryview": memoryview(b),
                   "numpy-u8": np.frombuffer(b, np.uint8), "numpy-u32": np.frombuffer(b, np.uint32)}[kind]
            assert s.append(term, obj)[0] == k
            expected.append((term, b))
        check_reads(s, expected)
        s.close()
        check_files(d, expected, data=data)
        s = open_store(d, data=data)
        check_reads(s, expected)
        s.close()


def test_get_is_a_read_only_view_over_the_map(tmp_path):
    s = open_store(tmp_path)
    s.append(1, b"hello")
    s.append(1, b"world")
    e = s.get(1)
    assert isinstance(e.body, memoryview) and e.body.readonly and bytes(e.body) == b"world"
    s.truncate(1)
    assert bytes(e.body) == bytes(5)  # the same memory: truncation zeroed it in the map
    s.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_appends_truncations_commits_and_reopens_match_a_list(tmp_path, seed):
    """A list of (term, body) is the model; after each step the store holds the same entries, and
    a reopen (after close, or as after a crash of a process whose pages survived) finds them all
    and the committedIndex last written to the checkpoint."""
    data, index = 16 * 1024, 32 * 16
    rnd = random.Random(seed)
    s = open_store(tmp_path, data=data, index=index)
    model: list[tuple[int, bytes]] = []
    term, persisted = 1, -1
    for _ in range(150):
        op = rnd.random()
        if op < 0.6:
            term += rnd.random() < 0.05
            b = rnd.randbytes(rnd.choice([0, 1, 50, 2000, 8000, data - 56]))
            s.append(term, b)
            model.append((term, b))
        elif op < 0.72 and len(model) > s.committed_index + 1:
            k = rnd.randint(s.committed_index + 1, len(model))
            s.truncate(k)
            if k < len(model):  # a truncation that drops something rewrites the checkpoint
                persisted = s.committed_index
            model = model[:k]
        elif op < 0.8 and model:
            s.update_committed_index(rnd.randint(0, len(model) - 1))
        elif op < 0.88:
            if rnd.random() < 0.5:
                s.close()
            else:
                s.settle()  # a crash: the next open recovers what the page cache holds
            persisted = s.committed_index if s.closed else persisted
            s = open_store(tmp_path, data=data, index=index)
            assert s.committed_index == persisted
        else:
            s.persist_checkpoint()
            persisted = s.committed_index
        assert (s.ledger_end_index, s.ledger_end_term) == (len(model) - 1, model[-1][0] if model else -1)
    check_reads(s, model)
    s.close()
    check_files(tmp_path, model, data=data, index=index)


# -- refusals ----------------------------------------------------------------------------------------
def test_typed_refusals_leave_the_log_unchanged(tmp_path):
    s = open_store(tmp_path)
    with pytest.raises(IndexOutOfRange):
        s.get(0)
    expected = fill(s, [10, 20, 30], term=3)
    s.flush()
    for bad in (-1, 3, 100):
        with pytest.raises(IndexOutOfRange) as ei:
            s.get(bad)
        assert ei.value.code == ResponseCode.INDEX_OUT_OF_RANGE and str(bad) in str(ei.value)
    with pytest.raises(InconsistentIndex) as ei:
        s.append_at(5, 3, b"x")
    assert (ei.value.expected, ei.value.got, ei.value.code) == (3, 5, ResponseCode.INCONSISTENT_INDEX)
    with pytest.raises(InconsistentPos) as ei:
        s.append_at(3, 3, b"x", pos=12345)
    assert (ei.value.expected, ei.value.got) == (s.write_pos, 12345)
    with pytest.raises(TermRegression):
        s.append(2, b"older term")
    with pytest.raises(EntryTooLarge):
        s.append(3, bytes(DATA))
    for cls in (IndexOutOfRange, InconsistentIndex, InconsistentPos, TermRegression, EntryTooLarge,
                TruncateCommitted, StoreClosed):
        assert issubclass(cls, EntryStoreError)
    check_files(tmp_path, expected)
    check_reads(s, expected)
    s.close()
    with pytest.raises(StoreClosed):
        s.append(3, b"x")
    with pytest.raises(StoreClosed):
        s.get(0)


@pytest.mark.parametrize("data,index,key", [(32, INDEX, "mappedFileSizeForEntryData"),
                                            (DATA, 100, "mappedFileSizeForEntryIndex"),
                                            (DATA, 0, "mappedFileSizeForEntryIndex"),
                                            (1 << 31, INDEX, "mappedFileSizeForEntryData")])
def test_bad_file_sizes_refused_naming_the_key(tmp_path, data, index, key):
    with pytest.raises(StoreConfigError) as ei:
        DLedgerEntryStore(str(tmp_path), data_file_size=data, index_file_size=index)
    assert ei.value.key == key


def test_a_file_of_another_size_is_refused(tmp_path):
    s = open_store(tmp_path)
    fill(s, [100])
    s.close()
    with pytest.raises(CorruptStoreError) as ei:
        open_store(tmp_path, data=DATA * 2)
    assert ei.value.path.startswith(data_dir(tmp_path))


# -- a follower ----------------------------------------------------------------------------------------
def test_follower_appends_land_where_the_leader_put_them(tmp_path):
    leader = open_store(tmp_path / "leader")
    follower = open_store(tmp_path / "follower")
    rnd = random.Random(3)
    expected = []
    for i in range(120):
        term = 1 + i // 40
        b = rnd.randbytes(rnd.choice([0, 500, 7000, 30000]))
        index, pos = leader.append(term, b)
        assert follower.append_at(index, term, b, pos=pos) == pos
        expected.append((term, b))
    walks = []
    for s, d in ((leader, tmp_path / "leader"), (follower, tmp_path / "follower")):
        s.close()
        walks.append([(e.at, e.size, e.index, e.term, e.body_crc) for e in check_files(d, expected).entries])
    assert walks[0] == walks[1]



def test_pushed_entries_are_appended_in_bulk_byte_for_byte_as_the_leader_holds_them(tmp_path):
    """append_pushed (a follower's APPEND, copied by the entry_push kernel a file at a time): the
    leader's spans, blanks between files and index files rolling over, land as the leader's files
    hold them, also into an empty log that takes the leader's first position; an entry this log
    cannot place (InconsistentPos) stops the push after the ones before it."""
    leader = open_store(tmp_path / "leader")
    follower = open_store(tmp_path / "follower")
    rnd = random.Random(5)
    expected = []
    for i in range(300):
        term = 1 + i // 100
        b = rnd.randbytes(rnd.choice([0, 100, 500, 7000, 30000]))
        leader.append(term, b)
        expected.append((term, b))
    first = 0
    while first <= leader.ledger_end_index:
        span = leader.entry_span(first, rnd.choice([1, 3, 40]), 1 << 20)
        assert follower.append_pushed(b"".join(bytes(v) for v in span.views)) == span.count
        first = span.last + 1
        assert (follower.ledger_end_index, follower.ledger_end_term, follower.write_pos) == (
            span.last, leader.entry_term(span.last), sum(leader.position(span.last)))
    assert [follower.entry_header(i) for i in range(300)] == [leader.entry_header(i) for i in range(300)]
    # a push whose third entry is placed elsewhere by the leader: the first two are taken
    nxt = [leader.append(4, bytes([i]) * 200) for i in range(3)]
    bad = bytearray(b"".join(bytes(v) for v in leader.entry_span(300, 3, 1 << 20).views))
    struct.pack_into(">q", bad, 2 * 248 + 24, nxt[2][1] + 8)
    with pytest.raises(InconsistentPos):
        follower.append_pushed(bad)
    assert follower.ledger_end_index == 301
    span = leader.entry_span(302, 1, 1 << 20)
    assert follower.append_pushed(span.views[0]) == 1
    expected += [(4, bytes([i]) * 200) for i in range(3)]
    walks = []
    for s, d in ((leader, tmp_path / "leader"), (follower, tmp_path / "follower")):
        s.close()
        walks.append([(e.at, e.size, e.index, e.term, e.body_crc) for e in check_files(d, expected).entries])
    assert walks[0] == walks[1]
    for sub in ("data", "index"):
        for name in sorted(os.listdir(tmp_path / "leader" / sub)):
            assert (tmp_path / "leader" / sub / name).read_bytes() == (tmp_path / "follower" / sub / name).read_bytes()


# -- truncation ---------------------------------------------------------------------------------------
SIZES = [3000, 100, 20000, 0, 9000, 30000, 30000, 500, 64000, 10, 25000, 25000, 40000, 1, 2, 3]


def _first_of_a_file(sizes) -> int:
    end = 0
    for i, n in enumerate(sizes):
        pos = canonical_pos(end, 48 + n, DATA)
        if pos != end:
            return i
        end = pos + 48 + n
    raise AssertionError("no entry opens a file")


@pytest.mark.parametrize("cut", [0, 1, _first_of_a_file(SIZES), 9, len(SIZES) - 1])
def test_truncate_then_append_gives_the_bytes_of_a_log_that_never_held_the_tail(tmp_path, cut):
    a = open_store(tmp_path / "a")
    old = fill(a, SIZES, term=1)
    a.flush()
    a.truncate(cut)
    assert (a.ledger_end_index, a.ledger_end_term) == (cut - 1, 1 if cut else -1)
    assert a.ledger_begin_index == (0 if cut else -1)
    check_files(tmp_path / "a", old[:cut])
    with pytest.raises(IndexOutOfRange):
        a.get(cut)
    new = fill(a, [7000, 20, 33000, 5], term=2, seed=99)
    # b never held the dropped entries
    b = open_store(tmp_path / "b")
    for term, x in old[:cut] + new:
        b.append(term, x)
    for s in (a, b):
        s.flush()
    assert a.write_pos == b.write_pos
    walk_a = check_files(tmp_path / "a", old[:cut] + new)
    walk_b = check_files(tmp_path / "b", old[:cut] + new)
    assert [(e.at, e.size) for e in walk_a.entries] == [(e.at, e.size) for e in walk_b.entries]
    check_reads(a, old[:cut] + new)
    a.close()
    b.close()


def test_truncate_into_an_earlier_file_is_durable_and_zeroes_later_files_in_place(tmp_path, monkeypatch):
    """The later files stay, zeroed and written back, the last first: another process's maps of
    them (the reput's) stay the files the log goes on in."""
    s = open_store(tmp_path)
    expected = fill(s, [5000] * 100)  # 13 entries a file: 8 data files, 2 index files
    s.flush()
    s.settle()
    assert len(os.listdir(data_dir(tmp_path))) >= 8 and len(os.listdir(index_dir(tmp_path))) >= 2
    synced = []
    real_msync, real_fsync_dir = entry_files.msync, entry_files.fsync_dir
    monkeypatch.setattr(entry_files, "msync", lambda mf, lo, hi: (synced.append(("msync", mf.path, lo, hi)),
                                                                   real_msync(mf, lo, hi)))
    monkeypatch.setattr(entry_files, "fsync_dir", lambda p: (synced.append(("dir", p)), real_fsync_dir(p)))
    files_before = sorted(os.listdir(data_dir(tmp_path)))
    inodes = {n: os.stat(os.path.join(data_dir(tmp_path), n)).st_ino for n in files_before}
    old_end = s.write_pos
    s.truncate(20)  # entry 20 is in the second data file, the first index file
    # durable before returning: every zeroed range written back, the cut file's last
    cut = s.write_pos
    cut_file = os.path.join(data_dir(tmp_path), f"{DATA:020d}")
    data_syncs = [x for x in synced if x[0] == "msync" and x[1].startswith(str(data_dir(tmp_path)))]
    assert data_syncs[-1][1] == cut_file and data_syncs[-1][2] <= cut < data_syncs[-1][3], data_syncs
    later = [n for n in files_before if DATA < int(n) < old_end]  # (the one prepared ahead holds nothing)
    assert later and all(any(x[1].endswith(n) for x in data_syncs) for n in later)
    # the same files, the same inodes: nothing deleted and made again
    assert sorted(os.listdir(data_dir(tmp_path))) == files_before
    assert all(os.stat(os.path.join(data_dir(tmp_path), n)).st_ino == inodes[n] for n in files_before)
    for n in files_before:
        if int(n) > DATA:
            with open(os.path.join(data_dir(tmp_path), n), "rb") as f:
                assert not any(f.read())
    assert twin.read_checkpoint(os.path.join(tmp_path, "checkpoint"))["endIndex"] == "19"
    check_files(tmp_path, expected[:20])
    # a crash right after: the next open finds the new end, nothing of the tail comes back
    again = open_store(tmp_path)
    assert (again.ledger_end_index, again.write_pos) == (19, cut)
    check_reads(again, expected[:20])
    again.close()


def test_flush_writes_back_every_file_touched_since_the_last_flush(tmp_path, monkeypatch):
    s = open_store(tmp_path)
    fill(s, [30000])
    s.flush()
    lo = s.write_pos
    synced = []
    real_msync = entry_files.msync
    monkeypatch.setattr(entry_files, "msync", lambda mf, a, b: (synced.append((mf.base, mf.path, a, b)),
                                                                 real_msync(mf, a, b)))
    fill(s, [30000, 30000, 100], seed=1)  # the second one closes file 0 with a blank
    assert s.position(2)[0] == DATA
    s.flush()
    data_ranges = [(max(a, base), min(b, base + DATA)) for base, p, a, b in synced if p.startswith(data_dir(tmp_path))]
    covered = sorted(data_ranges)
    assert covered[0][0] <= lo and covered[-1][1] >= s.write_pos
    assert all(x[1] >= y[0] for x, y in zip(covered, covered[1:])), covered  # no hole, the blank included
    index_ranges = [(a, b) for base, p, a, b in synced if p.startswith(index_dir(tmp_path))]
    assert index_ranges and min(a for a, _ in index_ranges) <= 32 and max(b for _, b in index_ranges) >= 4 * 32
    synced.clear()
    s.flush()  # nothing new: nothing to write back
    assert synced == []
    s.close()


def test_truncate_never_drops_committed_entries(tmp_path):
    s = open_store(tmp_path)
    expected = fill(s, [10] * 10)
    assert s.update_committed_index(5) == 5
    with pytest.raises(TruncateCommitted) as ei:
        s.truncate(5)
    assert (ei.value.from_index, ei.value.committed) == (5, 5)
    with pytest.raises(IndexOutOfRange):
        s.truncate(12)
    s.truncate(10)  # nothing past the end: nothing to do
    s.truncate(6)
    check_reads(s, expected[:6])
    s.close()


# -- committed index and checkpoint -----------------------------------------------------------------
def test_committed_index_and_checkpoint_round_trip(tmp_path):
    s = open_store(tmp_path)
    assert s.update_committed_index(3) == -1  # nothing to commit in an empty log
    fill(s, [100] * 10)
    assert s.update_committed_index(4) == 4
    assert s.committed_pos == sum(s.position(4))
    assert s.update_committed_index(2) == 4  # never backwards
    assert s.update_committed_index(50) == 9  # clamped to the end
    s.persist_checkpoint()
    ck = os.path.join(tmp_path, "checkpoint")
    assert twin.read_checkpoint(ck) == {"endIndex": "9", "committedIndex": "9"}
    fill(s, [100] * 2, seed=5)
    s.close()
    assert twin.read_checkpoint(ck) == {"endIndex": "11", "committedIndex": "9"}
    assert twin.read_checkpoint(ck + ".bak") == {"endIndex": "9", "committedIndex": "9"}
    s = open_store(tmp_path)
    assert (s.committed_index, s.ledger_end_index) == (9, 11)
    assert s.committed_pos == sum(s.position(9))
    s.close()
    # Java properties as DLedger writes them (a Hashtable's order, spaces) read the same
    with open(ck, "w") as f:
        f.write("#comment\ncommittedIndex = 7\nendIndex=11\n")
    s = open_store(tmp_path)
    assert s.committed_index == 7
    s.close()
    with open(ck, "w") as f:
        f.write("committedIndex=seven\n")
    with pytest.raises(CorruptStoreError) as ei:
        open_store(tmp_path)
    assert ei.value.path == ck and "committedIndex" in str(ei.value)


def test_open_under_a_store_root(tmp_path):
    s = DLedgerEntryStore.open(str(tmp_path), "n0", data_file_size=DATA, index_file_size=INDEX)
    s.append(1, b"x")
    s.close()
    assert os.path.isfile(os.path.join(paths.dledger_dir(str(tmp_path), "n0"), "data", "0" * 20))


# -- recovery -----------------------------------------------------------------------------------------
def _poke(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _data_file(d, pos: int) -> str:
    return os.path.join(data_dir(d), f"{pos - pos % DATA:020d}")


@pytest.mark.parametrize("tear", ["half-entry", "header-only", "garbage"])
def test_a_torn_tail_is_cut_and_zeroed(tmp_path, tear):
    s = open_store(tmp_path)
    expected = fill(s, [3000] * 30)
    s.update_committed_index(25)
    s.close()
    end = s.write_pos
    b = body("torn", 3000)
    entry = twin.encode_entry(30, 1, end, b, zlib.crc32(b) & 0x7FFFFFFF)
    junk = {"half-entry": entry[:len(entry) // 2], "header-only": entry[:48],
            "garbage": random.Random(1).randbytes(700)}[tear]
    _poke(_data_file(tmp_path, end), end % DATA, junk)
    s = open_store(tmp_path)
    assert s.recovered.cut_at == end and s.ledger_end_index == 29
    check_files(tmp_path, expected)  # zeros after the end: nothing of the torn write is left
    assert s.append(1, b"next")[1] == end
    s.close()


def test_a_torn_entry_after_a_blank_is_cut_with_its_file_and_the_blank(tmp_path):
    s = open_store(tmp_path)
    expected = fill(s, [20000] * 3)  # 3 x 20048 bytes: 4,000-odd left in the first file
    s.close()
    end = s.write_pos
    assert end < DATA
    _poke(_data_file(tmp_path, end), end % DATA, struct.pack(">ii", -1, DATA - end))
    lost = body("lost", 20000)
    part = twin.encode_entry(3, 1, DATA, lost, zlib.crc32(lost) & 0x7FFFFFFF)[:10000]
    with open(os.path.join(data_dir(tmp_path), f"{DATA:020d}"), "wb") as f:
        f.write(part + bytes(DATA - len(part)))
    s = open_store(tmp_path)
    assert (s.ledger_end_index, s.write_pos, s.recovered.cut_at) == (2, end, DATA)
    s.settle()
    # the blank is gone: a small entry fits after the last one, exactly as on a log that never tore
    assert s.append(1, b"small")[1] == end
    s.close()
    check_files(tmp_path, expected + [(1, b"small")])


def test_a_torn_first_entry_of_the_scan_start_file_cuts_after_the_previous_file(tmp_path):
    s = open_store(tmp_path)
    expected = fill(s, [9000] * 60)  # 7 entries a file
    s.close()
    start = (len(os.listdir(data_dir(tmp_path))) - 3) * DATA
    s = open_store(tmp_path)
    first = next(i for i in range(60) if s.position(i)[0] == start)
    prev_end = sum(s.position(first - 1))
    s.close()
    _poke(_data_file(tmp_path, start), 48 + 5, b"\x00\x01")  # its body
    s = open_store(tmp_path)
    assert (s.ledger_end_index, s.write_pos, s.recovered.cut_at) == (first - 1, prev_end, start)
    assert s.recovered.scanned_from < start
    s.close()
    check_files(tmp_path, expected[:first])


def test_missing_and_wrong_index_entries_are_rebuilt(tmp_path):
    s = open_store(tmp_path)
    expected = fill(s, [2000] * 100)
    s.close()
    # in the range the recovery scans (the last three data files): one unit zeroed, one wrong
    _poke(os.path.join(index_dir(tmp_path), f"{64 * 32:020d}"), (95 - 64) * 32, bytes(32))
    _poke(os.path.join(index_dir(tmp_path), f"{64 * 32:020d}"), (97 - 64) * 32 + 4, struct.pack(">q", 48))
    s = open_store(tmp_path)
    assert s.recovered.index_rewritten >= 2
    check_reads(s, expected)
    s.close()
    check_files(tmp_path, expected)
    # no index at all: the scan starts from the first data file and writes every unit
    shutil.rmtree(index_dir(tmp_path))
    s = open_store(tmp_path)
    assert s.recovered.scanned_from == 0 and s.recovered.index_rewritten == 100
    check_reads(s, expected)
    s.close()
    check_files(tmp_path, expected)


def test_a_damaged_entry_at_or_below_committed_index_refuses_to_open(tmp_path):
    s = open_store(tmp_path)
    fill(s, [3000] * 60)
    s.update_committed_index(55)
    s.close()
    s = open_store(tmp_path)
    pos, size = s.position(50)
    s.close()
    path = _data_file(tmp_path, pos)
    _poke(path, pos % DATA + 48 + 100, b"\xff")  # one byte of the body
    with pytest.raises(CorruptStoreError) as ei:
        open_store(tmp_path)
    assert (ei.value.path, ei.value.offset) == (path, pos)
    assert "entry 50" in str(ei.value) and "committedIndex 55" in str(ei.value) and "CRC" in str(ei.value)
    assert os.path.getsize(path) == DATA and twin.walk_data(data_dir(tmp_path), DATA).entries[50].at == pos


def test_a_damaged_entry_above_committed_index_is_a_torn_tail(tmp_path):
    s = open_store(tmp_path)
    expected = fill(s, [3000] * 60)
    s.update_committed_index(55)
    s.close()
    s = open_store(tmp_path)
    pos, _ = s.position(57)
    s.close()
    _poke(_data_file(tmp_path, pos), pos % DATA + 8, struct.pack(">q", 99))  # the index field
    s = open_store(tmp_path)
    assert (s.ledger_end_index, s.recovered.cut_at, s.committed_index) == (56, pos, 55)
    s.close()
    check_files(tmp_path, expected[:57])


def test_committed_entries_missing_refuse_to_open(tmp_path):
    s = open_store(tmp_path)
    fill(s, [3000] * 20)
    s.update_committed_index(19)
    s.close()
    s = open_store(tmp_path)
    pos, _ = s.position(18)
    s.close()
    path = _data_file(tmp_path, pos)
    _poke(path, pos % DATA, bytes(DATA - pos % DATA))  # entries 18 and 19 zeroed
    with pytest.raises(CorruptStoreError) as ei:
        open_store(tmp_path)
    assert (ei.value.path, ei.value.offset) == (path, pos) and "missing" in str(ei.value)


def test_a_store_dledger_wrote_opens_and_continues(tmp_path):
    rnd = random.Random(11)
    entries = [(1 + i // 10, rnd.randbytes(rnd.choice([0, 10, 9000, 30000]))) for i in range(40)]
    positions = twin.write_dledger_store(str(tmp_path), entries, DATA, INDEX)  # bodyCrc 0, as DLedger leaves it
    with open(os.path.join(tmp_path, "checkpoint"), "w") as f:
        f.write("committedIndex=30\nendIndex=39\n")
    s = open_store(tmp_path)
    assert s.committed_index == 30 and s.recovered.index_rewritten == 0
    check_reads(s, entries)
    assert [s.position(i)[0] for i in range(40)] == positions
    s.append(9, b"ours")
    s.close()
    walk = twin.walk_data(data_dir(tmp_path), DATA)
    assert [e.body_crc for e in walk.entries] == [0] * 40 + [zlib.crc32(b"ours") & 0x7FFFFFFF]


def test_an_empty_store_reopens_empty(tmp_path):
    s = open_store(tmp_path)
    s.close()
    s = open_store(tmp_path)
    assert (s.ledger_begin_index, s.ledger_end_index, s.write_pos) == (-1, -1, 0)
    s.truncate(0)
    assert s.append(1, b"first") == (0, 0)
    s.truncate(0)
    assert (s.ledger_begin_index, s.ledger_end_index, s.ledger_end_term) == (-1, -1, -1)
    s.close()
    s = open_store(tmp_path)
    assert s.ledger_end_index == -1
    s.close()
    check_files(tmp_path, [])


# -- kill -9 ------------------------------------------------------------------------------------------
CRASH_DATA = 32 * 1024


def _writer(tmp_path, d, term: int, seed: str) -> Child:
    argv = [sys.executable, "-m", "tests.helpers.dledger_writer", "--dir", str(d), "--term", str(term),
            "--seed", seed, "--data-size", str(CRASH_DATA), "--index-size", str(INDEX)]
    return Child(argv, tmp_path / f"writer{term}.stderr")


def _verify_crashed(d, acked: dict[int, int], seed: str) -> None:
    s = open_store(d, data=CRASH_DATA)
    try:
        assert s.ledger_end_index >= max(acked)
        for i, term in acked.items():
            e = s.get(i)
            assert (e.term, bytes(e.body)) == (term, body_for(seed, i)), f"acknowledged entry {i}"
        # every entry that survived is whole (unacknowledged ones too): nothing torn is visible
        expected = []
        for i in range(s.ledger_end_index + 1):
            e = s.get(i)
            assert bytes(e.body) == body_for(seed, i), f"entry {i}"
            expected.append((e.term, bytes(e.body)))
    finally:
        s.close()
    check_files(d, expected, data=CRASH_DATA)  # the end is a clean entry boundary, zeros after it


def test_every_acknowledged_entry_survives_kill_9(tmp_path):
    seed = os.environ.get("CRASH_SEED") or str(random.randrange(1 << 30))
    print(f"CRASH_SEED={seed}")
    rnd = random.Random(seed)
    d = tmp_path / "dledger-n0"
    acked: dict[int, int] = {}
    rounds = 3
    for term in range(1, rounds + 1):
        child = _writer(tmp_path, d, term, seed)
        kill_after = rnd.randint(100, 400)
        try:
            child.wait_lines(lambda ls: ls and ls[0].startswith("OPEN"), 30, "the store to open")
            child.wait_lines(lambda ls: len(ls) > kill_after, 30, f"{kill_after} acknowledged entries")
        finally:
            child.kill_group()
        assert child.proc.returncode == -9 and child.partial == b""
        _, end, end_term, _ = child.lines[0].split()
        assert int(end) >= max(acked, default=-1), "the child recovered less than was acknowledged"
        for line in child.lines[1:]:
            _, i, t = line.split()
            acked[int(i)] = int(t)
        if term < rounds:  # check a copy: the next child recovers the crashed store itself
            copy = tmp_path / f"copy{term}"
            shutil.copytree(d, copy)
            _verify_crashed(copy, acked, seed)
        else:
            _verify_crashed(d, acked, seed)
