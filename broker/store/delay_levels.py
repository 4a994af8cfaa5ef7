"""messageDelayLevel: the delay of each level, and the delivery time RocketMQ keeps for a delayed
message in its consume queue.

A message with a delay level waits in SCHEDULE_TOPIC_XXXX, queue level-1. RocketMQ's dispatch
(CommitLog.checkMessageAndReturnSize) writes that queue's tagsCode as the delivery timestamp,
storeTimestamp + the level's delay (the level capped at the highest), and its ScheduleMessageService
delivers an entry once that time has come: an entry whose tagsCode is not a delivery time is
delivered at once by a Java broker that starts on the store."""
from __future__ import annotations

import re

from broker.store.errors import StoreConfigError

DEFAULT_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """messageDelayLevel ("1s 5s 10s 30s 1m …") → milliseconds per level (level 1 first).
    RocketMQ knows s, m, h, d; `ms` is accepted too so that tests can use short levels."""
    out = []
    for item in text.split():
        m = re.fullmatch(r"(\d+)(ms|s|m|h|d)", item)
        if m is None:
            raise StoreConfigError("messageDelayLevel", f"{item!r} is not a number followed by ms, s, m, h or d")
        out.append(int(m.group(1)) * _UNITS[m.group(2)])
    if not out:
        raise StoreConfigError("messageDelayLevel", "no delay levels")
    return out


def deliver_timestamp(delays: list[int], level_text: str | None, store_ts: int) -> int | None:
    """The tagsCode of a SCHEDULE_TOPIC_XXXX entry whose record has DELAY=`level_text`; None when
    RocketMQ keeps the tag hash (no level, or not a positive number)."""
    try:
        level = int(level_text) if level_text is not None else 0
    except ValueError:
        return None
    if level <= 0:
        return None
    return store_ts + delays[min(level, len(delays)) - 1]
