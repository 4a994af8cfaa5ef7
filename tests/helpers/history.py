"""An OpenChaos-style history for the fault loops: a producer that records every send as ok,
degraded, failed or unknown, a drain that records every stored message, and a checker.

Buckets, as OpenChaos's QueueChecker has them plus the third one it lacks:
- ok: SEND_OK. Must be consumed exactly once, at the queue offset the ack named.
- degraded: FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE: stored on the master,
  durability not confirmed. May be lost under the fault; never duplicated.
- failed: any other error code (nothing stored). Seen later = a bug.
- unknown: a timeout or a dropped connection after the request left. Either way is fine.
The checker then asks, per queue, for one message per offset and dense offsets.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import threading
import time

import msgspec

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.store.message import decode_message

DEGRADED = {codes.FLUSH_DISK_TIMEOUT, codes.FLUSH_SLAVE_TIMEOUT, codes.SLAVE_NOT_AVAILABLE}
BODY = 200  # bytes per message: "m<id>|" then padding


@dataclasses.dataclass
class Send:
    outcome: str                 # ok | degraded | failed | unknown
    queue: int = -1
    offset: int = -1             # queue offset the ack named
    phys: int = -1               # commit-log offset the ack's msgId named
    code: int = -1
    at: float = dataclasses.field(default_factory=time.monotonic)  # when the answer (or its absence) came


@dataclasses.dataclass
class Verdict:
    sends: dict[str, int]
    lost: list[int]              # ok sends never consumed
    lost_degraded: list[int]     # degraded sends never consumed (allowed)
    duplicates: int              # extra copies of any message
    failed_seen: list[int]       # sends answered with an error that were stored anyway
    misplaced: list[int]         # ok sends consumed at another queue/offset than their ack said
    holes: dict[int, list[int]]  # per queue: offsets missing below the max
    consumed: int

    def row(self) -> dict:
        return {**self.sends, "lost": len(self.lost), "lost degraded": len(self.lost_degraded),
                "duplicates": self.duplicates, "failed but stored": len(self.failed_seen),
                "misplaced": len(self.misplaced), "holes": sum(len(h) for h in self.holes.values())}


class History:
    def __init__(self):
        self.sends: dict[int, Send] = {}
        self.consumed: list[tuple[int, int, int]] = []   # (id, queue, offset)
        self.lock = threading.Lock()

    def record(self, mid: int, send: Send) -> None:
        with self.lock:
            self.sends[mid] = send

    def check(self) -> Verdict:
        by_id = collections.Counter(mid for mid, _, _ in self.consumed)
        where = {mid: (q, o) for mid, q, o in self.consumed}
        outcomes = collections.Counter(s.outcome for s in self.sends.values())
        lost = sorted(m for m, s in self.sends.items() if s.outcome == "ok" and m not in by_id)
        lost_degraded = sorted(m for m, s in self.sends.items() if s.outcome == "degraded" and m not in by_id)
        failed_seen = sorted(m for m, s in self.sends.items() if s.outcome == "failed" and m in by_id)
        misplaced = sorted(m for m, s in self.sends.items()
                           if s.outcome == "ok" and m in where and where[m] != (s.queue, s.offset))
        holes: dict[int, list[int]] = {}
        per_queue: dict[int, set[int]] = collections.defaultdict(set)
        for _, q, o in self.consumed:
            per_queue[q].add(o)
        for q, offs in per_queue.items():
            missing = sorted(set(range(min(offs), max(offs) + 1)) - offs)
            if missing:
                holes[q] = missing
        return Verdict(dict(outcomes), lost, lost_degraded, sum(c - 1 for c in by_id.values() if c > 1),
                       failed_seen, misplaced, holes, len(self.consumed))


def _phys_of(msg_id: str) -> int:
    # offsetMsgId: store host (8 or 20 bytes) then the commit-log offset as 8 bytes, in hex
    return int(msg_id[-16:], 16) if msg_id else -1


class Workload:
    """Sends unique ids to `topic` on `queues` queues of the broker at `port()`, `inflight` at a time,
    until stopped; reconnects after a drop (the broker may be restarting). `port()` may return a
    (host, port) pair for a broker off loopback (a network namespace of its own)."""

    def __init__(self, history: History, port, topic: str, queues: int = 4, inflight: int = 8, timeout: float = 4.0,
                 reconnect_on: frozenset = frozenset(), outcome_unknown=None, first_id: int = 0):
        self.history, self.port, self.topic, self.queues = history, port, topic, queues
        self.inflight, self.timeout = inflight, timeout
        # refusals that mean "not this broker" (a DLedger follower's SERVICE_NOT_AVAILABLE): the
        # connection is dropped and `port()` asked again
        self.reconnect_on = reconnect_on
        # a refusal the broker itself says may still be stored (a DLedger leader deposed, or no
        # quorum in time, after the entry entered its log: a later leader may commit it) is an
        # unknown outcome, not a failure: fn(response) -> bool
        self.outcome_unknown = outcome_unknown
        self.stop_event = threading.Event()
        self._loop = self._conn = None  # the workload's event loop and connection, for redirect()
        self.first_id = self.next_id = first_id  # two workloads on one history take ids from ranges of their own
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def start(self) -> "Workload":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the workload did not stop"

    def acked(self) -> int:
        """How many of this workload's sends were acknowledged SEND_OK."""
        with self.history.lock:
            return sum(1 for m, s in self.history.sends.items()
                       if s.outcome == "ok" and self.first_id <= m < self.next_id)

    def redirect(self) -> None:
        """Drop the connection now and ask `port()` again: the test learnt of a new master while the
        old one, still reachable, keeps answering (its in-flight sends become unknown)."""
        loop, conn = self._loop, self._conn
        if loop is not None and conn is not None:
            loop.call_soon_threadsafe(conn.close)

    def acked_since(self, t: float) -> list[int]:
        """Ids of this workload's sends acknowledged SEND_OK after monotonic time `t`."""
        with self.history.lock:
            return sorted(m for m, s in self.history.sends.items()
                          if s.outcome == "ok" and s.at > t and self.first_id <= m < self.next_id)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        while not self.stop_event.is_set():
            try:
                where = self.port()
                host, port = where if isinstance(where, tuple) else ("127.0.0.1", where)
                conn = await asyncio.wait_for(connect(host, port), self.timeout)
            except (OSError, asyncio.TimeoutError):
                # the broker is down or restarting, or its host answers nothing: ask port() again
                await asyncio.sleep(0.05)
                continue
            self._conn = conn
            try:
                await asyncio.gather(*(self._sender(conn) for _ in range(self.inflight)))
            finally:
                conn.close()

    async def _sender(self, conn) -> None:
        while not self.stop_event.is_set() and not conn.closed.is_set():
            mid = self.next_id
            self.next_id += 1
            q = mid % self.queues
            body = (b"m%d|" % mid).ljust(BODY, b".")
            ext = {"a": "chaos", "b": self.topic, "c": "TBW102", "d": str(self.queues), "e": str(q), "f": "0",
                   "g": str(int(time.time() * 1000)), "h": "0", "i": f"KEYS\x01id{mid}", "j": "0", "k": "false"}
            try:
                r = await conn.request(RemotingCommand.request(codes.SEND_MESSAGE_V2, ext, body), self.timeout)
            except Exception:  # timeout or a dropped link after the request left: either way
                self.history.record(mid, Send("unknown"))
                return
            if r.code == codes.SUCCESS or r.code in DEGRADED:
                self.history.record(mid, Send("ok" if r.code == codes.SUCCESS else "degraded",
                                              int(r.ext.get("queueId", q)), int(r.ext.get("queueOffset", -1)),
                                              _phys_of(str(r.ext.get("msgId", ""))), r.code))
            elif self.outcome_unknown is not None and self.outcome_unknown(r):
                self.history.record(mid, Send("unknown"))
            else:
                self.history.record(mid, Send("failed", q, code=r.code))
                await asyncio.sleep(0.02)  # refused (disk full, slave role...): don't spin on refusals
                if r.code in self.reconnect_on:
                    conn.close()
                    return


