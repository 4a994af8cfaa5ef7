"""Child processes for tests/test_reliable.py, killed with SIGKILL at a chosen point.

    python -m tests.helpers.reliable_child producer OPTIONS_JSON
        writes `count` orders and their stubs in one transaction; the send after the commit blocks
        (prints "blocked <id>") so the test can kill the process between the database write and
        the send.
    python -m tests.helpers.reliable_child consumer OPTIONS_JSON
        an idempotent consumer that never commits offsets; prints "done <id>" after each handler
        commit, and blocks after the commit of the `block_after`-th message (before its ack), so
        the test can kill it after the handler and before the acknowledgement. With
        `block_in_handler` k it prints "handled <id>" after each handler's insert and blocks in the
        k-th handler instead: killed there, it dies mid-batch, earlier handlers of the batch run
        and not committed. `batch_size` is the consumer's (default: the library's).
"""
from __future__ import annotations

import asyncio
import json
import sys

from broker.client.message import Message
from broker.client.producer import Producer
from broker.client.push_consumer import PushConsumer
from broker.reliable import IdempotentConsumer, OutboxProducer


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class BlockingProducer(Producer):
    """Never sends: announces the send it was asked for and waits for the SIGKILL."""

    async def send(self, msg, timeout=3.0):
        say(f"blocked {msg.properties['RELIABLE_ID']}")
        await asyncio.Event().wait()


async def producer(opt: dict) -> None:
    outbox = OutboxProducer(BlockingProducer(opt["group"], opt["namesrv"]), opt["store"], resend=False,
                            resend_after=opt["resend_after"])
    async with outbox:
        async with outbox.transaction() as tx:
            await tx.execute("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total INTEGER)")
            for i in range(opt["count"]):
                rid = f"{opt['prefix']}-{i}"
                await tx.execute("INSERT INTO orders (id, total) VALUES (?, ?)", (rid, i))
                await outbox.send(Message(opt["topic"], rid.encode()), tx=tx, id=rid)
            say("committing")
        # not reached: the send after the commit blocks


async def consumer(opt: dict) -> None:
    done: list[str] = []
    forever = asyncio.Event()

    handled: list[str] = []

    async def handler(msg, session):
        rid = msg.properties["RELIABLE_ID"]
        await session.execute("INSERT INTO effects (rid, worker) VALUES (?, ?)", (rid, "child"))
        handled.append(rid)
        say(f"handled {rid}")
        if len(handled) == opt.get("block_in_handler"):
            await forever.wait()  # mid-batch: the test kills us here

    async def on_confirmed(rid, msg):
        done.append(rid)
        say(f"done {rid}")
        if len(done) == opt["block_after"]:
            await forever.wait()  # committed, not acknowledged: the test kills us here

    pc = PushConsumer(opt["group"], opt["namesrv"], consume_from_first=True, persist_interval=3600)
    pc.subscribe(opt["topic"])
    kw = {"batch_size": opt["batch_size"]} if "batch_size" in opt else {}
    ic = IdempotentConsumer(pc, handler, opt["store"], opt.get("redis"), on_confirmed=on_confirmed, **kw)
    async with ic:
        say("ready")
        await forever.wait()


if __name__ == "__main__":
    cmd, options = sys.argv[1], json.loads(sys.argv[2])
    asyncio.run({"producer": producer, "consumer": consumer}[cmd](options))
