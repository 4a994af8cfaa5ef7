"""The Settings the front answers a client's Telemetry settings with (RocketMQ's
GrpcClientSettingsManager): the client's own, merged with what the server appoints. A client
syncs its retry policy, batch size and polling time from the reply, and some clients fail on a
reply without them (the Node.js client 1.0.8 asserts a producer's backoff_policy; its
PushConsumer receives batches of receive_batch_size, 0 when unset, which is refused).
"""
from __future__ import annotations

from broker.proxy.config import ProxyConfig
# grpcClientConsumerLongPollingBatchSize: what a receive holds
from broker.proxy.consumer_activity import RECEIVE_BATCH_SIZE, RETRY_MAX_TIMES
from broker.proxy.protocol import definition_pb2 as pb

# ProxyConfig's grpcClientProducer* defaults: a failed send is tried again 10 ms later, up to 3 times
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS, PRODUCER_BACKOFF_MAX_MS, PRODUCER_BACKOFF_MULTIPLIER = 10, 1000, 2.0


def reply_settings(config: ProxyConfig, settings: pb.Settings, group_config: dict | None = None) -> pb.Settings:
    """`group_config`: a consumer group's SubscriptionGroupConfig on the broker (None: the defaults),
    whose consumeMessageOrderly makes it FIFO and whose retryMaxTimes + 1 is its max attempts."""
    out = pb.Settings()
    out.CopyFrom(settings)
    if settings.HasField("publishing"):
        backoff = out.backoff_policy
        backoff.Clear()
        backoff.max_attempts = PRODUCER_MAX_ATTEMPTS
        backoff.exponential_backoff.initial.FromMilliseconds(PRODUCER_BACKOFF_INITIAL_MS)
        backoff.exponential_backoff.max.FromMilliseconds(PRODUCER_BACKOFF_MAX_MS)
        backoff.exponential_backoff.multiplier = PRODUCER_BACKOFF_MULTIPLIER
        out.publishing.max_body_size = config.maxMessageSize if config.maxMessageSize > 0 else 1 << 30
        out.publishing.validate_message_type = True
    elif settings.HasField("subscription"):
        sub = out.subscription
        sub.receive_batch_size = RECEIVE_BATCH_SIZE
        sub.long_polling_timeout.FromMilliseconds(config.grpcClientConsumerMaxLongPollingTimeoutMillis)
        sub.fifo = bool(group_config and group_config.get("consumeMessageOrderly"))
        backoff = out.backoff_policy
        backoff.Clear()
        retry_max = group_config.get("retryMaxTimes") if group_config else None
        backoff.max_attempts = (RETRY_MAX_TIMES if retry_max is None else retry_max) + 1
        # a group's default retry policy (CUSTOMIZED): the delay levels, as a 4.x retry waits
        for ms in config.delay_levels_ms:
            backoff.customized_backoff.next.add().FromMilliseconds(ms)
    return out
