"""TopicTypes (the message type each topic takes, read from its broker and cached TTL_S): a type
cached longer than that still answers accepts_now while one task reads it again, as a
refresh-after-write cache does, so the sends of that round trip do not each take the slow way and
each ask the broker; the type read then applies to the sends after it. takes_normal_now answers
accepts_now(topic, {}) the same."""
from __future__ import annotations

import asyncio

import msgspec

from broker.proxy import topic_types as tt
from broker.remoting import codes


class _Route:
    @staticmethod
    def broker_addrs():
        return {"0": "127.0.0.1:10911"}


class _Client:
    """The broker's GET_TOPIC_CONFIG answer: the topic's message.type, `kind`; each ask counted and
    held until `release` is set, so the test sees the sends made while a read is out."""

    def __init__(self, kind: str):
        self.kind = kind
        self.asked = 0
        self.release = asyncio.Event()

        class _Routes:
            @staticmethod
            async def get(topic):
                return _Route()
        self.routes = _Routes()

    async def invoke(self, addr, cmd, timeout):
        self.asked += 1
        await self.release.wait()

        class _R:
            code = codes.SUCCESS
            body = msgspec.json.encode({"attributes": {"message.type": self.kind}})
        return _R()


def test_an_expired_type_answers_while_one_task_reads_it_again(monkeypatch):
    async def go():
        client = _Client("NORMAL")
        types = tt.TopicTypes(client)
        client.release.set()
        assert types.accepts_now("T", {}) is None  # never read: the caller waits for get()
        assert await types.get("T") == "NORMAL" and client.asked == 1
        assert types.accepts_now("T", {}) and types.takes_normal_now("T")
        # the broker's type changes; the cached one expires
        client.kind, client.release = "FIFO", asyncio.Event()
        clock = [tt.time.monotonic() + tt.TTL_S + 1]
        monkeypatch.setattr(tt.time, "monotonic", lambda: clock[0])
        answers = [types.takes_normal_now("T") for _ in range(64)]  # h2load's 64 streams in one read
        assert all(answers)  # the stale type answers them ...
        await asyncio.sleep(0)
        assert client.asked == 2  # ... while one read, not 64, is out
        client.release.set()
        while "T" in types._refreshing:
            await asyncio.sleep(0)
        # the type read applies now: a NORMAL message no longer goes (validate() says why)
        assert types.takes_normal_now("T") is None and types.accepts_now("T", {}) is None
        assert await types.get("T") == "FIFO" and client.asked == 2
    asyncio.run(go())


def test_outside_a_running_loop_an_expired_type_is_not_answered(monkeypatch):
    client = _Client("NORMAL")
    types = tt.TopicTypes(client)
    types._cache["T"] = (tt.time.monotonic() - tt.TTL_S - 1, "NORMAL")
    assert types.accepts_now("T", {}) is None and types.takes_normal_now("T") is None
    assert client.asked == 0
