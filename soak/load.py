"""The bulk of the load: the project's own Producer (broker/client) sending at a fixed rate to
one topic through the name server's route, every send a new body and none retried (retry_times=0),
so that a body stored twice is the broker's doing, never a client resend.

Each send's outcome is kept in compact arrays (a day at a few hundred msgs/s is tens of millions of
sends): when it began, how long its answer took, the outcome, and the queue and queue offset its
acknowledgement named."""
from __future__ import annotations

import array
import asyncio
import threading
import time

from broker.client.errors import ClientError, ResponseError, RouteNotFound, SendFailed
from broker.client.message import Message
from broker.client.producer import SEND_OK, Producer

BODY = 200  # bytes: "<tag><id>|" then padding
OK, DEGRADED, FAILED, UNKNOWN = 0, 1, 2, 3
OUTCOMES = ("ok", "degraded", "failed", "unknown")
MAY_COMMIT = "may still commit"
DEGRADED_STATUS = {"FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"}


class SendLog:
    """Per send, indexed by its id: began (s since the run's start), latency (s), outcome, queue,
    queue offset (-1 when the answer named none)."""

    def __init__(self):
        self.began = array.array("d")
        self.latency = array.array("f")
        self.outcome = array.array("b")
        self.queue = array.array("b")
        self.offset = array.array("q")
        self.lock = threading.Lock()

    def new(self, began: float) -> int:
        with self.lock:
            self.began.append(began)
            self.latency.append(-1.0)
            self.outcome.append(UNKNOWN)
            self.queue.append(-1)
            self.offset.append(-1)
            return len(self.began) - 1

    def done(self, i: int, latency: float, outcome: int, queue: int = -1, offset: int = -1) -> None:
        self.latency[i], self.outcome[i], self.queue[i], self.offset[i] = latency, outcome, queue, offset

    def __len__(self) -> int:
        return len(self.began)


class RatedSender(threading.Thread):
    """`rate` sends a second to `topic`, at most `inflight` awaiting their answer (past that the
    sender falls behind rather than pile up requests on a broker that stopped answering)."""

    def __init__(self, tag: str, topic: str, namesrv: str, rate: float, t0: float, inflight: int = 256,
                 timeout: float = 3.0):
        super().__init__(name=f"soak-{tag}", daemon=True)
        self.tag, self.topic, self.namesrv, self.rate, self.t0 = tag, topic, namesrv, rate, t0
        self.inflight, self.timeout = inflight, timeout
        self.log = SendLog()
        self.errors: dict[str, int] = {}
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def key(self, i: int) -> bytes:
        return b"%s%d" % (self.tag.encode(), i)

    def halt(self) -> None:
        self._halt.set()

    def stop(self) -> None:
        self.halt()
        self.join(60)
        if self.error is not None:
            raise self.error

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # reported by stop(), in the runner's thread
            self.error = e

    async def _main(self) -> None:
        sem = asyncio.Semaphore(self.inflight)
        tasks: set[asyncio.Task] = set()
        async with Producer(f"soak-{self.tag}", self.namesrv, retry_times=0) as p:
            start, sent = time.monotonic(), 0
            while not self._halt.is_set():
                due = int((time.monotonic() - start) * self.rate) - sent
                if due <= 0:
                    await asyncio.sleep(0.01)
                    continue
                for _ in range(min(due, 64)):
                    await sem.acquire()
                    t = asyncio.create_task(self._one(p, sem))
                    tasks.add(t)
                    t.add_done_callback(tasks.discard)
                    sent += 1
            if tasks:
                await asyncio.wait(tasks, timeout=self.timeout + 5)

    def _count(self, why: str) -> None:
        """Tally of the failures by kind and remark (bounded: remarks may name offsets)."""
        if why not in self.errors and len(self.errors) >= 100:
            why = "other"
        self.errors[why] = self.errors.get(why, 0) + 1

    async def _one(self, p: Producer, sem: asyncio.Semaphore) -> None:
        began = time.monotonic()
        i = self.log.new(began - self.t0)
        body = (self.key(i) + b"|").ljust(BODY, b".")
        try:
            r = await p.send(Message(self.topic, body), timeout=self.timeout)
        except (ClientError, OSError, asyncio.TimeoutError) as e:
            cause = e.causes[-1] if isinstance(e, SendFailed) and e.causes else e
            why = type(cause).__name__ + (f" {cause.code}: {(cause.remark or '')[:70]}"
                                          if isinstance(cause, ResponseError) else "")
            self._count(why)
            # a request that left and got no answer may be stored; one refused, or never sent, not,
            # but for a DLedger leader's "may still commit" (deposed, or no quorum in time, after
            # the entry entered its log: a later leader may commit it)
            refused = isinstance(cause, (ResponseError, RouteNotFound)) and MAY_COMMIT not in str(cause)
            outcome = FAILED if refused else UNKNOWN
            self.log.done(i, time.monotonic() - began, outcome)
            await asyncio.sleep(0.05)  # a client's pause while the group has no master
        else:
            latency = time.monotonic() - began
            if r.status == SEND_OK:
                self.log.done(i, latency, OK, r.queue.queue_id, r.queue_offset)
            elif r.status in DEGRADED_STATUS:
                self.log.done(i, latency, DEGRADED, r.queue.queue_id, r.queue_offset)
            else:
                self._count(r.status)
                self.log.done(i, latency, FAILED)
        finally:
            sem.release()
