"""The SQLite store: all of a data dir's agents in one file (the default backend).

The domains are the store's, written once (store/sql.py); this backend gives them its
database (database.py: WAL, busy timeout, foreign keys, secure_delete, damage refused) and
its FTS5 index (fts.py), and adds what only it does: a lock file per agent (locking.py), its
schema's migrations (migrations.py), zeroing what a forget freed, PRAGMA integrity_check,
and a fast copy of an agent into a base snapshot file (ATTACH).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from memgpt_lite.engine import locking
from memgpt_lite.engine.records import now_iso
from memgpt_lite.engine.store.base import StoreError, upgrade_under_a_chat
from memgpt_lite.engine.store.sql import SQLStore
from memgpt_lite.engine.store.sqlite import fts
from memgpt_lite.engine.store.sqlite.database import SQLiteDatabase, sqlite_error
from memgpt_lite.engine.store.sqlite.migrations import MIGRATIONS
from memgpt_lite.engine.store.tables import HISTORY_TABLES


class SQLiteStore(SQLStore):
    """All persistent memory in one SQLite file (the `base.Store` protocol; see sql.SQLStore
    for the promises). Other processes may use the file at once (WAL + busy timeout)."""

    db: SQLiteDatabase

    def __init__(self, path: str | Path):
        db = SQLiteDatabase(path)
        self.path = db.path
        try:
            self._check_schema(db)  # read-only: a foreign or newer file is never touched
            if db.read_only:
                self._refuse_pending(db)
                super().__init__(db, fts.FTS5Index(db))
                return
            db.configure()
            super().__init__(db, fts.FTS5Index(db))
            self._refuse_upgrade_under_a_chat(db)
            self._migrate()
            db.check_pages()
        except StoreError:
            db.close()
            raise
        except sqlite3.Error as exc:
            db.close()
            raise sqlite_error(db.path, exc) from None

    def reopen(self) -> SQLiteStore:
        return type(self)(self.path)

    def agent_lock(self, name: str) -> locking.AgentLock:
        """A lock file per agent beside the database (see locking.py)."""
        return locking.AgentLock(self.path.parent, name)

    @property
    def damage(self) -> StoreError | None:
        """The error of a damaged page met in this file, if any (the store writes no more)."""
        return self.db.damage

    # ---------------------------------------------------------------- schema

    def _check_schema(self, db: SQLiteDatabase) -> None:
        tables = db.tables()
        problem = schema_problem(db.path, tables,
                                 _applied(db) if "schema_migrations" in tables else [])
        if problem:
            raise StoreError(problem)

    @staticmethod
    def _refuse_pending(db: SQLiteDatabase) -> None:
        """A read-only database must not need a migration (it cannot be written)."""
        done = set(_applied(db)) if "schema_migrations" in db.tables() else set()
        if any(name not in done for name, _ in MIGRATIONS):
            raise StoreError(f"The data dir {db.path.parent} is read-only and its database is "
                             "from an older memgpt-lite, which must upgrade it first; make it "
                             "writable once.")

    @staticmethod
    def _refuse_upgrade_under_a_chat(db: SQLiteDatabase) -> None:
        """An older version's chat still open on this data dir (the user upgraded while it
        ran) would go on writing in the old shape after the upgrade: a summary and alert
        state on the agent's row that the new schema keeps in the conversation, lost. So a
        file that needs migrations is left as it is while any agent's lock is held."""
        done = set(_applied(db)) if "schema_migrations" in db.tables() else set()
        if not done or all(name in done for name, _ in MIGRATIONS):
            return  # a new file, or nothing to upgrade
        pid = locking.held_elsewhere(db.path.parent)
        if pid is not None:
            raise upgrade_under_a_chat(str(db.path), f"pid {pid}" if pid else "")

    def _migrate(self) -> None:
        conn = self.db.connection
        conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                     "name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        for name, apply in MIGRATIONS:
            with self.transaction():
                if self.db.query("SELECT 1 FROM schema_migrations WHERE name = ?", (name,)):
                    continue
                apply(conn)
                conn.execute("INSERT INTO schema_migrations VALUES (?, ?)", (name, now_iso()))

    def applied_migrations(self) -> list[str]:
        return _applied(self.db)

    # ---------------------------------------------------------------- maintenance

    def integrity_problems(self) -> list[str]:
        """[] when the file and every agent's search indexes are consistent; else what
        SQLite found (the search indexes are checked only in a file that is sound)."""
        try:  # a plain cursor: damage is what this reports, not a reason to stop
            rows = sqlite3.Cursor(self.db.connection).execute("PRAGMA integrity_check").fetchall()
        except sqlite3.DatabaseError as exc:
            return [str(exc)]
        problems = [r[0] for r in rows if r[0] != "ok"]
        return problems or super().integrity_problems()

    def wipe_freed(self) -> bool:
        """Leave no freed copy of old text in the file or its WAL (the store runs with
        secure_delete, so freed pages are zeroed): rewrite the file once if it predates
        secure_delete, then checkpoint and truncate the WAL. False when another process
        kept the WAL from being emptied (its old pages go at the next checkpoint)."""
        if self.db.query("SELECT 1 FROM store_flags WHERE name = 'vacuum_on_forget'"):
            self.db.execute("VACUUM")
            self.db.execute("DELETE FROM store_flags WHERE name = 'vacuum_on_forget'")
        busy, _, _ = self.db.query("PRAGMA wal_checkpoint(TRUNCATE)")[0]
        return not busy

    def disk_bytes(self) -> int:
        """The file's size, once the WAL is moved into it."""
        self.db.query("PRAGMA wal_checkpoint(TRUNCATE)")
        return self.path.stat().st_size

    def copy_agent(self, agent_id: int, target: Path) -> int:
        """Copy the agent's snapshot rows into the SQLite file `target` (a fresh store with
        the current schema) file to file, in one read snapshot; returns its revision."""
        conn = self.db.connection
        conn.execute("ATTACH DATABASE ? AS base", (str(target),))
        try:
            with self.read_snapshot():  # one state of the live rows, whatever else writes
                rev = self.revision(agent_id)
                _copy(conn, "agents", "id", agent_id)
                for table in ("blocks", *HISTORY_TABLES):
                    _copy(conn, table, "agent_id", agent_id)
        finally:
            conn.execute("DETACH DATABASE base")
        return rev


