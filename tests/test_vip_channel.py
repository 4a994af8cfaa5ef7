"""The VIP channel: as RocketMQ's broker (its fastRemotingServer), ours also listens on
listenPort - 2 and serves the same requests there, the port Java clients with vipChannelEnabled and
the Dashboard's admin calls use (the Java client end to end: tests/test_java_client.py)."""
from __future__ import annotations

import asyncio
import socket

import pytest

from broker.remoting import codes
from broker.remoting.connection import connect
from broker.remoting.command import RemotingCommand
from tests.test_broker_remoting import Broker, _heartbeat, _records


def test_the_vip_channel_on_listen_port_minus_2_answers_like_the_main_port(tmp_path):
    async def go():
        async with Broker(tmp_path) as b:
            assert b.controller.server.fast_port == b.port - 2
            vip = await connect("127.0.0.1", b.port - 2)
            try:
                async def call(code, ext, body=b""):
                    return await vip.request(RemotingCommand.request(code, ext, body), 10)
                r = await call(codes.SEND_MESSAGE_V2, {
                    "a": "pg", "b": "Vip", "c": "TBW102", "d": 4, "e": 1, "f": 0, "g": 1, "h": 0,
                    "i": "TAGS\x01TagA\x02", "j": 0, "k": False}, b"through the VIP channel")
                assert (r.code, r.ext["queueId"], r.ext["queueOffset"]) == (codes.SUCCESS, "1", "0")
                assert (await call(codes.HEART_BEAT, {}, _heartbeat("vip@1", "vg", "Vip"))).code == codes.SUCCESS
                r = await call(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "vg"})
                assert r.code == codes.SUCCESS and b"vip@1" in bytes(r.body)
                # what was sent on one port is read on the other, one store behind both
                await b.controller.store.wait_dispatched(b.controller.store.offsets()["wrote"], 10)
                got = await b.pull("Vip", 1, 0, sys_flag=0)
                assert [m.body for m in _records(got.body)] == [b"through the VIP channel"]
                r = await call(codes.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "vg", "topic": "Vip", "queueId": 1,
                                                              "commitOffset": 1})
                assert r.code == codes.SUCCESS
                r = await b.call(codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": "vg", "topic": "Vip", "queueId": 1})
                assert (r.code, r.ext["offset"]) == (codes.SUCCESS, "1")
                r = await call(9999, {})
                assert r.code == codes.REQUEST_CODE_NOT_SUPPORTED
            finally:
                vip.close()
        # closing the broker closes both ports
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", b.port - 2), timeout=2).close()

    asyncio.run(go())


def test_a_broker_whose_vip_port_is_taken_does_not_start_and_says_why(tmp_path):
    async def go():
        b = Broker(tmp_path)
        port = b.controller.store_config.listenPort
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", port - 2))
            taken.listen()
            with pytest.raises(OSError, match=rf"127\.0\.0\.1:{port - 2}, the VIP channel \(listenPort - 2\)"):
                await b.controller.start()
        # nothing left listening on the main port either (start() closed the store it opened)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))

    asyncio.run(go())
