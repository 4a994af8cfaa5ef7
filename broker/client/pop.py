"""Pop consumption from the client side (RocketMQ's MQClientAPIImpl.popMessageAsync, ackMessageAsync,
changeInvisibleTimeAsync): the broker keeps the consume state, the client holds receipt handles.

`pop` returns the messages with each one's handle in its POP_CK property (built from the
response's offset infos as processPopResponse builds it) and its topic set to the topic asked
for (a message redelivered through the pop retry topic is stored there). `ack` and
`change_invisible_time` take a message's handle; the topic they send is the one the handle says
it was popped from (the topic itself or %RETRY%<group>_<topic>).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from broker.client.client_instance import MQClientInstance
from broker.client.errors import ResponseError
from broker.client.message import MessageExt, decode_messages
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.common import extra_info as ei

PROPERTY_POP_CK = "POP_CK"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
FOUND, NO_NEW_MSG = "FOUND", "POLLING_NOT_FOUND"


@dataclass
class PopResult:
    status: str
    messages: list[MessageExt] = field(default_factory=list)
    pop_time: int = 0
    invisible_time: int = 0
    rest_num: int = 0


def handle_of(msg: MessageExt) -> str:
    return msg.properties[PROPERTY_POP_CK]


@dataclass(slots=True)
class PoppedRecords:
    """A POP_MESSAGE answer before its records are read into messages (pop_records): the records
    as the body holds them, and the header fields their receipt handles are built from."""
    status: str
    body: object = b""
    pop_time: int = 0
    invisible_time: int = 0
    revive_qid: int = 0
    rest_num: int = 0
    start_offset_info: str | None = None
    order_count_info: str | None = None
    # startOffsetInfo as parse_start_offset_info reads it, when the answer came as values (None: parse the text)
    start_offsets: dict[str, int] | None = None

    def starts(self) -> dict[str, int]:
        """{"<retryFlag>@<queueId>": the checkpoint's start offset} of each queue popped."""
        if self.start_offsets is not None:
            return self.start_offsets
        return ei.parse_start_offset_info(self.start_offset_info)


async def pop_records(client: MQClientInstance, addr: str, group: str, topic: str, invisible_time_ms: int,
                      max_nums: int = 32, queue_id: int = -1, poll_ms: int = 0, expression: str = "*",
                      order: bool = False, init_mode: int = 0, attempt_id: str = "", timeout: float | None = None,
                      expression_type: str = "TAG") -> PoppedRecords:
    """POP_MESSAGE (200050), its records left as the body: what a caller that writes them out
    itself reads (the gRPC front's receive, broker.kernels.receive_reply.encode_popped);
    read_records makes pop's messages of it.

    A client with a typed pop entry (the local gRPC front's broker.proxy.local_broker.LocalBroker:
    `pop` taking the fields as values, answering (code, remark, the broker's Popped)) is asked
    through it, with no command; when it declines (None: the broker would not serve it at once)
    the command goes as to any broker."""
    typed = getattr(client, "pop", None)
    if typed is not None:
        answer = typed(group, topic, queue_id, max_nums, invisible_time_ms, poll_ms, expression, expression_type,
                       init_mode, order, attempt_id, timeout if timeout is not None else poll_ms / 1000 + 10)
        if answer is not None:
            code, remark, popped = await answer
            if code == codes.SUCCESS:
                return typed_records(code, remark, popped, "", order)
            return typed_records(code, remark, popped, f"pop {topic} for {group} from {addr}", order)
    ext = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "maxMsgNums": max_nums,
           "invisibleTime": invisible_time_ms, "pollTime": poll_ms, "bornTime": int(time.time() * 1000),
           "initMode": init_mode, "expType": expression_type, "exp": expression, "order": order}
    if attempt_id:
        ext["attemptId"] = attempt_id
    r = await client.invoke(addr, RemotingCommand.request(codes.POP_MESSAGE, ext),
                            timeout if timeout is not None else poll_ms / 1000 + 10)
    if r.code in (codes.POLLING_TIMEOUT, codes.PULL_NOT_FOUND, codes.POLLING_FULL):
        return PoppedRecords(NO_NEW_MSG, rest_num=r.get_int("restNum", 0))
    if r.code != codes.SUCCESS:
        raise ResponseError(r.code, r.remark, f"pop {topic} for {group} from {addr}")
    return PoppedRecords(FOUND, r.body, pop_time=r.get_int("popTime"), invisible_time=r.get_int("invisibleTime"),
                         revive_qid=r.get_int("reviveQid"), rest_num=r.get_int("restNum", 0),
                         start_offset_info=r.ext.get("startOffsetInfo"),
                         order_count_info=r.ext.get("orderCountInfo") if order else None)


