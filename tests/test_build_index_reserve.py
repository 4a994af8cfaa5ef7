"""BuildIndex reserves the blocks of every index entry before the kernel writes it (a store through
the map into an unreserved block on a full disk would be a SIGBUS, not an error naming the file),
and skips the exact bound's numpy pass when the records' own bytes, a looser bound, are reserved
already (the reput's passes of a few records each paid ~10 us for it)."""
from __future__ import annotations

import random
from types import SimpleNamespace

from broker.kernels.codec import MappedBuffer, Scanner, encode_record
from broker.services.build_index import BuildIndex
from broker.store import index_file

HOST = bytes(8)


def test_every_entry_written_has_its_blocks_reserved_and_most_passes_skip_the_exact_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(index_file, "RESERVE_CHUNK", 8192)  # ~400 entries a chunk: many chunk edges
    b = BuildIndex(SimpleNamespace(index_dir=str(tmp_path / "index"), maxHashSlotNum=64, maxIndexNum=3000))
    exact_bounds = []
    most = BuildIndex._most
    monkeypatch.setattr(BuildIndex, "_most", staticmethod(lambda s, n: exact_bounds.append(n) or most(s, n)))
    rng = random.Random(7)
    buf = bytearray(4 << 20)
    mb = MappedBuffer(buf, False)
    scanner = Scanner(4096)
    pos, ts, passes, indexed = 0, 1_700_000_000_000, 0, 0
    for _ in range(120):
        start = pos
        for i in range(rng.choice([1, 1, 2, 5, 30])):
            keys = " ".join(f"k{rng.randint(0, 99)}" for _ in range(rng.choice([0, 1, 3, 60])))
            props = f"UNIQ_KEY\x01u{pos}\x02KEYS\x01{keys}\x02TAGS\x01t".encode()
            pos += encode_record(buf, pos, pos, i, ts, b"T", 0, b"x" * rng.randint(0, 300), props, 0, 0, 0, HOST, HOST)
        count, nxt, _ = scanner.scan(mb, start, pos, 0, False)
        assert nxt == pos
        b.dispatch(scanner, mb, count, nxt - start)
        passes += 1
        # every entry the kernel wrote in the file it writes now lies in reserved blocks...
        assert b.current.reserved_for(b.kernel.index_count, 0)
        # ...and a file it filled was reserved whole before it was filled
        assert all(f.reserved == f.size for f in b.rolled)
        indexed = b.kernel.keys_indexed
    assert len(b.rolled) >= 2 and indexed > 3 * 3000  # not vacuous: files filled and rolled
    # the exact bound was needed at the chunk edges and after rolls, not in most passes
    assert 0 < len(exact_bounds) < passes / 2, (len(exact_bounds), passes)
    for f in b.rolled + [b.current]:
        f.close()
