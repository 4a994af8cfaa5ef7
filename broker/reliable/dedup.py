"""The Redis guard in front of the database check (seed §6.3.1): SET idem:<group>:<id> NX PX ttl.

The key is a hint, never the authority: the database's message log decides (a key can expire, be
flushed or be left behind by a process that died). What the key buys is the cheap answer for the
common duplicate: once a handler has committed, its key is overwritten with "D" (kept for
`done_ttl_ms`), and a copy that finds "D" is acknowledged without touching the database. A key
holding "P:<token>" belongs to a delivery being processed, or one that died; the database is
asked. A failed handler deletes its own key (compare-and-delete on the token), so the retry is
not mistaken for a duplicate.

Redis being down is not an error here: each call that fails is counted, logged once in a while,
and the database alone decides.
"""
from __future__ import annotations

import logging
import time
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from broker.reliable.errors import StoreURLError

log = logging.getLogger("reliable.dedup")

ACQUIRED, DONE, TAKEN, UNKNOWN = "acquired", "done", "taken", "unknown"
DONE_VALUE = b"D"

_RELEASE = """if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"""


class RedisGuard:
    def __init__(self, url: str, ttl_ms: int = 300_000, done_ttl_ms: int = 86_400_000, prefix: str = "idem",
                 socket_timeout: float = 1.0):
        try:
            import redis.asyncio as aioredis
        except ImportError:
            raise StoreURLError(url, "redis-py is not installed: pip install redis") from None
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise StoreURLError(url, "not a redis:// URL")
        # ttl_ms, done_ttl_ms and prefix may come in the URL's query (they win over the arguments)
        parts = urlsplit(url)
        query = parse_qsl(parts.query)
        ours = {k: v for k, v in query if k in ("ttl_ms", "done_ttl_ms", "prefix")}
        self.url = urlunsplit(parts._replace(query=urlencode([(k, v) for k, v in query if k not in ours])))
        self.ttl_ms = int(ours.get("ttl_ms", ttl_ms))
        self.done_ttl_ms = int(ours.get("done_ttl_ms", done_ttl_ms))
        self.prefix = ours.get("prefix", prefix)
        self._socket_timeout = socket_timeout
        self._aioredis = aioredis
        self._r = None
        self._release = None
        self._nx_get = True
        self.errors = 0
        self._last_warning = 0.0

    async def open(self) -> None:
        self._r = self._aioredis.from_url(self.url, socket_timeout=self._socket_timeout,
                                          socket_connect_timeout=self._socket_timeout)
        self._release = self._r.register_script(_RELEASE)

    async def close(self) -> None:
        if self._r is not None:
            await self._r.aclose()
            self._r = None

    def key(self, group: str, rid: str) -> str:
        return f"{self.prefix}:{group}:{rid}"

    def _failed(self, what: str, e: Exception) -> None:
        self.errors += 1
        now = time.monotonic()
        if now - self._last_warning > 10:  # a Redis outage would otherwise log once per message
            self._last_warning = now
            log.warning("redis %s failed (%s); the database decides alone meanwhile", what, e)

    async def acquire(self, key: str, token: str) -> str:
        """ACQUIRED (the key was free and is now ours), DONE (a handler committed this message),
        TAKEN (another delivery holds it, or held it and died) or UNKNOWN (Redis failed)."""
        value = b"P:" + token.encode()
        try:
            if self._nx_get:
                try:  # SET NX GET (Redis 7): one command, the old value back, nil when we set it
                    current = await self._r.set(key, value, nx=True, px=self.ttl_ms, get=True)
                    ok = current is None
                except self._aioredis.ResponseError:  # older Redis: "syntax error"
                    self._nx_get = False
            if not self._nx_get:
                async with self._r.pipeline(transaction=False) as p:  # both in one round trip
                    p.set(key, value, nx=True, px=self.ttl_ms)
                    p.get(key)
                    ok, current = await p.execute()
        except self._aioredis.RedisError as e:
            self._failed("SET NX", e)
            return UNKNOWN
        if ok:
            return ACQUIRED
        return DONE if current == DONE_VALUE else TAKEN

    async def mark_done(self, key: str) -> None:
        try:
            await self._r.set(key, DONE_VALUE, px=self.done_ttl_ms)
        except self._aioredis.RedisError as e:
            self._failed("SET done", e)

    async def release(self, key: str, token: str) -> None:
        try:
            await self._release(keys=[key], args=[b"P:" + token.encode()])
        except self._aioredis.RedisError as e:
            self._failed("release", e)
