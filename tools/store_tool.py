"""Inspect a store directory without starting a broker (read-only).

    python tools/store_tool.py verify STORE_ROOT          CRC-check every record, report where the log ends
    python tools/store_tool.py dump STORE_ROOT [--from OFFSET] [--limit N]
    python tools/store_tool.py cq STORE_ROOT TOPIC QUEUE_ID [--limit N]
"""
from __future__ import annotations

import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from broker.kernels.codec import SCAN_BLANK, SCAN_END, SCAN_ZERO, Scanner  # noqa: E402
from broker.store.mapped_file_queue import MappedFileQueue  # noqa: E402
from broker.store.message import decode_message  # noqa: E402

STATUS = {0: "end", 1: "blank", 2: "partial", 3: "zero", 4: "corrupt"}


def _segment_size(root: str) -> int:
    d = os.path.join(root, "commitlog")
    names = sorted(n for n in os.listdir(d) if n.isdigit())
    if not names:
        raise SystemExit(f"{d}: no segments")
    return os.path.getsize(os.path.join(d, names[0]))


def _log(root: str) -> MappedFileQueue:
    q = MappedFileQueue(os.path.join(root, "commitlog"), _segment_size(root), writable=False)
    q.load()
    return q


def verify(root: str) -> int:
    q = _log(root)
    s = Scanner(8192)
    records = 0
    for mf in q.files:
        pos = 0
        while True:
            count, pos, status = s.scan(mf.buf, pos, mf.size, mf.base, True)
            records += count
            if status == SCAN_END and pos < mf.size:
                continue
            break
        where = mf.base + pos
        if status not in (SCAN_BLANK, SCAN_ZERO, SCAN_END):
            print(f"{mf.path}: {STATUS[status]} record at offset {where}: {s.reason or 'incomplete'}")
            return 1
        if status != SCAN_BLANK:
            print(f"ok: {records} records, log ends at offset {where}")
            return 0
    print(f"ok: {records} records")
    return 0


def dump(root: str, start: int, limit: int) -> int:
    q = _log(root)
    off, shown = max(start, q.min_offset), 0
    while shown < limit:
        mf = q.find(off)
        if mf is None:
            break
        try:
            m = decode_message(mf.mm[off - mf.base:])
        except Exception as e:  # blank marker or end of data
            if b"\xcb\xd4\x31\x94" == bytes(mf.mm[off - mf.base + 4:off - mf.base + 8]):
                off = mf.end
                continue
            print(f"stop at {off}: {e}")
            break
        print(f"{m.physical_offset:>12} {m.msg_id} {m.topic}:{m.queue_id}@{m.queue_offset} size={m.size} "
              f"tags={m.tags} keys={m.keys} body={m.body[:40]!r}")
        off += m.size
        shown += 1
    return 0


def cq(root: str, topic: str, qid: int, limit: int) -> int:
    d = os.path.join(root, "consumequeue", topic, str(qid))
    n = 0
    for name in sorted(os.listdir(d)):
        data = open(os.path.join(d, name), "rb").read()
        for i in range(0, len(data), 20):
            off, size, tag = struct.unpack_from(">qiq", data, i)
            if size == 0 or n >= limit:
                return 0
            print(f"{int(name) // 20 + i // 20:>10} offset={off} size={size} tagsCode={tag}")
            n += 1
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify")
    v.add_argument("root")
    d = sub.add_parser("dump")
    d.add_argument("root")
    d.add_argument("--from", dest="start", type=int, default=0)
    d.add_argument("--limit", type=int, default=20)
    c = sub.add_parser("cq")
    c.add_argument("root")
    c.add_argument("topic")
    c.add_argument("queue_id", type=int)
    c.add_argument("--limit", type=int, default=20)
    a = p.parse_args(argv)
    if a.cmd == "verify":
        return verify(a.root)
    if a.cmd == "dump":
        return dump(a.root, a.start, a.limit)
    return cq(a.root, a.topic, a.queue_id, a.limit)


if __name__ == "__main__":
    sys.exit(main())
