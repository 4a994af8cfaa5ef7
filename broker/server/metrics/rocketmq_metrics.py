"""RocketMQ 5.1's broker metrics by their own names and labels (BrokerMetricsManager,
ConsumerLagCalculator, DefaultStoreMetricsManager), so that an operator's dashboards read this
broker as they read Apache RocketMQ's.

Every family carries cluster, node_type="broker" and node_id (brokerName), as RocketMQ's LABEL_MAP.
Nothing here is counted per message on the request path:
- messages and bytes in, per topic, and the message-size histogram are read from the consume
  queues at scrape time: the entries each queue gained since the last scrape (their record sizes,
  in one numpy pass), so a send costs nothing more than it did;
- messages and bytes out, per topic and consumer group, are the pull processor's per-request
  counts (BrokerStatsManager, which mqadmin statsAll reads too);
- lag, in-flight, ready and the two latencies are computed per queue at scrape time from the
  queue's max offset, the group's committed offset and its last pulled offset, with the store
  time of the message at each (ConsumerLagCalculator's formulas); for a pop group the offset its
  pops moved and the messages its checkpoints hold unacked.

Where a figure differs from RocketMQ's, docs/compat.md says how (throughput counts stored record
bytes, not bodies; message_type is the topic's message.type, as this broker keeps no per-message type).
"""
from __future__ import annotations

import time

import numpy as np

from broker.common.topic_validator import DLQ_PREFIX, RETRY_PREFIX, SYSTEM_TOPIC_PREFIX
from broker.server.processor.offset_search import queue_store_time

# rocketmq_message_size's buckets (BrokerMetricsManager.registerMetricsView): 1 KiB .. 4 MiB
SIZE_BUCKETS = (1024, 4 * 1024, 512 * 1024, 1 << 20, 2 << 20, 4 << 20)
SCAN_LIMIT = 1 << 20  # consume-queue entries read per queue per scrape at most (the rest next time)
SYSTEM_GROUP_PREFIX = "cid_rmq_sys_"  # MixAll.CID_RMQ_SYS_PREFIX, compared in lower case


def is_system(topic: str, group: str = "") -> bool:
    return topic.startswith(SYSTEM_TOPIC_PREFIX) or topic in ("TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
                                                               "RMQ_SYS_TRANS_OP_HALF_TOPIC") \
        or group.lower().startswith(SYSTEM_GROUP_PREFIX)


def message_type(cfg) -> str:
    """TopicMessageType's metrics value: the topic's message.type attribute, else FIFO for a topic
    made orderly and NORMAL for any other."""
    kind = (getattr(cfg, "attributes", None) or {}).get("message.type") if cfg is not None else None
    if kind:
        return kind.lower()
    return "fifo" if cfg is not None and getattr(cfg, "order", False) else "normal"


class TopicTraffic:
    """Messages, stored bytes and the size histogram each topic gained since the broker started,
    from its consume queues: a cursor per queue, moved at every scrape."""

    def __init__(self, store, topics):
        self.store = store
        self.topics = topics
        self._cursor: dict[tuple[str, int], int] = {}
        self.totals: dict[str, list] = {}  # topic -> [messages, bytes, bucket counts (len(SIZE_BUCKETS) + 1)]
        for name in list(topics.table.topics):  # what was there before the broker started is not counted
            for q in range(self._queues(name)):
                self._cursor[(name, q)] = max(store.max_offset(name, q), 0)

    def _queues(self, topic: str) -> int:
        cfg = self.topics.get(topic)
        return max(cfg.readQueueNums, cfg.writeQueueNums) if cfg is not None else 0

    def refresh(self) -> None:
        cqs = self.store.cqs
        if cqs is None:
            return
        bounds = np.array(SIZE_BUCKETS, dtype=np.int64)
        for name in list(self.topics.table.topics):
            t = self.totals.get(name)
            for q in range(self._queues(name)):
                cq = cqs.find(name, q)
                if cq is None:
                    continue
                cur = max(self._cursor.get((name, q), 0), cq.min_offset)
                end = min(self.store.max_offset(name, q), cur + SCAN_LIMIT)
                while cur < end:
                    sizes = cq.entries(cur, end - cur)["size"]
                    if not len(sizes):
                        break
                    if t is None:
                        t = self.totals[name] = [0, 0, [0] * (len(SIZE_BUCKETS) + 1)]
                    t[0] += len(sizes)
                    t[1] += int(sizes.sum(dtype=np.int64))
                    for i, n in enumerate(np.bincount(np.searchsorted(bounds, sizes.astype(np.int64)),
                                                      minlength=len(SIZE_BUCKETS) + 1)):
                        t[2][i] += int(n)
                    cur += len(sizes)
                self._cursor[(name, q)] = cur


