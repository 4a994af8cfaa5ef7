"""The v2 Status every response carries, and ProxyError: a request refused with a v2 Code and a
message saying why (GrpcProxyException in RocketMQ's proxy). Client errors of the remoting side
map to the Code the Java proxy answers for the same broker answer."""
from __future__ import annotations

from broker.client.errors import BrokerUnreachable, ResponseError, RouteNotFound, SendFailed
from broker.proxy.protocol import definition_pb2 as pb
from broker.remoting import codes

Code = pb.Code


class ProxyError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


_NAMES = {number: name for name, number in Code.items()}  # Code.Name's answers, without its lookup per call


def status(code: int = Code.OK, message: str | None = None) -> pb.Status:
    return pb.Status(code=code, message=(_NAMES.get(code) or Code.Name(code)) if message is None else message)


# ResponseCode → v2 Code (ResponseBuilder.buildStatus(int remotingResponseCode, ...) in RocketMQ)
_BY_RESPONSE = {
    codes.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    codes.NO_PERMISSION: Code.FORBIDDEN,
    codes.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    codes.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    codes.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    codes.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    codes.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    codes.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
}


def from_broker_refusal(e: ResponseError) -> tuple[int, str]:
    """(Code, message) for a broker's refusal, as ResponseBuilder.buildStatus(MQBrokerException):
    the broker's remark is the message, word for word."""
    return _BY_RESPONSE.get(e.code, Code.INTERNAL_SERVER_ERROR), e.remark or str(e.code)


def from_client_error(e: Exception) -> tuple[int, str]:
    """(Code, message) for a failure of the remoting side."""
    if isinstance(e, ProxyError):
        return e.code, e.message
    if isinstance(e, RouteNotFound):
        return Code.TOPIC_NOT_FOUND, str(e)
    if isinstance(e, SendFailed):
        last = e.causes[-1] if getattr(e, "causes", None) else None
        if isinstance(last, ResponseError):
            return _BY_RESPONSE.get(last.code, Code.INTERNAL_SERVER_ERROR), str(e)
        return Code.PROXY_TIMEOUT if isinstance(last, (BrokerUnreachable, TimeoutError)) else \
            Code.INTERNAL_SERVER_ERROR, str(e)
    if isinstance(e, ResponseError):
        return _BY_RESPONSE.get(e.code, Code.INTERNAL_SERVER_ERROR), str(e)
    if isinstance(e, BrokerUnreachable):
        return Code.PROXY_TIMEOUT, str(e)
    return Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}"
