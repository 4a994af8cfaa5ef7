"""Blocking wrappers for scripts without an event loop: the asyncio client runs on its own loop
in a daemon thread, and each call waits for its coroutine there.

    with SyncProducer("pg", "127.0.0.1:9876") as p:
        print(p.send(Message("T", b"hi")))
"""
from __future__ import annotations

import asyncio
import threading

from broker.client.message import Message
from broker.client.producer import Producer, SendResult
from broker.client.route import MessageQueue


class _LoopThread:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="broker-client", daemon=True)
        self.thread.start()

    def call(self, coro, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class SyncProducer:
    def __init__(self, group: str, namesrv_addr: str | None = None, **kw):
        self._lt = _LoopThread()
        # the producer (and its futures and connections) belong to the thread's loop
        self._producer = self._lt.call(self._make(group, namesrv_addr, kw))

    @staticmethod
    async def _make(group, namesrv_addr, kw) -> Producer:
        p = Producer(group, namesrv_addr, **kw)
        await p.start()
        return p

    def send(self, msg: Message, timeout: float = 3.0, queue: MessageQueue | None = None) -> SendResult:
        async def send() -> SendResult:  # on the loop's thread: send() renders when called
            return await self._producer.send(msg, timeout, queue)
        return self._lt.call(send())

    def send_batch(self, msgs: list[Message], timeout: float = 3.0) -> SendResult:
        return self._lt.call(self._producer.send_batch(msgs, timeout))

    def send_oneway(self, msg: Message) -> None:
        self._lt.call(self._producer.send_oneway(msg))

    def shutdown(self) -> None:
        try:
            self._lt.call(self._producer.shutdown())
        finally:
            self._lt.stop()

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
