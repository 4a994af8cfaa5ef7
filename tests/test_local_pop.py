"""The local front's pop handed to the broker as values (LocalBroker.pop ->
PopMessageProcessor.pop_values, read by broker.client.pop.pop_records), against a broker in this
process: the same records and header values as POP_MESSAGE's command, the same refusals (code and
remark), long polling and the durable wait (SYNC_FLUSH) kept, the latency metric recorded, and the
wire's guards (a replaying or switching broker declines to the command)."""
from __future__ import annotations

import asyncio
import time

import pytest

from broker.client import pop as _pop
from broker.client.errors import ResponseError
from broker.common import extra_info as ei
from broker.proxy.local_broker import LocalBroker
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.server.broker_config import BrokerConfig
from broker.server.broker_controller import BrokerController
from broker.server.pop.revive_log import REVIVE_GROUP
from broker.store.config import MessageStoreConfig
from broker.store.results import PutStatus
from tests.conftest import free_port

TOPIC = "LocalPop"


class _Command:
    """A client without the typed entry: pop_records sends POP_MESSAGE's command through invoke."""

    def __init__(self, local: LocalBroker):
        self.invoke = local.invoke


async def _broker(tmp_path, n: int, **store):
    c = BrokerController(BrokerConfig(), MessageStoreConfig(
        storePathRootDir=str(tmp_path / "store"), listenPort=free_port(), brokerIP1="127.0.0.1",
        mappedFileSizeCommitLog=4 << 20, **store), host="127.0.0.1")
    await c.start()
    await _send(c, n)
    addr = f"127.0.0.1:{c.server.port}"
    return c, addr, LocalBroker(addr, c.handle, "127.0.0.1:1")


async def _send(c, n: int, first: int = 0) -> None:
    conn = await connect("127.0.0.1", c.server.port)
    try:
        for i in range(first, first + n):
            r = await conn.request(RemotingCommand.request(codes.SEND_MESSAGE_V2, {
                "a": "pg", "b": TOPIC, "c": "TBW102", "d": 4, "e": i % 2, "f": 0, "g": int(time.time() * 1000),
                "h": 0, "i": f"UNIQ_KEY\x01k{i}\x02TAGS\x01t{i % 3}\x02", "j": 0, "k": False}, b"m%d" % i), 10)
            assert r.code == codes.SUCCESS
    finally:
        conn.close()
    await c.store.wait_dispatched(c.store.commit_log.wrote, 10)  # every message in its queue


def _pops_recorded(c, held: bool | None = None) -> int:
    return sum(sum(row[:-1]) for (req, _, lp, _), row in c.rpc_latency.series.items()
               if req == "pop_message" and (held is None or lp == held))


def _same(wire: _pop.PoppedRecords, typed: _pop.PoppedRecords) -> None:
    """The same answer but for what each pop makes its own (pop time, revive queue)."""
    assert typed.status == wire.status
    assert bytes(typed.body) == bytes(wire.body)
    assert typed.rest_num == wire.rest_num
    assert typed.invisible_time == wire.invisible_time
    assert typed.starts() == ei.parse_start_offset_info(wire.start_offset_info)
    assert (typed.order_count_info is None) == (wire.order_count_info is None)


