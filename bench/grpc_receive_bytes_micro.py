"""The local front's ReceiveMessage on the request's bytes in process (ConsumerActivity.receive_bytes_now,
as the endpoint calls it), without the endpoint: bench.grpc_receive_micro's broker (one queue, 1 KiB
messages), each repetition a new group receiving 32 at a time through the whole queue, the answer's
encode included. Thread CPU of blocks of 25 receives, GC frozen and raised after the fill as the
broker's cli does: each repetition's mean, then min / p10 / p25 / median of the blocks over all
repetitions (the low quantiles are what a loaded host still shows of the path). Runs against any
tree: `cd TREE && PYTHONPATH=TREE .venv/bin/python REPO/bench/grpc_receive_bytes_micro.py`.

    python -m bench.grpc_receive_bytes_micro [--messages 16000] [--reps 3]"""
from __future__ import annotations

import argparse
import asyncio
import gc
import time

from bench.grpc_ack_micro import LocalClient
from bench.grpc_receive_micro import TOPIC, _request
from bench.local_front_broker import filled_broker
from broker.proxy.config import ProxyConfig
from broker.proxy.consumer_activity import ConsumerActivity

BLOCK = 25


async def run(messages: int, reps: int) -> None:
    async with filled_broker("grpc-receive-bytes-micro-", TOPIC, messages) as (c, addr, local):
        act = ConsumerActivity(LocalClient(local), ProxyConfig())
        act.local = local
        blocks, means = [], []
        for rep in range(reps):
            req = _request(f"ReceiveBytes{rep}")
            await act.groups.get(addr, req.group.name)  # the group's config cached, as a front's first receive leaves it
            payload = req.SerializeToString()
            n = messages // 32 - 1
            fresh = [bytes(bytearray(payload)) for _ in range(n)]  # a new bytes object a call, as a client's
            if not isinstance(act.receive_bytes_now(fresh[0], None), bytes):
                raise SystemExit("receive_bytes_now did not answer at once")
            gc.collect()
            gc.freeze()
            gc.set_threshold(10_000, 50, 100)
            total = 0.0
            starts = range(1, n - BLOCK + 1, BLOCK)
            for b in starts:
                t0 = time.thread_time()
                for i in range(b, b + BLOCK):
                    act.receive_bytes_now(fresh[i], None)
                t = time.thread_time() - t0
                total += t
                blocks.append(1e6 * t / BLOCK)
            means.append(1e6 * total / (BLOCK * len(starts)))
        act.renewals.close()
        blocks.sort()

        def q(p: float) -> float:
            return blocks[int(p * (len(blocks) - 1))]
        print(f"receive_bytes_now thread CPU-us a receive of 32 (each repetition): {' '.join(f'{m:.1f}' for m in means)}")
        print(f"blocks of {BLOCK}: min {q(0):.1f} p10 {q(.1):.1f} p25 {q(.25):.1f} median {q(.5):.1f} "
              f"({len(blocks)} blocks)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=16000)
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    asyncio.run(run(a.messages, a.reps))
