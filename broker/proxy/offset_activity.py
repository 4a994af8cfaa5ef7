"""The pull-style consumer RPCs of apache.rocketmq.v2 (the 5.x PullConsumer's, RocketMQ 5.3's
proxy): PullMessage, UpdateOffset, GetOffset and QueryOffset, each one remoting request to the
master of the broker the request's queue names:
- PullMessage: PULL_MESSAGE (11) with the tag expression and the long-polling timeout, streamed as
  the Status, each message, then the offset to pull from next; a queue with nothing new is
  MESSAGE_NOT_FOUND, an offset outside the queue ILLEGAL_OFFSET (each followed by next_offset);
- UpdateOffset / GetOffset: UPDATE_CONSUMER_OFFSET (15) / QUERY_CONSUMER_OFFSET (14), a group
  that never committed on the queue answered OFFSET_NOT_FOUND;
- QueryOffset: the queue's first offset (GET_MIN_OFFSET 31), its end (GET_MAX_OFFSET 30) or the
  first offset stored at or after a time (SEARCH_OFFSET_BY_TIMESTAMP 29).
"""
from __future__ import annotations

from broker.client import api
from broker.client.client_instance import MQClientInstance
from broker.client.errors import ResponseError
from broker.client.route import MessageQueue
from broker.proxy.converter import to_proto
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.route_activity import validate_topic
from broker.proxy.status import Code, ProxyError, from_broker_refusal, from_client_error, status
from broker.remoting import codes

PULL_BATCH_MAX = 1024  # a pull's maxMsgNums cap at the broker (PullMessageProcessor)


def _ms(duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000


class OffsetActivity:
    def __init__(self, client: MQClientInstance, broker_addr, group_of):
        self.client = client
        self._broker_addr = broker_addr  # (topic, broker name) -> its master's address
        self._group = group_of  # a Resource -> a checked group name

    async def _queue(self, mq: pb.MessageQueue) -> tuple[str, MessageQueue]:
        topic = validate_topic(mq.topic)
        if mq.id < 0:
            raise ProxyError(Code.BAD_REQUEST, f"queue id {mq.id} of {topic} is negative")
        if not mq.broker.name:
            raise ProxyError(Code.BAD_REQUEST, f"the queue of {topic} names no broker")
        addr = await self._broker_addr(topic, mq.broker.name)
        return addr, MessageQueue(topic, mq.broker.name, mq.id)

    async def update_offset(self, request: spb.UpdateOffsetRequest, context) -> spb.UpdateOffsetResponse:
        group = self._group(request.group)
        if request.offset < 0:
            raise ProxyError(Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        addr, mq = await self._queue(request.message_queue)
        await self._call(api.update_consumer_offset(self.client, addr, group, mq, request.offset))
        return spb.UpdateOffsetResponse(status=status())

    async def get_offset(self, request: spb.GetOffsetRequest, context) -> spb.GetOffsetResponse:
        group = self._group(request.group)
        addr, mq = await self._queue(request.message_queue)
        offset = await self._call(api.query_consumer_offset(self.client, addr, group, mq))
        if offset < 0:
            raise ProxyError(Code.OFFSET_NOT_FOUND, f"group {group} has committed no offset on {mq}")
        return spb.GetOffsetResponse(status=status(), offset=offset)

    async def query_offset(self, request: spb.QueryOffsetRequest, context) -> spb.QueryOffsetResponse:
        addr, mq = await self._queue(request.message_queue)
        policy = request.query_offset_policy
        if policy == pb.BEGINNING:
            offset = await self._call(api.queue_offset(self.client, addr, mq, codes.GET_MIN_OFFSET))
        elif policy == pb.END:
            offset = await self._call(api.queue_offset(self.client, addr, mq, codes.GET_MAX_OFFSET))
        elif policy == pb.TIMESTAMP:
            if not request.HasField("timestamp"):
                raise ProxyError(Code.BAD_REQUEST, "query_offset_policy TIMESTAMP needs a timestamp")
            offset = await self._call(api.search_offset(self.client, addr, mq, request.timestamp.ToMilliseconds()))
        else:
            raise ProxyError(Code.BAD_REQUEST, f"unknown query_offset_policy {policy}")
        return spb.QueryOffsetResponse(status=status(), offset=offset)

    async def pull_message(self, request: spb.PullMessageRequest, context):
        try:
            group = self._group(request.group)
            if request.filter_expression.type == pb.SQL:
                raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, "PullMessage filters by tag here; an SQL92 "
                                                                 "expression is not served through this RPC")
            if not 0 < request.batch_size <= PULL_BATCH_MAX:
                raise ProxyError(Code.BAD_REQUEST, f"batch size {request.batch_size} must be within 1 and "
                                                   f"{PULL_BATCH_MAX}")
            if request.offset < 0:
                raise ProxyError(Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            addr, mq = await self._queue(request.message_queue)
            suspend = _ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else 0
            r = await api.pull(self.client, addr, group, mq, request.offset, request.batch_size,
                               request.filter_expression.expression or "*", suspend_ms=max(suspend, 0))
        except ProxyError as e:
            yield spb.PullMessageResponse(status=status(e.code, e.message))
            return
        except ResponseError as e:
            yield spb.PullMessageResponse(status=status(*from_broker_refusal(e)))
            return
        except Exception as e:  # noqa: BLE001 - answered, never a dead call
            yield spb.PullMessageResponse(status=status(*from_client_error(e)))
            return
        if r.status == api.OFFSET_ILLEGAL:
            yield spb.PullMessageResponse(status=status(Code.ILLEGAL_OFFSET, f"offset {request.offset} is outside "
                                                        f"{mq} [{r.min_offset}, {r.max_offset}]"))
        elif not r.messages:
            yield spb.PullMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield spb.PullMessageResponse(status=status())
            for m in r.messages:
                yield spb.PullMessageResponse(message=to_proto(m, mq.topic))
        yield spb.PullMessageResponse(next_offset=r.next_begin_offset)

    @staticmethod
    async def _call(coro):
        try:
            return await coro
        except ResponseError as e:
            raise ProxyError(*from_broker_refusal(e)) from None
