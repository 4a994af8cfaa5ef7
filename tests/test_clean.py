"""The cleaner: each deletion rule at the moment it fires (injected clock and disk usage), a pass
over a real store's files, and end to end on a real small filesystem (a size-limited tmpfs):
forced deletion under readers that hold the oldest segment, and disk-full refusal and recovery
with a real client."""
from __future__ import annotations

import asyncio
import dataclasses
import os
import time

import pytest

from broker.services.clean_service import CleanService
from broker.services.message_store import GetStatus, MessageStore, PutStatus
from broker.store.clean_policy import CleanPolicy, filesystem_usage, usage_of
from broker.store.config import MessageStoreConfig
from broker.store.errors import ServiceUnavailable, StoreConfigError
from broker.store.message import decode_message
from broker.store.offset_table import Slot, create_table
from tests.conftest import wait_for

HOUR = 3600
SEG = 1 << 20


class Clock:
    def __init__(self, hour: int):
        lt = time.localtime()
        self.now = time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, hour, 30, 0, 0, 0, -1))

    def __call__(self):
        return self.now


def _policy(usage: float, hour: int = 12, **kw) -> CleanPolicy:
    return CleanPolicy(MessageStoreConfig(storePathRootDir="/nonexistent", **kw), lambda: usage, Clock(hour))


def test_each_rule_fires_only_when_it_should():
    quiet = _policy(0.50).decide(manual=False)
    assert not quiet.delete and not quiet.forcibly and not quiet.disk_full
    assert _policy(0.50, hour=4).decide(False).delete  # deleteWhen "04"
    assert _policy(0.50, hour=5, deleteWhen="04;05").decide(False).delete
    assert _policy(0.50).decide(manual=True).delete
    spacefull = _policy(0.76).decide(False)  # diskMaxUsedSpaceRatio 75
    assert spacefull.delete and not spacefull.forcibly and "diskMaxUsedSpaceRatio" in spacefull.reason
    forced = _policy(0.86).decide(False)  # diskSpaceCleanForciblyRatio 85
    assert forced.forcibly and not forced.disk_full
    assert not _policy(0.86, cleanFileForciblyEnable=False).decide(False).forcibly
    full = _policy(0.91).decide(False)  # diskSpaceWarningLevelRatio 90
    assert full.disk_full and full.forcibly
    assert _policy(0.80, diskSpaceWarningLevelRatio=0.75).decide(False).disk_full  # 4.x fraction form
    broken = CleanPolicy(MessageStoreConfig(storePathRootDir="/x"), lambda: (_ for _ in ()).throw(OSError()),
                         Clock(12)).decide(False)
    assert broken.disk_full  # an unreadable usage counts as full, as RocketMQ


