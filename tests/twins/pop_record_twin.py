"""Pure-Python twin of broker.kernels.pop_record (pyx/pop_record.pyx): a pop's checkpoint record
for the revive log (PopCheckPoint's JSON body and its TAGS/UNIQ_KEY properties), or None where the
kernel declines. Used only by the tests (tests/test_pop_record_kernel_vs_twin.py)."""
from __future__ import annotations

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


def _plain(name: str) -> bool:
    """JSON writes it as it is: no '"', '\\' or control character below 0x20, encodable as UTF-8."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return not any(c in '"\\' or ord(c) < 0x20 for c in name)


def check_point_record(start_offset: int, pop_time: int, invisible_time: int, num: int, queue_id: int, topic: str,
                       group: str, broker_name: str, diffs: list) -> tuple[bytes, bytes] | None:
    for v in (start_offset, pop_time, invisible_time, num, queue_id):
        if not I64_MIN <= v <= I64_MAX:
            raise OverflowError("a number past int64")
    if not (_plain(topic) and _plain(group) and _plain(broker_name)):
        return None
    if any(type(d) is not int for d in diffs) or any(not I64_MIN <= d <= I64_MAX for d in diffs):
        return None
    body = (f'{{"so":{start_offset},"pt":{pop_time},"it":{invisible_time},"bm":0,"n":{num},"q":{queue_id},'
            f'"t":"{topic}","c":"{group}","ro":0,"d":[{",".join(map(str, diffs))}],"bn":"{broker_name}"}}')
    uniq = f"{topic}@{queue_id}@{start_offset}@{group}@{pop_time}@{broker_name}@ck"
    return body.encode(), f"TAGS\x01ck\x02UNIQ_KEY\x01{uniq}".encode()