def typed_records(code: int, remark: str | None, popped, what: str, order: bool) -> PoppedRecords:
    """pop_records' answer from a typed pop's (code, remark, popped): `popped` has the values
    POP_MESSAGE's response carries (views: the records, pop_time, invisible_time, revive_qid, rest,
    start_offsets(), order_count_info()), as the broker's PopMessageProcessor.Popped."""
    if code in (codes.POLLING_TIMEOUT, codes.PULL_NOT_FOUND, codes.POLLING_FULL):
        return PoppedRecords(NO_NEW_MSG, rest_num=popped.rest if popped is not None else 0)
    if code != codes.SUCCESS:
        raise ResponseError(code, remark, what)
    # (positional: a third of the keywords' cost; the fields' order is PoppedRecords')
    return PoppedRecords(FOUND, b"".join(popped.views), popped.pop_time, popped.invisible_time, popped.revive_qid,
                         popped.rest, None, popped.order_count_info() if order else None, popped.start_offsets())


def read_records(popped: PoppedRecords, broker_name: str, topic: str) -> PopResult:
    """pop's result of a POP_MESSAGE answer: each message with its handle in POP_CK (built from
    the offset infos as processPopResponse builds it), its first pop time, and the topic asked for."""
    if popped.status != FOUND:
        return PopResult(popped.status, rest_num=popped.rest_num)
    res = PopResult(FOUND, decode_messages(popped.body, broker_name), popped.pop_time, popped.invisible_time,
                    popped.rest_num)
    revive_qid = popped.revive_qid
    starts = popped.starts()
    counts = ei.parse_order_count_info(popped.order_count_info) if popped.order_count_info is not None else {}
    first_pop = str(res.pop_time)
    # a handle is ei.build's text: all but the message's own offset is the same for its queue's
    # messages, so that part is made once per queue
    prefixes: dict[tuple[str, int], str] = {}
    for m in res.messages:
        props = m.properties
        if PROPERTY_POP_CK not in props:
            where = (m.topic, m.queue_id)
            prefix = prefixes.get(where)
            if prefix is None:
                qkey = ei.queue_key(*where)
                prefix = prefixes[where] = ei.build(starts[qkey], res.pop_time, res.invisible_time, revive_qid,
                                                    m.topic, broker_name, m.queue_id, 0)[:-1]
            props[PROPERTY_POP_CK] = f"{prefix}{m.queue_offset}"
            if counts:
                n = counts.get(ei.queue_offset_key(m.topic, m.queue_id, m.queue_offset),
                               counts.get(ei.queue_key(m.topic, m.queue_id)))
                if n:
                    m.reconsume_times = n
        props.setdefault(PROPERTY_FIRST_POP_TIME, first_pop)
        m.topic = topic
    return res


