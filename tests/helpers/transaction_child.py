"""A transactional producer killed with SIGKILL in the middle of its local transaction
(tests/test_transaction.py).

    python -m tests.helpers.transaction_child OPTIONS_JSON
        sends `count` messages with a TransactionProducer of `group` to `topic`; each local
        transaction prints "executing <body>" and never ends, so the test kills the process with
        its half messages undecided.
"""
from __future__ import annotations

import asyncio
import json
import sys

from broker.client.message import Message
from broker.client.transaction_producer import TransactionProducer


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Stuck:
    async def execute_local_transaction(self, msg, arg):
        say(f"executing {msg.body.decode()}")
        await asyncio.Event().wait()  # until the SIGKILL

    def check_local_transaction(self, msg):
        say(f"checked {msg.body.decode()}")
        return "UNKNOW"


async def main(opt: dict) -> None:
    async with TransactionProducer(opt["group"], Stuck(), opt["namesrv"]) as p:
        for i in range(opt["count"]):
            asyncio.ensure_future(p.send_message_in_transaction(Message(opt["topic"], f"{opt['prefix']}-{i}".encode())))
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
