"""The broker requests a consumer or admin makes, one function each (RocketMQ's MQClientAPIImpl):
pull, consumer offsets, queue offsets, group members and send-back. Each raises BrokerUnreachable
for a transport failure and ResponseError for an unexpected code."""
from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from broker.client.client_instance import MQClientInstance
from broker.client.errors import ClientError, ResponseError
from broker.client.message import MessageExt, decode_messages
from broker.client.route import MessageQueue
from broker.kernels.client_codec import Reply, render_pull
from broker.remoting import codes
from broker.remoting.command import RemotingCommand

# PullSysFlag bits
FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 1, 2, 4

FOUND, NO_NEW_MSG, NO_MATCHED_MSG, OFFSET_ILLEGAL = "FOUND", "NO_NEW_MSG", "NO_MATCHED_MSG", "OFFSET_ILLEGAL"
_PULL_STATUS = {codes.SUCCESS: FOUND, codes.PULL_NOT_FOUND: NO_NEW_MSG,
                codes.PULL_RETRY_IMMEDIATELY: NO_MATCHED_MSG, codes.PULL_OFFSET_MOVED: OFFSET_ILLEGAL}


@dataclass
class PullResult:
    status: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)  # views of the pulled bytes (MessageExt)
    body: bytes = b""  # the FOUND body undecoded, when pulled with decode=False


def parse_tags(sub_expression: str | None) -> set[str] | None:
    """"tagA || tagB" → {"tagA", "tagB"}; "*" or empty → None (everything)."""
    if not sub_expression or sub_expression.strip() in ("*", ""):
        return None
    return {t.strip() for t in sub_expression.split("||") if t.strip()}


async def pull(client: MQClientInstance, addr: str, group: str, mq: MessageQueue, offset: int, max_nums: int = 32,
               sub_expression: str = "*", suspend_ms: int = 0, commit_offset: int = -1,
               timeout: float | None = None, decode: bool = True) -> PullResult:
    """PULL_MESSAGE (11). The broker filters by tag hash; the tags themselves are compared here,
    as the Java client does (two tags may share a hash). decode=False leaves the stored records
    undecoded in `body` (and the tag check to the caller), for callers that decode in bulk."""
    sys_flag = FLAG_SUBSCRIPTION | (FLAG_SUSPEND if suspend_ms > 0 else 0) | (FLAG_COMMIT_OFFSET if commit_offset >= 0 else 0)
    if timeout is None:  # a held pull must outlive the broker's hold
        timeout = suspend_ms / 1000 + 15 if suspend_ms else 10
    # rendered and answered by the client kernel: the answer is a Reply (a RemotingCommand only
    # for a frame the kernel hands back), the records stay one bytes object until decoded
    r = await client.invoke_fast(addr, codes.PULL_MESSAGE, timeout, render_pull, group, mq.topic, mq.queue_id, offset,
                                 max_nums, sys_flag, max(commit_offset, 0), suspend_ms, sub_expression or "*", 0)
    if type(r) is Reply:
        nxt, lo, hi = r.next_begin_offset, r.min_offset, r.max_offset
        nxt, lo, hi = offset if nxt is None else nxt, 0 if lo is None else lo, 0 if hi is None else hi
    else:
        nxt, lo, hi = r.get_int("nextBeginOffset", offset), r.get_int("minOffset", 0), r.get_int("maxOffset", 0)
    status = _PULL_STATUS.get(r.code)
    if status is None:
        raise ResponseError(r.code, r.remark, f"pull {mq} at {offset} from {addr}")
    res = PullResult(status, nxt, lo, hi)
    if status == FOUND and not decode:
        res.body = bytes(r.body)
    elif status == FOUND:
        tags = parse_tags(sub_expression)
        msgs = decode_messages(r.body, mq.broker_name)
        res.messages = msgs if tags is None else [m for m in msgs if m.tags in tags]
    return res


async def query_consumer_offset(client: MQClientInstance, addr: str, group: str, mq: MessageQueue) -> int:
    """QUERY_CONSUMER_OFFSET (14): the committed offset, -1 when none (QUERY_NOT_FOUND)."""
    r = await client.invoke(addr, RemotingCommand.request(
        codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id}), 5)
    if r.code == codes.QUERY_NOT_FOUND:
        return -1
    if r.code != codes.SUCCESS:
        raise ResponseError(r.code, r.remark, f"query offset of {group} on {mq}")
    return r.get_int("offset", -1)


async def update_consumer_offset(client: MQClientInstance, addr: str, group: str, mq: MessageQueue,
                                 offset: int) -> None:
    r = await client.invoke(addr, RemotingCommand.request(
        codes.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id, "commitOffset": offset}), 5)
    if r.code != codes.SUCCESS:
        raise ResponseError(r.code, r.remark, f"update offset of {group} on {mq}")