def _java_used_percent(total: int, free: int, usable: int) -> float:
    """UtilAll.getDiskPartitionSpaceUsedPercent's arithmetic, line by line (Java longs)."""
    used = total - free
    entire = used + usable
    round_num = 1 if used * 100 % entire != 0 else 0
    return (used * 100 // entire + round_num) / 100.0


@pytest.mark.parametrize("total,free,usable", [
    (258_020 << 20, 228_264 << 20, 63_508 << 20),  # a host here, 160 GiB reserved: 1 - usable/total is 0.754
    (100 << 30, 25 << 30, 25 << 30), (100 << 30, 0, 0), (1000, 333, 333), (1000, 1000, 950), (4096, 1, 1)])
def test_disk_usage_is_measured_as_the_java_broker_measures_it(total, free, usable):
    """Blocks reserved for root are neither used nor usable (df's Use%, RocketMQ's rule): counting
    them as used read this host's disk as 75.4 % full, past diskMaxUsedSpaceRatio, and the cleaner
    deleted segments the Java broker would keep."""
    assert usage_of(total, free, usable) == _java_used_percent(total, free, usable)
    if total == 258_020 << 20:
        assert usage_of(total, free, usable) == 0.32


def test_filesystem_usage_reads_the_filesystem_as_java_files_do(tmp_path):
    st = os.statvfs(tmp_path)  # File.getTotalSpace / getFreeSpace / getUsableSpace
    f = st.f_frsize
    assert abs(filesystem_usage(str(tmp_path)) - _java_used_percent(st.f_blocks * f, st.f_bfree * f,
                                                                    st.f_bavail * f)) <= 0.01


def test_expiry_follows_file_reserved_time():
    p = _policy(0.5, fileReservedTime=72)
    now = p.clock()
    assert not p.expired(now - 71 * HOUR, forcibly=False)
    assert p.expired(now - 73 * HOUR, forcibly=False)
    assert p.expired(now, forcibly=True)


@pytest.mark.parametrize("key,value", [("deleteWhen", "4am"), ("deleteWhen", "04;x"), ("cleanResourceInterval", "0"),
                                       ("mappedFileSizeCommitLog", "0"), ("mappedFileSizeConsumeQueue", "-20"),
                                       ("flushDiskType", "SOMETIMES"), ("haTransferBatchSize", "0")])
def test_settings_rocketmq_cannot_run_with_refuse_to_start_naming_the_key(key, value):
    with pytest.raises(StoreConfigError, match=key):
        MessageStoreConfig.from_properties({"storePathRootDir": "/x", key: value})


# (key, value in broker.conf, what it means here: RocketMQ's own reading of it)
ROCKETMQ_READINGS = [
    ("fileReservedTime", "0", 0), ("fileReservedTime", "-1", -1),
    ("diskMaxUsedSpaceRatio", "0", 10), ("diskMaxUsedSpaceRatio", "99", 95),  # getDiskMaxUsedSpaceRatio clamps
    ("diskSpaceWarningLevelRatio", "120", 90), ("diskSpaceWarningLevelRatio", "0.5", 50),  # CleanCommitLogService
    ("diskSpaceCleanForciblyRatio", "95", 85), ("diskSpaceCleanForciblyRatio", "10", 30),
    ("mappedFileSizeConsumeQueue", "1000001", 1000020),  # rounded up to whole entries
    ("mappedFileSizeCommitLog", "100000000", 100000000), ("deleteWhen", "25", "25"),
    ("deleteFileBatchMax", "0", 0), ("destroyMapedFileIntervalForcibly", "0", 0),
    ("deleteCommitLogFilesInterval", "-5", -5), ("flushIntervalCommitLog", "0", 0), ("syncFlushTimeout", "0", 0),
    ("flushCommitLogLeastPages", "-1", -1), ("accessMessageInMemoryMaxRatio", "0", 0), ("haListenPort", "-1", 0),
    ("haTransferBatchSize", "1024", 1024), ("haSlaveFallbehindMax", "0", 0),
]


@pytest.mark.parametrize("key,value,meaning", ROCKETMQ_READINGS, ids=[f"{k}={v}" for k, v, _ in ROCKETMQ_READINGS])
def test_what_rocketmq_accepts_starts_with_rocketmq_meaning(key, value, meaning):
    cfg, unknown = MessageStoreConfig.from_properties({"storePathRootDir": "/x", key: value})
    assert not unknown and getattr(cfg, key) == meaning


def test_file_reserved_time_zero_expires_every_segment_but_the_active_one(tmp_path):
    """fileReservedTime=0, as operators set it to drain a disk: at the next deletion (here asked
    for with `broker admin clean`) every segment goes but the one being written."""
    cfg, end = _filled_store(tmp_path, 3.5, fileReservedTime=0, deleteCommitLogFilesInterval=0)
    svc, t = _service(cfg, end, usage=0.5)
    assert svc.pass_once() == []  # not the hour, disk half full: nothing asked for
    t.add(Slot.MANUAL_CLEAN, 1)
    assert svc.pass_once() == [0, SEG, 2 * SEG]
    # left: the segment holding the end of the data, and the one made ahead of it
    assert [int(n) for n in sorted(os.listdir(cfg.commitlog_dir))] == [3 * SEG, 4 * SEG]


def test_a_broker_conf_with_rocketmq_values_starts(tmp_path):
    """A broker.conf an operator runs RocketMQ with (values RocketMQ clamps or rounds) starts."""
    from broker.server.broker_config import load_broker_config
    props = {"storePathRootDir": str(tmp_path / "s"), "fileReservedTime": "0", "diskMaxUsedSpaceRatio": "99",
             "mappedFileSizeCommitLog": str(SEG + 7), "mappedFileSizeConsumeQueue": "1000", "deleteWhen": "04;25"}
    _, cfg, unknown = load_broker_config(props)
    assert not unknown

    async def main():
        async with MessageStore(cfg) as s:
            for i in range(1500):  # about 1.5 segments of the odd size
                r = await s.put("T", 0, b"y" * 1000)
            await s.wait_dispatched(r.end_offset, 10)
            assert s.get("T", 0, 1499).status is GetStatus.FOUND
    asyncio.run(main())


def _filled_store(root, n_segments: float, **kw) -> tuple[MessageStoreConfig, int]:
    """A stopped store holding about n_segments segments of 1 KiB messages over 2 queues;
    returns its config and the end of its data."""
    cfg = MessageStoreConfig(storePathRootDir=str(root), mappedFileSizeCommitLog=SEG,
                             mappedFileSizeConsumeQueue=20 * 100, **kw)

    async def fill():
        async with MessageStore(cfg) as s:
            for i in range(int(n_segments * SEG / 1100)):
                r = await s.put("T", i % 2, b"x" * 1000)
            await s.wait_dispatched(r.end_offset, 10)
            return r.end_offset
    return cfg, asyncio.run(fill())


def _service(cfg, end: int, usage: float, hours_later: float = 0):
    t = create_table(cfg.storePathRootDir)
    for slot in (Slot.WROTE, Slot.FLUSHED, Slot.DISPATCHED):
        t.store(slot, end)
    clock = Clock(12)
    clock.now = time.time() + hours_later * HOUR
    # the files' ages are real, so the clock is; deleteWhen is then an hour it is not at, so that
    # no pass deletes because of the time of day the suite happens to run at
    away = dataclasses.replace(cfg, deleteWhen=f"{(time.localtime(clock.now).tm_hour + 12) % 24:02d}")
    return CleanService(cfg, -1, CleanPolicy(away, lambda: usage, clock), table=t), t


def _cq_files(cfg, q: str) -> list[str]:
    return sorted(os.listdir(os.path.join(cfg.consumequeue_dir, "T", q)))


def test_a_pass_deletes_expired_segments_oldest_first_in_batches_and_their_queues(tmp_path):
    cfg, end = _filled_store(tmp_path, 4.5, deleteFileBatchMax=2, deleteCommitLogFilesInterval=0,
                             deleteConsumeQueueFilesInterval=0)
    names = sorted(os.listdir(cfg.commitlog_dir))
    cq_before = len(_cq_files(cfg, "0"))
    svc, t = _service(cfg, end, usage=0.5)  # noon, files fresh, disk half full: nothing to do
    assert svc.pass_once() == [] and t.load(Slot.DISK_USAGE) == 500_000
    svc, t = _service(cfg, end, usage=0.5, hours_later=73)  # expired, but neither the hour nor a full disk
    assert svc.pass_once() == []
    t.add(Slot.MANUAL_CLEAN, 1)  # `broker admin clean`
    assert svc.pass_once() == [0, SEG]  # deleteFileBatchMax 2, oldest first
    assert t.load(Slot.MIN_OFFSET) == 2 * SEG and t.load(Slot.DELETED_FILES) == 2
    # the manual request lasts 20 passes; the segment holding the end of the data stays
    assert svc.pass_once() == [2 * SEG, 3 * SEG]
    assert svc.pass_once() == []
    assert sorted(os.listdir(cfg.commitlog_dir)) == [n for n in names if int(n) >= 4 * SEG]
    for q in ("0", "1"):  # consume-queue files wholly below the new minimum went too, no more
        files = _cq_files(cfg, q)
        assert len(files) < cq_before
        with open(os.path.join(cfg.consumequeue_dir, "T", q, files[0]), "rb") as f:
            last = f.read()[-20:]
        assert int.from_bytes(last[:8], "big") + int.from_bytes(last[8:12], "big") > 4 * SEG


def test_a_full_disk_deletes_regardless_of_age_but_never_unflushed_data(tmp_path):
    cfg, end = _filled_store(tmp_path, 3.5, deleteCommitLogFilesInterval=0)
    svc, t = _service(cfg, end, usage=0.91)
    t.store(Slot.FLUSHED, SEG + 10)  # the flush service is behind: only segment 0 is safe
    assert svc.pass_once() == [0]
    assert t.load(Slot.DISK_FULL) == 1
    svc.policy.usage = lambda: 0.70
    assert svc.pass_once() == [] and t.load(Slot.DISK_FULL) == 0


# -- a real small filesystem -----------------------------------------------------------------------
def _ballast(path, target_usage: float) -> None:
    """Fill the filesystem up to `target_usage` with a file the test can delete."""
    st = os.statvfs(path.parent)
    total = st.f_blocks * st.f_frsize
    used = total - st.f_bavail * st.f_frsize
    need = int(total * target_usage) - used
    with open(path, "ab") as f:
        f.write(b"\0" * max(0, need))


def test_forced_deletion_under_readers_on_a_small_filesystem(small_fs):
    """Views of the oldest segment held by a reader stay valid and unchanged while the cleaner
    deletes it; the queue then starts at its first surviving message (PULL_OFFSET_MOVED)."""
    cfg = MessageStoreConfig(storePathRootDir=str(small_fs / "store"), mappedFileSizeCommitLog=4 * SEG,
                             mappedFileSizeConsumeQueue=20 * 1000, cleanResourceInterval=100,
                             deleteCommitLogFilesInterval=0, diskMaxUsedSpaceRatio=95,
                             diskSpaceCleanForciblyRatio=70, diskSpaceWarningLevelRatio=98, warmMapedFileEnable=False)

    async def main():
        async with MessageStore(cfg) as s:
            for i in range(12_000):  # ~13 MiB: 4 segments
                r = await s.put("T", 0, b"%07d" % i + b"y" * 993)
            await s.wait_dispatched(r.end_offset, 10)
            await s.wait_flushed(r.end_offset, 10)
            held = s.get("T", 0, 0, 32)
            before = [bytes(m) for m in held.messages]
            _ballast(small_fs / "ballast", 0.80)  # above the forcible ratio: age no longer matters
            # everything below the segment holding the end of the data goes, in one pass or more:
            # wait for the last of them, in the store's own view (moved when it handles the
            # cleaner's wake-up; the shared slot alone can be read while queues still start at 0)
            last = r.end_offset - r.end_offset % (4 * SEG)
            await s.wait_condition(lambda: s.commit_log.min_offset == last, 30)
            assert not os.path.exists(os.path.join(cfg.commitlog_dir, "00000000000000000000"))
            assert [bytes(m) for m in held.messages] == before  # no SIGBUS, no torn bytes
            held.release()
            g = s.get("T", 0, 0, 32)
            assert g.status is GetStatus.OFFSET_TOO_SMALL and g.next_offset == s.min_offset("T", 0) > 0
            first = s.get("T", 0, g.next_offset, 1)
            assert first.status is GetStatus.FOUND
            assert int(decode_message(first.messages[0]).body[:7]) == g.next_offset  # the first surviving message
            first.release()
            os.unlink(small_fs / "ballast")
            assert (await s.put("T", 0, b"after")).status is PutStatus.PUT_OK
    asyncio.run(main())


def test_disk_full_refuses_writes_and_recovers_with_a_real_client(small_fs, tmp_path):
    """ali-ons against a broker whose store is on a 48 MiB filesystem: past
    diskSpaceWarningLevelRatio its sends are refused (SERVICE_NOT_AVAILABLE) and nothing is
    stored; once space is freed they are accepted again."""
    from tests.helpers.real_clients import Cluster, produce
    conf = ("cleanResourceInterval=100\ncleanFileForciblyEnable=false\ndiskMaxUsedSpaceRatio=99\n"
            "diskSpaceWarningLevelRatio=60\nmappedFileSizeConsumeQueue=20000\nwarmMapedFileEnable=false\n")
    with Cluster(small_fs / "node", conf) as c:
        assert "error" not in produce("ons", c, "Full", [{"body": "before"}], tmp_path)[0]
        _ballast(small_fs / "ballast", 0.65)
        wait_for(lambda: _status(c)["disk_full"] == "1", 30, "the cleaner to flag the disk full")
        refused = produce("ons", c, "Full", [{"body": "refused"}], tmp_path)
        assert "error" in refused[0], refused
        os.unlink(small_fs / "ballast")
        wait_for(lambda: _status(c)["disk_full"] == "0", 30, "the flag to clear")
        assert "error" not in produce("ons", c, "Full", [{"body": "after"}], tmp_path)[0]
        bodies = sorted(bytes(r.body) for q in range(4) for r in c.records("Full", q))
        assert bodies == [b"after", b"before"]
        assert int(_status(c)["writes_refused"]) >= 1
        assert "disk full" in (small_fs / "node" / "broker.err").read_text()


def _status(c) -> dict:
    import msgspec

    from broker.remoting import codes
    r = c.call(codes.GET_BROKER_RUNTIME_INFO, {})
    return msgspec.json.decode(bytes(r.body))["table"]


def test_a_running_store_refuses_puts_while_the_disk_is_flagged_full(tmp_path):
    async def main():
        cfg = MessageStoreConfig(storePathRootDir=str(tmp_path / "s"), mappedFileSizeCommitLog=SEG)
        async with MessageStore(cfg) as s:
            s.table.store(Slot.DISK_FULL, 1)  # as the cleaner does; the broker learns it on a wake-up
            s.poke()
            await s.wait_condition(lambda: s.flags.disk_full, 5)
            with pytest.raises(ServiceUnavailable, match="disk full"):
                await s.put("T", 0, b"x")
            s.table.store(Slot.DISK_FULL, 0)
            s.poke()
            await s.wait_condition(lambda: not s.flags.disk_full, 5)
            assert (await s.put("T", 0, b"x")).status is PutStatus.PUT_OK
    asyncio.run(main())


@pytest.mark.parametrize("cq_flush_ms", [1000, 50])
def test_a_consume_queue_that_cannot_be_made_holds_dispatch_refuses_writes_and_resumes(small_fs, cq_flush_ms):
    """The disk fills up just before a new queue's first consume-queue file is made (6 MB of
    warm-up, ENOSPC), while usage stays under diskSpaceWarningLevelRatio. The reput service must
    not die on it: restarted, it met the same error at once, and its tracebacks filled the
    disk the log was on (the flaky disk-full fault cell). It holds instead; the broker refuses
    writes naming why; no half-made file keeps the space; once space is back the queue is
    built, writes are accepted again and every message taken before is readable.

    With a hold longer than flushIntervalConsumeQueue (50 ms here), the pass that got through
    also flushed the queues and the reput then slept for the writer's next wake before clearing
    the hold; the broker, refusing writes until then, never woke it (the disk-full cell's
    second round timing out on 'sends before the fault')."""
    async def main():
        cfg = MessageStoreConfig(storePathRootDir=str(small_fs / "s"), mappedFileSizeCommitLog=SEG,
                                 cleanResourceInterval=100, cleanFileForciblyEnable=False,
                                 flushIntervalConsumeQueue=cq_flush_ms)
        async with MessageStore(cfg) as s:
            first = await s.put("A", 0, b"a")
            await s.wait_dispatched(first.end_offset, 10)
            ahead = s.commit_log.queue._ahead
            if ahead is not None:  # the segment made ahead (1 MiB) takes its room before the ballast:
                ahead.join()       # made after it, usage would pass diskSpaceWarningLevelRatio
            st = os.statvfs(small_fs)
            with open(small_fs / "ballast", "wb") as f:  # leave 5 MiB: less than one 6 MB file
                f.write(b"\0" * (st.f_bavail * st.f_frsize - (5 << 20)))
            reput = s.services["reput"].pid
            taken = await s.put("B", 0, b"b")  # the commit log has room: stored
            assert taken.status is PutStatus.PUT_OK
            await s.wait_condition(lambda: s.flags.dispatch_blocked, 10)
            assert not s.flags.disk_full, "usage stays under diskSpaceWarningLevelRatio"
            with pytest.raises(ServiceUnavailable, match="consume queues cannot be written.*No space left"):
                await s.put("A", 0, b"refused")
            assert not [n for n in os.listdir(small_fs / "s" / "consumequeue" / "B" / "0") if n.endswith(".tmp")]
            os.unlink(small_fs / "ballast")
            await s.wait_condition(lambda: not s.flags.dispatch_blocked, 10)
            assert s.services["reput"].pid == reput and s.services["reput"].restarts == 0
            after = await s.put("A", 0, b"after")
            await s.wait_dispatched(after.end_offset, 10)
            got = s.get("B", 0, 0)
            assert got.status is GetStatus.FOUND and bytes(decode_message(got.messages[0], 0).body) == b"b"
            assert [bytes(decode_message(m, 0).body) for m in s.get("A", 0, 0).messages] == [b"a", b"after"]
    asyncio.run(main())


def test_a_commit_log_segment_that_cannot_be_made_refuses_the_put_and_keeps_none_of_a_batch(small_fs):
    """The disk fills before the cleaner's next look (cleanResourceInterval), so the broker does
    not know yet: the put that needs a new segment is refused naming the file, and a batch
    whose first records fit in the old segment keeps none of them (its size word zeroed, so no
    recovery resurrects them). With space back, writes continue at dense queue offsets."""
    async def main():
        cfg = MessageStoreConfig(storePathRootDir=str(small_fs / "s"), mappedFileSizeCommitLog=SEG,
                                 cleanResourceInterval=600_000, mappedFileSizeConsumeQueue=20_000)
        async with MessageStore(cfg) as s:
            await s.put("T", 0, b"x")
            s.commit_log.queue._ahead.join()  # the segment made ahead exists: only the third is missing
            with open(small_fs / "ballast", "wb") as f:
                with pytest.raises(OSError):
                    while True:
                        f.write(bytes(1 << 20))
                        f.flush()
            taken = 1
            with pytest.raises(ServiceUnavailable, match=r"next commit-log segment .*00000000000002097152.*No space"):
                for _ in range(30):
                    await s.put("T", 0, bytes(100_000))
                    taken += 1
            assert 2 * SEG - s.commit_log.wrote > 30_000, "room left for a batch's first records"
            wrote = s.commit_log.wrote
            with pytest.raises(ServiceUnavailable, match="next commit-log segment"):
                await s.put_batch("T", 0, [bytes(30_000)] * 8)
            assert s.commit_log.wrote == wrote
            mf = s.commit_log.queue.find(wrote)
            assert not mf.mm[wrote - mf.base:wrote - mf.base + 8].any()
            os.unlink(small_fs / "ballast")
            r = await s.put_batch("T", 0, [bytes(30_000)] * 8)
            assert r.status is PutStatus.PUT_OK and r.queue_offset == taken
            await s.wait_dispatched(r.end_offset, 10)
            sizes = []
            off = 0
            while off < taken + 8:
                got = s.get("T", 0, off, 32, 1 << 24)
                sizes += [len(decode_message(m, 0).body) for m in got.messages]
                off = got.next_offset
            assert sizes == [1] + [100_000] * (taken - 1) + [30_000] * 8
    asyncio.run(main())


def test_deletion_under_a_slave_reading_the_oldest_segment(small_fs, tmp_path):
    """The master (store on the small filesystem) deletes the segments a stalled slave is still
    streaming from an open descriptor: nothing crashes, the slave holds only whole records
    identical to the master's, and a slave left behind the new minimum is told so by name."""
    from tests.helpers.ha_cluster import Broker, Proxy, send_all
    # an index file's slots (maxHashSlotNum x 4 bytes, reserved when it is made) sized for 48 MiB too
    clean = ("cleanResourceInterval=100\ndeleteCommitLogFilesInterval=0\ndiskMaxUsedSpaceRatio=95\n"
             "diskSpaceCleanForciblyRatio=60\ndiskSpaceWarningLevelRatio=98\nwarmMapedFileEnable=false\n"
             "maxHashSlotNum=100000\n")
    master = Broker(small_fs, "master", "127.0.0.1:9", "ASYNC_MASTER", 0, clean).start()
    proxy = Proxy(master.ha_port)
    slave = None
    try:
        slave = Broker(tmp_path, "slave", "127.0.0.1:9", "SLAVE", 1, f"haMasterAddress=127.0.0.1:{proxy.port}\n").start()
        wait_for(lambda: master.info()["slaves"] == 1, 30, "the slave to link")
        proxy.stall()
        bodies = [b"%07d" % i + b"z" * 1500 for i in range(8000)]  # ~12 MiB over 1 MiB segments
        assert {r.code for r in send_all(master.port, "T", bodies)} == {0}
        _ballast(small_fs / "ballast", 0.65)  # above the forcible ratio
        wait_for(lambda: master.info()["commitLogMinOffset"] > 4 << 20, 30, "the oldest segments to go")
        proxy.heal()
        wait_for(lambda: "fell behind" in master.stderr(), 30,
                 "the master to say the slave fell behind its minimum")
        wait_for(lambda: slave.info()["commitLogMaxOffset"] > 0, 30, "the slave to hold what it received")
        end = slave.info()["commitLogMaxOffset"]  # the slave publishes whole records only
        slave.stop()
        master.stop()
        assert "Traceback" not in master.stderr() + slave.stderr()
        # whatever the slave holds is whole records, byte for byte the master's messages, in order
        got = _log_records(slave.store / "commitlog", end)
        assert got and [m.body for m in got] == bodies[:len(got)]
    finally:
        proxy.close()
        if slave is not None:
            slave.stop()
        master.stop()


def _log_records(commitlog, end: int) -> list:
    out = []
    for name in sorted(os.listdir(commitlog)):
        data = (commitlog / name).read_bytes()[:max(0, end - int(name))]
        pos = 0
        while pos + 8 <= len(data):
            size = int.from_bytes(data[pos:pos + 4], "big")
            if size <= 0 or data[pos + 4:pos + 8] == b"\xcb\xd4\x31\x94":
                break
            out.append(decode_message(data, pos))
            pos += size
    return out


def test_a_queue_minimum_moves_to_its_first_kept_message_in_a_mostly_unwritten_file(tmp_path):
    """After a deletion the queue starts at its first entry whose message the commit log still
    holds. In a file mostly unwritten (the usual case: 300,000 entries a file), the search used to
    run over the zeros after the written entries as well and put the minimum at the queue's end
    (consumers told to skip messages that still exist)."""
    import numpy as np
    from broker.store.consume_queue import CQ_UNIT, ConsumeQueue
    cq = ConsumeQueue(str(tmp_path), "T", 0, 1000 * CQ_UNIT, writable=True)
    n = 10
    cq.put(np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64) * 100 + 100, np.full(n, 100, np.int32),
           np.zeros(n, np.int64))
    cq.correct_min(450)  # the messages at 100..400 are gone, 500.. kept
    assert cq.min_offset == 4
    cq.correct_min(5000)  # every message gone: the queue starts at its end
    assert cq.min_offset == n
    cq.close()


def test_a_queue_minimum_looks_past_a_file_the_cleaner_has_not_deleted_yet(tmp_path):
    """The cleaner publishes the commit log's new minimum before it deletes the consume-queue files
    wholly below it: a reader that corrects its queues in between still sees such a file, and must
    start the queue in the next one (it put the start at the next file's first entry, whose
    message was gone: OFFSET_FOUND_NULL in test_forced_deletion_under_readers_on_a_small_filesystem
    under load)."""
    import numpy as np
    from broker.store.consume_queue import CQ_UNIT, ConsumeQueue
    cq = ConsumeQueue(str(tmp_path), "T", 0, 10 * CQ_UNIT, writable=True)  # 10 entries a file
    n = 25
    cq.put(np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64) * 100 + 100, np.full(n, 100, np.int32),
           np.zeros(n, np.int64))
    cq.correct_min(1450)  # entries 0..13 (messages 100..1400) gone: 14 is the first kept
    assert cq.min_offset == 14
    cq.correct_min(2000)  # the start moves within the second file
    assert cq.min_offset == 19
    cq.correct_min(9999)
    assert cq.min_offset == n
    cq.close()
