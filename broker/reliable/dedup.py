"""The Redis guard in front of the database check (seed §6.3.1): SET idem:<group>:<id> NX PX ttl.

The key is a hint, never the authority: the database's message log decides (a key can expire, be
flushed or be left behind by a process that died). What the key buys is the cheap answer for the
common duplicate: once a handler has committed, its key is overwritten with "D" (kept for
`done_ttl_ms`), and a copy that finds "D" is acknowledged without touching the database. A key
holding "P:<token>" belongs to a delivery being processed, or one that died; the database is
asked. A failed handler deletes its own key (compare-and-delete on the token), so the retry is
not mistaken for a duplicate.

A batch of deliveries costs two round trips whatever its size, one command each: `acquire_many`
runs the batch's SET NX (GET) in one script, `finish_many` its "done" overwrites and releases in
another (`round_trips` counts them). A script rather than a pipeline of single commands: redis-py
spends ~15 us of Python packing and parsing each command, twice what the rest of a batch's
consumption costs per message; one command with the batch's keys costs a fraction of that. The
script runs atomically in Redis, so its GET-then-SET is the SET NX GET it stands for.

Redis being down is not an error here: each call that fails is counted, logged once in a while,
and the database alone decides.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from broker.reliable.errors import StoreURLError

log = logging.getLogger("reliable.dedup")

ACQUIRED, DONE, TAKEN, UNKNOWN = "acquired", "done", "taken", "unknown"
_STATES = {ord("A"): ACQUIRED, ord("D"): DONE, ord("T"): TAKEN}

# The batch's keys travel in one argument (their bytes end to end, and their lengths), not as KEYS:
# redis-py packs each argument in Python, ~3 us apiece, as much as the rest of a message's Redis
# work. (The guard talks to one Redis, not a cluster, so nothing needs the keys declared.)
_KEYS = """local function keys(blob, lengths)
  local out, pos = {}, 1
  for n in string.gmatch(lengths, '%d+') do
    out[#out + 1] = string.sub(blob, pos, pos + n - 1)
    pos = pos + n
  end
  return out
end
"""
# ARGV: ttl_ms, the batch token (key i gets "P:<token>.<i>"), keys, lengths. One letter per key:
# A (it was free and is now ours), D (done), T (taken): one string to parse, not an array.
_ACQUIRE = _KEYS + """local out = {}
for i, k in ipairs(keys(ARGV[3], ARGV[4])) do
  local old = redis.call('GET', k)
  if not old then
    redis.call('SET', k, 'P:' .. ARGV[2] .. '.' .. i, 'PX', ARGV[1])
    out[i] = 'A'
  elseif old == 'D' then out[i] = 'D'
  else out[i] = 'T' end
end
return table.concat(out)"""
# ARGV: done_ttl_ms, n, keys, lengths, then the value of each key past the n-th: the first n keys
# are marked done, the others deleted if they still hold that value (a key that expired and was
# taken by another delivery stays).
_FINISH = _KEYS + """local n = tonumber(ARGV[2])
for i, k in ipairs(keys(ARGV[3], ARGV[4])) do
  if i <= n then redis.call('SET', k, 'D', 'PX', ARGV[1])
  elseif redis.call('GET', k) == ARGV[i - n + 4] then redis.call('DEL', k) end
end
return 0"""


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
        self.errors = 0
        self.round_trips = 0
        self._last_warning = 0.0

    async def open(self) -> None:
        # the reads' timeout is ours, one per round trip (`_script`): redis-py's socket_timeout
        # arms one per reply read, as much CPU as the rest of a batch's Redis work
        self._r = self._aioredis.from_url(self.url, socket_timeout=None,
                                          socket_connect_timeout=self._socket_timeout)
        self._acquire = self._r.register_script(_ACQUIRE)
        self._finish = self._r.register_script(_FINISH)

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

    def new_tokens(self, n: int) -> list[str]:
        """Tokens for a batch of n keys in `acquire_many` order: "<batch token>.<1-based index>"."""
        batch = uuid.uuid4().hex
        return [f"{batch}.{i}" for i in range(1, n + 1)]

    async def acquire(self, key: str, token: str) -> str:
        """ACQUIRED (the key was free and is now ours), DONE (a handler committed this message),
        TAKEN (another delivery holds it, or held it and died) or UNKNOWN (Redis failed).
        `token` comes from `new_tokens(1)`."""
        return (await self.acquire_many([key], [token]))[0]

    async def acquire_many(self, keys: list[str], tokens: list[str]) -> list[str]:
        """`acquire` of each key, in one round trip; `tokens` from `new_tokens(len(keys))`."""
        if not keys:
            return []
        try:
            states = await self._script(self._acquire, [self.ttl_ms, tokens[0].rpartition(".")[0], *_packed(keys)])
        except (self._aioredis.RedisError, TimeoutError) as e:
            self._failed("SET NX", e)
            return [UNKNOWN] * len(keys)
        return [_STATES[c] for c in states]

    async def _script(self, script, args: list):
        self.round_trips += 1
        # a cancel mid-read makes redis-py drop the connection: no reply is left behind for the next
        async with asyncio.timeout(self._socket_timeout):
            return await script(keys=[], args=args)

    async def mark_done(self, key: str) -> None:
        await self.finish_many([key], [])

    async def release(self, key: str, token: str) -> None:
        await self.finish_many([], [(key, token)])

    async def finish_many(self, done: list[str], release: list[tuple[str, str]]) -> None:
        """Overwrite the `done` keys with "D" (their handlers committed, or the database found them
        processed) and delete each released key if it still holds our token; one round trip."""
        if not done and not release:
            return
        try:
            await self._script(self._finish, [self.done_ttl_ms, len(done), *_packed([*done, *(k for k, _ in release)]),
                                              *(b"P:" + t.encode() for _, t in release)])
        except (self._aioredis.RedisError, TimeoutError) as e:
            self._failed("SET done / release", e)


def _packed(keys: list[str]) -> tuple[bytes, str]:
    """Keys as the scripts take them: their bytes end to end, and their lengths."""
    raw = [k.encode() for k in keys]
    return b"".join(raw), ",".join(str(len(k)) for k in raw)
