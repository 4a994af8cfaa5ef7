"""metricsExporterType=OTLP_GRPC (RocketMQ 5.1's BrokerMetricsManager with OtlpGrpcMetricExporter):
every metricGrpcExporterIntervalInMills the broker's metric families, the same ones /metrics serves,
are pushed to an OpenTelemetry collector at metricsGrpcExporterTarget as one
ExportMetricsServiceRequest: counters as cumulative monotonic sums (their names end in _total, as
RocketMQ's instruments are named), gauges as gauges, histograms with their explicit bounds. Every
point carries the family's labels plus metricsLabel's; metricsGrpcExporterHeader's pairs go as gRPC
metadata (a collector's auth header); a target without a scheme is reached over TLS, as RocketMQ's
exporter prefixes "https://".

The push runs in a thread of its own (a blocking grpcio stub: grpc.aio does not run on the broker's
uvloop), collecting as a Prometheus scrape does: the RocketMQ 5 families are computed on the event
loop. A collector that does not answer in metricGrpcExporterTimeOutInMills costs that push, logged
once per cause, never the broker."""
from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("broker")


def parse_pairs(text: str, key: str) -> dict[str, str]:
    """"k1:v1,k2:v2" (metricsLabel, metricsGrpcExporterHeader); a pair without one colon is skipped
    with a warning naming the key, as RocketMQ does."""
    out = {}
    for item in (p for p in text.split(",") if p.strip()):
        k, sep, v = item.partition(":")
        if not sep or ":" in v:
            log.warning("%s is not valid: %s", key, text)
            continue
        out[k.strip()] = v.strip()
    return out


def to_request(families, labels: dict[str, str], start_ns: int, now_ns: int):
    """prometheus_client metric families as one ExportMetricsServiceRequest."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
    from opentelemetry.proto.metrics.v1 import metrics_pb2 as m

    def attrs(sample_labels: dict) -> list:
        merged = {**sample_labels, **labels}
        return [KeyValue(key=k, value=AnyValue(string_value=str(v))) for k, v in merged.items()]

    metrics = []
    for f in families:
        if f.type == "counter":
            by_name: dict[str, list] = {}
            for s in f.samples:
                if s.name.endswith("_total"):
                    by_name.setdefault(s.name, []).append(s)
            for name, samples in by_name.items():
                metrics.append(m.Metric(name=name, description=f.documentation, sum=m.Sum(
                    aggregation_temporality=m.AGGREGATION_TEMPORALITY_CUMULATIVE, is_monotonic=True,
                    data_points=[m.NumberDataPoint(attributes=attrs(s.labels), start_time_unix_nano=start_ns,
                                                   time_unix_nano=now_ns, as_double=float(s.value))
                                 for s in samples])))
        elif f.type == "gauge":
            metrics.append(m.Metric(name=f.name, description=f.documentation, gauge=m.Gauge(data_points=[
                m.NumberDataPoint(attributes=attrs(s.labels), time_unix_nano=now_ns, as_double=float(s.value))
                for s in f.samples])))
        elif f.type == "histogram":
            series: dict[tuple, dict] = {}
            for s in f.samples:
                rest = {k: v for k, v in s.labels.items() if k != "le"}
                row = series.setdefault(tuple(sorted(rest.items())), {"labels": rest, "le": [], "count": 0, "sum": 0.0})
                if s.name.endswith("_bucket"):
                    row["le"].append((float("inf") if s.labels["le"] == "+Inf" else float(s.labels["le"]), s.value))
                elif s.name.endswith("_count"):
                    row["count"] = int(s.value)
                elif s.name.endswith("_sum"):
                    row["sum"] = float(s.value)
            points = []
            for row in series.values():
                le = sorted(row["le"])
                bounds = [b for b, _ in le if b != float("inf")]
                cumulative = [int(c) for _, c in le]
                counts = [c - (cumulative[i - 1] if i else 0) for i, c in enumerate(cumulative)]
                points.append(m.HistogramDataPoint(attributes=attrs(row["labels"]), start_time_unix_nano=start_ns,
                                                   time_unix_nano=now_ns, count=row["count"] or sum(counts),
                                                   sum=row["sum"], bucket_counts=counts, explicit_bounds=bounds))
            metrics.append(m.Metric(name=f.name, description=f.documentation, histogram=m.Histogram(
                aggregation_temporality=m.AGGREGATION_TEMPORALITY_CUMULATIVE, data_points=points)))
    return ExportMetricsServiceRequest(resource_metrics=[m.ResourceMetrics(scope_metrics=[
        m.ScopeMetrics(scope=InstrumentationScope(name="broker-meter"), metrics=metrics)])])


class OtlpExporter:
    def __init__(self, collect, config):
        """`collect`: the families now (BrokerMetrics.collect); `config`: the BrokerConfig."""
        self.collect = collect
        target = config.metricsGrpcExporterTarget.strip()
        self.secure = not target.startswith("http://")
        self.target = target.split("://", 1)[-1].rstrip("/")
        self.headers = tuple((k.lower(), v) for k, v in
                             parse_pairs(config.metricsGrpcExporterHeader, "metricsGrpcExporterHeader").items())
        self.labels = parse_pairs(config.metricsLabel, "metricsLabel")
        self.interval = config.metricGrpcExporterIntervalInMills / 1000
        self.timeout = config.metricGrpcExporterTimeOutInMills / 1000
        self.start_ns = time.time_ns()
        self.pushed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="otlp-exporter", daemon=True)
        self._thread.start()
        log.info("metrics pushed over OTLP to %s every %g s", self.target, self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 5)

    def _run(self) -> None:
        import grpc
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import MetricsServiceStub
        channel = (grpc.secure_channel(self.target, grpc.ssl_channel_credentials()) if self.secure
                   else grpc.insecure_channel(self.target))
        stub = MetricsServiceStub(channel)
        try:
            while not self._stop.wait(self.interval):
                self.push(stub)
        finally:
            channel.close()

    def push(self, stub) -> None:
        try:
            request = to_request(list(self.collect()), self.labels, self.start_ns, time.time_ns())
            stub.Export(request, timeout=self.timeout, metadata=self.headers)
            self.pushed += 1
            if self._failing:
                log.info("metrics pushed to %s again", self.target)
            self._failing = None
        except Exception as e:  # noqa: BLE001 - a collector down costs this push, not the broker
            why = f"{type(e).__name__}: {getattr(e, 'details', lambda: None)() or e}"
            if why != self._failing:
                log.warning("metrics not pushed to %s: %s", self.target, why)
                self._failing = why
