"""ReplyMessageProcessor: request-reply (RocketMQ 4.6+, `DefaultMQProducer.request`).

The requester sends an ordinary message carrying REPLY_TO_CLIENT (its client id), CORRELATION_ID
and TTL; the broker stores it with CLUSTER (SendMessageProcessor). The responder builds its reply
with `MessageUtil.createReplyMessage` (topic `<CLUSTER>_REPLY_TOPIC`, the same three properties)
and sends it with SEND_REPLY_MESSAGE (324) or SEND_REPLY_MESSAGE_V2 (325). This processor pushes it
to the requester with PUSH_REPLY_MESSAGE_TO_CLIENT (326) over the connection the requester's
heartbeats came on (the producer table, by client id), answers the responder with what the push
got, and stores the reply in the reply topic (RocketMQ's storeReplyMessageEnable, on by default).

The send kernel hands these codes to the processors (it takes SEND_MESSAGE and its V2 only).
"""
from __future__ import annotations

import asyncio
import logging
import time

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import ConnectionClosed
from broker.remoting.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2, decode
from broker.server.processor.send_processor import REPLY_EXT, born_host_of
from broker.store.message import decode_properties, encode_properties

log = logging.getLogger("reply")

REPLY_TO_CLIENT = "REPLY_TO_CLIENT"  # MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT
PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
PUSH_TIMEOUT = 10.0  # seconds: Broker2Client.callClient's invokeSync


class ReplyMessageProcessor:
    def __init__(self, store, holds, producers, send_processor, store_addr):
        self.store = store
        self.holds = holds
        self.producers = producers
        self.send = send_processor  # its route: msgCheck (topic, permission, queue)
        self.store_addr = store_addr  # () -> "ip:port", the broker's address as storeHost

    def handlers(self) -> dict:
        return {codes.SEND_REPLY_MESSAGE: self.reply, codes.SEND_REPLY_MESSAGE_V2: self.reply}

    def reply(self, cmd: RemotingCommand, conn):
        h = decode(SendMessageRequestHeader if cmd.code == codes.SEND_REPLY_MESSAGE else SendMessageRequestHeaderV2,
                   cmd.ext)
        # msgCheck as a send's: the topic, its permission, the queue (a random one for -1)
        topic, queue_id = self.send.route(h)
        # a copy: the request's body may be a view of the connection's receive buffer, which the
        # next read reuses while the push is awaited
        return self._reply(cmd, conn, h, topic, queue_id, bytes(cmd.body or b""))

    async def _reply(self, cmd: RemotingCommand, conn, h, topic: str, queue_id: int, body: bytes) -> RemotingCommand:
        ok, remark = await self._push(conn, h, body)
        # stored as sent (the reply's properties, without the broker's CLUSTER or PUSH_REPLY_TIME),
        # pushed or not, as RocketMQ's storeReplyMessageEnable (on by default) does
        result, _ = self.store.append(topic, queue_id, body, h.properties.encode(), flag=h.flag,
                                      sys_flag=h.sysFlag, born_timestamp=h.bornTimestamp,
                                      born_host=born_host_of(conn), reconsume_times=h.reconsumeTimes)
        self.holds.notify(topic, queue_id, result.end_offset)
        ext = {"msgId": result.msg_id, "queueId": queue_id, "queueOffset": result.queue_offset, **REPLY_EXT}
        return cmd.response(codes.SUCCESS if ok else codes.SYSTEM_ERROR, ext, remark=remark)

    async def _push(self, conn, h, body: bytes) -> tuple[bool, str | None]:
        """PUSH_REPLY_MESSAGE_TO_CLIENT to the requester: (pushed, the remark when not)."""
        props = decode_properties(h.properties.encode())
        client_id = props.get(REPLY_TO_CLIENT)
        if client_id is None:
            return False, f"reply message properties[{REPLY_TO_CLIENT}] is null"
        channel = self.producers.find_channel(client_id)
        if channel is None:
            return False, f"push reply message fail, channel of <{client_id}> not found."
        props[PUSH_REPLY_TIME] = str(int(time.time() * 1000))
        ext = {"producerGroup": h.producerGroup, "topic": h.topic, "defaultTopic": h.defaultTopic,
               "defaultTopicQueueNums": h.defaultTopicQueueNums, "queueId": h.queueId, "sysFlag": h.sysFlag,
               "bornTimestamp": h.bornTimestamp, "flag": h.flag,
               "properties": encode_properties(props).decode(), "reconsumeTimes": h.reconsumeTimes,
               "unitMode": str(h.unitMode).lower(), "bornHost": conn.peer, "storeHost": self.store_addr(),
               "storeTimestamp": int(time.time() * 1000)}
        push = RemotingCommand.request(codes.PUSH_REPLY_MESSAGE_TO_CLIENT, {k: str(v) for k, v in ext.items()}, body)
        try:
            r = await channel.request(push, PUSH_TIMEOUT)
        except (asyncio.TimeoutError, ConnectionClosed, OSError) as e:
            log.warning("push reply message to <%s> fail: %s", client_id, e)
            return False, f"push reply message to {client_id}fail."
        if r.code != codes.SUCCESS:
            log.warning("push reply message to <%s> return fail, response remark: %s", client_id, r.remark)
            return False, f"push reply message to {client_id}fail."
        return True, None
