"""The connector's exceptions. Spark shows a Python exception raised in a planner or a task as
text inside its own error, so each message names what the user has to fix: the option, the
topic, the queue or the broker's status."""
from __future__ import annotations


class RocketMQSparkError(Exception):
    """Base of everything broker.spark raises on purpose."""


class RocketMQOptionError(RocketMQSparkError, ValueError):
    """An option that is missing or cannot be read; the message names the option."""

    def __init__(self, option: str, problem: str):
        super().__init__(f"rocketmq option '{option}': {problem}")
        self.option = option


class RocketMQSourceError(RocketMQSparkError):
    """Reading failed: no such topic, unreachable name server or broker, lost data, a pull the
    broker refused."""


class RocketMQSinkError(RocketMQSparkError):
    """Writing failed: rows the sink cannot turn into messages, or a send the broker refused."""
