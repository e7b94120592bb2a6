"""Archival memory in the SQLite store: passages the model chose to keep, with tags,
`archival_search` over the agent's own full-text index, and corrections.

A correction (`update_passage`, `retire_passage`) keeps the version it replaces or removes in
`passage_history`: never indexed, so search never returns it, and purged with its passage by
`delete_passages` (undo, /pop); forget deletes the versions that match (store/scrub.py). Passage ids are global to the data dir and never reused while a
passage or its history holds them, so an id the model saw always means the same passage;
while a recording watches the agent, the ids its new passages get are reported to it.

A mixin of `sqlite.Store`: it uses the connection, transactions and revision helpers there.
"""

from __future__ import annotations

import json
import math
import sqlite3
from typing import Any

from memgpt_lite.engine import search
from memgpt_lite.engine.records import PassageVersion, SearchHit, SearchPage, now_iso
from memgpt_lite.engine.search import STOP_WORDS, index_text, normalise, word_set
from memgpt_lite.engine.store import fts
from memgpt_lite.engine.store.base import AgentWatch
from memgpt_lite.engine.text import clean_text, clean_value

SIMILAR_SHARE = 0.3  # of the shorter text's topic words, for a passage to count as similar
_VERSION = ("SELECT id, passage_id, text, tags, created_at, superseded_at, change, reason, "
            "turn_id FROM passage_history ")


def _tag_filter(count: int) -> str:
    return ("EXISTS (SELECT 1 FROM json_each(m.tags) WHERE json_each.value IN "
            f"({', '.join('?' * count)}))")


