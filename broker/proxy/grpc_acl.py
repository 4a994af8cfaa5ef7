"""ACL on the gRPC front: 5.x clients checked against the same plain_acl.yml the brokers read.

A 5.x client signs every call in its metadata (the clients' Signature.metadata):
    authorization: MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time, Signature=<hex>
    x-mq-date-time: 20261126T201500Z
where Signature = hex(HMAC-SHA1(secretKey, x-mq-date-time)). The account, the white lists and the
permissions are the remoting ACL's (broker.server.plain_access_validator.PlainAccessValidator), and what each RPC
touches is what RocketMQ 5.1's PlainAccessResource.parse(GeneratedMessageV3, ...) names: a send
needs PUB on its topic, a receive/ack/forward SUB on the topic and the group, a route ANY.
A refused call is answered with UNAUTHORIZED (who are you) or FORBIDDEN (not allowed) in its
Status, before anything reaches a broker.
"""
from __future__ import annotations

import hmac
import re
import time
from hashlib import sha1

from broker.proxy.grpc_metadata import peer_host
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.status import Code, ProxyError
from broker.server.plain_access_validator import ANY, PUB, SUB, AclError, PlainAccessValidator
from broker.common.topic_validator import RETRY_PREFIX

_AUTHORIZATION = re.compile(r"\s*MQv2-HMAC-SHA1\s+Credential=([^,\s]+),\s*SignedHeaders=([^,\s]+),\s*Signature=([0-9a-fA-F]+)\s*")
_RELOAD_EVERY = 1.0  # s between looks at plain_acl.yml's mtime (an edit applies without a restart)


def _group(resource: pb.Resource) -> str:
    return RETRY_PREFIX + resource.name


def resources(request) -> dict[str, int]:
    """What a request touches and the permission it needs (topics by name, groups as %RETRY%<group>)."""
    need: dict[str, int] = {}
    if isinstance(request, spb.SendMessageRequest):
        topics = {m.topic.name for m in request.messages}
        if len(topics) > 1:
            raise ProxyError(Code.MESSAGE_CORRUPTED, "the messages of one SendMessageRequest name different topics")
        need.update((t, PUB) for t in topics)
    elif isinstance(request, spb.EndTransactionRequest):
        need[request.topic.name] = PUB
    elif isinstance(request, spb.QueryRouteRequest):
        need[request.topic.name] = ANY
    elif isinstance(request, spb.HeartbeatRequest):
        if request.client_type in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER):
            need[_group(request.group)] = SUB
    elif isinstance(request, spb.ReceiveMessageRequest):
        need[_group(request.group)] = SUB
        need[request.message_queue.topic.name] = SUB
    elif isinstance(request, (spb.AckMessageRequest, spb.ForwardMessageToDeadLetterQueueRequest,
                              spb.ChangeInvisibleDurationRequest, spb.QueryAssignmentRequest)):
        need[_group(request.group)] = SUB
        need[request.topic.name] = SUB
    elif isinstance(request, (spb.PullMessageRequest, spb.UpdateOffsetRequest, spb.GetOffsetRequest)):
        need[_group(request.group)] = SUB
        need[request.message_queue.topic.name] = SUB
    elif isinstance(request, spb.QueryOffsetRequest):
        need[request.message_queue.topic.name] = SUB
    elif isinstance(request, spb.NotifyClientTerminationRequest):
        if request.group.name:
            need[_group(request.group)] = SUB
    elif isinstance(request, spb.TelemetryCommand) and request.WhichOneof("command") == "settings":
        settings = request.settings
        if settings.HasField("publishing"):
            need.update((t.name, PUB) for t in settings.publishing.topics)
        if settings.HasField("subscription"):
            need[_group(settings.subscription.group)] = SUB
            need.update((e.topic.name, SUB) for e in settings.subscription.subscriptions)
    return need


class GrpcAccessValidator:
    def __init__(self, acl_file: str):
        self.plain = PlainAccessValidator(acl_file)  # StoreConfigError naming the file when unreadable
        self._looked = time.monotonic()

    def check(self, request, context) -> None:
        """Raise ProxyError(UNAUTHORIZED or FORBIDDEN) when `request` may not run."""
        now = time.monotonic()
        if now - self._looked >= _RELOAD_EVERY:
            self._looked = now
            self.plain.reload_if_changed()
        meta = dict(context.invocation_metadata() or ())
        m = _AUTHORIZATION.fullmatch(meta.get("authorization", ""))
        access_key, signature = (m.group(1), m.group(3).lower()) if m else ("", "")
        date_time = meta.get("x-mq-date-time", "")
        try:
            acc = self.plain.authenticate(access_key, peer_host(context), lambda a: m is not None and hmac.compare_digest(
                signature, hmac.new(a.secret_key.encode(), date_time.encode(), sha1).hexdigest()))
        except AclError as e:
            raise ProxyError(Code.UNAUTHORIZED, str(e)) from None
        if acc is None:
            return
        try:
            self.plain.authorize(acc, resources(request))
        except AclError as e:
            raise ProxyError(Code.FORBIDDEN, str(e)) from None
