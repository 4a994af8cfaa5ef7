"""The local front's ReceiveMessage fast answer in process, less its answer's encoding: what
ConsumerActivity.receive_now costs a receive of 32 x 1 KiB around the broker's pop (the request's
fields, the route and group look-ups, LocalBroker.pop_now, the PopMessageProcessor's pop, its
checkpoint and revive record, the offsets, the latency metric), the receive_reply kernel's call
(receive_popped_values: the answer's MD5s and protobuf) timed apart and taken out. bench.grpc_receive_micro's
broker (one queue, 1 KiB messages); each repetition a new group reads the same records.
Per repetition: the CPU a receive and the same less the encode; over all of them the thread CPU of
blocks of 25 receives less the encode, as min / p10 / p25 / median (the low quantiles are what a
loaded host still shows of the path: a collection or a preemption lands in a few blocks only).

    python -m bench.grpc_receive_pop_micro [--messages 16000] [--reps 5]"""
from __future__ import annotations

import argparse
import asyncio
import time

import broker.proxy.consumer_activity as consumer_activity
from bench.grpc_ack_micro import LocalClient
from bench.grpc_receive_micro import TOPIC, _request
from bench.local_front_broker import filled_broker
from broker.proxy.config import ProxyConfig
from broker.proxy.consumer_activity import ConsumerActivity

BLOCK = 25


class _TimedReply:
    """receive_reply as the activity calls it, receive_popped_values' thread CPU summed."""

    def __init__(self, module):
        self._module = module
        self.ns = 0

    def receive_popped_values(self, *args):
        t = time.thread_time_ns()
        try:
            return self._module.receive_popped_values(*args)
        finally:
            self.ns += time.thread_time_ns() - t

    def __getattr__(self, name):
        return getattr(self._module, name)


async def run(messages: int, reps: int) -> None:
    timed = _TimedReply(consumer_activity.receive_reply)
    consumer_activity.receive_reply = timed
    async with filled_broker("grpc-receive-pop-micro-", TOPIC, messages) as (c, addr, local):
        act = ConsumerActivity(LocalClient(local), ProxyConfig())
        act.local = local
        whole, less, blocks = [], [], []
        for rep in range(reps):
            req = _request(f"ReceivePopMicro{rep}")
            await act.groups.get(addr, req.group.name)  # cached, as a front's first receive leaves it
            n = messages // 32 - 2
            timed.ns = 0
            t0 = time.process_time()
            bt, be = time.thread_time_ns(), 0
            for i in range(n):
                if i and i % BLOCK == 0:
                    now = time.thread_time_ns()
                    blocks.append((now - bt - (timed.ns - be)) / BLOCK / 1e3)
                    bt, be = now, timed.ns
                if not isinstance(act.receive_now(req, None), bytes):
                    raise SystemExit("receive_now did not answer at once")
            dt = (time.process_time() - t0) * 1e6 / n
            whole.append(dt)
            less.append(dt - timed.ns / 1e3 / n)
        act.renewals.close()
    blocks.sort()
    print("receive_now CPU-us a receive:", " ".join(f"{x:.1f}" for x in whole))
    print("less the encode:             ", " ".join(f"{x:.1f}" for x in less))
    print(f"blocks of {BLOCK} less the encode, thread CPU-us a receive: min {blocks[0]:.1f} "
          f"p10 {blocks[len(blocks) // 10]:.1f} p25 {blocks[len(blocks) // 4]:.1f} "
          f"median {blocks[len(blocks) // 2]:.1f} ({len(blocks)} blocks)", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=16000)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    asyncio.run(run(a.messages, a.reps))
