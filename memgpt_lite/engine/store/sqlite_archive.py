"""Archival memory in the SQLite store: passages the model chose to keep, with tags, and
`archival_search` over the agent's own full-text index.

A mixin of `sqlite.Store`: it uses the connection, transactions and revision helpers there.
"""

from __future__ import annotations

import json
import math
import sqlite3

from memgpt_lite.engine import search
from memgpt_lite.engine.records import SearchHit, SearchPage, now_iso
from memgpt_lite.engine.search import index_text, normalise, word_set
from memgpt_lite.engine.store import fts
from memgpt_lite.engine.text import clean_text


def _tag_filter(count: int) -> str:
    return ("EXISTS (SELECT 1 FROM json_each(m.tags) WHERE json_each.value IN "
            f"({', '.join('?' * count)}))")


class ArchiveMixin:
    """Passages: stored, tagged, searched, listed, deleted."""

    _db: sqlite3.Connection

    def add_passage(self, agent_id: int, text: str, tags: list[str] | None = None,
                    created_at: str | None = None, *, turn_id: int | None = None) -> int:
        """Store a passage; it belongs to `turn_id`, else to the agent's open turn (if any),
        which journals it (see sqlite_turns.py)."""
        text = clean_text(text)
        tags = [clean_text(t) for t in (tags or [])]
        indexed = index_text(text)
        with self.transaction():
            cur = self._db.execute(
                "INSERT INTO passages (agent_id, text, tags, norm, index_text, created_at, rev, "
                "turn_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (agent_id, text, self._dumps(tags), normalise(text), indexed,
                 created_at or now_iso(), self._bump(agent_id),
                 turn_id if turn_id is not None else self.open_turn(agent_id)))
            fts.add(self._db, "passages", agent_id, [(cur.lastrowid, indexed)])
            self._journal(agent_id, "passage", cur.lastrowid, None)
        return cur.lastrowid  # type: ignore[return-value]

    @staticmethod
    def _passage_hit(row: sqlite3.Row | tuple, score: float = 0.0) -> SearchHit:
        return SearchHit(row[0], row[1], row[3], tags=json.loads(row[2]), score=score)

    def search_passages(self, agent_id: int, query: str, page: int = 1, per_page: int = 5,
                        tags: list[str] | None = None, *,
                        dense: dict[int, float] | None = None,
                        keyword_weight: float = search.KEYWORD_WEIGHT) -> SearchPage:
        """Passages ranked by BM25 over any query term; with tags, only passages having any;
        with `dense` ({id: cosine} from the dense side), fused with it (`search.fuse`)."""
        page, per_page = max(1, int(page)), max(1, int(per_page))
        scores = self._passage_scores(agent_id, query, tags)
        if dense:
            allowed = self._with_tags(agent_id, list(dense), tags) if tags else set(dense)
            scores = search.fuse(scores, {i: s for i, s in dense.items() if i in allowed},
                                 keyword_weight)
        if not scores:
            return SearchPage([], page, 0, 0)
        ids = search.top_page(scores, page, per_page)
        rows = {r[0]: r for r in self._q(
            "SELECT id, text, tags, created_at FROM passages WHERE id IN "
            f"({', '.join('?' * len(ids))})", ids)} if ids else {}
        hits = [self._passage_hit(rows[i], scores[i]) for i in ids]
        return SearchPage(hits, page, math.ceil(len(scores) / per_page), len(scores))

    def _passage_scores(self, agent_id: int, query: str,
                        tags: list[str] | None) -> dict[int, float]:
        expr = self._match_expression("passages", agent_id, query)
        if expr is None:
            return {}
        name = fts.table("passages", agent_id)
        rows = self._candidates(name, f"m.id, -bm25({name})",
                                "CROSS JOIN passages m ON m.id = f.rowid", [_tag_filter(len(tags))] if tags else [],
                                [expr, *(tags or [])])
        return dict(rows)

    def _with_tags(self, agent_id: int, ids: list[int], tags: list[str]) -> set[int]:
        return {r[0] for r in self._q(
            f"SELECT m.id FROM passages m WHERE m.agent_id = ? AND m.id IN "
            f"({', '.join('?' * len(ids))}) AND {_tag_filter(len(tags))}", [agent_id, *ids, *tags])}

    def near_duplicate(self, agent_id: int, text: str, threshold: float = 0.9) -> SearchHit | None:
        """A stored passage equal to `text` after normalising case and whitespace, or whose
        word set overlaps it with Jaccard >= threshold (checked among the BM25 candidates)."""
        text = clean_text(text)
        rows = self._q("SELECT id, text, tags, created_at FROM passages "
                       "WHERE agent_id = ? AND norm = ? LIMIT 1", (agent_id, normalise(text)))
        if rows:
            return self._passage_hit(rows[0])
        words = word_set(text)
        if not words:
            return None
        for hit in self.search_passages(agent_id, text, per_page=20).hits:
            other = word_set(hit.text)
            if len(words & other) / len(words | other) >= threshold:
                return hit
        return None

    def list_passages(self, agent_id: int, limit: int | None = 50,
                      offset: int = 0) -> list[SearchHit]:
        """Passages oldest first; limit None: all of them."""
        rows = self._q("SELECT id, text, tags, created_at FROM passages WHERE agent_id = ? "
                       "ORDER BY id LIMIT ? OFFSET ?",
                       (agent_id, -1 if limit is None else limit, offset))
        return [self._passage_hit(r) for r in rows]

    def passage_turns(self, agent_id: int) -> list[int | None]:
        """The turn that inserted each passage (None: not a turn's), oldest passage first,
        as list_passages orders them (exports keep them, so /pop works after an import)."""
        return [r[0] for r in self._q("SELECT turn_id FROM passages WHERE agent_id = ? "
                                      "ORDER BY id", (agent_id,))]

    def count_passages(self, agent_id: int) -> int:
        return self._q("SELECT count(*) FROM passages WHERE agent_id = ?", (agent_id,))[0][0]

    def delete_passages(self, agent_id: int, ids: list[int]) -> int:
        with self.transaction():
            rows = [tuple(r) for i in ids for r in self._q(
                "SELECT id, index_text FROM passages WHERE agent_id = ? AND id = ?",
                (agent_id, i))]
            fts.remove(self._db, "passages", agent_id, rows)
            self._db.executemany("DELETE FROM passages WHERE id = ?", [(r[0],) for r in rows])
            self._tombstones(agent_id, "passages", [r[0] for r in rows])
        return len(rows)
