"""DELETE_TOPIC_IN_BROKER of a topic holding messages, as RocketMQ's deleteTopicInBroker: the topic's
config and consume queues go (the broker's maps, the reput process's, the directories), its messages
can no longer be pulled, and a topic made again by that name starts at queue offset 0. A restart
brings back neither the deleted topic nor its old messages."""
from __future__ import annotations

import asyncio

from broker.remoting import codes
from tests.test_broker_remoting import Broker, _records


async def _bodies(b, topic: str, queue_id: int) -> list[bytes]:
    r = await b.pull(topic, queue_id, 0, sys_flag=0, suspend_ms=0)
    return [bytes(m.body) for m in _records(bytes(r.body))] if r.code == codes.SUCCESS else []


def test_a_deleted_topic_starts_again_from_zero_and_stays_deleted_after_a_restart(tmp_path):
    async def go():
        async with Broker(tmp_path) as b:
            store = b.controller.store
            for topic in ("Gone", "GoneForGood", "Kept"):
                for i in range(5):
                    assert (await b.send_v2(topic, f"{topic}-{i}".encode(), queue_id=i % 2)).code == codes.SUCCESS
            await store.wait_dispatched(store.offsets()["wrote"], 10)
            for topic in ("Gone", "GoneForGood"):
                r = await b.call(codes.DELETE_TOPIC_IN_BROKER, {"topic": topic})
                assert r.code == codes.SUCCESS, r.remark
                assert b.controller.topics.get(topic) is None
                assert [store.max_offset(topic, q) for q in (0, 1)] == [0, 0]
                assert not (tmp_path / "store" / "consumequeue" / topic).exists() or \
                    not any((tmp_path / "store" / "consumequeue" / topic).iterdir())
            # sent again: made anew (auto-creation) at offset 0; the old messages are not there
            r = await b.send_v2("Gone", b"Gone-new", queue_id=0)
            assert (r.code, r.ext["queueOffset"]) == (codes.SUCCESS, "0")
            await store.wait_dispatched(store.offsets()["wrote"], 10)
            assert await _bodies(b, "Gone", 0) == [b"Gone-new"]
            assert await _bodies(b, "Gone", 1) == []
            assert await _bodies(b, "Kept", 0) == [b"Kept-0", b"Kept-2", b"Kept-4"]
        async with Broker(tmp_path) as b:  # the same store, restarted
            assert b.controller.topics.get("GoneForGood") is None  # not learned back from its queues
            assert await _bodies(b, "Gone", 0) == [b"Gone-new"] and await _bodies(b, "Gone", 1) == []
            r = await b.send_v2("Gone", b"Gone-after-restart", queue_id=0)
            assert (r.code, r.ext["queueOffset"]) == (codes.SUCCESS, "1")
            assert await _bodies(b, "Kept", 1) == [b"Kept-1", b"Kept-3"]
    asyncio.run(go())
