"""SQL92 and unknown filter types are refused, never read as tags (RocketMQ's answers with its
default enablePropertyFilter=false), against a real name server, broker and gRPC front.

Read as a tag, an SQL text's hash matched no message: a pull answered PULL_RETRY_IMMEDIATELY with
the next offset at the queue's end, and a consumer committed past every message. Each refusal here
is followed by a TAG read from the same offset that still gets every message, and the committed
offset is shown where it was."""
from __future__ import annotations

import time

import msgspec
import pytest

from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.remoting import codes
from tests.conftest import wait_for
from tests.helpers.grpc_front import front_beside_cluster, stub_of
from tests.helpers.raw_wire import RawConn, bodies, send_message
from tests.helpers.real_clients import Consumer

pytestmark = pytest.mark.timeout(300)

SQL = "a BETWEEN 0 AND 3"
NOT_SUPPORTED = "The broker does not support consumer to filter message by {}"
FILTER_DATA_NOT_EXIST = "The broker's consumer filter data is not exist!Your expression may be wrong!"
PARSE_FAILED = "parse the consumer's subscription failed"
COMMIT, SUSPEND, SUBSCRIPTION = 1, 2, 4  # PullSysFlag
N = 5  # messages in each test's topic


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    with front_beside_cluster(tmp_path_factory.mktemp("sql92")) as f:
        yield f


@pytest.fixture
def conn(front):
    c = RawConn(front.cluster.port)
    yield c
    c.close()


def _topic(front, conn, name: str) -> str:
    """A one-queue topic holding N messages (tag "t"), in its consume queue (a pull answers once
    what was sent is dispatched; a pop does not wait)."""
    front.cluster.create_topic(name, queues=1)
    for i in range(N):
        r = send_message(conn, name, f"m{i}".encode())
        assert r.code == codes.SUCCESS, (r.code, r.remark)
    _every_message_from(conn, "Sql92Probe", name, 0, SUBSCRIPTION)
    return name


def _sub(topic: str, expression: str, expression_type: str | None) -> dict:
    """A SubscriptionData as the Java client's fastjson writes it."""
    sd = {"topic": topic, "subString": expression, "tagsSet": [], "codeSet": [], "subVersion": 1,
          "classFilterMode": False}
    if expression_type is not None:
        sd["expressionType"] = expression_type
    return sd


def _heartbeat(conn: RawConn, group: str, sub: dict):
    body = msgspec.json.encode({"clientID": "127.0.0.1@sql92", "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False, "subscriptionDataSet": [sub]}],
        "producerDataSet": []})
    return conn.request(codes.HEART_BEAT, body=body)


def _check_client_config(conn: RawConn, group: str, sub: dict):
    body = msgspec.json.encode({"clientId": "127.0.0.1@sql92", "group": group, "subscriptionData": sub})
    return conn.request(codes.CHECK_CLIENT_CONFIG, body=body)


def _pull(conn: RawConn, group: str, topic: str, offset: int, sys_flag: int, commit_offset: int = -1,
          subscription: str = "*", expression_type: str = "TAG"):
    return conn.request(codes.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "32",
        "sysFlag": str(sys_flag), "commitOffset": str(commit_offset), "suspendTimeoutMillis": "0",
        "subscription": subscription, "subVersion": "1", "expressionType": expression_type})


def _commit(conn: RawConn, group: str, topic: str, offset: int) -> None:
    r = conn.request(codes.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": "0",
                                                    "commitOffset": str(offset)})
    assert r.code == codes.SUCCESS, (r.code, r.remark)


def _committed(conn: RawConn, group: str, topic: str) -> int:
    r = conn.request(codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": "0"})
    assert r.code == codes.SUCCESS, (r.code, r.remark)
    return int(r.ext["offset"])


def _pop(conn: RawConn, group: str, topic: str, exp: str, exp_type: str):
    return conn.request(codes.POP_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": "32", "invisibleTime": "60000",
        "pollTime": "0", "bornTime": str(int(time.time() * 1000)), "initMode": "0", "expType": exp_type,
        "exp": exp, "order": "false"})


def _refused(r, code: int, remark: str) -> None:
    assert (r.code, r.remark) == (code, remark), (r.code, r.remark, r.ext)
    assert "nextBeginOffset" not in (r.ext or {}), r.ext  # no offset for the consumer to move to


def _every_message_from(conn, group, topic, offset: int, sys_flag: int = 0, **kw) -> None:
    r = _pull(conn, group, topic, offset, sys_flag, **kw)
    assert r.code == codes.SUCCESS, (r.code, r.remark)
    assert bodies(r) == [f"m{i}".encode() for i in range(offset, N)]
    assert int(r.ext["nextBeginOffset"]) == N


