"""ClientChannel.coalesce_delay (set by the gRPC front, ProxyConfig.remotingCoalesceMicros): while
other requests are in flight, a request waits for those of the next loop turns and they leave in
one write; a request with none other in flight is written at the end of its turn, as without it."""
from __future__ import annotations

import asyncio

from broker.client.channel import ClientChannel, open_channel


async def _writes_of(coalesce_delay: float) -> list[int]:
    """The sizes of the channel's writes: one lone request, then five rendered in five turns while
    it is in flight."""
    server = await asyncio.start_server(lambda r, w: r.read(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ch = await open_channel("127.0.0.1", port)
    ch.coalesce_delay = coalesce_delay
    writes: list[int] = []
    five_written = asyncio.Event()
    write = ch.transport.write

    def counted(data) -> None:
        writes.append(len(data))
        if sum(writes) >= 60:
            five_written.set()
        write(data)
    ch.transport.write = counted
    opaques = []
    try:
        opaque, _ = ch.fast_request(60)
        opaques.append(opaque)
        ch.out.extend(b"a" * 10)
        await asyncio.sleep(0)  # one loop turn: the turn's flush
        await asyncio.sleep(0)
        assert writes == [10], "a lone request is written at the end of its turn"
        for _ in range(5):
            opaque, _ = ch.fast_request(60)
            opaques.append(opaque)
            ch.out.extend(b"b" * 10)
            await asyncio.sleep(0)
        await asyncio.wait_for(five_written.wait(), 30)
        return writes
    finally:
        for opaque in opaques:
            ch.forget(opaque)
        ch.close()
        server.close()
        await server.wait_closed()


def test_without_delay_each_turn_writes_its_own_request():
    assert asyncio.run(_writes_of(0.0)) == [10] * 6


def test_with_delay_requests_in_flight_share_one_write():
    # the five wait for the delay (a second: far more than their five loop turns) and leave together
    assert asyncio.run(_writes_of(1.0)) == [10, 50]


def test_the_class_default_is_off():
    assert ClientChannel.coalesce_delay == 0.0
