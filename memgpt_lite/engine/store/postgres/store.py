"""The Postgres store: one agent on many machines, or many agents in one database.

The domains are the store's, written once (store/sql.py); this backend gives them its
database (database.py) and its keyword index (search.py: FTS5's tokens and BM25 on a GIN
index, so both backends rank alike), and adds what only it does: an advisory lock per agent
(lock.py), its schema's migrations (migrations.py), VACUUM after a forget, and its checks.
Every table lives in the schema `memgpt_lite`.

Postgres keeps a deleted or updated row's old version ("dead tuple") in the table's pages
until VACUUM marks the space free, and even then the bytes stay until new rows overwrite
them; the write-ahead log and any backup or replica keep them as long as those are kept.
`wipe_freed` runs VACUUM on the tables a forget touches, which is what an application can
do (VACUUM FULL would rewrite the tables, but locks them for every agent); docs/postgres.md
says this to the user.
"""

from __future__ import annotations

import contextlib

from memgpt_lite.engine.records import now_iso
from memgpt_lite.engine.store.base import StoreError, upgrade_under_a_chat
from memgpt_lite.engine.store.blocks import SHARING_LOCK
from memgpt_lite.engine.store.postgres.database import LOCK_WAIT, SCHEMA, PostgresDatabase
from memgpt_lite.engine.store.postgres.lock import PostgresAgentLock, held_elsewhere
from memgpt_lite.engine.store.postgres.migrations import MIGRATIONS
from memgpt_lite.engine.store.postgres.search import PgIndex
from memgpt_lite.engine.store.sql import SQLStore
from memgpt_lite.engine.store.tables import POSTGRES, TABLES

_MIGRATION_LOCK = 0x6D656D67_70746C00  # one migrator at a time
# The tables a forget (or `agents delete`) may change, VACUUMed after it (see the module
# docstring): every table a forget place reaches, read from the registry so that a new one
# cannot be missed, and what follows their rows: vectors, the undo journal of a dead turn,
# the keyword index's term counts (a forgotten word is a row of its own there) and the
# intent, which holds the query.
TOUCHED = tuple(dict.fromkeys([
    *(t.name for t in TABLES if t.forget and POSTGRES[0] in t.backends),
    "vectors", "turn_effects", "term_docs", "forget_intents"]))


class PostgresStore(SQLStore):
    """All persistent memory in one Postgres database (the `base.Store` protocol; see
    sql.SQLStore for the promises). Other processes and machines may use it at once (row
    locks on the agent serialise its writers)."""

    db: PostgresDatabase

    def __init__(self, url: str):
        db = PostgresDatabase(url)
        self.url = url
        try:
            super().__init__(db, PgIndex(db))
            self._prepare_schema()
            self._check_schema()
            self._refuse_upgrade_under_a_chat()
            self._migrate()
        except BaseException:
            db.close()
            raise

    def reopen(self) -> PostgresStore:
        return type(self)(self.url)

    def agent_lock(self, name: str) -> PostgresAgentLock:
        """An advisory lock in this database: one process per agent, whichever machine."""
        return PostgresAgentLock(self.url, self.location, name)

    # ---------------------------------------------------------------- schema

    def _prepare_schema(self) -> None:
        found = self.db.query("SELECT 1 FROM pg_namespace WHERE nspname = ?", (SCHEMA,))
        if not found:  # only when missing: creating needs a privilege using does not
            with self.transaction():  # two processes starting on a new database take turns
                self._wait_for_migrations()
                self.db.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        self.db.execute(f"SET search_path TO {SCHEMA}")

    def _wait_for_migrations(self) -> None:
        """Take turns with another process migrating, however long its migration takes (in
        this transaction only: other locks are waited for as long as LOCK_WAIT)."""
        self.db.execute("SET LOCAL lock_timeout = 0")
        self.db.lock(_MIGRATION_LOCK)

    def _check_schema(self) -> None:
        tables = self.db.tables()
        if not tables:
            return
        if "schema_migrations" not in tables:
            raise StoreError(f"The schema {SCHEMA} of {self.location} holds tables of another "
                             "program, not memgpt-lite; it was left untouched.")
        known = {name for name, _ in MIGRATIONS}
        unknown = [n for n in self.applied_migrations() if n not in known]
        if unknown:
            raise StoreError(f"{self.location} was written by a newer memgpt-lite (unknown "
                             f"schema migration {unknown[0]!r}); upgrade memgpt-lite to use it.")

    def _refuse_upgrade_under_a_chat(self) -> None:
        """An older version's chat still open on this database (the user upgraded while it
        ran, here or on another machine) would go on writing in the old shape after the
        upgrade: a summary and alert state on the agent's row that the new schema keeps in
        the conversation, lost. So a schema that needs migrations is left as it is while
        another process holds an agent's advisory lock in this database."""
        if "schema_migrations" not in self.db.tables():
            return  # a new database
        done = set(self.applied_migrations())
        if not done or all(name in done for name, _ in MIGRATIONS):
            return  # nothing to upgrade
        holder = held_elsewhere(self.db, skip=(_MIGRATION_LOCK, SHARING_LOCK))
        if holder is not None:
            raise upgrade_under_a_chat(self.location, holder)

    def _migrate(self) -> None:
        # CREATE ... IF NOT EXISTS still needs the right to create: skipped on a ledger that
        # exists, so a role with rights on the rows only uses a schema its owner migrated.
        if "schema_migrations" not in self.db.tables():
            with self.transaction():
                self._wait_for_migrations()
                self.db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (position "
                                "INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
                                "applied_at TEXT NOT NULL)")
        for position, (name, sql) in enumerate(MIGRATIONS, 1):
            with self.transaction():  # a second process starting now waits, then skips
                self._wait_for_migrations()
                if self.db.query("SELECT 1 FROM schema_migrations WHERE name = ?", (name,)):
                    continue
                self.db.execute(sql)
                self.db.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)",
                                (position, name, now_iso()))

    def applied_migrations(self) -> list[str]:
        return [r[0] for r in self.db.query("SELECT name FROM schema_migrations "
                                            "ORDER BY position")]

    # ---------------------------------------------------------------- maintenance

    def integrity_problems(self) -> list[str]:
        """[] when the schema is complete and every agent's search index agrees with its
        stored text (every row's terms, and the counts BM25 uses)."""
        applied = self.applied_migrations()
        missing = [n for n, _ in MIGRATIONS if n not in applied]
        if missing:
            return [f"schema migration {missing[0]!r} is not applied"]
        return super().integrity_problems()

    def disk_bytes(self) -> int:
        """The tables of the schema with their indexes and TOAST data."""
        return int(self.db.query("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM "
                                 "pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                                 "WHERE n.nspname = ? AND c.relkind = 'r'", (SCHEMA,))[0][0])

    def wipe_freed(self) -> bool:
        """VACUUM the tables a forget or a deletion touches, so the old row versions' space
        is marked free (their bytes stay until overwritten: see the module docstring).
        False inside a transaction, where VACUUM cannot run."""
        if self.db.in_transaction:
            return False
        # A VACUUM waits for another one of the same table (a second forget) however long
        # it takes, not only for LOCK_WAIT: the forget would otherwise stay pending.
        self.db.execute("SET lock_timeout = 0")
        try:
            for table in TOUCHED:
                self.db.execute(f"VACUUM {table}")
        finally:
            with contextlib.suppress(StoreError):  # a lost connection is replaced anyway
                self.db.execute(f"SET lock_timeout = '{LOCK_WAIT}'")
        return True
