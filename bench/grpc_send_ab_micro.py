"""Two versions of the local front's SendMessage in one process, against one broker: this tree's
SendMessageActivity.send_bytes_now and the one of another tree's send_activity.py (loaded from its
path, the rest of the broker this tree's), in alternating blocks of 64 calls, each block followed by
its turn's end (the sends settled, as grpc_send_micro's typed mode). On the shared 2-core host two
runs of grpc_send_micro moved by more than a change of half a microsecond (a run 6.7-9.8 CPU-us a
call, one tree against itself); blocks alternated within one process meet the same host, and the
low percentiles of the per-block CPU a call leave out the blocks another process disturbed. Only
the activity's Python differs: a kernel change is measured by its own timing.

    cd TREE && PYTHONPATH=TREE .venv/bin/python -m bench.grpc_send_ab_micro OTHER/broker/proxy/send_activity.py
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shutil
import statistics
import time

from bench.grpc_send_micro import PEER, _Context, request, routed_broker
from broker.proxy.config import ProxyConfig
from broker.proxy.local_broker import LocalBroker
from broker.proxy.send_activity import ProxyProducer, SendMessageActivity


def _other_activity(path: str):
    spec = importlib.util.spec_from_file_location("other_send_activity", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a Python module")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.SendMessageActivity


async def run(other_path: str, blocks: int, inflight: int) -> None:
    other_cls = _other_activity(other_path)
    c, root, client, addr = await routed_broker("grpc-send-ab-micro-", 512 << 20)
    try:
        producer = ProxyProducer("proxy-producer", client=client)
        here, other = SendMessageActivity(producer, ProxyConfig()), other_cls(producer, ProxyConfig())
        payload, ctx = request(), _Context()
        fut, respond = here.send_bytes_now(payload, ctx)  # the topic auto-created, the connection made
        await fut
        respond(fut)
        here.local = other.local = LocalBroker(addr, c.handle, PEER)
        per_call = {"other": [], "here": []}
        for b in range(blocks):
            order = (("other", other), ("here", here)) if b % 2 else (("here", here), ("other", other))
            for name, act in order:
                send = act.send_bytes_now
                t0 = time.thread_time()
                for _ in range(inflight):
                    if type(send(payload, ctx)) is not bytes:
                        raise SystemExit(f"{name}: a send not answered at once (the typed path only is measured)")
                await asyncio.sleep(0)  # the turn ends: the sends settle (end_turn)
                per_call[name].append((time.thread_time() - t0) / inflight * 1e6)
        for name, t in per_call.items():
            t.sort()
            q = lambda f: t[int(f * (len(t) - 1))]  # noqa: E731
            print(f"{name}: {len(t)} blocks of {inflight}, loop CPU-us a call: p10 {q(0.1):.2f} p25 {q(0.25):.2f} "
                  f"median {q(0.5):.2f} mean {statistics.mean(t):.2f}", flush=True)
    finally:
        await c.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("other", help="the other tree's broker/proxy/send_activity.py")
    p.add_argument("--blocks", type=int, default=1500, help="blocks of each version")
    p.add_argument("--inflight", type=int, default=64)
    a = p.parse_args()
    asyncio.run(run(a.other, a.blocks, a.inflight))
