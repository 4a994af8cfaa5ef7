"""RocketMQ's TopicValidator and MixAll topic names: what a topic may be called, which topics are the
broker's own, and the permission bits. Shared by the broker, the gRPC front and the client library."""
from __future__ import annotations

import re

from broker.kernels.codec import MAX_TOPIC_LEN
from broker.remoting.refusals import BadRequest

# TopicValidator's system topics of transactional messages (broker.server.transaction)
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_TOPIC = "TBW102"
PERM_READ, PERM_WRITE, PERM_INHERIT = 4, 2, 1
# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET, and its SYSTEM_TOPIC_PREFIX (the pop revive log,
# rmq_sys_REVIVE_LOG_<cluster>): the broker's own topics, which it writes itself and no client sends to
NOT_ALLOWED_SEND_TOPICS = frozenset((SCHEDULE_TOPIC, HALF_TOPIC, OP_TOPIC, CHECK_MAX_TIME_TOPIC))
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"  # MixAll: replies of request-reply go to <brokerClusterName>_REPLY_TOPIC


def reply_topic(cluster: str) -> str:
    """MixAll.getReplyTopic."""
    return f"{cluster}_{REPLY_TOPIC_POSTFIX}"


def not_sendable(topic: str) -> bool:
    return topic in NOT_ALLOWED_SEND_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


class TopicError(BadRequest):
    """A name that cannot be a topic (answered SYSTEM_ERROR naming it)."""


_VALID_TOPIC = re.compile(r"[%|a-zA-Z0-9_-]{1," + str(MAX_TOPIC_LEN) + "}")  # ASCII only: characters are bytes


def check_topic_name(topic: str) -> None:
    """RocketMQ's TopicValidator: 1-127 chars of [%|a-zA-Z0-9_-]."""
    if _VALID_TOPIC.fullmatch(topic) is not None:  # one C call for what every send checks
        return
    if not topic or len(topic.encode()) > MAX_TOPIC_LEN:
        raise TopicError(f"topic {topic!r} must be 1..{MAX_TOPIC_LEN} bytes")
    for ch in topic:
        if not (ch.isascii() and (ch.isalnum() or ch in "%|_-")):
            raise TopicError(f"topic {topic!r} has the character {ch!r}; allowed: letters, digits, %|_-")
