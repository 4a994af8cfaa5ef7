"""An in-process broker filled for the local front's micro benchmarks (bench/grpc_ack_micro.py,
bench/grpc_pop_micro.py): a BrokerController (ASYNC_FLUSH master, its services as processes) with
`messages` 1 KiB messages sent to `topic` over a real connection and dispatched, and the
LocalBroker the broker's own gRPC front would reach it through."""
from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time

from bench.processes import free_port
from broker.proxy.local_broker import LocalBroker
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.server.broker_config import BrokerConfig
from broker.server.broker_controller import BrokerController
from broker.store.config import MessageStoreConfig


@contextlib.asynccontextmanager
async def filled_broker(prefix: str, topic: str, messages: int):
    """(the BrokerController, its address, its LocalBroker), the topic holding `messages`."""
    root = tempfile.mkdtemp(prefix=prefix)
    c = BrokerController(BrokerConfig(), MessageStoreConfig(
        storePathRootDir=root + "/store", listenPort=free_port(), brokerIP1="127.0.0.1",
        mappedFileSizeCommitLog=64 << 20), host="127.0.0.1")
    await c.start()
    try:
        conn = await connect("127.0.0.1", c.server.port)
        body = b"x" * 1024
        await asyncio.gather(*(conn.request(RemotingCommand.request(codes.SEND_MESSAGE_V2, {
            "a": "pg", "b": topic, "c": "TBW102", "d": 1, "e": 0, "f": 0, "g": int(time.time() * 1000), "h": 0,
            "i": f"UNIQ_KEY\x01k{i}\x02", "j": 0, "k": False}, body), 30) for i in range(messages)))
        conn.close()
        await c.store.wait_dispatched(c.store.commit_log.wrote, 30)
        addr = f"127.0.0.1:{c.server.port}"
        yield c, addr, LocalBroker(addr, c.handle, "127.0.0.1:1")
    finally:
        await c.close()
        shutil.rmtree(root, ignore_errors=True)
