"""Prometheus /metrics on metricsPort: counters move with the traffic, the flush histogram comes
from the flush service through the offset table, services report alive."""
from __future__ import annotations

import asyncio
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from broker.remoting import codes
from tests.conftest import free_port
from tests.test_broker_remoting import Broker


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("cluster", "broker",
                                                                                       "broker_id"))))] = s.value
    return out


def test_metrics_follow_sends_pulls_flushes_and_services(tmp_path):
    port = free_port()

    async def main():
        async with Broker(tmp_path, broker_kw={"metricsPort": port}, flushDiskType="SYNC_FLUSH") as b:
            before = await asyncio.to_thread(_scrape, port)
            for i in range(5):
                assert (await b.send_v2("T", b"x" * 100)).code == codes.SUCCESS
            assert (await b.pull("T", 0, 0, sys_flag=0)).code == codes.SUCCESS
            after = await asyncio.to_thread(_scrape, port)
            return before, after, b.controller.store.offsets()
    before, after, offsets = asyncio.run(main())
    assert after[("rocketmq_put_messages_total", ())] - before[("rocketmq_put_messages_total", ())] == 5
    assert after[("rocketmq_get_messages_total", ())] == 5
    assert after[("rocketmq_send_status_total", (("status", "PUT_OK"),))] == 5
    assert after[("rocketmq_offset", (("offset", "wrote"),))] == offsets["wrote"]
    flushes = after[("rocketmq_flush_seconds_count", ())]
    assert flushes >= 5 - before.get(("rocketmq_flush_seconds_count", ()), 0) > 0  # SYNC_FLUSH: a flush per send
    assert after[("rocketmq_flush_seconds_bucket", (("le", "+Inf"),))] == flushes
    for svc in ("flush", "reput", "ha", "clean"):
        assert after[("rocketmq_service_up", (("service", svc),))] == 1
    assert 0 < after[("rocketmq_disk_usage_ratio", ())] < 1
    assert after[("rocketmq_connections", ())] >= 1