class ConsumerLag:
    """Per (consumer group, topic) of every online group's subscriptions (retry topics left out, as
    RocketMQ's processAllGroup): lag, in-flight and ready messages, and the store times of the
    first unconsumed and the first unpulled message."""

    def __init__(self, store, topics, consumers, stats, pop_inflight=None):
        self.store = store
        self.topics = topics
        self.consumers = consumers
        self.stats = stats
        # () -> {(group, topic, queue id): popped, not acked} (PopReviveService.inflight_counts), or None
        self.pop_inflight = pop_inflight

    def rows(self) -> list[dict]:
        out = []
        offsets = self.store.consumer_offsets
        pulled = self.stats.pull_offsets if self.stats is not None else {}
        popped = None  # counted once per scrape, when a pop group asks
        for group, info in list(self.consumers.groups.items()):
            pop = info.consume_type == "CONSUME_POP"
            if pop and popped is None:
                popped = (self.pop_inflight() if self.pop_inflight is not None else None) or {}
            for topic in list(info.subscriptions):
                if topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX):
                    continue
                cfg = self.topics.get(topic)
                if cfg is None:
                    continue
                row = {"group": group, "topic": topic, "lag": 0, "inflight": 0, "ready": 0,
                       "unconsumed_ts": 0, "unpulled_ts": 0}
                for q in range(cfg.writeQueueNums):
                    top = max(self.store.max_offset(topic, q), 0)
                    committed = offsets.query(group, topic, q)
                    committed = top if committed < 0 else min(committed, top)
                    if pop:
                        # a pop moves the group's offset as it pops: that is the pull offset, and
                        # what is in flight are the popped messages not acked (getConsumerLagStats)
                        pull = committed
                        inflight = popped.get((group, topic, q), 0)
                        committed = max(pull - inflight, 0)
                        row["lag"] += top - pull + inflight
                        row["inflight"] += inflight
                        row["ready"] += top - pull
                    else:
                        pull = pulled.get((group, topic, q), committed)
                        pull = min(max(pull, committed), top)
                        row["lag"] += top - committed
                        row["inflight"] += pull - committed
                        row["ready"] += top - pull
                    for offset, key in ((committed, "unconsumed_ts"), (pull, "unpulled_ts")):
                        if offset < top:
                            ts = queue_store_time(self.store, topic, q, offset)
                            if ts > 0 and (row[key] == 0 or ts < row[key]):
                                row[key] = ts
                out.append(row)
        return out


