"""The database seam (`store/database.py`) on a Postgres server, through psycopg 3.

One autocommit connection per store; `transaction()` opens a real transaction (nested uses
join it). The domain code's `?` placeholders become psycopg's `%s` here, once per statement
text (cached). Every database failure becomes one sentence for the user, except SQL the
server did not understand, which is ours to fix and raises as it is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from memgpt_lite.engine.store.base import ConnectionLost, IntegrityProblem, StoreBusy, StoreError
from memgpt_lite.engine.store.database import Params, Row, Transactions
from memgpt_lite.engine.text import clean_text

SCHEMA = "memgpt_lite"
LOCK_WAIT = "5s"  # SQLite's busy_timeout (sqlite/database.py)


def pg_text(text: str) -> str:
    """Text as Postgres can hold it: valid Unicode (the one rule) without U+0000, which a
    Postgres text value cannot contain; it becomes U+FFFD like other unstorable text."""
    return clean_text(text).replace("\x00", "\ufffd")


_PASSWORD = re.compile(r"(://[^:/@]*):([^@]*)@")


def display_url(url: str) -> str:
    """The URL without its password: postgresql://user@host:port/dbname."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.Error:
        return _PASSWORD.sub(r"\1@", url)
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{host}{port}/{parts.get('dbname') or ''}"


def _without_password(message: str, url: str) -> str:
    """`message` without the URL's password: libpq quotes a URL it cannot parse whole."""
    message = message.replace(url, display_url(url))
    found = _PASSWORD.search(url)
    return message.replace(found.group(2), "***") if found and found.group(2) else message


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
    if isinstance(exc, pg_errors.LockNotAvailable):
        return StoreBusy(f"The database {where} is locked by another process ({first}); "
                          "close it and try again.")
    if isinstance(exc, psycopg.IntegrityError):
        return IntegrityProblem(f"The database {where} refused the write ({first}).", first)
    if isinstance(exc, psycopg.OperationalError):
        return StoreError(f"The database {where} cannot be used: {first}.")
    if isinstance(exc, psycopg.DataError):
        return StoreError(f"The database {where} refused a value ({first}).")
    return exc


@functools.lru_cache(maxsize=2048)
def translate(sql: str) -> str:
    """`?` placeholders as psycopg's `%s` (outside quoted text), a literal `%` doubled."""
    parts = re.split(r"('(?:[^']|'')*')", sql)
    return "".join(p if i % 2 else p.replace("%", "%%").replace("?", "%s")
                   for i, p in enumerate(parts))


class PostgresDatabase(Transactions):
    """The `Database` seam on one Postgres connection (see the module docstring)."""

    ids_per_agent = True

    def __init__(self, url: str):
        self.url = url
        self.location = display_url(url)
        super().__init__()
        try:
            self.connection = psycopg.connect(url, autocommit=True, connect_timeout=10,
                                              application_name="memgpt-lite")
        except psycopg.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no reason given"
            raise StoreError(f"Cannot connect to the database {self.location}: "
                             f"{_without_password(first, url)}.") from None
        # A lock another session holds (a transaction left open, a process stopped mid-write)
        # is waited for as long as SQLite's busy timeout, then the statement fails with a
        # sentence: a server such as `memgpt-lite mcp` would otherwise never answer.
        self._run(f"SET lock_timeout = '{LOCK_WAIT}'")

    def _failed(self, exc: psycopg.Error) -> BaseException:
        """What a failed statement raises: ConnectionLost when it closed the connection (the
        server restarted or went away; a new connection may work), else `pg_error`'s."""
        if self.connection.closed:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "it closed"
            return ConnectionLost(f"The database {self.location} cannot be used: the "
                                  f"connection was lost ({first}).")
        return pg_error(self.location, exc)

    def _run(self, sql: str, params: Params = ()) -> psycopg.Cursor:
        """A statement without parameters goes as it is (the simple protocol: a migration's
        script of several statements, VACUUM)."""
        try:
            if not params:
                return self.connection.execute(sql)
            return self.connection.execute(translate(sql), tuple(params))
        except psycopg.Error as exc:
            raise self._failed(exc) from None

    # ---------------------------------------------------------------- statements

    def query(self, sql: str, params: Params = ()) -> list[Row]:
        return self._run(sql, params).fetchall()

    def execute(self, sql: str, params: Params = ()) -> int:
        return self._run(sql, params).rowcount

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        if not rows:
            return
        try:
            with self.connection.cursor() as cur:
                cur.executemany(translate(sql), [tuple(r) for r in rows])
        except psycopg.Error as exc:
            raise self._failed(exc) from None

    def insert(self, sql: str, params: Params = ()) -> int:
        return self._run(sql + " RETURNING id", params).fetchone()[0]  # type: ignore[index]

    def insert_rows(self, sql: str, rows: Sequence[Params]) -> list[int]:
        self.executemany(sql, rows)  # the ids are given (next_id): one batch
        return [row[0] for row in rows]

    def next_id(self, table: str, agent_id: int) -> int | None:
        return self.query(f"SELECT coalesce(max(id), 0) + 1 FROM {table} WHERE agent_id = ?",
                          (agent_id,))[0][0]

    def stream(self, sql: str, params: Params, size: int) -> Iterator[list[Row]]:
        with self.transaction():  # a server-side cursor lives in a transaction
            cur = self.connection.cursor(name="memgpt_lite_stream")
            try:
                cur.execute(translate(sql), tuple(params))
                while rows := cur.fetchmany(size):
                    yield rows
            except psycopg.Error as exc:
                raise self._failed(exc) from None
            finally:
                cur.close()

    # ---------------------------------------------------------------- transactions

    @contextmanager
    def _outermost(self) -> Iterator[None]:
        """Rolls back on any exception (Ctrl-C included: psycopg cancels the statement)."""
        try:
            with self.connection.transaction():
                yield
        except psycopg.Error as exc:
            raise self._failed(exc) from None

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """A repeatable-read transaction: every read inside sees one state of the data."""
        if self._depth:
            yield
            return
        with self.transaction():
            self.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield


    def lock(self, key: int) -> None:
        self.execute("SELECT pg_advisory_xact_lock(?)", (key,))

    # ---------------------------------------------------------------- SQL that differs

    def text(self, value: str) -> str:
        return pg_text(value)

    def for_update(self) -> str:
        return " FOR UPDATE"

    def indexed_by(self, index: str) -> str:
        return ""

    def unindexed(self, column: str) -> str:
        return column

    def any_of(self, json_column: str, values: list[str]) -> tuple[str, list[Any]]:
        return f"jsonb_exists_any(({json_column})::jsonb, ?::text[])", [list(values)]

    def same_text(self, column: str, value: str) -> tuple[str, list[Any]]:
        return f"md5({column}) = md5(?) AND {column} = ?", [value, value]

    def text_filter(self, pattern: Callable[[object], bool] | None) -> Callable[[str], str]:
        # Postgres cannot call Python; a regex of its own could fold case otherwise than
        # Python and miss a match, so every row with text is read and checked.
        return lambda column: f"({column} IS NOT NULL)"

    def columns(self, table: str) -> set[str]:
        return {r[0] for r in self.query(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = "
            "current_schema() AND table_name = ?", (table,))}

    def tables(self) -> set[str]:
        return {r[0] for r in self.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ?",
            (SCHEMA,))}

    def close(self) -> None:
        self.connection.close()
