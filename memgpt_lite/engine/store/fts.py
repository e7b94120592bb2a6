"""Per-agent full-text indexes (SQLite FTS5).

Each agent has its own index of messages and of passages, so BM25's statistics (how many
documents, how long on average, how many hold a term) come from that agent's history alone:
a search ranks the same whether or not other agents share the data dir, and a replay that
rebuilds one agent in a fresh file reproduces its rankings exactly.

An index is an external-content FTS5 table over a view of the agent's rows that have text:
rows without text (tool-only messages) are not indexed at all, so they do not skew the
average document length, and FTS5's own `integrity-check` and `rebuild` work per agent. The
store adds and removes index entries itself, in the transaction that changes the row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

KINDS = ("messages", "passages")
TOKENIZER = "porter unicode61"  # stores on other databases cut words with it too (terms.py)


def table(kind: str, agent_id: int) -> str:
    """The FTS5 table of one agent's messages or passages."""
    return f"fts_{kind}_{int(agent_id)}"


def _view(kind: str, agent_id: int) -> str:
    return f"text_{kind}_{int(agent_id)}"


def create(db: sqlite3.Connection, agent_id: int) -> None:
    """Create the agent's (empty) indexes; safe to call again."""
    aid = int(agent_id)
    for kind in KINDS:
        db.execute(f"CREATE VIEW IF NOT EXISTS {_view(kind, aid)} AS SELECT id, index_text "
                   f"FROM {kind} WHERE agent_id = {aid} AND index_text != ''")
        db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table(kind, aid)} USING fts5("
                   f"index_text, content='{_view(kind, aid)}', content_rowid='id', "
                   f"tokenize='{TOKENIZER}')")


def rebuild(db: sqlite3.Connection, agent_id: int) -> None:
    """Index the agent's stored text from scratch (creating the indexes if missing)."""
    create(db, agent_id)
    for kind in KINDS:
        name = table(kind, agent_id)
        db.execute(f"INSERT INTO {name}({name}) VALUES ('rebuild')")


def drop(db: sqlite3.Connection, agent_id: int) -> None:
    for kind in KINDS:
        db.execute(f"DROP TABLE IF EXISTS {table(kind, agent_id)}")
        db.execute(f"DROP VIEW IF EXISTS {_view(kind, agent_id)}")


def add(db: sqlite3.Connection, kind: str, agent_id: int,
        rows: Iterable[tuple[int, str]]) -> None:
    """Index (id, index_text) rows; empty texts are skipped."""
    db.executemany(f"INSERT INTO {table(kind, agent_id)}(rowid, index_text) VALUES (?, ?)",
                   [(i, text) for i, text in rows if text])


def remove(db: sqlite3.Connection, kind: str, agent_id: int,
           rows: Iterable[tuple[int, str]]) -> None:
    """Unindex (id, index_text as it was indexed) rows; empty texts were never indexed."""
    name = table(kind, agent_id)
    db.executemany(f"INSERT INTO {name}({name}, rowid, index_text) VALUES ('delete', ?, ?)",
                   [(i, text) for i, text in rows if text])


def indexed_agents(db: sqlite3.Connection) -> set[int]:
    """Agents whose message index exists."""
    prefix = "fts_messages_"
    names = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE "
                       "'fts\\_messages\\_%' ESCAPE '\\'").fetchall()
    return {int(n[0][len(prefix):]) for n in names if n[0][len(prefix):].isdigit()}


def problems(db: sqlite3.Connection, agent_id: int, agent_name: str) -> list[str]:
    """FTS5's full check of the agent's indexes: structure, and every indexed row against
    the stored text. [] when both are consistent."""
    hint = "run `memgpt-lite doctor --repair` to rebuild it"
    if agent_id not in indexed_agents(db):
        return [f"the search index of agent {agent_name!r} is missing; {hint}"]
    found = []
    for kind in KINDS:
        name = table(kind, agent_id)
        try:  # a plain cursor: a "malformed" index here is a finding, not a damaged file
            sqlite3.Cursor(db).execute(
                f"INSERT INTO {name}({name}, rank) VALUES ('integrity-check', 1)")
        except sqlite3.DatabaseError as exc:
            found.append(f"the {kind} search index of agent {agent_name!r} is out of step "
                         f"with the stored {kind} ({exc}); {hint}")
    return found
