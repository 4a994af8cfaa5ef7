"""Delay levels: a producer's DELAY property (and a send-back, see test_broker_remoting) keeps the
message in SCHEDULE_TOPIC_XXXX until its level's delay has passed, then it appears in its real
topic and queue; the schedule offsets survive a restart, so a pending message is delivered once."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from broker.remoting import codes
from broker.server.broker_config import load_broker_config
from broker.store.errors import StoreConfigError
from tests.test_broker_remoting import Broker, _records

LEVELS = "100ms 300ms 600ms 1s"


def test_producer_delay_level_is_delivered_to_its_queue_when_due(tmp_path):
    async def go():
        async with Broker(tmp_path, broker_kw={"messageDelayLevel": LEVELS}) as b:
            t0 = time.monotonic()
            r = await b.send_v2("Later", b"wait for me", queue_id=2, extra_props="DELAY\x012\x02UNIQ_KEY\x01U1\x02")
            assert r.code == codes.SUCCESS
            await b.controller.store.wait_dispatched(b.controller.store.offsets()["wrote"], 10)
            assert (await b.pull("Later", 2, 0, sys_flag=0)).code != codes.SUCCESS  # not yet
            got = await b.pull("Later", 2, 0, suspend_ms=5000)  # answered by the delivery
            assert time.monotonic() - t0 >= 0.3 - 0.01
            [m] = _records(got.body)
            assert (m.body, m.topic, m.queue_id) == (b"wait for me", "Later", 2)
            assert m.properties["TAGS"] == "TagA" and m.properties["UNIQ_KEY"] == "U1"
            # what was asked for stays on the delivered copy, as on RocketMQ's
            assert (m.properties["DELAY"], m.properties["REAL_TOPIC"], m.properties["REAL_QID"]) == ("2", "Later", "2")
            # a level above the highest is capped at it (1 s), as RocketMQ does
            t1 = time.monotonic()
            await b.send_v2("Later", b"capped", queue_id=0, extra_props="DELAY\x0199\x02")
            got = await b.pull("Later", 0, 0, suspend_ms=5000)
            assert [m.body for m in _records(got.body)] == [b"capped"] and time.monotonic() - t1 >= 0.99
            # level 0 or garbage: no delay
            r = await b.send_v2("Now", b"x", extra_props="DELAY\x01zero\x02")
            got = await b.pull("Now", int(r.ext["queueId"]), 0, suspend_ms=5000)
            assert [m.body for m in _records(got.body)] == [b"x"]

    asyncio.run(go())


def test_pending_delayed_message_is_delivered_once_across_restarts(tmp_path):
    async def go():
        kw = {"messageDelayLevel": LEVELS}
        async with Broker(tmp_path, broker_kw=kw) as b:
            sent = time.monotonic()
            await b.send_v2("Restart", b"pending", queue_id=0, extra_props="DELAY\x014\x02")
            await b.controller.store.wait_dispatched(b.controller.store.offsets()["wrote"], 10)
        async with Broker(tmp_path, broker_kw=kw) as b:  # restarted before it was due
            got = await b.pull("Restart", 0, 0, suspend_ms=5000)
            assert [m.body for m in _records(got.body)] == [b"pending"] and time.monotonic() - sent >= 0.99
        offsets = json.loads((tmp_path / "store" / "config" / "delayOffset.json").read_text())
        assert offsets["offsetTable"]["4"] == 1
        async with Broker(tmp_path, broker_kw=kw) as b:  # and not delivered again
            await asyncio.sleep(0)  # let the level tasks look at their queues
            await b.controller.store.wait_dispatched(b.controller.store.offsets()["wrote"], 10)
            got = await b.pull("Restart", 0, 0, sys_flag=0)
            assert [m.body for m in _records(got.body)] == [b"pending"]

    asyncio.run(go())


@pytest.mark.parametrize("value", ["1s 5x", "", "10"])
def test_bad_message_delay_level_names_the_key(value):
    with pytest.raises(StoreConfigError) as e:
        load_broker_config({"messageDelayLevel": value})
    assert "messageDelayLevel" in str(e.value)
