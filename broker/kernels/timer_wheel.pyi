"""Stub of broker.kernels.timer_wheel (pyx/timer_wheel.pyx): the timer service's enqueue over runs of
stored timer-topic records, units appended to the timer log and linked into the wheel in C."""
from typing import Final

from typing_extensions import Buffer

ENQ_DONE: Final[int]
ENQ_PYTHON: Final[int]
ENQ_LOG_FULL: Final[int]

# String.hashCode() of UTF-8 text; ValueError when it is not UTF-8
def topic_hash(topic: bytes) -> int: ...

# (status, pos, count, next queue offset or -1, log_wrote)
def enqueue_records(
    span: Buffer, pos: int, wheel: Buffer, slots: int, precision: int, log: Buffer, log_base: int, log_wrote: int,
    log_size: int, write_ms: int, read_ms: int, past_qo: int, past_ms: int, roll_window: int,
) -> tuple[int, int, int, int, int]: ...
