"""ACL with aclEnable=true: requests signed as ali-ons and the C++ client sign them (reference §8)
pass; a wrong secret, a missing key or a missing permission gets NO_PERMISSION and stores nothing;
plain_acl.yml's white lists, admin flag and default permissions act as RocketMQ's do."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from broker.remoting import codes
from broker.common.acl_signature import sign
from broker.server.plain_access_validator import PlainAccessValidator
from broker.server.broker_config import BrokerConfig
from broker.server.broker_controller import BrokerController
from broker.store.errors import StoreConfigError
from tests.conftest import free_port
from tests.helpers.procs import async_wait_until as until
from tests.test_broker_remoting import Broker, _heartbeat, _store_config

ACL = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Orders=PUB|SUB
      - ReadOnly=SUB
    groupPerms:
      - blocked=DENY
  - accessKey: rocketmq2
    secretKey: 87654321
    admin: true
"""


def _acl_broker(tmp_path, text=ACL):
    path = tmp_path / "plain_acl.yml"
    path.write_text(text)
    return Broker(tmp_path, broker_kw={"aclEnable": True, "aclFile": str(path)})


async def _signed(b, code, ext, body=b"", ak="RocketMQ", sk="12345678"):
    ext = dict(ext, AccessKey=ak, OnsChannel="ALIYUN")
    ext["Signature"] = sign(ext, body, sk)
    return await b.call(code, ext, body)


def _send_ext(topic):
    # ali-ons' v2 header, typed as it sends it (numbers and booleans stay JSON numbers/booleans:
    # they are signed as their Java strings, "false", "4")
    return {"a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": int(time.time() * 1000), "h": 0,
            "i": "TAGS\x01t\x02", "j": 0, "k": False}


