"""Broker metrics: one snapshot (the shared offsets, the store's counters, the flush-latency
histogram the flush service keeps in the offset table, disk usage, services, connections, held
pulls) read on demand, served as Prometheus `/metrics` on metricsPort (or RocketMQ 5.1's
metricsExporterType=PROM on metricsPromExporterPort) and as the runtime table of
GET_BROKER_RUNTIME_INFO (`broker admin status`). Nothing is computed per message beyond the
store's integer counters. Beside this project's own families, /metrics carries RocketMQ 5.1's by
their names (rocketmq_metrics.py), computed on the event loop at each scrape."""
from __future__ import annotations

import asyncio
import logging
import math
import shutil
import time
from collections import deque

from broker.store.offset_table import FLUSH_BUCKETS, Slot
from broker.store.paths import commitlog_dir

log = logging.getLogger("broker")


class BrokerMetrics:
    def __init__(self, controller):
        self.c = controller
        # (monotonic time, messages put, messages got) every SAMPLE_PERIOD s: RocketMQ's putTps and
        # getTransferredTps are rates over the last 10 s, 1 min and 10 min
        self._samples: deque[tuple[float, int, int]] = deque(maxlen=61)
        self.boot_ms = int(time.time() * 1000)  # bootTimestamp: when this broker object came up
        self.traffic = None  # rocketmq_metrics.TopicTraffic and ConsumerLag, once the store is up (bind)
        self.lag = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._servers: list = []
        self.otlp = None  # OtlpExporter under metricsExporterType=OTLP_GRPC

    def bind(self, store, topics, consumers, stats) -> None:
        from broker.server.metrics.rocketmq_metrics import ConsumerLag, TopicTraffic
        self.traffic = TopicTraffic(store, topics)
        self.lag = ConsumerLag(store, topics, consumers, stats, self._pop_inflight)

    def _pop_inflight(self) -> dict | None:
        pop = self.c.pop  # made after bind(), and absent on a broker without pop
        return pop.revive.inflight_counts() if pop is not None else None

    async def _rocketmq5(self, labels: dict) -> list:
        from broker.server.metrics.rocketmq_metrics import families
        return families(self.c, labels)

    def sample(self) -> None:
        """Called every 10 s by the broker (and at start): the history the TPS figures read."""
        store = self.c.store
        self._samples.append((time.monotonic(), store.put_msgs, store.get_msgs))

    def _tps(self, index: int) -> str:
        """"tps10s tps1min tps10min" as RocketMQ's runtime info writes them: each over the newest
        sample at least that old (the oldest while the broker is younger than the window)."""
        store = self.c.store
        now, current = time.monotonic(), (store.put_msgs, store.get_msgs)[index - 1]
        rates = []
        for window in (10, 60, 600):
            old = next((s for s in reversed(self._samples) if now - s[0] >= window),
                       self._samples[0] if self._samples else None)
            rates.append(0.0 if old is None or now <= old[0] else (current - old[index]) / (now - old[0]))
        return " ".join(f"{r:.2f}" for r in rates)

    def _earliest_message_time(self, o: dict) -> int:
        """STORETIMESTAMP of the oldest message the commit log holds; -1 when it holds none."""
        if o["wrote"] <= o["min"]:
            return -1
        try:
            return self.c.store.lookup(o["min"]).store_timestamp
        except Exception:  # the oldest file is being deleted under us: no figure this time
            return -1

    def snapshot(self) -> dict[str, float]:
        c, store = self.c, self.c.store
        o = store.offsets()
        out: dict[str, float] = {f"offset_{k}": float(v) for k, v in o.items()
                                 if k in ("min", "wrote", "flushed", "dispatched", "acked", "received")}
        out.update(put_messages=store.put_msgs, put_bytes=store.put_bytes, get_messages=store.get_msgs,
                   get_bytes=store.get_bytes, disk_usage_ratio=o["disk_usage"], disk_full=o["disk_full"],
                   dispatch_blocked=o["dispatch_blocked"], flush_errors=o.get("flush_errors", 0),
                   deleted_commitlog_files=o["deleted_files"], writes_refused=store.refused_writes,
                   connections=len(c.server.connections) if c.server else 0, held_pulls=c.holds.held(),
                   tls_connections_accepted=c.server.tls_accepted if c.server else 0,
                   consumer_groups=len(c.consumers.groups))
        for status, n in store.put_status_counts().items():
            out[f"send_status_{status.name}"] = n
        timer = getattr(c, "timer", None)
        if timer is not None and timer.timer_log is not None:
            out.update(timer_enqueued=timer.enqueued, timer_delivered=timer.delivered, timer_rolled=timer.rolled,
                       timer_queue_offset=timer.queue_offset, timer_read_ms=timer.read_ms)
        if store.is_slave:
            out["slave_linked"] = o.get("linked", 0)
            # the HA client stops for good on the first failed fdatasync (broker.ha.ha_client)
            out["slave_replication_stopped"] = 1 if o.get("flush_errors") else 0
        else:
            out["slaves"] = o.get("slaves", 0)
            if o.get("slaves"):
                out["slave_lag_bytes"] = max(0, o["wrote"] - o["acked"])
        for name, svc in store.services.items():
            alive = svc.proc is not None and svc.proc.poll() is None
            out[f"service_up_{name}"] = 1.0 if alive else 0.0
            out[f"service_restarts_{name}"] = svc.restarts
        dledger = getattr(store, "dledger_status", None)  # DLedger mode's Raft figures
        if dledger is not None:
            out.update(dledger())
        t = store.table
        if t is not None:
            out["flush_count"] = t.load(Slot.FLUSH_COUNT)
            out["flush_seconds_sum"] = t.load(Slot.FLUSH_NS) / 1e9
        return out

    def runtime_table(self) -> dict:
        """GET_BROKER_RUNTIME_INFO's table (`broker admin status`): RocketMQ's keys, then the
        same figures /metrics serves."""
        c, store = self.c, self.c.store
        o = store.offsets()
        table = {"brokerVersionDesc": "V4_9_4", "brokerRole": store.config.brokerRole,
                 "commitLogMinOffset": o["min"], "commitLogMaxOffset": o["wrote"], "flushedOffset": o["flushed"],
                 "dispatchedOffset": o["dispatched"], "putMessageEntireTimeMax": 0,
                 "pullHeldRequests": c.holds.held(), "topics": len(c.topics.table.topics),
                 # what mqadmin clusterList and brokerStatus read; no thread pools queue requests
                 # here (each is handled on arrival), so their queue sizes and waits are 0
                 "putTps": self._tps(1), "getTransferredTps": self._tps(2),
                 "sendThreadPoolQueueSize": 0, "sendThreadPoolQueueHeadWaitTimeMills": 0,
                 "pullThreadPoolQueueSize": 0, "pullThreadPoolQueueHeadWaitTimeMills": 0,
                 "pageCacheLockTimeMills": 0, "earliestMessageTimeStamp": self._earliest_message_time(o),
                 "commitLogDiskRatio": round(o["disk_usage"], 6), "brokerActive": "false" if store.is_slave else "true"}
        # RocketMQ's counters (mqadmin brokerStatus, the dashboard). The day boundaries are not
        # kept: the morning counts are 0, so "today" reads as "since the broker started".
        put_msgs, put_bytes = store.put_msgs, store.put_bytes
        up = int(time.time() * 1000) - self.boot_ms
        table.update({
            "msgPutTotalTodayNow": put_msgs, "msgGetTotalTodayNow": store.get_msgs,
            "msgPutTotalTodayMorning": 0, "msgPutTotalYesterdayMorning": 0,
            "msgGetTotalTodayMorning": 0, "msgGetTotalYesterdayMorning": 0,
            "putMessageTimesTotal": put_msgs, "putMessageSizeTotal": put_bytes,
            "putMessageAverageSize": put_bytes / put_msgs if put_msgs else 0.0,
            "putMessageFailedTimes": sum(store.put_failed.values()),
            "remainHowManyDataToFlush": max(0, o["wrote"] - o["flushed"]),
            "dispatchBehindBytes": max(0, o["wrote"] - o["dispatched"]),
            "consumeQueueDiskRatio": round(o["disk_usage"], 6),  # one store root: the commit log's disk
            f"commitLogDiskRatio_{commitlog_dir(store.config.storePathRootDir)}": round(o["disk_usage"], 6),
            "commitLogDirCapacity": _dir_capacity(commitlog_dir(store.config.storePathRootDir)),
            # no transient store pool here: RocketMQ's figure without one
            "remainTransientStoreBufferNumbs": 2**31 - 1,
            "bootTimestamp": self.boot_ms, "startAcceptSendRequestTimeStamp": 0,
            "runtime": f"[ {up // 86_400_000} days, {up // 3_600_000 % 24} hours, {up // 60_000 % 60} minutes, "
                       f"{up // 1000 % 60} seconds ]"})
        table.update({k: o[k] for k in ("acked", "slaves", "received", "linked", "dLedgerRole", "dLedgerTerm",
                                        "dLedgerLeader", "dLedgerCommittedIndex", "dLedgerEndIndex") if k in o})
        table.update({k: (int(v) if float(v).is_integer() else round(v, 6)) for k, v in self.snapshot().items()})
        r = c.replicas
        if r is not None:  # controller mode: what the controller made of this broker
            table.update({"controllerRole": r.role or "none", "controllerBrokerId": -1 if r.broker_id is None
                          else r.broker_id, "masterEpoch": r.serving_epoch, "roleSwitches": r.switches,
                          "syncStateSet": ",".join(map(str, sorted(r.sync_state_set))),
                          "syncStateSetEpoch": r.sync_state_set_epoch})
        return table

    def status_line(self, since: dict[str, float] | None = None, seconds: float = 0.0) -> str:
        """One human line for the log (`broker serve --status-interval`): sizes with units, and
        rates over `seconds` since the snapshot `since` when given."""
        snap = self.snapshot()
        wrote = snap["offset_wrote"]
        parts = [f"commit log {_bytes(wrote - snap['offset_min'])} up to {int(wrote)}",
                 f"unflushed {_bytes(wrote - snap['offset_flushed'])}",
                 f"undispatched {_bytes(wrote - snap['offset_dispatched'])}"]
        for what in ("put", "get"):
            n, b = snap[f"{what}_messages"], snap[f"{what}_bytes"]
            text = f"{what} {int(n)} msgs ({_bytes(b)})"
            if since is not None and seconds > 0:
                text += (f" {(n - since[f'{what}_messages']) / seconds:.0f} msgs/s"
                         f" {_bytes((b - since[f'{what}_bytes']) / seconds)}/s")
            parts.append(text)
        parts.append(f"disk {100 * snap['disk_usage_ratio']:.1f}% used" + (" (FULL: writes refused)"
                                                                          if snap["disk_full"] else ""))
        if "slaves" in snap:
            parts.append(f"slaves {int(snap['slaves'])}" + (f" (lag {_bytes(snap['slave_lag_bytes'])})"
                                                           if "slave_lag_bytes" in snap else ""))
        if "slave_linked" in snap:
            parts.append("linked to master" if snap["slave_linked"] else "NOT linked to master")
        parts.append(f"{int(snap['connections'])} connections")
        return ", ".join(parts)

    def flush_buckets(self) -> list[tuple[str, float]]:
        """Cumulative (le, count) pairs of the flush-latency histogram."""
        t, acc, out = self.c.store.table, 0, []
        for i, bound in enumerate(FLUSH_BUCKETS):
            acc += t.load(Slot.FLUSH_BUCKET0 + i)
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(acc)))
        return out

    # -- Prometheus ----------------------------------------------------------------------------
    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
        snap = self.snapshot()
        labels = {"cluster": self.c.config.brokerClusterName, "broker": self.c.config.brokerName,
                  "broker_id": str(self.c.config.brokerId)}
        keys, values = list(labels), list(labels.values())

        def counter(name, doc, v):
            f = CounterMetricFamily(f"rocketmq_{name}", doc, labels=keys)
            f.add_metric(values, v)
            return f

        def gauge(name, doc, v, extra=None):
            f = GaugeMetricFamily(f"rocketmq_{name}", doc, labels=keys + list(extra or {}))
            f.add_metric(values + list((extra or {}).values()), v)
            return f
        if self._loop is not None and self.c.store is not None and self.c.topics is not None:
            # RocketMQ 5.1's families read the queues and the tables the event loop changes: they
            # are computed there, not in this HTTP server's thread
            rlabels = {"cluster": self.c.config.brokerClusterName, "node_type": "broker",
                       "node_id": self.c.config.brokerName}
            try:
                yield from asyncio.run_coroutine_threadsafe(self._rocketmq5(rlabels), self._loop).result(10)
            except Exception as e:  # a scrape answers what it can; the log says what it could not
                log.warning("RocketMQ 5 metrics not computed this scrape: %s", e)
        yield counter("put_messages", "messages appended to the commit log", snap["put_messages"])
        yield counter("put_bytes", "record bytes appended", snap["put_bytes"])
        yield counter("get_messages", "messages returned by pulls", snap["get_messages"])
        yield counter("get_bytes", "record bytes returned by pulls", snap["get_bytes"])
        yield counter("writes_refused", "puts refused for a full disk", snap["writes_refused"])
        yield counter("deleted_commitlog_files", "commit-log segments deleted by the cleaner",
                      snap["deleted_commitlog_files"])
        sends = CounterMetricFamily("rocketmq_send_status", "final status of appended messages",
                                    labels=keys + ["status"])
        for k, v in snap.items():
            if k.startswith("send_status_"):
                sends.add_metric(values + [k[len("send_status_"):]], v)
        yield sends
        offsets = GaugeMetricFamily("rocketmq_offset", "shared offsets of the store (commit-log bytes)",
                                    labels=keys + ["offset"])
        for k, v in snap.items():
            if k.startswith("offset_"):
                offsets.add_metric(values + [k[len("offset_"):]], v)
        yield offsets
        h = HistogramMetricFamily("rocketmq_flush_seconds", "duration of the flush service's fdatasync rounds",
                                  labels=keys)
        h.add_metric(values, self.flush_buckets(), snap.get("flush_seconds_sum", 0.0))
        yield h
        for name, doc in (("disk_usage_ratio", "used fraction of the store's filesystem"),
                          ("disk_full", "1 while writes are refused for disk usage"),
                          ("dispatch_blocked", "the errno consume queues cannot be written for (writes are "
                           "refused meanwhile), 0 when they can"),
                          ("flush_errors", "failed fdatasync calls of the commit log (after one, writes are "
                           "refused until a restart)"),
                          ("connections", "open remoting connections"), ("held_pulls", "long polls held"),
                          ("tls_connections_accepted", "remoting connections that began a TLS handshake"),
                          ("timer_enqueued", "timer messages put into the timer wheel since start"),
                          ("timer_delivered", "timer messages delivered to their topics since start"),
                          ("timer_rolled", "timer messages parked again past the roll window since start"),
                          ("timer_queue_offset", "the next entry of rmq_sys_wheel_timer the wheel takes"),
                          ("timer_read_ms", "the next timer slot to read (a slave: its master's, as copied)"),
                          ("consumer_groups", "consumer groups with members"), ("slaves", "linked slaves"),
                          ("slave_lag_bytes", "master's wrote minus the best slave's acknowledgement"),
                          ("slave_linked", "1 while this slave is linked to its master"),
                          ("slave_replication_stopped", "1 once this slave's commit-log fdatasync failed: it "
                           "replicates and acknowledges nothing more until restarted")):
            if name in snap:
                yield gauge(name, doc, snap[name])
        for name, doc in (("dledger_term", "this DLedger member's term"),
                          ("dledger_leader", "1 while this DLedger member leads its group"),
                          ("dledger_committed_index", "the last entry a majority holds"),
                          ("dledger_end_index", "the last entry of this member's log"),
                          ("dledger_flushed_index", "the last entry written back to this member's disk"),
                          ("dledger_disk_failed", "1 once a write-back of this member's log failed: it takes and "
                           "acknowledges no entries until restarted")):
            if name in snap:
                yield gauge(name, doc, snap[name])
        lag = GaugeMetricFamily("rocketmq_dledger_follower_lag_entries", "on the DLedger leader: entries a follower "
                                "is behind its log's end", labels=keys + ["peer"])
        for k, v in snap.items():
            if k.startswith("dledger_follower_lag_"):
                lag.add_metric(values + [k[len("dledger_follower_lag_"):]], v)
        yield lag
        up = GaugeMetricFamily("rocketmq_service_up", "1 while the service process is alive", labels=keys + ["service"])
        restarts = CounterMetricFamily("rocketmq_service_restarts", "service restarts", labels=keys + ["service"])
        for k, v in snap.items():
            if k.startswith("service_up_"):
                up.add_metric(values + [k[len("service_up_"):]], v)
            elif k.startswith("service_restarts_"):
                restarts.add_metric(values + [k[len("service_restarts_"):]], v)
        yield up
        yield restarts

    def start(self, host: str, port: int) -> None:
        from prometheus_client import start_http_server
        from prometheus_client.core import CollectorRegistry
        self._loop = asyncio.get_running_loop()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        server, _ = start_http_server(port, addr=host, registry=registry)
        self._servers.append(server)
        log.info("metrics on http://%s:%d/metrics", host, port)

    def start_otlp(self, config) -> None:
        from broker.server.metrics.otlp_exporter import OtlpExporter
        self._loop = asyncio.get_running_loop()
        self.otlp = OtlpExporter(self.collect, config)
        self.otlp.start()

    def stop(self) -> None:
        if self.otlp is not None:
            self.otlp.stop()
            self.otlp = None
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()


def _bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _human(n: int) -> str:
    """MixAll.humanReadableByteCount(n, false): binary units, one decimal."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024 ** exp:.1f} {'KMGTPE'[exp - 1]}iB"


def _dir_capacity(path: str) -> str:
    """commitLogDirCapacity as RocketMQ writes it: "Total : 50.0 GiB, Free : 20.3 GiB."."""
    try:
        du = shutil.disk_usage(path)
    except OSError:
        return "-1"
    return f"Total : {_human(du.total)}, Free : {_human(du.free)}."
