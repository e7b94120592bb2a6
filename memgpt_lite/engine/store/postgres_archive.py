"""Archival memory in the Postgres store: passages the model chose to keep, with tags,
`archival_search` (postgres_search.py ranks as SQLite's FTS5 does), and corrections.

The Postgres twin of sqlite_archive.py, method for method: a correction keeps the version it
replaces or removes in `passage_history` (never searched, purged with its passage). One
difference: passage ids are counted per agent here (as everything an agent's model sees),
never reused while a passage or its history holds them; a recording is told each id given
out, as on SQLite. A mixin of `postgres.PostgresStore`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from memgpt_lite.engine import search
from memgpt_lite.engine.records import PassageVersion, SearchHit, SearchPage, now_iso
from memgpt_lite.engine.search import index_text, normalise, word_set
from memgpt_lite.engine.store.base import AgentWatch
from memgpt_lite.engine.store.postgres_base import pg_text
from memgpt_lite.engine.store.sqlite_archive import ArchiveMixin
from memgpt_lite.engine.text import clean_value

# Any of the tags (tags are a JSON list of strings, stored as text).
_TAG_FILTER = "(m.tags::jsonb) ?| %s::text[]"
_VERSION = ("SELECT id, passage_id, text, tags, created_at, superseded_at, change, reason, "
            "turn_id FROM passage_history ")
_INSERT = ("INSERT INTO passages (agent_id, id, text, tags, norm, index_text, created_at, rev, "
           "turn_id, terms, term_counts, length) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, "
           "array_to_tsvector(%s::text[]), %s, %s)")


class PgArchiveMixin:
    """Passages: stored, tagged, searched, listed, deleted."""

    _q: Any
    _x: Any
    _many: Any
    _watches: dict[int, AgentWatch]

    # Pure Python over the methods below: the same for both backends.
    similar_passages = ArchiveMixin.similar_passages

    def add_passage(self, agent_id: int, text: str, tags: list[str] | None = None,
                    created_at: str | None = None, *, turn_id: int | None = None) -> int:
        """Store a passage; it belongs to `turn_id`, else to the agent's open turn (if any),
        which journals it (see postgres_turns.py)."""
        text = pg_text(text)
        tags = [pg_text(t) for t in (tags or [])]
        with self.transaction():
            rev = self._bump(agent_id)
            pid = self._new_passage_id(agent_id)
            self._insert_passage(agent_id, pid, text, tags, created_at or now_iso(), rev,
                                 turn_id if turn_id is not None else self.open_turn(agent_id))
            self._journal(agent_id, "passage", pid, None)
        return pid

    def _insert_passage(self, agent_id: int, pid: int, text: str, tags: list[str],
                        created_at: str, rev: int, turn_id: int | None) -> None:
        indexed = index_text(text)
        terms, counts, length = self._analyse(agent_id, [indexed])[0]
        self._x(_INSERT, (agent_id, pid, text, self._dumps(tags), normalise(text), indexed,
                          created_at, rev, turn_id, terms, counts, length))
        self._stats_add(agent_id, "passages", int(bool(indexed)), length, [terms])

    def _new_passage_id(self, agent_id: int) -> int:
        """Above every passage of the agent and every passage in its history, so that a
        deleted passage's id never comes back as another's (call after `_bump`)."""
        top = self._q("SELECT greatest((SELECT coalesce(max(id), 0) FROM passages WHERE "
                      "agent_id = %s), (SELECT coalesce(max(passage_id), 0) FROM "
                      "passage_history WHERE agent_id = %s))", (agent_id, agent_id))[0][0]
        watch = self._watches.get(agent_id)
        if watch is not None:
            watch.passage_ids.append(top + 1)
        return top + 1

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

    def near_duplicate(self, agent_id: int, text: str, threshold: float = 0.9, *,
                       candidates: list[SearchHit] | None = None) -> SearchHit | None:
        """As the SQLite store's: equal after normalising, or a Jaccard word overlap of at
        least `threshold` with one of the BM25 candidates (or the `candidates` given)."""
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
        for hit in self.passage_candidates(agent_id, text) if candidates is None else candidates:
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

    def passage_candidates(self, agent_id: int, text: str) -> list[SearchHit]:
        """The passages a new one may repeat or correct: the best 20 for its words."""
        return self.search_passages(agent_id, text, per_page=20).hits

    def delete_passages(self, agent_id: int, ids: list[int]) -> int:
        """Delete passages for good, their history with them (undo, /pop)."""
        with self.transaction():
            gone = self._q("DELETE FROM passages WHERE agent_id = %s AND id = ANY(%s) "
                           "RETURNING id, index_text, length, tsvector_to_array(terms)",
                           (agent_id, list(ids)))
            self._stats_add(agent_id, "passages", -sum(1 for r in gone if r[1]),
                            -sum(r[2] for r in gone), [r[3] for r in gone], sign=-1)
            self._tombstones(agent_id, "passages", sorted(r[0] for r in gone))
            self.purge_passage_versions(agent_id, [v.id for v in self.passage_versions(
                agent_id, passage_ids=[r[0] for r in gone])])
        return len(gone)

    # ---------------------------------------------------------------- corrections

    def get_passage(self, agent_id: int, passage_id: int) -> SearchHit | None:
        rows = self._q("SELECT id, text, tags, created_at FROM passages WHERE agent_id = %s "
                       "AND id = %s", (agent_id, passage_id))
        return self._passage_hit(rows[0]) if rows else None

    def update_passage(self, agent_id: int, passage_id: int, text: str,
                       at: str | None = None) -> SearchHit:
        """As the SQLite store's: a new text (tags stay), the replaced version kept as
        history and returned; LookupError when the agent has no such passage."""
        text, at = pg_text(text), at or now_iso()
        with self.transaction():
            self._bump(agent_id)
            row = self._passage_row(agent_id, passage_id)
            history_id = self._keep_version(agent_id, row, "update", "", at)
            self._set_passage_text(agent_id, passage_id, text, at)
            self._journal(agent_id, "passage_update", passage_id,
                          {"text": row["text"], "created_at": row["created_at"],
                           "history_id": history_id})
        return self._passage_hit((row["id"], row["text"], row["tags"], row["created_at"]))

    def retire_passage(self, agent_id: int, passage_id: int, reason: str,
                       at: str | None = None) -> SearchHit:
        """As the SQLite store's: the passage leaves archival memory, its last version
        (and `reason`) kept as history and returned; LookupError when there is none."""
        with self.transaction():
            self._bump(agent_id)
            row = self._passage_row(agent_id, passage_id)
            history_id = self._keep_version(agent_id, row, "delete", pg_text(reason),
                                            at or now_iso())
            self._remove_passage_row(agent_id, passage_id)
            kept = {k: row[k] for k in ("id", "text", "created_at", "turn_id")}
            self._journal(agent_id, "passage_delete", passage_id,
                          {"row": {**kept, "tags": json.loads(row["tags"])},
                           "history_id": history_id})
        return self._passage_hit((row["id"], row["text"], row["tags"], row["created_at"]))

    def _passage_row(self, agent_id: int, passage_id: int) -> dict[str, Any]:
        cols = ("id", "text", "tags", "created_at", "turn_id", "index_text")
        rows = self._q(f"SELECT {', '.join(cols)} FROM passages WHERE agent_id = %s AND "
                       "id = %s", (agent_id, passage_id))
        if not rows:
            raise LookupError(f"no passage #{passage_id}")
        return dict(zip(cols, rows[0]))

    def _keep_version(self, agent_id: int, row: dict[str, Any], change: str, reason: str,
                      at: str) -> int:
        vid = self._next_id("passage_history", agent_id)
        self._x("INSERT INTO passage_history (agent_id, id, passage_id, text, tags, created_at, "
                "superseded_at, change, reason, turn_id, origin_turn_id, rev) VALUES (%s, %s, "
                "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (agent_id, vid, row["id"], row["text"], row["tags"], row["created_at"], at,
                 change, reason, self.open_turn(agent_id), row["turn_id"],
                 self._bump(agent_id)))
        return vid

    def _remove_passage_row(self, agent_id: int, passage_id: int) -> None:
        gone = self._q("DELETE FROM passages WHERE agent_id = %s AND id = %s RETURNING "
                       "index_text, length, tsvector_to_array(terms)", (agent_id, passage_id))
        for indexed, length, terms in gone:
            self._stats_add(agent_id, "passages", -int(bool(indexed)), -length, [terms],
                            sign=-1)
        self._tombstones(agent_id, "passages", [passage_id])

    def _set_passage_text(self, agent_id: int, passage_id: int, text: str,
                          created_at: str) -> None:
        old = self._q("SELECT index_text, length, tsvector_to_array(terms) FROM passages "
                      "WHERE agent_id = %s AND id = %s", (agent_id, passage_id))[0]
        indexed = index_text(text)
        terms, counts, length = self._analyse(agent_id, [indexed])[0]
        self._x("UPDATE passages SET text = %s, norm = %s, index_text = %s, created_at = %s, "
                "rev = %s, terms = array_to_tsvector(%s::text[]), term_counts = %s, "
                "length = %s WHERE agent_id = %s AND id = %s",
                (text, normalise(text), indexed, created_at, self._bump(agent_id), terms,
                 counts, length, agent_id, passage_id))
        self._stats_add(agent_id, "passages", int(bool(indexed)) - int(bool(old[0])),
                        length - old[1], [old[2]], sign=-1)
        self._stats_add(agent_id, "passages", 0, 0, [terms])

    def _reinsert_passage(self, agent_id: int, row: dict[str, Any]) -> None:
        """Put a removed passage back under its own id (an undo)."""
        self._insert_passage(agent_id, row["id"], row["text"], list(row["tags"]),
                             row["created_at"], self._bump(agent_id), row.get("turn_id"))

    def _drop_passage_versions(self, agent_id: int, ids: list[int]) -> None:
        self._x("DELETE FROM passage_history WHERE agent_id = %s AND id = ANY(%s)",
                (agent_id, list(ids)))
        self._tombstones(agent_id, "passage_history", list(ids))

    def _revert_passages(self, agent_id: int, turn: int, popped: Any) -> None:
        """As the SQLite store's: put back each passage the turn updated or deleted, newest
        change first, unless a later change exists (then named in `passages_kept`)."""
        for vid, pid, text, tags, created_at, change, origin in self._q(
                "SELECT id, passage_id, text, tags, created_at, change, origin_turn_id FROM "
                "passage_history WHERE agent_id = %s AND turn_id = %s ORDER BY id DESC",
                (agent_id, turn)):
            later = self._q("SELECT 1 FROM passage_history WHERE agent_id = %s AND "
                            "passage_id = %s AND id > %s LIMIT 1", (agent_id, pid, vid))
            exists = self.get_passage(agent_id, pid) is not None
            if later or exists != (change == "update"):
                if pid not in popped.passages_kept:
                    popped.passages_kept.append(pid)
                continue
            if change == "update":
                self._set_passage_text(agent_id, pid, text, created_at)
            else:
                self._reinsert_passage(agent_id, {"id": pid, "text": text,
                                                  "tags": json.loads(tags),
                                                  "created_at": created_at, "turn_id": origin})
            self._drop_passage_versions(agent_id, [vid])
            popped.passages_restored.append(pid)

    # ---------------------------------------------------------------- history

    def passage_versions(self, agent_id: int, *,
                         passage_ids: list[int] | None = None) -> list[PassageVersion]:
        """The agent's superseded and deleted passage versions, oldest first (of
        `passage_ids` only, if given)."""
        if passage_ids is not None and not passage_ids:
            return []
        sql, params = _VERSION + "WHERE agent_id = %s", [agent_id]
        if passage_ids is not None:
            sql += " AND passage_id = ANY(%s)"
            params.append(list(passage_ids))
        return [_version(r) for r in self._q(sql + " ORDER BY id", params)]

    def deleted_version(self, agent_id: int, passage_id: int) -> PassageVersion | None:
        """The last version of a passage the agent deleted, if that is what became of it."""
        rows = self._q(_VERSION + "WHERE agent_id = %s AND passage_id = %s ORDER BY id DESC "
                       "LIMIT 1", (agent_id, passage_id))
        found = _version(rows[0]) if rows else None
        return found if found and found.change == "delete" else None

    def restore_passage_versions(self, agent_id: int, rows: list[dict[str, Any]],
                                 new_ids: dict[int, int]) -> None:
        """History versions of an import, as exported; `new_ids` maps the export's passage
        ids to the imported ones (a deleted passage's versions get a fresh id of their own)."""
        with self.transaction():
            rev = self._bump(agent_id)
            for row in clean_value(rows):
                pid = new_ids.get(row["passage_id"])
                if pid is None:
                    pid = new_ids[row["passage_id"]] = self._new_passage_id(agent_id)
                self._x("INSERT INTO passage_history (agent_id, id, passage_id, text, tags, "
                        "created_at, superseded_at, change, reason, turn_id, rev) VALUES (%s, "
                        "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        (agent_id, self._next_id("passage_history", agent_id), pid,
                         pg_text(row["text"]), self._dumps([pg_text(t) for t in row["tags"]]),
                         row["created_at"], row["superseded_at"], row["change"],
                         pg_text(row.get("reason") or ""), row.get("turn_id"), rev))

    def purge_passage_versions(self, agent_id: int, ids: list[int]) -> int:
        """Delete history versions for good; returns how many went."""
        with self.transaction():
            found = [r[0] for r in self._q("SELECT id FROM passage_history WHERE agent_id = %s "
                                           "AND id = ANY(%s)", (agent_id, list(ids)))]
            if found:
                self._bump(agent_id)
                self._drop_passage_versions(agent_id, found)
        return len(found)


def _version(row: tuple) -> PassageVersion:
    return PassageVersion(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5], row[6],
                          row[7], row[8])
