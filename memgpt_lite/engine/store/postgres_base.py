"""What the Postgres store's parts share: its connection and statements, transactions, one
sentence for every database failure, revisions and the ids counted per agent.

The base class of `postgres.PostgresStore`; its mixins (postgres_recall.py, ...) use these.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from memgpt_lite.engine.store.base import IntegrityProblem, StoreError
from memgpt_lite.engine.text import clean_text, clean_value


def dumps(value: Any) -> str:
    """JSON for a stored column, as the SQLite store writes it."""
    return json.dumps(clean_value(value), ensure_ascii=False)


def pg_text(text: str) -> str:
    """Text as Postgres can hold it: valid Unicode (the one rule) without U+0000, which a
    Postgres text value cannot contain; it becomes U+FFFD like other unstorable text."""
    return clean_text(text).replace("\x00", "\ufffd")


def display_url(url: str) -> str:
    """The URL without its password: postgresql://user@host:port/dbname."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.Error:
        return re.sub(r"(://[^:/@]*):[^@]*@", r"\1@", url)
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{host}{port}/{parts.get('dbname') or ''}"


def pg_error(where: str, exc: BaseException) -> BaseException:
    """One sentence for the user about a failed database operation, or `exc` itself when it
    is a bug (SQL the server did not understand is ours to fix, not the user's)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, pg_errors.DiskFull):
        return StoreError(f"The database server of {where} is out of disk space ({first}); "
                          "nothing of the failed write was kept.")
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return StoreError(f"The database user of {where} may not do this ({first}).")
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return StoreError(f"The database {where} is read-only ({first}); point "
                          "MEMGPT_LITE_DATABASE_URL at the primary server.")
    if isinstance(exc, psycopg.IntegrityError):
        return IntegrityProblem(f"The database {where} refused the write ({first}).", first)
    if isinstance(exc, psycopg.OperationalError):
        return StoreError(f"The database {where} cannot be used: {first}.")
    if isinstance(exc, psycopg.DataError):
        return StoreError(f"The database {where} refused a value ({first}).")
    return exc


class PgBase:
    """The connection and what every write of the Postgres store goes through."""

    _conn: psycopg.Connection
    _where: str
    _depth: int
    _decoded: dict

    # ---------------------------------------------------------------- statements

    def _x(self, sql: str, params: Any = None) -> psycopg.Cursor:
        try:
            return self._conn.execute(sql, params)
        except psycopg.Error as exc:
            raise pg_error(self._where, exc) from None

    def _q(self, sql: str, params: Any = None) -> list[tuple]:
        return self._x(sql, params).fetchall()

    def _many(self, sql: str, rows: list[Any]) -> None:
        if not rows:
            return
        try:
            with self._conn.cursor() as cur:
                cur.executemany(sql, rows)
        except psycopg.Error as exc:
            raise pg_error(self._where, exc) from None

    @staticmethod
    def _dumps(value: Any) -> str:
        return dumps(value)

    # ---------------------------------------------------------------- transactions, schema

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One database transaction; nested calls join the outer one. Rolls back on any
        exception (Ctrl-C included: psycopg cancels the statement first)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._depth = 1
        try:
            with self._conn.transaction():
                yield
        except psycopg.Error as exc:
            self._decoded.clear()  # it may hold content read inside the undone transaction
            raise pg_error(self._where, exc) from None
        except BaseException:
            self._decoded.clear()
            raise
        finally:
            self._depth = 0

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """A repeatable-read transaction: every read inside sees one state of the data."""
        if self._depth:
            yield
            return
        with self.transaction():
            self._x("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    # ---------------------------------------------------------------- revisions, ids

    def _bump(self, agent_id: int) -> int:
        """The agent's next revision, for the rows a write changes (inside its transaction).
        It also locks the agent's row until the transaction ends, so writers of one agent
        take turns, and ids counted per agent (`_next_id`) cannot collide."""
        rows = self._q("UPDATE agents SET rev = rev + 1 WHERE id = %s RETURNING rev",
                       (agent_id,))
        return rows[0][0] if rows else 0

    def _next_id(self, table: str, agent_id: int) -> int:
        """The id the agent's next row of `table` gets: its highest + 1, as SQLite gives a
        file holding that agent alone (a replay); call after `_bump`."""
        return self._q(f"SELECT coalesce(max(id), 0) + 1 FROM {table} WHERE agent_id = %s",
                       (agent_id,))[0][0]

    def _tombstones(self, agent_id: int, kind: str, ids: list[int]) -> None:
        if ids:
            rev = self._bump(agent_id)
            self._many("INSERT INTO tombstones (agent_id, kind, row_id, rev) "
                       "VALUES (%s, %s, %s, %s)", [(agent_id, kind, i, rev) for i in ids])

    def revision(self, agent_id: int) -> int:
        rows = self._q("SELECT rev FROM agents WHERE id = %s", (agent_id,))
        return rows[0][0] if rows else 0

