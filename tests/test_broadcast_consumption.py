"""Broadcasting consumption (MessageModel.BROADCASTING): every member of the group gets every
message, and each keeps its own offsets in a local file (LocalFileOffsetStore), never at the
broker. The project's own client and the real C++ client (PyPI rocketmq 0.4.4), each consumer
its own process, against a name server and broker that are processes too."""
from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import msgspec
import pytest

from broker.client.errors import ClientError
from broker.client.local_offset_store import LocalFileOffsetStore, LocalOffsetStoreError
from broker.client.message import Message
from broker.client.push_consumer import PushConsumer
from broker.client.route import MessageQueue
from broker.client.sync import SyncProducer
from broker.remoting import codes
from tests.helpers.real_clients import Cluster, Consumer

_names = itertools.count()


def _unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("broadcast")) as c:
        yield c


def send(cluster: Cluster, topic: str, bodies: list[str]) -> None:
    with SyncProducer(_unique("pg-broadcast"), cluster.namesrv) as p:
        for body in bodies:
            p.send(Message(topic, body.encode()))  # round-robin over the four queues


def bodies_of(consumer: Consumer) -> list[str]:
    return [m["body"] for m in consumer.got]


def arrived(consumer: Consumer, bodies: set[str], timeout: float = 1.0) -> bool:
    """Whether all of `bodies` reach the consumer within `timeout` (a warm-up round's pace)."""
    try:
        consumer.wait(lambda g: bodies <= {m["body"] for m in g}, timeout, "a warm-up round")
        return True
    except AssertionError:
        return False


def committed_groups(cluster: Cluster) -> set[str]:
    """The groups the broker holds a committed offset for (its ConsumerOffsetManager table)."""
    r = cluster.call(codes.GET_ALL_CONSUMER_OFFSET, {})
    return {key.split("@", 1)[1] for key in msgspec.json.decode(bytes(r.body))["offsetTable"]}


def test_every_member_gets_every_message_and_a_restarted_one_resumes_from_its_local_offsets(cluster, tmp_path):
    topic, group = _unique("Broadcast"), _unique("cg-broadcast")
    cluster.create_topic(topic)
    offsets = tmp_path / "offsets"
    opt = dict(messageModel="BROADCASTING", offsetDir=str(offsets), kw={"persist_interval": 0.5})
    first = [f"first-{i}" for i in range(40)]
    a = Consumer("py", cluster, tmp_path, topic, group, "a", **opt)
    with a, Consumer("py", cluster, tmp_path, topic, group, "b", **opt) as b:
        ready = json.loads(next(line for line in a.child.lines if '"ready"' in line))
        assert ready["consumerData"]["messageModel"] == "BROADCASTING"  # what the heartbeat says
        assert not any(s["topic"].startswith("%RETRY%") for s in ready["consumerData"]["subscriptionDataSet"])
        send(cluster, topic, first)
        for c in (a, b):
            c.wait(lambda g: len(g) >= len(first), 60, "every message at each member")
        assert sorted(bodies_of(a)) == sorted(bodies_of(b)) == sorted(first)  # each once, at each
        a.close()  # shutdown persists a's offsets to its own file
        a_file = offsets / ready["clientId"] / group / "offsets.json"
        table = msgspec.json.decode(a_file.read_bytes())["offsetTable"]
        assert sorted((e["topic"], e["queueId"], e["offset"]) for e in table) == [(topic, q, 10) for q in range(4)]
        later = [f"later-{i}" for i in range(20)]
        send(cluster, topic, later)
        b.wait(lambda g: len(g) >= len(first) + len(later), 60, "b getting the later messages")
        # a comes back under the same instance name: from its file, not from the first message
        with Consumer("py", cluster, tmp_path, topic, group, "a", **opt) as again:
            got = again.wait(lambda g: len(g) >= len(later), 60, "the restarted a getting the later messages")
            assert sorted(m["body"] for m in got) == sorted(later)
    assert sorted(bodies_of(b)) == sorted(first + later)
    assert group not in committed_groups(cluster)  # nothing was committed at the broker


def test_two_cpp_broadcasting_consumers_each_get_every_message(cluster, tmp_path):
    topic, group = _unique("BroadcastCpp"), _unique("cg-broadcast-cpp")
    cluster.create_topic(topic)
    with Consumer("cpp", cluster, tmp_path, topic, group, "cpp-a", messageModel="BROADCASTING") as a, \
            Consumer("cpp", cluster, tmp_path, topic, group, "cpp-b", messageModel="BROADCASTING") as b:
        # a new broadcasting member starts at the queues' end (CONSUME_FROM_LAST_OFFSET, no local
        # offset yet), from whenever its first rebalance runs: warm up with rounds of one message
        # per queue until each member has read from every queue; whatever is sent after that
        # must reach both
        for i in range(100):
            send(cluster, topic, [f"warm-{i}-{q}" for q in range(4)])
            if all(arrived(c, {f"warm-{i}-{q}" for q in range(4)}) for c in (a, b)) and \
                    all({m["queueId"] for m in c.got} == {0, 1, 2, 3} for c in (a, b)):
                break
        else:
            raise AssertionError("the two C++ consumers never both read all four queues")
        bodies = [f"body-{i}" for i in range(40)]
        send(cluster, topic, bodies)
        for c in (a, b):
            got = c.wait(lambda g: sum(m["body"].startswith("body-") for m in g) >= len(bodies), 60,
                         "every message at each member")
            assert sorted(m["body"] for m in got if m["body"].startswith("body-")) == sorted(bodies)
    assert group not in committed_groups(cluster)


def test_a_torn_offsets_file_is_read_from_its_backup_and_an_unreadable_pair_is_refused_naming_it(tmp_path):
    mq = MessageQueue("T", "broker-a", 2)
    store = LocalFileOffsetStore("127.0.0.1@a", "g", str(tmp_path))
    store.update(mq, 7)
    asyncio.run(store.persist_all())
    store.update(mq, 9)
    asyncio.run(store.persist_all())  # offsets.json says 9, its .bak the 7 before
    path = Path(store.path)
    assert path == tmp_path / "127.0.0.1@a" / "g" / "offsets.json"
    path.write_bytes(b'{"offsetTable": [{"topic": "T", "brok')  # torn by a crash mid-write
    again = LocalFileOffsetStore("127.0.0.1@a", "g", str(tmp_path))
    again.load()
    assert again.table == {mq: 7}
    Path(str(path) + ".bak").write_bytes(b"\x00garbage")
    with pytest.raises(LocalOffsetStoreError, match=r"offsets\.json\.bak: not an offset table"):
        LocalFileOffsetStore("127.0.0.1@a", "g", str(tmp_path)).load()
    with pytest.raises(ClientError, match="message_model 'BROADCAST' is neither CLUSTERING nor BROADCASTING"):
        PushConsumer("g", "127.0.0.1:1", message_model="BROADCAST")
