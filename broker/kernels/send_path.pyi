"""Stub of broker.kernels.send_path (pyx/send_path.pyx; no .pxd, nothing cimports it): the frames of one
socket read in one kernel pass, plain sends appended and answered in C, the rest handed to Python."""
from typing import Any, Final

from typing_extensions import Buffer

from broker.kernels.codec import Appender, QueueState
from broker.kernels.wbuf import WriteBuffer

RUN_DONE: Final[int]
RUN_SLOW: Final[int]
RUN_ROLL: Final[int]
RUN_YIELD: Final[int]
DEFAULT_MAX_FRAME: Final[int]

# the properties as RocketMQ stores them (CLUSTER set, a single message's WAIT left out) and whether
# the producer waits for the store (WAIT); None when they pass 32767 bytes
def stored_properties(props: bytes, cluster: bytes) -> tuple[bytes, bool] | None: ...

class TopicRoute:
    topic: bytes
    n: int
    def __init__(self, topic: bytes, queues: list[QueueState]) -> None: ...

class ParkedReplies:
    conn: Any  # the connection the replies go to
    end: int
    messages: int
    def __init__(self, conn: Any, store_host: bytes, region: bytes, trace: bytes) -> None: ...
    def __len__(self) -> int: ...
    def render(self, code: int, remark: bytes | None = None) -> bytes: ...

class SendConn:
    born_host: bytes
    out: WriteBuffer
    parked: ParkedReplies | None
    msgs: int
    bytes_appended: int
    max_end: int
    timers: int  # timer messages appended since take_timers
    touched: list[QueueState]
    slow_type: int
    slow_header_start: int
    slow_header_len: int
    slow_body_start: int
    slow_body_len: int
    slow_next: int
    def __init__(self, born_host: bytes) -> None: ...
    def take_replies(self) -> bytes | None: ...
    def take_timers(self) -> int: ...
    # (messages, bytes, highest end offset, touched queues)
    def take(self) -> tuple[int, int, int, list[QueueState]]: ...

class SendPipeline:
    enabled: bool
    parked: bool
    track_queues: bool
    region: bytes
    trace: bytes
    cluster: bytes  # brokerClusterName, stored as CLUSTER (WAIT left out); empty: properties as sent
    appended: int
    timer_topic: bytes | None  # set_timer's topic; None: timer messages go to Python
    timer_clock_ms: int  # the time timer messages are taken at; 0: the wall clock
    def __init__(
        self, app: Appender, region: bytes = b"DefaultRegion", trace: bytes = b"true", max_frame: int = ...,
        cluster: bytes = b"",
    ) -> None: ...
    @property
    def appender(self) -> Appender: ...
    def set_appender(self, app: Appender) -> None: ...
    def set_timer(
        self, topic: bytes | None, precision_ms: int = 1000, max_delay_ms: int = 0, broker_name: bytes = b""
    ) -> None: ...
    def set_route(self, topic: bytes, write_queues: int) -> None: ...
    def drop_routes(self) -> None: ...
    def routes(self) -> dict[bytes, int]: ...
    # (status, pos): status RUN_DONE, RUN_SLOW, RUN_ROLL or RUN_YIELD
    def run(self, c: SendConn, buf: Buffer, pos: int, end: int, yield_after: int = 0) -> tuple[int, int]: ...
    def append_values(self, c: SendConn, topic: bytes, queue_id: int, body: Buffer, props: bytes, flag: int = 0,
                      sys_flag: int = 0, born_ts: int = -1) -> int: ...
