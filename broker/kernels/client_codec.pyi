"""Stub of broker.kernels.client_codec (pyx/client_codec.pyx; C interface in pyx/client_codec.pxd,
reply rules in docs/formats.md §4.2): the client's request frames and reply reader."""
from typing import Any, Final, Iterable, Mapping

from typing_extensions import Buffer

from broker.kernels.wbuf import WriteBuffer

READ_DONE: Final[int]
READ_SLOW: Final[int]
DEFAULT_MAX_FRAME: Final[int]
F_MSG_ID: Final[int]
F_QUEUE_ID: Final[int]
F_QUEUE_OFFSET: Final[int]
F_NEXT_BEGIN_OFFSET: Final[int]
F_MIN_OFFSET: Final[int]
F_MAX_OFFSET: Final[int]
F_SUGGEST_BROKER: Final[int]
F_TRANSACTION_ID: Final[int]
F_RECALL_HANDLE: Final[int]
RESULT_FIELDS: Final[tuple[str, ...]]

def uniq_key_setup(prefix: str, start_ms: int) -> None: ...
def new_uniq_key() -> str: ...
def message_properties(
    tags: Any, keys: str | Iterable[str] | None, properties: Mapping[Any, Any] | None, delay_level: int = 0,
    uniq_key: str | None = None,
) -> tuple[bytes, Any]: ...
def render_send(
    w: WriteBuffer, opaque: int, oneway: bool, group: str, topic: str, default_queues: int, queue_id: int,
    sys_flag: int, flag: int, body: Buffer, tags: Any, keys: str | Iterable[str] | None,
    properties: Mapping[Any, Any] | None, delay_level: int = 0, reconsume_times: int = 0,
    max_reconsume_times: int = -1, uniq_key: str | None = None, born_ts: int = -1,
) -> Any:
    """Renders one SEND_MESSAGE_V2 frame into w; returns the message's UNIQ_KEY."""

def render_batch(
    w: WriteBuffer, opaque: int, group: str, topic: str, default_queues: int, queue_id: int, flag: int,
    msgs: list[Any], uniq_keys: list[str] | None = None, born_ts: int = -1,
) -> list[Any]:
    """Renders one SEND_BATCH_MESSAGE frame into w; returns the messages' UNIQ_KEYs."""

def render_pull(
    w: WriteBuffer, opaque: int, group: str, topic: str, queue_id: int, queue_offset: int, max_nums: int,
    sys_flag: int, commit_offset: int, suspend_ms: int, subscription: str, sub_version: int = 0,
) -> None: ...

class Reply:
    opaque: int
    code: int
    fields: int
    remark: str | None
    msg_id: str | None
    transaction_id: str | None
    recall_handle: str | None
    body: bytes
    header_start: int
    header_len: int
    serialize_type: int
    @property
    def queue_id(self) -> int | None: ...
    @property
    def queue_offset(self) -> int | None: ...
    @property
    def next_begin_offset(self) -> int | None: ...
    @property
    def min_offset(self) -> int | None: ...
    @property
    def max_offset(self) -> int | None: ...
    @property
    def suggest_which_broker_id(self) -> int | None: ...

def send_result_setup(result_type: Any, status_of: dict[int, str]) -> None: ...

class SendSlots:
    """A connection's opaques and its fast sends in flight, completed by ReplyReader.read."""
    in_flight: int
    armed: float
    channel: Any
    def __init__(self, channel: Any = None, size: int = 4096) -> None: ...
    def next_opaque(self) -> int: ...
    def send(
        self, w: WriteBuffer, fut: Any, owner: Any, group: str, msg: Any, mq: Any, queue_id: int,
        default_queues: int, compress_over: int, now: float, timeout: float,
    ) -> int: ...
    def bind(self, loop: Any) -> None: ...
    def submit(
        self, w: WriteBuffer, owner: Any, group: str, msg: Any, mq: Any, queue_id: int, default_queues: int,
        compress_over: int, timeout: float, fresh_until: float,
    ) -> Any: ...
    def take(self, opaque: int) -> tuple[Any, Any, Any, Any, Any, float, float] | None: ...
    def expire(self, now: float) -> list[tuple[Any, Any, Any, Any, Any, float, float]]: ...
    def take_all(self) -> list[tuple[Any, Any, Any, Any, Any, float, float]]: ...

class FastTopic:
    """A producer's fast sends of one topic: the queue chosen and the message handed to its
    connection's SendSlots in C."""
    hit: Any
    fresh_until: float
    topic: str
    n: int
    def __init__(
        self, owner: Any, group: str, default_queues: int, compress_over: int, routes: dict[str, Any], topic: str,
        hit: Any, fresh_until: float, targets: list[tuple[Any, int, Any]], rr: Any,
    ) -> None: ...
    def submit(self, msg: Any, timeout: float) -> Any: ...

class ReplyReader:
    sends: SendSlots | None
    replies: list[Reply]
    max_frame: int
    slow_type: int
    slow_header_start: int
    slow_header_len: int
    slow_body_start: int
    slow_body_len: int
    slow_next: int
    def __init__(self, max_frame: int = ...) -> None: ...
    def take(self) -> list[Reply]: ...
    def read(self, buf: Buffer, pos: int, end: int) -> tuple[int, int]: ...

def read_replies(
    buf: Buffer, pos: int, end: int, max_frame: int = ..., sends: SendSlots | None = None
) -> tuple[list[Reply | tuple[str, int, int, int, int, int]], int]: ...
