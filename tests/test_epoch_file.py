"""The epoch file (epochFileCheckpoint) and the truncation of a returning broker's log (controller mode)."""
from __future__ import annotations

import asyncio

import pytest

from broker.services.message_store import MessageStore
from broker.store.config import MessageStoreConfig
from broker.store.epoch_file import EpochEntry as E
from broker.store.epoch_file import EpochFile, truncation_point
from broker.store.errors import CorruptStoreError
from broker.store.truncation import truncate_commit_log


def test_rocketmq_text_format_round_trip_and_a_damaged_file_is_named(tmp_path):
    ep = EpochFile(str(tmp_path))
    ep.append(1, 0, 0)
    ep.append(3, 500, 500)
    text = (tmp_path / "epochFileCheckpoint").read_text()
    assert text.splitlines()[0] == "2" and text.splitlines()[2:] == ["1-0", "3-500"]
    assert EpochFile(str(tmp_path)).load().entries == [E(1, 0), E(3, 500)]
    (tmp_path / "epochFileCheckpoint").write_text(text.replace("3-500", "3-501"))
    with pytest.raises(CorruptStoreError, match="epochFileCheckpoint.*CRC32"):
        EpochFile(str(tmp_path)).load()


def test_a_new_master_drops_entries_past_its_log_end():
    # a slave held its master's entries; as master it starts its epoch where its own log ends
    ep = EpochFile("/nonexistent")
    ep.entries = [E(1, 0), E(2, 900)]
    ep._write = lambda: None
    ep.append(3, 700, 700)
    assert ep.entries == [E(1, 0), E(3, 700)]
    ep.append(3, 950, 950)  # restarted before the controller replaced it: epoch 3 still starts at 700
    assert ep.entries == [E(1, 0), E(3, 700)]


@pytest.mark.parametrize("local,local_end,master,master_end,cut", [
    ([], 0, [E(1, 0)], 100, 0),                                # an empty slave copies from 0
    ([E(1, 0)], 1000, [E(1, 0), E(2, 800)], 1500, 800),        # old master: its tail after 800 goes
    ([E(1, 0)], 600, [E(1, 0), E(2, 800)], 1500, 600),         # a slave behind: nothing to cut
    ([E(1, 0), E(2, 800)], 900, [E(1, 0), E(3, 850)], 1200, 800),  # what epoch 2 wrote here goes
    ([], 700, [E(1, 900)], 1000, 700),                         # a log from before controller mode
    ([E(1, 5)], 100, [E(1, 0)], 100, None),                    # no epoch in common
])
def test_truncation_point(local, local_end, master, master_end, cut):
    assert truncation_point(local, local_end, master, master_end) == cut


def test_truncation_cuts_the_tail_on_disk_and_the_queues_with_it(tmp_path):
    cfg = MessageStoreConfig(storePathRootDir=str(tmp_path), mappedFileSizeCommitLog=4096)

    async def main():
        s = MessageStore(cfg)
        await s.start()
        ends = []
        for i in range(60):
            r, _ = s.append("T", 0, b"m%d" % i)
            ends.append(r.physical_offset + r.size)
        await s.wait_dispatched(ends[-1], 10)
        await s.close()
        cut = ends[29]  # the 30 first messages stay; the rest (several segments) go
        truncate_commit_log(cfg, cut)
        s = MessageStore(cfg)
        await s.start()
        try:
            assert s.table.load(0) == cut and s.max_offset("T", 0) == 30
            r, _ = s.append("T", 0, b"after")
            assert (r.physical_offset, r.queue_offset) == (cut, 30)
        finally:
            await s.close()
    asyncio.run(main())


@pytest.mark.parametrize("props,key", [
    ({"enableControllerMode": "true"}, "controllerAddr"),
    ({"enableControllerMode": "true", "controllerAddr": "nohost"}, "controllerAddr"),
    ({"enableControllerMode": "true", "controllerAddr": "127.0.0.1:1", "haAnnounceAddress": "x"}, "haAnnounceAddress"),
    ({"enableControllerMode": "true", "controllerAddr": "127.0.0.1:1", "brokerHeartbeatInterval": "0"},
     "brokerHeartbeatInterval"),
    ({"enableControllerMode": "true", "controllerAddr": "127.0.0.1:1", "minInSyncReplicas": "0"}, "minInSyncReplicas"),
    ({"enableControllerMode": "true", "controllerAddr": "127.0.0.1:1", "enableDLegerCommitLog": "true",
      "dLegerGroup": "g", "dLegerPeers": "n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3", "dLegerSelfId": "n0"},
     "enableControllerMode"),
])
def test_bad_controller_mode_config_is_refused_naming_the_key(props, key):
    from broker.server.broker_config import load_broker_config
    from broker.store.errors import StoreConfigError
    with pytest.raises(StoreConfigError) as e:
        load_broker_config(props)
    assert e.value.key == key, e.value
