"""consumerOffset.json / topics.json: atomic writes, .bak kept, fastjson's unquoted keys read."""
import asyncio
import json
import os

from broker.services.message_store import MessageStore
from broker.store.config_files import WRITER, ConsumerOffsetTable, TopicConfig, TopicConfigTable
from broker.store.config_writer import ConfigFileWriter


def test_offsets_persist_atomically_with_backup(tmp_path):
    t = ConsumerOffsetTable(str(tmp_path))
    t.commit("g1", "TopicTest", 0, 250)
    t.persist()
    t.commit("g1", "TopicTest", 1, 251)
    t.persist()
    assert json.load(open(t.path))["offsetTable"]["TopicTest@g1"] == {"0": 250, "1": 251}
    assert json.load(open(t.path + ".bak"))["offsetTable"]["TopicTest@g1"] == {"0": 250}
    assert not os.path.exists(t.path + ".tmp")
    # a torn main file (crash of a non-atomic writer, or disk damage): the backup is used
    open(t.path, "w").write('{"offsetTable": {"TopicTest@g1": {0: ')
    u = ConsumerOffsetTable(str(tmp_path))
    u.load()
    assert u.query("g1", "TopicTest", 0) == 250 and u.query("g1", "TopicTest", 1) == -1


def test_reads_rocketmq_fastjson_format(tmp_path):
    (tmp_path / "consumerOffset.json").write_text('{\n\t"offsetTable":{\n\t\t"TopicTest@group1":{0:250,1:251}\n\t}\n}')
    t = ConsumerOffsetTable(str(tmp_path))
    t.load()
    assert t.query("group1", "TopicTest", 1) == 251


def test_topics_roundtrip_and_store_persists_offsets_on_close(tmp_path, store_config):
    tt = TopicConfigTable(str(tmp_path))
    tt.put(TopicConfig("TopicA", 8, 8))  # written by the background writer
    assert WRITER.drain(10)
    back = TopicConfigTable(str(tmp_path))
    back.load()
    assert back.topics["TopicA"].writeQueueNums == 8 and back.data_version["counter"] == 1

    cfg = store_config()

    async def go():
        async with MessageStore(cfg) as s:
            s.consumer_offsets.commit("cg", "T", 3, 42)
        async with MessageStore(cfg) as s:
            assert s.consumer_offsets.query("cg", "T", 3) == 42
    asyncio.run(go())


def test_background_writes_never_wait_for_the_disk_and_the_latest_text_wins():
    """A write stuck in a slow fsync (seconds on a busy disk) must not hold up the caller (the
    broker's event loop); texts submitted meanwhile for the same file collapse into the last."""
    import threading
    import time
    release, written = threading.Event(), []

    def slow_write(path, text):
        release.wait(10)
        written.append((path, text))
    w = ConfigFileWriter(slow_write)
    t0 = time.monotonic()
    w.submit("a", "1")
    for i in range(2, 50):
        w.submit("a", str(i))
    w.submit("b", "x")
    assert time.monotonic() - t0 < 0.5 and not w.drain(0.2)
    release.set()
    assert w.drain(10)
    a = [t for p, t in written if p == "a"]
    assert a[-1] == "49" and len(a) <= 2 and ("b", "x") in written  # at most the one in flight, then the last
