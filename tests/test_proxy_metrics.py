"""The gRPC front's metrics (RocketMQ 5.1's ProxyMetricsManager and the connection gauges): in
local mode the broker's /metrics carries rocketmq_proxy_up (node_type="proxy", proxy_mode="local")
and a row per 5.x client kind with protocol_type="grpc_v2"; `broker proxy` with
metricsExporterType=PROM serves the same on its own port (proxy_mode="cluster"). Real Telemetry
streams, opened and closed, move the figures."""
from __future__ import annotations

import threading
from contextlib import contextmanager

import grpc

from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.protocol import service_pb2_grpc as rpc
from tests.conftest import free_port
from tests.helpers.grpc_front import front_beside_cluster
from tests.helpers.ha_cluster import Broker, NameServer
from tests.helpers.procs import wait_until
from tests.test_metrics_rocketmq5 import _one, _scrape


@contextmanager
def _telemetry(endpoint: str, client_id: str, settings: pb.Settings):
    """A 5.x client's Telemetry stream with `settings`, open until the block ends."""
    done = threading.Event()

    def commands():
        yield spb.TelemetryCommand(settings=settings)
        done.wait(60)
    channel = grpc.insecure_channel(endpoint)
    stream = rpc.MessagingServiceStub(channel).Telemetry(commands(), metadata=(("x-mq-client-id", client_id),))
    try:
        first = next(stream)  # the front's answer: the settings are taken
        assert first.status.code == pb.Code.OK, first
        yield
    finally:
        done.set()
        stream.cancel()
        channel.close()


def _producer(topic: str) -> pb.Settings:
    return pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=topic)]))


def _simple_consumer(group: str, topic: str) -> pb.Settings:
    return pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name=group), subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name=topic))]))


def test_local_mode_broker_metrics_carry_the_fronts_clients(tmp_path):
    ns = NameServer(tmp_path)
    prom, grpc_port = free_port(), free_port()
    b = Broker(tmp_path, "b", ns.addr, "ASYNC_MASTER", 0,
               extra=f"grpcServerPort={grpc_port}\nmetricsExporterType=PROM\nmetricsPromExporterPort={prom}\n"
                     "autoCreateTopicEnable=true\n")
    b.start()
    endpoint = f"127.0.0.1:{grpc_port}"
    try:
        s = _scrape(prom)
        assert _one(s, "rocketmq_proxy_up", node_type="proxy", proxy_mode="local", node_id="broker-a") == 1
        assert _one(s, "rocketmq_producer_connections", protocol_type="grpc_v2") == 0
        with _telemetry(endpoint, "p-1", _producer("PmT")), _telemetry(endpoint, "p-2", _producer("PmT")), \
                _telemetry(endpoint, "c-1", _simple_consumer("PmG", "PmT")):
            s = _scrape(prom)
            assert _one(s, "rocketmq_producer_connections", protocol_type="grpc_v2") == 2
            assert _one(s, "rocketmq_producer_connections", protocol_type="remoting") >= 0  # the broker's own row stays
            assert _one(s, "rocketmq_consumer_connections", protocol_type="grpc_v2", consumer_group="PmG",
                        consume_mode="pop", is_system="false") == 1
        wait_until(lambda: _one(_scrape(prom), "rocketmq_producer_connections", protocol_type="grpc_v2") == 0, 10,
                   "the closed streams to leave the count")
    finally:
        b.stop()
        ns.stop()


def test_cluster_mode_front_serves_its_own_metrics(tmp_path):
    prom = free_port()
    with front_beside_cluster(tmp_path, front_conf=f"metricsExporterType=PROM\nmetricsPromExporterPort={prom}\n"
                                                   "metricsPromExporterHost=127.0.0.1\nproxyName=front-1\n") as front:
        s = _scrape(prom)
        assert _one(s, "rocketmq_proxy_up", node_type="proxy", proxy_mode="cluster", node_id="front-1",
                    cluster="DefaultCluster") == 1
        with _telemetry(front.endpoints, "c-9", _simple_consumer("PmG2", "PmT2")):
            s = _scrape(prom)
            assert _one(s, "rocketmq_consumer_connections", consumer_group="PmG2", protocol_type="grpc_v2") == 1
            assert _one(s, "rocketmq_producer_connections", protocol_type="grpc_v2") == 0
