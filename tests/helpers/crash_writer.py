"""Child process of tests/test_crash.py: opens a MessageStore and writes until it is killed.

    python -m tests.helpers.crash_writer --root STORE --round R --flush SYNC_FLUSH [--writers 16] [--seed S]

Prints `OPEN <clean 0|1> <recovered end> <truncated_at or ->` once the store is open, then one line
per acknowledged put (status PUT_OK), written with a single write(2) after the put returned:

    ACK <topic> <queue id> <queue offset> <physical offset> <record size> <body hash>

Other statuses print `NACK ...` (not acknowledged). Bodies describe themselves (`round-writer-seq|`,
random filler, `#crc32` of the rest), so a reader can tell a whole body from a half-written one
without knowing what was acknowledged; KEYS and TAGS are derived from the same numbers.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import random
import sys
import time
import zlib

TOPICS = ("CrashA", "CrashB")
QUEUES = 4
SEGMENT = 1 << 20
CQ_FILE = 20 * 2000


def make_body(rnd: random.Random, round_: int, writer: int, seq: int) -> bytes:
    """A body of random length 10..3000 bytes (never shorter than its own header and checksum)."""
    prefix = b"%d-%d-%d|" % (round_, writer, seq)
    length = rnd.randint(10, 3000)
    core = prefix + rnd.randbytes(max(0, length - len(prefix) - 9))
    return core + b"#%08x" % zlib.crc32(core)


def check_body(body: bytes) -> tuple[int, int, int]:
    """(round, writer, seq) of a body made by make_body; AssertionError if it is not whole."""
    assert len(body) >= 9 and body[-9:-8] == b"#", f"body without checksum trailer: {body[:40]!r}..."
    core = body[:-9]
    assert b"#%08x" % zlib.crc32(core) == body[-9:], f"body checksum mismatch: {body[:40]!r}..."
    head, sep, _ = core.partition(b"|")
    assert sep, f"body without header: {body[:40]!r}"
    r, w, s = (int(x) for x in head.split(b"-"))
    return r, w, s


def body_hash(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=8).hexdigest()


def keys_of(round_: int, writer: int, seq: int) -> str:
    return f"k{round_}-{writer}-{seq}"


def tags_of(writer: int) -> str:
    return f"Tag{writer % 3}"


def emit(line: str) -> None:
    os.write(1, line.encode() + b"\n")  # one write(2) per line: a kill never leaves half a line


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--round", type=int, required=True)
    p.add_argument("--flush", default="SYNC_FLUSH")
    p.add_argument("--writers", type=int, default=16)
    p.add_argument("--seed", default="0")
    p.add_argument("--max-seconds", type=float, default=60.0, help="give up (exit 3) if nobody kills us")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    from broker.services.message_store import MessageStore, PutStatus
    from broker.store.config import MessageStoreConfig

    cfg = MessageStoreConfig(storePathRootDir=args.root, mappedFileSizeCommitLog=SEGMENT,
                             mappedFileSizeConsumeQueue=CQ_FILE, flushDiskType=args.flush)
    store = MessageStore(cfg)
    await store.start()
    rec = store.recovery
    emit(f"OPEN {int(rec.clean)} {rec.max_offset} {'-' if rec.truncated_at is None else rec.truncated_at}")
    sync = args.flush == "SYNC_FLUSH"
    stop_at = time.monotonic() + args.max_seconds

    async def writer(w: int) -> None:
        rnd = random.Random(f"{args.seed}/{args.round}/{w}")
        seq = 0
        while time.monotonic() < stop_at:
            topic = TOPICS[rnd.randrange(len(TOPICS))]
            qid = rnd.randrange(QUEUES)
            body = make_body(rnd, args.round, w, seq)
            props = {"TAGS": tags_of(w), "KEYS": keys_of(args.round, w, seq)}
            r = await store.put(topic, qid, body, props)
            word = "ACK" if r.status is PutStatus.PUT_OK else "NACK"
            emit(f"{word} {topic} {qid} {r.queue_offset} {r.physical_offset} {r.size} {body_hash(body)}")
            seq += 1
            if not sync:
                await asyncio.sleep(0)  # ASYNC_FLUSH puts never suspend: let the other writers run

    await asyncio.gather(*(writer(w) for w in range(args.writers)))
    emit("TIMEOUT")
    os._exit(3)  # nobody killed us: the test failed; leave the store as a crash would


if __name__ == "__main__":
    asyncio.run(main())
