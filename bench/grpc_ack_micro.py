"""The local front's AckMessage in process, without the endpoint: a BrokerController (ASYNC_FLUSH
master) with N 1 KiB messages in one queue, a ConsumerActivity with its LocalBroker popping 32 at a
time and acking each pop's handles in one AckMessage; the process CPU around the acks only.

    python -m bench.grpc_ack_micro [--messages 16000] [--mode now|call]

`now`: ConsumerActivity.ack_now on the request's bytes (the fast unary local mode serves);
`call`: ack_message on the request parsed by protobuf (the servicer's path; a tree without
ack_now has only this one). Run it from each tree (PYTHONPATH=TREE) alternately to compare."""
from __future__ import annotations

import argparse
import asyncio
import time

from bench.local_front_broker import filled_broker
from broker.client import pop as _pop
from broker.proxy.config import ProxyConfig
from broker.proxy.consumer_activity import ConsumerActivity
from broker.proxy.local_broker import LocalBroker
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb

TOPIC, GROUP = "AckMicro", "AckMicroG"


class _Route:
    def __init__(self, addr: str):
        self.addr = addr

    def master_addr(self, name: str):
        return self.addr if name == "broker-a" else None


class LocalClient:
    """What ConsumerActivity asks of its client for an ack (tests/test_local_batch_ack.py too): a
    cached route of every topic to this broker ("broker-a", BrokerConfig's default name), and
    invoke (the acks made alone) through the LocalBroker. Stands in for the front's
    MQClientInstance, whose routes come from a name server these in-process runs have not."""

    def __init__(self, local: LocalBroker):
        route = _Route(local.addr)
        self.invoke = local.invoke

        class Routes:
            @staticmethod
            def peek(topic):
                return route

            @staticmethod
            async def get(topic, refresh=False):
                return route
        self.routes = Routes()


async def run(messages: int, mode: str) -> None:
    async with filled_broker("grpc-ack-micro-", TOPIC, messages) as (c, addr, local):
        act = ConsumerActivity(LocalClient(local), ProxyConfig())
        act.local = local
        cpu = 0.0
        calls = acked = 0
        while True:
            r = await _pop.pop(local, addr, "broker-a", GROUP, TOPIC, 60_000, 32)
            if not r.messages:
                break
            payload = spb.AckMessageRequest(group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC), entries=[
                spb.AckMessageEntry(message_id=m.msg_id, receipt_handle=f"{_pop.handle_of(m)} {m.commit_log_offset}")
                for m in r.messages]).SerializeToString()
            t0 = time.process_time()
            if mode == "now":
                res = act.ack_now(payload, None)
                if type(res) is not bytes:  # (a future and a function of it; on a tree before the bytes answer too)
                    fut, respond = res
                    if not fut.done():
                        await fut
                    res = respond(fut)
            else:
                res = await act.ack_message(spb.AckMessageRequest.FromString(payload), None)
            cpu += time.process_time() - t0
            if type(res) is not bytes:
                raise SystemExit(f"not every entry acked: {res}")
            calls += 1
            acked += len(r.messages)
        act.renewals.close()
        print(f"{mode}: {calls} AckMessage calls, {acked} messages: {1e6 * cpu / calls:.1f} CPU-us a call, "
              f"{1e6 * cpu / acked:.2f} CPU-us a message", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=16000)
    p.add_argument("--mode", choices=["now", "call"], default="now")
    a = p.parse_args()
    asyncio.run(run(a.messages, a.mode))