def families(c, labels: dict) -> list:
    """The RocketMQ 5.1 families of broker controller `c`, computed now (on the event loop: they
    read the store's queues and tables)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
    keys, values = list(labels), list(labels.values())
    store = c.store
    out = []

    def family(kind, name, doc, extra=(), unit=""):
        f = kind(name, doc, labels=keys + list(extra), unit=unit)
        out.append(f)
        return f

    traffic = c.metrics.traffic
    if traffic is not None:
        traffic.refresh()
        msgs_in = family(CounterMetricFamily, "rocketmq_messages_in", "Total number of incoming messages",
                         ("topic", "message_type"))
        bytes_in = family(CounterMetricFamily, "rocketmq_throughput_in", "Total traffic of incoming messages "
                          "(stored record bytes)", ("topic", "message_type"))
        size = family(HistogramMetricFamily, "rocketmq_message_size", "Incoming messages size (stored record bytes)",
                      ("topic", "message_type"))
        for topic, (n, nbytes, buckets) in sorted(traffic.totals.items()):
            mt = message_type(c.topics.get(topic))
            msgs_in.add_metric(values + [topic, mt], n)
            bytes_in.add_metric(values + [topic, mt], nbytes)
            acc, cumulative = 0, []
            for bound, count in zip([*SIZE_BUCKETS, float("inf")], buckets):
                acc += count
                cumulative.append(("+Inf" if bound == float("inf") else str(bound), acc))
            size.add_metric(values + [topic, mt], cumulative, float(nbytes))
    stats = getattr(c, "broker_stats", None)
    if stats is not None:
        msgs_out = family(CounterMetricFamily, "rocketmq_messages_out", "Total number of outgoing messages",
                          ("topic", "consumer_group", "is_retry", "is_system"))
        bytes_out = family(CounterMetricFamily, "rocketmq_throughput_out", "Total traffic of outgoing messages",
                           ("topic", "consumer_group", "is_retry", "is_system"))
        for key, (n, nbytes, _) in sorted(list(stats.group_gets.items())):
            topic, _, group = key.rpartition("@")
            extra = [topic, group, _bool(topic.startswith(RETRY_PREFIX)), _bool(is_system(topic, group))]
            msgs_out.add_metric(values + extra, n)
            bytes_out.add_metric(values + extra, nbytes)
    lag = c.metrics.lag
    if lag is not None:
        now = int(time.time() * 1000)
        lag_f = family(GaugeMetricFamily, "rocketmq_consumer_lag_messages", "Consumer lag messages",
                       ("consumer_group", "topic", "is_retry", "is_system"))
        lag_ms = family(GaugeMetricFamily, "rocketmq_consumer_lag_latency", "Consumer lag time (milliseconds)",
                        ("consumer_group", "topic", "is_retry", "is_system"))
        inflight = family(GaugeMetricFamily, "rocketmq_consumer_inflight_messages", "Consumer inflight messages",
                          ("consumer_group", "topic", "is_retry", "is_system"))
        queueing = family(GaugeMetricFamily, "rocketmq_consumer_queueing_latency",
                          "Consumer queueing time (milliseconds)", ("consumer_group", "topic", "is_retry", "is_system"))
        ready = family(GaugeMetricFamily, "rocketmq_consumer_ready_messages", "Consumer ready messages",
                       ("consumer_group", "topic", "is_retry", "is_system"))
        for r in lag.rows():
            extra = [r["group"], r["topic"], "false", _bool(is_system(r["topic"], r["group"]))]
            lag_f.add_metric(values + extra, r["lag"])
            lag_ms.add_metric(values + extra, now - r["unconsumed_ts"] if r["unconsumed_ts"] else 0)
            inflight.add_metric(values + extra, r["inflight"])
            queueing.add_metric(values + extra, now - r["unpulled_ts"] if r["unpulled_ts"] else 0)
            ready.add_metric(values + extra, r["ready"])
    latency = getattr(c, "rpc_latency", None)
    if latency is not None:
        rpc = family(HistogramMetricFamily, "rocketmq_rpc_latency", "Rpc latency (milliseconds)",
                     ("protocol_type", "request_code", "response_code", "is_long_polling", "result"))
        for req, resp, long_polling, result, cumulative, total in latency.rows():
            rpc.add_metric(values + ["remoting", req, resp, _bool(long_polling), result], cumulative, total)
    producers = family(GaugeMetricFamily, "rocketmq_producer_connections", "Producer connections",
                       ("protocol_type",))
    producers.add_metric(values + ["remoting"], sum(len(m) for m in list(c.producers.groups.values())))
    consumers = family(GaugeMetricFamily, "rocketmq_consumer_connections", "Consumer connections",
                       ("consumer_group", "consume_mode", "protocol_type", "is_system"))
    for group, info in sorted(list(c.consumers.groups.items())):
        mode = "pop" if info.consume_type == "CONSUME_POP" else (
            "pull" if info.consume_type == "CONSUME_ACTIVELY" else "push")
        consumers.add_metric(values + [group, mode, "remoting", _bool(is_system("", group))], len(info.clients))
    front = c.front_metrics() if getattr(c, "front_metrics", None) is not None else None
    if front is not None:  # local mode: the 5.x clients of the front in this process, as a Java broker's
        producers.add_metric(values + ["grpc_v2"], front["producers"])
        for (group, mode), n in sorted(front["consumers"].items()):
            consumers.add_metric(values + [group, mode, "grpc_v2", _bool(is_system("", group))], n)
        up = GaugeMetricFamily("rocketmq_proxy_up", "proxy status", labels=["cluster", "node_type", "node_id",
                                                                           "proxy_mode"])
        up.add_metric([labels.get("cluster", ""), "proxy", labels.get("node_id", ""), "local"], 1)
        out.append(up)
    topics = c.topics.table.topics if c.topics is not None else {}
    family(GaugeMetricFamily, "rocketmq_topic_number", "Topics this broker holds").add_metric(values, len(topics))
    groups = getattr(c, "groups", None)
    n_groups = len(groups.table.groups) if groups is not None and hasattr(groups, "table") else len(c.consumers.groups)
    family(GaugeMetricFamily, "rocketmq_consumer_group_number", "Subscription groups").add_metric(values, n_groups)
    o = store.offsets()
    family(GaugeMetricFamily, "rocketmq_storage_flush_behind_bytes", "Bytes written but not flushed yet").add_metric(
        values, max(o["wrote"] - o["flushed"], 0))
    family(GaugeMetricFamily, "rocketmq_storage_dispatch_behind_bytes", "Bytes written but not dispatched yet"
           ).add_metric(values, max(o["wrote"] - o["dispatched"], 0))
    family(GaugeMetricFamily, "rocketmq_storage_size", "Bytes the commit log holds").add_metric(
        values, max(o["wrote"] - o["min"], 0))
    earliest = c.metrics._earliest_message_time(o)
    family(GaugeMetricFamily, "rocketmq_storage_message_reserve_time",
           "Milliseconds since the oldest message the commit log holds was stored").add_metric(
        values, int(time.time() * 1000) - earliest if earliest > 0 else 0)
    family(GaugeMetricFamily, "rocketmq_broker_permission", "Broker permission").add_metric(
        values, getattr(c.config, "brokerPermission", 6))
    return out


def _bool(v: bool) -> str:
    return "true" if v else "false"
