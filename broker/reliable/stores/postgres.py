"""PostgreSQL through psycopg 3 (async): `postgresql://user@host:port/db?prefix=reliable_&pool_size=8
&lock_wait_ms=2000`; other query options go to libpq as they are.

Transactions take a connection from a small pool of their own (psycopg_pool is not required).
The claim of a message is an INSERT ... ON CONFLICT DO NOTHING on the log's primary key: against
a committed row it inserts nothing (processed before); against another transaction's uncommitted
row it waits, up to `lock_wait_ms` (SET LOCAL lock_timeout), for that transaction to finish and
then sees its outcome; past the wait it reports BUSY. A BUSY claim means a live transaction holds
the row: if its process dies, the server rolls it back and the claim is free again.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from broker.reliable.errors import ReliableError, StoreUnavailable, StoreURLError
from broker.reliable.stores.base import BUSY, CLAIMED, DONE, MessageInfo, Session, Store
from broker.reliable.stub import CONFIRMED, MANUAL, UNCONFIRMED

try:
    import psycopg
    from psycopg import pq
except ImportError:  # reported when a postgresql:// URL is opened, not on import
    psycopg = None

SCHEMA_LOCK = 0x72656C6961626C65  # pg_advisory_xact_lock key: one schema creation at a time
OPTIONS = ("prefix", "pool_size", "lock_wait_ms")


@functools.lru_cache(maxsize=512)
def _pg_sql(sql: str) -> str:
    """`?` placeholders -> psycopg's `%s` (a literal % doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PgSession(Session):
    dialect = "postgresql"

    def __init__(self, conn, begin_pending: bool = False):
        super().__init__()
        self._conn = conn
        self._cur = conn.cursor()  # one cursor for the transaction's statements: cheaper than one each
        self._begin_pending = begin_pending  # BEGIN goes out with the first statement

    @property
    def raw(self):
        if self._begin_pending:  # statements on it would run outside the transaction
            raise ReliableError("session.raw before the transaction's first statement (it has not begun)")
        self._raw_handed_out()
        return self._conn

    @property
    def in_error(self) -> bool:
        return self._conn.info.transaction_status == pq.TransactionStatus.INERROR

    async def _rollback_to(self, name: str) -> None:
        await self._cur.execute(f"ROLLBACK TO SAVEPOINT {name}")

    async def _exec(self, sql: str, params):
        if self._begin_pending:
            return await self._begin_with(sql, params)
        if self._pending_savepoint is not None:
            await self._cur.execute(self._establish())
        if params:
            return await self._cur.execute(_pg_sql(sql), params)
        return await self._cur.execute(sql)

    async def _begin_with(self, sql: str, params):
        """BEGIN and the first statement in one round trip (libpq's pipeline mode): a round trip
        is what a batch's transaction waits for most on a busy machine, not the statements' CPU."""
        self._begin_pending = False
        async with self._conn.pipeline():
            await self._cur.execute("BEGIN")
            if params:
                await self._cur.execute(_pg_sql(sql), params)
            else:
                await self._cur.execute(sql)
        return self._cur

    async def execute(self, sql: str, params=()) -> int:
        return (await self._exec(sql, params)).rowcount

    async def fetchall(self, sql: str, params=()) -> list[tuple]:
        return await (await self._exec(sql, params)).fetchall()

    async def run(self, fn: Callable[[Any], Any]) -> Any:
        if self._begin_pending:
            self._begin_pending = False
            await self._cur.execute("BEGIN")
        if self._pending_savepoint is not None:
            await self._cur.execute(self._establish())
        r = fn(self._conn)
        return await r if asyncio.iscoroutine(r) else r


class _Pool:
    """Up to `size` connections (autocommit: the transactions are the store's BEGIN/COMMIT)."""

    def __init__(self, conninfo: str, size: int):
        self.conninfo = conninfo
        self._sem = asyncio.Semaphore(size)
        self._idle: list = []

    async def get(self):
        await self._sem.acquire()
        try:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn
            return await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
        except BaseException:
            self._sem.release()
            raise

    async def put(self, conn) -> None:
        try:
            if conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE:
                await conn.close()  # broken or left mid-transaction (a cancel): not reused
            else:
                self._idle.append(conn)
        finally:
            self._sem.release()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


