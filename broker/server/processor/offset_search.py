"""Store times of queue offsets: a stored record's STORETIMESTAMP, and the queue offset by store time
(SEARCH_OFFSET_BY_TIMESTAMP, and the offsets resetOffsetByTime moves a group to), a binary search
over the queue reading each probed message's store time."""
from __future__ import annotations

from broker.store.message import SYSFLAG_BORNHOST_V6


def store_timestamp(record) -> int:
    """STORETIMESTAMP of a stored record: after the born host, 8 bytes or 20 (SYSFLAG_BORNHOST_V6)."""
    at = 68 if int.from_bytes(record[36:40], "big") & SYSFLAG_BORNHOST_V6 else 56
    return int.from_bytes(record[at:at + 8], "big", signed=True)


def queue_store_time(store, topic: str, queue_id: int, offset: int) -> int:
    """STORETIMESTAMP of the message at a queue offset; 0 when it is no longer (or not yet) there."""
    r = store.get(topic, queue_id, offset, 1)
    try:
        return store_timestamp(r.messages[0]) if r.messages else 0
    finally:
        r.release()  # the views pin their segment's map


def offset_by_time(store, topic: str, queue_id: int, timestamp: int) -> int:
    """The first queue offset whose message was stored at or after `timestamp` (the queue's end when none)."""
    lo, hi = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    while lo < hi:
        mid = (lo + hi) // 2
        r = store.get(topic, queue_id, mid, 1)
        if not r.messages:
            break
        try:
            stored_at = store_timestamp(r.messages[0])
        finally:
            r.release()
        if stored_at < timestamp:
            lo = mid + 1
        else:
            hi = mid
    return lo
