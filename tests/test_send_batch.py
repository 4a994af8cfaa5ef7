"""SEND_BATCH_MESSAGE (320) as the Java client sends it: one body of encoded messages, each with
its own properties, stored as separate records of one queue; malformed batches are refused with
the offset named and the connection stays usable."""
from __future__ import annotations

import asyncio
import time

from broker.remoting import codes
from broker.remoting.message_batch import decode_batch, encode_batch_body
from tests.test_broker_remoting import Broker, _records
from tests.twins.decoder import decode_record


def _batch_header(topic, queue_id=1):
    return {"a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": int(time.time() * 1000),
            "h": 0, "i": "", "j": 0, "k": False, "m": True}


def test_batch_is_stored_as_one_record_per_message_with_its_own_properties(tmp_path):
    msgs = [(b"body-%d" % i * (i + 1), f"TAGS\x01T{i}\x02KEYS\x01k{i}\x02UNIQ_KEY\x01U{i}\x02".encode(), 0)
            for i in range(5)]

    async def go():
        async with Broker(tmp_path) as b:
            assert (await b.send_v2("B", b"before", queue_id=1)).code == codes.SUCCESS
            r = await b.call(codes.SEND_BATCH_MESSAGE, _batch_header("B"), encode_batch_body(msgs))
            assert r.code == codes.SUCCESS, r.remark
            ids = r.ext["msgId"].split(",")
            assert len(ids) == 5 and r.ext["queueOffset"] == "1" and r.ext["queueId"] == "1"
            for (body, props, _), mid in zip(msgs, ids):  # each id addresses its own record
                view = await b.call(codes.VIEW_MESSAGE_BY_ID, {"offset": int(mid[16:], 16)})
                rec = decode_record(bytes(view.body), 0)
                assert rec["body"] == body and rec["queue_id"] == 1
                assert rec["properties"]["UNIQ_KEY"] == props.decode().split("UNIQ_KEY\x01")[1].rstrip("\x02")
            await b.controller.store.wait_dispatched(b.controller.store.offsets()["wrote"], 10)
            # the consume queue has one entry per message, with its tag hash: a tag filter picks one
            got = _records((await b.pull("B", 1, 0, sys_flag=0)).body)
            assert [m.body for m in got] == [b"before"] + [m[0] for m in msgs]
            got = _records((await b.pull("B", 1, 0, sys_flag=4, subscription="T3")).body)
            assert [m.tags for m in got] == ["T3"]

    asyncio.run(go())


def test_malformed_batches_are_refused_and_nothing_is_stored(tmp_path):
    good = encode_batch_body([(b"x" * 10, b"", 0), (b"y" * 10, b"", 0)])

    async def go():
        async with Broker(tmp_path) as b:
            store = b.controller.store
            before = store.offsets()["wrote"]
            r = await b.call(codes.SEND_BATCH_MESSAGE, _batch_header("B"), good[:-3])  # truncated second message
            assert r.code == codes.SYSTEM_ERROR and "offset 32" in r.remark
            bad = bytearray(good)
            bad[16:20] = (999).to_bytes(4, "big")  # bodyLen beyond totalSize
            r = await b.call(codes.SEND_BATCH_MESSAGE, _batch_header("B"), bytes(bad))
            assert r.code == codes.SYSTEM_ERROR and "offset 0" in r.remark
            assert store.offsets()["wrote"] == before
            r = await b.call(codes.SEND_BATCH_MESSAGE, _batch_header("B"), good)  # same connection still works
            assert r.code == codes.SUCCESS and len(r.ext["msgId"].split(",")) == 2

    asyncio.run(go())


def test_decode_batch_round_trips_what_encode_writes():
    msgs = [(bytes([i]) * i, b"K\x01v\x02" * (i % 3), i % 2) for i in range(20)]
    bodies, props, flags = decode_batch(encode_batch_body(msgs))
    assert [bytes(x) for x in bodies] == [m[0] for m in msgs]
    assert [bytes(x) for x in props] == [m[1] for m in msgs]
    assert flags == [m[2] for m in msgs]


def test_each_message_keeps_its_flag_and_gets_the_batchs_properties(tmp_path):
    """As a 4.9 broker stores a batch (MessageExtBatchEncoder): every message with its own flag, its
    own properties followed by the batch header's, a separator added where its own do not end in
    one. The kernel takes the batch on a routed topic, the processors on its first use (a new
    topic): both store the same."""
    msgs = [(b"a", b"TAGS\x01x", 0), (b"b", b"", 7), (b"c", b"KEYS\x01k\x02", -1)]

    async def go():
        async with Broker(tmp_path) as b:
            for topic in ("Flags", "Flags"):  # the processors (first use), then the kernel
                hdr = {**_batch_header(topic, 0), "i": "WAIT\x01true"}
                r = await b.call(codes.SEND_BATCH_MESSAGE, hdr, encode_batch_body(msgs))
                assert r.code == codes.SUCCESS and len(r.ext["msgId"].split(",")) == 3, r
            assert b.controller.fast.pipeline.appended == 3
            await b.controller.store.wait_dispatched(b.controller.store.offsets()["wrote"], 10)
            got = _records((await b.pull("Flags", 0, 0, sys_flag=0)).body)
            assert [m.flag for m in got] == [0, 7, -1] * 2
            # and no CLUSTER: Apache RocketMQ 5.5.0 adds it to single messages only
            c = {"WAIT": "true"}
            assert [m.properties for m in got] == [{"TAGS": "x", **c}, c, {"KEYS": "k", **c}] * 2
            body = bytes((await b.pull("Flags", 0, 0, sys_flag=0)).body)
            raw, pos = [], 0
            for _ in range(6):  # the properties as stored (docs/formats.md §1, IPv4 hosts)
                rec = decode_record(body, pos)
                at = pos + 84 + 4 + len(rec["body"]) + 1 + len(rec["topic"])
                raw.append(body[at + 2:at + 2 + int.from_bytes(body[at:at + 2], "big")])
                pos += rec["total_size"]
            assert raw == [b"TAGS\x01x\x02WAIT\x01true", b"WAIT\x01true", b"KEYS\x01k\x02WAIT\x01true"] * 2

    asyncio.run(go())
