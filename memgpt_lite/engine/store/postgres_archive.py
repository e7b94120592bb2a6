"""Archival memory in the Postgres store: passages the model chose to keep, with tags, and
`archival_search` (postgres_search.py ranks as SQLite's FTS5 does).

The Postgres twin of sqlite_archive.py, method for method. A mixin of
`postgres.PostgresStore`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from memgpt_lite.engine import search
from memgpt_lite.engine.records import SearchHit, SearchPage, now_iso
from memgpt_lite.engine.search import index_text, normalise, word_set
from memgpt_lite.engine.store.postgres_base import pg_text

# Any of the tags (tags are a JSON list of strings, stored as text).
_TAG_FILTER = "(m.tags::jsonb) ?| %s::text[]"


class PgArchiveMixin:
    """Passages: stored, tagged, searched, listed, deleted."""

    _q: Any
    _x: Any
    _many: Any

    def add_passage(self, agent_id: int, text: str, tags: list[str] | None = None,
                    created_at: str | None = None, *, turn_id: int | None = None) -> int:
        """Store a passage; it belongs to `turn_id`, else to the agent's open turn (if any),
        which journals it (see postgres_turns.py)."""
        text = pg_text(text)
        tags = [pg_text(t) for t in (tags or [])]
        indexed = index_text(text)
        with self.transaction():
            rev = self._bump(agent_id)
            pid = self._next_id("passages", agent_id)
            terms, counts, length = self._analyse(agent_id, [indexed])[0]
            self._x("INSERT INTO passages (agent_id, id, text, tags, norm, index_text, "
                    "created_at, rev, turn_id, terms, term_counts, length) VALUES (%s, %s, %s, "
                    "%s, %s, %s, %s, %s, %s, array_to_tsvector(%s::text[]), %s, %s)",
                    (agent_id, pid, text, self._dumps(tags), normalise(text), indexed,
                     created_at or now_iso(), rev,
                     turn_id if turn_id is not None else self.open_turn(agent_id),
                     terms, counts, length))
            self._stats_add(agent_id, "passages", int(bool(indexed)), length, [terms])
            self._journal(agent_id, "passage", pid, None)
        return pid

    @staticmethod
    def _passage_hit(row: tuple, score: float = 0.0) -> SearchHit:
        return SearchHit(row[0], row[1], row[3], tags=json.loads(row[2]), score=score)

    def search_passages(self, agent_id: int, query: str, page: int = 1, per_page: int = 5,
                        tags: list[str] | None = None, *,
                        dense: dict[int, float] | None = None,
                        keyword_weight: float = search.KEYWORD_WEIGHT) -> SearchPage:
        """As the SQLite store's (see sqlite_archive.py)."""
        page, per_page = max(1, int(page)), max(1, int(per_page))
        tags = [pg_text(t) for t in tags] if tags else tags
        rows = self._keyword_rows("passages", agent_id, query,  # type: ignore[attr-defined]
                                  [_TAG_FILTER] if tags else [], [tags] if tags else [])
        scores = {i: score for i, score, _ in rows}
        if dense:
            allowed = self._with_tags(agent_id, list(dense), tags) if tags else set(dense)
            scores = search.fuse(scores, {i: s for i, s in dense.items() if i in allowed},
                                 keyword_weight)
        if not scores:
            return SearchPage([], page, 0, 0)
        ids = search.top_page(scores, page, per_page)
        rows_by_id = {r[0]: r for r in self._q(
            "SELECT id, text, tags, created_at FROM passages WHERE agent_id = %s AND "
            "id = ANY(%s)", (agent_id, ids))} if ids else {}
        hits = [self._passage_hit(rows_by_id[i], scores[i]) for i in ids]
        return SearchPage(hits, page, math.ceil(len(scores) / per_page), len(scores))

    def _with_tags(self, agent_id: int, ids: list[int], tags: list[str]) -> set[int]:
        return {r[0] for r in self._q(
            f"SELECT m.id FROM passages m WHERE m.agent_id = %s AND m.id = ANY(%s) AND "
            f"{_TAG_FILTER}", (agent_id, ids, tags))}

    def near_duplicate(self, agent_id: int, text: str, threshold: float = 0.9) -> SearchHit | None:
        """As the SQLite store's: equal after normalising, or a Jaccard word overlap of at
        least `threshold` with one of the BM25 candidates."""
        text = pg_text(text)
        norm = normalise(text)
        rows = self._q("SELECT id, text, tags, created_at FROM passages WHERE agent_id = %s "
                       "AND md5(norm) = md5(%s) AND norm = %s ORDER BY id LIMIT 1",
                       (agent_id, norm, norm))
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
        rows = self._q("SELECT id, text, tags, created_at FROM passages WHERE agent_id = %s "
                       "ORDER BY id LIMIT %s OFFSET %s", (agent_id, limit, offset))
        return [self._passage_hit(r) for r in rows]

    def passage_turns(self, agent_id: int) -> list[int | None]:
        return [r[0] for r in self._q("SELECT turn_id FROM passages WHERE agent_id = %s "
                                      "ORDER BY id", (agent_id,))]

    def count_passages(self, agent_id: int) -> int:
        return self._q("SELECT count(*) FROM passages WHERE agent_id = %s", (agent_id,))[0][0]

    def delete_passages(self, agent_id: int, ids: list[int]) -> int:
        with self.transaction():
            gone = self._q("DELETE FROM passages WHERE agent_id = %s AND id = ANY(%s) "
                           "RETURNING id, index_text, length, tsvector_to_array(terms)",
                           (agent_id, list(ids)))
            self._stats_add(agent_id, "passages", -sum(1 for r in gone if r[1]),
                            -sum(r[2] for r in gone), [r[3] for r in gone], sign=-1)
            self._tombstones(agent_id, "passages", sorted(r[0] for r in gone))
        return len(gone)
