"""The SQLite store's keyword index: per-agent FTS5 tables, ranked by FTS5's BM25.

Each agent has its own index of messages and of passages, so BM25's statistics (how many
documents, how long on average, how many hold a term) come from that agent's history alone:
a search ranks the same whether or not other agents share the data dir, and a replay that
rebuilds one agent in a fresh file reproduces its rankings exactly.

An index is an external-content FTS5 table over a view of the agent's rows that have text:
rows without text (tool-only messages) are not indexed at all, so they do not skew the
average document length, and FTS5's own `integrity-check` and `rebuild` work per agent. The
store adds and removes index entries itself, in the transaction that changes the row
(`FTS5Index`, the `core.KeywordIndex` of this backend).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from memgpt_lite.engine import search

KINDS = ("messages", "passages")
TOKENIZER = "porter unicode61"  # stores on other databases cut words with it too (terms.py)
_HINT = "run `memgpt-lite doctor --repair` to rebuild it"


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


def indexed_agents(db: sqlite3.Connection) -> set[int]:
    """Agents whose message index exists."""
    prefix = "fts_messages_"
    names = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE "
                       "'fts\\_messages\\_%' ESCAPE '\\'").fetchall()
    return {int(n[0][len(prefix):]) for n in names if n[0][len(prefix):].isdigit()}


class FTS5Index:
    """The keyword index of a SQLite store (see the module docstring and core.KeywordIndex)."""

    def __init__(self, db: Any):
        self.db = db  # a SQLiteDatabase

    @property
    def _conn(self) -> sqlite3.Connection:
        return self.db.connection

    def create_agent(self, agent_id: int) -> None:
        create(self._conn, agent_id)

    def drop_agent(self, agent_id: int) -> None:
        drop(self._conn, agent_id)

    # ---------------------------------------------------------------- writing

    def insert_columns(self, agent_id: int, texts: list[str],
                       ) -> tuple[tuple[str, ...], tuple[str, ...], list[tuple[Any, ...]]]:
        return (), (), [() for _ in texts]  # FTS5 keeps the index beside the rows

    def inserted(self, kind: str, agent_id: int, rows: list[tuple[int, str]],
                 values: list[tuple[Any, ...]]) -> None:
        self.add(kind, agent_id, rows)

    def add(self, kind: str, agent_id: int, rows: Iterable[tuple[int, str]]) -> None:
        """Index (id, index_text) rows; empty texts are skipped."""
        self._conn.executemany(
            f"INSERT INTO {table(kind, agent_id)}(rowid, index_text) VALUES (?, ?)",
            [(i, text) for i, text in rows if text])

    def remove(self, kind: str, agent_id: int, rows: Iterable[tuple[int, str]]) -> None:
        """Unindex (id, index_text as it was indexed) rows; empty texts were never indexed."""
        name = table(kind, agent_id)
        self._conn.executemany(
            f"INSERT INTO {name}({name}, rowid, index_text) VALUES ('delete', ?, ?)",
            [(i, text) for i, text in rows if text])

    def optimize(self, agent_id: int) -> None:
        """Merge the agent's index into one segment, so the pages that held a forgotten term
        are freed (and zeroed: the store runs with secure_delete)."""
        if agent_id in indexed_agents(self._conn):
            for kind in KINDS:
                name = table(kind, agent_id)
                self._conn.execute(f"INSERT INTO {name}({name}) VALUES ('optimize')")

    # ---------------------------------------------------------------- searching

    def scores(self, kind: str, agent_id: int, query: str, where: list[str],
               params: list[Any]) -> list[tuple[int, float, int]]:
        expr = self._match_expression(kind, agent_id, query)
        if expr is None:
            return []
        name = table(kind, agent_id)
        # Messages: the covering index gives positions and dates without reading the (large)
        # message rows. CROSS JOIN keeps FTS the outer loop; FTS yields rowids in order, so
        # the LIMIT stops early at the newest RANK_CAP.
        join = ("CROSS JOIN messages m INDEXED BY messages_search ON m.id = f.rowid"
                if kind == "messages" else "CROSS JOIN passages m ON m.id = f.rowid")
        seq = "m.seq" if kind == "messages" else "0"
        sql = (f"SELECT f.rowid, -bm25({name}), {seq} FROM {name} f {join} WHERE {name} MATCH ?"
               f"{''.join(' AND ' + w for w in where)} "
               f"ORDER BY f.rowid DESC LIMIT {search.RANK_CAP}")
        return self.db.query(sql, [expr, *params])

    def _match_expression(self, kind: str, agent_id: int, query: str) -> str | None:
        """The MATCH expression for a query: its candidate terms (see
        `search.candidate_terms`) joined by OR; None when it has no searchable words."""
        name = table(kind, agent_id)

        def doc_freq(term: str) -> int:  # counting stops past the cap
            return self.db.query(f"SELECT count(*) FROM (SELECT rowid FROM {name} WHERE {name} "
                                 f"MATCH ? LIMIT {search.RANK_CAP + 1})", (term,))[0][0]

        terms = search.candidate_terms(search.match_terms(query), doc_freq)
        return " OR ".join(terms) or None

    # ---------------------------------------------------------------- checking, rebuilding

    def problems(self, agent_id: int, name: str) -> list[str]:
        """FTS5's full check of the agent's indexes: structure, and every indexed row against
        the stored text. [] when both are consistent."""
        if agent_id not in indexed_agents(self._conn):
            return [f"the search index of agent {name!r} is missing; {_HINT}"]
        found = []
        for kind in KINDS:
            fts = table(kind, agent_id)
            try:  # a plain cursor: a "malformed" index here is a finding, not a damaged file
                sqlite3.Cursor(self._conn).execute(
                    f"INSERT INTO {fts}({fts}, rank) VALUES ('integrity-check', 1)")
            except sqlite3.DatabaseError as exc:
                found.append(f"the {kind} search index of agent {name!r} is out of step "
                             f"with the stored {kind} ({exc}); {_HINT}")
        return found

    def rebuild(self, agent_id: int) -> None:
        rebuild(self._conn, agent_id)
