"""A queue offset by store time (SEARCH_OFFSET_BY_TIMESTAMP, and the offsets resetOffsetByTime moves
a group to): a binary search over the queue, reading each probed message's STORETIMESTAMP."""
from __future__ import annotations


def offset_by_time(store, topic: str, queue_id: int, timestamp: int) -> int:
    """The first queue offset whose message was stored at or after `timestamp` (the queue's end when none)."""
    lo, hi = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    while lo < hi:
        mid = (lo + hi) // 2
        r = store.get(topic, queue_id, mid, 1)
        if not r.messages:
            break
        if int.from_bytes(r.messages[0][56:64], "big", signed=True) < timestamp:  # STORETIMESTAMP
            lo = mid + 1
        else:
            hi = mid
    return lo
