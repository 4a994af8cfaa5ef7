"""The gRPC front (`broker proxy`) beside a real name server and broker, and the real 5.x clients
driven as child processes, one JSON line per event: the Python one (PyPI rocketmq-python-client
5.1.2 in .venv-rocketmq5) through tests/clients/py5_client.py, the Node.js one (npm
rocketmq-client-nodejs 1.0.8 in tests/clients5/node_modules) through tests/clients5/node5_client.js."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import free_port
from tests.helpers.procs import REPO, Child
from tests.helpers.real_clients import CLIENTS, FAST_DELAYS, Cluster

PY5_PYTHON = REPO / ".venv-rocketmq5" / "bin" / "python"
CLIENTS5 = REPO / "tests" / "clients5"
NODE5_MODULE = CLIENTS5 / "node_modules" / "rocketmq-client-nodejs"


def check_installed(path: Path = PY5_PYTHON) -> None:
    assert path.exists(), f"{path} missing: run `make clients` (or `make test`)"


class GrpcFront:
    """`broker proxy -c proxy.conf` pointed at `cluster`'s name server (cluster mode)."""

    def __init__(self, cluster: Cluster, root: Path, extra_conf: str = ""):
        self.port = free_port()
        self.endpoints = f"127.0.0.1:{self.port}"
        conf = root / "proxy.conf"
        # the broker's delay levels, so that a delivery time maps to the level the broker applies
        conf.write_text(f"namesrvAddr={cluster.namesrv}\ngrpcServerPort={self.port}\nbindAddress=127.0.0.1\n"
                        f"messageDelayLevel={FAST_DELAYS}\n{extra_conf}")
        self.child = Child([sys.executable, "-m", "broker.cli", "proxy", "-c", str(conf)], root / "proxy.err")
        try:
            self.child.wait_lines(lambda ls: any("grpc proxy listening" in line for line in ls), 60, "the front to listen")
        except BaseException:
            self.child.kill_group()
            raise

    def close(self) -> None:
        self.child.kill_group()


@contextlib.contextmanager
def front_beside_cluster(root: Path, broker_conf: str = "", front_conf: str = ""):
    """A name server and broker (`broker_conf`) under root/cluster and a front (`front_conf`) in
    cluster mode before them; the front's `cluster` is theirs. A module's shared fixture."""
    with Cluster(root / "cluster", broker_conf) as cluster:
        front = GrpcFront(cluster, root, front_conf)
        front.cluster = cluster
        try:
            yield front
        finally:
            front.close()


@contextlib.contextmanager
def stub_of(front: GrpcFront):
    """A MessagingService stub on a plaintext channel of its own to `front`."""
    import grpc

    from broker.proxy.protocol import service_pb2_grpc as rpc
    channel = grpc.insecure_channel(front.endpoints)
    try:
        yield rpc.MessagingServiceStub(channel)
    finally:
        channel.close()


def py5_argv(cmd: str, opt: dict) -> list[str]:
    check_installed()
    return [str(PY5_PYTHON), str(CLIENTS / "py5_client.py"), cmd, json.dumps(opt)]


def node5_argv(cmd: str, opt: dict) -> list[str]:
    check_installed(NODE5_MODULE)
    return ["node", str(CLIENTS5 / "node5_client.js"), cmd, json.dumps(opt)]


def run_client(argv: list[str], what: str, env: dict | None = None) -> list[dict]:
    """Run a client driver to the end; its JSON lines but the last {"done"}. `env`: variables added
    to the client's environment."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=str(Path(argv[1]).parent),
                       env=None if env is None else {**os.environ, **env})
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and lines and lines[-1] == {"done": True}, \
        f"{what}: rc={p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
    return lines[:-1]


def py5(cmd: str, endpoints: str, topic: str, env: dict | None = None, **opt) -> list[dict]:
    """Run the 5.x Python client's `cmd` (produce, receive) to the end."""
    opt.update(endpoints=endpoints, topic=topic)
    return run_client(py5_argv(cmd, opt), f"5.x {cmd}", env)


def node5(cmd: str, endpoints: str, topic: str, **opt) -> list[dict]:
    """Run the 5.x Node.js client's `cmd` (produce, receive) to the end."""
    opt.update(endpoints=endpoints, topic=topic)
    return run_client(node5_argv(cmd, opt), f"node 5.x {cmd}")


def py5_produce(endpoints: str, topic: str, messages: list[dict], **opt) -> list[dict]:
    """The 5.x producer's receipts (or {"error": ...}), in the order of `messages`."""
    return py5("produce", endpoints, topic, messages=messages, **opt)


class Py5Push:
    """The 5.x PushConsumer (py5_client.py push) in its own process; `wait` reads the deliveries to
    its listener ({"body", "messageId", "deliveryAttempt", "result", ...}) as they come."""

    def __init__(self, endpoints: str, topic: str, group: str, tmp: Path, **opt):
        opt.update(endpoints=endpoints, topic=topic, group=group)
        self.child = Child(py5_argv("push", opt), tmp / f"py5-push-{group}.err", stdin=subprocess.PIPE)
        try:
            self.child.wait_lines(lambda ls: '{"ready": true}' in ls, 60, f"the 5.x PushConsumer of {group} to start")
        except BaseException:
            self.child.kill_group()
            raise

    def wait(self, predicate, timeout: float, what: str) -> list[dict]:
        def check(lines):
            got = [json.loads(line) for line in lines if line.startswith('{"body"')]
            return got if predicate(got) else None
        return self.child.wait_lines(check, timeout, what)

    def close(self) -> None:
        """Closes stdin: the driver shuts its consumer down and exits."""
        try:
            if self.child.proc.poll() is None:
                self.child.proc.stdin.close()
                self.child.wait_lines(lambda ls: '{"done": true}' in ls, 60, "the PushConsumer to shut down")
        finally:
            self.child.kill_group()

    def __enter__(self) -> "Py5Push":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def consumer_settings_reply(stub, topic: str, group: str):
    """The Settings the front answers a PushConsumer of `group` on `topic` with, on a Telemetry
    stream kept open until the reply was read (as a client's is)."""
    import threading

    from broker.proxy.protocol import definition_pb2 as pb
    from broker.proxy.protocol import service_pb2 as spb
    settings = pb.Settings(client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name=group), subscriptions=[pb.SubscriptionEntry(
            topic=pb.Resource(name=topic), expression=pb.FilterExpression(type=pb.TAG, expression="*"))]))
    closed = threading.Event()

    def commands():
        yield spb.TelemetryCommand(settings=settings)
        closed.wait(30)

    call = stub.Telemetry(commands(), metadata=(("x-mq-client-id", f"settings-{group}"),), timeout=30)
    try:
        reply = next(call)
    finally:
        closed.set()
        call.cancel()
    assert reply.status.code == pb.Code.OK, reply
    return reply.settings