async def pop(client: MQClientInstance, addr: str, broker_name: str, group: str, topic: str,
              invisible_time_ms: int, max_nums: int = 32, queue_id: int = -1, poll_ms: int = 0,
              expression: str = "*", order: bool = False, init_mode: int = 0, attempt_id: str = "",
              timeout: float | None = None, expression_type: str = "TAG") -> PopResult:
    """POP_MESSAGE (200050)."""
    return read_records(await pop_records(client, addr, group, topic, invisible_time_ms, max_nums, queue_id, poll_ms,
                                          expression, order, init_mode, attempt_id, timeout, expression_type),
                        broker_name, topic)


def _target(group: str, topic: str, handle: str) -> tuple[str, ei.ExtraInfo]:
    info = ei.parse(handle)
    return ei.real_topic(topic, group, info.retry), info


async def ack(client: MQClientInstance, addr: str, group: str, topic: str, handle: str) -> None:
    """ACK_MESSAGE (200051) of one popped message; ResponseError(NO_MESSAGE) when the broker has
    it in flight under no such handle (its invisible time passed, or it was acked)."""
    real, info = _target(group, topic, handle)
    r = await client.invoke(addr, RemotingCommand.request(codes.ACK_MESSAGE, {
        "consumerGroup": group, "topic": real, "queueId": info.queue_id, "extraInfo": handle,
        "offset": info.queue_offset}), 5)
    if r.code != codes.SUCCESS:
        raise ResponseError(r.code, r.remark, f"ack {real}@{info.queue_id}:{info.queue_offset} of {group}")


async def change_invisible_time(client: MQClientInstance, addr: str, group: str, topic: str, handle: str,
                                invisible_time_ms: int) -> str:
    """CHANGE_MESSAGE_INVISIBLETIME (200053): the message is invisible for `invisible_time_ms`
    from now; returns its new handle (the old one no longer acks it)."""
    real, info = _target(group, topic, handle)
    r = await client.invoke(addr, RemotingCommand.request(codes.CHANGE_MESSAGE_INVISIBLETIME, {
        "consumerGroup": group, "topic": real, "queueId": info.queue_id, "extraInfo": handle,
        "offset": info.queue_offset, "invisibleTime": invisible_time_ms}), 5)
    if r.code != codes.SUCCESS:
        raise ResponseError(r.code, r.remark, f"change invisible time of {real}@{info.queue_id}:{info.queue_offset}")
    return ei.build(info.queue_offset, r.get_int("popTime"), r.get_int("invisibleTime"), r.get_int("reviveQid"),
                    real, info.broker_name, info.queue_id, info.queue_offset)


class SimpleConsumer:
    """A pop consumer of one topic on one broker (RocketMQ 5's SimpleConsumer, without routes):
    receive, then ack or change the invisible time of each message by its handle."""

    def __init__(self, client: MQClientInstance, addr: str, group: str, topic: str, broker_name: str = "broker-a",
                 expression: str = "*"):
        self.client, self.addr, self.group, self.topic = client, addr, group, topic
        self.broker_name, self.expression = broker_name, expression

    async def receive(self, invisible_ms: int, max_nums: int = 32, poll_ms: int = 0, queue_id: int = -1,
                      order: bool = False, attempt_id: str = "") -> list[MessageExt]:
        r = await pop(self.client, self.addr, self.broker_name, self.group, self.topic, invisible_ms, max_nums,
                      queue_id, poll_ms, self.expression, order, attempt_id=attempt_id)
        return r.messages

    async def ack(self, msg_or_handle) -> None:
        h = msg_or_handle if isinstance(msg_or_handle, str) else handle_of(msg_or_handle)
        await ack(self.client, self.addr, self.group, self.topic, h)

    async def change_invisible_time(self, msg_or_handle, invisible_ms: int) -> str:
        h = msg_or_handle if isinstance(msg_or_handle, str) else handle_of(msg_or_handle)
        new = await change_invisible_time(self.client, self.addr, self.group, self.topic, h, invisible_ms)
        if not isinstance(msg_or_handle, str):
            msg_or_handle.properties[PROPERTY_POP_CK] = new
        return new
