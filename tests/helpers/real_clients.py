"""Real RocketMQ clients (npm ali-ons, PyPI rocketmq 0.4.4 over the C++ client) against a real
name server and broker, each its own process on loopback. The clients run through two small
drivers (tests/clients/ons.js, tests/clients/cpp_client.py) that print one JSON line per event."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import msgspec

from broker.remoting import codes
from broker.common.acl_signature import sign
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.store.message import decode_message
from tests.conftest import free_port
from tests.helpers.procs import REPO, Child, wait_until

CLIENTS = REPO / "tests" / "clients"
NODE_MODULES = CLIENTS / "node_modules" / "ali-ons"
CPP_PYTHON = REPO / ".venv-rocketmq" / "bin" / "python"
KINDS = ("ons", "cpp")

# Retries within milliseconds instead of 10 s and up (the broker accepts ms for tests).
FAST_DELAYS = " ".join(["100ms"] * 18)


def check_installed() -> None:
    """`make test` installs both clients (Makefile target `clients`); a missing one is a setup
    error to report, not a test to skip."""
    missing = [str(p) for p in (NODE_MODULES, CPP_PYTHON) if not p.exists()]
    assert not missing, f"real clients not installed ({', '.join(missing)}): run `make test` or `make clients`"


def _argv(kind: str, cmd: str, opt: dict, home: Path) -> list[str]:
    if kind == "java":  # the Java 4.x client (Maven Central rocketmq-client), tests/java
        from tests.helpers.java_client import java_argv
        return java_argv(cmd, opt, home)
    if kind == "py":  # the project's own client, driven the same way (consume only)
        return [sys.executable, "-m", "tests.helpers.order_consumer", cmd, json.dumps(opt)]
    if kind == "node5":  # the 5.x Node.js client's PushConsumer, through the gRPC front at opt["endpoints"]
        from tests.helpers.grpc_front import node5_argv
        return node5_argv(cmd, opt)
    check_installed()
    if kind == "ons":
        return ["node", str(CLIENTS / "ons.js"), cmd, json.dumps(opt)]
    return [str(CPP_PYTHON), str(CLIENTS / "cpp_client.py"), cmd, json.dumps(opt)]


def _env(home: Path) -> dict:
    home.mkdir(parents=True, exist_ok=True)
    # the C++ client logs under $HOME/logs/rocketmq-cpp: keep that in the test's directory
    return dict(os.environ, HOME=str(home))


class Cluster:
    """`broker namesrv` and `broker serve -c broker.conf` as two processes; `call` talks to the broker."""

    def __init__(self, root: Path, extra_conf: str = "", access: tuple[str, str] | None = None):
        self.root = root
        self.ns_port, self.port = free_port(), free_port()
        self.namesrv = f"127.0.0.1:{self.ns_port}"
        self.addr = f"127.0.0.1:{self.port}"
        self.access = access  # (accessKey, secretKey) for this side's own admin calls under ACL
        root.mkdir(parents=True, exist_ok=True)
        self.conf = root / "broker.conf"
        self.conf.write_text(
            f"brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\nnamesrvAddr={self.namesrv}\n"
            # haListenPort chosen free too: listenPort + 1 (the default) may be a client's ephemeral
            # port by then, and the HA service's ERROR for it failed test_hostile_input (CI)
            f"listenPort={self.port}\nhaListenPort={free_port()}\nbrokerIP1=127.0.0.1\n"
            f"storePathRootDir={root / 'store'}\n"
            f"mappedFileSizeCommitLog=4194304\nmessageDelayLevel={FAST_DELAYS}\n{extra_conf}")
        self.procs: list[Child] = []

    def __enter__(self) -> "Cluster":
        me = [sys.executable, "-m", "broker.cli"]
        self.procs.append(Child([*me, "namesrv", "--listen", self.namesrv], self.root / "namesrv.err"))
        self.procs.append(Child([*me, "serve", "-c", str(self.conf)], self.root / "broker.err"))
        try:
            self.procs[1].wait_lines(lambda ls: any("listening on" in line for line in ls), 60, "the broker to listen")
            self.wait_registered()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def restart_broker(self, stderr_name: str = "broker2.err") -> None:
        """Start the broker again (after its group was killed) on the same conf and store; returns
        once it listens."""
        me = [sys.executable, "-m", "broker.cli"]
        self.procs[1] = Child([*me, "serve", "-c", str(self.conf)], self.root / stderr_name)
        self.procs[1].wait_lines(lambda ls: any("listening on" in line for line in ls), 60, "the broker to listen again")

    def close(self) -> None:
        for child in reversed(self.procs):  # the broker first: it unregisters on the way out
            if child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
                try:
                    child.proc.wait(30)
                except subprocess.TimeoutExpired:
                    pass
            child.kill_group()

    def wait_registered(self, broker_name: str = "broker-a", timeout: float = 30) -> None:
        """Until the name server lists the broker (GET_BROKER_CLUSTER_INFO): its first registration,
        which brings its topics (TBW102 only with autoCreateTopicEnable) at the same time."""
        async def poll():
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                r = await _request(self.ns_port, codes.GET_BROKER_CLUSTER_INFO, {})
                if r.code == codes.SUCCESS and broker_name in msgspec.json.decode(bytes(r.body))["brokerAddrTable"]:
                    return
                assert loop.time() < deadline, f"{broker_name} not registered within {timeout}s"
                await asyncio.sleep(0.05)
        asyncio.run(poll())

    def wait_route(self, topic: str, timeout: float = 30) -> dict:
        async def poll():
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:  # the broker registers on its own schedule: retry the lookup, bounded
                r = await _request(self.ns_port, codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
                if r.code == codes.SUCCESS:
                    return msgspec.json.decode(bytes(r.body))
                assert loop.time() < deadline, f"no route for {topic} within {timeout}s"
                await asyncio.sleep(0.05)
        return asyncio.run(poll())

    def call(self, code: int, ext: dict, body: bytes = b"") -> RemotingCommand:
        ext = {k: str(v) for k, v in ext.items()}
        if self.access is not None:
            ext["AccessKey"] = self.access[0]
            ext["Signature"] = sign(ext, body, self.access[1])
        return asyncio.run(_request(self.port, code, ext, body))

    def create_topic(self, topic: str, queues: int = 4) -> None:
        """UPDATE_AND_CREATE_TOPIC on the broker, then wait for the name server's route."""
        r = self.call(codes.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
        assert r.code == codes.SUCCESS, (r.code, r.remark)
        # the name server answers a route for a topic it does not know yet (ali-ons needs one):
        # wait for the broker's registration of this one, with its queue count
        wait_until(lambda: [q["writeQueueNums"] for q in self.wait_route(topic).get("queueDatas") or []] == [queues],
                   30, f"the name server's route of {topic} with {queues} queues")

    def lock_batch(self, group: str, client_id: str, topic: str, queues, unlock: bool = False) -> set[int]:
        """LOCK_BATCH_MQ (UNLOCK_BATCH_MQ with `unlock`) of queues of `topic` as `client_id`; the
        queue ids the broker granted."""
        body = msgspec.json.encode({"consumerGroup": group, "clientId": client_id, "mqSet": [
            {"topic": topic, "brokerName": "broker-a", "queueId": q} for q in queues]})
        r = self.call(codes.UNLOCK_BATCH_MQ if unlock else codes.LOCK_BATCH_MQ, {}, body)
        assert r.code == codes.SUCCESS, (r.code, r.remark)
        return set() if unlock else {mq["queueId"] for mq in msgspec.json.decode(bytes(r.body))["lockOKMQSet"]}

    def max_offset(self, topic: str, queue_id: int) -> int:
        r = self.call(codes.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
        return int(r.ext["offset"]) if r.code == codes.SUCCESS else 0

    def dispatched_all(self) -> bool:
        """Whether the broker's reput has dispatched everything its commit log holds."""
        r = self.call(codes.GET_BROKER_RUNTIME_INFO, {})
        t = msgspec.json.decode(bytes(r.body))["table"]
        return int(t["dispatchedOffset"]) >= int(t["commitLogMaxOffset"])

    def total(self, topic: str, queues: int = 4) -> int:
        """Messages held by a topic across its queues (max offsets; nothing is deleted in tests)."""
        return sum(self.max_offset(topic, q) for q in range(queues))

    def records(self, topic: str, queue_id: int) -> list:
        """The stored records of one queue, as the broker holds them (bodies not inflated)."""
        r = self.call(codes.PULL_MESSAGE, {
            "consumerGroup": "test-inspector", "topic": topic, "queueId": queue_id, "queueOffset": 0,
            "maxMsgNums": 64, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0,
            "subscription": "*", "subVersion": 0})
        body, out, pos = bytes(r.body), [], 0
        while r.code == codes.SUCCESS and pos < len(body):
            m = decode_message(body, pos)
            out.append(m)
            pos += m.size
        return out


async def _request(port: int, code: int, ext: dict, body: bytes = b"", host: str = "127.0.0.1") -> RemotingCommand:
    conn = await connect(host, port)
    try:
        return await conn.request(RemotingCommand.request(code, ext, body), 10)
    finally:
        conn.close()


def produce(kind: str, cluster: Cluster, topic: str, messages: list[dict], tmp: Path, group: str = "pg",
            access: tuple[str, str] | None = None, **more) -> list[dict]:
    opt = {"nameSrv": cluster.namesrv, "group": group, "topic": topic, "messages": messages, **more}
    if access:
        opt.update(accessKey=access[0], secretKey=access[1])
    p = subprocess.run(_argv(kind, "produce", opt, tmp / "home"), capture_output=True, text=True, timeout=120,
                       env=_env(tmp / "home"), cwd=str(CLIENTS))
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and lines and lines[-1] == {"done": True}, f"{kind} producer: rc={p.returncode}\n" \
                                                                         f"{p.stdout}\n{p.stderr[-3000:]}"
    return lines[:-1]


class Consumer:
    """A push consumer in its own process (kind "ons", "cpp", or "py": the project's own client,
    tests/helpers/order_consumer.py); `got` holds its deliveries as they arrive."""

    def __init__(self, kind: str, cluster: Cluster, tmp: Path, topic: str, group: str, name: str, **opt):
        opt.update(nameSrv=cluster.namesrv, group=group, topic=topic, instanceName=name)
        self.kind = kind
        self.child = Child(_argv(kind, "consume", opt, tmp / "home"), tmp / f"{name}.err", env=_env(tmp / "home"),
                           stdin=subprocess.PIPE)
        self.child.wait_lines(lambda ls: any('"ready"' in line for line in ls), 60, f"{name} to start")

    @property
    def got(self) -> list[dict]:
        return [json.loads(line) for line in list(self.child.lines) if line.startswith('{"topic"')]

    def wait(self, predicate, timeout: float, what: str) -> list[dict]:
        """Wait until `predicate(deliveries)` holds; woken by each line the consumer prints."""
        def check(lines):
            got = [json.loads(line) for line in lines if line.startswith('{"topic"')]
            return got if predicate(got) else None
        return self.child.wait_lines(check, timeout, what)

    def close(self) -> None:
        """Closes stdin: the driver shuts its consumer down (committing offsets) and exits."""
        if self.child.proc.poll() is None:
            self.child.proc.stdin.close()
            self.child.wait_lines(lambda ls: any('"closed"' in line for line in ls), 60, "the consumer to close")
            self.child.proc.wait(30)
        self.child.kill_group()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
