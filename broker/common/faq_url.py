"""RocketMQ's FAQUrl: the line its remarks end with where it suggests what to do (a topic that
does not exist, on the broker and on the name server). Clients show remarks as they are; ours
read the same."""
from __future__ import annotations

FAQ = "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details."


def suggest_todo(remark: str) -> str:
    """FAQUrl.suggestTodo: the remark and the FAQ line."""
    return remark + FAQ