def test_check_client_config_refuses_sql92_and_unknown_types_and_passes_tags(front, conn):
    group, topic = "Sql92CheckG", "Sql92Check"
    r = _check_client_config(conn, group, _sub(topic, SQL, "SQL92"))
    assert (r.code, r.remark) == (codes.SYSTEM_ERROR, NOT_SUPPORTED.format("SQL92"))
    r = _check_client_config(conn, group, _sub(topic, "x", "FOO"))
    assert (r.code, r.remark) == (codes.SYSTEM_ERROR, NOT_SUPPORTED.format("FOO"))
    for sub in (_sub(topic, "a || b", "TAG"), _sub(topic, "*", None), _sub(topic, "*", "")):
        r = _check_client_config(conn, group, sub)
        assert (r.code, r.remark) == (codes.SUCCESS, None), sub
    assert conn.request(codes.CHECK_CLIENT_CONFIG).code == codes.SUCCESS  # no body: nothing to check
    r = _check_client_config(conn, group, [1])
    assert r.code == codes.SYSTEM_ERROR and "subscriptionData" in r.remark


def test_a_pull_by_the_heartbeats_sql92_subscription_is_refused_and_moves_no_offset(front, conn):
    """The Java push consumer's way: the subscription registered by heartbeat, pulls without it
    (postSubscriptionWhenPull=false) and with the commit offset flag."""
    group, topic = "Sql92HbG", _topic(front, conn, "Sql92Hb")
    _commit(conn, group, topic, 1)
    r = _heartbeat(conn, group, _sub(topic, SQL, "SQL92"))
    assert r.code == codes.SUCCESS, r.remark  # RocketMQ takes it; the pull is refused
    for _ in range(2):  # again and again: each answer the same, nothing moved
        r = _pull(conn, group, topic, 1, COMMIT | SUSPEND, commit_offset=3)
        _refused(r, codes.SYSTEM_ERROR, NOT_SUPPORTED.format("SQL92"))
    assert _committed(conn, group, topic) == 1
    # a type with no filter at all: RocketMQ holds no filter data for it
    assert _heartbeat(conn, group, _sub(topic, SQL, "FOO")).code == codes.SUCCESS
    _refused(_pull(conn, group, topic, 1, COMMIT | SUSPEND, commit_offset=3), codes.FILTER_DATA_NOT_EXIST,
             FILTER_DATA_NOT_EXIST)
    # SQL92 with no expression: none either
    assert _heartbeat(conn, group, _sub(topic, "", "SQL92")).code == codes.SUCCESS
    _refused(_pull(conn, group, topic, 1, COMMIT), codes.FILTER_DATA_NOT_EXIST, FILTER_DATA_NOT_EXIST)
    assert _committed(conn, group, topic) == 1
    # the same consumer subscribing by tag: every message from where it was
    assert _heartbeat(conn, group, _sub(topic, "t", "TAG")).code == codes.SUCCESS
    _every_message_from(conn, group, topic, 1)
    assert _heartbeat(conn, group, _sub(topic, "t", None)).code == codes.SUCCESS  # no type: TAG
    _every_message_from(conn, group, topic, 1)


def test_a_pull_carrying_an_sql92_or_unknown_subscription_is_refused_and_moves_no_offset(front, conn):
    """The subscription in the pull header (hasSubscriptionFlag, expressionType): the lite pull
    consumer's way and postSubscriptionWhenPull's."""
    group, topic = "Sql92HdrG", _topic(front, conn, "Sql92Hdr")
    _commit(conn, group, topic, 2)
    flags = COMMIT | SUBSCRIPTION
    _refused(_pull(conn, group, topic, 2, flags, 4, SQL, "SQL92"), codes.SYSTEM_ERROR, NOT_SUPPORTED.format("SQL92"))
    _refused(_pull(conn, group, topic, 2, flags, 4, "t", "FOO"), codes.SYSTEM_ERROR, NOT_SUPPORTED.format("FOO"))
    _refused(_pull(conn, group, topic, 2, flags, 4, "t", "tag"), codes.SYSTEM_ERROR, NOT_SUPPORTED.format("tag"))
    # a non-tag type with no expression fails to parse (FilterAPI.build)
    _refused(_pull(conn, group, topic, 2, flags, 4, "", "SQL92"), codes.SUBSCRIPTION_PARSE_FAILED, PARSE_FAILED)
    assert _committed(conn, group, topic) == 2
    _every_message_from(conn, group, topic, 0, SUBSCRIPTION, subscription="t", expression_type="TAG")
    _every_message_from(conn, group, topic, 2, SUBSCRIPTION, subscription="t || u", expression_type="")
    # and a tag that is not there still filters (the refusal is for types, not for tags)
    r = _pull(conn, group, topic, 0, SUBSCRIPTION, subscription="other", expression_type="TAG")
    assert r.code != codes.SUCCESS and bodies(r) == []


