"""RocketMQ 5.1's metric names on /metrics (metricsExporterType=PROM, metricsPromExporterPort), read
while a client produces and consumes: messages and bytes in per topic, the message-size histogram,
messages out per topic and group, and a consumer group's lag, in-flight and ready messages (the
lag checked against `broker admin offsets`), connections, topics, groups and the storage gauges."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request

import pytest

from broker.common import extra_info as ei
from broker.remoting import codes
from broker.server.broker_config import BrokerConfig
from broker.store.errors import StoreConfigError
from tests.conftest import free_port
from tests.helpers.ha_cluster import Broker, NameServer, send_all
from tests.helpers.procs import REPO, wait_until
from tests.helpers.raw_wire import RawConn, bodies

TOPIC, GROUP, POP_GROUP = "MetricsT", "MetricsG", "MetricsPopG"


def _scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """Every sample: (name, its labels) -> value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$", line)
        if m:
            labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def _one(samples: dict, name: str, **want) -> float:
    hits = [v for (n, labels), v in samples.items()
            if n == name and all((k, str(x)) in labels for k, x in want.items())]
    assert len(hits) == 1, f"{name} {want}: {len(hits)} samples"
    return hits[0]


def test_rocketmq5_names_count_traffic_and_the_lag_admin_offsets_reports(tmp_path):
    ns = NameServer(tmp_path)
    prom = free_port()
    b = Broker(tmp_path, "b", ns.addr, "ASYNC_MASTER", 0,
               extra=f"metricsExporterType=PROM\nmetricsPromExporterPort={prom}\nautoCreateTopicEnable=true\n")
    b.start()
    try:
        wait_until(lambda: ns.route("TBW102") is not None, 30, "the broker registered")
        responses = send_all(b.port, TOPIC, [b"x" * 100 for _ in range(40)], queues=4)  # 10 per queue
        assert all(r.code == codes.SUCCESS for r in responses)
        conn = RawConn(b.port)
        beat = {"clientID": "127.0.0.1@metrics", "producerDataSet": [],
                "consumerDataSet": [{"groupName": GROUP, "consumeType": "CONSUME_ACTIVELY",
                                     "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                                     "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "tagsSet": [],
                                                              "codeSet": [], "subVersion": 0}], "unitMode": False}]}
        assert conn.request(codes.HEART_BEAT, {}, json.dumps(beat).encode()).code == codes.SUCCESS
        got = bodies(conn.request(codes.PULL_MESSAGE, {
            "consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "queueOffset": "0", "maxMsgNums": 6, "sysFlag": 0,
            "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}))
        assert len(got) == 6
        # a pop group (as a 5.x SimpleConsumer through the front): 5 popped from queue 1, 2 of them acked
        beat["consumerDataSet"][0].update(groupName=POP_GROUP, consumeType="CONSUME_POP")
        assert conn.request(codes.HEART_BEAT, {}, json.dumps(beat).encode()).code == codes.SUCCESS
        r = conn.request(codes.POP_MESSAGE, {
            "consumerGroup": POP_GROUP, "topic": TOPIC, "queueId": "1", "maxMsgNums": "5", "invisibleTime": "60000",
            "pollTime": "0", "bornTime": str(int(time.time() * 1000)), "initMode": "0", "expType": "TAG",
            "exp": "*", "order": "false"})
        assert r.code == codes.SUCCESS and len(bodies(r)) == 5, (r.code, r.remark)
        start = ei.parse_start_offset_info(r.ext["startOffsetInfo"])[ei.queue_key(TOPIC, 1)]
        for offset in (start, start + 1):
            handle = ei.build(start, int(r.ext["popTime"]), int(r.ext["invisibleTime"]), int(r.ext["reviveQid"]),
                              TOPIC, "broker-a", 1, offset)
            a = conn.request(codes.ACK_MESSAGE, {"consumerGroup": POP_GROUP, "topic": TOPIC, "queueId": 1,
                                                 "extraInfo": handle, "offset": offset})
            assert a.code == codes.SUCCESS, a.remark
        for q, committed in enumerate((4, 10, 7, 0)):
            r = conn.request(codes.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q,
                                                            "commitOffset": committed})
            assert r.code == codes.SUCCESS
        time.sleep(0.002)  # the lag latencies are in whole milliseconds: at least one has passed
        # the in-counters follow the consume queues, a dispatch (about a millisecond) behind a SEND_OK
        wait_until(lambda: _one(_scrape(prom), "rocketmq_message_size_count", topic=TOPIC) == 40, 10, "40 dispatched")
        s = _scrape(prom)
        common = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
        assert _one(s, "rocketmq_messages_in_total", topic=TOPIC, message_type="normal", **common) == 40
        assert _one(s, "rocketmq_message_size_bucket", topic=TOPIC, le="1024") == 40
        record_bytes = _one(s, "rocketmq_throughput_in_total", topic=TOPIC)
        assert record_bytes == _one(s, "rocketmq_message_size_sum", topic=TOPIC) and 40 * 100 < record_bytes < 40 * 1024
        assert _one(s, "rocketmq_messages_out_total", topic=TOPIC, consumer_group=GROUP, is_retry="false") == 6
        assert 6 * 100 < _one(s, "rocketmq_throughput_out_total", topic=TOPIC, consumer_group=GROUP) < 6 * 1024
        # lag: max - committed per queue (6 + 0 + 3 + 10); in flight: pulled - committed (queue 0:
        # 6 - 4); ready: max - pulled (4 + 0 + 3 + 10)
        lag = _one(s, "rocketmq_consumer_lag_messages", topic=TOPIC, consumer_group=GROUP, is_system="false")
        assert lag == 19
        assert _one(s, "rocketmq_consumer_inflight_messages", topic=TOPIC, consumer_group=GROUP) == 2
        assert _one(s, "rocketmq_consumer_ready_messages", topic=TOPIC, consumer_group=GROUP) == 17
        # the pop group (ConsumerLagCalculator's pop formulas): in flight, the 3 popped and not acked;
        # ready, queue 1's 10 less the 5 popped; lag, both (the other queues: no offset, no lag)
        assert _one(s, "rocketmq_consumer_inflight_messages", topic=TOPIC, consumer_group=POP_GROUP) == 3
        assert _one(s, "rocketmq_consumer_ready_messages", topic=TOPIC, consumer_group=POP_GROUP) == 5
        assert _one(s, "rocketmq_consumer_lag_messages", topic=TOPIC, consumer_group=POP_GROUP) == 8
        assert _one(s, "rocketmq_consumer_connections", consumer_group=POP_GROUP, consume_mode="pop") == 1
        assert 0 < _one(s, "rocketmq_consumer_lag_latency", topic=TOPIC, consumer_group=GROUP) < 120_000
        assert 0 < _one(s, "rocketmq_consumer_queueing_latency", topic=TOPIC, consumer_group=GROUP) < 120_000
        assert _one(s, "rocketmq_consumer_connections", consumer_group=GROUP, consume_mode="pull") == 1
        assert _one(s, "rocketmq_topic_number") >= 2 and _one(s, "rocketmq_consumer_group_number") >= 1
        # rocketmq_rpc_latency: every request answered, by RocketMQ's code names, in RocketMQ's buckets
        rpc = {"protocol_type": "remoting", "is_long_polling": "false", "result": "success"}
        assert _one(s, "rocketmq_rpc_latency_count", request_code="update_consumer_offset", response_code="success",
                    **rpc) == 4
        assert _one(s, "rocketmq_rpc_latency_bucket", request_code="heart_beat", le="1.0", **rpc) <= 2
        assert _one(s, "rocketmq_rpc_latency_bucket", request_code="heart_beat", le="+Inf", **rpc) == 2
        assert _one(s, "rocketmq_rpc_latency_count", request_code="pull_message", is_long_polling="true") == 1
        assert sum(v for (n, labels), v in s.items() if n == "rocketmq_rpc_latency_count" and
                   {("request_code", "send_message"), ("request_code", "send_message_v2")} & labels) == 40
        assert _one(s, "rocketmq_storage_size") > 40 * 100
        for name in ("rocketmq_storage_flush_behind_bytes", "rocketmq_storage_dispatch_behind_bytes",
                     "rocketmq_storage_message_reserve_time", "rocketmq_producer_connections"):
            assert _one(s, name) >= 0
        # what the operator's command line says is the same lag
        r = subprocess.run([sys.executable, "-m", "broker.cli", "admin", "offsets", "-n", ns.addr, "-g", GROUP,
                            "-t", TOPIC], capture_output=True, text=True, timeout=60, cwd=str(REPO))
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[-1] == f"total lag {int(lag)}"
        # a send moves the counters at the next scrape, with no per-message work on the way
        assert all(r.code == codes.SUCCESS for r in send_all(b.port, TOPIC, [b"y" * 2000], queues=1))
        wait_until(lambda: _one(_scrape(prom), "rocketmq_messages_in_total", topic=TOPIC) == 41, 10, "41 dispatched")
        s = _scrape(prom)
        assert _one(s, "rocketmq_message_size_bucket", topic=TOPIC, le="4096") == 41
        assert _one(s, "rocketmq_consumer_lag_messages", topic=TOPIC, consumer_group=GROUP) == 20
        # the Grafana dashboard shipped in docs/ reads only families this broker serves
        dashboard = json.loads((REPO / "docs" / "grafana" / "rocketmq-broker.json").read_text())
        used = {re.sub(r"_(bucket|count|sum)$", "", n) for p in dashboard["panels"] for t in p["targets"]
                for n in re.findall(r"rocketmq_\w+", t["expr"])}
        served = {re.sub(r"_(bucket|count|sum)$", "", n) for n, _ in s}
        assert used and used <= served, used - served
        conn.close()
    finally:
        b.stop()
        ns.stop()


@pytest.mark.parametrize("value, why", [("OTLP_GRPC", "metricsGrpcExporterTarget"), ("LOG", "not served by this broker"),
                                        ("GRAPHITE", "is not one of")])
def test_a_metrics_exporter_this_broker_does_not_serve_is_refused_naming_the_key(value, why):
    with pytest.raises(StoreConfigError) as e:
        BrokerConfig(metricsExporterType=value)
    assert ("metricsExporterType" in str(e.value) or value == "OTLP_GRPC") and why in str(e.value)
    assert BrokerConfig(metricsExporterType="prom").metricsExporterType == "PROM"


class _Collector:
    """An OpenTelemetry collector's MetricsService on a loopback port (grpcio's server, in this
    process): what each Export brought, with its metadata."""

    def __init__(self):
        import grpc
        from concurrent import futures
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as ms
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as rpc
        self.requests: list = []
        outer = self

        class Service(rpc.MetricsServiceServicer):
            def Export(self, request, context):
                outer.requests.append((request, dict(context.invocation_metadata())))
                return ms.ExportMetricsServiceResponse()
        self.server = grpc.server(futures.ThreadPoolExecutor(2))
        rpc.add_MetricsServiceServicer_to_server(Service(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def points(self, name: str) -> list:
        """The data points of metric `name` in the last request, each as (attributes, point)."""
        request, _ = self.requests[-1]
        out = []
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == name:
                        kind = m.WhichOneof("data")
                        for p in getattr(m, kind).data_points:
                            out.append(({a.key: a.value.string_value for a in p.attributes}, p))
        return out


def test_otlp_grpc_pushes_the_same_families_to_a_collector(tmp_path):
    """metricsExporterType=OTLP_GRPC: the broker pushes RocketMQ's names to an OpenTelemetry
    collector, with metricsLabel on every point and metricsGrpcExporterHeader as metadata."""
    collector = _Collector()
    ns = NameServer(tmp_path)
    b = Broker(tmp_path, "b", ns.addr, "ASYNC_MASTER", 0,
               extra=f"metricsExporterType=OTLP_GRPC\nmetricsGrpcExporterTarget=http://127.0.0.1:{collector.port}\n"
                     "metricsGrpcExporterHeader=authorization:Bearer t0k\nmetricGrpcExporterIntervalInMills=300\n"
                     "metricsLabel=region:test-1\nautoCreateTopicEnable=true\n")
    b.start()
    try:
        assert all(r.code == codes.SUCCESS for r in send_all(b.port, TOPIC, [b"x" * 100 for _ in range(12)], queues=4))

        def pushed_12() -> bool:
            if not collector.requests:
                return False
            return sum(p.as_double for a, p in collector.points("rocketmq_messages_in_total")
                       if a.get("topic") == TOPIC) == 12
        wait_until(pushed_12, 20, "a push counting the 12 messages")
        attrs, point = next((a, p) for a, p in collector.points("rocketmq_messages_in_total") if a.get("topic") == TOPIC)
        assert attrs["region"] == "test-1" and attrs["node_id"] == "broker-a" and attrs["cluster"] == "DefaultCluster"
        assert point.start_time_unix_nano < point.time_unix_nano
        [(_, size)] = [(a, p) for a, p in collector.points("rocketmq_message_size") if a.get("topic") == TOPIC]
        assert size.count == 12 and list(size.explicit_bounds)[:2] == [1024.0, 4096.0] and size.bucket_counts[0] == 12
        assert any(a.get("request_code") for a, _ in collector.points("rocketmq_rpc_latency"))
        assert collector.points("rocketmq_storage_size")[0][1].as_double > 0  # a gauge
        assert collector.requests[-1][1].get("authorization") == "Bearer t0k"
    finally:
        b.stop()
        ns.stop()
        collector.server.stop(0)
