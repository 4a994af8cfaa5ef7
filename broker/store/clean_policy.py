"""When and what the cleaner deletes: RocketMQ 4.x CleanCommitLogService's rules, as pure logic
with an injectable clock and disk-usage source so each rule can be tested at the moment it fires.

Every cleanResourceInterval the cleaner asks `decide`: deletion runs at a `deleteWhen` hour, when
the disk is fuller than diskMaxUsedSpaceRatio, or on a manual request; above
diskSpaceCleanForciblyRatio (with cleanFileForciblyEnable) files go regardless of age; above
diskSpaceWarningLevelRatio the broker refuses writes until usage falls back.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable


def usage_of(total: int, free: int, usable: int) -> float:
    """RocketMQ's UtilAll.getDiskPartitionSpaceUsedPercent from File's getTotalSpace, getFreeSpace
    and getUsableSpace: used / (used + usable), rounded up to a whole percent, so blocks reserved
    for root count as neither (df's Use%). 1 - usable/total would count them as used: on a disk
    with a large reserve that reads far fuller than the Java broker does (a host here: 33 % by
    RocketMQ's rule, 75.4 % by that one, past diskMaxUsedSpaceRatio's 75 and deleting files)."""
    if total <= 0:
        return 1.0
    used = total - free
    entire = used + usable
    if entire <= 0:
        return 1.0
    return (used * 100 // entire + (1 if used * 100 % entire else 0)) / 100.0


def filesystem_usage(path: str) -> float:
    """Used fraction of the filesystem holding `path`, as the Java broker measures it (usage_of)."""
    st = os.statvfs(path)
    return usage_of(st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize, st.f_bavail * st.f_frsize)


@dataclass
class CleanDecision:
    usage: float  # fraction
    delete: bool  # run a deletion pass now
    forcibly: bool  # ignore fileReservedTime
    disk_full: bool  # refuse writes
    reason: str


class CleanPolicy:
    def __init__(self, config, usage: Callable[[], float], clock: Callable[[], float] = time.time):
        self.config = config
        self.usage = usage
        self.clock = clock
        self.hours = config.hours_to_delete

    def decide(self, manual: bool) -> CleanDecision:
        c = self.config
        try:
            usage = self.usage()
        except OSError:
            usage = 1.0  # as RocketMQ: a usage we cannot read counts as full
        timeup = time.localtime(self.clock()).tm_hour in self.hours
        spacefull = usage > c.diskMaxUsedSpaceRatio / 100
        forcibly = c.cleanFileForciblyEnable and usage > c.diskSpaceCleanForciblyRatio / 100
        disk_full = usage > c.diskSpaceWarningLevelRatio / 100
        reasons = [r for r, on in (("deleteWhen hour", timeup), (f"disk {usage:.0%} > diskMaxUsedSpaceRatio", spacefull),
                                   ("manual", manual), ("forcibly", forcibly)) if on]
        return CleanDecision(usage, bool(reasons), forcibly, disk_full, ", ".join(reasons))

    def expired(self, mtime: float, forcibly: bool, reserved_hours: float | None = None) -> bool:
        # RocketMQ: now >= lastModified + fileReservedTime hours, so 0 expires a file at once;
        # DLedger's data files are kept `reserved_hours` (fileReservedTime + 1, as RocketMQ passes
        # it to DLedger as fileReservedHours: broker.raft.dledger_clean)
        hours = self.config.fileReservedTime if reserved_hours is None else reserved_hours
        return forcibly or self.clock() >= mtime + hours * 3600
