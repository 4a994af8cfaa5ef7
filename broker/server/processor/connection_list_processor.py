"""AdminBrokerProcessor's GET_CONSUMER_CONNECTION_LIST and GET_PRODUCER_CONNECTION_LIST (mqadmin
consumerConnection, producerConnection): who is in a group, from the heartbeats the broker holds;
and GET_CONSUMER_RUNNING_INFO (mqadmin consumerStatus), passed on to the consumer itself and its
answer passed back, as RocketMQ's Broker2Client.callClient."""
from __future__ import annotations

import asyncio

import msgspec

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import ConnectionClosed
from broker.remoting.headers import (GetConsumerListByGroupRequestHeader, GetConsumerRunningInfoRequestHeader,
                                     GetProducerConnectionListRequestHeader, decode)
from broker.remoting.refusals import BadRequest, Refusal


CALL_CLIENT_TIMEOUT = 10.0  # seconds, Broker2Client.callClient's


class ConsumerNotOnline(Refusal):
    response_code = codes.CONSUMER_NOT_ONLINE


def connection(client_id: str, conn) -> dict:
    """A client's Connection: its id, address, and the language and version its heartbeat carried."""
    attrs = getattr(conn, "attrs", {})
    return {"clientAddr": getattr(conn, "peer", ""), "clientId": client_id,
            "language": attrs.get("client_language", "JAVA"), "version": attrs.get("client_version", 0)}


class ConnectionListProcessor:
    def __init__(self, consumers, producers):
        self.consumers = consumers
        self.producers = producers

    def handlers(self) -> dict:
        return {codes.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
                codes.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
                codes.GET_CONSUMER_RUNNING_INFO: self.running_info}

    def consumer_connections(self, cmd: RemotingCommand, conn):
        group = decode(GetConsumerListByGroupRequestHeader, cmd.ext).consumerGroup
        info = self.consumers.groups.get(group)
        if info is None or not info.clients:
            raise ConsumerNotOnline(f"the consumer group[{group}] not online")
        body = {"connectionSet": [connection(cid, c) for cid, (c, _) in sorted(info.clients.items())],
                "consumeFromWhere": info.consume_from_where, "consumeType": info.consume_type,
                "messageModel": info.message_model, "subscriptionTable": dict(info.subscriptions)}
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode(body))

    def producer_connections(self, cmd: RemotingCommand, conn):
        group = decode(GetProducerConnectionListRequestHeader, cmd.ext).producerGroup
        clients = self.producers.groups.get(group) if self.producers is not None else None
        if not clients:
            raise BadRequest(f"the producer group[{group}] not exist")
        body = {"connectionSet": [connection(cid, c) for cid, (c, _) in sorted(clients.items())]}
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode(body))

    def running_info(self, cmd: RemotingCommand, conn):
        h = decode(GetConsumerRunningInfoRequestHeader, cmd.ext)
        info = self.consumers.groups.get(h.consumerGroup)
        member = info.clients.get(h.clientId) if info is not None else None
        client = member[0] if member is not None else None
        if client is None or getattr(client, "transport", None) is None:
            raise BadRequest(f"The Consumer <{h.consumerGroup}> <{h.clientId}> not online")

        async def ask():
            try:
                r = await client.request(RemotingCommand.request(cmd.code, dict(cmd.ext), cmd.body), CALL_CLIENT_TIMEOUT)
            except (asyncio.TimeoutError, ConnectionClosed, OSError) as e:
                return cmd.response(codes.SYSTEM_ERROR,
                                    remark=f"invoke consumer <{h.consumerGroup}> <{h.clientId}> Exception: {e}")
            return cmd.response(r.code, r.ext, body=r.body or b"", remark=r.remark)
        return ask()
