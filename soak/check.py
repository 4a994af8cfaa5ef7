"""The history check after the run (OpenChaos's buckets, as tests/helpers/history.py has them):
every topic of every group drained from its master, queue by queue from the minimum offset to
the maximum, then each send's outcome held against what is stored:

- ok (SEND_OK): must be stored, at the queue and offset its acknowledgement named. Missing = lost,
  unless the queue's minimum offset passed it (reclaimed by the cleaner: fileReservedTime);
- degraded (FLUSH_*_TIMEOUT, SLAVE_NOT_AVAILABLE): stored on the master, durability unconfirmed;
  missing ones are counted, not failures;
- failed (refused): stored anyway = counted (a refusal the broker could not take back);
- unknown (no answer): either way.
A body stored more than once is a duplicate, charged to the fault whose window (its start to
`grace` s after its end) holds the send's start, or to none."""
from __future__ import annotations

import asyncio
import collections

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.store.message import decode_message

from .load import DEGRADED, OK, OUTCOMES


def key_of(body: bytes) -> bytes:
    """The bulk's bodies are "<tag><id>|" and padding; the real clients' are the key itself."""
    return body.split(b"|", 1)[0]


def drain(port: int, topic: str, queues: int) -> tuple[list[tuple[bytes, int, int]], dict[int, int], list[str]]:
    """Every message of `topic` the broker at `port` holds: (key, queue, offset) each, the queues'
    minimum offsets, and the pulls that failed."""
    async def main():
        conn = await connect("127.0.0.1", port)
        got, mins, errors = [], {}, []
        try:
            for q in range(queues):
                where = {"topic": topic, "queueId": str(q)}
                r = await conn.request(RemotingCommand.request(codes.GET_MAX_OFFSET, where), 30)
                top = int(r.ext["offset"]) if r.code == codes.SUCCESS else 0
                r = await conn.request(RemotingCommand.request(codes.GET_MIN_OFFSET, where), 30)
                off = mins[q] = int(r.ext["offset"]) if r.code == codes.SUCCESS else 0
                while off < top:
                    r = await conn.request(RemotingCommand.request(codes.PULL_MESSAGE, {
                        "consumerGroup": "soak-checker", "topic": topic, "queueId": str(q), "queueOffset": str(off),
                        "maxMsgNums": "512", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
                        "subscription": "*", "subVersion": "0"}), 30)
                    nxt = int(r.ext.get("nextBeginOffset", off))
                    if r.code != codes.SUCCESS:
                        errors.append(f"{topic}/{q}@{off} of {top}: code {r.code} {r.remark} next {nxt}")
                        if nxt <= off:
                            break
                        off = nxt
                        continue
                    body, pos = bytes(r.body), 0
                    while pos < len(body):
                        m = decode_message(body, pos)
                        pos += m.size
                        got.append((key_of(bytes(m.body)), m.queue_id, m.queue_offset))
                    off = max(nxt, off + 1)
            return got, mins, errors
        finally:
            conn.close()
    return asyncio.run(main())


class Stored:
    """What the drain found: key -> [(group, queue, offset)...], and each group's queues' minimum."""

    def __init__(self):
        self.where: dict[bytes, list[tuple[str, int, int]]] = collections.defaultdict(list)
        self.mins: dict[tuple[str, str, int], int] = {}
        self.errors: list[str] = []

    def add(self, group: str, topic: str, port: int, queues: int) -> int:
        got, mins, errors = drain(port, topic, queues)
        for k, q, o in got:
            self.where[k].append((group, q, o))
        for q, m in mins.items():
            self.mins[group, topic, q] = m
        self.errors += [f"{group} {e}" for e in errors]
        return len(got)


def fault_of(t: float, faults, grace: float) -> str:
    """The latest fault whose window holds time t: "<n> <kind> <target>", or "none"."""
    for n, f in reversed(list(enumerate(faults, 1))):
        if f.start <= t <= (f.end if f.end >= 0 else f.start) + grace:
            return f"{n} {f.kind} {f.target}"
    return "none"


class SourceCheck:
    """The tally of one source (a bulk topic or a real client)."""

    def __init__(self, name: str):
        self.name = name
        self.sends = collections.Counter()
        self.stored = collections.Counter()  # per outcome: how many were found stored
        self.lost: list[dict] = []
        self.reclaimed = 0
        self.lost_degraded = 0
        self.failed_stored: list[dict] = []
        self.misplaced: list[dict] = []
        self.duplicates = 0
        self.dup_by_fault = collections.Counter()

    def add(self, key: bytes, began: float, outcome: str, group: str | None, queue: int, offset: int,
            topic: str, stored: Stored, faults, grace: float) -> None:
        self.sends[outcome] += 1
        copies = stored.where.get(key, [])
        if copies:
            self.stored[outcome] += 1
        if len(copies) > 1:
            self.duplicates += len(copies) - 1
            self.dup_by_fault[fault_of(began, faults, grace)] += len(copies) - 1
        if outcome == "ok":
            if not copies:
                floor = stored.mins.get((group, topic, queue), 0) if group else 0
                if group and queue >= 0 and 0 <= offset < floor:
                    self.reclaimed += 1
                else:
                    self.lost.append({"key": key.decode(), "began_s": round(began, 3), "group": group,
                                      "queue": queue, "offset": offset, "fault": fault_of(began, faults, grace)})
            elif group and queue >= 0 and offset >= 0 and (group, queue, offset) not in copies:
                self.misplaced.append({"key": key.decode(), "acked": [group, queue, offset], "found": copies[:3]})
        elif outcome == "degraded" and not copies:
            self.lost_degraded += 1
        elif outcome == "failed" and copies:
            self.failed_stored.append({"key": key.decode(), "began_s": round(began, 3),
                                       "fault": fault_of(began, faults, grace)})

    def row(self) -> dict:
        return {"source": self.name, "sends": dict(self.sends), "stored": dict(self.stored),
                "acked": self.sends["ok"], "lost": len(self.lost), "lost_examples": self.lost[:50],
                "reclaimed": self.reclaimed, "degraded_missing": self.lost_degraded,
                "failed_but_stored": len(self.failed_stored), "failed_but_stored_examples": self.failed_stored[:20],
                "misplaced": len(self.misplaced), "misplaced_examples": self.misplaced[:20],
                "duplicates": self.duplicates, "duplicates_by_fault": dict(self.dup_by_fault)}


def check_bulk(sender, group: str, stored: Stored, faults, grace: float) -> SourceCheck:
    sc = SourceCheck(f"{sender.topic} (project Producer)")
    log = sender.log
    for i in range(len(log)):
        out = log.outcome[i]
        sc.add(sender.key(i), log.began[i], OUTCOMES[out], group, log.queue[i] if out in (OK, DEGRADED) else -1,
               log.offset[i] if out in (OK, DEGRADED) else -1, sender.topic, stored, faults, grace)
    return sc


def check_client(name: str, topic: str, sends, stored: Stored, faults, grace: float) -> SourceCheck:
    sc = SourceCheck(name)
    with sends.lock:
        items = list(sends.by_body.items())
    for body, (began, outcome, queue, offset, broker) in items:
        sc.add(body, began, outcome, broker or None, queue, offset if broker else -1, topic, stored, faults, grace)
    return sc


__all__ = ["Stored", "check_bulk", "check_client", "fault_of"]
