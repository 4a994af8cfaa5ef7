"""Unmodified RocketMQ clients against our name server and broker, every one a real process on
loopback: npm ali-ons 3.12.0 (pure JS, SEND_MESSAGE_V2) and PyPI rocketmq 0.4.4 (the Apache C++
client, SEND_MESSAGE v1). Installed by `make test` (Makefile target `clients`)."""
from __future__ import annotations

import itertools

import pytest

from tests.conftest import wait_for
from tests.helpers.real_clients import KINDS, Cluster, Consumer, produce

_names = itertools.count()


def _unique(prefix: str, kind: str) -> str:
    return f"{prefix}-{kind}-{next(_names)}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("real-clients"), "maxReconsumeTimes=16\n") as c:
        yield c


def _messages(n: int, tags=("TagA", "TagB")) -> list[dict]:
    return [{"tags": tags[i % len(tags)], "keys": [f"key-{i}", f"order-{i}"], "props": {"color": f"c{i}"},
             "body": f"body-{i}"} for i in range(n)]


@pytest.mark.parametrize("kind", KINDS)
def test_produce_and_consume_keep_tags_keys_properties_and_a_compressed_body(kind, cluster, tmp_path):
    topic, group = _unique("RoundTrip", kind), _unique("cg", kind)
    big = {"tags": "Big", "keys": ["big"], "props": {"color": "big"}, "size": 8192}
    sent = produce(kind, cluster, topic, _messages(20) + [big], tmp_path)
    assert [s.get("status") for s in sent] == ["SEND_OK" if kind == "ons" else "OK"] * 21, sent
    # server-side filter: TagB is interleaved with TagA in the same queues, so had the broker
    # let it through it would have arrived before the last TagA did
    with Consumer(kind, cluster, tmp_path, topic, group, "c1", expression="TagA || Big", propNames=["color"]) as c:
        got = c.wait(lambda g: len(g) >= 11, 60, "every TagA message and the big one")
    by_body = {m["body"] if m["body"] is not None else "big": m for m in got}
    assert sorted(by_body) == sorted([f"body-{i}" for i in range(0, 20, 2)] + ["big"]), got
    for i in range(0, 20, 2):
        m = by_body[f"body-{i}"]
        assert (m["topic"], m["tags"], m["keys"], m["props"]["color"]) == (topic, "TagA", f"key-{i} order-{i}", f"c{i}")
        assert m["reconsumeTimes"] == 0
    m = by_body["big"]
    assert (m["size"], m["bodyIsX"], m["tags"], m["props"]["color"]) == (8192, True, "Big", "big")
    # the client deflated the 8 KiB body; the broker stored it as sent, flag and all
    stored = [r for q in range(4) for r in cluster.records(topic, q) if r.properties.get("TAGS") == "Big"]
    assert len(stored) == 1 and stored[0].sys_flag & 1 and len(stored[0].body) < 1024


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_delivery_comes_back_with_reconsume_times_1(kind, cluster, tmp_path):
    topic, group = _unique("Retry", kind), _unique("cg", kind)
    produce(kind, cluster, topic, _messages(4), tmp_path)
    with Consumer(kind, cluster, tmp_path, topic, group, "c1", fail="once", propNames=["color"]) as c:
        got = c.wait(lambda g: sum(m["reconsumeTimes"] == 1 for m in g) >= 4, 60, "every message redelivered")
    first = sorted(m["body"] for m in got if m["reconsumeTimes"] == 0)
    again = [m for m in got if m["reconsumeTimes"] == 1]
    assert first == sorted(m["body"] for m in again) == [f"body-{i}" for i in range(4)]
    for m in again:  # through %RETRY%<group>, handed back under the original topic, intact
        i = int(m["body"].split("-")[1])
        assert (m["topic"], m["tags"], m["props"]["color"]) == (topic, ("TagA", "TagB")[i % 2], f"c{i}")
    assert cluster.total(f"%RETRY%{group}", 1) == 4
    assert cluster.total(f"%DLQ%{group}", 1) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_repeated_failure_ends_in_the_dead_letter_queue(kind, cluster, tmp_path):
    """ali-ons sends its maxReconsumeTimes (1 here) with each send-back; the C++ client sends
    none, so the broker's maxReconsumeTimes (16) applies. Past it, the copy goes to %DLQ%."""
    topic, group = _unique("Dlq", kind), _unique("cg", kind)
    times = 1 if kind == "ons" else 16
    produce(kind, cluster, topic, _messages(2), tmp_path)
    with Consumer(kind, cluster, tmp_path, topic, group, "c1", fail="always", maxReconsumeTimes=times) as c:
        wait_for(lambda: cluster.total(f"%DLQ%{group}", 1) == 2, 60, "both messages in the dead letter queue")
        got = c.wait(lambda g: any(m["reconsumeTimes"] == times for m in g), 30, "the last retry")
    # (the C++ client sends back a failed batch's other messages undelivered, so its sequence has gaps)
    assert max(m["reconsumeTimes"] for m in got) == times and {m["body"] for m in got} == {"body-0", "body-1"}
    dead = cluster.records(f"%DLQ%{group}", 0)
    assert sorted(bytes(r.body) for r in dead) == [b"body-0", b"body-1"]
    assert {r.properties["RETRY_TOPIC"] for r in dead} == {topic}
    assert all(r.reconsume_times == times + 1 for r in dead)


