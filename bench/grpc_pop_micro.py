"""The local front's pop in process, without the endpoint: a BrokerController (ASYNC_FLUSH master)
with N 1 KiB messages in one queue, popped 32 at a time by broker.client.pop.pop_records through
the front's LocalBroker, by two groups in turn (so both read the same records): one through the
typed entry (LocalBroker.pop -> PopMessageProcessor.pop_values), one through POP_MESSAGE's command
(LocalBroker.invoke -> BrokerController.handle). The process CPU around each pop_records call,
the broker's pop (queues, checkpoint, revive record) included in both.

    python -m bench.grpc_pop_micro [--messages 16000]"""
from __future__ import annotations

import argparse
import asyncio
import time

from bench.local_front_broker import filled_broker
from broker.client import pop as _pop
from broker.proxy.local_broker import LocalBroker

TOPIC = "PopMicro"


class _Command:
    """A client without the typed entry: pop_records sends the command through invoke."""

    def __init__(self, local: LocalBroker):
        self.invoke = local.invoke


async def run(messages: int) -> None:
    async with filled_broker("grpc-pop-micro-", TOPIC, messages) as (c, addr, local):
        ways = {"typed": (local, "PopMicroT"), "command": (_Command(local), "PopMicroC")}
        cpu = dict.fromkeys(ways, 0.0)
        pops = dict.fromkeys(ways, 0)
        done = set()
        while len(done) < len(ways):
            for way, (via, group) in ways.items():
                if way in done:
                    continue
                t0 = time.process_time()
                r = await _pop.pop_records(via, addr, group, TOPIC, 60_000, 32, init_mode=0)
                cpu[way] += time.process_time() - t0
                if r.status != _pop.FOUND:
                    done.add(way)
                    continue
                pops[way] += 1
        for way in ways:
            print(f"{way}: {pops[way]} pops of 32: {1e6 * cpu[way] / pops[way]:.1f} CPU-us a pop, "
                  f"{1e6 * cpu[way] / pops[way] / 32:.2f} CPU-us a message", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=16000)
    asyncio.run(run(p.parse_args().messages))
