"""Stores by URL: `sqlite:///path.db` (the embedded default) or `postgresql://...`."""
from __future__ import annotations

from broker.reliable.errors import StoreURLError
from broker.reliable.stores.base import BUSY, CLAIMED, DONE, MessageInfo, Session, Store

DEFAULT_URL = "sqlite:///reliable.db"


def open_store(url: str | Store | None = None) -> Store:
    """A Store for `url` (not yet opened: `await store.open()`, or `async with`). A Store passed in
    is returned as is, so the outbox and the consumer can share one."""
    if isinstance(url, Store):
        return url
    url = url or DEFAULT_URL
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from broker.reliable.stores.sqlite import SqliteStore
        return SqliteStore(url)
    if scheme in ("postgresql", "postgres"):
        from broker.reliable.stores.postgres import PostgresStore
        return PostgresStore(url)
    raise StoreURLError(url, "unknown scheme: use sqlite:///path.db or postgresql://user@host/db")


__all__ = ["BUSY", "CLAIMED", "DEFAULT_URL", "DONE", "MessageInfo", "Session", "Store", "open_store"]
