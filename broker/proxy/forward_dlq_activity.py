"""ForwardMessageToDLQActivity: a 5.x consumer gives up on a message (a FIFO PushConsumer whose
listener failed it max_delivery_attempts times) and the front puts it in %DLQ%<group>, as the Java
proxy does: CONSUMER_SEND_MSG_BACK (36) of the handle's commit log offset with delayLevel -1 (the
broker stores it straight into %DLQ%<group>), then an ack of the receipt handle. The answer is the
send-back's, mapped as ResponseBuilder.buildStatus maps it.

Before the send-back the front checks what the Java proxy takes on trust, so that a forged or
expired handle puts nothing in the DLQ and acks nothing (INVALID_RECEIPT_HANDLE):
- the commit log offset names the handle's own message (VIEW_MESSAGE_BY_ID: topic, queue, offset);
- the message is still in flight under that handle: its invisible time is changed to HOLD_MS
  (the broker answers NO_MESSAGE for a handle acked or past its time). That also keeps the message
  from coming back while it is sent back; if the send-back fails it comes back after HOLD_MS, so
  nothing is lost, and the ack uses the handle the change returned.
"""
from __future__ import annotations

import logging

from broker.client import api
from broker.client import pop as _pop
from broker.client.client_instance import MQClientInstance
from broker.client.errors import ResponseError
from broker.proxy import receipt_handle
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.status import Code, ProxyError, status
from broker.remoting import codes
from broker.common import extra_info as _extra_info

log = logging.getLogger("proxy")

HOLD_MS = 10_000  # minInvisibleTimeMillsForRecv: long enough for one send-back and one ack


class ForwardMessageToDLQActivity:
    def __init__(self, client: MQClientInstance, broker_addr):
        self.client = client
        self.broker_addr = broker_addr  # async (topic, broker name) → master address, ProxyError if none

    async def forward(self, group: str, topic: str, request) -> spb.ForwardMessageToDeadLetterQueueResponse:
        handle = request.receipt_handle
        info = receipt_handle.decode(handle)
        offset = receipt_handle.commit_log_offset(handle)
        real = _extra_info.real_topic(topic, group, info.retry)
        addr = await self.broker_addr(topic, info.broker_name)
        try:
            msg = await api.view_message(self.client, addr, offset)
        except ResponseError as e:
            raise ProxyError(Code.INVALID_RECEIPT_HANDLE, f"the receipt handle's commit log offset {offset} names no "
                                                          f"message: {e}") from None
        if (msg.topic, msg.queue_id, msg.queue_offset) != (real, info.queue_id, info.queue_offset):
            raise ProxyError(Code.INVALID_RECEIPT_HANDLE, f"the receipt handle names {real}@{info.queue_id}:"
                                                          f"{info.queue_offset}, its commit log offset {offset} "
                                                          f"{msg.topic}@{msg.queue_id}:{msg.queue_offset}")
        try:
            held = await _pop.change_invisible_time(self.client, addr, group, topic, handle, HOLD_MS)
        except ResponseError as e:
            if e.code == codes.NO_MESSAGE:
                raise ProxyError(Code.INVALID_RECEIPT_HANDLE, f"the receipt handle is expired or acked: {e}") from None
            raise
        # the stored copy's own topic and ORIGIN_MESSAGE_ID go with it, as a 4.x consumer's send-back
        await api.send_back(self.client, addr, group, msg, max_reconsume_times=0, delay_level=-1)
        try:
            await _pop.ack(self.client, addr, group, topic, held)
        except Exception as e:  # noqa: BLE001 - in the DLQ already: it comes back once more, after HOLD_MS
            log.warning("%s of %s is in %%DLQ%%%s but its ack failed: %s", request.message_id, topic, group, e)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status())
