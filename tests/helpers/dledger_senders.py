"""Senders that keep writing to a DLedger group while a test injects its faults, each in its own
thread with its own event loop, and keep the history the checks need: every body tried, every
body acknowledged SEND_OK (with when its send began), and every failure with its remark.

Every attempt sends a new body and nothing retries a body (the project's Producer with
retry_times=0, or one raw request per body): a body stored twice is then the broker's doing,
never a client's resend of a send whose outcome it did not know."""
from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from contextlib import contextmanager
from typing import Callable, Iterator

from broker.client.errors import ClientError, ResponseError
from broker.client.message import Message
from broker.client.producer import SEND_OK, Producer
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from tests.conftest import wait_for
from tests.helpers.dledger_checks import TOPIC, send_ext
from tests.helpers.dledger_cluster import DLedgerGroup

BACKOFF_S = 0.05  # between failed attempts: a client's pause while no master is routed


class Sender(threading.Thread):
    """Sends `workers` messages at a time until stopped: through the name server's route (the
    project's Producer) or, with `direct`, straight to one broker address, whatever it is."""

    def __init__(self, tag: str, namesrv: str, direct: str | None = None, workers: int = 2, timeout: float = 3.0,
                 topic: str = TOPIC):
        super().__init__(name=f"sender-{tag}", daemon=True)
        self.tag, self.namesrv, self.direct = tag, namesrv, direct
        self.workers, self.timeout, self.topic = workers, timeout, topic
        self.tried: list[bytes] = []
        self.acked: list[tuple[float, bytes]] = []  # (monotonic time the send began, body)
        self.failures: Counter[str] = Counter()
        self.remarks: list[tuple[float, str]] = []  # (monotonic time the answer came, why it failed)
        self._halt = threading.Event()
        self._n = 0
        self.error: BaseException | None = None

    # -- the history ----------------------------------------------------------------------------
    @property
    def acked_bodies(self) -> list[bytes]:
        return [b for _, b in self.acked]

    def acked_since(self, t: float) -> list[bytes]:
        return [b for began, b in self.acked if began >= t]

    def wait_acked(self, n: int, timeout: float = 30, since: float = 0.0) -> None:
        """Until `n` sends that began at or after `since` were acknowledged."""
        wait_for(lambda: len(self.acked_since(since)) >= n, timeout,
                 f"{n} sends of {self.tag} acknowledged (failures so far: {dict(self.failures)})")

    def wait_failed(self, n: int, timeout: float = 30) -> None:
        wait_for(lambda: len(self.remarks) >= n, timeout, f"{n} failed sends of {self.tag}")

    # -- running --------------------------------------------------------------------------------
    def halt(self) -> None:
        """Stop sending (the attempts under way end on their own)."""
        self._halt.set()

    def stop(self) -> "Sender":
        """Stop, wait for the attempts under way, and raise what broke the sender if anything did."""
        self.halt()
        self.join(30)
        assert not self.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error
        return self

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # reported by stop(), in the test's thread
            self.error = e

    def _body(self) -> bytes:
        self._n += 1
        body = f"{self.tag}-{self._n}".encode()
        self.tried.append(body)
        return body

    def _failed(self, why: str) -> None:
        self.failures[why.split(":")[0]] += 1
        self.remarks.append((time.monotonic(), why))

    async def _main(self) -> None:
        if self.direct is None:
            async with Producer(f"pg-{self.tag}", self.namesrv, retry_times=0) as p:
                await asyncio.gather(*(self._loop(lambda body: self._via_route(p, body)) for _ in range(self.workers)))
        else:
            await asyncio.gather(*(self._loop(self._straight) for _ in range(self.workers)))

    async def _loop(self, send) -> None:
        while not self._halt.is_set():
            body = self._body()
            began = time.monotonic()
            try:
                ok = await send(body)
            except (ClientError, OSError, asyncio.TimeoutError) as e:
                self._failed(f"{type(e).__name__}: {e}")
                ok = False
            if ok:
                self.acked.append((began, body))
            else:
                await asyncio.sleep(BACKOFF_S)

    async def _via_route(self, p: Producer, body: bytes) -> bool:
        r = await p.send(Message(self.topic, body), timeout=self.timeout)
        if r.status != SEND_OK:
            self._failed(r.status)
        return r.status == SEND_OK

    async def _straight(self, body: bytes) -> bool:
        host, _, port = self.direct.rpartition(":")
        conn = await asyncio.wait_for(connect(host, int(port)), self.timeout)
        try:
            r = await conn.request(RemotingCommand.request(codes.SEND_MESSAGE_V2, send_ext(self.topic), body),
                                   self.timeout)
        finally:
            conn.close()
        if r.code != codes.SUCCESS:
            raise ResponseError(r.code, r.remark, f"send to {self.direct}")
        return True


@contextmanager
def sending(g: DLedgerGroup) -> Iterator[tuple[DLedgerGroup, Callable[..., Sender]]]:
    """The group started, and `sender(tag, to=None, **kw)`: a Sender started at once, through the
    route or straight `to` a broker. On the way out, however the test ends, every sender is halted
    (a daemon thread left sending would go on into the next test) and the group stopped."""
    made: list[Sender] = []

    def sender(tag: str, to=None, **kw) -> Sender:
        s = Sender(tag, g.namesrv.addr, direct=None if to is None else f"127.0.0.1:{to.port}", **kw)
        made.append(s)
        s.start()
        return s
    try:
        yield g.start(), sender
    finally:
        for s in made:
            s.halt()
        g.stop()