class PostgresStore(Store):
    dialect = "postgresql"

    def __init__(self, url: str):
        if psycopg is None:
            raise StoreURLError(url, "psycopg (3) is not installed: pip install 'psycopg[binary]'")
        parts = urlsplit(url)
        if parts.scheme not in ("postgresql", "postgres"):
            raise StoreURLError(url, "not a postgresql:// URL")
        query = parse_qsl(parts.query)
        ours = {k: v for k, v in query if k in OPTIONS}
        super().__init__(url, ours.get("prefix", "reliable_"))
        self.pool_size = int(ours.get("pool_size", "8"))
        self.lock_wait_ms = int(ours.get("lock_wait_ms", "2000"))
        self.conninfo = urlunsplit(parts._replace(query=urlencode([(k, v) for k, v in query if k not in OPTIONS])))
        self._pool: _Pool | None = None

    def ddl(self) -> list[str]:
        return self._ddl("BYTEA", "BIGINT")

    async def _open(self) -> None:
        self._pool = _Pool(self.conninfo, self.pool_size)
        names = self.schema_objects()
        exists = f"SELECT count(to_regclass(n)) FROM (VALUES {', '.join('(?)' for _ in names)}) AS t(n)"
        try:
            async with self.transaction() as s:
                if (await s.fetchone(exists, names))[0] == len(names):
                    return
                # CREATE TABLE IF NOT EXISTS is not safe against itself run concurrently
                await s.execute("SELECT pg_advisory_xact_lock(?)", (SCHEMA_LOCK,))
                for stmt in self.ddl():
                    await s.execute(stmt)
        except BaseException:
            await self._pool.close()
            raise

    async def _close(self) -> None:
        await self._pool.close()

    @contextlib.asynccontextmanager
    async def transaction(self, begin_with_first_statement: bool = False) -> AsyncIterator[PgSession]:
        """`begin_with_first_statement`: BEGIN is sent with the block's first statement (one round
        trip less); the session's `raw` is refused until a statement has run."""
        if self._pool is None:
            raise StoreUnavailable(f"{self.conninfo}: store is not open")
        try:
            conn = await self._pool.get()
        except psycopg.OperationalError as e:
            raise StoreUnavailable(f"postgresql: {e}") from e
        s = PgSession(conn, begin_with_first_statement)
        committed = False
        try:
            try:
                if not begin_with_first_statement:
                    await s._cur.execute("BEGIN")
                yield s
            except BaseException:
                # cancelled again meanwhile: the pool closes the connection, the server rolls back
                with contextlib.suppress(Exception):
                    await conn.execute("ROLLBACK")
                raise
            if s._begin_pending:  # no statement ran: nothing began
                committed = not s._rollback_only
            elif s._rollback_only or conn.info.transaction_status == pq.TransactionStatus.INERROR:
                await s._cur.execute("ROLLBACK")
                if not s._rollback_only:  # COMMIT would answer ROLLBACK without an error
                    raise StoreUnavailable("transaction aborted by an earlier error (rolled back)")
            else:
                await s._cur.execute("COMMIT")
                committed = True
        except psycopg.OperationalError as e:
            raise StoreUnavailable(f"postgresql: {e}") from e
        finally:
            await self._pool.put(conn)
        await s._run_callbacks(committed)

    def _begin_sql(self) -> str:
        """Claim, stub status and confirmation in one statement (each statement costs the client
        more CPU than the server time it waits for): take the transaction-scoped advisory lock of
        (group, id) without waiting; holding it, insert the log row (nothing when a committed row
        exists) and, if that inserted and `confirm`, confirm the stub; read the stub's status as it
        was before. A lock someone else holds falls through to the slow path."""
        return f"""
            WITH lk AS (SELECT pg_try_advisory_xact_lock(?::bigint) AS got),
            ins AS (INSERT INTO {self.log_table} (grp, id, topic, broker_name, queue_id, queue_offset, msg_id,
                                                  reconsume_times, created_at)
                    SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? FROM lk WHERE lk.got
                    ON CONFLICT (grp, id) DO NOTHING RETURNING 1),
            st AS (SELECT status FROM {self.stub_table} WHERE id = ?),
            up AS (UPDATE {self.stub_table} SET status = '{CONFIRMED}', confirmed_at = ?, updated_at = ?
                   WHERE id = ? AND status IN ('{UNCONFIRMED}', '{MANUAL}') AND ? AND EXISTS (SELECT 1 FROM ins))
            SELECT (SELECT got FROM lk), (SELECT count(*) FROM ins), (SELECT status FROM st)"""

    def _begin_many_sql(self) -> str:
        """`_begin_sql` for a batch, its messages in one JSON array parameter (psycopg dumps one
        string much faster than eight arrays): one round trip, a row per message in order with the
        lock's answer, whether the log row went in, and the stub's status before."""
        return f"""
            WITH m AS (SELECT e->>0 AS id, (e->>1)::bigint AS k, e->>2 AS topic, e->>3 AS broker_name,
                              (e->>4)::int AS queue_id, (e->>5)::bigint AS queue_offset, e->>6 AS msg_id,
                              (e->>7)::int AS reconsume_times, ord
                       FROM json_array_elements(?::json) WITH ORDINALITY AS t(e, ord)),
            lk AS MATERIALIZED (SELECT m.*, pg_try_advisory_xact_lock(m.k) AS got FROM m),
            ins AS (INSERT INTO {self.log_table} (grp, id, topic, broker_name, queue_id, queue_offset, msg_id,
                                                  reconsume_times, created_at)
                    SELECT ?, id, topic, broker_name, queue_id, queue_offset, msg_id, reconsume_times, ?
                    FROM lk WHERE got
                    ON CONFLICT (grp, id) DO NOTHING RETURNING id),
            st AS (SELECT id, status FROM {self.stub_table} WHERE ? AND id IN (SELECT id FROM m)),
            up AS (UPDATE {self.stub_table} SET status = '{CONFIRMED}', confirmed_at = ?, updated_at = ?
                   WHERE ? AND id IN (SELECT id FROM ins) AND status IN ('{UNCONFIRMED}', '{MANUAL}'))
            SELECT lk.got, ins.id IS NOT NULL, st.status FROM lk LEFT JOIN ins ON ins.id = lk.id
            LEFT JOIN st ON st.id = lk.id ORDER BY lk.ord"""

    @staticmethod
    def _lock_key(group: str, rid: str) -> int:
        return int.from_bytes(hashlib.blake2b(f"{group}\0{rid}".encode(), digest_size=8).digest(), "big", signed=True)

    async def begin_messages(self, s: PgSession, group: str, items: list[tuple[str, MessageInfo]], now: int,
                             confirm: bool) -> list[tuple[str, str | None]]:
        if len(items) == 1:
            return [await self.begin_message(s, group, items[0][0], items[0][1], now, confirm)]
        batch = json.dumps([(rid, self._lock_key(group, rid), i.topic, i.broker_name, i.queue_id, i.queue_offset,
                             i.msg_id, i.reconsume_times) for rid, i in items])
        rows = await s.fetchall(self._begin_many_sql(), (batch, group, now, confirm, now, now, confirm))
        out = []
        for (rid, info), (got, inserted, status) in zip(items, rows):
            if got:
                out.append((CLAIMED, status if confirm else None) if inserted else (DONE, None))
                continue
            # in flight elsewhere: the slow path, in a savepoint of its own so that a lock wait
            # given up (or a deadlock between two batches claiming in different orders) undoes
            # this claim alone
            await s.execute("SAVEPOINT claim")
            try:
                claim = await self._claim_waiting(s, group, rid, info, now, confirm)
            except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
                await s.execute("ROLLBACK TO SAVEPOINT claim")
                claim = (BUSY, None)
            await s.execute("RELEASE SAVEPOINT claim")
            out.append(claim)
        return out

    async def begin_message(self, s: PgSession, group: str, rid: str, info: MessageInfo, now: int,
                            confirm: bool) -> tuple[str, str | None]:
        key = self._lock_key(group, rid)
        got, inserted, status = await s.fetchone(
            self._begin_sql(), (key, *self._log_params(group, rid, info, now), rid, now, now, rid, confirm))
        if got:
            # no other claimer holds (group, id): a conflict is with a committed row (or, after a
            # hash collision below, with a slow-path claimer's row: the insert waited for its end)
            if not inserted:
                return DONE, None
            return CLAIMED, status if confirm else None
        # Someone holds the advisory lock: a delivery of the same message in flight (or, once in
        # 2**64, another message whose key hashes alike). Decide on the row itself.
        try:
            return await self._claim_waiting(s, group, rid, info, now, confirm)
        except psycopg.errors.LockNotAvailable:
            s.set_rollback_only()  # the transaction is aborted; the caller runs nothing more in it
            return BUSY, None

    async def _claim_waiting(self, s: PgSession, group: str, rid: str, info: MessageInfo, now: int,
                             confirm: bool) -> tuple[str, str | None]:
        """Insert the log row waiting for the transaction that holds it, up to lock_wait_ms (past
        it, psycopg's LockNotAvailable): its rollback leaves the row to us, its commit means DONE."""
        await s.execute(f"SET LOCAL lock_timeout = '{self.lock_wait_ms}ms'")
        n = await s.execute(self._log_insert(), self._log_params(group, rid, info, now))
        await s.execute("SET LOCAL lock_timeout TO DEFAULT")  # the handler's statements wait as usual
        if n != 1:
            return DONE, None
        if not confirm:
            return CLAIMED, None
        row = await s.fetchone(f"SELECT status FROM {self.stub_table} WHERE id = ?", (rid,))
        if row is not None and row[0] in (UNCONFIRMED, MANUAL):
            await s.execute(self._confirm_sql(), (now, now, rid))
        return CLAIMED, row[0] if row else None