async def wait_dispatched(conn, timeout: float = 30.0, on_behind=None) -> None:
    """Until the broker on `conn` has dispatched to its consume queues all that its commit log
    held when asked. An acknowledged send is in the log before the reput (another process) puts it
    in its queue, as in RocketMQ: a read of the queues right after the last acknowledgement may
    miss a queue's tail for a few milliseconds on a loaded host (two CI runs did: 18 "lost"
    messages, all of one queue's tail). dispatchBehindBytes, so that the Java broker answers too.
    `on_behind(bytes behind)` is called once if it has to wait (tests/test_drain_waits_for_dispatch.py)."""
    async def table() -> dict:
        r = await conn.request(RemotingCommand.request(codes.GET_BROKER_RUNTIME_INFO, {}), 10)
        assert r.code == codes.SUCCESS, f"GET_BROKER_RUNTIME_INFO: code {r.code} {r.remark}"
        return msgspec.json.decode(bytes(r.body))["table"]
    t = await table()
    end = int(t["commitLogMaxOffset"])
    deadline, delay = time.monotonic() + timeout, 0.001
    while int(t["commitLogMaxOffset"]) - int(t["dispatchBehindBytes"]) < end:
        if on_behind is not None:
            on_behind, call = None, on_behind
            call(int(t["dispatchBehindBytes"]))
        assert time.monotonic() < deadline, f"the reput did not reach {end} in {timeout} s: {t['dispatchBehindBytes']} behind"
        await asyncio.sleep(delay)  # another process's progress: no wake-up reaches the test
        delay = min(delay * 2, 0.05)
        t = await table()


