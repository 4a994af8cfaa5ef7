"""Slots of the shared offset table and where it lives. Each slot has exactly one writer process."""
from __future__ import annotations

import enum
import os

from broker.kernels.atomics import OffsetTable
from broker.store import paths


class Slot(enum.IntEnum):
    WROTE = 0           # broker (master) / HA reader (slave): commit log written up to here
    FLUSHED = 1         # flush service: durable up to here
    DISPATCHED = 2      # reput service: consume queues built up to here
    ACKED = 3           # HA writer: highest offset a slave confirmed
    MIN_OFFSET = 4      # cleaner: commit-log minimum
    TOPICS_DELETED = 5  # broker: bumped when it deleted topics' consume-queue directories (deleteTopic)
    TOPICS_DELETED_ACK = 6  # reput service: the TOPICS_DELETED it let go of those queues' maps for
    # broker: the role the HA process serves in (HA_ROLE_*), the master epoch a controller-mode slave
    # follows or master serves (its hello, the epoch a slave's hello must name) and this broker's id
    # in controller mode; the HA process takes them up when HA_MASTER is bumped
    HA_ROLE = 7
    FLUSH_PID = 8       # flush service: its pid while alive
    REPUT_PID = 9       # reput service: its pid while alive
    HA_PID = 10         # HA service (master: writer, slave: reader): its pid while alive
    HA_SLAVES = 11      # HA writer: slaves connected now
    HA_LINK = 12        # HA reader: 1 while linked to the master
    HA_RECEIVED = 13    # HA reader: bytes received from the master (may end inside a record)
    HA_EPOCH = 14
    HA_BROKER_ID = 15
    SHUTDOWN = 16       # broker: 1 asks every service to finish and exit
    WANT_DISPATCH = 17  # broker: >0 while pulls wait for dispatches (reput then writes the eventfd)
    FLUSH_ERRORS = 18   # flush service: count of failed fdatasync calls
    # broker: bumped when the HA process's role or, on a slave, its master's HA address (runtime/ha_master)
    # changes; the HA process publishes in HA_ROLE_ACK the value it serves by once it left the old role
    HA_MASTER = 19
    DISK_FULL = 20      # cleaner: 1 while disk usage is above diskSpaceWarningLevelRatio (writes refused)
    MANUAL_CLEAN = 21   # broker: bumped by `broker admin clean` (the cleaner sleeps on it)
    CLEAN_PID = 22      # cleaner: its pid while alive
    DISK_USAGE = 23     # cleaner: disk usage of the store's filesystem, in parts per million
    DELETED_FILES = 24  # cleaner: commit-log segments deleted so far
    FLUSH_COUNT = 25    # flush service: fdatasync rounds
    FLUSH_NS = 26       # flush service: their total duration, ns
    DISPATCH_BLOCKED = 27  # reput service: errno while it cannot write consume queues (writes refused), else 0
    QUEUES_SEEN = 28    # reput service: bumped when it starts writing a consume queue it had not written yet
    REPUT_WAKE = 29     # the commit log's writer: bumped (at most once a millisecond) when it wrote since
    # broker (controller-mode master): bit b set for each SyncStateSet member b (a slave) whose
    # acknowledgement bounds what the reput dispatches (RocketMQ 5's confirmOffset); 0: no bound
    ISR_MASK = 30
    HA_ROLE_ACK = 31
    FLUSH_BUCKET0 = 32  # flush service: fdatasync rounds per latency bucket (FLUSH_BUCKETS), cumulative order
    # DLedger mode (FLUSHED is then where the member's entry data is durable up to): where its
    # index file is durable up to, in bytes, so what a power cut keeps can be told from outside
    # compaction service: 1 + the lowest commit-log offset a compacted topic's queues still need
    # (messages not yet in their compacted view), which the cleaner keeps unless forced; 0: none
    COMPACTION_NEED = 47
    ENTRY_INDEX_FLUSHED = 48
    # broker (DLedger mode): the lowest data position this member's log must keep for the group,
    # so the cleaner never deletes what a live follower still needs (broker.raft.dledger_clean)
    FOLLOWERS_NEED = 49
    # HA writer (controller mode): per linked slave a pair of slots from here, its brokerId + 1
    # (0: the pair is free) then the offset it acknowledged (HA_SLAVE_PAIRS pairs)
    HA_SLAVE_BASE = 50


HA_ROLE_NONE = 0  # a controller-mode broker no master was named to: no HA link, no writes
HA_ROLE_MASTER = 1  # listens for slaves and streams them the log
HA_ROLE_SLAVE = 2  # connects to the master (runtime/ha_master) and is the log's only writer

# upper bounds of the flush-latency histogram's buckets, seconds (the last is +Inf)
FLUSH_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, float("inf"))
NSLOTS = 64
HA_SLAVE_PAIRS = (NSLOTS - Slot.HA_SLAVE_BASE) // 2  # 7 slaves with their acks in controller mode


def slave_acks(table) -> dict[int, int]:
    """Controller mode: brokerId -> the offset it acknowledged, for every slave linked now."""
    out = {}
    for k in range(HA_SLAVE_PAIRS):
        bid = table.load(Slot.HA_SLAVE_BASE + 2 * k)
        if bid:
            out[bid - 1] = max(out.get(bid - 1, -1), table.load(Slot.HA_SLAVE_BASE + 2 * k + 1))
    return out


def confirm_offset(table, wrote: int) -> int:
    """What the consume queues may hold (RocketMQ 5's confirmOffset): the log's end, or in controller
    mode the least of what the SyncStateSet's slaves acknowledged (a member not linked: nothing
    past what is dispatched already)."""
    mask = table.load(Slot.ISR_MASK)
    if not mask:
        return wrote
    acks = slave_acks(table)
    end = wrote
    b = 0
    while mask:
        if mask & 1:
            end = min(end, acks.get(b, 0))
        mask >>= 1
        b += 1
    return end


def table_path(store_root: str) -> str:
    return paths.offset_table(store_root)


def create_table(store_root: str) -> OffsetTable:
    os.makedirs(paths.runtime_dir(store_root), exist_ok=True)
    return OffsetTable(table_path(store_root), NSLOTS, True)


def open_table(store_root: str) -> OffsetTable:
    return OffsetTable(table_path(store_root), NSLOTS, False)
