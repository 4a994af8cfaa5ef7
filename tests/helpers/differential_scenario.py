"""The differential scenario: the requests tests/test_differential.py replays against Apache
RocketMQ 5.5.0's broker and ours (tests.helpers.differential explains the comparison and what it
normalises). Values are fixed (born timestamps, unique keys, client ids) so both sides get the
same bytes."""
from __future__ import annotations

import time

from broker.remoting import codes
from broker.remoting.message_batch import encode_batch_body
from tests.helpers.differential import Step, ext_of, missing_field_frame

BORN = str(int(time.time() * 1000))
CLIENT = "127.0.0.1@diff-client"
NOW = int(BORN)


def props(**kv) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in kv.items())


def send_v1(name, topic, body=b"hello", queue_id=0, tags="TagA", key="k1", uniq="DIFF-UNIQ-V1",
            sys_flag=0, extra_props=None, to="broker", save=None, **step) -> Step:
    p = {"TAGS": tags, "KEYS": key, "UNIQ_KEY": uniq, "WAIT": "true", **(extra_props or {})}
    return Step(name, codes.SEND_MESSAGE, {
        "producerGroup": "DiffPG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": str(queue_id), "sysFlag": str(sys_flag), "bornTimestamp": BORN, "flag": "0",
        "properties": props(**p), "reconsumeTimes": "0", "unitMode": "false", "batch": "false"},
        body, to=to, save=save, kind="none", **step)


def send_v2(name, topic, body=b"hello", queue_id=0, tags="TagA", key="k1", uniq="DIFF-UNIQ-V2",
            sys_flag=0, extra_props=None, save=None, **step) -> Step:
    p = {"TAGS": tags, "KEYS": key, "UNIQ_KEY": uniq, "WAIT": "true", **(extra_props or {})}
    return Step(name, codes.SEND_MESSAGE_V2, {
        "a": "DiffPG", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": str(sys_flag), "g": BORN,
        "h": "0", "i": props(**p), "j": "0", "k": "false"}, body, save=save, kind="none", **step)


def create_topic(name, topic, perm=6, queues=4) -> Step:
    return Step(name, codes.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": str(perm), "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})


def pull(name, topic, offset=0, sub="*", queue_id=0, group="DiffCG", **step) -> Step:
    return Step(name, codes.PULL_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
        "subscription": sub, "subVersion": "0", "expressionType": "TAG"}, kind="messages", **step)


def batch_body() -> bytes:
    return encode_batch_body([
        (f"batch-{i}".encode(), props(TAGS="TagB" if i % 2 else "TagA", KEYS=f"bk{i}",
                                      UNIQ_KEY=f"DIFF-UNIQ-BATCH-{i}", WAIT="true").encode(), 0)
        for i in range(3)])


def sends(t: str) -> list[Step]:
    return [
        create_topic("create topic", t),
        send_v1("SEND_MESSAGE", t, save="v1"),
        send_v2("SEND_MESSAGE_V2", t, tags="TagB", key="k2", save="v2"),
        Step("SEND_BATCH_MESSAGE", codes.SEND_BATCH_MESSAGE, {
            "a": "DiffPG", "b": t, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": BORN, "h": "0",
            "i": props(WAIT="true", BATCH_PROP="b"), "j": "0", "k": "false", "m": "true"}, batch_body(), kind="none"),
        # until the five are in the consume queue (each store dispatches after the answer)
        Step("GET_MAX_OFFSET after the sends", codes.GET_MAX_OFFSET, {"topic": t, "queueId": "0"},
             until=lambda r, _: r.ext.get("offset") == "5"),
        pull("pull *", t),
        pull("pull TagA", t, sub="TagA"),
        pull("pull TagB||TagA from 1", t, offset=1, sub="TagB || TagA"),
        pull("pull at max offset", t, offset=5),
        pull("pull past max offset", t, offset=50),
        pull("pull empty queue", t, queue_id=1),
        Step("GET_MAX_OFFSET", codes.GET_MAX_OFFSET, {"topic": t, "queueId": "0"}),
        Step("GET_MIN_OFFSET", codes.GET_MIN_OFFSET, {"topic": t, "queueId": "0"}),
        Step("SEARCH_OFFSET_BY_TIMESTAMP 0", codes.SEARCH_OFFSET_BY_TIMESTAMP,
             {"topic": t, "queueId": "0", "timestamp": "0"}),
        Step("SEARCH_OFFSET_BY_TIMESTAMP future", codes.SEARCH_OFFSET_BY_TIMESTAMP,
             {"topic": t, "queueId": "0", "timestamp": str(NOW + 3_600_000)}),
        Step("VIEW_MESSAGE_BY_ID", codes.VIEW_MESSAGE_BY_ID,
             {"offset": lambda s: str(int(s["v1"].ext["msgId"][-16:], 16))}, kind="messages"),
        Step("QUERY_MESSAGE by key", codes.QUERY_MESSAGE, {
            "topic": t, "key": "k2", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(NOW + 3_600_000)},
            kind="messages", until=lambda r, _: r.code == codes.SUCCESS,
            volatile=("ext.indexLastUpdateTimestamp", "ext.indexLastUpdatePhyoffset")),
    ]


