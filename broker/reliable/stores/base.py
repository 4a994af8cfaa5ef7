"""What the outbox and the idempotent consumer need from a database, written once in portable SQL
(`?` placeholders; the PostgreSQL store rewrites them), with the transaction handling left to each
backend.

Two tables, as in the seed (§6.2.1), named `<prefix>stub` and `<prefix>log`:

* the stub (outbox) table: one row per business message, written before the message is sent;
* the message log: one row per (consumer group, message id) whose handler committed, written in
  the handler's own transaction. Its primary key is what makes processing exactly-once: a second
  claim of the same (group, id) conflicts with the committed row, or waits on an uncommitted one.
"""
from __future__ import annotations

import abc
import contextlib
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.reliable.stub import CONFIRMED, MANUAL, UNCONFIRMED, Stub

log = logging.getLogger("reliable.store")

# claim outcomes
CLAIMED = "claimed"  # this transaction owns the message: run the handler
DONE = "done"  # a committed log row: processed before
BUSY = "busy"  # another live transaction holds the claim (in progress elsewhere)


@dataclass
class MessageInfo:
    """Where the copy being processed came from, kept in the message log."""
    topic: str
    broker_name: str
    queue_id: int
    queue_offset: int
    msg_id: str
    reconsume_times: int


class Session(abc.ABC):
    """One database transaction. `execute`/`fetchall`/`fetchone` take `?` placeholders on every
    backend; `raw` is the driver's own connection (psycopg AsyncConnection, sqlite3.Connection)
    for anything else. Callbacks given to `after_commit` run once the transaction has committed
    and the connection is released (coroutine functions are awaited)."""

    dialect: str

    def __init__(self):
        self._after_commit: list[Callable] = []
        self._after_rollback: list[Callable] = []
        self._rollback_only = False
        # A batch's savepoint for the next handler: established only by its first statement (most
        # handlers of a duplicate-heavy or light workload write nothing: no round trip for them).
        self._pending_savepoint: str | None = None
        self._savepoint: str | None = None  # the pending one, once established
        self._raw_used = False  # `raw` was handed out while a savepoint was pending: it may not cover

    def savepoint(self, name: str) -> None:
        """What the handler does from now on can be undone alone by `rollback_to_savepoint()`. Lazy:
        the SAVEPOINT goes to the database with the first statement after it."""
        self._pending_savepoint, self._savepoint, self._raw_used = name, None, False

    def end_savepoint(self) -> None:
        """The handler's work stands: nothing to establish for it any more."""
        self._pending_savepoint = self._savepoint = None

    def _establish(self) -> str | None:
        """The SAVEPOINT statement to run before the next one (then counted established), or None."""
        name, self._pending_savepoint = self._pending_savepoint, None
        if name is not None:
            self._savepoint = name
            return f"SAVEPOINT {name}"
        return None

    def _raw_handed_out(self) -> None:
        if self._pending_savepoint is not None:
            self._raw_used = True

    async def rollback_to_savepoint(self) -> bool:
        """Undo what was done since `savepoint()`. False when that cannot be guaranteed (the
        handler wrote through `raw` before any statement established the savepoint): the caller
        must give up the whole transaction."""
        name, self._pending_savepoint = self._savepoint, None
        self._savepoint = None
        if name is None:
            return not self._raw_used
        await self._rollback_to(name)
        return True

    @abc.abstractmethod
    async def _rollback_to(self, name: str) -> None: ...

    @property
    def in_error(self) -> bool:
        """The transaction is aborted (PostgreSQL after a failed statement): only a rollback helps."""
        return False

    @property
    @abc.abstractmethod
    def raw(self) -> Any: ...

    @abc.abstractmethod
    async def execute(self, sql: str, params: tuple | list = ()) -> int:
        """Run one statement; its row count."""

    @abc.abstractmethod
    async def fetchall(self, sql: str, params: tuple | list = ()) -> list[tuple]: ...

    @abc.abstractmethod
    async def run(self, fn: Callable[[Any], Any]) -> Any:
        """`fn(raw)` inside this transaction: SQLite calls it in the store's database thread (a
        plain function), PostgreSQL awaits it (a coroutine function taking the AsyncConnection)."""

    async def fetchone(self, sql: str, params: tuple | list = ()) -> tuple | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    def after_commit(self, fn: Callable) -> None:
        self._after_commit.append(fn)

    def after_rollback(self, fn: Callable) -> None:
        self._after_rollback.append(fn)

    def set_rollback_only(self) -> None:
        """End this transaction with a rollback even though no exception left the block."""
        self._rollback_only = True

    async def _run_callbacks(self, committed: bool) -> None:
        for fn in (self._after_commit if committed else self._after_rollback):
            try:
                r = fn()
                if inspect.isawaitable(r):
                    await r
            except Exception:  # a callback's failure must not undo (or hide) the commit
                log.exception("after-%s callback failed", "commit" if committed else "rollback")


