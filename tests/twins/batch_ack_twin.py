"""Pure-Python twin of broker.kernels.batch_ack (pyx/batch_ack.pyx): the batch ack's bookkeeping on
one in-flight checkpoint, written as the Python path did it (PopCheckPoint.index_of for each
offset, ack_many's sorted todo, BatchAckMsg.to_json, ReviveLog.append's properties). Used only by
the tests (tests/test_batch_ack_kernel_vs_twin.py)."""
from __future__ import annotations

from broker.store.pop_check_point import BATCH_ACK_TAG, BatchAckMsg, PopCheckPoint

MAX_N = 64
_I64 = 1 << 63


def _plain(s) -> bool:
    if type(s) is not str:
        return False
    try:
        b = s.encode()
    except UnicodeEncodeError:
        return False
    return not any(c < 0x20 or c in (0x22, 0x5C) for c in b)


def ascending(offsets: list) -> list:
    return sorted(set(offsets))


def ack_record(offsets, so, diffs, num, bitmap, topic, queue_id, group, pop_time, broker_name):
    n = len(diffs) if diffs else num
    if n > MAX_N or n < 0 or type(bitmap) is not int or not 0 <= bitmap < 1 << 64:
        return None
    if any(type(x) is not int or not -_I64 <= x < _I64 for x in list(diffs) + list(offsets)):
        return None
    ck = PopCheckPoint(so, pop_time, 0, num, queue_id, topic, group, broker_name, list(diffs), bitmap)
    indexes, missing = set(), []
    for o in offsets:
        if o >= so and o - so >= _I64:
            return None
        i = ck.index_of(o)
        if i < 0:
            missing.append(o)
        else:
            indexes.add(i)
    todo = sorted(i for i in indexes if not bitmap >> i & 1)
    full = (1 << n) - 1
    if len(todo) <= 1:
        return bitmap, bitmap == full, None, None, todo[0] if todo else -1, missing
    if not (_plain(topic) and _plain(group) and _plain(broker_name)):
        return None
    acked = [ck.offsets()[i] for i in todo]
    body = BatchAckMsg(acked, so, group, topic, queue_id, pop_time, broker_name).to_json()
    uniq = f"{topic}@{queue_id}@{acked}@{group}@{pop_time}@{broker_name}@{BATCH_ACK_TAG}"
    props = f"TAGS\x01{BATCH_ACK_TAG}\x02UNIQ_KEY\x01{uniq}".encode()
    for i in todo:
        bitmap |= 1 << i
    return bitmap, bitmap == full, body, props, -1, missing
