"""ExpressionType: the kind of a subscription's filter expression, and the answer to one this
broker cannot filter by, as RocketMQ's broker gives it (PullMessageProcessor, PopMessageProcessor,
ClientManageProcessor.checkClientConfig).

TAG ("a || b", "*"; a null or empty type is TAG too) is filtered by the consume queue's tag hash
codes. SQL92 needs BrokerConfig.enablePropertyFilter, which this broker cannot turn on (there is
no SQL92 evaluator), so it is refused as RocketMQ refuses it while enablePropertyFilter=false:
SYSTEM_ERROR, "The broker does not support consumer to filter message by SQL92". Any other type is
refused as RocketMQ refuses one it has no filter for. Neither is ever read as a tag expression:
the hash codes of an SQL text match no message, so a pull answered "retry" with the next offset
at the queue's end, and a consumer committed past every message.
"""
from __future__ import annotations

from broker.remoting import codes
from broker.remoting.refusals import Refusal

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


def is_tag_type(expression_type) -> bool:
    """ExpressionType.isTagType: null, empty and "TAG" (exactly: "tag" is another type)."""
    return expression_type is None or expression_type == "" or expression_type == TAG


def _compilable(expression_type, expression) -> bool:
    """Whether RocketMQ's FilterFactory would compile it: SQL92 with an expression (whose syntax
    we cannot check: a malformed one passes here), no other type at all."""
    return expression_type == SQL92 and bool(expression)


def check_client_config(subscription: dict | None) -> None:
    """CHECK_CLIENT_CONFIG (46): a TAG subscription passes; any other is refused (we have no
    filter to compile it with)."""
    if subscription is None or is_tag_type(subscription.get("expressionType")):
        return
    raise FilterNotSupported(subscription.get("expressionType"))


def check_pull_header(expression: str | None, expression_type: str | None) -> None:
    """A pull carrying its subscription (hasSubscriptionFlag): FilterAPI.build refuses a non-tag
    type without an expression, then the type itself is refused."""
    if expression_type is None or expression_type == TAG:
        return
    if not expression:
        raise SubscriptionParseFailed()
    if not is_tag_type(expression_type):
        raise FilterNotSupported(expression_type)


def check_registered(subscription: dict) -> None:
    """A pull by the subscription the group's heartbeat registered: no filter data for one that
    cannot compile, else the type refused."""
    expression_type = subscription.get("expressionType")
    if is_tag_type(expression_type):
        return
    if not _compilable(expression_type, subscription.get("subString")):
        raise FilterDataNotExist()
    raise FilterNotSupported(expression_type)


def check_pop(expression: str | None, expression_type: str | None) -> None:
    """POP_MESSAGE's exp / expType (an empty exp is "*" whatever the type). RocketMQ's pop filters
    by SQL92 whatever enablePropertyFilter says; we cannot, and refuse it as a pull is refused
    (docs/compat.md). A type with no filter fails to parse."""
    if not expression or is_tag_type(expression_type):
        return
    if expression_type == SQL92:
        raise FilterNotSupported(expression_type)
    raise SubscriptionParseFailed()
