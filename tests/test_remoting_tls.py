"""TLS on the remoting port (broker.remoting.tls) of the broker and the name server, as RocketMQ's
TlsSystemConfig: tls.server.mode=permissive serves TLS and plaintext on one port (the first byte
tells them apart), enforcing TLS only; the Java client with -Dtls.enable=true and this project's
client (tls=True) produce and consume through it; a bad setting refuses to start naming its key."""
from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys

import pytest

from broker.client.admin import Admin
from broker.client.client_instance import MQClientInstance
from broker.client.message import Message
from broker.client.producer import Producer
from broker.client.pull_consumer import PullConsumer
from broker.client.route import MessageQueue
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.remoting.tls import client_context
from broker.server.broker_config import BrokerConfig
from broker.store.errors import StoreConfigError
from tests.conftest import free_port
from tests.helpers import java_client
from tests.helpers.ha_cluster import runtime
from tests.helpers.procs import REPO, Child, wait_until

pytestmark = pytest.mark.timeout(300)


class TlsCluster:
    """A name server and a broker as processes, both with `mode`."""

    def __init__(self, root, mode: str):
        self.ns_port, self.port = free_port(), free_port()
        self.namesrv = f"127.0.0.1:{self.ns_port}"
        root.mkdir(parents=True, exist_ok=True)
        (root / "namesrv.conf").write_text(f"listenPort={self.ns_port}\ntls.server.mode={mode}\n")
        (root / "broker.conf").write_text(
            f"brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\nnamesrvAddr={self.namesrv}\n"
            f"listenPort={self.port}\nbrokerIP1=127.0.0.1\nstorePathRootDir={root / 'store'}\n"
            f"tls.server.mode={mode}\ntls.enable={'true' if mode == 'enforcing' else 'false'}\n")
        self.ns = Child([sys.executable, "-m", "broker.cli", "namesrv", "-c", str(root / "namesrv.conf"),
                         "--listen", self.namesrv], root / "namesrv.err")
        self.ns.wait_lines(lambda ls: any("listening" in line for line in ls), 30, "the name server")
        self.broker = Child([sys.executable, "-m", "broker.cli", "serve", "-c", str(root / "broker.conf")],
                            root / "broker.err")
        self.broker.wait_lines(lambda ls: any("listening on" in line for line in ls), 60, "the broker")
        self.root = root

    def close(self) -> None:
        for c in (self.broker, self.ns):
            c.kill_group()


@pytest.fixture(scope="module")
def permissive(tmp_path_factory):
    c = TlsCluster(tmp_path_factory.mktemp("tls-permissive"), "permissive")
    try:
        yield c
    finally:
        c.close()


async def _round_trip(c: TlsCluster, tls: bool, topic: str, n: int = 8) -> tuple[list[str], bool]:
    """n sends and a pull of them through this project's client; (the bodies read back, whether its
    broker connection was TLS)."""
    await _create(c, topic, 1, tls)
    client = MQClientInstance(c.namesrv, tls=tls)
    producer = Producer("tls-pg", client=client)
    await producer.start()
    try:
        for i in range(n):
            await producer.send(Message(topic, f"{topic}-{i}".encode()))
        pc = PullConsumer("tls-cg", client=client)
        r = await pc.pull(MessageQueue(topic, "broker-a", 0), 0, 32)
        conn = client.channel_now(f"127.0.0.1:{c.port}")
        return [m.body.decode() for m in r.messages], conn.transport.get_extra_info("ssl_object") is not None
    finally:
        await producer.shutdown()


def test_permissive_serves_tls_and_plaintext_clients_on_one_port(permissive):
    bodies, was_tls = asyncio.run(_round_trip(permissive, True, "TlsOn"))
    assert was_tls and bodies == [f"TlsOn-{i}" for i in range(8)]
    tls0 = runtime(permissive.port)["tls_connections_accepted"]
    bodies, was_tls = asyncio.run(_round_trip(permissive, False, "TlsOff"))
    assert not was_tls and bodies == [f"TlsOff-{i}" for i in range(8)]
    assert runtime(permissive.port)["tls_connections_accepted"] == tls0


