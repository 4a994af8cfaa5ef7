"""Stub of broker.kernels.codec (pyx/codec.pyx; C interface in pyx/codec.pxd, layout in docs/formats.md §1):
commit-log records encoded into a mapped segment and scanned back, the writer's Appender."""
from typing import Final, TypedDict

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

MESSAGE_MAGIC_CODE: Final[int]
BLANK_MAGIC_CODE: Final[int]
FIXED_LEN_V4: Final[int]
END_FILE_MIN_BLANK_LENGTH: Final[int]
SYSFLAG_BORNHOST_V6: Final[int]
SYSFLAG_STOREHOST_V6: Final[int]
SYSFLAG_TRANSACTION: Final[int]
MAX_TOPIC_LEN: Final[int]
MAX_PROPS_LEN: Final[int]
CQ_UNIT_SIZE: Final[int]
SCAN_END: Final[int]
SCAN_BLANK: Final[int]
SCAN_PARTIAL: Final[int]
SCAN_ZERO: Final[int]
SCAN_CORRUPT: Final[int]
DISPATCH_DTYPE: Final[np.dtype[np.void]]

class MessageIllegal(ValueError): ...
class EncodeOverflow(ValueError): ...

class MappedBuffer:
    size: int
    writable: bool
    obj: Buffer | None  # None once released
    def __init__(self, obj: Buffer, writable: bool = True) -> None: ...
    def release(self) -> None: ...

def crc32(data: Buffer) -> int: ...
def crc32_in_hardware() -> bool: ...
def java_string_hash(s: Buffer) -> int: ...
def tag_hash(properties: Buffer) -> int: ...
def record_length(
    body_len: int, topic_len: int, props_len: int, born_v6: bool = False, store_v6: bool = False
) -> int: ...
def msg_id(store_host: Buffer, physical_offset: int) -> str: ...
def encode_record(
    buf: Buffer | MappedBuffer, pos: int, physical_offset: int, queue_offset: int, store_ts: int, topic: bytes,
    queue_id: int, body: Buffer, properties: Buffer, flag: int, sys_flag: int, born_ts: int, born_host: bytes,
    store_host: bytes, reconsume_times: int = 0, prepared_tx_offset: int = 0,
) -> int: ...
def write_blank(buf: Buffer | MappedBuffer, pos: int, remaining: int) -> None: ...

# (count encoded, end position)
def encode_batch(
    buf: Buffer | MappedBuffer, pos: int, limit: int, physical_base: int, queue_offset: int, store_ts: int,
    topic: bytes, queue_id: int, bodies: list[Buffer], properties: Buffer | list[Buffer], flag: int | list[int],
    sys_flag: int, born_ts: int, born_host: bytes, store_host: bytes,
) -> tuple[int, int]: ...

class Scanner:
    topics: list[bytes]
    entries: npt.NDArray[np.void]  # of DISPATCH_DTYPE, max_records long
    reason: str
    def __init__(self, max_records: int = 4096) -> None: ...
    # (count, next_pos, status)
    def scan(
        self, buf: Buffer | MappedBuffer, start: int, end: int, base_offset: int, check_crc: bool = False,
        max_records: int = -1,
    ) -> tuple[int, int, int]: ...
    # the same over DLedger entries (48-byte header, one record per body; no-ops stepped over)
    def scan_entries(
        self, buf: Buffer | MappedBuffer, start: int, end: int, base_offset: int, check_crc: bool = False,
        max_records: int = -1,
    ) -> tuple[int, int, int]: ...

class _ScannedRecord(TypedDict):
    phys_offset: int
    size: int
    queue_id: int
    queue_offset: int
    tag_hash: int
    store_ts: int
    sys_flag: int
    topic: bytes
    keys: bytes
    uniq: bytes
    body_crc_ok: bool

# (records, next_pos, status, reason)
def scan(
    buf: Buffer, start: int, end: int, base_offset: int, check_crc: bool = False, max_records: int | None = None
) -> tuple[list[_ScannedRecord], int, int, str]: ...
def advise_random(buf: MappedBuffer, start: int = 0, end: int = -1) -> None: ...
def populate_read(buf: MappedBuffer, start: int, end: int) -> None: ...
def warm_file(fd: int, start: int, end: int, chunk: int) -> None: ...

class QueueState:
    topic: bytes
    queue_id: int
    next_offset: int
    last_end: int
    touched: int
    def __init__(self, topic: bytes, queue_id: int, next_offset: int = 0) -> None: ...

class Appender:
    seg_base: int
    wrote: int
    store_host: bytes
    max_body: int
    entries: bool
    iseg_base: int
    entry_index: int
    term: int
    def __init__(
        self, store_host: bytes, max_body: int, queue_offsets: dict[tuple[bytes, int], int], wrote: int,
        entries: bool = False,
    ) -> None: ...
    def place_entries(self, wrote: int, entry_index: int, term: int) -> None: ...
    def attach_index(self, iseg: MappedBuffer | None, base: int) -> None: ...
    @property
    def index_end(self) -> int: ...
    def forget_offsets(self) -> None: ...
    def set_next_offset(self, topic: bytes, queue_id: int, next_offset: int) -> None: ...
    def queue(self, topic: bytes, queue_id: int) -> QueueState: ...
    def next_offset(self, topic: bytes, queue_id: int) -> int: ...
    def last_end(self, topic: bytes, queue_id: int) -> int: ...
    @property
    def queue_offsets(self) -> dict[tuple[bytes, int], int]: ...
    def rewind(self, wrote: int, topic: bytes, queue_id: int, next_offset: int) -> None: ...
    def attach(self, seg: MappedBuffer | None, base: int) -> None: ...
    @property
    def segment_end(self) -> int: ...
    def seal(self) -> int: ...
    # (physical offset, queue offset, size, store timestamp), None when the segment is full
    def append(
        self, topic: bytes, queue_id: int, body: Buffer, properties: bytes, flag: int, sys_flag: int, born_ts: int,
        born_host: bytes, reconsume_times: int = 0,
    ) -> tuple[int, int, int, int] | None: ...
    # (count, first physical offset, first queue offset, store timestamp)
    def append_batch(
        self, topic: bytes, queue_id: int, bodies: list[Buffer], properties: Buffer | list[Buffer],
        flag: int | list[int], sys_flag: int, born_ts: int, born_host: bytes,
    ) -> tuple[int, int, int, int]: ...
