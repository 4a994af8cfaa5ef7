"""EndTransaction, and the broker's CHECK_TRANSACTION_STATE relayed to a 5.x producer.

The front is the broker's producer for every topic a connected 5.x client publishes (the topic is
the producer group, PGROUP, as in RocketMQ's proxy): the broker's check of a half message reaches
the front's remoting connection, and TransactionCheckRelay writes it to a publisher's Telemetry
stream as a recover_orphaned_transaction_command; the client's checker answers with an
EndTransaction (source SERVER_CHECK), which ends the half message on the broker that holds it."""
from __future__ import annotations

import logging

from broker.client.client_instance import MQClientInstance
from broker.client.message import MessageExt
from broker.client.transaction_producer import END_TYPE, LocalTransactionState
from broker.proxy.converter import to_proto
from broker.proxy.grpc_channel_manager import GrpcChannelManager
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.route_activity import validate_topic
from broker.proxy.status import Code, ProxyError, from_client_error, status
from broker.proxy.transaction_id import TransactionId
from broker.remoting import codes
from broker.remoting.command import RemotingCommand

log = logging.getLogger("proxy")

_RESOLUTION = {pb.COMMIT: LocalTransactionState.COMMIT_MESSAGE, pb.ROLLBACK: LocalTransactionState.ROLLBACK_MESSAGE}


class TransactionCheckRelay:
    """Stands in MQClientInstance.transaction_checkers for a topic published by 5.x clients."""

    def __init__(self, client: MQClientInstance, channels: GrpcChannelManager):
        self.client = client
        self.channels = channels

    def check(self, cmd: RemotingCommand, msg: MessageExt, conn) -> None:
        topic = msg.properties.get("PGROUP") or msg.topic
        ch = self.channels.publisher_of(topic)
        if ch is None:
            log.info("CHECK_TRANSACTION_STATE for %s (topic %s): no 5.x producer of it is connected; the broker "
                     "asks again at its next pass", msg.uniq_key or msg.msg_id, topic)
            return None
        addr = next((a for a, c in self.client.conns.items() if c is conn), conn.peer)
        tid = TransactionId(addr, int(cmd.get_str("commitLogOffset", "0") or 0),
                            int(cmd.get_str("tranStateTableOffset", "0") or 0))
        ch.write(spb.TelemetryCommand(recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
            message=to_proto(msg), transaction_id=str(tid))))
        return None


class EndTransactionActivity:
    def __init__(self, client: MQClientInstance):
        self.client = client

    async def end_transaction(self, request: spb.EndTransactionRequest, context) -> spb.EndTransactionResponse:
        topic = validate_topic(request.topic)
        tid = TransactionId.parse(request.transaction_id)
        if tid.broker_addr not in self.client.routes.known_broker_addrs():
            await self.client.routes.get(topic)  # the route names the brokers this front may end on
            if tid.broker_addr not in self.client.routes.known_broker_addrs():
                raise ProxyError(Code.INVALID_TRANSACTION_ID, f"transaction id names {tid.broker_addr}, "
                                                              f"no broker of topic {topic}")
        state = _RESOLUTION.get(request.resolution)
        if state is None:  # UNSPECIFIED: left to the broker's check, as an UNKNOW end is
            return spb.EndTransactionResponse(status=status())
        ext = {"producerGroup": topic, "tranStateTableOffset": str(tid.tran_state_table_offset),
               "commitLogOffset": str(tid.commit_log_offset), "commitOrRollback": str(END_TYPE[state]),
               "fromTransactionCheck": str(request.source == pb.SOURCE_SERVER_CHECK).lower(),
               "msgId": request.message_id, "transactionId": request.message_id}
        try:
            r = await self.client.invoke(tid.broker_addr, RemotingCommand.request(codes.END_TRANSACTION, ext), 5)
        except Exception as e:  # noqa: BLE001
            return spb.EndTransactionResponse(status=status(*from_client_error(e)))
        if r.code != codes.SUCCESS:
            code = Code.INVALID_TRANSACTION_ID if r.code == codes.SYSTEM_ERROR else Code.INTERNAL_SERVER_ERROR
            return spb.EndTransactionResponse(status=status(code, r.remark or f"END_TRANSACTION answered {r.code}"))
        return spb.EndTransactionResponse(status=status())
