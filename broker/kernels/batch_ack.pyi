"""Stub of broker.kernels.batch_ack (pyx/batch_ack.pyx): the batch ack's bookkeeping on one
in-flight checkpoint (its indexes, bitmap and BatchAckMsg record) in one call."""

def ascending(offsets: list[int]) -> list[int]: ...
def ack_record(offsets: list[int], so: int, diffs: list[int], num: int, bitmap: int, topic: str, queue_id: int,
               group: str, pop_time: int, broker_name: str
               ) -> tuple[int, bool, bytes | None, bytes | None, int, list[int]] | None: ...
