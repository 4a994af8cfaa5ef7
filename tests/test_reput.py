"""The reput service builds consume queues that agree with the commit log, entry by entry."""
import asyncio
import os
import struct

import numpy as np

from broker.kernels.codec import java_string_hash
from broker.services.message_store import MessageStore


def _read_cq(root, topic, qid, file_entries):
    d = os.path.join(root, "consumequeue", topic, str(qid))
    out = []
    for name in sorted(os.listdir(d)):
        data = open(os.path.join(d, name), "rb").read()
        assert int(name) == len(out) * 20  # files named by their first byte offset
        for i in range(0, len(data), 20):
            off, size, tag = struct.unpack_from(">qiq", data, i)
            if size == 0:
                return out
            out.append((off, size, tag))
    return out


def test_consume_queues_match_commit_log(store_config):
    cfg = store_config()
    rng = np.random.default_rng(7)
    puts = []

    async def go():
        async with MessageStore(cfg) as s:
            for i in range(3000):
                topic = f"Topic{i % 3}"
                qid = int(rng.integers(0, 4))
                tag = f"tag{i % 5}" if i % 7 else None
                props = {"TAGS": tag} if tag else {}
                r = await s.put(topic, qid, os.urandom(int(rng.integers(0, 900))), props)
                puts.append((topic, qid, tag, r))
    asyncio.run(go())
    seg = cfg.mappedFileSizeCommitLog
    for topic in ("Topic0", "Topic1", "Topic2"):
        for qid in range(4):
            expect = [(r.physical_offset, r.size, java_string_hash(t.encode()) if t else 0)
                      for tp, q, t, r in puts if tp == topic and q == qid]
            got = _read_cq(cfg.storePathRootDir, topic, qid, 2000)
            assert got == expect
            for off, size, _ in got:  # each entry points at a record of that size, topic and queue
                with open(os.path.join(cfg.commitlog_dir, "%020d" % (off - off % seg)), "rb") as f:
                    f.seek(off % seg)
                    head = f.read(size)
                total, magic, _, q = struct.unpack_from(">iIii", head)
                assert (total, magic, q) == (size, 0xDAA320A7, qid)
                blen = struct.unpack_from(">i", head, 84)[0]
                tlen = head[88 + blen]
                assert head[89 + blen:89 + blen + tlen].decode() == topic


def test_async_flush_makes_data_durable_without_being_asked(store_config):
    async def go():
        async with MessageStore(store_config(flushIntervalCommitLog=50, flushCommitLogLeastPages=1)) as s:
            r = None
            for i in range(100):
                r = await s.put("A", 0, b"a" * 100)
            assert r.status.name == "PUT_OK"
            assert await s.wait_flushed(r.end_offset, 5) >= r.end_offset  # the timed flush runs on its own
    asyncio.run(go())