class ArchiveMixin:
    """Passages: stored, tagged, searched, listed, corrected, deleted."""

    _db: sqlite3.Connection
    _watches: dict[int, AgentWatch]

    def add_passage(self, agent_id: int, text: str, tags: list[str] | None = None,
                    created_at: str | None = None, *, turn_id: int | None = None) -> int:
        """Store a passage; it belongs to `turn_id`, else to the agent's open turn (if any),
        which journals it (see sqlite_turns.py)."""
        text = clean_text(text)
        tags = [clean_text(t) for t in (tags or [])]
        indexed = index_text(text)
        with self.transaction():
            pid = self._new_passage_id(agent_id)
            self._db.execute(
                "INSERT INTO passages (id, agent_id, text, tags, norm, index_text, created_at, "
                "rev, turn_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (pid, agent_id, text, self._dumps(tags), normalise(text), indexed,
                 created_at or now_iso(), self._bump(agent_id),
                 turn_id if turn_id is not None else self.open_turn(agent_id)))
            fts.add(self._db, "passages", agent_id, [(pid, indexed)])
            self._journal(agent_id, "passage", pid, None)
        return pid

    def _new_passage_id(self, agent_id: int) -> int:
        """Above every passage and every passage's history, so that a deleted passage's id
        never comes back as another passage's (the history is small: no index for this)."""
        top = self._q("SELECT max(coalesce((SELECT max(id) FROM passages), 0), "
                      "coalesce((SELECT max(passage_id) FROM passage_history), 0))")[0][0]
        watch = self._watches.get(agent_id)
        if watch is not None:
            watch.passage_ids.append(top + 1)
        return top + 1

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

    def near_duplicate(self, agent_id: int, text: str, threshold: float = 0.9, *,
                       candidates: list[SearchHit] | None = None) -> SearchHit | None:
        """A stored passage equal to `text` after normalising case and whitespace, or whose
        word set overlaps it with Jaccard >= threshold (checked among the BM25 candidates,
        or the `candidates` given: `passage_candidates`)."""
        text = clean_text(text)
        rows = self._q("SELECT id, text, tags, created_at FROM passages "
                       "WHERE agent_id = ? AND norm = ? LIMIT 1", (agent_id, normalise(text)))
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
        """Delete passages for good, their history with them (undo, /pop)."""
        with self.transaction():
            rows = [tuple(r) for i in ids for r in self._q(
                "SELECT id, index_text FROM passages WHERE agent_id = ? AND id = ?",
                (agent_id, i))]
            fts.remove(self._db, "passages", agent_id, rows)
            self._db.executemany("DELETE FROM passages WHERE id = ?", [(r[0],) for r in rows])
            self._tombstones(agent_id, "passages", [r[0] for r in rows])
            self.purge_passage_versions(agent_id, [v.id for v in self.passage_versions(
                agent_id, passage_ids=[r[0] for r in rows])])
        return len(rows)

    # ---------------------------------------------------------------- corrections

    def get_passage(self, agent_id: int, passage_id: int) -> SearchHit | None:
        rows = self._q("SELECT id, text, tags, created_at FROM passages WHERE id = ? AND "
                       "agent_id = ?", (passage_id, agent_id))
        return self._passage_hit(rows[0]) if rows else None

    def update_passage(self, agent_id: int, passage_id: int, text: str,
                       at: str | None = None) -> SearchHit:
        """Give a passage a new text (dated `at`; its tags stay); the version it replaces is
        kept as history. Returns that version; LookupError when the agent has no such
        passage."""
        text, at = clean_text(text), at or now_iso()
        with self.transaction():
            row = self._passage_row(agent_id, passage_id)
            history_id = self._keep_version(agent_id, row, "update", "", at)
            self._set_passage_text(agent_id, passage_id, text, at)
            self._journal(agent_id, "passage_update", passage_id,
                          {"text": row["text"], "created_at": row["created_at"],
                           "history_id": history_id})
        return self._passage_hit((row["id"], row["text"], row["tags"], row["created_at"]))

    def retire_passage(self, agent_id: int, passage_id: int, reason: str,
                       at: str | None = None) -> SearchHit:
        """Remove a passage from archival memory, keeping its last version (and `reason`)
        as history. Returns that version; LookupError when the agent has no such passage."""
        with self.transaction():
            row = self._passage_row(agent_id, passage_id)
            history_id = self._keep_version(agent_id, row, "delete", clean_text(reason),
                                            at or now_iso())
            fts.remove(self._db, "passages", agent_id, [(passage_id, row["index_text"])])
            self._db.execute("DELETE FROM passages WHERE id = ?", (passage_id,))
            self._tombstones(agent_id, "passages", [passage_id])
            kept = {k: row[k] for k in ("id", "text", "created_at", "turn_id")}
            self._journal(agent_id, "passage_delete", passage_id,
                          {"row": {**kept, "tags": json.loads(row["tags"])},
                           "history_id": history_id})
        return self._passage_hit((row["id"], row["text"], row["tags"], row["created_at"]))

    def _passage_row(self, agent_id: int, passage_id: int) -> sqlite3.Row:
        rows = self._q("SELECT * FROM passages WHERE id = ? AND agent_id = ?",
                       (passage_id, agent_id))
        if not rows:
            raise LookupError(f"no passage #{passage_id}")
        return rows[0]

    def _keep_version(self, agent_id: int, row: sqlite3.Row, change: str, reason: str,
                      at: str) -> int:
        return self._db.execute(
            "INSERT INTO passage_history (agent_id, passage_id, text, tags, created_at, "
            "superseded_at, change, reason, turn_id, origin_turn_id, rev) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (agent_id, row["id"], row["text"], row["tags"], row["created_at"], at, change,
             reason, self.open_turn(agent_id), row["turn_id"], self._bump(agent_id))).lastrowid

    def _set_passage_text(self, agent_id: int, passage_id: int, text: str,
                          created_at: str) -> None:
        old = self._q("SELECT index_text FROM passages WHERE id = ?", (passage_id,))[0][0]
        indexed = index_text(text)
        self._db.execute("UPDATE passages SET text = ?, norm = ?, index_text = ?, "
                         "created_at = ?, rev = ? WHERE id = ? AND agent_id = ?",
                         (text, normalise(text), indexed, created_at, self._bump(agent_id),
                          passage_id, agent_id))
        fts.remove(self._db, "passages", agent_id, [(passage_id, old)])
        fts.add(self._db, "passages", agent_id, [(passage_id, indexed)])

    def _reinsert_passage(self, agent_id: int, row: dict[str, Any]) -> None:
        """Put a removed passage back under its own id (an undo)."""
        indexed = index_text(row["text"])
        self._db.execute(
            "INSERT INTO passages (id, agent_id, text, tags, norm, index_text, created_at, rev, "
            "turn_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (row["id"], agent_id, row["text"], self._dumps(row["tags"]),
             normalise(row["text"]), indexed, row["created_at"], self._bump(agent_id),
             row.get("turn_id")))
        fts.add(self._db, "passages", agent_id, [(row["id"], indexed)])

    def _drop_passage_versions(self, agent_id: int, ids: list[int]) -> None:
        self._db.executemany("DELETE FROM passage_history WHERE id = ? AND agent_id = ?",
                             [(i, agent_id) for i in ids])
        self._tombstones(agent_id, "passage_history", ids)

    def _revert_passages(self, agent_id: int, turn: int, popped: Any) -> None:
        """Put back each passage the (finished) turn updated or deleted, newest change first,
        unless a later change exists (it is then left, and named in `passages_kept`)."""
        for h in self._q("SELECT id, passage_id, text, tags, created_at, change, "
                         "origin_turn_id FROM passage_history WHERE agent_id = ? AND "
                         "turn_id = ? ORDER BY id DESC", (agent_id, turn)):
            pid = h["passage_id"]
            later = self._q("SELECT 1 FROM passage_history WHERE agent_id = ? AND "
                            "passage_id = ? AND id > ? LIMIT 1", (agent_id, pid, h["id"]))
            exists = self.get_passage(agent_id, pid) is not None
            if later or exists != (h["change"] == "update"):
                if pid not in popped.passages_kept:
                    popped.passages_kept.append(pid)
                continue
            if h["change"] == "update":
                self._set_passage_text(agent_id, pid, h["text"], h["created_at"])
            else:
                self._reinsert_passage(agent_id, {
                    "id": pid, "text": h["text"], "tags": json.loads(h["tags"]),
                    "created_at": h["created_at"], "turn_id": h["origin_turn_id"]})
            self._drop_passage_versions(agent_id, [h["id"]])
            popped.passages_restored.append(pid)

    # ---------------------------------------------------------------- history

    def passage_versions(self, agent_id: int, *,
                         passage_ids: list[int] | None = None) -> list[PassageVersion]:
        """The agent's superseded and deleted passage versions, oldest first (of
        `passage_ids` only, if given)."""
        if passage_ids is not None and not passage_ids:
            return []
        sql, params = _VERSION + "WHERE agent_id = ?", [agent_id]
        if passage_ids is not None:
            sql += f" AND passage_id IN ({', '.join('?' * len(passage_ids))})"
            params += passage_ids
        return [_version(r) for r in self._q(sql + " ORDER BY id", params)]

    def deleted_version(self, agent_id: int, passage_id: int) -> PassageVersion | None:
        """The last version of a passage the agent deleted, if that is what became of it."""
        rows = self._q(_VERSION + "WHERE agent_id = ? AND passage_id = ? ORDER BY id DESC "
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
                self._db.execute(
                    "INSERT INTO passage_history (agent_id, passage_id, text, tags, created_at, "
                    "superseded_at, change, reason, turn_id, rev) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (agent_id, pid, row["text"], self._dumps(row["tags"]), row["created_at"],
                     row["superseded_at"], row["change"], row.get("reason") or "",
                     row.get("turn_id"), rev))

    def purge_passage_versions(self, agent_id: int, ids: list[int]) -> int:
        """Delete history versions for good; returns how many went."""
        found = [r[0] for i in ids for r in self._q(
            "SELECT id FROM passage_history WHERE id = ? AND agent_id = ?", (i, agent_id))]
        with self.transaction():
            self._drop_passage_versions(agent_id, found)
        return len(found)

    def passage_candidates(self, agent_id: int, text: str) -> list[SearchHit]:
        """The passages a new one may repeat or correct: the best 20 for its words."""
        return self.search_passages(agent_id, text, per_page=20).hits

    def similar_passages(self, agent_id: int, text: str, limit: int = 3, *,
                         candidates: list[SearchHit] | None = None) -> list[SearchHit]:
        """Stored passages that share a good part of `text`'s topic words (at least two, or
        all of the shorter text's): what a new passage may repeat or correct."""
        words = _topic_words(text)
        found = []
        for hit in self.passage_candidates(agent_id, text) if candidates is None else candidates:
            other = _topic_words(hit.text)
            shared = len(words & other)
            least = min(len(words), len(other))
            if least and shared >= min(2, least) and shared / least >= SIMILAR_SHARE:
                found.append(hit)
        return found[:limit]


def _version(row: sqlite3.Row) -> PassageVersion:
    return PassageVersion(row["id"], row["passage_id"], row["text"], json.loads(row["tags"]),
                          row["created_at"], row["superseded_at"], row["change"],
                          row["reason"], row["turn_id"])


def _topic_words(text: str) -> set[str]:
    """A text's words without stop words, long ones cut to a 5-letter stem (allergic and
    allergies meet), a plural's s dropped; CJK as bigrams."""
    return {w[:5] if len(w) >= 7 and w.isalpha() else w.rstrip("s") or w
            for w in word_set(text) if w not in STOP_WORDS}
