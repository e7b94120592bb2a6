"""The SQLite schema: named, append-only migrations, recorded in a ledger table by the store
(sqlite/store.py), each applied in one transaction with its ledger row."""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Callable

from memgpt_lite.engine.store.sqlite import fts


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


def _m003_per_agent_history(db: sqlite3.Connection) -> None:
    """Each agent's history becomes self-contained: a stable uid (recordings live under it,
    whatever the agent is renamed to), a position (`seq`) for every message in the agent's
    own history, a revision counter stamped on every changed row plus tombstones for deleted
    ones (so a recording can carry only what changed since a base snapshot), runtime state,
    and one full-text index per agent instead of one shared by all."""
    _run(db, """
    ALTER TABLE agents ADD COLUMN uid TEXT NOT NULL DEFAULT '';
    ALTER TABLE agents ADD COLUMN rev INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE agents ADD COLUMN state TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE messages ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE messages ADD COLUMN rev INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE passages ADD COLUMN rev INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE block_history ADD COLUMN rev INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE tombstones (
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        row_id INTEGER NOT NULL,
        rev INTEGER NOT NULL
    );
    CREATE INDEX tombstones_agent ON tombstones(agent_id, rev);
    CREATE INDEX messages_seq ON messages(agent_id, seq);
    CREATE INDEX messages_rev ON messages(agent_id, rev);
    CREATE INDEX passages_rev ON passages(agent_id, rev);
    CREATE INDEX block_history_rev ON block_history(agent_id, rev);
    UPDATE messages SET seq = s.n FROM (
        SELECT id, row_number() OVER (PARTITION BY agent_id ORDER BY id) AS n FROM messages
    ) AS s WHERE s.id = messages.id;
    """)
    for table in ("messages", "passages"):
        for suffix in ("ai", "ad", "au"):
            db.execute(f"DROP TRIGGER IF EXISTS {table}_fts_{suffix}")
        db.execute(f"DROP TABLE IF EXISTS {table}_fts")
    for (agent_id,) in db.execute("SELECT id FROM agents").fetchall():
        db.execute("UPDATE agents SET uid = ? WHERE id = ?", (secrets.token_hex(8), agent_id))
        fts.rebuild(db, agent_id)
    db.execute("CREATE UNIQUE INDEX agents_uid ON agents(uid)")


def _m004_turn_effects(db: sqlite3.Connection) -> None:
    """A turn that fails leaves nothing behind: every side effect a running turn makes is
    journalled with its undo record (`turn_effects`, emptied when the turn commits or is
    undone); a message's `status` says whether its turn is still running ('open') or was
    cut off ('interrupted'); block history rows and passages name the turn that wrote them,
    so that /pop can revert a turn's memory edits. Turns cut off before this migration (a
    user message alone, outside the queue) are marked interrupted."""
    _run(db, """
    CREATE TABLE turn_effects (
        id INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        turn_id INTEGER NOT NULL,
        kind TEXT NOT NULL,
        target TEXT NOT NULL DEFAULT '',
        before TEXT
    );
    CREATE INDEX turn_effects_turn ON turn_effects(agent_id, turn_id);
    ALTER TABLE messages ADD COLUMN status TEXT NOT NULL DEFAULT '';
    ALTER TABLE block_history ADD COLUMN turn_id INTEGER;
    ALTER TABLE passages ADD COLUMN turn_id INTEGER;
    CREATE INDEX messages_status ON messages(agent_id, status) WHERE status != '';
    CREATE INDEX block_history_turn ON block_history(agent_id, turn_id);
    CREATE INDEX passages_turn ON passages(agent_id, turn_id);
    UPDATE messages SET status = 'interrupted' WHERE role = 'user' AND in_context = 0
        AND NOT EXISTS (SELECT 1 FROM messages o WHERE o.agent_id = messages.agent_id
                        AND o.turn_id = messages.turn_id AND o.id != messages.id);
    """)