def test_the_typed_pop_answers_as_the_command(tmp_path):
    async def go():
        c, addr, local = await _broker(tmp_path, 40)
        cmd = _Command(local)
        try:
            for queue_id, n, exp in ((0, 8, "*"), (1, 5, "*"), (0, 32, "t1||t2"), (1, 32, "*"), (-1, 32, "*")):
                before = _pops_recorded(c)
                # two groups, each new: the same records from the same offsets, one by each path
                wire = await _pop.pop_records(cmd, addr, f"G{queue_id}{n}w", TOPIC, 60_000, n, queue_id,
                                              expression=exp)
                typed = await _pop.pop_records(local, addr, f"G{queue_id}{n}t", TOPIC, 60_000, n, queue_id,
                                               expression=exp)
                assert _pops_recorded(c) == before + 2  # rocketmq_rpc_latency's POP_MESSAGE, both ways
                assert wire.status == _pop.FOUND and wire.start_offset_info and typed.start_offset_info is None
                if queue_id >= 0:
                    _same(wire, typed)
                else:  # every queue, each pop from a random one: as many, the same start offsets and rest
                    w = _pop.read_records(wire, "broker-a", TOPIC).messages
                    t = _pop.read_records(typed, "broker-a", TOPIC).messages
                    assert len(w) == len(t) == 32
                    assert typed.starts() == ei.parse_start_offset_info(wire.start_offset_info)
                    assert typed.rest_num == wire.rest_num
                # read into messages alike (handles built from the values), then acked alike
                w = _pop.read_records(wire, "broker-a", TOPIC).messages
                t = _pop.read_records(typed, "broker-a", TOPIC).messages
                assert len(w) == len(t) > 0
                for mw, mt in zip(w, t):
                    hw, ht = ei.parse(_pop.handle_of(mw)), ei.parse(_pop.handle_of(mt))
                    if queue_id >= 0:
                        assert (hw.ck_offset, hw.queue_id, hw.queue_offset) == \
                            (ht.ck_offset, ht.queue_id, ht.queue_offset)
                    assert ht.pop_time == typed.pop_time and ht.revive_qid == typed.revive_qid
                for m in t:
                    await _pop.ack(local, addr, f"G{queue_id}{n}t", TOPIC, _pop.handle_of(m))
            # the same two groups again over every queue: the queues a full pop does not read are looked
            # up in the offset table the first pops filled (their offsets in restNum), alike both ways
            for _ in range(2):
                wire = await _pop.pop_records(cmd, addr, "G-132w", TOPIC, 60_000, 4, -1)
                typed = await _pop.pop_records(local, addr, "G-132t", TOPIC, 60_000, 4, -1)
                assert wire.status == typed.status
                assert typed.rest_num == wire.rest_num
            # nothing left for a group: NO_NEW_MSG both ways, restNum alike
            wire = await _pop.pop_records(cmd, addr, "G18w", TOPIC, 60_000, 8, 1, expression="zzz")
            typed = await _pop.pop_records(local, addr, "G18t", TOPIC, 60_000, 8, 1, expression="zzz")
            assert wire.status == typed.status == _pop.NO_NEW_MSG
            assert wire.rest_num == typed.rest_num
            # an orderly pop: the order counts as the header carries them
            wire = await _pop.pop_records(cmd, addr, "GOw", TOPIC, 60_000, 4, 0, order=True, attempt_id="a")
            typed = await _pop.pop_records(local, addr, "GOt", TOPIC, 60_000, 4, 0, order=True, attempt_id="a")
            _same(wire, typed)
            assert wire.order_count_info == typed.order_count_info
        finally:
            await c.close()
    asyncio.run(go())


@pytest.mark.parametrize("group, topic, max_nums, queue_id", [
    ("GR", "NoSuchTopic", 8, -1),  # TOPIC_NOT_EXIST
    ("GR", TOPIC, 0, -1),  # INVALID_PARAMETER: maxMsgNums
    ("GR", TOPIC, 8, 9),  # INVALID_PARAMETER: queueId
    (REVIVE_GROUP, TOPIC, 8, -1),  # NO_PERMISSION: the revive log's group
])
def test_a_refusal_is_the_commands_code_and_remark(tmp_path, group, topic, max_nums, queue_id):
    async def go():
        c, addr, local = await _broker(tmp_path, 1)
        try:
            with pytest.raises(ResponseError) as wire:
                await _pop.pop_records(_Command(local), addr, group, topic, 60_000, max_nums, queue_id)
            before = _pops_recorded(c)
            with pytest.raises(ResponseError) as typed:
                await _pop.pop_records(local, addr, group, topic, 60_000, max_nums, queue_id)
            assert _pops_recorded(c) == before + 1
            assert (typed.value.code, typed.value.remark) == (wire.value.code, wire.value.remark)
            assert typed.value.code != codes.SUCCESS
        finally:
            await c.close()
    asyncio.run(go())


