"""Files the store writes decode with an independent decoder written from RocketMQ's field tables."""
import asyncio
import os
import zlib

from broker.kernels.codec import java_string_hash
from broker.services.message_store import MessageStore
from tests.twins.decoder import decode_cq_entry, walk_segment


def test_commit_log_and_consume_queue_decode_independently(store_config):
    cfg = store_config(brokerIP1="10.1.2.3", listenPort=10911)
    sent = []

    async def go():
        async with MessageStore(cfg) as s:
            for i in range(700):  # ~1.6 MiB: two segments
                props = {"TAGS": "TagA" if i % 2 else "标签", "KEYS": f"order-{i}", "UNIQ_KEY": f"U{i:08X}"}
                body = os.urandom(2000 + i % 300)
                r = await s.put("FormatTopic", i % 3, body, props, flag=i, born_timestamp=1_700_000_000_000 + i,
                                born_host=bytes([192, 168, 0, 9]) + (40000).to_bytes(4, "big"))
                sent.append((r, i % 3, body, props))
    asyncio.run(go())

    seg = cfg.mappedFileSizeCommitLog
    records = []
    for name in sorted(os.listdir(cfg.commitlog_dir)):
        data = open(os.path.join(cfg.commitlog_dir, name), "rb").read()
        assert len(data) == seg and int(name) % seg == 0 and len(name) == 20
        records += walk_segment(data, int(name))
    assert len(records) == len(sent)
    for i, (rec, (r, qid, body, props)) in enumerate(zip(records, sent)):
        assert rec["commit_log_offset"] == rec["physical_offset"] == r.physical_offset
        assert rec["total_size"] == r.size == 91 + len(body) + len("FormatTopic") + len(
            "\x02".join(f"{k}\x01{v}" for k, v in props.items()).encode())
        assert rec["body"] == body and rec["body_crc"] == zlib.crc32(body) & 0x7FFFFFFF
        assert (rec["topic"], rec["queue_id"], rec["queue_offset"]) == ("FormatTopic", qid, i // 3)
        assert rec["properties"] == props and rec["flag"] == i and rec["born_timestamp"] == 1_700_000_000_000 + i
        assert rec["born_host"] == "192.168.0.9:40000" and rec["store_host"] == "10.1.2.3:10911"
        assert rec["store_timestamp"] == r.store_timestamp and rec["sys_flag"] == 0
        assert r.msg_id == "0A010203" + "00002A9F" + "%016X" % r.physical_offset

    for qid in range(3):
        d = os.path.join(cfg.consumequeue_dir, "FormatTopic", str(qid))
        data = b"".join(open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d)))
        mine = [(r, props) for r, q, _, props in sent if q == qid]
        for i, (r, props) in enumerate(mine):
            assert decode_cq_entry(data, i * 20) == (r.physical_offset, r.size, java_string_hash(props["TAGS"].encode()))
        assert decode_cq_entry(data, len(mine) * 20) == (0, 0, 0)
