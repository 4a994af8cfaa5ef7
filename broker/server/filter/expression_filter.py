"""Tag filtering: a TAG subscription expression to the set of tag hash codes the consume queues hold.
Only TAG expressions: a SQL92 one is refused as RocketMQ's broker refuses it with
enablePropertyFilter=false (its default), never read as a list of tags that matches nothing."""
from __future__ import annotations

from broker.kernels.codec import java_string_hash
from broker.remoting.refusals import Refusal


def check_expression_type(expression_type: str | None) -> None:
    """ExpressionType.isTagType or RocketMQ's SYSTEM_ERROR for anything else (SQL92)."""
    if expression_type not in (None, "", "TAG"):
        raise Refusal(f"The broker does not support consumer to filter message by {expression_type}")


def tag_hashes_of(expression: str | None) -> set[int] | None:
    """SubscriptionData's codeSet for a TAG expression ("*" or "a || b"); None = every message."""
    if expression is None:
        return None
    expression = expression.strip()
    if expression in ("", "*"):
        return None
    tags = [t.strip() for t in expression.split("||") if t.strip()]
    return {java_string_hash(t.encode()) for t in tags} or None
