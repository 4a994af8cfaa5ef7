"""Pop consumption from the tests' side: the project's client (broker.client.pop) against a real
broker at an address, and long-polled receives until a count of messages came."""
from __future__ import annotations

import asyncio
import time

from broker.client import pop as P
from broker.client.client_instance import MQClientInstance


def run_with_client(coro_fn, addr: str) -> None:
    """asyncio.run(coro_fn(client, addr)) with a client of its own, shut down after."""
    async def go():
        client = MQClientInstance()
        try:
            await coro_fn(client, addr)
        finally:
            await client.shutdown()
    asyncio.run(go())


def bodies(msgs) -> list[str]:
    return [bytes(m.body).decode() for m in msgs]


async def receive_until(c: P.SimpleConsumer, n: int, invisible_ms: int, poll_ms: int = 10_000, **kw) -> list:
    """Pops until n messages came (each pop long-polled: answered by an append or a revive)."""
    got = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        got += await c.receive(invisible_ms, max_nums=n - len(got), poll_ms=poll_ms, **kw)
    assert len(got) == n, f"only {len(got)} of {n} messages came: {bodies(got)}"
    return got