def schema_problem(path: Path, tables: set[str], applied: list[str]) -> str | None:
    """Why a SQLite file holding `tables` (and these migrations) is no database this
    version opens: another program's, or a newer memgpt-lite's. None for an empty file."""
    if not tables:
        return None
    if "schema_migrations" not in tables:
        return f"{path} is a SQLite database from another program, not memgpt-lite; it was " \
               "left untouched."
    known = {name for name, _ in MIGRATIONS}
    unknown = [n for n in applied if n not in known]
    if unknown:
        return (f"{path} was written by a newer memgpt-lite (unknown schema migration "
                f"{unknown[0]!r}); upgrade memgpt-lite to open it.")
    return None


def file_schema_problem(path: Path) -> str | None:
    """`schema_problem` of an existing file, read only: nothing is created or migrated
    (`config set database_url` asks before it writes the file's name)."""
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except (sqlite3.Error, ValueError) as exc:
        return f"{path} cannot be opened as a database ({exc})."
    try:
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        applied = ([r[0] for r in conn.execute("SELECT name FROM schema_migrations")]
                   if "schema_migrations" in tables else [])
    except sqlite3.Error as exc:
        return f"{path} cannot be read as a database ({exc})."
    finally:
        conn.close()
    return schema_problem(path, tables, applied)


def _applied(db: SQLiteDatabase) -> list[str]:
    return [r[0] for r in db.query("SELECT name FROM schema_migrations ORDER BY rowid")]


def _copy(conn: sqlite3.Connection, table: str, key: str, agent_id: int) -> None:
    cols = ", ".join(r[1] for r in conn.execute(f"PRAGMA main.table_info({table})"))
    conn.execute(f"INSERT INTO base.{table} ({cols}) SELECT {cols} FROM main.{table} "
                 f"WHERE {key} = ?", (agent_id,))
