"""Reading from a slave, in-process: suggestWhichBrokerId when the master's unread backlog is
past its memory share (seed 004), offsets copied from the master never moving back (#1094), and
what a slave refuses."""
from __future__ import annotations

import asyncio

from broker.remoting import codes
from broker.store.config_files import ConsumerOffsetTable
from tests.test_broker_remoting import Broker


def test_master_suggests_the_slave_only_for_a_backlog_past_its_memory_share(tmp_path):
    async def main():
        async with Broker(tmp_path / "on", slaveReadEnable=True) as b:
            for i in range(8):
                assert (await b.send_v2("T", b"x" * 1000, queue_id=0)).code == codes.SUCCESS
            b.controller.store.reader.memory_share = 3000  # as if RAM * accessMessageInMemoryMaxRatio were 3 KB
            first = await b.pull("T", 0, 0, sys_flag=2, maxMsgNums=1)
            last = await b.pull("T", 0, 7, sys_flag=2, maxMsgNums=1)
            assert first.code == last.code == codes.SUCCESS
            assert first.ext["suggestWhichBrokerId"] == "1"  # ~7 KB unread behind it
            assert last.ext["suggestWhichBrokerId"] == "0"  # caught up: stay on the master
        async with Broker(tmp_path / "off") as b:  # slaveReadEnable=false: always the master
            await b.send_v2("T", b"x" * 1000)
            await b.send_v2("T", b"x" * 1000)
            b.controller.store.reader.memory_share = 10
            r = await b.pull("T", 0, 0, sys_flag=2, maxMsgNums=1)
            assert r.code == codes.SUCCESS and r.ext["suggestWhichBrokerId"] == "0"
    asyncio.run(main())


def test_offsets_copied_from_the_master_never_move_back(tmp_path):
    table = ConsumerOffsetTable(str(tmp_path))
    table.commit("g", "T", 0, 50)  # committed on the slave while the master was down
    moved = table.merge({"T@g": {"0": 40, "1": 7}, "U@g": {0: 3}})  # the master returns, stale on queue 0
    assert moved == 2 and table.query("g", "T", 0) == 50 and table.query("g", "T", 1) == 7
    assert table.query("g", "U", 0) == 3 and table.dirty


def test_a_slave_refuses_sends_and_names_why(tmp_path):
    async def main():
        async with Broker(tmp_path, broker_kw={"brokerId": 1}, brokerRole="SLAVE",
                          haMasterAddress="127.0.0.1:9") as b:
            r = await b.send_v2("T", b"x")
            assert r.code == codes.SERVICE_NOT_AVAILABLE and "SLAVE" in r.remark
            assert b.controller.store.offsets()["linked"] == 0
    asyncio.run(main())


def test_sync_flush_and_sync_master_together_wait_for_both(tmp_path):
    """In-process master and slave stores: with SYNC_FLUSH and SYNC_MASTER a put completes only
    when its end is both flushed on the master and acknowledged by the slave."""
    from broker.services.message_store import MessageStore, PutStatus
    from broker.store.config import MessageStoreConfig
    from tests.conftest import free_port

    async def main():
        ha = free_port()
        master = MessageStore(MessageStoreConfig(storePathRootDir=str(tmp_path / "m"), mappedFileSizeCommitLog=1 << 20,
                                                 listenPort=free_port(), haListenPort=ha, brokerRole="SYNC_MASTER",
                                                 flushDiskType="SYNC_FLUSH"))
        slave = MessageStore(MessageStoreConfig(storePathRootDir=str(tmp_path / "s"), mappedFileSizeCommitLog=1 << 20,
                                                listenPort=free_port(), brokerRole="SLAVE",
                                                haMasterAddress=f"127.0.0.1:{ha}"))
        async with master, slave:
            await master.wait_condition(lambda: master.offsets()["slaves"] == 1, 30)
            results = await asyncio.gather(*(master.put("T", i % 4, b"m" * 500) for i in range(300)))
            o = master.offsets()
            assert {r.status for r in results} == {PutStatus.PUT_OK}
            last = max(r.end_offset for r in results)
            assert o["flushed"] >= last and o["acked"] >= last
            assert slave.offsets()["received"] >= last
    asyncio.run(main())