class Store(abc.ABC):
    """A database holding the stub and log tables. `open()` connects and creates the schema."""

    dialect: str
    url: str

    def __init__(self, url: str, prefix: str = "reliable_"):
        if not prefix.replace("_", "").isalnum():
            raise ValueError(f"table prefix {prefix!r}: letters, digits and _ only")
        self.url = url
        self.prefix = prefix
        self.stub_table = prefix + "stub"
        self.log_table = prefix + "log"
        self._opened = 0

    # -- lifecycle (backends) ----------------------------------------------------------------------
    async def open(self) -> None:
        """Connect and create the tables (idempotent; one Store may be shared, it is refcounted)."""
        self._opened += 1
        if self._opened == 1:
            await self._open()

    async def close(self) -> None:
        self._opened -= 1
        if self._opened == 0:
            await self._close()

    async def __aenter__(self) -> Store:
        await self.open()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @abc.abstractmethod
    async def _open(self) -> None: ...

    @abc.abstractmethod
    async def _close(self) -> None: ...

    @abc.abstractmethod
    def transaction(self, begin_with_first_statement: bool = False) -> contextlib.AbstractAsyncContextManager[Session]:
        """A transaction: committed when the block ends, rolled back on an exception (cancellation
        included) or after `set_rollback_only()`. `begin_with_first_statement`: the backend may
        hold BEGIN back to send it with the first statement (`raw` is then refused before one)."""

    @abc.abstractmethod
    def ddl(self) -> list[str]: ...

    @abc.abstractmethod
    async def begin_message(self, s: Session, group: str, rid: str, info: MessageInfo, now: int,
                            confirm: bool) -> tuple[str, str | None]:
        """The consumer's first step in the handler's transaction `s`: insert the log row of
        (group, rid) — CLAIMED, DONE (a committed row exists) or BUSY (another live transaction
        holds it and did not finish within the store's lock wait) — and, once claimed, read the
        stub's status and (with `confirm`) confirm it. Confirming before the handler runs is safe:
        a failed handler rolls the confirmation back with everything else; and it keeps the stub's
        row locked until the commit, so a resend worker cannot hand it to manual handling meanwhile.
        Returns (claim, the stub's status before; None without `confirm` or without a stub here)."""

    async def begin_messages(self, s: Session, group: str, items: list[tuple[str, MessageInfo]], now: int,
                             confirm: bool) -> list[tuple[str, str | None]]:
        """`begin_message` for each (rid, info) of a batch (distinct rids), in `s`; backends do it in
        one statement or one hop. A BUSY claim leaves nothing behind and the transaction usable."""
        return [await self.begin_message(s, group, rid, info, now, confirm) for rid, info in items]

    async def withdraw_message(self, s: Session, group: str, rid: str, status: str | None) -> None:
        """Undo a claim of `s` whose handler failed (or whose stub is voided), the rest of the
        batch going on: the log row goes, and a stub the claim confirmed gets back `status`, the one
        it had. Within the claiming transaction this is the same as never having claimed: nobody
        else saw either write, and a claimer waiting on the row gets it when we commit."""
        await s.execute(f"DELETE FROM {self.log_table} WHERE grp = ? AND id = ?", (group, rid))
        if status in (UNCONFIRMED, MANUAL):
            await s.execute(f"UPDATE {self.stub_table} SET status = ?, confirmed_at = NULL WHERE id = ? AND status = ?",
                            (status, rid, CONFIRMED))

    async def claim_message(self, s: Session, group: str, rid: str, info: MessageInfo, now: int) -> str:
        return (await self.begin_message(s, group, rid, info, now, False))[0]

    # -- stubs -------------------------------------------------------------------------------------
    def _stub_select(self) -> str:
        return f"SELECT {', '.join(Stub.COLUMNS)} FROM {self.stub_table}"

    async def insert_stub(self, s: Session, stub: Stub) -> None:
        marks = ", ".join("?" * len(Stub.COLUMNS))
        await s.execute(f"INSERT INTO {self.stub_table} ({', '.join(Stub.COLUMNS)}) VALUES ({marks})", stub.row())

    async def get_stub(self, rid: str) -> Stub | None:
        async with self.transaction() as s:
            row = await s.fetchone(f"{self._stub_select()} WHERE id = ?", (rid,))
        return Stub.from_row(row) if row else None

    async def list_stubs(self, outbox: str | None = None, status: str | None = None, limit: int = 1000) -> list[Stub]:
        where, params = [], []
        if outbox is not None:
            where.append("outbox = ?")
            params.append(outbox)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        sql = self._stub_select() + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY created_at LIMIT ?"
        async with self.transaction() as s:
            rows = await s.fetchall(sql, (*params, limit))
        return [Stub.from_row(r) for r in rows]

    async def mark_sent(self, rid: str, broker_name: str, queue_id: int, queue_offset: int, next_resend_at: int,
                        now: int) -> None:
        """One more send reached the broker: count + 1, where it went, when to look again."""
        async with self.transaction() as s:
            await s.execute(f"UPDATE {self.stub_table} SET count = count + 1, broker_name = ?, queue_id = ?, "
                            "queue_offset = ?, next_resend_at = ?, updated_at = ?, last_error = NULL WHERE id = ?",
                            (broker_name, queue_id, queue_offset, next_resend_at, now, rid))

    async def note_error(self, rid: str, error: str, now: int) -> None:
        async with self.transaction() as s:
            await s.execute(f"UPDATE {self.stub_table} SET last_error = ?, updated_at = ? WHERE id = ?",
                            (error[:2000], now, rid))

    async def due_stubs(self, outbox: str, now: int, limit: int) -> list[Stub]:
        """Unconfirmed stubs of `outbox` whose next look is due, oldest first."""
        async with self.transaction() as s:
            rows = await s.fetchall(f"{self._stub_select()} WHERE outbox = ? AND status = ? AND next_resend_at <= ? "
                                    "ORDER BY next_resend_at LIMIT ?", (outbox, UNCONFIRMED, now, limit))
        return [Stub.from_row(r) for r in rows]

    async def move_due(self, rid: str, seen_next: int, next_resend_at: int, now: int, status: str = UNCONFIRMED) -> bool:
        """Compare-and-set on (status unconfirmed, next_resend_at as seen): a resend worker claims a
        due stub (pushing its next look past the send), postpones it, or hands it to manual
        handling, and two workers never both win the same stub."""
        async with self.transaction() as s:
            n = await s.execute(f"UPDATE {self.stub_table} SET next_resend_at = ?, status = ?, updated_at = ? "
                                "WHERE id = ? AND status = ? AND next_resend_at = ?",
                                (next_resend_at, status, now, rid, UNCONFIRMED, seen_next))
        return n == 1

    async def transition(self, rid: str, to: str, allowed_from: tuple[str, ...], now: int,
                         reset_count: bool = False) -> bool:
        sets = "status = ?, updated_at = ?" + (", confirmed_at = ?" if to == "confirmed" else "")
        params: list = [to, now] + ([now] if to == "confirmed" else [])
        if reset_count:
            sets += ", count = 0, next_resend_at = ?"
            params.append(now)
        marks = ", ".join("?" * len(allowed_from))
        async with self.transaction() as s:
            n = await s.execute(f"UPDATE {self.stub_table} SET {sets} WHERE id = ? AND status IN ({marks})",
                                (*params, rid, *allowed_from))
        return n == 1

    # -- the consumer's side, inside the handler's transaction -------------------------------------
    def _confirm_sql(self) -> str:
        # a stub in manual handling is confirmed too: the message did get processed in the end
        return (f"UPDATE {self.stub_table} SET status = '{CONFIRMED}', confirmed_at = ?, updated_at = ? "
                f"WHERE id = ? AND status IN ('{UNCONFIRMED}', '{MANUAL}')")

    async def processed(self, group: str, rid: str) -> bool:
        async with self.transaction() as s:
            return await s.fetchone(f"SELECT 1 FROM {self.log_table} WHERE grp = ? AND id = ?", (group, rid)) is not None

    async def purge_log(self, older_than_ms: int, limit: int | None = None, group: str | None = None) -> int:
        """Drop log rows older than this (epoch ms), of one consumer group when given, at most
        `limit` of them (the oldest) when given, in one short transaction. A duplicate arriving
        after its row is gone would be processed again: keep rows longer than any resend or
        redelivery can come."""
        where, params = "created_at < ?", [older_than_ms]
        if group is not None:
            where += " AND grp = ?"
            params.append(group)
        async with self.transaction() as s:
            if limit is None:
                return await s.execute(f"DELETE FROM {self.log_table} WHERE {where}", params)
            # the (created_at) index finds the oldest rows; the primary key deletes them
            return await s.execute(f"DELETE FROM {self.log_table} WHERE (grp, id) IN (SELECT grp, id FROM "
                                   f"{self.log_table} WHERE {where} ORDER BY created_at LIMIT ?)", (*params, limit))

    def _log_insert(self) -> str:
        return (f"INSERT INTO {self.log_table} (grp, id, topic, broker_name, queue_id, queue_offset, msg_id, "
                "reconsume_times, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (grp, id) DO NOTHING")

    @staticmethod
    def _log_params(group: str, rid: str, info: MessageInfo, now: int) -> tuple:
        return (group, rid, info.topic, info.broker_name, info.queue_id, info.queue_offset, info.msg_id,
                info.reconsume_times, now)

    def schema_objects(self) -> list[str]:
        """The tables and indexes `ddl()` creates: when all exist, opening runs no DDL at all (a
        CREATE INDEX IF NOT EXISTS still waits for a lock that in-flight handlers' transactions
        hold, which would stall a consumer starting beside busy ones)."""
        return [self.stub_table, f"{self.stub_table}_due", self.log_table, f"{self.log_table}_created"]

    def _ddl(self, blob: str, bigint: str) -> list[str]:
        return [
            f"""CREATE TABLE IF NOT EXISTS {self.stub_table} (
                id TEXT PRIMARY KEY, outbox TEXT NOT NULL, topic TEXT NOT NULL, body {blob} NOT NULL,
                properties TEXT NOT NULL, tags TEXT, keys TEXT, flag INTEGER NOT NULL DEFAULT 0,
                delay_level INTEGER NOT NULL DEFAULT 0, count INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL,
                broker_name TEXT, queue_id INTEGER, queue_offset {bigint}, next_resend_at {bigint} NOT NULL,
                created_at {bigint} NOT NULL, updated_at {bigint} NOT NULL, confirmed_at {bigint}, last_error TEXT)""",
            f"CREATE INDEX IF NOT EXISTS {self.stub_table}_due ON {self.stub_table} (outbox, status, next_resend_at)",
            f"""CREATE TABLE IF NOT EXISTS {self.log_table} (
                grp TEXT NOT NULL, id TEXT NOT NULL, topic TEXT, broker_name TEXT, queue_id INTEGER,
                queue_offset {bigint}, msg_id TEXT, reconsume_times INTEGER, created_at {bigint} NOT NULL,
                PRIMARY KEY (grp, id))""",
            f"CREATE INDEX IF NOT EXISTS {self.log_table}_created ON {self.log_table} (created_at)",
        ]

