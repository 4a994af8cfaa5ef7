"""Stub of broker.kernels.pop_record (pyx/pop_record.pyx): a pop's checkpoint record for the revive
log (PopCheckPoint's JSON and its TAGS/UNIQ_KEY properties) written in one call."""

def check_point_record(start_offset: int, pop_time: int, invisible_time: int, num: int, queue_id: int, topic: str,
                       group: str, broker_name: str, diffs: list[int]) -> tuple[bytes, bytes] | None: ...
