"""broker.spark (issue 8): Spark reads and writes topics of a real name server and broker.

Everything runs as real processes on loopback: `broker namesrv` and `broker serve` (the
Cluster of tests/helpers/real_clients.py), one local[2] SparkSession for the whole session
(a JVM and Python workers that reach the broker over TCP, as on a cluster), and for the sink
the real npm client ali-ons reading back what Spark wrote.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import sys
import zlib

import pytest

from broker.client.admin import Admin
from broker.client.message import Message, decode_messages
from broker.client.producer import Producer
from broker.client.route import MessageQueue
from broker.kernels.codec import encode_record
from broker.store.message import encode_properties
from tests.helpers.procs import REPO
from tests.helpers.real_clients import Cluster, Consumer

BROKER = "broker-a"  # the Cluster's brokerName
_names = itertools.count()


def _unique(prefix: str) -> str:
    return f"Spark{prefix}{next(_names)}"


# -- fixtures --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    """One local[2] session for every test of this module: starting one costs ~10 s here. local_session sets
    PYSPARK_PYTHON to this interpreter, SPARK_LOCAL_IP=127.0.0.1 and PYTHONPATH to the repo
    (the workers import broker.spark) before the JVM starts; they are put back afterwards."""
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP", "PYTHONPATH")}
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from broker.spark.local import local_session
    session = local_session("broker-spark-tests", **{"spark.local.dir": str(tmp_path_factory.mktemp("spark-local"))})
    assert os.environ["PYSPARK_PYTHON"] == sys.executable and str(REPO) in os.environ["PYTHONPATH"]
    yield session
    session.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("spark-cluster")) as c:
        yield c


# -- helpers ---------------------------------------------------------------------------------------

def create_topic(cluster: Cluster, topic: str, queues: int = 4) -> None:
    """Create `topic` on the broker and wait until the name server lists it (the source refuses
    topics no broker registered)."""
    async def go():
        async with Admin(cluster.namesrv) as admin:
            await admin.create_topic(topic, queues, broker_addr=f"127.0.0.1:{cluster.port}")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while topic not in await admin.topic_list():
                assert loop.time() < deadline, f"{topic} not registered within 30 s"
                await asyncio.sleep(0.02)
    asyncio.run(go())


def send(cluster: Cluster, topic: str, per_queue: dict[int, list[Message]]) -> dict[int, list[int]]:
    """Send each queue's messages to that queue (batches of 100); the queue offsets they got."""
    async def go():
        out: dict[int, list[int]] = {}
        async with Producer("spark-test-pg", cluster.namesrv) as p:
            for q, msgs in per_queue.items():
                for i in range(0, len(msgs), 100):
                    chunk = msgs[i:i + 100]
                    r = await p.send_batch(chunk, queue=MessageQueue(topic, BROKER, q))
                    assert r.status == "SEND_OK", r
                    out.setdefault(q, []).extend(range(r.queue_offset, r.queue_offset + len(chunk)))
        return out
    return asyncio.run(go())


def messages(topic: str, queues: int, per_queue: int, tag: str = "", start: int = 0) -> dict[int, list[Message]]:
    return {q: [Message(topic, f"body-{q}-{i}".encode(), tag or ("TagA", "TagB")[i % 2], f"key-{i} k{q}",
                        {"color": f"c{i}"}) for i in range(start, start + per_queue)] for q in range(queues)}


