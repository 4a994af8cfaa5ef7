"""The typed pop alone (PopMessageProcessor.pop_values: the checks, the queue read, the checkpoint and
its revive record, the pop offset), as the local front's ReceiveMessage runs it, without the front:
bench.grpc_receive_micro's broker (one queue, 1 KiB messages), each repetition a new group popping 32
at a time through the whole queue. Thread CPU of blocks of 25 pops, as min / p10 / p25 / median over
all repetitions (the low quantiles are what a loaded host still shows of the path), and each
repetition's mean. GC is frozen after the fill (the broker's cli freezes it too). --profile: cProfile
of the last repetition (Python calls a pop; Cython kernels are not counted).

    python -m bench.grpc_pop_values_micro [--messages 16000] [--reps 4] [--profile]"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import time

from bench.grpc_ack_micro import LocalClient
from bench.grpc_receive_micro import TOPIC, _request
from bench.local_front_broker import filled_broker
from broker.proxy.config import ProxyConfig
from broker.proxy.consumer_activity import ConsumerActivity

BLOCK = 25


async def run(messages: int, reps: int, profile: bool) -> None:
    async with filled_broker("grpc-pop-values-micro-", TOPIC, messages) as (c, addr, local):
        act = ConsumerActivity(LocalClient(local), ProxyConfig())
        act.local = local
        means, blocks, pr = [], [], None
        for rep in range(reps):
            req = _request(f"PopValuesMicro{rep}")
            await act.groups.get(addr, req.group.name)
            act.receive_now(req, None)  # the group made and its offsets initialized, as a first receive
            proc = local._pop_target[2]
            group, n = req.group.name, messages // 32 - 2
            gc.collect()
            gc.freeze()
            if profile and rep == reps - 1:
                pr = cProfile.Profile()
                pr.enable()
            t0 = bt = time.thread_time_ns()
            for i in range(n):
                if i and i % BLOCK == 0:
                    now = time.thread_time_ns()
                    blocks.append((now - bt) / BLOCK / 1e3)
                    bt = now
                popped = proc.pop_values(group, TOPIC, -1, 32, 60_000, 0)
                if popped.count != 32:
                    raise SystemExit(f"pop {i} found {popped.count} messages")
            means.append((time.thread_time_ns() - t0) / n / 1e3)
            if pr is not None:
                pr.disable()
        act.renewals.close()
    blocks.sort()
    print("pop_values thread CPU-us a pop (each repetition):", " ".join(f"{x:.1f}" for x in means))
    print(f"blocks of {BLOCK}: min {blocks[0]:.1f} p10 {blocks[len(blocks) // 10]:.1f} "
          f"p25 {blocks[len(blocks) // 4]:.1f} median {blocks[len(blocks) // 2]:.1f} ({len(blocks)} blocks)", flush=True)
    if pr is not None:
        st = pstats.Stats(pr)
        print(f"Python calls a pop (cProfile): {st.total_calls / n:.1f}")
        st.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=16000)
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    asyncio.run(run(a.messages, a.reps, a.profile))
