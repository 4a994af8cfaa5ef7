"""MessagingService (apache.rocketmq.v2): the gRPC servicer, dispatching each RPC to its activity
(RocketMQ's GrpcMessagingApplication). A refused request (ProxyError) is answered with its Code
and message in the response's Status; an unexpected failure is logged and answered
INTERNAL_SERVER_ERROR: a bad request never ends the process, nor leaves a call hanging."""
from __future__ import annotations

import asyncio
import functools
import logging

from broker.client.client_instance import MQClientInstance
from broker.proxy.client_settings import reply_settings
from broker.proxy.config import ProxyConfig
from broker.proxy.consumer_activity import ConsumerActivity, _group
from broker.proxy.grpc_acl import GrpcAccessValidator
from broker.proxy.grpc_channel_manager import GrpcChannelManager
from broker.proxy.grpc_metadata import client_id_of
from broker.proxy.offset_activity import OffsetActivity
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.protocol import service_pb2_grpc as rpc
from broker.proxy.route_activity import RouteActivity
from broker.proxy.send_activity import ProxyProducer, SendMessageActivity
from broker.proxy.status import Code, ProxyError, status
from broker.proxy.topic_types import TopicTypes
from broker.proxy.transaction_activity import EndTransactionActivity, TransactionCheckRelay

log = logging.getLogger("proxy")


def _answered(response_type):
    """The RPC's ProxyError (or any failure) as a response of `response_type` with that Status."""
    def wrap(fn):
        @functools.wraps(fn)
        async def call(self, request, context):
            try:
                if self.acl is not None:
                    self.acl.check(request, context)
                return await fn(self, request, context)
            except Exception as e:  # noqa: BLE001 - answered, logged, never a dead call
                return _failed(response_type, fn.__name__, e)
        return call
    return wrap