@pytest.mark.parametrize("kind", KINDS)
def test_a_restarted_consumer_resumes_from_its_committed_offsets(kind, cluster, tmp_path):
    topic, group = _unique("Resume", kind), _unique("cg", kind)
    produce(kind, cluster, topic, _messages(8), tmp_path)
    with Consumer(kind, cluster, tmp_path, topic, group, "c1") as c:
        c.wait(lambda g: len(g) >= 8, 60, "the first 8")
    later = [{"tags": "TagA", "body": f"later-{i}"} for i in range(8)]
    produce(kind, cluster, topic, later, tmp_path)
    with Consumer(kind, cluster, tmp_path, topic, group, "c2") as c:
        got = c.wait(lambda g: len(g) >= 8, 60, "the next 8")
    # offsets were committed on shutdown: the second consumer sees only what came after
    assert sorted(m["body"] for m in got) == sorted(f"later-{i}" for i in range(8)), got


@pytest.mark.parametrize("kind", KINDS)
def test_two_consumers_of_a_group_split_the_queues(kind, cluster, tmp_path):
    topic, group = _unique("Split", kind), _unique("cg", kind)
    produce(kind, cluster, topic, [{"body": "warm-up"}], tmp_path)  # creates the topic's 4 queues
    with Consumer(kind, cluster, tmp_path, topic, group, "a", rebalanceInterval=1000) as a, \
            Consumer(kind, cluster, tmp_path, topic, group, "b", rebalanceInterval=1000) as b:
        # rebalancing follows the broker's NOTIFY_CONSUMER_IDS_CHANGED on its own schedule:
        # send rounds of 8 (2 per queue) until one round is split cleanly between the two
        for round_ in range(20):
            bodies = {f"r{round_}-{i}" for i in range(8)}
            produce(kind, cluster, topic, [{"body": body} for body in sorted(bodies)], tmp_path)

            def delivered(_, bodies=bodies):
                mine = [m for m in a.got + b.got if m["body"] in bodies]
                return mine if {m["body"] for m in mine} == bodies else None
            wait_for(lambda: delivered(None), 60, f"round {round_} delivered")
            qa = {m["queueId"] for m in a.got if m["body"] in bodies}
            qb = {m["queueId"] for m in b.got if m["body"] in bodies}
            if qa and qb and not qa & qb:  # while ownership moves a queue may briefly have two pullers
                break
        else:
            raise AssertionError("the two consumers never shared the queues")
        assert len(qa | qb) == 4, (qa, qb)
        both = [m["body"] for m in a.got + b.got if m["body"] in bodies]
        assert sorted(both) == sorted(bodies)  # each once


ACL = """\
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
  - accessKey: inspector
    secretKey: "inspector-secret"
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""


@pytest.mark.parametrize("kind", KINDS)
def test_acl_right_key_accepted_wrong_secret_refused_and_nothing_stored(kind, tmp_path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    with Cluster(tmp_path / "acl", f"aclEnable=true\naclFile={acl}\n", access=("inspector", "inspector-secret")) as c:
        topic = _unique("Acl", kind)
        ok = produce(kind, c, topic, [{"tags": "TagA", "body": "signed"}], tmp_path, access=("RocketMQ", "12345678"))
        assert "error" not in ok[0], ok
        bad = produce(kind, c, topic, [{"tags": "TagA", "body": "forged"}], tmp_path, access=("RocketMQ", "wrong"))
        assert "error" in bad[0], bad
        # max offsets count what the reput dispatched: the first message of a new queue waits for
        # its consume-queue file to be made (a 6 MB fsync, slow on a busy disk), so wait until
        # everything written is dispatched before counting (a fresh-clone CI run counted 0 here)
        wait_for(c.dispatched_all, 30, "the broker to dispatch everything it wrote")
        assert c.total(topic) == 1
        bodies = [bytes(r.body) for q in range(4) for r in c.records(topic, q)]
        assert bodies == [b"signed"]