def test_ali_ons_subscribing_by_sql92_is_refused_and_commits_nothing_past_the_messages(front, conn, tmp_path):
    """A real 4.x client (ali-ons) subscribed by SQL92: its pulls are refused with RocketMQ's
    remark and it commits nothing; the same group by tag then consumes every message."""
    group, topic = "Sql92OnsG", _topic(front, conn, "Sql92Ons")
    sql = Consumer("ons", front.cluster, tmp_path, topic, group, "sql92-ons",
                   expression={"expressionType": "SQL92", "subString": SQL})
    try:
        refused = f"occurred error: {NOT_SUPPORTED.format('SQL92')}"  # what ali-ons reports of a pull
        wait_for(lambda: refused in sql.child.stderr_path.read_text(errors="replace"), 60, "a refused pull")
    finally:
        sql.close()  # commits what it holds
    assert sql.got == []
    assert _committed(conn, group, topic) == 0
    with Consumer("ons", front.cluster, tmp_path, topic, group, "tag-ons", expression="t") as tag:
        got = tag.wait(lambda g: len(g) >= N, 60, "every message")
    assert sorted(m["body"] for m in got) == [f"m{i}" for i in range(N)]


def test_a_pop_by_sql92_or_an_unknown_type_is_refused_and_takes_nothing(front, conn):
    group, topic = "Sql92PopG", _topic(front, conn, "Sql92Pop")
    _refused(_pop(conn, group, topic, SQL, "SQL92"), codes.SYSTEM_ERROR, NOT_SUPPORTED.format("SQL92"))
    _refused(_pop(conn, group, topic, "t", "FOO"), codes.SUBSCRIPTION_PARSE_FAILED, PARSE_FAILED)
    _refused(_pop(conn, group, topic, "t", "tag"), codes.SUBSCRIPTION_PARSE_FAILED, PARSE_FAILED)
    r = _pop(conn, group, topic, "t", "TAG")  # nothing was taken: every message is there to pop
    assert r.code == codes.SUCCESS, (r.code, r.remark)
    assert sorted(bodies(r)) == [f"m{i}".encode() for i in range(N)]
    r = _pop(conn, group + "Empty", topic, "t", "")  # an empty type is TAG (docs/compat.md)
    assert r.code == codes.SUCCESS, (r.code, r.remark)
    assert sorted(bodies(r)) == [f"m{i}".encode() for i in range(N)]


MD = (("x-mq-client-id", "sql92-client"),)


def _receive(stub, topic: str, group: str, expr: pb.FilterExpression) -> list:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=32,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), broker=pb.Broker(name="broker-a")),
        filter_expression=expr)
    req.invisible_duration.FromSeconds(60)
    req.long_polling_timeout.FromSeconds(1)
    return list(stub.ReceiveMessage(req, metadata=MD, timeout=60))


def test_the_grpc_front_refuses_an_sql_filter_with_the_brokers_words(front, conn):
    group, topic = "Sql92GrpcG", _topic(front, conn, "Sql92Grpc")
    with stub_of(front) as stub:
        [r] = _receive(stub, topic, group, pb.FilterExpression(type=pb.SQL, expression=SQL))
        # the Java proxy relays a broker's refusal (MQBrokerException) so: INTERNAL_SERVER_ERROR, its remark
        assert (r.status.code, r.status.message) == (pb.Code.INTERNAL_SERVER_ERROR, NOT_SUPPORTED.format("SQL92"))
        [r] = _receive(stub, topic, group, pb.FilterExpression(type=pb.SQL, expression=""))
        assert (r.status.code, r.status.message) == (pb.Code.ILLEGAL_FILTER_EXPRESSION, "Expression can't be null! SQL92")
        # nothing was taken: a tag receive gets every message (the group starts at the queue's start:
        # its first pop finds the messages there, ConsumeInitMode.MAX reads a queue still holding its first)
        got = []
        for expr in (pb.FilterExpression(type=pb.TAG, expression="t"), pb.FilterExpression(type=pb.TAG)):
            replies = _receive(stub, topic, group, expr)
            got += [x.message.body for x in replies if x.WhichOneof("content") == "message"]
        assert sorted(got) == [f"m{i}".encode() for i in range(N)]