def _failed(response_type, name: str, e: Exception):
    """A response of `response_type` whose Status says why the RPC `name` failed (a ProxyError's
    code and message; anything else INTERNAL_SERVER_ERROR, logged)."""
    if isinstance(e, ProxyError):
        return response_type(status=status(e.code, e.message))
    log.exception("%s failed", name, exc_info=e)
    return response_type(status=status(Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}"))


class MessagingService(rpc.MessagingServiceServicer):
    def __init__(self, config: ProxyConfig, client: MQClientInstance, producer: ProxyProducer):
        self.config = config
        self.client = client
        self.channels = GrpcChannelManager()
        self.topic_types = TopicTypes(client, config.enableTopicMessageTypeCheck)
        self.routes = RouteActivity(client, self.topic_types)
        self.sender = SendMessageActivity(producer, config, self.topic_types)
        self.transactions = EndTransactionActivity(client)
        self.relay = TransactionCheckRelay(client, self.channels)
        self.consumers = ConsumerActivity(client, config)
        self.offsets = OffsetActivity(client, self.consumers._broker_addr, _group)
        self.acl = GrpcAccessValidator(config.aclFile) if config.enableACL else None
        if self.acl is None:
            # nothing to check first: ReceiveMessage is the activity's own stream, each response
            # handed to the call without two generators (ReceiveMessage's, _streamed's) between
            # (still an async generator function, as grpc.aio's server needs one to be)
            self.ReceiveMessage = self.consumers.receive_message

    # -- unary RPCs ----------------------------------------------------------------------------------
    @_answered(spb.QueryRouteResponse)
    async def QueryRoute(self, request, context):
        return await self.routes.query_route(request, context)

    @_answered(spb.QueryAssignmentResponse)
    async def QueryAssignment(self, request, context):
        return await self.routes.query_assignment(request, context)

    @_answered(spb.HeartbeatResponse)
    async def Heartbeat(self, request, context):
        if not client_id_of(context):
            raise ProxyError(Code.CLIENT_ID_REQUIRED, "x-mq-client-id metadata is missing")
        return spb.HeartbeatResponse(status=status())

    @_answered(spb.SendMessageResponse)
    async def SendMessage(self, request, context):
        return await self.sender.send_message(request, context)

    def send_message_now(self, request, context):
        """SendMessage's fast answer (GrpcServer.add_fast_unary, raw: `request` is the message's
        bytes): SendMessageActivity.send_bytes_now, for a front without ACL (a checked call takes
        the method's own path)."""
        return None if self.acl is not None else self.sender.send_bytes_now(request, context)

    @_answered(spb.EndTransactionResponse)
    async def EndTransaction(self, request, context):
        return await self.transactions.end_transaction(request, context)

    @_answered(spb.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request, context):
        self.channels.drop(client_id_of(context))
        self.consumers.renewals.drop_client(client_id_of(context))  # its unacked messages come back
        return spb.NotifyClientTerminationResponse(status=status())

    async def AckMessage(self, request, context):
        # _answered written out: one coroutine less between the call and the activity, per ack
        try:
            if self.acl is not None:
                self.acl.check(request, context)
            return await self.consumers.ack_message(request, context)
        except Exception as e:  # noqa: BLE001 - answered, logged, never a dead call
            return _failed(spb.AckMessageResponse, "AckMessage", e)

    def ack_message_now(self, request, context):
        """AckMessage's fast answer (GrpcServer.add_fast_unary, raw: `request` is its bytes):
        ConsumerActivity.ack_now, in local mode for a front without ACL (a checked call, or one it
        declines, takes the method's own path)."""
        return None if self.acl is not None else self.consumers.ack_now(request, context)

    @_answered(spb.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request, context):
        return await self.consumers.change_invisible_duration(request, context)

    @_answered(spb.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(self, request, context):
        return await self.consumers.forward_to_dlq(request, context)

    # -- the pull-style consumer (broker.proxy.offset_activity) ---------------------------------------
    @_answered(spb.UpdateOffsetResponse)
    async def UpdateOffset(self, request, context):
        return await self.offsets.update_offset(request, context)

    @_answered(spb.GetOffsetResponse)
    async def GetOffset(self, request, context):
        return await self.offsets.get_offset(request, context)

    @_answered(spb.QueryOffsetResponse)
    async def QueryOffset(self, request, context):
        return await self.offsets.query_offset(request, context)

    async def PullMessage(self, request, context):
        async for r in self._streamed(spb.PullMessageResponse, self.offsets.pull_message, request, context):
            yield r

    @_answered(spb.RecallMessageResponse)
    async def RecallMessage(self, request, context):
        return await self.sender.recall_message(request, context)

    # -- what this front does not serve: a Status saying so, at once ---------------------------------

    @_answered(spb.SyncLiteSubscriptionResponse)
    async def SyncLiteSubscription(self, request, context):
        raise ProxyError(Code.NOT_IMPLEMENTED, "lite topics are not implemented by this front")

    async def ReceiveMessage(self, request, context):
        async for r in self._streamed(spb.ReceiveMessageResponse, self.consumers.receive_message, request, context):
            yield r

    def receive_message_now(self, request, context):
        """ReceiveMessage's fast answer (GrpcServer.add_fast_stream): ConsumerActivity.receive_now,
        in local mode for a front without ACL (a checked call, or one it declines, takes the
        method's own path)."""
        return None if self.acl is not None else self.consumers.receive_now(request, context)

    def receive_bytes_now(self, request: bytes, context):
        """receive_message_now of the request's bytes (GrpcServer.add_fast_stream, raw):
        ConsumerActivity.receive_bytes_now, which keeps what it read of a request it saw before."""
        return None if self.acl is not None else self.consumers.receive_bytes_now(request, context)

    async def _streamed(self, response_type, activity, request, context):
        """A server-streaming RPC: the ACL check first (a refusal is the one response), then the
        activity's responses."""
        if self.acl is not None:
            try:
                self.acl.check(request, context)
            except ProxyError as e:
                yield response_type(status=status(e.code, e.message))
                return
        async for response in activity(request, context):
            yield response

    # -- Telemetry -----------------------------------------------------------------------------------
    async def Telemetry(self, request_iterator, context):
        client_id = client_id_of(context)
        if not client_id:
            yield spb.TelemetryCommand(status=status(Code.CLIENT_ID_REQUIRED, "x-mq-client-id metadata is missing"))
            return
        ch = self.channels.open(client_id)
        reader = asyncio.ensure_future(self._read_telemetry(request_iterator, ch, context))
        get = None
        try:
            while True:
                get = asyncio.ensure_future(ch.out.get())
                done, _ = await asyncio.wait((get, reader), return_when=asyncio.FIRST_COMPLETED)
                if get not in done:  # the client closed its side, or a refused command ended it
                    get.cancel()
                    while not ch.out.empty():  # what was written before the end (a refusal's status)
                        yield ch.out.get_nowait()
                    break
                command = get.result()
                if command is None:  # the front is stopping (GrpcChannelManager.end_all)
                    break
                yield command
        finally:
            # the stream's wait on its queue too: left pending, it and the client's channel (its
            # Settings, its queue) lived on until the collector found them ("Task was destroyed
            # but it is pending!") after a client that went away cancelled the call
            if get is not None:
                get.cancel()
            reader.cancel()
            self.channels.close(ch)

    async def _read_telemetry(self, request_iterator, ch, context) -> None:
        async for command in request_iterator:
            which = command.WhichOneof("command")
            if which != "settings":
                continue  # thread stack traces, verify results: nothing asked them of the client
            if self.acl is not None:
                try:
                    self.acl.check(command, context)
                except ProxyError as e:  # the stream ends with the refusal, as the Java proxy's
                    ch.write(spb.TelemetryCommand(status=status(e.code, e.message)))
                    return
            ch.settings = command.settings
            ch.write(spb.TelemetryCommand(status=status(), settings=reply_settings(
                self.config, command.settings, await self._group_config(command.settings))))
            if command.settings.client_type in (pb.PRODUCER,):
                await self._publishers_changed(ch.publishing_topics)

    async def _group_config(self, settings: pb.Settings) -> dict | None:
        """A consumer's group config on the broker of its first subscribed topic (FIFO, retries)."""
        sub = settings.subscription if settings.HasField("subscription") else None
        if sub is None or not sub.group.name or not sub.subscriptions:
            return None
        return await self.consumers.groups.of_topic(sub.group.name, sub.subscriptions[0].topic.name)

    async def _publishers_changed(self, topics: set[str]) -> None:
        """Become the broker's producer of each topic (its PGROUP), so that the broker's checks of
        its half messages reach this front; heartbeat at once so a check can come before the 30 s beat."""
        new = [t for t in topics if t not in self.client.producer_groups]
        if not new:
            return
        for topic in new:
            self.client.producer_groups.add(topic)
            self.client.transaction_checkers[topic] = self.relay
            try:
                await self.client.routes.get(topic)
            except Exception as e:  # noqa: BLE001 - the first send will fetch it again
                log.info("no route of %s yet (%s)", topic, e)
        await self.client.send_heartbeat()
