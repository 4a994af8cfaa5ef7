"""Tag filtering: a TAG subscription expression to the set of tag hash codes the consume queues hold."""
from __future__ import annotations

from broker.kernels.codec import java_string_hash


def tag_hashes_of(expression: str | None) -> set[int] | None:
    """SubscriptionData's codeSet for a TAG expression ("*" or "a || b"); None = every message."""
    if expression is None:
        return None
    expression = expression.strip()
    if expression in ("", "*"):
        return None
    tags = [t.strip() for t in expression.split("||") if t.strip()]
    return {java_string_hash(t.encode()) for t in tags} or None
