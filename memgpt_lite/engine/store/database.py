"""The seam between the store's domain code and a database: `Database`, a small interface
that `sqlite/database.py` and `postgres/database.py` implement.

Every domain module (agents, blocks, recall, archive, turns, vectors, forget) is written once,
against this interface, in SQL both databases read alike: `?` placeholders (the Postgres
side turns them into its own), `IN (?, ?)` lists (`marks`), `INSERT ... ON CONFLICT DO
UPDATE`, no `RETURNING` (old SQLite lacks it: `insert` hands back the new id instead). What
truly differs is named here, each with one line of why; everything else about a backend
(its keyword index, locks, wiping freed text, migrations) is the backend's own.

Rows come back as plain tuples, in the order of the SELECT.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from memgpt_lite.engine.text import clean_value

Row = tuple[Any, ...]
Params = Sequence[Any]


def marks(count: int) -> str:
    """`?, ?, ?`: the placeholders of an `IN (...)` list of `count` values."""
    return ", ".join("?" * count)


def dumps(value: Any) -> str:
    """JSON for a stored column, unicode kept; text that is not valid Unicode is cleaned
    (`text.clean_text`) like everywhere else, so what is stored can be exported, recorded
    and sent as it is. Both backends store JSON as text: what is stored reads back byte for
    byte (a JSON type would reorder keys, and the prompt cache would see other bytes)."""
    return json.dumps(clean_value(value), ensure_ascii=False)


class Database(Protocol):
    """One connection to a store's database (not for concurrent use by several threads).

    Statements commit on their own unless run inside `transaction()`, whose nested uses join
    the outermost one; any exception rolls the whole transaction back. Failures come out as
    `StoreError` (one sentence for the user) or `IntegrityProblem` (a rule of the schema was
    broken); SQL the database did not understand is a bug and raises as it is."""

    location: str  # where the data lives, for people: a path, or a URL without its password
    # Ids of an agent's rows (messages, blocks, passages...) are counted per agent (Postgres:
    # many agents in one database, yet a replay in a SQLite file of one agent must hand out
    # the same ids) or by the database for the whole file (SQLite).
    ids_per_agent: bool

    # ---------------------------------------------------------------- statements
    def query(self, sql: str, params: Params = ()) -> list[Row]: ...
    def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; returns how many rows it changed."""
        ...

    def executemany(self, sql: str, rows: Sequence[Params]) -> None: ...
    def insert(self, sql: str, params: Params = ()) -> int:
        """Run one INSERT of a table whose `id` the database assigns; returns that id."""
        ...

    def insert_rows(self, sql: str, rows: Sequence[Params]) -> list[int]:
        """Run one INSERT for each row, whose first parameter is its id (None where the
        database assigns it: `next_id`); returns the ids in order."""
        ...

    def next_id(self, table: str, agent_id: int) -> int | None:
        """The id the agent's next row of `table` gets, or None where the database assigns
        it (SQLite: an INTEGER PRIMARY KEY given NULL). Call after the agent's revision was
        bumped in the same transaction (on Postgres that locks the agent's row, so two
        writers cannot take the same id)."""
        ...

    def stream(self, sql: str, params: Params, size: int) -> Iterator[list[Row]]:
        """The rows of a large query in chunks of `size`, never all of them in memory."""
        ...

    # ---------------------------------------------------------------- transactions
    def transaction(self) -> AbstractContextManager[None]: ...
    def read_snapshot(self) -> AbstractContextManager[None]:
        """Every read inside sees one consistent state of the data."""
        ...

    @property
    def in_transaction(self) -> bool: ...
    def on_rollback(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever a transaction is rolled back (caches of rows read inside
        it must go)."""
        ...

    def lock(self, key: int) -> None:
        """Hold the lock `key` until the transaction ends (Postgres: an advisory lock;
        SQLite's writers already hold the whole file's write lock, so nothing)."""
        ...

    # ---------------------------------------------------------------- SQL that differs
    def text(self, value: str) -> str:
        """Text as this database can hold it (clean Unicode; Postgres cannot hold U+0000)."""
        ...

    def for_update(self) -> str:
        """The clause that locks the rows a SELECT reads until the transaction ends (Postgres
        `FOR UPDATE`; SQLite writers hold the file's write lock already, so '')."""
        ...

    def indexed_by(self, index: str) -> str:
        """SQLite's `INDEXED BY index` (its planner needs the hint on a hot path); ''."""
        ...

    def unindexed(self, column: str) -> str:
        """`column` written so that the planner does not use an index on it (SQLite: a few
        keys are looked up by id, not by scanning the agent's rows); itself elsewhere."""
        ...

    def any_of(self, json_column: str, values: list[str]) -> tuple[str, list[Any]]:
        """A condition true when the JSON list in `json_column` holds any of `values`."""
        ...

    def same_text(self, column: str, value: str) -> tuple[str, list[Any]]:
        """A condition true when `column` equals `value`, through an index when the text may
        be long (Postgres indexes a digest: a btree entry has a size limit)."""
        ...

    def text_filter(self, pattern: Callable[[object], bool] | None) -> Callable[[str], str]:
        """SQL over a column that is true for every row whose text may satisfy `pattern`
        (a cheap pre-filter; the caller checks each row it returns exactly): SQLite calls the
        Python function; Postgres cannot, so every row with text passes."""
        ...

    def columns(self, table: str) -> set[str]:
        """The columns `table` has ({} when there is no such table: a base snapshot written
        before it existed)."""
        ...

    def tables(self) -> set[str]: ...
    def close(self) -> None: ...


class Transactions:
    """What both databases do alike with transactions: nested uses join the outermost one,
    and every rollback drops what `on_rollback` callbacks hold. A database gives
    `_outermost()`: the real transaction, which rolls back on any exception and raises the
    database's failure as one sentence."""

    _depth = 0

    def __init__(self) -> None:
        self._rollback: list[Callable[[], None]] = []

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._depth = 1
        try:
            with self._outermost():
                yield
        except BaseException:
            for callback in self._rollback:
                callback()
            raise
        finally:
            self._depth = 0

    def _outermost(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    @property
    def in_transaction(self) -> bool:
        return bool(self._depth)

    def on_rollback(self, callback: Callable[[], None]) -> None:
        self._rollback.append(callback)

