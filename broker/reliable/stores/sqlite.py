"""SQLite, the embedded default: `sqlite:///relative.db`, `sqlite:////absolute.db`, `sqlite://`
(in memory, one process). Query options: `prefix` (table prefix, default reliable_),
`synchronous` (FULL by default: a commit survives power loss; NORMAL is faster and survives a
process crash), `busy_timeout_ms` (how long to wait for another process's write lock, 10000).

sqlite3 blocks, so one thread per store owns the connection and runs every statement; the event
loop never waits on the disk. SQLite has one writer at a time: transactions begin IMMEDIATE (the
write lock up front, so two processes never both read "not done" and then race to write), and
within a process they run one after another (an asyncio lock). The first statement of a
transaction carries its BEGIN in the same hop to the thread.
"""
from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs, urlsplit

from broker.reliable.errors import StoreUnavailable, StoreURLError
from broker.reliable.stores.base import CLAIMED, DONE, MessageInfo, Session, Store
from broker.reliable.stub import MANUAL, UNCONFIRMED


def parse_sqlite_url(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        raise StoreURLError(url, "not a sqlite:// URL")
    if parts.netloc:
        raise StoreURLError(url, "sqlite URLs have no host: sqlite:///relative.db or sqlite:////absolute.db")
    path = parts.path.removeprefix("/")
    opts = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return path or ":memory:", opts


class SqliteSession(Session):
    dialect = "sqlite"

    def __init__(self, store: SqliteStore):
        super().__init__()
        self._store = store
        self._begun = False

    @property
    def raw(self) -> sqlite3.Connection:
        self._raw_handed_out()
        return self._store._conn

    def _begin(self) -> sqlite3.Connection:  # in the database thread
        conn = self._store._conn
        if not self._begun:
            conn.execute("BEGIN IMMEDIATE")
            self._begun = True
        return conn

    def _begin_statement(self) -> sqlite3.Connection:  # in the database thread: a handler's statement
        conn = self._begin()
        savepoint = self._establish()  # in the same hop as the statement it comes before
        if savepoint is not None:
            conn.execute(savepoint)
        return conn

    async def _rollback_to(self, name: str) -> None:
        await self._store._call(lambda: self._store._conn.execute(f"ROLLBACK TO SAVEPOINT {name}"))

    async def execute(self, sql: str, params=()) -> int:
        return await self._store._call(lambda: self._begin_statement().execute(sql, params).rowcount)

    async def fetchall(self, sql: str, params=()) -> list[tuple]:
        return await self._store._call(lambda: self._begin_statement().execute(sql, params).fetchall())

    async def run(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        return await self._store._call(lambda: fn(self._begin_statement()))


class SqliteStore(Store):
    dialect = "sqlite"

    def __init__(self, url: str):
        self.path, opts = parse_sqlite_url(url)
        super().__init__(url, opts.pop("prefix", "reliable_"))
        self.synchronous = opts.pop("synchronous", "FULL").upper()
        if self.synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise StoreURLError(url, f"synchronous={self.synchronous}: OFF, NORMAL, FULL or EXTRA")
        self.busy_timeout_ms = int(opts.pop("busy_timeout_ms", "10000"))
        if opts:
            raise StoreURLError(url, f"unknown option(s) {', '.join(sorted(opts))}")
        self._conn: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._lock: asyncio.Lock | None = None

    def ddl(self) -> list[str]:
        return self._ddl("BLOB", "INTEGER")

    async def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn)
        except sqlite3.OperationalError as e:  # locked past the busy timeout, disk I/O, ...
            raise StoreUnavailable(f"sqlite {self.path}: {e}") from e

    async def _open(self) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="reliable-sqlite")
        self._lock = asyncio.Lock()

        def connect() -> None:
            # autocommit mode (isolation_level None): BEGIN/COMMIT are ours, not the module's
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")  # readers do not block the writer
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            self._conn = conn
            names = self.schema_objects()
            found = conn.execute(f"SELECT count(*) FROM sqlite_master WHERE name IN ({', '.join('?' * len(names))})",
                                 names).fetchone()[0]
            if found == len(names):  # a read: no wait on the write lock of busy handlers
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                for stmt in self.ddl():
                    conn.execute(stmt)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        try:
            await self._call(connect)
        except BaseException:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._executor.shutdown(wait=False)
            raise

    async def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await self._call(conn.close)
        self._executor.shutdown(wait=True)

    def _rollback_if_open(self) -> None:  # in the database thread
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    @contextlib.asynccontextmanager
    async def transaction(self, begin_with_first_statement: bool = False) -> AsyncIterator[SqliteSession]:
        # always so here: the first statement carries BEGIN IMMEDIATE in its hop to the thread
        if self._conn is None:
            raise StoreUnavailable(f"sqlite {self.path}: store is not open")
        committed = False
        async with self._lock:
            s = SqliteSession(self)
            try:
                yield s
            except BaseException:
                # Not `if s._begun`: cancelled while a statement was still queued for the thread,
                # that statement (BEGIN included) runs after we looked. The rollback is queued
                # behind it, and runs even if we are cancelled again: the thread takes jobs in order.
                with contextlib.suppress(Exception):
                    await self._call(self._rollback_if_open)
                raise
            if s._begun:
                if s._rollback_only:
                    await self._call(self._rollback_if_open)
                else:
                    def commit() -> None:
                        try:
                            self._conn.execute("COMMIT")
                        except BaseException:
                            self._conn.execute("ROLLBACK")
                            raise
                    await self._call(commit)
                    committed = True
            else:
                committed = not s._rollback_only
        await s._run_callbacks(committed)

    async def begin_message(self, s: SqliteSession, group: str, rid: str, info: MessageInfo, now: int,
                            confirm: bool) -> tuple[str, str | None]:
        return (await self.begin_messages(s, group, [(rid, info)], now, confirm))[0]

    async def begin_messages(self, s: SqliteSession, group: str, items: list[tuple[str, MessageInfo]], now: int,
                             confirm: bool) -> list[tuple[str, str | None]]:
        # the transaction holds SQLite's write lock: no other claim of these rows can be in flight,
        # so there is no BUSY here. One hop to the database thread for all of them.
        insert, select, update = self._log_insert(), f"SELECT status FROM {self.stub_table} WHERE id = ?", \
            self._confirm_sql()

        def work():
            conn = s._begin()
            out = []
            for rid, info in items:
                if conn.execute(insert, self._log_params(group, rid, info, now)).rowcount != 1:
                    out.append((DONE, None))
                    continue
                if not confirm:
                    out.append((CLAIMED, None))
                    continue
                row = conn.execute(select, (rid,)).fetchone()
                if row is not None and row[0] in (UNCONFIRMED, MANUAL):
                    conn.execute(update, (now, now, rid))
                out.append((CLAIMED, row[0] if row else None))
            return out
        return await self._call(work)