def test_right_key_accepted_wrong_secret_and_missing_key_refused_and_nothing_stored(tmp_path):
    async def go():
        async with _acl_broker(tmp_path) as b:
            store = b.controller.store
            r = await _signed(b, codes.SEND_MESSAGE_V2, _send_ext("Orders"), b"ok")
            assert r.code == codes.SUCCESS, r.remark
            wrote = store.offsets()["wrote"]
            r = await _signed(b, codes.SEND_MESSAGE_V2, _send_ext("Orders"), b"bad", sk="wrongsecret")
            assert r.code == codes.NO_PERMISSION and "signature" in r.remark
            r = await b.send_v2("Orders", b"unsigned")
            assert r.code == codes.NO_PERMISSION and "accessKey" in r.remark
            r = await _signed(b, codes.SEND_MESSAGE_V2, _send_ext("Orders"), b"who", ak="nobody")
            assert r.code == codes.NO_PERMISSION
            # a body altered after signing fails too: the body is part of the signed content
            ext = dict(_send_ext("Orders"), AccessKey="RocketMQ", OnsChannel="ALIYUN")
            ext["Signature"] = sign(ext, b"signed body", "12345678")
            assert (await b.call(codes.SEND_MESSAGE_V2, ext, b"other body")).code == codes.NO_PERMISSION
            assert store.offsets()["wrote"] == wrote
            # C++ client: v1 header, every value a string
            v1 = {"producerGroup": "pg", "topic": "Orders", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                  "queueId": "1", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0", "properties": "",
                  "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
            assert (await _signed(b, codes.SEND_MESSAGE, v1, b"cpp")).code == codes.SUCCESS

    asyncio.run(go())


def test_permissions_per_topic_and_group_defaults_and_admin(tmp_path):
    async def go():
        async with _acl_broker(tmp_path) as b:
            store = b.controller.store
            assert (await _signed(b, codes.SEND_MESSAGE_V2, _send_ext("Orders"), b"x")).code == codes.SUCCESS
            wrote = store.offsets()["wrote"]
            r = await _signed(b, codes.SEND_MESSAGE_V2, _send_ext("Other"), b"x")  # defaultTopicPerm DENY
            assert r.code == codes.NO_PERMISSION and "topic Other" in r.remark
            r = await _signed(b, codes.SEND_MESSAGE_V2, _send_ext("ReadOnly"), b"x")  # SUB only
            assert r.code == codes.NO_PERMISSION
            assert store.offsets()["wrote"] == wrote
            pull = {"consumerGroup": "g", "topic": "Orders", "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
                    "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}
            await store.wait_dispatched(wrote, 10)
            assert (await _signed(b, codes.PULL_MESSAGE, pull)).code == codes.SUCCESS
            r = await _signed(b, codes.PULL_MESSAGE, dict(pull, consumerGroup="blocked"))  # groupPerms DENY
            assert r.code == codes.NO_PERMISSION and "group blocked" in r.remark
            # QUERY_MESSAGE reads a topic's messages: SUB on it, as a pull
            query = {"topic": "Orders", "key": "k", "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**63 - 1}
            assert (await _signed(b, codes.QUERY_MESSAGE, query)).code == codes.QUERY_NOT_FOUND
            r = await _signed(b, codes.QUERY_MESSAGE, dict(query, topic="Other"))
            assert r.code == codes.NO_PERMISSION and "topic Other" in r.remark
            hb = _heartbeat("c1", "blocked", "Orders")
            assert (await _signed(b, codes.HEART_BEAT, {}, hb)).code == codes.NO_PERMISSION
            assert (await _signed(b, codes.HEART_BEAT, {}, _heartbeat("c1", "g", "Orders"))).code == codes.SUCCESS
            create = {"topic": "NewTopic", "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4,
                      "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
            r = await _signed(b, codes.UPDATE_AND_CREATE_TOPIC, create)
            assert r.code == codes.NO_PERMISSION and "admin" in r.remark
            assert b.controller.topics.get("NewTopic") is None
            # an admin account without per-resource permissions may do anything
            assert (await _signed(b, codes.UPDATE_AND_CREATE_TOPIC, create, ak="rocketmq2",
                                  sk="87654321")).code == codes.SUCCESS
            assert (await _signed(b, codes.SEND_MESSAGE_V2, _send_ext("Other"), b"x", ak="rocketmq2",
                                  sk="87654321")).code == codes.SUCCESS

    asyncio.run(go())


def test_white_listed_peer_needs_no_signature_and_edits_are_reloaded(tmp_path):
    async def go():
        async with _acl_broker(tmp_path, ACL.replace("10.10.103.*", "127.0.0.{1,2}")) as b:
            assert (await b.send_v2("Anything", b"from a white-listed address")).code == codes.SUCCESS
        path = tmp_path / "plain_acl.yml"
        v = PlainAccessValidator(str(path))
        assert "newuser1" not in v.accounts
        path.write_text(ACL + "  - accessKey: newuser1\n    secretKey: newsecret1\n")
        os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
        v.reload_if_changed()
        assert v.accounts["newuser1"].secret_key == "newsecret1"
        path.write_text("accounts: [{accessKey: x}]\n")  # broken edit: the previous accounts stay
        os.utime(path, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
        v.reload_if_changed()
        assert "newuser1" in v.accounts

    asyncio.run(go())


@pytest.mark.parametrize("text,named", [
    (None, "does not exist"),
    ("accounts:\n  - accessKey: RocketMQ\n", "accounts[0]"),
    ("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678, topicPerms: [A=READ]}\n", "topicPerms"),
    ("globalWhiteRemoteAddresses: [10.10.x.1]\n", "globalWhiteRemoteAddresses"),
])
def test_bad_acl_file_refuses_to_start_naming_it(tmp_path, text, named):
    path = tmp_path / "plain_acl.yml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(StoreConfigError) as e:
        BrokerController(BrokerConfig(aclEnable=True, aclFile=str(path)), _store_config(tmp_path))
    assert named in str(e.value) and str(path) in str(e.value)


def test_cli_reads_plain_acl_beside_broker_conf_and_refuses_without_it(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"aclEnable=true\nstorePathRootDir={tmp_path / 'store'}\nlistenPort={free_port()}\n")
    p = subprocess.run([sys.executable, "-m", "broker.cli", "serve", "-c", str(conf)], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, ROCKETMQ_HOME=""))
    assert p.returncode == 2
    assert "aclEnable" in p.stderr and str(tmp_path / "plain_acl.yml") in p.stderr, p.stderr
    assert not (tmp_path / "store" / "commitlog").exists() or not os.listdir(tmp_path / "store" / "commitlog")


def test_signature_is_the_documented_hmac_sha1():
    import base64
    import hashlib
    import hmac
    ext = {"b": "T", "k": False, "d": 4, "AccessKey": "ak", "OnsChannel": "ALIYUN", "Signature": "ignored"}
    content = b"akALIYUNT4false" + b"body"  # values by key: AccessKey, OnsChannel, b, d, k; then the body
    want = base64.b64encode(hmac.new(b"secret", content, hashlib.sha1).digest()).decode()
    assert sign(ext, b"body", "secret") == want


def test_the_project_client_signs_every_request_it_sends(tmp_path):
    """MQClientInstance(credentials=...) signs as Java's AclClientRPCHook: the kernel-rendered sends
    and pulls, heartbeats, offset commits and admin calls all pass an ACL broker; a wrong secret
    or no credentials are refused and store nothing."""
    from broker.client.acl_hook import SessionCredentials
    from broker.client.admin import Admin
    from broker.client.client_instance import MQClientInstance
    from broker.client.errors import ClientError
    from broker.client.message import Message
    from broker.client.producer import Producer
    from broker.client.push_consumer import PushConsumer
    from tests.test_client import Cluster as InProcessCluster

    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    user, admin = SessionCredentials("RocketMQ", "12345678"), SessionCredentials("rocketmq2", "87654321")

    async def go():
        async with InProcessCluster(tmp_path, aclEnable=True, aclFile=str(acl)) as c:
            def client(credentials):
                return MQClientInstance(c.namesrv, credentials=credentials)
            async with Admin(client=client(admin)) as a:  # UPDATE_AND_CREATE_TOPIC needs admin
                assert await a.create_topic("Orders", 4) == [c.broker.addr]
            with pytest.raises(ClientError):
                async with Admin(client=client(user)) as a:
                    await a.create_topic("Other", 4)
            await until(lambda: "Orders" in c.ns.routes.topic_queue_table, what="the route of Orders")
            got = []
            all_in = asyncio.Event()

            def listener(msgs):
                got.extend(m.body for m in msgs)
                if len(got) >= 30:
                    all_in.set()
                return True

            consumer = PushConsumer("cg-signed", consume_from_first=True, client=client(user))
            consumer.subscribe("Orders", "*")
            consumer.register(listener)
            async with Producer("pg", client=client(user)) as p:
                await consumer.start()
                try:
                    for i in range(20):
                        await p.send(Message("Orders", f"m{i}".encode(), tags="A"))
                    await p.send_batch([Message("Orders", f"b{i}".encode()) for i in range(10)])
                    await asyncio.wait_for(all_in.wait(), 30)
                    await consumer.persist_offsets()
                finally:
                    await consumer.shutdown()
            assert sorted(got) == sorted([f"m{i}".encode() for i in range(20)] + [f"b{i}".encode() for i in range(10)])
            assert sum(c.broker.store.consumer_offsets.query("cg-signed", "Orders", q) for q in range(4)) == 30
            wrote = c.broker.store.offsets()["wrote"]
            for bad in (SessionCredentials("RocketMQ", "wrong-secret"), None):
                async with Producer("pg", client=client(bad)) as p:
                    with pytest.raises(ClientError, match="signature|accessKey"):
                        await p.send(Message("Orders", b"refused"))
            assert c.broker.store.offsets()["wrote"] == wrote

    asyncio.run(go())