def drain(history: History, port: int, topic: str, queues: int = 4, host: str = "127.0.0.1", on_behind=None,
          settled: bool = True) -> int:
    """Every message the broker at `host:port` holds in `topic`, from each queue's minimum to its
    maximum, into the history, once it dispatched all its log held (`settled`; False: what it
    serves now, e.g. a controller-mode master cut off from its in-sync slave, whose reput stops at
    what the slave acknowledged and never reaches its log's end). Returns how many."""
    async def main() -> int:
        conn = await connect(host, port)
        n = 0
        try:
            if settled:
                await wait_dispatched(conn, on_behind=on_behind)
            for q in range(queues):
                r = await conn.request(RemotingCommand.request(codes.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}), 10)
                top = int(r.ext["offset"]) if r.code == codes.SUCCESS else 0
                r = await conn.request(RemotingCommand.request(codes.GET_MIN_OFFSET, {"topic": topic, "queueId": str(q)}), 10)
                off = int(r.ext["offset"]) if r.code == codes.SUCCESS else 0
                while off < top:
                    r = await conn.request(RemotingCommand.request(codes.PULL_MESSAGE, {
                        "consumerGroup": "chaos-checker", "topic": topic, "queueId": str(q), "queueOffset": str(off),
                        "maxMsgNums": "256", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
                        "subscription": "*", "subVersion": "0"}), 10)
                    assert r.code == codes.SUCCESS, f"pull {topic}/{q}@{off} of {top}: code {r.code} {r.remark}"
                    body, pos = bytes(r.body), 0
                    while pos < len(body):
                        m = decode_message(body, pos)
                        pos += m.size
                        history.consumed.append((int(bytes(m.body).split(b"|", 1)[0][1:]), m.queue_id, m.queue_offset))
                        n += 1
                    nxt = int(r.ext["nextBeginOffset"])
                    assert nxt > off, f"pull {topic}/{q}@{off} of {top}: no progress ({r.remark}, {dict(r.ext)})"
                    off = nxt
            return n
        finally:
            conn.close()
    return asyncio.run(main())
