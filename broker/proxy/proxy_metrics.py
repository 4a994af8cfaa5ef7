"""The gRPC front's metrics (RocketMQ 5.1's ProxyMetricsManager and the connection gauges a Java
proxy's clients show up in): `rocketmq_proxy_up` with node_type="proxy" and proxy_mode, and the
5.x clients holding a Telemetry stream as `rocketmq_producer_connections` /
`rocketmq_consumer_connections` rows with protocol_type="grpc_v2".

In local mode the broker's /metrics (and OTLP push) carries them beside its own families
(BrokerController.front_metrics); `broker proxy` serves them itself on metricsPromExporterPort
when its metricsExporterType is PROM."""
from __future__ import annotations

import asyncio
import logging

from broker.proxy.protocol import definition_pb2 as pb

log = logging.getLogger("proxy")

_CONSUME_MODE = {pb.PUSH_CONSUMER: "push", pb.SIMPLE_CONSUMER: "pop", pb.PULL_CONSUMER: "pull",
                 pb.LITE_PUSH_CONSUMER: "push", pb.LITE_SIMPLE_CONSUMER: "pop"}


def client_rows(service) -> dict:
    """{"producers": n, "consumers": {(group, consume mode): n}} of the connected 5.x clients."""
    producers, consumers = 0, {}
    for ch in list(service.channels.channels.values()):
        s = ch.settings
        if s is None:
            continue
        if s.client_type == pb.PRODUCER:
            producers += 1
        elif s.client_type in _CONSUME_MODE and s.HasField("subscription"):
            key = (s.subscription.group.name, _CONSUME_MODE[s.client_type])
            consumers[key] = consumers.get(key, 0) + 1
    return {"producers": producers, "consumers": consumers}


def proxy_up(labels: dict, mode: str):
    """rocketmq_proxy_up: 1 while the front serves."""
    from prometheus_client.core import GaugeMetricFamily
    keys = list(labels) + ["proxy_mode"]
    f = GaugeMetricFamily("rocketmq_proxy_up", "proxy status", labels=keys)
    f.add_metric(list(labels.values()) + [mode], 1)
    return f


class ClusterModeCollector:
    """`broker proxy`'s /metrics: computed on the front's loop, asked from the HTTP thread."""

    def __init__(self, service, config, loop: asyncio.AbstractEventLoop):
        self.service, self.config, self.loop = service, config, loop

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily
        labels = {"cluster": self.config.proxyClusterName, "node_type": "proxy", "node_id": self.config.proxyName}
        yield proxy_up(labels, "cluster")

        async def rows():
            return client_rows(self.service)
        try:
            r = asyncio.run_coroutine_threadsafe(rows(), self.loop).result(10)
        except Exception as e:  # noqa: BLE001 - a scrape answers what it can
            log.warning("proxy metrics not computed this scrape: %s", e)
            return
        keys, values = list(labels), list(labels.values())
        p = GaugeMetricFamily("rocketmq_producer_connections", "Producer connections", labels=keys + ["protocol_type"])
        p.add_metric(values + ["grpc_v2"], r["producers"])
        yield p
        c = GaugeMetricFamily("rocketmq_consumer_connections", "Consumer connections",
                              labels=keys + ["consumer_group", "consume_mode", "protocol_type", "is_system"])
        for (group, mode), n in sorted(r["consumers"].items()):
            c.add_metric(values + [group, mode, "grpc_v2", "false"], n)
        yield c


def start_cluster_mode(service, config) -> object | None:
    """metricsExporterType=PROM on `broker proxy`: /metrics on metricsPromExporterHost:Port."""
    if config.metricsExporterType != "PROM":
        return None
    from prometheus_client import start_http_server
    from prometheus_client.core import CollectorRegistry
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterModeCollector(service, config, asyncio.get_running_loop()))
    host = config.metricsPromExporterHost or config.bindAddress
    server, _ = start_http_server(config.metricsPromExporterPort, addr=host, registry=registry)
    log.info("proxy metrics on http://%s:%d/metrics", host, config.metricsPromExporterPort)
    return server
