"""SQL92 property filtering (enablePropertyFilter=true), measured against Apache RocketMQ 5.5.0's own
broker: the same ten messages in both, every expression pulled from both, the bodies compared; the
compile checks compared through CHECK_CLIENT_CONFIG; the heartbeat-registered subscription and
POP_MESSAGE with expType SQL92 compared too; and the gRPC front's FilterExpression type SQL. The
compiler and the evaluator kernel alone: tests/test_sql92_kernel_vs_twin.py."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import msgspec
import pytest

from broker.proxy.protocol import definition_pb2 as pb
from broker.remoting import codes
from broker.server.broker_config import load_broker_config
from tests.conftest import wait_for
from tests.helpers import java_broker
from tests.helpers.grpc_front import front_beside_cluster, stub_of
from tests.helpers.ha_cluster import Broker, NameServer
from tests.helpers.raw_wire import RawConn, bodies

pytestmark = pytest.mark.timeout(300)

TOPIC = "SqlT"
PROPS = [{"a": "1"}, {"a": "10"}, {"a": "2.5"}, {"a": "x"}, {}, {"a": "-3", "b": "true"},
         {"a": "abc", "b": "false"}, {"a": "1e2"}, {"a": " 7"}, {"a": "0x10"}]
ALL = [f"m{i}" for i in range(len(PROPS))]
WITH_A = [m for m, p in zip(ALL, PROPS) if "a" in p]

# measured on RocketMQ 5.5.0 (enablePropertyFilter=true): the bodies a pull returns
TABLE = {
    "a > 5": ["m1"], "a BETWEEN 0 AND 3": ["m0"], "a = 10": ["m1"], "a = '10'": ["m1"], "a IS NULL": ["m4"],
    "a IS NOT NULL": WITH_A, "a IN ('x','abc')": ["m3", "m6"], "b = TRUE": ["m5"], "b = 'true'": ["m5"],
    "NOT (a > 5)": ["m0", "m5"], "a <> 'x'": [m for m in WITH_A if m != "m3"], "a > 5.0": ["m1", "m7", "m8"],
    "a >= 100": [], "a = 1": ["m0"], "a": [], "TAGS = 't'": ALL, "a CONTAINS 'b'": ["m6"],
    "a STARTSWITH 'a'": ["m6"], "a ENDSWITH 'c'": ["m6"], "a > 0 OR a = 'x'": ["m0", "m1"], "a < 2": ["m0", "m5"],
    "a LIKE 'a%'": [],
}
# expressions RocketMQ does not compile: its pull then filters nothing; ours refuses them (docs/compat.md)
NOT_COMPILING = ["a > '5'", "a >"]
# more, compared with the Java broker only
MORE = ["a NOT BETWEEN 0 AND 3", "a NOT IN ('x')", "a NOT CONTAINS 'b'", "a NOT STARTSWITH 'a'",
        "a NOT ENDSWITH 'c'", "b <> 'true'", "b = FALSE", "a = 2.5", "a > -4 AND a < 0", "a BETWEEN -5 AND -1",
        "TRUE", "FALSE", "NULL", "c IS NULL", "'x' <> c", "c <> 'x'", "NOT c = 'x'", "a = 1e2", "a >= 2147483648",
        "a = 1 OR b = 'true'", "a IS NOT NULL AND NOT (a = 'x')", "(a > 5) = FALSE", "a < b", "a = b",
        "NOT (a IS NULL OR a = 'x')", "a > 1 AND b IS NULL", "-a < 0", "a > - -5", "a = 10L",
        "a = 1 /* c */ OR a = 'x'", "a = 1 -- c\n OR a = 'x'", "tags = 't'", "A > 5", "a IN ('1','10') AND a > 5",
        "a in ('x') or a = 1", "b = 'TRUE'", "a >= 10 AND a <= 10", "a > 0 AND TRUE", "NOT NOT (a = 1)"]
# for CHECK_CLIENT_CONFIG: compiles or not, compared with the Java broker
COMPILE = ["a > '5'", "a >", "a = NULL", "NULL = a", "a BETWEEN 3 AND 1", "a BETWEEN 1 AND 1", "a BETWEEN -3 AND -5",
           "TRUE = 1", "1 = TRUE", "TRUE = TRUE", "1 IN ('a')", "a > 0.0", "a > 0", "a > 1e400",
           "a > 9223372036854775807",
           "a > 9223372036854775808", "NOT a > 5", "NOT a = 5", "'x'", "5", "-a", "a = 1 #", "a = 1 LIKE #",
           "a = 'unterminated", "a > TRUE", "a > NULL", "(a > 1) > 2", "a BETWEEN 'a' AND 'b'", "a IN (1)",
           "a IS", "a IS NOT", "a NOT x", "a NOT IN ('x')", "a CONTAINS b", "(a", "a)", "", "  ", "a = .5",
           "a = 5.", "a = 007", "a.b = 1", "a = 1 AND", "a ==1", "a != 1", "a = 1 AND b", "TRUE AND 5",
           "a BETWEEN 1 AND 'x'", "a BETWEEN 'x' AND 1", "a > -0.0", "a IN ('a', 'b',)"]


def _send(conn: RawConn, body: bytes, props: dict) -> None:
    ps = "".join(f"{k}\x01{v}\x02" for k, v in props.items()) + "TAGS\x01t\x02"
    r = conn.request(codes.SEND_MESSAGE_V2, {"a": "pg", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
                                             "g": str(int(time.time() * 1000)), "h": "0", "i": ps, "j": "0",
                                             "k": "false"}, body)
    assert r.code == codes.SUCCESS, (r.code, r.remark)


def _pull(conn: RawConn, expr: str, sys_flag: int = 4, group: str = "g", sub_version: int = 1):
    return conn.request(codes.PULL_MESSAGE, {
        "consumerGroup": group, "topic": TOPIC, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": str(sys_flag), "commitOffset": "-1", "suspendTimeoutMillis": "0", "subscription": expr,
        "subVersion": str(sub_version), "expressionType": "SQL92"})


def _got(r) -> list[str] | int:
    """A pull's bodies, or its code when it found none."""
    return [b.decode() for b in bodies(r)] if r.code == codes.SUCCESS else r.code