def rocketmq(spark, topic: str, cluster: Cluster, stream: bool = False, **options):
    r = (spark.readStream if stream else spark.read).format("rocketmq")
    r = r.option("namesrvAddr", cluster.namesrv).option("topic", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def run_available_now(df, checkpoint, sink):
    """One availableNow run into foreachBatch `sink`; returns when the query has stopped."""
    q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert not q.isActive, "the availableNow query did not finish within 120 s"
    assert q.exception() is None, q.exception()


# -- Arrow conversion, against the client's own decoder (no Spark) ---------------------------------

def _records(n: int) -> bytes:
    """Stored records with every rarity: IPv6 hosts, compressed and short bodies, empty and
    non-ASCII properties, a piece without a value, a trailing separator."""
    buf, pos = bytearray(n * 700), 0
    v4 = socket.inet_aton("127.0.0.1") + (10911).to_bytes(4, "big")
    v6 = socket.inet_pton(socket.AF_INET6, "::1") + (10911).to_bytes(4, "big")
    for i in range(n):
        body, sys_flag, host = os.urandom(400 if i % 7 else i % 13), 0, v4
        if i % 9 == 0:
            body, sys_flag = zlib.compress(b"inflate me %d " % i * 20), 1
        if i % 11 == 0:
            sys_flag, host = sys_flag | 0x30, v6
        props = {"TAGS": f"Tag{i % 3}", "KEYS": f"k{i} o{i}", "color": "é" * (i % 3)}
        if i % 5 == 0:
            del props["TAGS"]
        raw = encode_properties(props) + (b"\x02" if i % 2 else b"") + (b"\x02lonely" if i % 4 == 0 else b"")
        pos += encode_record(buf, pos, 4096 + pos, i, 1_700_000_000_000 + i, b"TopicX", 2, body, raw, 0, sys_flag,
                             1_690_000_000_000 + i, host, host)
    return bytes(buf[:pos])


def test_records_become_the_same_rows_as_the_client_decodes():
    from broker.spark.arrow import records_to_batch
    from broker.spark.schema import ARROW_SCHEMA
    data = _records(500)
    batch = records_to_batch(data, BROKER, 0, 10**9)
    assert batch.schema == ARROW_SCHEMA
    rows = batch.to_pylist()
    ref = decode_messages(data, BROKER)
    assert len(rows) == len(ref) == 500
    for r, m in zip(rows, ref):
        assert (r["topic"], r["brokerName"], r["queueId"], r["queueOffset"], r["msgId"]) == \
               (m.topic, BROKER, m.queue_id, m.queue_offset, m.msg_id)
        assert (r["body"], dict(r["properties"]), r["tags"], r["keys"]) == (m.body, m.properties, m.tags, m.keys)
        assert (int(r["bornTimestamp"].timestamp() * 1000), int(r["storeTimestamp"].timestamp() * 1000)) == \
               (m.born_timestamp, m.store_timestamp)
    # a range and a tag filter cut the same records out
    part = records_to_batch(data, BROKER, 100, 200, frozenset({"Tag1"}))
    assert part.column("queueOffset").to_pylist() == [m.queue_offset for m in ref
                                                       if 100 <= m.queue_offset < 200 and m.tags == "Tag1"]
    assert records_to_batch(data, BROKER, 600, 700) is None


# -- batch reads -----------------------------------------------------------------------------------

def test_batch_read_equals_what_was_produced(spark, cluster):
    topic = _unique("Batch")
    create_topic(cluster, topic)
    sent = messages(topic, 4, 500)
    offsets = send(cluster, topic, sent)
    expected = {(q, off, m.body, m.tags, m.keys, m.properties["color"])
                for q in sent for off, m in zip(offsets[q], sent[q])}

    # 500 per queue split above 300: two partitions per queue
    df = rocketmq(spark, topic, cluster, maxRecordsPerPartition=300)
    assert df.rdd.getNumPartitions() == 8
    rows = df.collect()
    assert len(rows) == 2000
    got = {(r.queueId, r.queueOffset, bytes(r.body), r.tags, r.keys, r.properties["color"]) for r in rows}
    assert got == expected
    assert {(r.topic, r.brokerName) for r in rows} == {(topic, BROKER)}
    assert all(len(r.msgId) == 32 and r.properties["TAGS"] == r.tags for r in rows)
    assert len({r.msgId for r in rows}) == 2000
    assert all(r.bornTimestamp <= r.storeTimestamp for r in rows)

    # offsets as JSON: queue 0 from 10 to 20, queue 1 from latest (nothing), the others whole
    start = json.dumps({topic: {f"{BROKER}:0": 10, f"{BROKER}:1": -1}})
    end = json.dumps({topic: {f"{BROKER}:0": 20}})
    part = rocketmq(spark, topic, cluster, startingOffsets=start, endingOffsets=end)
    per_queue = {r.queueId: r.n for r in part.groupBy("queueId").agg({"queueOffset": "count"})
                 .withColumnRenamed("count(queueOffset)", "n").collect()}
    assert per_queue == {0: 10, 2: 500, 3: 500}
    assert sorted(r.queueOffset for r in part.where("queueId = 0").collect()) == list(range(10, 20))

    # a tag filter (the broker filters by tag hash, the source by tag)
    tagged = rocketmq(spark, topic, cluster, tags="TagA")
    assert tagged.count() == 1000
    assert {r.tags for r in tagged.select("tags").distinct().collect()} == {"TagA"}


def test_reading_a_topic_that_does_not_exist_is_a_clear_error(spark, cluster):
    with pytest.raises(Exception) as e:
        rocketmq(spark, "NoSuchTopicAnywhere", cluster).count()
    assert "topic NoSuchTopicAnywhere does not exist" in str(e.value)
    # and a bad option names itself
    with pytest.raises(Exception) as e:
        rocketmq(spark, "NoSuchTopicAnywhere", cluster, startingOffsets="{not json").count()
    assert "rocketmq option 'startingOffsets'" in str(e.value)


# -- streaming reads -------------------------------------------------------------------------------

def test_streaming_reads_everything_then_only_new_rows_after_a_restart(spark, cluster, tmp_path):
    topic, group = _unique("Stream"), _unique("cg")
    create_topic(cluster, topic)
    first = send(cluster, topic, messages(topic, 4, 250))
    batches: list[tuple[int, list]] = []

    def sink(df, batch_id):
        batches.append((batch_id, [(r.queueId, r.queueOffset, bytes(r.body))
                                   for r in df.select("queueId", "queueOffset", "body").collect()]))

    stream = rocketmq(spark, topic, cluster, stream=True, startingOffsets="earliest", consumerGroup=group)
    run_available_now(stream, tmp_path / "ck", sink)
    rows = [r for _, rs in batches for r in rs]
    assert sorted((q, o) for q, o, _ in rows) == sorted((q, o) for q in first for o in first[q])
    assert len(rows) == 1000
    run1_batches = [b for b, _ in batches]

    # more messages; the restarted query (same checkpoint) reads exactly those
    second = send(cluster, topic, messages(topic, 4, 40, start=250))
    batches.clear()
    run_available_now(rocketmq(spark, topic, cluster, stream=True, startingOffsets="earliest", consumerGroup=group),
                      tmp_path / "ck", sink)
    rows = [r for _, rs in batches for r in rs]
    assert sorted((q, o) for q, o, _ in rows) == sorted((q, o) for q in second for o in second[q])
    assert {b for b, _ in batches if b <= max(run1_batches)} == set(), "a batch id was reused"
    assert all(body == f"body-{q}-{o}".encode() for q, o, body in rows)

    # the group's offsets on the broker followed Spark's commits (Spark commits a batch when it
    # plans the next one, so at least the first run's end is there)
    async def committed():
        async with Admin(cluster.namesrv) as admin:
            return {lag.queue.queue_id: lag.committed for lag in await admin.consumer_offsets(group, topic)}
    assert all(c >= 250 for c in asyncio.run(committed()).values())

    # startingTimestamp (SEARCH_OFFSET_BY_TIMESTAMP): after the first round's last store time,
    # a batch read sees exactly the second round
    df = rocketmq(spark, topic, cluster)
    last_first = df.where("queueOffset < 250").agg({"storeTimestamp": "max"}).collect()[0][0]
    ts_ms = int(last_first.timestamp() * 1000) + 1
    later = rocketmq(spark, topic, cluster, startingTimestamp=str(ts_ms))
    assert later.count() == 160
    assert later.where("queueOffset < 250").count() == 0


def test_max_rows_per_trigger_splits_an_available_now_run(spark, cluster, tmp_path):
    topic = _unique("Trigger")
    create_topic(cluster, topic)
    sent = send(cluster, topic, messages(topic, 4, 100))
    sizes: list[int] = []
    seen: list[tuple[int, int]] = []

    def sink(df, batch_id):
        got = [(r.queueId, r.queueOffset) for r in df.select("queueId", "queueOffset").collect()]
        sizes.append(len(got))
        seen.extend(got)

    run_available_now(rocketmq(spark, topic, cluster, stream=True, startingOffsets="earliest",
                               maxRowsPerTrigger="150"), tmp_path / "ck", sink)
    assert sizes == [150, 150, 100]
    assert sorted(seen) == sorted((q, o) for q in sent for o in sent[q])


# -- writes ----------------------------------------------------------------------------------------

def test_batch_and_streaming_writes_reach_a_real_client(spark, cluster, tmp_path):
    out, src = _unique("Out"), _unique("Src")
    create_topic(cluster, out)
    create_topic(cluster, src)

    # batch: every sink column, rows pinned to queues by queueId
    rows = [(f"batch-{i}", "batch", f"bk{i}", {"color": f"c{i}"}, i % 4) for i in range(300)]
    df = spark.createDataFrame(rows, "body string, tags string, keys string, "
                                     "properties map<string,string>, queueId int")
    (df.write.format("rocketmq").option("namesrvAddr", cluster.namesrv).option("topic", out)
     .option("batchSize", "64").mode("append").save())

    # streaming: a topic read as a stream, re-tagged and written on
    send(cluster, src, messages(src, 4, 25))
    stream = rocketmq(spark, src, cluster, stream=True, startingOffsets="earliest")
    q = (stream.selectExpr("body", "'stream' AS tags", "keys")
         .writeStream.format("rocketmq").option("namesrvAddr", cluster.namesrv).option("topic", out)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert not q.isActive and q.exception() is None, q.exception()

    # where the pinned rows landed, read back through Spark
    back = rocketmq(spark, out, cluster).where("tags = 'batch'").select("queueId", "body").collect()
    assert len(back) == 300
    assert all(r.queueId == int(bytes(r.body).split(b"-")[1]) % 4 for r in back)

    with Consumer("ons", cluster, tmp_path, out, _unique("cg"), "ons1") as c:
        got = c.wait(lambda g: len(g) >= 400, 60, "every written message")
    assert len(got) == 400
    batch_msgs = {m["body"]: m for m in got if m["tags"] == "batch"}
    assert sorted(batch_msgs) == sorted(f"batch-{i}" for i in range(300))
    for i in (0, 7, 299):
        m = batch_msgs[f"batch-{i}"]
        assert (m["topic"], m["keys"], m["props"]["color"], m["queueId"]) == (out, f"bk{i}", f"c{i}", i % 4)
    stream_msgs = sorted(m["body"] for m in got if m["tags"] == "stream")
    assert stream_msgs == sorted(f"body-{q}-{i}" for q in range(4) for i in range(25))


def test_a_refused_send_fails_the_write_with_the_topic_and_the_cause(spark, cluster):
    topic = _unique("Refused")
    create_topic(cluster, topic)
    big = spark.createDataFrame([(b"x" * (5 << 20),)], "body binary")  # over the broker's 4 MiB maxMessageSize
    with pytest.raises(Exception) as e:
        big.write.format("rocketmq").option("namesrvAddr", cluster.namesrv).option("topic", topic).mode("append").save()
    text = str(e.value)
    assert f"to topic {topic} queue" in text and "failed" in text, text[-2000:]
    with pytest.raises(Exception) as e:  # a column the sink does not know is refused before any task
        spark.createDataFrame([("a", "b")], "body string, tag string").write.format("rocketmq") \
            .option("namesrvAddr", cluster.namesrv).option("topic", topic).mode("append").save()
    assert "column 'tag' is not one the rocketmq sink writes" in str(e.value)