def offsets(t: str) -> list[Step]:
    g = "DiffOffsetCG"
    return [
        create_topic("create topic", t),
        send_v2("send", t),
        # both stores dispatch the consume queue after the append: wait for it, so that the
        # next answer depends on the queue's content, not on the moment
        Step("GET_MAX_OFFSET after the send", codes.GET_MAX_OFFSET, {"topic": t, "queueId": "0"},
             until=lambda r, _: r.ext.get("offset") == "1"),
        Step("QUERY_CONSUMER_OFFSET none stored", codes.QUERY_CONSUMER_OFFSET,
             {"consumerGroup": g, "topic": t, "queueId": "0"}),
        Step("QUERY_CONSUMER_OFFSET none stored, empty queue", codes.QUERY_CONSUMER_OFFSET,
             {"consumerGroup": g, "topic": t, "queueId": "1"}),
        Step("UPDATE_CONSUMER_OFFSET", codes.UPDATE_CONSUMER_OFFSET,
             {"consumerGroup": g, "topic": t, "queueId": "0", "commitOffset": "1"}),
        Step("QUERY_CONSUMER_OFFSET stored", codes.QUERY_CONSUMER_OFFSET,
             {"consumerGroup": g, "topic": t, "queueId": "0"}),
    ]


def heartbeat_body(t: str, group: str) -> dict:
    return {"clientID": CLIENT, "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False, "subscriptionDataSet": [{
            "topic": t, "subString": "TagA", "tagsSet": ["TagA"], "codeSet": [2598919], "subVersion": 1,
            "expressionType": "TAG", "classFilterMode": False}]}],
        "producerDataSet": [{"groupName": "DiffPG"}]}


