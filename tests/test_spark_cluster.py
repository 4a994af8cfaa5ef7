"""broker.spark on a real Spark standalone cluster (issue 15.5): a master and two workers started
from the pyspark package on 127.0.0.1 (tests/helpers/spark_standalone.py), one core each, so
every task runs in an executor JVM that a worker launched, with Python workers of its own, and
reaches the name server and broker (tests.helpers.real_clients.Cluster) over TCP, as it would
from another machine. Batch read, streaming read with a checkpoint across a restart of the
query, and the sink.

Why the driver is a process of its own (tests/helpers/spark_driver.py, driven over its stdin
and stdout): a Python process holds at most one SparkContext, and tests/test_spark.py keeps a
session-scoped local[2] one open until pytest ends. In the same process, this module's
session would be that local one (getOrCreate) or would have to stop it, which breaks whichever
of the two modules runs later, in any order pytest picks. A driver process of its own cannot
meet that session, and it is how an application meets a cluster anyway: its own JVM, from
which executors on the workers fetch tasks. The driver is started once for the module (the
application and its executors take ~10 s to come up); the tests send it commands, and every
assertion is made here, against what the broker holds or the project's client reads.
"""
from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from broker.client.pull_consumer import PullConsumer
from tests.helpers.real_clients import Cluster
from tests.helpers.spark_driver import SparkDriver
from tests.helpers.spark_standalone import EXECUTOR_CLASS, StandaloneSpark
from tests.test_spark import BROKER, create_topic, messages, send

_names = itertools.count()


def _unique(prefix: str) -> str:
    return f"SparkCluster{prefix}{next(_names)}"


@pytest.fixture(scope="module")
def mq(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("spark-cluster-mq")) as c:
        yield c


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    with StandaloneSpark(tmp_path_factory.mktemp("spark-standalone")) as s:
        yield s


@pytest.fixture(scope="module")
def driver(standalone, tmp_path_factory):
    d = SparkDriver(standalone.url, tmp_path_factory.mktemp("spark-driver"))
    try:
        yield d
    finally:
        d.close()


def read_options(mq: Cluster, topic: str, **extra) -> dict:
    return {"namesrvAddr": mq.namesrv, "topic": topic, **extra}


def expected_rows(topic: str, sent: dict, offsets: dict) -> list[list]:
    """The rows the source must give for messages() sent to `topic` (spark_driver.ROW_COLUMNS)."""
    return sorted([q, off, m.body.decode(), m.tags, m.keys, topic, BROKER]
                  for q in sent for off, m in zip(offsets[q], sent[q]))


def test_tasks_run_in_executor_processes_on_both_workers(standalone, driver):
    app = driver.ready["app"]
    assert driver.ready["executors"] == 2
    ran = driver.call("tasks", n=6)["tasks"]
    assert len(ran) == 6
    workers_used = set()
    for chain in ran:
        pids = [pid for pid, _ in chain]
        # python worker → (daemon) → executor JVM of this application → a worker JVM
        jvms = [i for i, (_, cmd) in enumerate(chain) if EXECUTOR_CLASS in cmd]
        assert len(jvms) == 1, f"the task did not run under one executor JVM: {chain}"
        executor = jvms[0]
        assert f"--app-id {app}" in chain[executor][1], chain
        assert chain[executor + 1][0] in standalone.worker_pids, chain
        assert all(pid != driver.child.proc.pid for pid in pids), "a task ran in the driver's process tree"
        workers_used.add(chain[executor + 1][0])
    assert workers_used == standalone.worker_pids, "the tasks did not run on both workers"
    # the master's own view: the application holds one core on each worker
    apps = [a for a in standalone.state()["activeapps"] if a["id"] == app]
    assert apps and apps[0]["cores"] == 2, standalone.state()


