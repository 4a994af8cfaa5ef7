"""Differential conformance: the same remoting requests sent to Apache RocketMQ 5.5.0's name server
and broker (master and slave) and to ours, started side by side with the same broker.conf keys,
and every answer compared (tests/helpers/differential.py: codes, remarks, extFields, JSON bodies
field by field, stored records field by field; only addresses, offset message ids, store times and
commit-log offsets are normalised). The scenario is tests/helpers/differential_scenario.py.

An answer that differs is either fixed in our broker or listed in KEPT below with the reason, and
in docs/compat.md under the heading KEPT names. A KEPT entry that no longer shows fails too, so
the table (and the document) follow the code."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from tests.helpers import differential_scenario as scenario
from tests.helpers.differential import Deployment, Step, compare, matches, run
from tests.helpers.java_broker import available



@pytest.fixture(scope="module", autouse=True)
def jars():
    """`make test` installs the Java broker (`make clients`): missing, it is a setup error to
    report, not a test to skip."""
    assert available(), "no java, or Apache RocketMQ's jars are not in build/javabroker/lib: run `make clients`"

COMPAT = Path(__file__).resolve().parents[1] / "docs" / "compat.md"
BROKER_PROPS = "Properties the Java broker adds to every message"
TX_ID = "transactionId on every send reply"


@dataclass(frozen=True)
class Kept:
    area: str
    step: str  # step name glob
    path: str  # flat path glob (tests.helpers.differential.matches)
    doc: str  # the docs/compat.md heading that explains it

    def covers(self, diff) -> bool:
        return matches(self.step, diff[0]) and matches(self.path, diff[1])


def _kept(area: str, doc: str, *pairs: tuple[str, str]) -> list[Kept]:
    return [Kept(area, step, path, doc) for step, path in pairs]


RUNTIME_KEYS_NOT_SERVED = (
    "EndTransactionQueueSize", "EndTransactionThreadPoolQueueCapacity", "ackThreadPoolQueueCapacity",
    "ackThreadPoolQueueHeadWaitTimeMills", "ackThreadPoolQueueSize", "dispatchMaxBuffer", "getFoundTps",
    "getMessageEntireTimeMax", "getMissTps", "getTotalTps", "litePullThreadPoolQueueCapacity",
    "litePullThreadPoolQueueHeadWaitTimeMills", "litePullThreadPoolQueueSize", "pullThreadPoolQueueCapacity",
    "putLatency99", "putLatency999", "putMessageDistributeTime", "queryThreadPoolQueueCapacity",
    "queryThreadPoolQueueHeadWaitTimeMills", "queryThreadPoolQueueSize", "sendThreadPoolQueueCapacity",
    "timerCongestNum", "timerDequeueTps", "timerEnqueueTps", "timerOffsetBehind", "timerReadBehind")

KEPT = [
    *[Kept(area, "*", f"msg[].props.{p}", BROKER_PROPS) for area in ("sends", "transactions")
      for p in ("MSG_REGION", "TRACE_ON")],
    *[Kept(area, "*", "ext.transactionId", TX_ID) for area in ("sends", "offsets", "errors")],
    *_kept("sends", "A batch's header properties", ("*", "msg[].props.BATCH_PROP")),
    *_kept("offsets", "UPDATE_CONSUMER_OFFSET for a group the broker does not know",
           ("UPDATE_CONSUMER_OFFSET", "code"), ("UPDATE_CONSUMER_OFFSET", "remark"),
           ("QUERY_CONSUMER_OFFSET stored", "ext.offset")),
    *_kept("clients", "Heartbeat v2", ("HEART_BEAT*", "ext.IS_SUB_CHANGE"),
           ("HEART_BEAT*", "ext.IS_SUPPORT_HEART_BEAT_V2")),
    *_kept("transactions", "A second commit of the same half message",
           ("END_TRANSACTION second commit", "code"), ("END_TRANSACTION second commit", "remark"),
           ("GET_MAX_OFFSET after the commits", "ext.offset"),
           ("pull after commit", "ext.maxOffset"), ("pull after commit", "ext.nextBeginOffset"),
           ("pull after commit", "msg[1].*")),
    *_kept("transactions", "A committed message's properties", ("pull after commit", "msg[].props.TRAN_MSG"),
           ("pull after commit", "msg[].props.__transactionId__")),
    *_kept("admin", "System topics and groups", ("GET_ALL_TOPIC_CONFIG system topics", "body.*"),
           ("GET_ALL_SUBSCRIPTIONGROUP_CONFIG system groups", "body*")),
    *_kept("admin", "GET_SUBSCRIPTIONGROUP_CONFIG of a group the broker does not have",
           ("GET_SUBSCRIPTIONGROUP_CONFIG deleted", "*")),
    *_kept("admin", "Runtime info keys", *(("GET_BROKER_RUNTIME_INFO", f"body.{k}") for k in RUNTIME_KEYS_NOT_SERVED)),
    *_kept("errors", "A send to a read-only topic", ("send to a read-only topic", "*")),
    *_kept("errors", "A send to a slave", ("send to the slave", "code"), ("send to the slave", "remark")),
    *_kept("namesrv", "Routes", ("GET_ROUTEINFO_BY_TOPIC*", "body.queueDatas[].topicSynFlag"),
           ("GET_ROUTEINFO_BY_TOPIC unknown", "*")),
]

AREAS = {
    "sends": lambda: scenario.sends("DiffSends"),
    "offsets": lambda: scenario.offsets("DiffOffsets"),
    "clients": lambda: scenario.clients("DiffClients"),
    "transactions": lambda: scenario.transactions("DiffTx"),
    "admin": lambda: scenario.admin("DiffAdmin"),
    "errors": lambda: scenario.errors("DiffErrors", "DiffReadOnly"),
    "namesrv": lambda: scenario.namesrv("DiffRoutes"),
}


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    with Deployment(tmp_path_factory.mktemp("differential")) as d:
        java, ours = d.sides()
        try:
            yield java, ours
        finally:
            java.close()
            ours.close()


def _show(diffs) -> str:
    return "\n".join(f"  {step}: {path}: java={java!r} ours={ours!r}" for step, path, java, ours in diffs)


@pytest.mark.parametrize("area", list(AREAS))
def test_every_answer_is_rocketmqs_or_a_kept_difference(sides, area):
    diffs = run(*sides, AREAS[area]())
    kept = [k for k in KEPT if k.area == area]
    unexplained = [d for d in diffs if not any(k.covers(d) for k in kept)]
    assert not unexplained, f"answers that differ from Apache RocketMQ's:\n{_show(unexplained)}"
    gone = [k for k in kept if not any(k.covers(d) for d in diffs)]
    assert not gone, f"kept differences no longer seen (drop them here and in docs/compat.md): {gone}"


def test_every_kept_difference_is_explained_in_compat_md():
    text = COMPAT.read_text()
    missing = sorted({k.doc for k in KEPT if f"### {k.doc}" not in text})
    assert not missing, f"docs/compat.md has no section for: {missing}"


def _answer(code=codes.SUCCESS, ext=None, body=b"", remark=None) -> RemotingCommand:
    return RemotingCommand(code, ext or {}, body, remark, flag=1)


def test_the_comparison_sees_what_differs_and_normalises_only_what_must():
    """The harness itself: a code, a remark, an extField, a JSON field and a missing key are
    differences; addresses, offset message ids and the volatile paths a step names are not."""
    step = Step("s", codes.GET_ALL_TOPIC_CONFIG, volatile=("body.t",))
    java = _answer(ext={"a": "1", "addr": "127.0.0.1:10911", "id": "7F0000010000A3E10000000000000000"},
                   body=b'{"x":{"y":1,"z":[1,2]},"t":5,"k":{0:"127.0.0.1:1"}}', remark="why")
    same = _answer(ext={"a": "1", "addr": "127.0.0.1:40000", "id": "7F00000100009C400000000000000C00"},
                   body=b'{"x":{"y":1,"z":[1,2]},"t":6,"k":{"0":"127.0.0.1:2"}}', remark="why")
    assert compare(step, java, same) == []
    other = _answer(codes.SYSTEM_ERROR, ext={"a": "2", "addr": "127.0.0.1:1"},
                    body=b'{"x":{"y":2,"z":[1]},"t":6,"k":{"0":"127.0.0.1:2"}}', remark="other")
    assert [(path, j, o) for _, path, j, o in compare(step, java, other)] == [
        ("body.x.y", 1, 2), ("body.x.z[1]", 2, "<absent>"), ("code", 0, 1),
        ("ext.a", "1", "2"), ("ext.id", "<msgid>", "<absent>"), ("remark", "why", "other")]
