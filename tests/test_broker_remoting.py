"""The broker over real sockets, request by request, as the Java and C++ clients speak to it:
mixed JSON types in, string extFields out, long polling answered by a send, consumer groups,
offsets, send-back into retry and dead-letter topics, and bad input closing only its connection."""
from __future__ import annotations

import asyncio
import time

import msgspec
import pytest

from broker.remoting import codes
from broker.server.broker_config import BrokerConfig
from broker.server.broker_controller import BrokerController
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.store.config import SYNC_FLUSH, MessageStoreConfig
from broker.store.message import decode_message
from tests.conftest import free_port
from tests.twins.decoder import decode_record


def _store_config(tmp_path, **kw) -> MessageStoreConfig:
    kw = {"mappedFileSizeCommitLog": 4 << 20, **kw}
    return MessageStoreConfig(storePathRootDir=str(tmp_path / "store"), listenPort=free_port(), brokerIP1="127.0.0.1",
                              **kw)


class Broker:
    """A BrokerController on an ephemeral port and one client connection to it."""

    def __init__(self, tmp_path, broker_kw=None, **store_kw):
        self.controller = BrokerController(BrokerConfig(**(broker_kw or {})), _store_config(tmp_path, **store_kw),
                                           host="127.0.0.1")

    async def __aenter__(self):
        await self.controller.start()
        self.port = self.controller.server.port
        self.conn = await connect("127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc):
        self.conn.close()
        await self.controller.close()

    async def call(self, code, ext=None, body=b"", timeout=10.0) -> RemotingCommand:
        return await self.conn.request(RemotingCommand.request(code, ext or {}, body), timeout)

    async def send_v2(self, topic, body, queue_id=0, tags="TagA", keys="k1", extra_props=""):
        props = f"TAGS\x01{tags}\x02KEYS\x01{keys}\x02{extra_props}"
        # ali-ons' typing: numbers and booleans as JSON numbers/booleans
        return await self.call(codes.SEND_MESSAGE_V2, {
            "a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": int(time.time() * 1000),
            "h": 0, "i": props, "j": 0, "k": False}, body)

    async def pull(self, topic, queue_id, offset, sys_flag=2 | 4, subscription="*", suspend_ms=1000, **kw):
        ext = {"consumerGroup": "g", "topic": topic, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": 32,
               "sysFlag": sys_flag, "commitOffset": 0, "suspendTimeoutMillis": suspend_ms,
               "subscription": subscription, "subVersion": 0}
        ext.update(kw)
        return await self.call(codes.PULL_MESSAGE, ext, timeout=30)


def _records(body: bytes) -> list:
    out, pos = [], 0
    while pos < len(body):
        m = decode_message(body, pos)
        out.append(m)
        pos += m.size
    return out


def _heartbeat(client_id: str, group: str, topic: str, sub: str = "*") -> bytes:
    return msgspec.json.encode({"clientID": client_id, "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "subscriptionDataSet": [{"topic": topic, "subString": sub, "tagsSet": [], "codeSet": [], "subVersion": 0}]}],
        "producerDataSet": [{"groupName": "pg"}]})


def test_send_v2_and_v1_answer_string_ext_fields_and_store_the_record_exactly(tmp_path):
    async def go():
        async with Broker(tmp_path) as b:
            r = await b.send_v2("Orders", b"hello", queue_id=2)
            assert r.code == codes.SUCCESS and r.is_response
            assert r.ext["queueId"] == "2" and r.ext["queueOffset"] == "0"
            assert len(r.ext["msgId"]) == 32 and r.ext["msgId"].startswith("7F000001")
            # the C++ client's v1 header: full names, 64-bit values as strings
            r1 = await b.call(codes.SEND_MESSAGE, {
                "producerGroup": "pg", "topic": "Orders", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
                "queueId": 2, "sysFlag": 0, "bornTimestamp": "1700000000000", "flag": 7,
                "properties": "TAGS\x01TagB\x02UNIQ_KEY\x01ABC\x02", "reconsumeTimes": 0, "unitMode": False,
                "batch": False}, b"world")
            assert (r1.code, r1.ext["queueOffset"]) == (codes.SUCCESS, "1")
            header = msgspec.json.decode(r1.header_bytes())
            assert all(isinstance(v, str) for v in header["extFields"].values())
            phys = int(r1.ext["msgId"][16:], 16)
            view = await b.call(codes.VIEW_MESSAGE_BY_ID, {"offset": phys})
            rec = decode_record(bytes(view.body), 0)  # the independent decoder reads what was stored
            assert rec["body"] == b"world" and rec["topic"] == "Orders" and rec["flag"] == 7
            assert rec["born_timestamp"] == 1700000000000 and rec["queue_id"] == 2
            assert rec["properties"]["TAGS"] == "TagB" and rec["properties"]["UNIQ_KEY"] == "ABC"

    asyncio.run(go())


def test_pull_found_not_found_and_offset_moved(tmp_path):
    async def go():
        async with Broker(tmp_path) as b:
            for i in range(5):
                assert (await b.send_v2("P", b"m%d" % i, queue_id=1)).code == codes.SUCCESS
            await b.controller.store.wait_dispatched(b.controller.store.offsets()["wrote"], 10)
            r = await b.pull("P", 1, 0, sys_flag=0)
            assert r.code == codes.SUCCESS
            assert [m.body for m in _records(r.body)] == [b"m%d" % i for i in range(5)]
            assert (r.ext["nextBeginOffset"], r.ext["minOffset"], r.ext["maxOffset"]) == ("5", "0", "5")
            r = await b.pull("P", 1, 5, sys_flag=0)  # caught up, no suspend flag: answered at once
            assert r.code == codes.PULL_NOT_FOUND and r.ext["nextBeginOffset"] == "5" and not r.body
            r = await b.pull("P", 1, 9, sys_flag=0)
            assert r.code == codes.PULL_OFFSET_MOVED and r.ext["nextBeginOffset"] == "5"
            r = await b.pull("Nope", 0, 0)
            assert r.code == codes.TOPIC_NOT_EXIST
            r = await b.pull("P", 0, 3, sys_flag=0)  # an empty queue asked for a non-zero offset
            assert r.code == codes.PULL_OFFSET_MOVED

    asyncio.run(go())


def test_long_poll_is_answered_by_the_send_not_by_its_timeout(tmp_path):
    async def go():
        async with Broker(tmp_path) as b:
            await b.send_v2("LP", b"first")
            t0 = time.monotonic()
            held = asyncio.ensure_future(b.pull("LP", 0, 1, suspend_ms=10_000))
            await asyncio.wait_for(_until(lambda: b.controller.holds.held() == 1), 5)
            assert not held.done()
            await b.send_v2("LP", b"second")
            r = await asyncio.wait_for(held, 5)
            assert r.code == codes.SUCCESS and [m.body for m in _records(r.body)] == [b"second"]
            assert time.monotonic() - t0 < 5  # far from the 10 s suspend time
            # nothing arrives: PULL_NOT_FOUND once the suspend time is up
            t0 = time.monotonic()
            r = await b.pull("LP", 0, 2, suspend_ms=300)
            assert r.code == codes.PULL_NOT_FOUND and time.monotonic() - t0 >= 0.29

    asyncio.run(go())


async def _until(pred):
    while not pred():
        await asyncio.sleep(0.005)


def test_tag_filter_on_the_server(tmp_path):
    async def go():
        async with Broker(tmp_path) as b:
            for i in range(6):
                await b.send_v2("Tags", b"%d" % i, tags="A" if i % 2 else "B")
            await b.controller.store.wait_dispatched(b.controller.store.offsets()["wrote"], 10)
            r = await b.pull("Tags", 0, 0, sys_flag=4, subscription="A")
            assert [m.body for m in _records(r.body)] == [b"1", b"3", b"5"]
            r = await b.pull("Tags", 0, 0, sys_flag=4, subscription="A || B")
            assert len(_records(r.body)) == 6
            r = await b.pull("Tags", 0, 0, sys_flag=4, subscription="C")
            assert r.code == codes.PULL_RETRY_IMMEDIATELY and r.ext["nextBeginOffset"] == "6"

    asyncio.run(go())


def test_consumer_group_membership_follows_heartbeats_and_connections(tmp_path):
    async def go():
        async with Broker(tmp_path) as b:
            r = await b.call(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
            assert r.code == codes.SYSTEM_ERROR  # nobody yet, as RocketMQ answers
            assert (await b.call(codes.HEART_BEAT, body=_heartbeat("c1", "G", "T"))).code == codes.SUCCESS
            notified = asyncio.get_running_loop().create_future()

            def on_request(cmd, conn):
                if cmd.code == codes.NOTIFY_CONSUMER_IDS_CHANGED and not notified.done():
                    notified.set_result(cmd.ext["consumerGroup"])
            other = await connect("127.0.0.1", b.port, on_request)
            hb = RemotingCommand.request(codes.HEART_BEAT, {}, _heartbeat("c2", "G", "T") + b"\n")  # C++'s newline
            assert (await other.request(hb)).code == codes.SUCCESS
            r = await b.call(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
            assert msgspec.json.decode(r.body) == {"consumerIdList": ["c1", "c2"]}
            assert "%RETRY%G" in b.controller.topics.table.topics  # made on heartbeat, one queue
            assert b.controller.topics.get("%RETRY%G").writeQueueNums == 1
            # c1 unregisters: c2 is told to rebalance
            await b.call(codes.UNREGISTER_CLIENT, {"clientID": "c1", "consumerGroup": "G", "producerGroup": "pg"})
            assert await asyncio.wait_for(notified, 5) == "G"
            r = await b.call(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
            assert msgspec.json.decode(r.body) == {"consumerIdList": ["c2"]}
            other.close()  # c2's connection goes: so does c2
            await asyncio.wait_for(_until(lambda: not b.controller.consumers.client_ids("G")), 5)

    asyncio.run(go())


def test_consumer_offsets_query_update_and_first_start(tmp_path):
    async def go():
        async with Broker(tmp_path) as b:
            await b.send_v2("Off", b"x")
            q = {"consumerGroup": "G", "topic": "Off", "queueId": 0}
            r = await b.call(codes.QUERY_CONSUMER_OFFSET, q)
            assert (r.code, r.ext["offset"]) == (codes.SUCCESS, "0")  # never committed, message 0 held
            assert (await b.call(codes.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": 1})).code == codes.SUCCESS
            assert (await b.call(codes.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": -1})).code == codes.SUCCESS
            r = await b.call(codes.QUERY_CONSUMER_OFFSET, q)
            assert r.ext["offset"] == "1"  # the -1 was ignored
            await b.controller.store.wait_dispatched(b.controller.store.offsets()["wrote"], 10)
            r = await b.call(codes.GET_MAX_OFFSET, {"topic": "Off", "queueId": 0})
            assert r.ext["offset"] == "1"
            # a pull carrying a commit offset commits it too
            await b.pull("Off", 0, 1, sys_flag=1 | 4, commitOffset=1, consumerGroup="G2")
            r = await b.call(codes.QUERY_CONSUMER_OFFSET, {**q, "consumerGroup": "G2"})
            assert r.ext["offset"] == "1"
        async with Broker(tmp_path) as b:  # persisted across a restart
            r = await b.call(codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "Off", "queueId": 0})
            assert r.ext["offset"] == "1"

    asyncio.run(go())


def test_send_back_goes_to_retry_after_its_delay_level_then_to_the_dead_letter_queue(tmp_path):
    levels = "50ms 100ms 200ms 300ms 400ms"  # level 3 + reconsumeTimes: 200 ms, then 300 ms

    async def go():
        async with Broker(tmp_path, broker_kw={"maxReconsumeTimes": 2, "messageDelayLevel": levels}) as b:
            r = await b.send_v2("Work", b"job", tags="T", keys="K")
            phys = int(r.ext["msgId"][16:], 16)
            seen = []
            for round_ in range(3):
                t0 = time.monotonic()
                r = await b.call(codes.CONSUMER_SEND_MSG_BACK, {"group": "G", "offset": phys, "delayLevel": 0})
                assert r.code == codes.SUCCESS
                topic = "%RETRY%G" if round_ < 2 else "%DLQ%G"
                # a long poll on the retry queue is answered when the schedule service delivers
                got = await b.pull(topic, 0, len([s for s in seen if s.topic == topic]), suspend_ms=5000)
                elapsed = time.monotonic() - t0
                m = _records(got.body)[0]
                if round_ < 2:
                    assert elapsed >= (0.2, 0.3)[round_] - 0.01  # not before its delay level
                seen.append(m)
                assert m.body == b"job" and m.topic == topic
                assert m.properties["RETRY_TOPIC"] == "Work" and m.properties["TAGS"] == "T"
                if round_ < 2:  # delivered by the schedule: the level and where it was bound stay, as RocketMQ's
                    assert (m.properties["DELAY"], m.properties["REAL_TOPIC"]) == (str(3 + round_), "%RETRY%G")
                else:  # a dead letter is not delayed again
                    assert "DELAY" not in m.properties
                assert m.properties["ORIGIN_MESSAGE_ID"] == seen[0].properties["ORIGIN_MESSAGE_ID"]
                assert m.reconsume_times == round_ + 1
                phys = m.physical_offset  # the consumer fails the redelivered copy again
            assert [m.topic for m in seen] == ["%RETRY%G", "%RETRY%G", "%DLQ%G"]

    asyncio.run(go())


def test_sync_flush_send_answers_after_the_flush(tmp_path):
    async def go():
        async with Broker(tmp_path, flushDiskType=SYNC_FLUSH) as b:
            r = await b.send_v2("Durable", b"d" * 100)
            assert r.code == codes.SUCCESS
            phys = int(r.ext["msgId"][16:], 16)
            assert b.controller.store.offsets()["flushed"] > phys

    asyncio.run(go())


def test_errors_unknown_codes_oneway_and_bad_frames(tmp_path):
    async def go():
        async with Broker(tmp_path, broker_kw={"autoCreateTopicEnable": False}) as b:
            r = await b.call(4242)
            assert r.code == codes.REQUEST_CODE_NOT_SUPPORTED and "4242" in r.remark
            r = await b.send_v2("NotThere", b"x")
            assert r.code == codes.TOPIC_NOT_EXIST
            r = await b.call(codes.PULL_MESSAGE, {"topic": "x"})  # missing fields
            assert r.code == codes.SYSTEM_ERROR and "consumerGroup" in r.remark
            # oneway: no reply at all; the next request's reply is the next frame
            b.conn.oneway(RemotingCommand.request(codes.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": "G", "topic": "T", "queueId": 0, "commitOffset": 3}, oneway=True))
            r = await b.call(codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": 0})
            assert r.ext["offset"] == "3"
            # garbage closes that connection only
            bad = await connect("127.0.0.1", b.port)
            bad.transport.write(b"\x00\x00\x00\x10\x00\x00\x00\x08not json at all!")
            await asyncio.wait_for(bad.closed.wait(), 5)
            huge = await connect("127.0.0.1", b.port)
            huge.transport.write((64 << 20).to_bytes(4, "big") + bytes(8))
            await asyncio.wait_for(huge.closed.wait(), 5)
            r = await b.call(codes.GET_MAX_OFFSET, {"topic": "T", "queueId": 0})
            assert r.code == codes.SUCCESS

    asyncio.run(go())


@pytest.mark.parametrize("size", [1 << 20, 4 << 20])
def test_large_bodies_round_trip_and_over_the_limit_is_refused(tmp_path, size):
    async def go():
        async with Broker(tmp_path, maxMessageSize=4 << 20 if size < 4 << 20 else 1 << 20) as b:
            body = bytes(range(256)) * (size // 256)
            r = await b.send_v2("Big", body)
            if size >= 4 << 20:
                assert r.code == codes.MESSAGE_ILLEGAL
                return
            assert r.code == codes.SUCCESS
            await b.controller.store.wait_dispatched(b.controller.store.offsets()["wrote"], 10)
            got = await b.pull("Big", 0, 0, sys_flag=0)
            assert _records(got.body)[0].body == body

    asyncio.run(go())


def test_oneway_then_close_still_delivers(tmp_path):
    """Writes gathered for the end of the loop turn go out before a close in the same turn."""
    async def go():
        async with Broker(tmp_path) as b:
            conn = await connect("127.0.0.1", b.port)
            props = "TAGS\x01t\x02"
            conn.oneway(RemotingCommand.request(codes.SEND_MESSAGE_V2, {
                "a": "pg", "b": "OW", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0, "i": props, "j": 0,
                "k": False}, b"fire and forget", oneway=True))
            conn.close()
            await asyncio.wait_for(_until(lambda: b.controller.store.max_offset("OW", 0) == 1), 10)

    asyncio.run(go())


def test_a_sql92_subscription_is_refused_not_read_as_tags(tmp_path):
    """This broker filters by tag only: a pull or a CHECK_CLIENT_CONFIG with a SQL92 expression gets
    RocketMQ's answer with enablePropertyFilter=false (SYSTEM_ERROR naming the type), never a SQL
    text taken for tag names that match nothing."""
    async def go():
        async with Broker(tmp_path) as b:
            assert (await b.send_v2("Sql", b"x", queue_id=0)).code == codes.SUCCESS
            r = await b.pull("Sql", 0, 0, sys_flag=4, subscription="a > 1", expressionType="SQL92")
            assert (r.code, r.remark) == (codes.SYSTEM_ERROR,
                                          "The broker does not support consumer to filter message by SQL92")
            # registered by heartbeat, then pulled without a subscription in the request
            assert (await b.call(codes.HEART_BEAT, {}, msgspec.json.encode({"clientID": "c@1", "consumerDataSet": [{
                "groupName": "sqlg", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": [{
                    "topic": "Sql", "subString": "a > 1", "expressionType": "SQL92", "tagsSet": [], "codeSet": [],
                    "subVersion": 1}]}]}))).code == codes.SUCCESS
            r = await b.pull("Sql", 0, 0, sys_flag=0, consumerGroup="sqlg")
            assert r.code == codes.SYSTEM_ERROR and "SQL92" in r.remark
            body = {"clientId": "c@1", "group": "sqlg", "subscriptionData": {"topic": "Sql", "subString": "a > 1",
                                                                             "expressionType": "SQL92"}}
            r = await b.call(codes.CHECK_CLIENT_CONFIG, {}, msgspec.json.encode(body))
            assert (r.code, r.remark) == (codes.SYSTEM_ERROR,
                                          "The broker does not support consumer to filter message by SQL92")
            body["subscriptionData"]["expressionType"] = "TAG"
            assert (await b.call(codes.CHECK_CLIENT_CONFIG, {}, msgspec.json.encode(body))).code == codes.SUCCESS
            got = await b.pull("Sql", 0, 0, sys_flag=4, subscription="*", expressionType="TAG")
            assert [m.body for m in _records(got.body)] == [b"x"]

    asyncio.run(go())
