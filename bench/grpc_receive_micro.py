"""The local front's ReceiveMessage in process, without the endpoint: a BrokerController (ASYNC_FLUSH
master) with N 1 KiB messages in one queue, a ConsumerActivity with its LocalBroker, and two groups
receiving 32 at a time in turn (so both read the same records): one by the fast answer
(ConsumerActivity.receive_now: the framed answer, no task or async generator), one by the method's
own async generator (receive_message, as the servicer runs it); and, where the tree has it, a
third by the fast answer on the request's bytes (receive_bytes_now, as the endpoint calls it: what
it read of the request kept per its bytes). The process CPU around each receive, the broker's pop
included in each.

    python -m bench.grpc_receive_micro [--messages 16000]"""
from __future__ import annotations

import argparse
import asyncio
import time

from bench.grpc_ack_micro import LocalClient
from bench.local_front_broker import filled_broker
from broker.proxy.config import ProxyConfig
from broker.proxy.consumer_activity import ConsumerActivity
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb

TOPIC = "ReceiveMicro"


def _request(group: str) -> spb.ReceiveMessageRequest:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=32,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), broker=pb.Broker(name="broker-a")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    req.invisible_duration.FromSeconds(60)
    req.long_polling_timeout.FromSeconds(0)
    return req


async def _by_method(act: ConsumerActivity, req) -> int:
    n = 0
    async for r in act.receive_message(req, None):
        n += r.count(b"\x12") if isinstance(r, bytes) else 0  # (only its being read matters)
    return n


async def run(messages: int) -> None:
    async with filled_broker("grpc-receive-micro-", TOPIC, messages) as (c, addr, local):
        act = ConsumerActivity(LocalClient(local), ProxyConfig())
        act.local = local
        ways = {"now": _request("ReceiveMicroN"), "method": _request("ReceiveMicroM")}
        if hasattr(act, "receive_bytes_now"):
            ways["bytes"] = _request("ReceiveMicroB")
        for req in ways.values():  # the group's config cached, as a front's first receive leaves it
            await act.groups.get(addr, req.group.name)
        payloads = {way: req.SerializeToString() for way, req in ways.items()}  # (as a client sends it)
        cpu = dict.fromkeys(ways, 0.0)
        calls = dict.fromkeys(ways, 0)
        for _ in range(messages // 32 - 1):
            for way, req in ways.items():
                fresh = bytes(bytearray(payloads[way]))  # a new bytes object, as each call's message is
                t0 = time.process_time()
                if way == "now" or way == "bytes":
                    out = (act.receive_now(req, None) if way == "now"
                           else act.receive_bytes_now(fresh, None))
                    if not isinstance(out, bytes):
                        raise SystemExit(f"receive_now did not answer at once: {out!r}")
                else:
                    await _by_method(act, req)
                cpu[way] += time.process_time() - t0
                calls[way] += 1
        act.renewals.close()
        for way in ways:
            print(f"{way}: {calls[way]} receives of 32: {1e6 * cpu[way] / calls[way]:.1f} CPU-us a receive, "
                  f"{1e6 * cpu[way] / calls[way] / 32:.2f} CPU-us a message", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=16000)
    a = p.parse_args()
    asyncio.run(run(a.messages))