def _m005_vectors(db: sqlite3.Connection) -> None:
    """Embeddings of messages and passages for hybrid search, one per row, recording the
    model that made them; and a covering index that keyword search reads candidates'
    positions and dates from, instead of their (large) rows. Derived data (see
    store/vectors.py): triggers delete a row's vector with the row or when its text
    changes, and count deletions per agent (id = the agent's id; a cache key, not agent
    data) so that in-memory copies know to reload."""
    _run(db, """
    CREATE TABLE vectors (
        id INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        row_id INTEGER NOT NULL,
        model TEXT NOT NULL,
        vec BLOB NOT NULL,
        scale REAL NOT NULL,
        UNIQUE (kind, row_id)
    );
    CREATE INDEX vectors_agent ON vectors(agent_id, kind, model, id);
    CREATE INDEX messages_search ON messages(id, seq, created_at);
    CREATE TABLE vector_deletions (id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
    CREATE TRIGGER vectors_ad AFTER DELETE ON vectors BEGIN
        INSERT INTO vector_deletions (id, n) VALUES (old.agent_id, 1)
            ON CONFLICT (id) DO UPDATE SET n = n + 1;
    END;
    """)
    for table in ("messages", "passages"):
        _run(db, f"""
        CREATE TRIGGER vectors_{table}_ad AFTER DELETE ON {table} BEGIN
            DELETE FROM vectors WHERE kind = '{table}' AND row_id = old.id;
        END;
        CREATE TRIGGER vectors_{table}_au AFTER UPDATE OF index_text ON {table}
            WHEN old.index_text IS NOT new.index_text BEGIN
            DELETE FROM vectors WHERE kind = '{table}' AND row_id = old.id;
        END;
        """)


def _m007_passage_history_and_shared_blocks(db: sqlite3.Connection) -> None:
    """Corrections and scopes. `passage_history` keeps every version of a passage that
    archival_update replaced or archival_delete removed (never searched; it has `rev` and
    tombstones like the agent's other history, and names the turn that made the change so
    /pop can put the passage back, and the turn that first stored it). `shared_blocks` holds the core memory blocks in "user" scope: one
    row per label for the whole data dir, which every agent whose `blocks` row points at it
    (`shared_id`) sees and edits; `version` counts its edits."""
    _run(db, """
    CREATE TABLE passage_history (
        id INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        passage_id INTEGER NOT NULL,
        text TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '[]',
        created_at TEXT NOT NULL,
        superseded_at TEXT NOT NULL,
        change TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        turn_id INTEGER,
        origin_turn_id INTEGER,
        rev INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX passage_history_agent ON passage_history(agent_id, passage_id);
    CREATE INDEX passage_history_rev ON passage_history(agent_id, rev);
    CREATE INDEX passage_history_turn ON passage_history(agent_id, turn_id);
    CREATE TABLE shared_blocks (
        id INTEGER PRIMARY KEY,
        label TEXT NOT NULL UNIQUE,
        value TEXT NOT NULL,
        char_limit INTEGER NOT NULL,
        updated_at TEXT NOT NULL,
        version INTEGER NOT NULL DEFAULT 0
    );
    ALTER TABLE blocks ADD COLUMN shared_id INTEGER;
    CREATE INDEX blocks_shared ON blocks(shared_id) WHERE shared_id IS NOT NULL;
    """)


def _m006_forget_intents(db: sqlite3.Connection) -> None:
    """A forget is written down before it starts and crossed out when it is done, so that a
    forget cut off (kill -9, a full disk, an unwritable recording) is finished by the next
    command (see engine/privacy.py). Also: a file written before the store zeroed what it
    frees (secure_delete) may hold old copies of text in its free space, so its first
    forget rewrites the whole file once (VACUUM)."""
    _run(db, """
    CREATE TABLE forget_intents (
        id INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL,
        agent_uid TEXT NOT NULL,
        spec TEXT NOT NULL,
        stage TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE TABLE store_flags (name TEXT PRIMARY KEY);
    INSERT INTO store_flags (name) SELECT 'vacuum_on_forget' WHERE EXISTS (SELECT 1 FROM agents);
    """)


