"""MessageStoreConfig: RocketMQ's store keys with RocketMQ's defaults (4.9.7 MessageStoreConfig).

Attributes use RocketMQ's own camelCase key names so an operator's broker.conf maps onto them
one to one; `from_properties` validates each value and names the key it refuses.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import socket
from dataclasses import dataclass, field

from broker.kernels.codec import CQ_UNIT_SIZE
from broker.store import paths
from broker.store.delay_levels import DEFAULT_LEVELS
from broker.store.errors import StoreConfigError

log = logging.getLogger("conf")

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"
ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")


@dataclass
class MessageStoreConfig:
    storePathRootDir: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), "store"))
    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    mappedFileSizeConsumeQueue: int = 300_000 * CQ_UNIT_SIZE
    flushDiskType: str = ASYNC_FLUSH
    brokerRole: str = "ASYNC_MASTER"
    flushIntervalCommitLog: int = 500
    flushCommitLogLeastPages: int = 4
    flushCommitLogThoroughInterval: int = 10_000
    flushIntervalConsumeQueue: int = 1000
    syncFlushTimeout: int = 5000
    flushConsumerOffsetInterval: int = 5000
    maxMessageSize: int = 4 * 1024 * 1024
    checkCRCOnRecover: bool = True
    # Whether a new segment is written with zeros before use. Unset: under SYNC_FLUSH only. Each
    # 4 KiB fdatasync then writes data alone (into a fallocated segment it also converts extents:
    # 140k vs 109k 1 KiB sends/s here, 256 MiB segments); under ASYNC_FLUSH the zeros cost as much
    # CPU and disk as the data (330k vs 215k sends/s, p99 0.4 vs 5 ms, 1.8 vs 3.4 CPU-us/msg), and
    # RocketMQ's own default is false. An explicit true/false in broker.conf is taken as it is.
    warmMapedFileEnable: bool | None = None
    # Store address written into every record's STOREHOST and msgId.
    brokerIP1: str = "127.0.0.1"
    listenPort: int = 10911
    # How long start() waits for a (re)started service to report alive.
    serviceStartTimeout: int = 30_000
    # HA (4.x MessageStoreConfig): a master streams its log to slaves on haListenPort; a slave
    # connects to haMasterAddress (or the address the name server gives it).
    haListenPort: int = 0  # 0: listenPort + 1, as 4.x BrokerStartup always sets it
    haMasterAddress: str = ""
    haSendHeartbeatInterval: int = 5000
    haHousekeepingInterval: int = 20_000
    haTransferBatchSize: int = 32 * 1024
    haSlaveFallbehindMax: int = 256 * 1024 * 1024
    slaveReadEnable: bool = False
    # RocketMQ 5's timer messages (broker.server.timer): a message with TIMER_DELIVER_MS,
    # TIMER_DELAY_SEC or TIMER_DELAY_MS is kept in rmq_sys_wheel_timer until its time, by the
    # timerlog and timerwheel files; false: such a message is refused, as RocketMQ refuses it
    timerWheelEnable: bool = True
    timerPrecisionMs: int = 1000
    timerMaxDelaySec: int = 3 * 24 * 3600
    timerRollWindowSlot: int = 2 * 24 * 3600
    mappedFileSizeTimerLog: int = 100 * 1024 * 1024
    timerFlushIntervalMs: int = 1000
    accessMessageInMemoryMaxRatio: int = 40
    # Ours: under ASYNC_FLUSH (segments warmed ahead of the writer, store.warm_ahead), the bytes
    # of the commit log kept in the page cache below what is flushed and dispatched; older pages
    # are let go of, and the writer's next pages reuse that memory instead of memory the VM's
    # host must back anew (docs/store.md, "Pages behind"). -1: accessMessageInMemoryMaxRatio %
    # of RAM, what RocketMQ itself counts as in memory; 0: never (the OS evicts, as RocketMQ).
    commitLogCacheBytes: int = -1
    # Expired-file deletion and disk watermarks (4.x CleanCommitLogService; ratios in percent
    # as 5.x writes them; 4.x's system-property fractions such as 0.90 are accepted too)
    fileReservedTime: int = 72  # hours
    deleteWhen: str = "04"  # hours of the day, "04;05"
    diskMaxUsedSpaceRatio: int = 75
    diskSpaceCleanForciblyRatio: float = 85
    diskSpaceWarningLevelRatio: float = 90
    cleanFileForciblyEnable: bool = True
    cleanResourceInterval: int = 10_000
    deleteCommitLogFilesInterval: int = 100
    deleteConsumeQueueFilesInterval: int = 100
    destroyMapedFileIntervalForcibly: int = 120_000
    deleteFileBatchMax: int = 10
    # The message index (IndexService; files of 40 + maxHashSlotNum x 4 + maxIndexNum x 20 bytes in
    # index/), built by the reput for QUERY_MESSAGE. maxMsgsNumBatch caps a query's maxNum;
    # defaultQueryMaxNum is a unique-key (client msgId) query's. messageIndexSafe is accepted as
    # RocketMQ's key, but recovery here always rebuilds what a crash lost (index_service).
    messageIndexEnable: bool = True
    maxHashSlotNum: int = 5_000_000
    maxIndexNum: int = 5_000_000 * 4
    messageIndexSafe: bool = False
    maxMsgsNumBatch: int = 64
    defaultQueryMaxNum: int = 32
    # DLedger mode (RocketMQ keeps these in MessageStoreConfig too): read from broker.conf with
    # the other DLedger keys (broker.raft.config.DLedgerConfig) and copied here, because the store
    # and its service processes need them: the log then lives in dledger-<selfId>/data.
    enableDLegerCommitLog: bool = False
    dLegerSelfId: str = ""
    # Controller mode (RocketMQ 5's AutoSwitch HA; the store keys are 5.x MessageStoreConfig's):
    # enableControllerMode is a broker key copied here, as enableDLegerCommitLog, because the HA
    # processes need it. A master acknowledges a put once `inSyncReplicas` members of the
    # SyncStateSet hold it (every member with allAckInSyncStateSet), and refuses puts while the set
    # has fewer than minInSyncReplicas members; a slave leaves the set haMaxTimeSlaveNotCatchup ms
    # after it last caught up, or haMaxGapNotInSync bytes behind.
    enableControllerMode: bool = False
    allAckInSyncStateSet: bool = False
    totalReplicas: int = 1
    inSyncReplicas: int = 1
    minInSyncReplicas: int = 1
    haMaxGapNotInSync: int = 256 * 1024 * 1024
    haMaxTimeSlaveNotCatchup: int = 15_000
    # set by the broker in controller mode before each start of the store, never from broker.conf:
    # the id the controller gave this broker (a slave's HA hello carries it) and the master epoch
    # the store serves in (a master refuses a slave that follows another epoch)
    controllerBrokerId: int = -1
    controllerMasterEpoch: int = 0
    # a broker key copied here (RocketMQ keeps it in MessageStoreConfig): the reput writes a
    # delayed message's consume-queue entry with its delivery time, as RocketMQ's dispatch does
    messageDelayLevel: str = DEFAULT_LEVELS
    # RocketMQ 5.1's compacted topics (cleanup.policy=COMPACTION; broker.services.compaction_service):
    # the schedule (ms; RocketMQ's key is spelled "Internal"), and the compaction log's file size
    enableCompaction: bool = True
    compactionScheduleInternal: int = 15 * 60 * 1000
    compactionMappedFileSize: int = 100 * 1024 * 1024
    # an append that held the send path this many ms: the sends that piled up meanwhile are
    # answered SYSTEM_BUSY [PCBUSY_CLEAN_QUEUE] (broker.server.fast_failure; brokerFastFailureEnable)
    osPageCacheBusyTimeOutMills: int = 1000

    def __post_init__(self) -> None:
        self.validate()

    @property
    def commitlog_dir(self) -> str:
        return paths.commitlog_dir(self.storePathRootDir)

    @property
    def consumequeue_dir(self) -> str:
        return paths.consumequeue_dir(self.storePathRootDir)

    @property
    def config_dir(self) -> str:
        return paths.config_dir(self.storePathRootDir)

    @property
    def index_dir(self) -> str:
        return paths.index_dir(self.storePathRootDir)

    @property
    def dledger_data_dir(self) -> str:
        return paths.dledger_data_dir(self.storePathRootDir, self.dLegerSelfId)

    @property
    def commit_log_cache_bytes(self) -> int:
        """commitLogCacheBytes resolved: bytes kept cached below the flushed, dispatched offset;
        -1 when nothing is let go of."""
        if self.commitLogCacheBytes > 0:
            return self.commitLogCacheBytes
        if self.commitLogCacheBytes == 0:
            return -1
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * self.accessMessageInMemoryMaxRatio // 100

    @property
    def warm_segments(self) -> bool:
        return self.warmMapedFileEnable if self.warmMapedFileEnable is not None else self.flushDiskType == SYNC_FLUSH

    @property
    def ha_port(self) -> int:
        return self.haListenPort or self.listenPort + 1

    @property
    def is_slave(self) -> bool:
        return self.brokerRole == "SLAVE"

    @property
    def sync_master(self) -> bool:
        return self.brokerRole == "SYNC_MASTER"

    @property
    def store_host(self) -> bytes:
        """STOREHOST as stored: IPv4 bytes + port as int32 (big-endian)."""
        return socket.inet_aton(self.brokerIP1) + self.listenPort.to_bytes(4, "big")

    def validate(self) -> None:
        """RocketMQ checks almost none of these keys: a value its broker runs with is taken here
        too, with its meaning (a ratio it clamps is clamped, a size it rounds is rounded, an
        interval of 0 means "at once"). Refused, naming the key, are only values RocketMQ itself
        cannot run with: its broker would not start, or a service would fail on every pass."""
        for key in ("timerPrecisionMs", "timerMaxDelaySec", "timerRollWindowSlot", "timerFlushIntervalMs"):
            if getattr(self, key) <= 0:
                raise StoreConfigError(key, f"{getattr(self, key)} must be positive")
        if self.mappedFileSizeTimerLog < 52 * 16 + 16:
            raise StoreConfigError("mappedFileSizeTimerLog", f"{self.mappedFileSizeTimerLog} bytes cannot hold timer units")
        if self.mappedFileSizeCommitLog <= 0:
            raise StoreConfigError("mappedFileSizeCommitLog", f"{self.mappedFileSizeCommitLog} must be positive")
        if self.mappedFileSizeConsumeQueue <= 0:
            raise StoreConfigError("mappedFileSizeConsumeQueue", f"{self.mappedFileSizeConsumeQueue} must be positive")
        # MessageStoreConfig.getMappedFileSizeConsumeQueue: rounded up to whole 20-byte entries
        self.mappedFileSizeConsumeQueue = -(-self.mappedFileSizeConsumeQueue // CQ_UNIT_SIZE) * CQ_UNIT_SIZE
        if self.flushDiskType not in (ASYNC_FLUSH, SYNC_FLUSH):
            raise StoreConfigError("flushDiskType", f"{self.flushDiskType!r} is not ASYNC_FLUSH or SYNC_FLUSH")
        if self.brokerRole not in ROLES:
            raise StoreConfigError("brokerRole", f"{self.brokerRole!r} is not one of {', '.join(ROLES)}")
        # scheduled at a fixed rate in RocketMQ, which refuses a period of 0 at start
        for key in ("flushConsumerOffsetInterval", "cleanResourceInterval", "serviceStartTimeout",
                    "osPageCacheBusyTimeOutMills"):
            if getattr(self, key) <= 0:
                raise StoreConfigError(key, f"{getattr(self, key)} must be positive")
        if self.compactionScheduleInternal <= 0:  # RocketMQ's scheduleWithFixedDelay refuses it
            raise StoreConfigError("compactionScheduleInternal", f"{self.compactionScheduleInternal} must be positive")
        if self.compactionMappedFileSize < self.maxMessageSize:
            raise StoreConfigError("compactionMappedFileSize", f"{self.compactionMappedFileSize} bytes cannot hold a "
                                   f"message of maxMessageSize ({self.maxMessageSize})")
        if self.maxMessageSize <= 0:
            raise StoreConfigError("maxMessageSize", f"{self.maxMessageSize} must be positive: every message would be refused")
        try:
            socket.inet_aton(self.brokerIP1)
        except OSError:
            raise StoreConfigError("brokerIP1", f"{self.brokerIP1!r} is not an IPv4 address") from None
        if not 0 < self.listenPort < 65536:
            raise StoreConfigError("listenPort", f"{self.listenPort} is not a port")
        self.haListenPort = max(self.haListenPort, 0)  # setHaListenPort: a negative one means the default
        if self.haListenPort >= 65536 or self.ha_port > 65535:
            raise StoreConfigError("haListenPort", f"{self.ha_port} is not a port")
        if self.haMasterAddress:
            host, _, port = self.haMasterAddress.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise StoreConfigError("haMasterAddress", f"{self.haMasterAddress!r} is not host:port")
        for key in ("totalReplicas", "inSyncReplicas", "minInSyncReplicas", "haMaxTimeSlaveNotCatchup"):
            if getattr(self, key) < 1:
                raise StoreConfigError(key, f"{getattr(self, key)} must be at least 1")
        for key in ("haSendHeartbeatInterval", "haHousekeepingInterval"):
            if getattr(self, key) <= 0:  # 0 in RocketMQ: a link dropped or reported on at every turn
                raise StoreConfigError(key, f"{getattr(self, key)} must be positive")
        # RocketMQ's slave reads into a 4 MiB buffer: a frame much larger never completes there
        if not 0 < self.haTransferBatchSize <= 64 * 1024 * 1024:
            raise StoreConfigError("haTransferBatchSize", f"{self.haTransferBatchSize} is outside 1..64 MiB")
        # Index files: a slot count below 1 divides by zero, an entry count below 2 makes every
        # new file full at once (indexCount starts at 1), and RocketMQ sizes a file as an int
        if self.maxHashSlotNum < 1:
            raise StoreConfigError("maxHashSlotNum", f"{self.maxHashSlotNum} must be at least 1")
        if self.maxIndexNum < 2:
            raise StoreConfigError("maxIndexNum", f"{self.maxIndexNum} must be at least 2")
        if 40 + self.maxHashSlotNum * 4 + self.maxIndexNum * 20 > 2**31 - 1:
            raise StoreConfigError("maxIndexNum", f"index files of {self.maxHashSlotNum} slots and {self.maxIndexNum} "
                                                  "entries exceed 2 GiB (RocketMQ sizes them as an int)")
        for key in ("maxMsgsNumBatch", "defaultQueryMaxNum"):
            if getattr(self, key) < 1:  # every query would find nothing
                raise StoreConfigError(key, f"{getattr(self, key)} must be at least 1")
        # The disk watermarks, clamped as RocketMQ's CleanCommitLogService and getters clamp them;
        # 4.x's -Drocketmq.broker.diskSpace...=0.90 fraction form is read as a percentage.
        for key, lo, hi in (("diskSpaceCleanForciblyRatio", 30, 85), ("diskSpaceWarningLevelRatio", 35, 90),
                            ("diskMaxUsedSpaceRatio", 10, 95)):
            v = getattr(self, key)
            if 0 < v < 1:
                v *= 100
            if not lo <= v <= hi:
                log.warning("%s: %g is outside RocketMQ's %d..%d; %d is used, as RocketMQ does", key,
                            getattr(self, key), lo, hi, min(max(v, lo), hi))
                v = min(max(v, lo), hi)
            setattr(self, key, type(getattr(self, key))(v))
        # UtilAll.isItTimeToDo parses each hour as an int on every pass (a non-number throws there,
        # and nothing is ever deleted); an hour no clock shows just never comes.
        hours = [h.strip() for h in self.deleteWhen.split(";")]
        if not all(h.lstrip("-").isdigit() for h in hours):
            raise StoreConfigError("deleteWhen", f"{self.deleteWhen!r} is not hours of the day such as 04;05")
        if not any(0 <= int(h) <= 23 for h in hours):
            log.warning("deleteWhen: %r names no hour of the day; files are deleted only for disk usage or "
                        "when asked", self.deleteWhen)
        # Taken as RocketMQ takes them, whatever the sign: fileReservedTime 0 (or less) expires every
        # segment but the one being written; a batch max below 1 deletes one file per pass; pauses
        # and flush intervals of 0 or less mean none; a syncFlushTimeout of 0 does not wait.

    @property
    def hours_to_delete(self) -> set[int]:
        return {int(h) for h in self.deleteWhen.split(";")}

    @classmethod
    def from_properties(cls, props: dict[str, str], *, ignore_unknown: bool = True) -> tuple["MessageStoreConfig", list[str]]:
        """Build from broker.conf-style string values. Returns (config, keys this class does not know)."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, object] = {}
        unknown = []
        for key, raw in props.items():
            f = known.get(key)
            if f is None:
                unknown.append(key)
                continue
            kwargs[key] = _convert(key, raw, f.type)
        if unknown and not ignore_unknown:
            raise StoreConfigError(unknown[0], "unknown key")
        return cls(**kwargs), unknown


def _convert(key: str, raw: str, typ: object) -> object:
    text = str(raw).strip()
    if typ in ("int", int):
        try:
            return int(text)
        except ValueError:
            raise StoreConfigError(key, f"{text!r} is not an integer") from None
    if typ in ("float", float):
        try:
            return float(text)
        except ValueError:
            raise StoreConfigError(key, f"{text!r} is not a number") from None
    if typ in ("bool", bool, "bool | None"):
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise StoreConfigError(key, f"{text!r} is not true or false")
    return text
