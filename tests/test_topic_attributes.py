"""RocketMQ 5's topic attributes on UPDATE_AND_CREATE_TOPIC (`attributes`: "+message.type=FIFO",
"-message.type"): kept in topics.json as RocketMQ keeps them, answered by GET_TOPIC_CONFIG and
GET_ALL_TOPIC_CONFIG, kept across a restart; a value or a key RocketMQ would not take is refused
with its words, and the topic is left as it was."""
from __future__ import annotations

import json

import msgspec

from broker.common.topic_attributes import accepts, message_type_of
from broker.remoting import codes
from tests.helpers.ha_cluster import Broker
from tests.helpers.raw_wire import RawConn


def _create(conn: RawConn, topic: str, attributes: str | None):
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
           "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
    if attributes is not None:
        ext["attributes"] = attributes
    return conn.request(codes.UPDATE_AND_CREATE_TOPIC, ext)


def _attributes(conn: RawConn, topic: str) -> dict:
    r = conn.request(codes.GET_TOPIC_CONFIG, {"topic": topic})
    assert r.code == codes.SUCCESS, r.remark
    return msgspec.json.decode(bytes(r.body))["attributes"]


def test_message_type_is_kept_answered_and_survives_a_restart(tmp_path):
    b = Broker(tmp_path, "b", "", "ASYNC_MASTER", 0).start()
    try:
        conn = RawConn(b.port)
        assert _create(conn, "TypedFifo", "+message.type=FIFO").code == codes.SUCCESS
        assert _create(conn, "Plain", None).code == codes.SUCCESS
        assert _attributes(conn, "TypedFifo") == {"message.type": "FIFO"}
        assert _attributes(conn, "Plain") == {}
        r = conn.request(codes.GET_ALL_TOPIC_CONFIG)
        table = msgspec.json.decode(bytes(r.body))["topicConfigTable"]
        assert table["TypedFifo"]["attributes"] == {"message.type": "FIFO"}
        # refused with RocketMQ's words, the topic unchanged
        r = _create(conn, "TypedFifo", "+message.type=URGENT")
        assert r.code == codes.SYSTEM_ERROR and "value is not in set" in r.remark, (r.code, r.remark)
        r = _create(conn, "TypedFifo", "+queue.type=BatchCQ")
        assert r.code == codes.SYSTEM_ERROR and "unsupported key: queue.type" in r.remark, (r.code, r.remark)
        r = _create(conn, "TypedFifo", "message.type=FIFO")
        assert r.code == codes.SYSTEM_ERROR and "attribute format is illegal" in r.remark, (r.code, r.remark)
        assert _attributes(conn, "TypedFifo") == {"message.type": "FIFO"}
        # changed, then removed
        assert _create(conn, "TypedDelay", "+message.type=DELAY").code == codes.SUCCESS
        assert _create(conn, "TypedDelay", "+message.type=MIXED").code == codes.SUCCESS
        assert _attributes(conn, "TypedDelay") == {"message.type": "MIXED"}
        assert _create(conn, "Gone", "+message.type=NORMAL").code == codes.SUCCESS
        assert _create(conn, "Gone", "-message.type").code == codes.SUCCESS
        assert _attributes(conn, "Gone") == {}
        conn.close()
    finally:
        b.stop()
    # topics.json as RocketMQ writes it, read again at the next start
    saved = json.loads((tmp_path / "b" / "store" / "config" / "topics.json").read_text())
    assert saved["topicConfigTable"]["TypedFifo"]["attributes"] == {"message.type": "FIFO"}
    b.start()
    try:
        conn = RawConn(b.port)
        assert _attributes(conn, "TypedFifo") == {"message.type": "FIFO"}
        assert _attributes(conn, "TypedDelay") == {"message.type": "MIXED"}
    finally:
        b.stop()


def test_the_message_type_of_a_message_and_what_a_topic_accepts():
    assert message_type_of({"TRAN_MSG": "true", "DELAY": "3"}) == "TRANSACTION"
    assert message_type_of({"TIMER_DELIVER_MS": "1"}) == "DELAY"
    assert message_type_of({"__SHARDINGKEY": "g"}) == "FIFO"
    assert message_type_of({"KEYS": "k"}) == "NORMAL"
    assert accepts("FIFO", "FIFO") and not accepts("FIFO", "NORMAL") and not accepts("NORMAL", "DELAY")
    assert accepts("MIXED", "TRANSACTION") and accepts(None, "DELAY")
