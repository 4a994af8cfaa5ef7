"""The consumer RPCs (ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue) need the broker's pop consumption (POP_MESSAGE 200050,
ACK_MESSAGE 200051, CHANGE_MESSAGE_INVISIBLETIME 200053), which this broker does not serve yet:
each answers NOT_IMPLEMENTED with a message saying so, at once, never a hang."""
from __future__ import annotations

from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.status import Code, status

POP_MISSING = "{} is not implemented yet: the broker does not serve pop consumption (POP_MESSAGE) yet"


def not_implemented(rpc: str):
    return status(Code.NOT_IMPLEMENTED, POP_MISSING.format(rpc))


class ConsumerActivity:
    async def receive_message(self, request: spb.ReceiveMessageRequest, context):
        yield spb.ReceiveMessageResponse(status=not_implemented("ReceiveMessage"))

    async def ack_message(self, request, context) -> spb.AckMessageResponse:
        return spb.AckMessageResponse(status=not_implemented("AckMessage"))

    async def change_invisible_duration(self, request, context) -> spb.ChangeInvisibleDurationResponse:
        return spb.ChangeInvisibleDurationResponse(status=not_implemented("ChangeInvisibleDuration"))

    async def forward_to_dlq(self, request, context) -> spb.ForwardMessageToDeadLetterQueueResponse:
        return spb.ForwardMessageToDeadLetterQueueResponse(status=not_implemented("ForwardMessageToDeadLetterQueue"))
