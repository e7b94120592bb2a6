"""The schema: named, append-only migrations, recorded in a ledger table by the store."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable


def _run(db: sqlite3.Connection, script: str) -> None:
    # Not executescript(): it commits first, which would split a migration from its ledger row.
    stmt = ""
    for line in script.splitlines(keepends=True):
        stmt += line
        if sqlite3.complete_statement(stmt):
            db.execute(stmt)
            stmt = ""
    if stmt.strip():
        raise ValueError(f"incomplete SQL statement in migration: {stmt.strip()[:60]}")


def _m001_initial(db: sqlite3.Connection) -> None:
    _run(db, """
    CREATE TABLE agents (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        model TEXT NOT NULL DEFAULT '',
        settings TEXT NOT NULL DEFAULT '{}',
        summary TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL,
        last_used_at TEXT
    );
    CREATE TABLE blocks (
        id INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        label TEXT NOT NULL,
        value TEXT NOT NULL,
        char_limit INTEGER NOT NULL,
        updated_at TEXT NOT NULL,
        UNIQUE (agent_id, label)
    );
    CREATE TABLE block_history (
        id INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        label TEXT NOT NULL,
        old_value TEXT,
        new_value TEXT NOT NULL,
        source TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX block_history_agent ON block_history(agent_id, label);
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        turn_id INTEGER NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        context_content TEXT,
        index_text TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL,
        in_context INTEGER NOT NULL DEFAULT 1
    );
    CREATE INDEX messages_context ON messages(agent_id, in_context);
    CREATE INDEX messages_turn ON messages(agent_id, turn_id);
    CREATE TABLE passages (
        id INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        text TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '[]',
        norm TEXT NOT NULL,
        index_text TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL
    );
    CREATE INDEX passages_agent ON passages(agent_id, norm);
    """)


def _m002_fts(db: sqlite3.Connection) -> None:
    # External-content FTS5 tables kept in sync by triggers; empty texts (tool-only messages)
    # are not indexed at all so they do not skew BM25's average document length.
    for table in ("messages", "passages"):
        _run(db, f"""
        CREATE VIRTUAL TABLE {table}_fts USING fts5(
            index_text, content='{table}', content_rowid='id', tokenize='porter unicode61');
        CREATE TRIGGER {table}_fts_ai AFTER INSERT ON {table} WHEN new.index_text != '' BEGIN
            INSERT INTO {table}_fts(rowid, index_text) VALUES (new.id, new.index_text);
        END;
        CREATE TRIGGER {table}_fts_ad AFTER DELETE ON {table} WHEN old.index_text != '' BEGIN
            INSERT INTO {table}_fts({table}_fts, rowid, index_text)
                VALUES ('delete', old.id, old.index_text);
        END;
        CREATE TRIGGER {table}_fts_au AFTER UPDATE OF index_text ON {table} BEGIN
            INSERT INTO {table}_fts({table}_fts, rowid, index_text)
                SELECT 'delete', old.id, old.index_text WHERE old.index_text != '';
            INSERT INTO {table}_fts(rowid, index_text)
                SELECT new.id, new.index_text WHERE new.index_text != '';
        END;
        INSERT INTO {table}_fts(rowid, index_text)
            SELECT id, index_text FROM {table} WHERE index_text != '';
        """)


# Append-only: never edit or reorder an entry that has shipped; add a new one.
MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("001_initial", _m001_initial),
    ("002_fts_search", _m002_fts),
]
