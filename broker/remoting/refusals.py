"""Refusals: requests the broker answers with an error code, never a traceback. Each class
carries its RocketMQ response code (asyncpg's sqlstate habit), and `response_code` maps the
store's own errors: one place decides what a client is told."""
from __future__ import annotations

from broker.remoting import codes
from broker.store.errors import MessageIllegal, ServiceUnavailable, StoreError


class Refusal(Exception):
    response_code = codes.SYSTEM_ERROR


class BadRequest(Refusal, ValueError):
    """A header or body field missing or of the wrong type or range (RocketMQ answers SYSTEM_ERROR
    naming the field); the connection stays open."""


class InvalidParameter(Refusal):
    """A request field out of range where RocketMQ answers INVALID_PARAMETER (a queue id past the
    topic's queues)."""
    response_code = codes.INVALID_PARAMETER


class TopicNotExist(Refusal):
    response_code = codes.TOPIC_NOT_EXIST


class NoPermission(Refusal):
    response_code = codes.NO_PERMISSION


class NotFound(Refusal):
    """QUERY_NOT_FOUND: nothing to answer with (an offset never committed)."""
    response_code = codes.QUERY_NOT_FOUND


_STORE = ((ServiceUnavailable, codes.SERVICE_NOT_AVAILABLE), (MessageIllegal, codes.MESSAGE_ILLEGAL),
          (StoreError, codes.SYSTEM_ERROR))


def response_code(exc: BaseException) -> int | None:
    """The code a refusal or a store error is answered with; None for anything else (a bug)."""
    if isinstance(exc, Refusal):
        return exc.response_code
    for cls, code in _STORE:
        if isinstance(exc, cls):
            return code
    return None
