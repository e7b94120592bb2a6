"""The SQLite store: agents, core memory blocks (+ history), every message, archival passages.

One file per data directory. WAL so a reader never blocks the writer, a busy timeout so two
processes wait instead of failing, foreign keys so deleting an agent deletes its memory.
Schema changes are the named, append-only migrations of `migrations.py`, recorded in a
ledger table. Core memory blocks live in `sqlite_blocks.py`, messages in `sqlite_recall.py`,
passages in `sqlite_archive.py`, embeddings in `sqlite_vectors.py`, each agent's full-text
indexes in `fts.py`; search runs FTS5 with BM25 on the queries that `search.py` builds.

Every write to an agent's rows bumps the agent's revision and stamps the rows it changed
(deleted rows leave a tombstone), so a recording can carry only what changed since a base
snapshot (`snapshot.py`).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memgpt_lite.engine import locking
from memgpt_lite.engine.records import now_iso
from memgpt_lite.engine.store import fts
from memgpt_lite.engine.store.base import (
    HISTORY_TABLES,
    SNAPSHOT_TABLES,
    AgentRow,
    AgentWatch,
    StoreError,
)
from memgpt_lite.engine.store.migrations import MIGRATIONS
from memgpt_lite.engine.store.sqlite_archive import ArchiveMixin
from memgpt_lite.engine.store.sqlite_blocks import BlocksMixin
from memgpt_lite.engine.store.sqlite_forget import ForgetMixin
from memgpt_lite.engine.store.sqlite_recall import RecallMixin
from memgpt_lite.engine.store.sqlite_turns import TurnsMixin
from memgpt_lite.engine.store.sqlite_vectors import VectorMixin
from memgpt_lite.engine.text import clean_text, clean_value

SQLITE_HEADER = b"SQLite format 3\x00"


def dumps(value: Any) -> str:
    """JSON for a stored column, unicode kept; text that is not valid Unicode is cleaned
    (`text.clean_text`) like everywhere else, so what is stored can be exported, recorded
    and sent as it is."""
    return json.dumps(clean_value(value), ensure_ascii=False)


def sqlite_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """One sentence for the user about a failed SQLite operation on `path`."""
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        msg = f"The database {path} is locked by another process; close it and try again."
    elif "readonly" in text or "read-only" in text:
        msg = f"The database {path} is read-only; check its permissions."
    elif "unable to open" in text and not os.access(path.parent, os.W_OK):
        # WAL mode needs to create files beside the database, so a read-only folder
        # fails at open time with SQLite's generic message.
        msg = (f"The data dir {path.parent} is read-only; make it writable or point "
               f"MEMGPT_LITE_HOME at another folder.")
    elif "full" in text:
        msg = f"The disk holding {path} is full; free some space and try again."
    elif "not a database" in text or "malformed" in text:
        msg = f"{path} is not a readable memgpt-lite database; it was left untouched."
    else:
        msg = f"The database {path} failed: {exc}."
    return StoreError(msg)


_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER", "BEGIN IMMEDIATE",
           "VACUUM", "REINDEX")


def _damaged_file(exc: BaseException) -> bool:
    """SQLite's words for a file whose pages are damaged (SQLITE_CORRUPT, SQLITE_NOTADB)."""
    text = str(exc).lower()
    return type(exc) is sqlite3.DatabaseError and ("malformed" in text or "not a database" in text)


class _Cursor(sqlite3.Cursor):
    """A cursor whose damaged-file errors become `_Connection.damage` (see there)."""

    connection: _Connection

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:  # type: ignore[override]
        self.connection.refuse_writes(sql)
        return self.connection.guard(super().execute, sql, parameters)

    def executemany(self, sql: str, seq: Any, /) -> _Cursor:  # type: ignore[override]
        self.connection.refuse_writes(sql)
        return self.connection.guard(super().executemany, sql, seq)

    def fetchone(self) -> Any:
        return self.connection.guard(super().fetchone)

    def fetchall(self) -> list[Any]:
        return self.connection.guard(super().fetchall)

    def fetchmany(self, size: int = 1) -> list[Any]:  # type: ignore[override]
        return self.connection.guard(super().fetchmany, size)

    def __next__(self) -> Any:
        return self.connection.guard(super().__next__)


