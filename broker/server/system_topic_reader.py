"""Reading a broker system topic's queue back (the transaction half/op topics, the pop revive log):
every message from an offset to the queue's dispatched end, decoded, in queue order.

A hole (an entry whose record is gone, or a record that does not decode) gives None for its
message, logged, so that a reader steps over it instead of stopping there or failing its start;
an offset outside the queue moves to its bounds with a warning."""
from __future__ import annotations

import logging
from typing import Iterator

from broker.store.errors import StoreError
from broker.store.message import StoredMessage, decode_message
from broker.store.results import GetStatus

log = logging.getLogger("store")


def _decode(topic: str, queue_id: int, queue_offset: int, view) -> StoredMessage | None:
    try:
        return decode_message(view)
    except StoreError as e:
        log.error("%s/%d: entry %d is no readable record (%s); stepped over", topic, queue_id, queue_offset, e)
        return None


def read_messages(store, topic: str, queue_id: int, offset: int, batch: int = 32,
                  max_bytes: int = 256 * 1024) -> Iterator[tuple[int, StoredMessage | None]]:
    """(queue offset, message or None for a hole) from `offset` on."""
    while True:
        r = store.get(topic, queue_id, offset, batch, max_bytes)
        try:
            if r.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
                if r.next_offset <= offset:
                    return
                log.warning("%s/%d: offset %d outside [%d, %d], moving to %d", topic, queue_id, offset, r.min_offset,
                            r.max_offset, r.next_offset)
                offset = r.next_offset
                continue
            if r.status == GetStatus.OFFSET_FOUND_NULL:
                log.error("%s/%d: entry %d has no record; stepped over", topic, queue_id, offset)
                yield offset, None
                offset += 1
                continue
            if r.status != GetStatus.FOUND:
                return
            msgs = [(qo, _decode(topic, queue_id, qo, view)) for view, qo in zip(r.messages, r.queue_offsets)]
        finally:
            r.release()
        yield from msgs
        offset = msgs[-1][0] + 1
