"""Typed errors of the store. Each names what a user needs to act on: the key, the file, the offset."""
from broker.kernels.codec import MessageIllegal  # raised by the encode kernel; re-exported here

__all__ = ["StoreError", "StoreConfigError", "CorruptStoreError", "MessageIllegal", "ServiceUnavailable",
           "InSyncReplicasNotEnough"]


class StoreError(Exception):
    """Base of every store error."""


class StoreConfigError(StoreError, ValueError):
    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


class CorruptStoreError(StoreError):
    """Data that was durable does not verify; the store refuses to start rather than drop it."""

    def __init__(self, path: str, offset: int, reason: str):
        super().__init__(f"corrupt data in {path} at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class ServiceUnavailable(StoreError):
    """The store cannot take writes (closed, or a needed service is down)."""


class InSyncReplicasNotEnough(StoreError):
    """Controller mode: the SyncStateSet has fewer members than minInSyncReplicas; nothing was
    stored (RocketMQ answers SYSTEM_ERROR, "in-sync replicas not enough")."""
