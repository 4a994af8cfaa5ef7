"""The exceptions broker.reliable raises on purpose; each names what it is about."""
from __future__ import annotations


class ReliableError(Exception):
    """Base of everything broker.reliable raises on purpose."""


class StoreURLError(ReliableError):
    """A store or Redis URL this library cannot open (unknown scheme, missing driver)."""

    def __init__(self, url: str, reason: str):
        super().__init__(f"cannot use {url!r}: {reason}")
        self.url = url


class StoreUnavailable(ReliableError):
    """The database could not be reached or a statement failed for a reason that may pass
    (locked, connection lost). The consumer returns RECONSUME_LATER on it."""


class StubNotFound(ReliableError):
    def __init__(self, stub_id: str):
        super().__init__(f"no message stub with id {stub_id!r}")
        self.stub_id = stub_id


class IllegalTransition(ReliableError):
    """An operator call that the stub's state does not allow (voiding a confirmed stub, say)."""

    def __init__(self, stub_id: str, status: str, wanted: str):
        super().__init__(f"stub {stub_id!r} is {status}: cannot make it {wanted}")
        self.stub_id, self.status, self.wanted = stub_id, status, wanted


class HandlerFailed(ReliableError):
    """A handler returned False (rather than raising): the message is consumed again later."""
