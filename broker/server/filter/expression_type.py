"""ExpressionType: the kind of a subscription's filter expression, the filter a pull or pop reads
the queues with, and the answer to one this broker does not filter by, as RocketMQ's broker gives it
(PullMessageProcessor, PopMessageProcessor, ClientManageProcessor.checkClientConfig).

TAG ("a || b", "*"; a null or empty type is TAG too) is filtered by the consume queue's tag hash
codes. SQL92 is filtered by the message properties (broker.server.filter.sql92) when
BrokerConfig.enablePropertyFilter is true; with false (RocketMQ's default) it is refused as
RocketMQ refuses it: SYSTEM_ERROR, "The broker does not support consumer to filter message by
SQL92". Any other type is refused as RocketMQ refuses one it has no filter for. Neither is ever
read as a tag expression: the hash codes of an SQL text match no message, so a pull answered
"retry" with the next offset at the queue's end, and a consumer committed past every message.
"""
from __future__ import annotations

from typing import NamedTuple

from broker.remoting import codes
from broker.remoting.refusals import Refusal
from broker.server.filter.expression_filter import tag_hashes_of
from broker.server.filter.sql92 import Sql92Error, compile_sql92

TAG = "TAG"
SQL92 = "SQL92"


class FilterNotSupported(Refusal):
    """A type the broker does not filter by (enablePropertyFilter=false): SYSTEM_ERROR."""
    response_code = codes.SYSTEM_ERROR

    def __init__(self, expression_type):
        super().__init__(f"The broker does not support consumer to filter message by {expression_type}")


class SubscriptionParseFailed(Refusal):
    response_code = codes.SUBSCRIPTION_PARSE_FAILED

    def __init__(self, remark: str = "parse the consumer's subscription failed"):
        super().__init__(remark)


class FilterDataNotExist(Refusal):
    """A heartbeat's non-tag subscription the broker could build no filter from (RocketMQ's
    ConsumerFilterManager holds none for it: no expression, or a type with no filter)."""
    response_code = codes.FILTER_DATA_NOT_EXIST

    def __init__(self):
        super().__init__("The broker's consumer filter data is not exist!Your expression may be wrong!")


class MessageFilter(NamedTuple):
    """What a read keeps: consume-queue tag codes (None: any) and an SQL92 program (None: none)."""
    tags: set[int] | None = None
    sql: bytes | None = None


def tag_filter(expression: str | None) -> MessageFilter:
    return MessageFilter(tag_hashes_of(expression), None)


def is_tag_type(expression_type) -> bool:
    """ExpressionType.isTagType: null, empty and "TAG" (exactly: "tag" is another type)."""
    return expression_type is None or expression_type == "" or expression_type == TAG


def _compilable(expression_type, expression) -> bool:
    """Whether RocketMQ's FilterFactory would compile it: SQL92 with an expression (whose syntax
    is not checked here: with enablePropertyFilter=false a malformed one passes), no other type."""
    return expression_type == SQL92 and bool(expression)


def _sql_filter(expression: str) -> MessageFilter:
    """The compiled SQL92 filter, or RocketMQ's answer to one that does not compile."""
    try:
        return MessageFilter(None, compile_sql92(expression))
    except Sql92Error:
        raise SubscriptionParseFailed() from None


def check_client_config(subscription: dict | None, property_filter: bool = False) -> None:
    """CHECK_CLIENT_CONFIG (46): a TAG subscription passes; with enablePropertyFilter=false any
    other is refused (SYSTEM_ERROR); with true, one that does not compile is SUBSCRIPTION_PARSE_FAILED
    with the compiler's message (RocketMQ's remark is its JavaCC exception text)."""
    if subscription is None or is_tag_type(subscription.get("expressionType")):
        return
    expression_type = subscription.get("expressionType")
    if not property_filter:
        raise FilterNotSupported(expression_type)
    if expression_type != SQL92:
        raise SubscriptionParseFailed(f"no filter for expression type {expression_type}")
    try:
        compile_sql92(subscription.get("subString") or "")
    except Sql92Error as e:
        raise SubscriptionParseFailed(f"Invalid MessageSelector. {e}") from None


def pull_filter(expression: str | None, expression_type: str | None, property_filter: bool = False) -> MessageFilter:
    """A pull carrying its subscription (hasSubscriptionFlag): FilterAPI.build refuses a non-tag
    type without an expression, then a type the broker has no filter for is refused. An SQL92
    expression that does not compile is SUBSCRIPTION_PARSE_FAILED (RocketMQ then filters nothing:
    docs/compat.md)."""
    if expression_type is None or expression_type == TAG:
        return tag_filter(expression)
    if not expression:
        raise SubscriptionParseFailed()
    if is_tag_type(expression_type):
        return tag_filter(expression)
    if property_filter and expression_type == SQL92:
        return _sql_filter(expression)
    raise FilterNotSupported(expression_type)


def registered_filter(subscription: dict, property_filter: bool = False) -> MessageFilter | None:
    """A pull by the subscription the group's heartbeat registered: no filter data for one that
    cannot compile, else the type refused unless it is SQL92 and enablePropertyFilter is on.
    None: a TAG subscription (the consumer manager's tag codes apply)."""
    expression_type = subscription.get("expressionType")
    if is_tag_type(expression_type):
        return None
    if not _compilable(expression_type, subscription.get("subString")):
        raise FilterDataNotExist()
    if not property_filter:
        raise FilterNotSupported(expression_type)
    try:
        return MessageFilter(None, compile_sql92(subscription["subString"]))
    except Sql92Error:
        raise FilterDataNotExist() from None  # ConsumerFilterManager registered none for it


def pop_filter(expression: str | None, expression_type: str | None, property_filter: bool = False) -> MessageFilter:
    """POP_MESSAGE's exp / expType (an empty exp is "*" whatever the type). RocketMQ's pop filters
    by SQL92 whatever enablePropertyFilter says; we do with true and refuse it as a pull is refused
    with false (docs/compat.md). A type with no filter, or SQL92 that does not compile, fails to parse."""
    if not expression or is_tag_type(expression_type):
        return tag_filter(expression or "*")
    if expression_type == SQL92:
        if property_filter:
            return _sql_filter(expression)
        raise FilterNotSupported(expression_type)
    raise SubscriptionParseFailed()