def clients(t: str) -> list[Step]:
    g = "DiffClientCG"
    mq = [{"topic": t, "brokerName": "broker-a", "queueId": q} for q in (0, 1)]
    lock = {"consumerGroup": g, "clientId": CLIENT, "mqSet": mq}
    other = {"consumerGroup": g, "clientId": "127.0.0.1@other", "mqSet": mq}
    return [
        create_topic("create topic", t),
        Step("HEART_BEAT", codes.HEART_BEAT, {}, heartbeat_body(t, g)),
        Step("HEART_BEAT again", codes.HEART_BEAT, {}, heartbeat_body(t, g)),
        Step("GET_CONSUMER_LIST_BY_GROUP", codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": g}),
        Step("GET_CONSUMER_LIST_BY_GROUP unknown", codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "DiffNobody"}),
        Step("LOCK_BATCH_MQ", codes.LOCK_BATCH_MQ, {}, lock),
        Step("LOCK_BATCH_MQ by another client", codes.LOCK_BATCH_MQ, {}, other),
        Step("UNLOCK_BATCH_MQ", codes.UNLOCK_BATCH_MQ, {}, lock),
        Step("LOCK_BATCH_MQ by the other after unlock", codes.LOCK_BATCH_MQ, {}, other),
        Step("UNREGISTER_CLIENT", codes.UNREGISTER_CLIENT,
             {"clientID": CLIENT, "consumerGroup": g, "producerGroup": "DiffPG"}),
        Step("GET_CONSUMER_LIST_BY_GROUP after unregister", codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": g}),
    ]


def end_tx(name, half: str, commit: bool, save=None) -> Step:
    return Step(name, codes.END_TRANSACTION, save=save, ext={
        "producerGroup": "DiffPG", "tranStateTableOffset": ext_of(half, "queueOffset"),
        "commitLogOffset": lambda s: str(int(s[half].ext["msgId"][-16:], 16)),
        "commitOrRollback": "8" if commit else "12", "fromTransactionCheck": "false",
        "msgId": ext_of(half, "msgId"), "transactionId": ext_of(half, "transactionId")})


def transactions(t: str) -> list[Step]:
    half = {"TRAN_MSG": "true", "PGROUP": "DiffPG"}
    return [
        create_topic("create topic", t),
        send_v2("half 1", t, uniq="DIFF-UNIQ-HALF-1", sys_flag=4, extra_props=half, save="h1"),
        send_v2("half 2", t, uniq="DIFF-UNIQ-HALF-2", sys_flag=4, extra_props=half, save="h2"),
        pull("pull before commit", t),
        end_tx("END_TRANSACTION commit", "h1", True),
        end_tx("END_TRANSACTION rollback", "h2", False),
        end_tx("END_TRANSACTION second commit", "h1", True, save="again"),
        # until every commit answered SUCCESS is in the consume queue (each store dispatches it
        # after the answer)
        Step("GET_MAX_OFFSET after the commits", codes.GET_MAX_OFFSET, {"topic": t, "queueId": "0"},
             until=lambda r, saved: r.ext.get("offset") == ("2" if saved["again"].code == codes.SUCCESS else "1")),
        pull("pull after commit", t),
    ]


def admin(t: str) -> list[Step]:
    g = "DiffAdminCG"
    group = {"groupName": g, "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
             "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
             "notifyConsumerIdsChangedEnable": True}
    return [
        create_topic("UPDATE_AND_CREATE_TOPIC", t),
        Step("GET_ALL_TOPIC_CONFIG", codes.GET_ALL_TOPIC_CONFIG, select=lambda d: {
            "keys": dict.fromkeys(d, True), "topic": d["topicConfigTable"][t]}),
        Step("GET_ALL_TOPIC_CONFIG system topics", codes.GET_ALL_TOPIC_CONFIG, select=lambda d: dict.fromkeys(
            (n for n in d["topicConfigTable"] if not n.startswith(("Diff", "%RETRY%Diff"))), True)),
        Step("GET_TOPIC_CONFIG", codes.GET_TOPIC_CONFIG, {"topic": t}),
        Step("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP", codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, group),
        Step("GET_SUBSCRIPTIONGROUP_CONFIG", codes.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": g}),
        Step("GET_ALL_SUBSCRIPTIONGROUP_CONFIG", codes.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, select=lambda d: {
            "keys": dict.fromkeys(d, True), "group": d["subscriptionGroupTable"][g]}),
        Step("GET_ALL_SUBSCRIPTIONGROUP_CONFIG system groups", codes.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
             select=lambda d: dict.fromkeys((n for n in d["subscriptionGroupTable"] if not n.startswith("Diff")), True)),
        Step("DELETE_SUBSCRIPTIONGROUP", codes.DELETE_SUBSCRIPTIONGROUP, {"groupName": g, "cleanOffset": "true"}),
        Step("GET_ALL_SUBSCRIPTIONGROUP_CONFIG after the delete", codes.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
             select=lambda d: {"deleted group listed": g in d["subscriptionGroupTable"]}),
        Step("GET_SUBSCRIPTIONGROUP_CONFIG deleted", codes.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": g}),
        Step("DELETE_TOPIC_IN_BROKER", codes.DELETE_TOPIC_IN_BROKER, {"topic": t}),
        Step("GET_TOPIC_CONFIG deleted", codes.GET_TOPIC_CONFIG, {"topic": t}),
        # the keys RocketMQ's table has (ours adds its own figures); the Java broker answers
        # SYSTEM_ERROR until its first one-second stats sample
        Step("GET_BROKER_RUNTIME_INFO", codes.GET_BROKER_RUNTIME_INFO, select=lambda d: dict.fromkeys(
            ("commitLogDiskRatio_<path>" if k.startswith("commitLogDiskRatio_") else k for k in d["table"]), True),
             until=lambda r, _: r.code == codes.SUCCESS, ours_may_add=True),
    ]


def errors(t: str, ro: str) -> list[Step]:
    return [
        create_topic("create topic", t),
        create_topic("create read-only topic", ro, perm=4),
        send_v2("send to a read-only topic", ro),
        send_v2("send a body over maxMessageSize", t, body=b"x" * 70_000),
        send_v2("send to queue 99", t, queue_id=99),
        send_v1("send to the slave", t, to="slave"),
        pull("pull an unknown topic", "DiffNoSuchTopic"),
        Step("GET_MAX_OFFSET unknown topic", codes.GET_MAX_OFFSET, {"topic": "DiffNoSuchTopic", "queueId": "0"}),
        Step("SEND_MESSAGE_V2 without b (topic)", codes.SEND_MESSAGE_V2, frame=missing_field_frame(
            codes.SEND_MESSAGE_V2, {"a": "DiffPG", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": BORN, "h": 0,
                                    "i": "", "j": 0, "k": False}), kind="none", remark=False),
        Step("PULL_MESSAGE without queueOffset", codes.PULL_MESSAGE, frame=missing_field_frame(
            codes.PULL_MESSAGE, {"consumerGroup": "DiffCG", "topic": t, "queueId": 0, "maxMsgNums": 32,
                                 "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0,
                                 "subscription": "*", "subVersion": 0}), remark=False),
        Step("unknown request code", 99999, {}),
    ]


def namesrv(t: str) -> list[Step]:
    return [
        create_topic("create topic", t),
        Step("GET_ROUTEINFO_BY_TOPIC", codes.GET_ROUTEINFO_BY_TOPIC, {"topic": t}, to="namesrv",
             until=lambda r, _: r.code == codes.SUCCESS),
        Step("GET_ROUTEINFO_BY_TOPIC unknown", codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "DiffNoSuchTopic"},
             to="namesrv"),
        Step("GET_BROKER_CLUSTER_INFO", codes.GET_BROKER_CLUSTER_INFO, to="namesrv"),
        Step("unknown request code", 99999, {}, to="namesrv"),
    ]
