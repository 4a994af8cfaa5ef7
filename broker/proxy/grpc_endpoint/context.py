"""The context a servicer method is given: what grpc.aio's ServicerContext offers that the front
uses (metadata, peer, status, abort, deadline, cancellation)."""
from __future__ import annotations

from broker.proxy.grpc_endpoint.status import AbortError, code_of


class ServicerContext:
    """Holds the call's connection and deadline, not the call: the call holds it, and a cycle
    between the two would leave each call's objects to the garbage collector."""
    __slots__ = ("_conn", "_deadline", "_metadata", "code_", "details_", "cancelled_", "done_")

    def __init__(self, conn, deadline: float | None, metadata: list):
        self._conn = conn
        self._deadline = deadline  # loop time, or None
        self._metadata = metadata
        self.code_ = None      # set_code / abort: the status the call ends with (int)
        self.details_ = None
        self.cancelled_ = False
        self.done_ = False

    def invocation_metadata(self) -> tuple:
        """(key, value) pairs; a '-bin' key's value is bytes, as grpcio gives it."""
        return tuple(self._metadata)

    def peer(self) -> str:
        return self._conn.peer

    def set_code(self, code) -> None:
        self.code_ = code_of(code)

    def set_details(self, details: str) -> None:
        self.details_ = details

    def code(self):
        return self.code_

    def details(self):
        return self.details_

    def abort(self, code, details: str = "", trailing_metadata=()) -> None:
        self.code_ = code_of(code)
        self.details_ = details
        raise AbortError(details)

    def time_remaining(self) -> float | None:
        deadline = self._deadline
        if deadline is None:
            return None
        return max(0.0, deadline - self._conn.loop.time())

    def cancelled(self) -> bool:
        return self.cancelled_

    def done(self) -> bool:
        return self.done_

    # what grpcio offers and nothing here needs: accepted, without effect
    def set_trailing_metadata(self, trailing_metadata) -> None:
        pass

    async def send_initial_metadata(self, initial_metadata) -> None:
        pass

    def set_compression(self, compression) -> None:
        pass

    def disable_next_message_compression(self) -> None:
        pass
