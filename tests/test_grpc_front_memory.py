"""What the gRPC front keeps after short-lived 5.x clients left and after its broker restarted
(docs/soak.md, the one-hour run: the front's RssAnon rose 27 to 42 MiB, a step a fault).

The front runs in this process (a thread with its own loop, `serve` as `broker proxy` runs it) so
that its objects can be counted; the collector is off while the rounds run, so that what is
counted is what the front itself lets go, not what a collection happened to find. Each round
restarts the broker (kill -9, then the same store and port), then a real 5.x Producer and
SimpleConsumer (PyPI rocketmq 5.x, each its own process with its own client id and Telemetry
stream) send and receive through the front and exit."""
from __future__ import annotations

import asyncio
import gc
import threading

from broker.client.channel import ClientChannel
from broker.proxy.config import ProxyConfig
from broker.proxy.grpc_endpoint.server import GrpcServer
from broker.proxy.startup import serve
from tests.conftest import free_port
from tests.helpers.grpc_front import check_installed, py5
from tests.helpers.procs import wait_until
from tests.helpers.real_clients import FAST_DELAYS, Cluster

TOPIC = "FrontMemory"
ROUNDS = 3


class InProcessFront:
    def __init__(self, namesrv: str):
        self.port = free_port()
        self.endpoints = f"127.0.0.1:{self.port}"
        self.config = ProxyConfig(namesrvAddr=namesrv, grpcServerPort=self.port, bindAddress="127.0.0.1",
                                  messageDelayLevel=FAST_DELAYS)
        self.loop = asyncio.new_event_loop()
        self.service = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="front", daemon=True)
        self._thread.start()
        assert self._ready.wait(60), "the front did not start"
        self.server = next(o for o in gc.get_objects() if isinstance(o, GrpcServer) and self._listens(o))

    def _listens(self, server: GrpcServer) -> bool:
        """Whether `server` is this front's (another test's may not have been collected yet)."""
        for sock, _ in server._ports:
            try:
                if sock.getsockname()[1] == self.port:
                    return True
            except OSError:  # a stopped server's socket
                pass
        return False

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.stop = asyncio.Event()
        self.loop.run_until_complete(serve(self.config, self.stop, self._ready.set,
                                           on_service=lambda s: setattr(self, "service", s)))

    def state(self) -> dict:
        """What the front holds, read on its own loop."""
        async def read():
            return {"telemetry channels": len(self.service.channels.channels),
                    "receipt handles": len(self.service.consumers.renewals.handles),
                    "client connections": len(self.server.connections),
                    "tasks": len(asyncio.all_tasks())}
        return asyncio.run_coroutine_threadsafe(read(), self.loop).result(10)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self._thread.join(60)


def _closed_channels_bytes() -> int:
    """Bytes the front's broker connections that were lost still hold in their read buffers."""
    return sum(len(o.buf) for o in gc.get_objects() if isinstance(o, ClientChannel) and o.transport is None)


def _round(front: InProcessFront, r: int) -> None:
    sent = py5("produce", front.endpoints, TOPIC, messages=[{"body": f"m{r}-{i}"} for i in range(10)])
    assert all("messageId" in x for x in sent), sent
    got = py5("receive", front.endpoints, TOPIC, group="front-memory", count=10, rounds=3, awaitSeconds=1)
    assert {x["body"] for x in got if x.get("acked")} >= {f"m{r}-{i}" for i in range(10)}, got


def test_front_keeps_nothing_of_clients_that_left_nor_of_broker_connections_it_lost(tmp_path):
    check_installed()
    with Cluster(tmp_path / "cluster") as cluster:
        cluster.create_topic(TOPIC)
        front = InProcessFront(cluster.namesrv)
        try:
            _round(front, 0)  # its connections to the name server and broker, its routes
            wait_until(lambda: front.state()["client connections"] == 0, 30, "the first clients' connections to close")
            gc.collect()
            baseline = front.state()
            gc.disable()
            try:
                for r in range(1, ROUNDS + 1):
                    cluster.procs[1].kill_group()
                    cluster.restart_broker(f"broker{r}.err")
                    _round(front, r)
                wait_until(lambda: front.state()["client connections"] == 0, 30, "the clients' connections to close")
                left = front.state()
                lost_bytes = _closed_channels_bytes()
            finally:
                gc.enable()
            # each client's Telemetry stream, channel and settings went with its stream, no task
            # of it left waiting; each lost broker connection let its buffers go (1 MiB each)
            assert left == baseline, (left, baseline)
            assert lost_bytes == 0, f"lost broker connections still hold {lost_bytes} bytes"
        finally:
            front.close()
