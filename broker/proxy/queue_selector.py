"""Which queue a message goes to: a FIFO message's group always picks the same queue (the Java
proxy's SendMessageQueueSelector: Guava's consistentHash of the group's String.hashCode over the
topic's write queues), so one group's messages stay in order on one queue."""
from __future__ import annotations

from broker.kernels.codec import java_string_hash

_M64 = (1 << 64) - 1


def consistent_hash(value: int, buckets: int) -> int:
    """com.google.common.hash.Hashing.consistentHash(long, int)."""
    if buckets <= 0:
        raise ValueError(f"buckets must be positive, not {buckets}")
    state = value & _M64
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & _M64  # LinearCongruentialGenerator.nextDouble
        top = state >> 33  # (int)(state >>> 33): 31 bits, never negative
        nxt = int((candidate + 1) / ((top + 1) / float(1 << 31)))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def queue_index_for_group(message_group: str, queue_count: int) -> int:
    return consistent_hash(java_string_hash(message_group.encode()), queue_count)