def test_a_held_pop_is_answered_by_the_send_that_comes(tmp_path):
    async def go():
        c, addr, local = await _broker(tmp_path, 1)
        try:
            assert (await _pop.pop_records(local, addr, "GH", TOPIC, 60_000, 8, 0)).status == _pop.FOUND  # m0
            held = asyncio.ensure_future(_pop.pop_records(local, addr, "GH", TOPIC, 60_000, 8, 0, poll_ms=20_000))
            await asyncio.sleep(0)  # one loop turn: the pop has looked, found nothing and holds
            assert not held.done()
            await _send(c, 1, first=2)  # (to queue 0)
            popped = await asyncio.wait_for(held, 10)
            assert popped.status == _pop.FOUND
            assert [m.body for m in _pop.read_records(popped, "broker-a", TOPIC).messages] == [b"m2"]
            assert _pops_recorded(c, held=True) == 1  # timed as a long-polling pop
            # held to its deadline: NO_NEW_MSG
            popped = await _pop.pop_records(local, addr, "GH", TOPIC, 60_000, 8, 0, poll_ms=50)
            assert popped.status == _pop.NO_NEW_MSG
            # the front's timeout before the hold's end: BrokerUnreachable, as invoke's
            with pytest.raises(Exception) as e:
                await _pop.pop_records(local, addr, "GH", TOPIC, 60_000, 8, 0, poll_ms=20_000, timeout=0.05)
            assert type(e.value).__name__ == "BrokerUnreachable"
        finally:
            await c.close()
    asyncio.run(go())


def test_sync_flush_answers_once_the_checkpoint_is_durable(tmp_path):
    async def go():
        c, addr, local = await _broker(tmp_path, 4, flushDiskType="SYNC_FLUSH")
        try:
            processor = next(p for p in c.pop.processors if hasattr(p, "pop_values"))
            got = []
            pop_values = processor.pop_values
            processor.pop_values = lambda *a: got.append(pop_values(*a)) or got[-1]
            typed = await _pop.pop_records(local, addr, "GS", TOPIC, 60_000, 4, 0)
            assert typed.status == _pop.FOUND
            assert isinstance(got[0], asyncio.Future)  # the checkpoint's record waited for its flush
        finally:
            await c.close()
    asyncio.run(go())


def test_a_revive_record_not_kept_answers_as_the_command(tmp_path):
    async def go():
        c, addr, local = await _broker(tmp_path, 8)
        try:
            log = c.pop.revive.log
            puts = []

            def durable_since(mark):  # the put of the pop's checkpoint record, answered by the test
                puts.append(asyncio.get_running_loop().create_future())
                return puts[-1]
            log.durable_since = durable_since

            async def pop(via, group: str, status: PutStatus):
                n = len(puts)
                task = asyncio.ensure_future(_pop.pop_records(via, addr, group, TOPIC, 60_000, 2, 0))
                while len(puts) == n:
                    await asyncio.sleep(0)  # loop turns until the pop has written its checkpoint
                assert not task.done()
                puts[-1].set_result(status)
                try:
                    return await task
                except ResponseError as e:
                    return e.code, e.remark
            wire = await pop(_Command(local), "GKw", PutStatus.SERVICE_NOT_AVAILABLE)
            assert wire[0] == codes.SERVICE_NOT_AVAILABLE
            assert await pop(local, "GKt", PutStatus.SERVICE_NOT_AVAILABLE) == wire
            wire = await pop(_Command(local), "GKw", PutStatus.FLUSH_DISK_TIMEOUT)  # kept: answered as found
            _same(wire, await pop(local, "GKt", PutStatus.FLUSH_DISK_TIMEOUT))
        finally:
            await c.close()
    asyncio.run(go())


def test_a_broker_not_serving_at_once_declines_to_the_command(tmp_path):
    async def go():
        c, addr, local = await _broker(tmp_path, 2)
        args = ("GD", TOPIC, -1, 8, 60_000, 0, "*", "TAG", 0, False, "", 5)
        try:
            c.pop.ready.clear()  # a new master replaying its revive log
            assert local.pop(*args) is None
            c.pop.ready.set()
            c._switching = True  # controller mode: the store restarting in its new role
            assert local.pop(*args) is None
            c._switching = False
            assert LocalBroker(addr, lambda cmd, conn: None, "p").pop(*args) is None  # not a broker's handler
            answer = local.pop(*args)
            assert answer is not None
            code, remark, popped = await answer
            assert code == codes.SUCCESS and popped.count == 2
        finally:
            await c.close()
    asyncio.run(go())