class _Connection(sqlite3.Connection):
    """The store's connection. A damaged page can surface from any statement or fetch, as
    sqlite3.DatabaseError; here it becomes one StoreError sentence, and from then on the
    connection refuses every write, so a damaged file is never written to (README "When
    things go wrong")."""

    path: Path
    damage: StoreError | None = None

    def cursor(self, factory: Any = None) -> Any:  # type: ignore[override]
        return super().cursor(factory or _Cursor)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:  # type: ignore[override]
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq: Any, /) -> Any:  # type: ignore[override]
        return self.cursor().executemany(sql, seq)

    def guard(self, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except sqlite3.DatabaseError as exc:
            if not _damaged_file(exc):
                raise
            self.damage = self.damage or StoreError(
                f"The database {self.path} is damaged ({exc}); memgpt-lite will not write to "
                "it. Run `memgpt-lite doctor` to see what can be recovered.")
            raise self.damage from None

    def refuse_writes(self, sql: str) -> None:
        if self.damage is not None and sql.lstrip().upper().startswith(_WRITES):
            raise self.damage


class SQLiteStore(BlocksMixin, RecallMixin, ArchiveMixin, TurnsMixin, VectorMixin,
                  ForgetMixin):
    """All persistent memory in one SQLite file (the `base.Store` protocol). Every read and
    write takes an agent id and touches only that agent's rows. Methods commit on their own
    unless called inside `transaction()`, whose nested uses join the outermost one. Not safe
    for concurrent use from several threads; other processes are fine (WAL + busy timeout)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self._depth = 0
        # Decoded content of queue messages by id, so building each request does not parse
        # the whole queue's JSON again (see context_messages).
        self._decoded: dict[int, tuple[list, list | None]] = {}
        self._data_version = -1
        self._open_turns: dict[int, int] = {}
        self._watches: dict[int, AgentWatch] = {}  # see BlocksMixin.watch
        _prepare_file(self.path)
        self.read_only = self.path.exists() and not os.access(self.path.parent, os.W_OK)
        if self.read_only:
            self._open_read_only()
            return
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                       factory=_Connection)
        except sqlite3.Error as exc:
            raise sqlite_error(self.path, exc) from None
        self._db.path = self.path
        self._db.row_factory = sqlite3.Row
        try:
            # Before the first read: a second process creating the same new file holds
            # its lock for a moment, and without a timeout the read fails at once.
            self._db.execute("PRAGMA busy_timeout = 5000")
            self._check_schema()  # read-only: a foreign or newer file is never touched
            self._db.execute("PRAGMA foreign_keys = ON")
            # What is deleted or rewritten is zeroed in the file, not left in free space: a
            # forget must leave no copy behind (see sqlite_forget.py).
            self._db.execute("PRAGMA secure_delete = ON")
            self._enable_wal()
            self._db.execute("PRAGMA synchronous = NORMAL")  # safe with WAL; fsync per checkpoint
            self._migrate()
        except StoreError:
            self._db.close()
            raise
        except sqlite3.Error as exc:
            self._db.close()
            raise sqlite_error(self.path, exc) from None

    def _open_read_only(self) -> None:
        """A database in a folder that cannot be written (a read-only mount, a backup):
        opened for reading, so listing, showing and exporting its agents work. SQLite's
        write-ahead log needs files beside the database; without them (`immutable`) it reads
        the database file alone, which nothing can be writing on a read-only medium. Every
        write is refused in one sentence (see sqlite_error); migrations never run."""
        uri = self.path.resolve().as_uri()
        for flags in ("?mode=ro", "?mode=ro&immutable=1"):
            try:
                self._db = sqlite3.connect(uri + flags, uri=True, isolation_level=None,
                                           check_same_thread=False, factory=_Connection)
                self._db.path = self.path
                self._db.row_factory = sqlite3.Row
                self._check_schema()
                if self._pending_migrations():
                    raise StoreError(f"The data dir {self.path.parent} is read-only and its "
                                     f"database is from an older memgpt-lite, which must "
                                     f"upgrade it first; make it writable once.")
                return
            except sqlite3.Error as exc:
                self._db.close()
                error = exc
        raise sqlite_error(self.path, error) from None

    def _pending_migrations(self) -> bool:
        try:
            done = {r[0] for r in self._db.execute("SELECT name FROM schema_migrations")}
        except sqlite3.OperationalError:
            return True
        return any(name not in done for name, _ in MIGRATIONS)

    def _enable_wal(self) -> None:
        """Switch a new file to WAL. Two processes creating the same file can both be
        switching it at once; SQLite then refuses one at once (to avoid a deadlock) instead of
        waiting, so try again for as long as the busy timeout would have waited."""
        deadline = time.monotonic() + 5
        while True:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @classmethod
    def open_default(cls) -> SQLiteStore:
        from memgpt_lite.engine import config  # config reads the environment; stores need not

        return cls(config.db_path())

    @property
    def location(self) -> str:
        return str(self.path)

    def reopen(self) -> SQLiteStore:
        return type(self)(self.path)

    def agent_lock(self, name: str) -> locking.AgentLock:
        """A lock file per agent beside the database (see locking.py)."""
        return locking.AgentLock(self.path.parent, name)

    def close(self) -> None:
        self._db.close()

    @property
    def damage(self) -> StoreError | None:
        """The error of a damaged page met in this file, if any (the store writes no more)."""
        return getattr(self._db, "damage", None)

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- transactions, schema

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE (take the write lock up front, so busy_timeout applies); nested
        calls join the outer transaction. Rolls back on any exception."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise sqlite_error(self.path, exc) from None
        self._depth = 1
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException as exc:
            self._decoded.clear()  # it may hold content read inside the undone transaction
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise sqlite_error(self.path, exc) from exc
            raise
        finally:
            self._depth = 0

    def _check_schema(self) -> None:
        tables = {r[0] for r in self._db.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        if not tables:
            return
        if "schema_migrations" not in tables:
            raise StoreError(f"{self.path} is a SQLite database from another program, not "
                             "memgpt-lite; it was left untouched.")
        known = {name for name, _ in MIGRATIONS}
        unknown = [n for n in self.applied_migrations() if n not in known]
        if unknown:
            raise StoreError(f"{self.path} was written by a newer memgpt-lite (unknown schema "
                             f"migration {unknown[0]!r}); upgrade memgpt-lite to open it.")

    def _migrate(self) -> None:
        self._db.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                         "name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        for name, apply in MIGRATIONS:
            with self.transaction():
                done = self._db.execute(
                    "SELECT 1 FROM schema_migrations WHERE name = ?", (name,)).fetchone()
                if done:
                    continue
                apply(self._db)
                self._db.execute("INSERT INTO schema_migrations VALUES (?, ?)",
                                 (name, now_iso()))

    def applied_migrations(self) -> list[str]:
        return [r[0] for r in self._db.execute(
            "SELECT name FROM schema_migrations ORDER BY rowid")]

    def schema_version(self) -> int:
        return len(self.applied_migrations())

    def _q(self, sql: str, params: tuple | list = ()) -> list[sqlite3.Row]:
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            raise self._error(exc) from exc

    def _error(self, exc: sqlite3.Error) -> StoreError:
        return sqlite_error(self.path, exc)

    @staticmethod
    def _dumps(value: Any) -> str:
        return dumps(value)

    # ---------------------------------------------------------------- revisions

    def _bump(self, agent_id: int) -> int:
        """The agent's next revision, for the rows a write changes (inside its transaction)."""
        self._db.execute("UPDATE agents SET rev = rev + 1 WHERE id = ?", (agent_id,))
        row = self._db.execute("SELECT rev FROM agents WHERE id = ?", (agent_id,)).fetchone()
        return row[0] if row else 0

    def _tombstones(self, agent_id: int, kind: str, ids: list[int]) -> None:
        if ids:
            rev = self._bump(agent_id)
            self._db.executemany(
                "INSERT INTO tombstones (agent_id, kind, row_id, rev) VALUES (?, ?, ?, ?)",
                [(agent_id, kind, i, rev) for i in ids])

    # ---------------------------------------------------------------- agents

    def create_agent(self, name: str, settings: dict,
                     blocks: dict[str, tuple[str, int]]) -> AgentRow:
        with self.transaction():
            if self.get_agent(name) is not None:
                raise StoreError(f"An agent named {name!r} already exists.")
            cur = self._db.execute(
                "INSERT INTO agents (name, model, settings, created_at, uid) "
                "VALUES (?, ?, ?, ?, ?)",
                (name, str(settings.get("model", "")), dumps(settings), now_iso(),
                 secrets.token_hex(8)))
            fts.create(self._db, cur.lastrowid)
            for label, (value, limit) in blocks.items():
                self.set_block(cur.lastrowid, label, value, limit, source="init")
        return self.get_agent_by_id(cur.lastrowid)  # type: ignore[return-value]

    @staticmethod
    def _agent(row: sqlite3.Row | None) -> AgentRow | None:
        if row is None:
            return None
        return AgentRow(row["id"], row["name"], row["model"], json.loads(row["settings"]),
                        row["summary"], row["created_at"], row["last_used_at"], row["uid"],
                        json.loads(row["state"] or "{}"))

    def get_agent(self, name: str) -> AgentRow | None:
        rows = self._q("SELECT * FROM agents WHERE name = ?", (name,))
        return self._agent(rows[0] if rows else None)

    def get_agent_by_id(self, agent_id: int) -> AgentRow | None:
        rows = self._q("SELECT * FROM agents WHERE id = ?", (agent_id,))
        return self._agent(rows[0] if rows else None)

    def list_agents(self) -> list[AgentRow]:
        rows = self._q("SELECT * FROM agents ORDER BY name")
        return [self._agent(r) for r in rows]  # type: ignore[misc]

    def _require_agent(self, name: str) -> AgentRow:
        agent = self.get_agent(name)
        if agent is None:
            raise StoreError(f"There is no agent named {name!r}.")
        return agent

    def agent_stats(self, agent_id: int) -> dict:
        m = self._q("SELECT count(*), count(DISTINCT turn_id) FROM messages WHERE agent_id = ?",
                    (agent_id,))[0]
        agent = self.get_agent_by_id(agent_id)
        return {"turns": m[1], "messages": m[0], "passages": self.count_passages(agent_id),
                "last_used_at": agent.last_used_at if agent else None}

    def revision(self, agent_id: int) -> int:
        """The agent's current revision (see the module docstring)."""
        rows = self._q("SELECT rev FROM agents WHERE id = ?", (agent_id,))
        return rows[0][0] if rows else 0

    def _update_agent(self, agent_id: int, column: str, value: Any) -> None:
        with self.transaction():
            self._db.execute(f"UPDATE agents SET {column} = ? WHERE id = ?", (value, agent_id))

    def update_settings(self, agent_id: int, settings: dict) -> None:
        with self.transaction():
            self._update_agent(agent_id, "settings", dumps(settings))
            if "model" in settings:
                self._update_agent(agent_id, "model", str(settings["model"]))

    def set_summary(self, agent_id: int, summary: str) -> None:
        with self.transaction():
            if self.open_turn(agent_id) is not None:
                old = self._q("SELECT summary FROM agents WHERE id = ?", (agent_id,))
                self._journal(agent_id, "summary", "", old[0][0] if old else "")
            self._update_agent(agent_id, "summary", clean_text(summary))

    def set_state(self, agent_id: int, state: dict) -> None:
        """The agent's runtime state (what the engine learned and must keep across
        restarts), stored as given."""
        self._update_agent(agent_id, "state", dumps(state))

    def restore_agent(self, agent_id: int, *, summary: str, created_at: str,
                      last_used_at: str | None, state: dict | None = None) -> None:
        with self.transaction():
            self._db.execute("UPDATE agents SET summary = ?, created_at = ?, last_used_at = ?, "
                             "state = ? WHERE id = ?", (clean_text(summary), created_at,
                                                        last_used_at, dumps(state or {}),
                                                        agent_id))

    def touch(self, agent_id: int) -> None:
        self._update_agent(agent_id, "last_used_at", now_iso())

    def rename_agent(self, old: str, new: str) -> None:
        with self.transaction():
            agent = self._require_agent(old)
            if self.get_agent(new) is not None:
                raise StoreError(f"An agent named {new!r} already exists.")
            self._update_agent(agent.id, "name", new)

    def delete_agent(self, name: str) -> None:
        """Delete the agent and everything of it; a user-scope block goes only when no other
        agent uses it."""
        self._decoded.clear()  # message ids can be reused after a delete
        with self.transaction():
            agent = self._require_agent(name)
            fts.drop(self._db, agent.id)
            self._db.execute("DELETE FROM agents WHERE id = ?", (agent.id,))  # cascades
            self.drop_unused_shared_blocks()

    # ---------------------------------------------------------------- snapshots

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """One read transaction: what is read inside is one state of the file."""
        if self._depth or self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            self._db.execute("COMMIT")

    def snapshot_rows(self, agent_id: int, table: str,
                      since: int | None = None) -> Iterator[dict[str, Any]]:
        if table not in SNAPSHOT_TABLES:
            raise ValueError(f"not a snapshot table: {table!r}")
        if table == "blocks":  # as the agent sees them: a user-scope block's shared value
            yield from (dict(r) for r in self._q(
                "SELECT b.id, b.agent_id, b.label, coalesce(s.value, b.value) AS value, "
                "coalesce(s.char_limit, b.char_limit) AS char_limit, b.updated_at, b.shared_id "
                "FROM blocks b LEFT JOIN shared_blocks s ON s.id = b.shared_id "
                "WHERE b.agent_id = ? ORDER BY b.id", (agent_id,)))
            return
        where = "id = ?" if table == "agents" else "agent_id = ?"
        params: list[Any] = [agent_id]
        if since is not None and table not in ("agents", "blocks"):
            where += " AND rev > ?"
            params.append(since)
        for row in self._q(f"SELECT * FROM {table} WHERE {where} ORDER BY id", params):
            yield dict(row)

    def tombstones_since(self, agent_id: int, since: int) -> list[tuple[str, int]]:
        return [(r[0], r[1]) for r in self._q(
            "SELECT kind, row_id FROM tombstones WHERE agent_id = ? AND rev > ? ORDER BY rev",
            (agent_id, since))]

    def count_changes(self, agent_id: int, since: int) -> int:
        return sum(self._q(f"SELECT count(*) FROM {t} WHERE agent_id = ? AND rev > ?",
                           (agent_id, since))[0][0]
                   for t in (*HISTORY_TABLES, "tombstones"))

    # ---------------------------------------------------------------- maintenance

    def fts_table(self, kind: str, agent_id: int) -> str:
        """The agent's FTS5 table of `kind` ("messages" or "passages"), for the lab's
        baselines that query FTS5 directly."""
        return fts.table(kind, agent_id)

    def integrity_problems(self) -> list[str]:
        """[] when the file and every agent's search indexes are consistent; else what
        SQLite found (the search indexes are checked only in a file that is sound)."""
        try:  # a plain cursor: damage is what this reports, not a reason to stop
            rows = sqlite3.Cursor(self._db).execute("PRAGMA integrity_check").fetchall()
        except sqlite3.DatabaseError as exc:
            return [str(exc)]
        problems = [r[0] for r in rows if r[0] != "ok"]
        if problems:
            return problems
        for agent in self.list_agents():
            problems += fts.problems(self._db, agent.id, agent.name)
        return problems

    def rebuild_search_index(self, on_agent: Callable[[str], None] | None = None) -> None:
        """Re-index every agent's stored text (FTS5's own rebuild, per agent); `on_agent`
        hears each agent's name once its indexes are rebuilt (for a progress display)."""
        with self.transaction():
            for agent in self.list_agents():
                fts.rebuild(self._db, agent.id)
                if on_agent is not None:
                    on_agent(agent.name)


def _prepare_file(path: Path) -> None:
    """Create the data dir (0700) and the db file (0600) if missing; refuse a file that is
    not SQLite before SQLite touches it."""
    if not path.parent.exists():
        # exist_ok: two processes opening a new data dir at once both get here.
        path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        os.chmod(path.parent, 0o700)
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a memgpt-lite database.")
    if path.exists():
        try:
            with open(path, "rb") as f:
                header = f.read(len(SQLITE_HEADER))
        except OSError as exc:
            raise StoreError(f"{path} cannot be read ({exc.strerror}).") from None
        if header and header != SQLITE_HEADER:
            raise StoreError(f"{path} is not a SQLite database; it was left untouched. "
                             "Move it away or point MEMGPT_LITE_HOME elsewhere.")
        return
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        os.chmod(path, 0o600)
    except OSError as exc:
        raise StoreError(f"Cannot create the database {path} ({exc.strerror}).") from None


Store = SQLiteStore  # the name the SQLite store had before there were two backends