def _sub(expr: str) -> dict:
    return {"topic": TOPIC, "subString": expr, "expressionType": "SQL92", "tagsSet": [], "codeSet": [],
            "subVersion": 7, "classFilterMode": False}


def _check(conn: RawConn, expr: str):
    body = msgspec.json.encode({"clientId": "127.0.0.1@sql", "group": "g", "subscriptionData": _sub(expr)})
    return conn.request(codes.CHECK_CLIENT_CONFIG, body=body)


def _heartbeat(conn: RawConn, group: str, expr: str):
    body = msgspec.json.encode({"clientID": f"127.0.0.1@{group}", "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_ACTIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False, "subscriptionDataSet": [_sub(expr)]}],
        "producerDataSet": []})
    r = conn.request(codes.HEART_BEAT, body=body)
    assert r.code == codes.SUCCESS, (r.code, r.remark)


def _pop(conn: RawConn, group: str, expr: str):
    return conn.request(codes.POP_MESSAGE, {
        "consumerGroup": group, "topic": TOPIC, "queueId": "0", "maxMsgNums": "32", "invisibleTime": "60000",
        "pollTime": "0", "bornTime": str(int(time.time() * 1000)), "initMode": "0", "expType": "SQL92",
        "exp": expr, "order": "false"})


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    """(ours, java, our name server's address): connections to our broker and RocketMQ's, both
    enablePropertyFilter=true and holding the same messages m0..m9 (properties PROPS, tag t) in
    queue 0 of TOPIC."""
    if not java_broker.available():
        pytest.skip("RocketMQ's Java broker is not built (make build/javabroker/.copied)")
    root = tmp_path_factory.mktemp("sql92f")
    procs, conns = [], []
    pool = ThreadPoolExecutor(2)
    try:
        # the two brokers boot side by side: the JVM's start-up is most of this module's time
        jns, ns = pool.submit(java_broker.JavaNameServer, root), pool.submit(NameServer, root)
        procs += [jns.result(), ns.result()]
        # waitTimeMillsInSendQueue: on a loaded machine a send waits longer than the default 200 ms
        # for the JVM's send thread, and RocketMQ then answers "broker busy" (flow control)
        jb = java_broker.JavaBroker(root, "jb", procs[0].addr,
                                    extra="enablePropertyFilter=true\nwaitTimeMillsInSendQueue=10000\n")
        ours = Broker(root, "ours", procs[1].addr, "ASYNC_MASTER", 0, extra="enablePropertyFilter=true\n")
        procs += [jb, ours]
        started = [pool.submit(jb.start), pool.submit(ours.start)]
        for f in started:
            f.result()
        for port in (ours.port, jb.port):
            c = RawConn(port)
            conns.append(c)
            r = c.request(codes.UPDATE_AND_CREATE_TOPIC, {
                "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
                "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})
            assert r.code == codes.SUCCESS, (r.code, r.remark)
            for i, p in enumerate(PROPS):
                _send(c, f"m{i}".encode(), p)
            wait_for(lambda: _got(_pull(c, "TRUE")) == ALL, 10, "the messages in the consume queue")
        yield conns[0], conns[1], procs[1].addr
    finally:
        for c in conns:
            c.close()
        for p in reversed(procs):
            # the Java broker's store is thrown away: no clean shutdown to wait ~15 s for
            p.kill9() if isinstance(p, java_broker.JavaBroker) else p.stop()
        pool.shutdown()


def test_the_probe_table_selects_what_rocketmq_selects(brokers):
    ours, java, _ = brokers
    for expr, want in TABLE.items():
        assert _got(_pull(java, expr)) == (want or codes.PULL_RETRY_IMMEDIATELY), expr
        assert _got(_pull(ours, expr)) == (want or codes.PULL_RETRY_IMMEDIATELY), expr


def test_more_expressions_select_what_rocketmq_selects(brokers):
    ours, java, _ = brokers
    diffs = [(e, _got(_pull(ours, e)), _got(_pull(java, e))) for e in MORE]
    assert [d for d in diffs if d[1] != d[2]] == []
    assert len({str(d[1]) for d in diffs}) > 10  # the expressions do select different messages


def test_an_expression_that_does_not_compile_is_refused_where_rocketmq_filters_nothing(brokers):
    ours, java, _ = brokers
    for expr in NOT_COMPILING:
        assert _got(_pull(java, expr)) == ALL  # RocketMQ: the failed compile leaves no filter at all
        r = _pull(ours, expr)
        assert (r.code, r.remark) == (codes.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed")


def test_check_client_config_compiles_as_rocketmq_compiles(brokers):
    ours, java, _ = brokers
    answers = [(e, _check(ours, e).code, _check(java, e).code) for e in COMPILE + list(TABLE) + MORE]
    assert [a for a in answers if a[1] != a[2]] == []
    assert {a[1] for a in answers} == {codes.SUCCESS, codes.SUBSCRIPTION_PARSE_FAILED}
    r = _check(ours, "a > '5'")
    assert r.remark.startswith("Invalid MessageSelector. "), r.remark


def test_the_heartbeat_registered_subscription_filters_a_pull_without_one(brokers):
    ours, java, _ = brokers
    for conn in (ours, java):
        _heartbeat(conn, "hbGood", "a = 'x' OR b = 'true'")
        _heartbeat(conn, "hbBad", "a > '5'")
    for group, want in (("hbGood", ["m3", "m5"]), ("hbBad", codes.FILTER_DATA_NOT_EXIST)):
        for c in (ours, java):  # (RocketMQ registers a heartbeat's filter data as it answers it)
            assert _got(_pull(c, "", sys_flag=0, group=group, sub_version=7)) == want, (group, c is java)


def test_pop_filters_by_sql92_as_rocketmq_does(brokers):
    ours, java, _ = brokers
    for conn in (ours, java):
        r = _pop(conn, "popG", "a > 5 OR b = 'true'")
        assert r.code == codes.SUCCESS, (r.code, r.remark)
        assert sorted(b.decode() for b in bodies(r)) == ["m1", "m5"]
        r = _pop(conn, "popBad", "a >")
        assert (r.code, r.remark) == (codes.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed")


def test_the_grpc_front_receives_by_an_sql_filter(tmp_path):
    from tests.test_sql92_refused import _receive, _topic
    with front_beside_cluster(tmp_path, broker_conf="enablePropertyFilter=true\n") as front:
        conn = RawConn(front.cluster.port)
        try:
            topic = _topic(front, conn, "SqlGrpc")  # m0..m4, no properties but TAGS
            with stub_of(front) as stub:
                every = pb.FilterExpression(type=pb.SQL, expression="TAGS IS NOT NULL")
                replies = _receive(stub, topic, "SqlGrpcG", every)
                assert sorted(x.message.body for x in replies if x.WhichOneof("content") == "message") == \
                    [f"m{i}".encode() for i in range(5)]
                replies = _receive(stub, topic, "SqlGrpcG2", pb.FilterExpression(type=pb.SQL, expression="a > 1"))
                assert [x.message.body for x in replies if x.WhichOneof("content") == "message"] == []
                [r] = _receive(stub, topic, "SqlGrpcG3", pb.FilterExpression(type=pb.SQL, expression="a >"))
                assert (r.status.code, r.status.message) == (pb.Code.INTERNAL_SERVER_ERROR,
                                                             "parse the consumer's subscription failed")
        finally:
            conn.close()


def test_enable_property_filter_true_starts_and_false_stays_the_default():
    broker, _, unknown = load_broker_config({})
    assert broker.enablePropertyFilter is False
    broker, _, unknown = load_broker_config({"enablePropertyFilter": "true"})
    assert broker.enablePropertyFilter is True and not unknown


def test_a_java_push_consumer_subscribed_by_sql_gets_what_matches(brokers, tmp_path):
    """RocketMQ's 4.9.8 client, MessageSelector.bySql: CHECK_CLIENT_CONFIG passes, its heartbeat
    registers the expression and its pulls (which carry no subscription) are filtered by it. Last in
    the module: it sends m10, after which every earlier message has been read past."""
    from types import SimpleNamespace

    from tests.helpers.real_clients import Consumer
    ours, _, namesrv = brokers
    cluster = SimpleNamespace(namesrv=namesrv)
    want = ["m1", "m10", "m5"]
    with Consumer("java", cluster, tmp_path, TOPIC, "sqlPush", "sqlc", sql="a > 5 OR b = 'true'",
                  consumeFromWhere="CONSUME_FROM_FIRST_OFFSET") as c:
        _send(ours, b"m10", {"a": "99"})
        # its consume threads print a pull's messages in any order: wait for all three
        c.wait(lambda g: set(want) <= {m["body"] for m in g}, 90, "m1, m5 and m10")
    assert sorted(m["body"] for m in c.got) == want  # and nothing else, up to its shutdown