async def queue_offset(client: MQClientInstance, addr: str, mq: MessageQueue, code: int = codes.GET_MAX_OFFSET) -> int:
    """GET_MAX_OFFSET (30) or GET_MIN_OFFSET (31) of one queue."""
    r = await client.invoke(addr, RemotingCommand.request(code, {"topic": mq.topic, "queueId": mq.queue_id}), 5)
    if r.code != codes.SUCCESS:
        raise ResponseError(r.code, r.remark, f"offset (code {code}) of {mq}")
    return r.get_int("offset")


async def search_offset(client: MQClientInstance, addr: str, mq: MessageQueue, timestamp_ms: int) -> int:
    """SEARCH_OFFSET_BY_TIMESTAMP (29): the first offset of the queue stored at or after `timestamp_ms`
    (the queue's max offset when none is)."""
    r = await client.invoke(addr, RemotingCommand.request(
        codes.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": mq.topic, "queueId": mq.queue_id, "timestamp": timestamp_ms}), 5)
    if r.code != codes.SUCCESS:
        raise ResponseError(r.code, r.remark, f"search offset of {mq} at {timestamp_ms}")
    return r.get_int("offset")


async def consumer_ids(client: MQClientInstance, addr: str, group: str) -> list[str]:
    """GET_CONSUMER_LIST_BY_GROUP (38); a group the broker has no member of → []."""
    r = await client.invoke(addr, RemotingCommand.request(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}), 5)
    if r.code != codes.SUCCESS:
        return []
    return list(msgspec.json.decode(r.body).get("consumerIdList") or [])


async def send_back(client: MQClientInstance, addr: str, group: str, msg: MessageExt, max_reconsume_times: int,
                    delay_level: int = 0) -> None:
    """CONSUMER_SEND_MSG_BACK (36): the broker re-stores the message for redelivery through
    %RETRY%<group> (delay level 0: the broker picks 3 + reconsumeTimes)."""
    origin = msg.properties.get("ORIGIN_MESSAGE_ID") or msg.msg_id
    r = await client.invoke(addr, RemotingCommand.request(codes.CONSUMER_SEND_MSG_BACK, {
        "offset": msg.commit_log_offset, "group": group, "delayLevel": delay_level, "originMsgId": origin,
        "originTopic": msg.topic, "unitMode": False, "maxReconsumeTimes": max_reconsume_times}), 5)
    if r.code != codes.SUCCESS:
        raise ResponseError(r.code, r.remark, f"send back {msg.msg_id} of {group}")


async def view_message(client: MQClientInstance, addr: str, offset: int) -> MessageExt:
    """VIEW_MESSAGE_BY_ID (33): the message stored at a commit log offset of the broker at `addr`."""
    r = await client.invoke(addr, RemotingCommand.request(codes.VIEW_MESSAGE_BY_ID, {"offset": offset}), 10)
    if r.code != codes.SUCCESS:
        raise ResponseError(r.code, r.remark, f"view message at {offset} on {addr}")
    msgs = decode_messages(r.body)
    if len(msgs) != 1:
        raise ClientError(f"view message at {offset} on {addr}: the answer holds {len(msgs)} messages")
    return msgs[0]


def _mq_set(mqs) -> list[dict]:
    return [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id} for mq in sorted(mqs)]


async def lock_batch_mq(client: MQClientInstance, addr: str, group: str, mqs, timeout: float = 1.0) -> set[MessageQueue]:
    """LOCK_BATCH_MQ (41): lock queues of `group` to this client; the queues the broker granted
    (those another live client holds are left out)."""
    body = msgspec.json.encode({"consumerGroup": group, "clientId": client.client_id, "mqSet": _mq_set(mqs)})
    r = await client.invoke(addr, RemotingCommand.request(codes.LOCK_BATCH_MQ, {}, body), timeout)
    if r.code != codes.SUCCESS:
        raise ResponseError(r.code, r.remark, f"lock queues of {group} on {addr}")
    granted = (msgspec.json.decode(r.body).get("lockOKMQSet") or []) if r.body else []
    return {MessageQueue(m["topic"], m["brokerName"], int(m["queueId"])) for m in granted}


async def unlock_batch_mq(client: MQClientInstance, addr: str, group: str, mqs, timeout: float = 1.0) -> None:
    """UNLOCK_BATCH_MQ (42): release queues this client locked, so another member takes them now
    rather than after the broker's lock expiry."""
    body = msgspec.json.encode({"consumerGroup": group, "clientId": client.client_id, "mqSet": _mq_set(mqs)})
    r = await client.invoke(addr, RemotingCommand.request(codes.UNLOCK_BATCH_MQ, {}, body), timeout)
    if r.code != codes.SUCCESS:
        raise ResponseError(r.code, r.remark, f"unlock queues of {group} on {addr}")
