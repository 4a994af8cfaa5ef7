"""BrokerFastFailure's page-cache-busy shedding, for a broker whose sends are appended on one event loop.

RocketMQ: an append holds the commit log's put lock; while one has held it longer than
osPageCacheBusyTimeOutMills (DefaultMessageStore.isOSPageCacheBusy: its page fault waits on the
disk), BrokerFastFailure answers every send waiting in the send thread pool's queue SYSTEM_BUSY
"[PCBUSY_CLEAN_QUEUE]broker busy, ..." instead of appending it, and the Java producer retries it
on another broker (SYSTEM_BUSY is one of its retried codes). brokerFastFailureEnable=false: none.

Here the append runs on the event loop: while it stalls, nothing is read, and the sends that
arrive wait in the sockets' receive buffers, this broker's send queue. So the send path measures
how long each read's appends took (broker.server.processor.send_fast_path: one clock read at the
read's start and one after its appends; the processors' sends are timed by `guard`). Once one took
longer than osPageCacheBusyTimeOutMills, `stalled` marks the broker busy for the rest of that
loop turn, the whole next one, and the turns until AFTER_STALL has passed since the stall ended:
their reads take what piled up during the stall, their sends bypass the send kernel, and `guard`
answers them SYSTEM_BUSY with RocketMQ's words, appending none. Then sends are taken again.

Why not one turn only: what piled up does not all wait in the broker's socket. A producer's small
sends each cost the receive buffer a whole skb (about 1 KiB of accounting for 300 bytes of frame),
so after about 100 KB of them TCP closes its window, and the rest wait in the producer's own send
buffer; they reach the broker only after its first read reopens the window, in later turns. With
one turn, the last ~100 ms of a 1.5 s stall's sends were stored (CI, stop 39). AFTER_STALL is the
time the Java broker gives a send in its queue (waitTimeMillsInSendQueue's default, 200 ms) before
answering it SYSTEM_BUSY too: a loopback or LAN window drains a few MB in it, and a send that
arrives that soon after a 1 s stall would have waited behind the backlog in a Java broker's queue.
The turns are counted by a call_soon, which runs between turns (asyncio's loop and uvloop alike),
and the time by one call_later, so a broker that never stalls pays nothing but the two clock
reads per read, and one that did is not spun.
"""
from __future__ import annotations

import asyncio
import logging
import time

from broker.remoting import codes

log = logging.getLogger("broker")

# the requests RocketMQ's send thread pool runs (BrokerController.registerProcessor)
SEND_CODES = (codes.SEND_MESSAGE, codes.SEND_MESSAGE_V2, codes.SEND_BATCH_MESSAGE, codes.CONSUMER_SEND_MSG_BACK)
# BrokerFastFailure.cleanExpiredRequest's words. "period in queue" is the time since the stalled
# read began (at least as long as the send waited); "size of queue" counts the sends refused so
# far in this stall (RocketMQ's: those still queued, which a socket buffer does not tell)
PCBUSY_CLEAN_QUEUE = ("[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: {}ms, "
                      "size of queue: {}")
AFTER_STALL = 0.2  # s: see the module's comment


class FastFailure:
    def __init__(self, enabled: bool, busy_timeout_ms: int, after_stall: float = AFTER_STALL):
        self.enabled = enabled  # brokerFastFailureEnable
        self.limit = busy_timeout_ms / 1000  # osPageCacheBusyTimeOutMills, in perf_counter seconds
        self.after_stall = after_stall
        self.busy = False
        self.since = 0.0  # perf_counter at the start of the stalled read
        self.refused = 0  # sends refused in this stall
        self.stalls = 0  # stalls so far
        self.refused_total = 0

    def stalled(self, began: float, now: float) -> None:
        """An append that began at `began` (perf_counter) ended at `now`, later than the limit:
        busy until the end of the next loop turn, and at least `after_stall` s."""
        if self.busy:
            return
        self.busy, self.since, self.refused = True, began, 0
        self.stalls += 1
        log.warning("an append held the send path %d ms (osPageCacheBusyTimeOutMills=%d): the sends that "
                    "arrived meanwhile are answered SYSTEM_BUSY [PCBUSY_CLEAN_QUEUE], not stored",
                    (now - began) * 1000, self.limit * 1000)
        asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        # runs before the next turn's reads: the reads of that turn are still refused; a timer
        # runs before the reads of its turn too
        asyncio.get_running_loop().call_later(self.after_stall, self._over)

    def _over(self) -> None:
        self.busy = False
        log.warning("sends taken again after the stall: %d refused SYSTEM_BUSY", self.refused)

    def refuse(self, cmd):
        """RocketMQ's answer to a send cleaned from the queue (RequestTask.returnResponse)."""
        self.refused += 1
        self.refused_total += 1
        if cmd.is_oneway:
            return None
        period = int((time.perf_counter() - self.since) * 1000)
        return cmd.response(codes.SYSTEM_BUSY, remark=PCBUSY_CLEAN_QUEUE.format(period, self.refused))

    def guard(self, handlers: dict) -> None:
        """The send handlers in `handlers`, in place: refusing while busy, and timed otherwise (an
        append of the processors that stalls makes the broker busy as the kernel's does)."""
        if not self.enabled:
            return
        for code in SEND_CODES:
            fn = handlers.get(code)
            if fn is not None:
                handlers[code] = self._guarded(fn)

    def _guarded(self, fn):
        clock = time.perf_counter

        def send(cmd, conn):
            if self.busy:
                return self.refuse(cmd)
            t0 = clock()
            res = fn(cmd, conn)
            t1 = clock()
            if t1 - t0 > self.limit:
                self.stalled(t0, t1)
            return res
        return send