def _m008_conversations_and_project_blocks(db: sqlite3.Connection) -> None:
    """Conversations and project scope. An agent has many `conversations` (id counted per
    agent, from 1): each holds its own running summary and pager state (`state`), and every
    message names the conversation it belongs to, so each has its own queue; core memory,
    archival memory and recall stay the agent's. Every agent gets conversation 1, holding its
    queue, summary and pager state as they were (`agents.summary` is left empty from now
    on). `project_blocks` holds the core memory blocks in "project" scope: one row per
    project root and label, seen by every agent working in that project. A block history
    row names where its write went: `scope` (agent, user or project) and `project`."""
    _run(db, """
    CREATE TABLE conversations (
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        id INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        last_used_at TEXT NOT NULL,
        title TEXT NOT NULL DEFAULT '',
        summary TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL DEFAULT '{}',
        rev INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (agent_id, id)
    );
    CREATE INDEX conversations_rev ON conversations(agent_id, rev);
    ALTER TABLE messages ADD COLUMN conversation_id INTEGER NOT NULL DEFAULT 1;
    CREATE INDEX messages_conversation ON messages(agent_id, conversation_id, in_context);
    CREATE TABLE project_blocks (
        id INTEGER PRIMARY KEY,
        project TEXT NOT NULL,
        label TEXT NOT NULL,
        value TEXT NOT NULL,
        char_limit INTEGER NOT NULL,
        updated_at TEXT NOT NULL,
        version INTEGER NOT NULL DEFAULT 0,
        UNIQUE (project, label)
    );
    ALTER TABLE block_history ADD COLUMN scope TEXT NOT NULL DEFAULT 'agent';
    ALTER TABLE block_history ADD COLUMN project TEXT;
    CREATE INDEX block_history_project ON block_history(project, label)
        WHERE project IS NOT NULL;
    """)
    rows = db.execute("SELECT id, summary, state, created_at, last_used_at, rev FROM agents"
                      ).fetchall()
    for agent_id, summary, state, created_at, last_used_at, rev in rows:
        first = db.execute("SELECT min(created_at) FROM messages WHERE agent_id = ?",
                           (agent_id,)).fetchone()[0]
        learned = json.loads(state or "{}")
        pager = learned.pop("pager", None)
        db.execute("INSERT INTO conversations (agent_id, id, started_at, last_used_at, summary, "
                   "state, rev) VALUES (?, 1, ?, ?, ?, ?, ?)",
                   (agent_id, first or created_at, last_used_at or created_at, summary,
                    json.dumps({"pager": pager} if pager is not None else {}), rev))
        db.execute("UPDATE agents SET summary = '', state = ? WHERE id = ?",
                   (json.dumps(learned, ensure_ascii=False), agent_id))


def _m009_conversation_turns(db: sqlite3.Connection) -> None:
    """An index of each conversation's turns: a conversation's turn count and first message
    (its name in the chat's banner and in `conversations`) are read from it instead of a
    scan of the agent's whole history."""
    _run(db, "CREATE INDEX messages_conversation_turn ON messages(agent_id, conversation_id, "
             "turn_id);")


def _m010_agent_aliases(db: sqlite3.Connection) -> None:
    """The names an agent had before a rename: scripts and habits still say the old one, so
    a command can say where it went instead of "no such agent" (agents.py)."""
    _run(db, """
    CREATE TABLE agent_aliases (
        name TEXT PRIMARY KEY,
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        renamed_at TEXT NOT NULL
    );
    CREATE INDEX agent_aliases_agent ON agent_aliases(agent_id);
    """)


# Append-only: never edit or reorder an entry that has shipped; add a new one.
MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("001_initial", _m001_initial),
    ("002_fts_search", _m002_fts),
    ("003_per_agent_history", _m003_per_agent_history),
    ("004_turn_effects", _m004_turn_effects),
    ("005_vectors", _m005_vectors),
    ("006_forget_intents", _m006_forget_intents),
    ("007_passage_history_and_shared_blocks", _m007_passage_history_and_shared_blocks),
    ("008_conversations_and_project_blocks", _m008_conversations_and_project_blocks),
    ("009_conversation_turns", _m009_conversation_turns),
    ("010_agent_aliases", _m010_agent_aliases),
]