def test_batch_read_across_queues_and_executors(mq, driver):
    topic = _unique("Batch")
    create_topic(mq, topic, queues=4)
    sent = messages(topic, 4, 250)
    offsets = send(mq, topic, sent)

    # 250 per queue, at most 100 per partition: 3 partitions per queue, spread over both executors
    got = driver.call("read", options=read_options(mq, topic, maxRecordsPerPartition=100))
    assert got["partitions"] == 12
    assert len(got["rows"]) == 1000
    assert sorted(got["rows"]) == expected_rows(topic, sent, offsets)

    # a tag filter and an offset range are applied on the executors as well
    tagged = driver.call("read", options=read_options(mq, topic, tags="TagB"))["rows"]
    assert len(tagged) == 500 and {r[3] for r in tagged} == {"TagB"}
    end = json.dumps({topic: {f"{BROKER}:{q}": 50 for q in range(4)}})
    head = driver.call("read", options=read_options(mq, topic, endingOffsets=end))["rows"]
    assert sorted((r[0], r[1]) for r in head) == [(q, o) for q in range(4) for o in range(50)]


def test_streaming_read_resumes_from_its_checkpoint_after_a_restart(mq, driver, tmp_path):
    topic = _unique("Stream")
    create_topic(mq, topic, queues=4)
    first_sent = messages(topic, 4, 150)
    first = expected_rows(topic, first_sent, send(mq, topic, first_sent))
    checkpoint = str(tmp_path / "checkpoint")
    stream = read_options(mq, topic, startingOffsets="earliest", maxRowsPerTrigger=250)

    run1 = driver.call("stream", options=stream, checkpoint=checkpoint)["batches"]
    rows1 = [r for _, rows in run1 for r in rows]
    assert sorted(rows1) == first  # each message once, across the micro-batches
    assert [len(rows) for _, rows in run1] == [250, 250, 100]

    # more messages, then the query restarted on the same checkpoint: exactly the new ones
    second_sent = messages(topic, 4, 40, start=150)
    second = expected_rows(topic, second_sent, send(mq, topic, second_sent))
    run2 = driver.call("stream", options=stream, checkpoint=checkpoint)["batches"]
    rows2 = [r for _, rows in run2 for r in rows]
    assert sorted(rows2) == second
    assert min(b for b, _ in run2) > max(b for b, _ in run1), "the restart reused a batch id"
    assert not {(r[0], r[1]) for r in rows1} & {(r[0], r[1]) for r in rows2}, "a message was read twice"

    # a third start with nothing new reads nothing
    run3 = driver.call("stream", options=stream, checkpoint=checkpoint)["batches"]
    assert [r for _, rows in run3 for r in rows] == []


def pull_all(mq: Cluster, topic: str) -> list:
    """Every message of `topic`, pulled queue by queue with the project's client."""
    async def go():
        out = []
        async with PullConsumer(_unique("check"), mq.namesrv) as c:
            for queue in await c.fetch_queues(topic):
                offset, end = 0, await c.max_offset(queue)
                while offset < end:
                    r = await c.pull(queue, offset, 256)
                    assert r.messages, (queue, offset, r.status)
                    out.extend(r.messages)
                    offset = r.next_begin_offset
        return out
    return asyncio.run(go())


def test_sink_writes_from_the_executors_what_the_client_reads_back(mq, driver):
    topic = _unique("Sink")
    create_topic(mq, topic, queues=4)
    rows = [[f"order-{i}", ("TagA", "TagB")[i % 2], f"key-{i}", {"n": str(i), "shard": str(i % 4)}]
            for i in range(600)]
    assert driver.call("write", options={"namesrvAddr": mq.namesrv, "topic": topic, "batchSize": 64},
                       rows=rows)["written"] == 600

    got = pull_all(mq, topic)
    assert len(got) == 600, "the sink wrote a message twice or lost one"
    assert sorted((m.body.decode(), m.tags, m.keys, m.properties["n"], m.properties["shard"]) for m in got) == \
        sorted((b, t, k, p["n"], p["shard"]) for b, t, k, p in rows)