def test_the_java_client_with_tls_enable_produces_and_consumes_through_tls(permissive, tmp_path):
    java_client.check_installed()
    topic, tls = "JavaTls", {"tls.enable": "true"}
    asyncio.run(_create(permissive, topic))
    tls0 = runtime(permissive.port)["tls_connections_accepted"]
    sent = java_client.run("produce", {"nameSrv": permissive.namesrv, "group": "pg", "topic": topic, "count": 20,
                                       "template": {"tags": "TagA", "body": "over tls"}, "jvm": tls}, tmp_path / "p")
    assert len(sent) == 20 and all(s["status"] == "SEND_OK" for s in sent)
    got = java_client.run("litepull", {"nameSrv": permissive.namesrv, "group": "jtls-cg", "topic": topic, "expect": 20,
                                       "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "jvm": tls}, tmp_path / "c")
    msgs = [m for m in got if "msgId" in m]
    assert sorted(m["msgId"] for m in msgs) == sorted(s["msgId"] for s in sent)
    assert sorted(m["body"] for m in msgs) == sorted(f"over tls-{i}" for i in range(20))
    # the producer's and the consumer's connections to the broker were TLS, and none failed
    assert runtime(permissive.port)["tls_connections_accepted"] >= tls0 + 2
    assert "TLS handshake with a client failed" not in (permissive.root / "broker.err").read_text()


async def _create(c: TlsCluster, topic: str, queues: int = 4, tls: bool = False) -> None:
    async with Admin(c.namesrv, client=MQClientInstance(c.namesrv, tls=tls)) as admin:
        await admin.create_topic(topic, queues, broker_addr=f"127.0.0.1:{c.port}")
        for _ in range(100):
            if topic in await admin.topic_list():
                return
            await asyncio.sleep(0.1)  # the name server learns it at the broker's next registration
        raise AssertionError(f"{topic} never routed")


def test_enforcing_takes_tls_only(tmp_path):
    c = TlsCluster(tmp_path, "enforcing")
    try:
        bodies, was_tls = asyncio.run(_round_trip(c, True, "TlsOnly"))
        assert was_tls and bodies == [f"TlsOnly-{i}" for i in range(8)]

        async def plaintext() -> RemotingCommand:
            conn = await connect("127.0.0.1", c.port)
            return await conn.request(RemotingCommand.request(codes.GET_BROKER_RUNTIME_INFO), 5)
        with pytest.raises((ConnectionError, asyncio.TimeoutError, OSError)):
            asyncio.run(plaintext())

        async def over_tls() -> RemotingCommand:
            conn = await connect("127.0.0.1", c.port, ssl_context=client_context())
            try:
                return await conn.request(RemotingCommand.request(codes.GET_BROKER_RUNTIME_INFO), 5)
            finally:
                conn.close()
        assert asyncio.run(over_tls()).code == codes.SUCCESS
        # the broker registered with the enforcing name server over TLS (tls.enable)
        wait_until(lambda: "TBW102" in subprocess.run(
            [sys.executable, "-m", "broker.cli", "admin", "topic", "list", "-n", c.namesrv],
            capture_output=True, text=True, cwd=str(REPO), env={**__import__("os").environ,
                                                                "ROCKETMQ_TLS_ENABLE": "true"}).stdout,
            30, "the broker's registration")
    finally:
        c.close()


@pytest.mark.parametrize("conf, key", [
    ({"tlsMode": "on"}, "tls.server.mode"),
])
def test_a_bad_tls_mode_is_refused_naming_the_key(conf, key):
    with pytest.raises(StoreConfigError) as e:
        BrokerConfig(**conf)
    assert key in str(e.value)


def test_tls_without_test_mode_needs_a_certificate_naming_the_key(tmp_path):
    (tmp_path / "broker.conf").write_text(
        f"brokerName=broker-a\nlistenPort={free_port()}\nbrokerIP1=127.0.0.1\nstorePathRootDir={tmp_path / 'store'}\n"
        f"tls.server.mode=permissive\ntls.test.mode.enable=false\n")
    r = subprocess.run([sys.executable, "-m", "broker.cli", "serve", "-c", str(tmp_path / "broker.conf")],
                       capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert r.returncode != 0 and ("tls.server.keyPath" in r.stderr or "tls.server.certPath" in r.stderr), r.stderr
    _ = ssl  # the module is what the client's context comes from
