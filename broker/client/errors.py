"""The client's exceptions: every failure a caller can act on has its own type and a message
that names the address, topic or response code involved (the CLI prints it as one line)."""
from __future__ import annotations


class ClientError(Exception):
    """Base of everything the client raises on purpose."""


class BrokerUnreachable(ClientError):
    """No connection to a broker or name server (refused, reset, timed out)."""

    def __init__(self, addr: str, reason: str):
        super().__init__(f"cannot reach {addr}: {reason}")
        self.addr = addr


class RouteNotFound(ClientError):
    """The name server (or broker) knows no route for a topic."""

    def __init__(self, topic: str, detail: str = ""):
        super().__init__(f"no route info of topic {topic}" + (f": {detail}" if detail else ""))
        self.topic = topic


class ResponseError(ClientError):
    """A broker or name server answered with a failure code."""

    def __init__(self, code: int, remark: str | None, what: str):
        super().__init__(f"{what} failed: code {code}, {remark or 'no remark'}")
        self.code = code
        self.remark = remark


class SendFailed(ClientError):
    """A send that failed on every attempt; `causes` holds the error of each attempt."""

    def __init__(self, topic: str, causes: list[Exception]):
        detail = "; ".join(str(c) for c in causes)
        super().__init__(f"send to {topic} failed after {len(causes)} attempt(s): {detail}")
        self.topic = topic
        self.causes = causes
