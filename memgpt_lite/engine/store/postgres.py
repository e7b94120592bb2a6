"""The Postgres store: the same memory as the SQLite store, in one database that several
machines share (`MEMGPT_LITE_DATABASE_URL=postgresql://…` or `--db URL`).

It keeps every promise of `base.Store` the way the SQLite store does, mixin for mixin
(`postgres_blocks.py`, `postgres_recall.py`, `postgres_archive.py`, `postgres_forget.py`, `postgres_turns.py`, `postgres_vectors.py`,
`postgres_search.py` for what the SQLite store leaves to FTS5): one transaction per turn,
every query scoped by agent, revisions and tombstones, the turn journal and its undo, and
keyword search that ranks exactly as SQLite's (store/terms.py). The tables live in the
schema `memgpt_lite`, so a database shared with other programs is left alone; the schema is
the named migrations of `postgres_migrations.py`, in a ledger. One process per agent across
machines: an advisory lock in the database (postgres_lock.py).

psycopg 3 is imported here and only here (the `postgres` extra); opening a SQLite store
never loads this module.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

from memgpt_lite.engine.records import now_iso
from memgpt_lite.engine.store.base import (
    HISTORY_TABLES,
    SNAPSHOT_TABLES,
    AgentRow,
    AgentWatch,
    IntegrityProblem,
    StoreError,
)
from memgpt_lite.engine.store.postgres_archive import PgArchiveMixin
from memgpt_lite.engine.store.postgres_base import PgBase, display_url, dumps, pg_text
from memgpt_lite.engine.store.postgres_blocks import PgBlocksMixin
from memgpt_lite.engine.store.postgres_forget import PgForgetMixin
from memgpt_lite.engine.store.postgres_lock import PostgresAgentLock
from memgpt_lite.engine.store.postgres_migrations import MIGRATIONS
from memgpt_lite.engine.store.postgres_recall import PgRecallMixin
from memgpt_lite.engine.store.postgres_search import PgSearchMixin
from memgpt_lite.engine.store.postgres_turns import PgTurnsMixin
from memgpt_lite.engine.store.postgres_vectors import PgVectorMixin

SCHEMA = "memgpt_lite"
_MIGRATION_LOCK = 0x6D656D67_70746C00  # pg_advisory_xact_lock key: one migrator at a time
# The columns each snapshot table has in SQLite, in SQLite's order (snapshot.py writes
# SQLite bases and deltas from them; tests compare them with the SQLite schema).
SQLITE_COLUMNS = {
    "agents": ("id", "name", "model", "settings", "summary", "created_at", "last_used_at",
               "uid", "rev", "state"),
    "blocks": ("id", "agent_id", "label", "value", "char_limit", "updated_at", "shared_id"),
    "block_history": ("id", "agent_id", "label", "old_value", "new_value", "source",
                      "created_at", "rev", "turn_id"),
    "messages": ("id", "agent_id", "turn_id", "role", "content", "context_content",
                 "index_text", "created_at", "in_context", "seq", "rev", "status"),
    "passages": ("id", "agent_id", "text", "tags", "norm", "index_text", "created_at", "rev",
                 "turn_id"),
    "passage_history": ("id", "agent_id", "passage_id", "text", "tags", "created_at",
                        "superseded_at", "change", "reason", "turn_id", "origin_turn_id", "rev"),
}


class PostgresStore(PgBlocksMixin, PgRecallMixin, PgArchiveMixin, PgForgetMixin, PgTurnsMixin,
                    PgVectorMixin, PgSearchMixin, PgBase):
    """All persistent memory in one Postgres database (the `base.Store` protocol). Every read
    and write takes an agent id and touches only that agent's rows. Methods commit on their
    own unless called inside `transaction()`, whose nested uses join the outermost one. Not
    safe for concurrent use from several threads (`reopen()` gives another connection);
    other processes and machines are fine (row locks on the agent serialise its writers)."""

    def __init__(self, url: str):
        self.url = url
        self._where = display_url(url)
        self._depth = 0
        # Decoded queue content by (agent id, message id), checked against the row's `rev`.
        self._decoded: dict[tuple[int, int], tuple[int, list, list | None]] = {}
        self._open_turns: dict[int, int] = {}
        self._watches: dict[int, AgentWatch] = {}  # see PgBlocksMixin.watch
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=10,
                                         application_name="memgpt-lite")
        except psycopg.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no reason given"
            raise StoreError(f"Cannot connect to the database {self._where}: {first}.") from None
        try:
            self._prepare_schema()
            self._check_schema()
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    @property
    def location(self) -> str:
        return self._where

    @property
    def damage(self) -> StoreError | None:
        return None  # a server checks its own pages; its errors come as they are

    def reopen(self) -> PostgresStore:
        return type(self)(self.url)

    def agent_lock(self, name: str) -> PostgresAgentLock:
        """An advisory lock in this database: one process per agent, whichever machine."""
        return PostgresAgentLock(self.url, self._where, name)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- schema

    def _prepare_schema(self) -> None:
        found = self._q("SELECT 1 FROM pg_namespace WHERE nspname = %s", (SCHEMA,))
        if not found:  # only when missing: creating needs a privilege using does not
            with self.transaction():  # two processes starting on a new database take turns
                self._x("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                self._x(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        self._x(f"SET search_path TO {SCHEMA}")

    def _check_schema(self) -> None:
        tables = {r[0] for r in self._q(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (SCHEMA,))}
        if not tables:
            return
        if "schema_migrations" not in tables:
            raise StoreError(f"The schema {SCHEMA} of {self._where} holds tables of another "
                             "program, not memgpt-lite; it was left untouched.")
        known = {name for name, _ in MIGRATIONS}
        unknown = [n for n in self.applied_migrations() if n not in known]
        if unknown:
            raise StoreError(f"{self._where} was written by a newer memgpt-lite (unknown "
                             f"schema migration {unknown[0]!r}); upgrade memgpt-lite to use it.")

    def _migrate(self) -> None:
        with self.transaction():
            self._x("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            self._x("CREATE TABLE IF NOT EXISTS schema_migrations (position INTEGER PRIMARY "
                    "KEY, name TEXT NOT NULL UNIQUE, applied_at TEXT NOT NULL)")
        for position, (name, sql) in enumerate(MIGRATIONS, 1):
            with self.transaction():  # a second process starting now waits, then skips
                self._x("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                if self._q("SELECT 1 FROM schema_migrations WHERE name = %s", (name,)):
                    continue
                self._x(sql)
                self._x("INSERT INTO schema_migrations VALUES (%s, %s, %s)",
                        (position, name, now_iso()))

    def applied_migrations(self) -> list[str]:
        return [r[0] for r in self._q("SELECT name FROM schema_migrations ORDER BY position")]

    def schema_version(self) -> int:
        return len(self.applied_migrations())

    # ---------------------------------------------------------------- agents

    def create_agent(self, name: str, settings: dict,
                     blocks: dict[str, tuple[str, int]]) -> AgentRow:
        name = pg_text(name)
        with self.transaction():
            if self.get_agent(name) is not None:
                raise StoreError(f"An agent named {name!r} already exists.")
            try:
                agent_id = self._q(
                    "INSERT INTO agents (name, model, settings, created_at, uid) "
                    "VALUES (%s, %s, %s, %s, %s) RETURNING id",
                    (name, pg_text(str(settings.get("model", ""))), dumps(settings), now_iso(),
                     secrets.token_hex(8)))[0][0]
            except IntegrityProblem:  # another process created it a moment ago
                raise StoreError(f"An agent named {name!r} already exists.") from None
            self._x("INSERT INTO search_stats (agent_id, kind) VALUES (%s, 'messages'), "
                    "(%s, 'passages')", (agent_id, agent_id))
            for label, (value, limit) in blocks.items():
                self.set_block(agent_id, label, value, limit, source="init")
        return self.get_agent_by_id(agent_id)  # type: ignore[return-value]

    _AGENT = "id, name, model, settings, summary, created_at, last_used_at, uid, state"

    @staticmethod
    def _agent(row: tuple | None) -> AgentRow | None:
        if row is None:
            return None
        return AgentRow(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5], row[6],
                        row[7], json.loads(row[8] or "{}"))

    def get_agent(self, name: str) -> AgentRow | None:
        rows = self._q(f"SELECT {self._AGENT} FROM agents WHERE name = %s", (pg_text(name),))
        return self._agent(rows[0] if rows else None)

    def get_agent_by_id(self, agent_id: int) -> AgentRow | None:
        rows = self._q(f"SELECT {self._AGENT} FROM agents WHERE id = %s", (agent_id,))
        return self._agent(rows[0] if rows else None)

    def list_agents(self) -> list[AgentRow]:
        # COLLATE "C": ordered by code point, as SQLite orders text
        rows = self._q(f'SELECT {self._AGENT} FROM agents ORDER BY name COLLATE "C"')
        return [self._agent(r) for r in rows]  # type: ignore[misc]

    def _require_agent(self, name: str) -> AgentRow:
        agent = self.get_agent(name)
        if agent is None:
            raise StoreError(f"There is no agent named {name!r}.")
        return agent

    def agent_stats(self, agent_id: int) -> dict:
        m = self._q("SELECT count(*), count(DISTINCT turn_id) FROM messages "
                    "WHERE agent_id = %s", (agent_id,))[0]
        agent = self.get_agent_by_id(agent_id)
        return {"turns": m[1], "messages": m[0], "passages": self.count_passages(agent_id),
                "last_used_at": agent.last_used_at if agent else None}

    def _update_agent(self, agent_id: int, column: str, value: Any) -> None:
        self._x(f"UPDATE agents SET {column} = %s WHERE id = %s", (value, agent_id))

    def update_settings(self, agent_id: int, settings: dict) -> None:
        with self.transaction():
            self._update_agent(agent_id, "settings", dumps(settings))
            if "model" in settings:
                self._update_agent(agent_id, "model", pg_text(str(settings["model"])))

    def set_summary(self, agent_id: int, summary: str) -> None:
        with self.transaction():
            if self.open_turn(agent_id) is not None:
                old = self._q("SELECT summary FROM agents WHERE id = %s", (agent_id,))
                self._journal(agent_id, "summary", "", old[0][0] if old else "")
            self._update_agent(agent_id, "summary", pg_text(summary))

    def set_state(self, agent_id: int, state: dict) -> None:
        self._update_agent(agent_id, "state", dumps(state))

    def restore_agent(self, agent_id: int, *, summary: str, created_at: str,
                      last_used_at: str | None, state: dict | None = None) -> None:
        self._x("UPDATE agents SET summary = %s, created_at = %s, last_used_at = %s, "
                "state = %s WHERE id = %s", (pg_text(summary), created_at, last_used_at,
                                             dumps(state or {}), agent_id))

    def touch(self, agent_id: int) -> None:
        self._update_agent(agent_id, "last_used_at", now_iso())

    def rename_agent(self, old: str, new: str) -> None:
        with self.transaction():
            agent = self._require_agent(old)
            if self.get_agent(new) is not None:
                raise StoreError(f"An agent named {new!r} already exists.")
            self._update_agent(agent.id, "name", pg_text(new))

    def delete_agent(self, name: str) -> None:
        with self.transaction():
            agent = self._require_agent(name)
            self._x("DELETE FROM agents WHERE id = %s", (agent.id,))  # cascades
            self.drop_unused_shared_blocks()
        self._decoded.clear()

    # ---------------------------------------------------------------- snapshots

    def snapshot_rows(self, agent_id: int, table: str,
                      since: int | None = None) -> Iterator[dict[str, Any]]:
        if table not in SNAPSHOT_TABLES:
            raise ValueError(f"not a snapshot table: {table!r}")
        cols = SQLITE_COLUMNS[table]
        if table == "blocks":  # as the agent sees them: a user-scope block's shared value
            for row in self._q("SELECT b.id, b.agent_id, b.label, coalesce(s.value, b.value), "
                               "coalesce(s.char_limit, b.char_limit), b.updated_at, b.shared_id "
                               "FROM blocks b LEFT JOIN shared_blocks s ON s.id = b.shared_id "
                               "WHERE b.agent_id = %s ORDER BY b.id", (agent_id,)):
                yield dict(zip(cols, row))
            return
        select = ", ".join("in_context::int" if c == "in_context" else c for c in cols)
        where = "id = %s" if table == "agents" else "agent_id = %s"
        params: list[Any] = [agent_id]
        if since is not None and table in HISTORY_TABLES:
            where += " AND rev > %s"
            params.append(since)
        for row in self._q(f"SELECT {select} FROM {table} WHERE {where} ORDER BY id", params):
            yield dict(zip(cols, row))

    def tombstones_since(self, agent_id: int, since: int) -> list[tuple[str, int]]:
        return [(r[0], r[1]) for r in self._q(
            "SELECT kind, row_id FROM tombstones WHERE agent_id = %s AND rev > %s ORDER BY rev",
            (agent_id, since))]

    def count_changes(self, agent_id: int, since: int) -> int:
        return sum(self._q(f"SELECT count(*) FROM {t} WHERE agent_id = %s AND rev > %s",
                           (agent_id, since))[0][0]
                   for t in (*HISTORY_TABLES, "tombstones"))

    # ---------------------------------------------------------------- maintenance

    def integrity_problems(self) -> list[str]:
        """[] when the schema is complete and every agent's search index agrees with its
        stored text (every row's terms, and the counts BM25 uses)."""
        missing = [n for n, _ in MIGRATIONS if n not in self.applied_migrations()]
        if missing:
            return [f"schema migration {missing[0]!r} is not applied"]
        problems: list[str] = []
        for agent in self.list_agents():
            problems += self.search_problems(agent.id, agent.name)
        return problems

    def rebuild_search_index(self, on_agent: Callable[[str], None] | None = None) -> None:
        """Re-index every agent's stored text (terms, counts, lengths and the agent's
        totals), each agent in one transaction; `on_agent` hears each agent's name."""
        for agent in self.list_agents():
            with self.transaction():
                self.reindex_agent(agent.id)
            if on_agent is not None:
                on_agent(agent.name)
