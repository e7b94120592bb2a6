"""Archival memory in the store: passages the model chose to keep, with tags,
`archival_search` over the agent's own keyword index, and corrections.

A correction (`update_passage`, `retire_passage`) keeps the version it replaces or removes in
`passage_history`: never indexed, so search never returns it, and purged with its passage by
`delete_passages` (undo, /pop); forget deletes the versions that match (store/scrub.py).
A passage id is never reused while a passage or its history holds it, so an id the model saw
always means the same passage. Ids are counted for the whole SQLite file, or per agent where
the database holds many agents (Postgres, see database.py); while a recording watches the
agent, the ids its new passages get are reported to it, so a replay hands out the same.

A mixin of `sql.SQLStore`, over the database seam (see core.py).
"""

from __future__ import annotations

import json
import math
from typing import Any

from memgpt_lite.engine import search
from memgpt_lite.engine.records import PassageVersion, SearchHit, SearchPage, now_iso
from memgpt_lite.engine.search import STOP_WORDS, index_text, normalise, word_set
from memgpt_lite.engine.store.core import StoreCore, chunked

SIMILAR_SHARE = 0.3  # of the shorter text's topic words, for a passage to count as similar
_HIT = "SELECT id, text, tags, created_at FROM passages "
_ROW = ("id", "text", "tags", "created_at", "turn_id", "index_text")
_VERSION = ("SELECT id, passage_id, text, tags, created_at, superseded_at, change, reason, "
            "turn_id FROM passage_history ")
_COLUMNS = ("id", "agent_id", "text", "tags", "norm", "index_text", "created_at", "rev",
            "turn_id")


def _passage_hit(row: tuple, score: float = 0.0) -> SearchHit:
    return SearchHit(row[0], row[1], row[3], tags=json.loads(row[2]), score=score)


def _version(row: tuple) -> PassageVersion:
    return PassageVersion(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5], row[6],
                          row[7], row[8])


class ArchiveMixin(StoreCore):
    """Passages: stored, tagged, searched, listed, corrected, deleted."""

    def add_passage(self, agent_id: int, text: str, tags: list[str] | None = None,
                    created_at: str | None = None, *, turn_id: int | None = None) -> int:
        """Store a passage; it belongs to `turn_id`, else to the agent's open turn (if any),
        which journals it (see turns.py)."""
        text = self.db.text(text)
        tags = [self.db.text(t) for t in (tags or [])]
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
        names, exprs, values = self.index.insert_columns(agent_id, [indexed])
        self.db.execute(f"INSERT INTO passages ({', '.join((*_COLUMNS, *names))}) VALUES "
                        f"({', '.join(('?',) * len(_COLUMNS) + exprs)})",
                        (pid, agent_id, text, self._dumps(tags), normalise(text), indexed,
                         created_at, rev, turn_id, *values[0]))
        self.index.inserted("passages", agent_id, [(pid, indexed)], values)

    def _new_passage_id(self, agent_id: int) -> int:
        """Above every passage and every passage's history (of the agent, where ids are
        counted per agent), so that a deleted passage's id never comes back as another
        passage's. Call after `_bump`."""
        mine = " WHERE agent_id = ?" if self.db.ids_per_agent else ""
        tops = self.db.query(f"SELECT (SELECT coalesce(max(id), 0) FROM passages{mine}), "
                             "(SELECT coalesce(max(passage_id), 0) FROM passage_history"
                             f"{mine})", (agent_id, agent_id) if mine else ())[0]
        top = max(tops)
        watch = self._watches.get(agent_id)
        if watch is not None:
            watch.passage_ids.append(top + 1)
        return top + 1

    # ---------------------------------------------------------------- searching

    def search_passages(self, agent_id: int, query: str, page: int = 1, per_page: int = 5,
                        tags: list[str] | None = None, *,
                        dense: dict[int, float] | None = None,
                        keyword_weight: float = search.KEYWORD_WEIGHT) -> SearchPage:
        """Passages ranked by BM25 over any query term; with tags, only passages having any;
        with `dense` ({id: cosine} from the dense side), fused with it (`search.fuse`)."""
        page, per_page = max(1, int(page)), max(1, int(per_page))
        tags = [self.db.text(t) for t in tags] if tags else None
        where, params = self.db.any_of("m.tags", tags) if tags else ("", [])
        rows = self.index.scores("passages", agent_id, query, [where] if where else [], params)
        scores = {i: score for i, score, _ in rows}
        if dense:
            allowed = self._with_tags(agent_id, list(dense), tags) if tags else set(dense)
            scores = search.fuse(scores, {i: s for i, s in dense.items() if i in allowed},
                                 keyword_weight)
        if not scores:
            return SearchPage([], page, 0, 0)
        ids = search.top_page(scores, page, per_page)
        found = {r[0]: r for r in self.db.query(
            _HIT + f"WHERE {self._keyed(ids)}", (agent_id, *ids))}
        hits = [_passage_hit(found[i], scores[i]) for i in ids]
        return SearchPage(hits, page, math.ceil(len(scores) / per_page), len(scores))

    def _with_tags(self, agent_id: int, ids: list[int], tags: list[str]) -> set[int]:
        where, params = self.db.any_of("m.tags", tags)
        return {r[0] for chunk in chunked(ids) for r in self.db.query(
            f"SELECT m.id FROM passages m WHERE {self._keyed(chunk, 'm.')} "
            f"AND {where}", (agent_id, *chunk, *params))}

    def passage_candidates(self, agent_id: int, text: str) -> list[SearchHit]:
        """The passages a new one may repeat or correct: the best 20 for its words."""
        return self.search_passages(agent_id, text, per_page=20).hits

    def near_duplicate(self, agent_id: int, text: str, threshold: float = 0.9, *,
                       candidates: list[SearchHit] | None = None) -> SearchHit | None:
        """A stored passage equal to `text` after normalising case and whitespace, or whose
        word set overlaps it with Jaccard >= threshold (checked among the BM25 candidates,
        or the `candidates` given: `passage_candidates`)."""
        text = self.db.text(text)
        same, params = self.db.same_text("norm", normalise(text))
        rows = self.db.query(_HIT + f"WHERE agent_id = ? AND {same} ORDER BY id LIMIT 1",
                             (agent_id, *params))
        if rows:
            return _passage_hit(rows[0])
        words = word_set(text)
        if not words:
            return None
        for hit in self.passage_candidates(agent_id, text) if candidates is None else candidates:
            other = word_set(hit.text)
            if len(words & other) / len(words | other) >= threshold:
                return hit
        return None

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

    # ---------------------------------------------------------------- listing

    def list_passages(self, agent_id: int, limit: int | None = 50,
                      offset: int = 0) -> list[SearchHit]:
        """Passages oldest first; limit None: all of them."""
        page = "" if limit is None else f" LIMIT {int(limit)} OFFSET {int(offset)}"
        rows = self.db.query(_HIT + f"WHERE agent_id = ? ORDER BY id{page}", (agent_id,))
        if limit is None:
            rows = rows[offset:]
        return [_passage_hit(r) for r in rows]

    def passage_turns(self, agent_id: int) -> list[int | None]:
        """The turn that inserted each passage (None: not a turn's), oldest passage first,
        as list_passages orders them (exports keep them, so /pop works after an import)."""
        return [r[0] for r in self.db.query("SELECT turn_id FROM passages WHERE agent_id = ? "
                                            "ORDER BY id", (agent_id,))]

    def count_passages(self, agent_id: int) -> int:
        return self.db.query("SELECT count(*) FROM passages WHERE agent_id = ?",
                             (agent_id,))[0][0]

    def get_passage(self, agent_id: int, passage_id: int) -> SearchHit | None:
        rows = self.db.query(_HIT + "WHERE agent_id = ? AND id = ?", (agent_id, passage_id))
        return _passage_hit(rows[0]) if rows else None

    # ---------------------------------------------------------------- deleting

    def delete_passages(self, agent_id: int, ids: list[int]) -> int:
        """Delete passages for good, their history with them (undo, /pop)."""
        with self.transaction():
            rows = [(r[0], r[1]) for chunk in chunked(ids) for r in self.db.query(
                f"SELECT id, index_text FROM passages WHERE "
                f"{self._keyed(chunk)} ORDER BY id", (agent_id, *chunk))]
            self._delete_passage_rows(agent_id, rows)
            self.purge_passage_versions(agent_id, [v.id for v in self.passage_versions(
                agent_id, passage_ids=[r[0] for r in rows])])
        return len(rows)

    def _delete_passage_rows(self, agent_id: int, rows: list[tuple[int, str]]) -> None:
        self.index.remove("passages", agent_id, rows)
        for chunk in chunked([r[0] for r in rows]):
            self.db.execute(f"DELETE FROM passages WHERE "
                            f"{self._keyed(chunk)}", (agent_id, *chunk))
        self._tombstones(agent_id, "passages", [r[0] for r in rows])

    def _undo_passage(self, agent_id: int, target: str, before: None) -> None:
        self.delete_passages(agent_id, [int(target)])

    # ---------------------------------------------------------------- corrections

    def update_passage(self, agent_id: int, passage_id: int, text: str,
                       at: str | None = None) -> SearchHit:
        """Give a passage a new text (dated `at`; its tags stay); the version it replaces is
        kept as history. Returns that version; LookupError when the agent has no such
        passage."""
        text, at = self.db.text(text), at or now_iso()
        with self.transaction():
            self._bump(agent_id)
            row = self._passage_row(agent_id, passage_id)
            history_id = self._keep_version(agent_id, row, "update", "", at)
            self._set_passage_text(agent_id, passage_id, text, at)
            self._journal(agent_id, "passage_update", passage_id,
                          {"text": row["text"], "created_at": row["created_at"],
                           "history_id": history_id})
        return _passage_hit((row["id"], row["text"], row["tags"], row["created_at"]))

    def retire_passage(self, agent_id: int, passage_id: int, reason: str,
                       at: str | None = None) -> SearchHit:
        """Remove a passage from archival memory, keeping its last version (and `reason`)
        as history. Returns that version; LookupError when the agent has no such passage."""
        with self.transaction():
            self._bump(agent_id)
            row = self._passage_row(agent_id, passage_id)
            history_id = self._keep_version(agent_id, row, "delete", self.db.text(reason),
                                            at or now_iso())
            self._delete_passage_rows(agent_id, [(passage_id, row["index_text"])])
            kept = {k: row[k] for k in ("id", "text", "created_at", "turn_id")}
            self._journal(agent_id, "passage_delete", passage_id,
                          {"row": {**kept, "tags": json.loads(row["tags"])},
                           "history_id": history_id})
        return _passage_hit((row["id"], row["text"], row["tags"], row["created_at"]))

    def _passage_row(self, agent_id: int, passage_id: int) -> dict[str, Any]:
        rows = self.db.query(f"SELECT {', '.join(_ROW)} FROM passages WHERE agent_id = ? AND "
                             "id = ?", (agent_id, passage_id))
        if not rows:
            raise LookupError(f"no passage #{passage_id}")
        return dict(zip(_ROW, rows[0]))

    def _keep_version(self, agent_id: int, row: dict[str, Any], change: str, reason: str,
                      at: str) -> int:
        vid = self.db.next_id("passage_history", agent_id)
        return self.db.insert(
            "INSERT INTO passage_history (id, agent_id, passage_id, text, tags, created_at, "
            "superseded_at, change, reason, turn_id, origin_turn_id, rev) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (vid, agent_id, row["id"], row["text"], row["tags"], row["created_at"], at, change,
             reason, self.open_turn(agent_id), row["turn_id"], self._bump(agent_id)))

    def _set_passage_text(self, agent_id: int, passage_id: int, text: str,
                          created_at: str) -> None:
        old = self.db.query("SELECT index_text FROM passages WHERE agent_id = ? AND id = ?",
                            (agent_id, passage_id))[0][0]
        indexed = index_text(text)
        self.index.remove("passages", agent_id, [(passage_id, old)])
        self.db.execute("UPDATE passages SET text = ?, norm = ?, index_text = ?, "
                        "created_at = ?, rev = ? WHERE agent_id = ? AND id = ?",
                        (text, normalise(text), indexed, created_at, self._bump(agent_id),
                         agent_id, passage_id))
        self.index.add("passages", agent_id, [(passage_id, indexed)])

    def _undo_passage_update(self, agent_id: int, target: str, before: dict) -> None:
        self._set_passage_text(agent_id, int(target), before["text"], before["created_at"])
        self._drop_passage_versions(agent_id, [before["history_id"]])

    def _undo_passage_delete(self, agent_id: int, target: str, before: dict) -> None:
        self._reinsert_passage(agent_id, before["row"])
        self._drop_passage_versions(agent_id, [before["history_id"]])

    def _reinsert_passage(self, agent_id: int, row: dict[str, Any]) -> None:
        """Put a removed passage back under its own id (an undo)."""
        self._insert_passage(agent_id, row["id"], row["text"], list(row["tags"]),
                             row["created_at"], self._bump(agent_id), row.get("turn_id"))

    def _drop_passage_versions(self, agent_id: int, ids: list[int]) -> None:
        for chunk in chunked(ids):
            self.db.execute(f"DELETE FROM passage_history WHERE "
                            f"{self._keyed(chunk)}", (agent_id, *chunk))
        self._tombstones(agent_id, "passage_history", ids)

    def _revert_passages(self, agent_id: int, turn: int, popped: Any) -> None:
        """Put back each passage the (finished) turn updated or deleted, newest change first,
        unless a later change exists (it is then left, and named in `passages_kept`)."""
        for vid, pid, text, tags, created_at, change, origin in self.db.query(
                "SELECT id, passage_id, text, tags, created_at, change, origin_turn_id FROM "
                "passage_history WHERE agent_id = ? AND turn_id = ? ORDER BY id DESC",
                (agent_id, turn)):
            later = self.db.query("SELECT 1 FROM passage_history WHERE agent_id = ? AND "
                                  "passage_id = ? AND id > ? LIMIT 1", (agent_id, pid, vid))
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
        if passage_ids is None:
            rows = self.db.query(_VERSION + "WHERE agent_id = ? ORDER BY id", (agent_id,))
        else:
            rows = sorted((r for chunk in chunked(passage_ids) for r in self.db.query(
                _VERSION + f"WHERE agent_id = ? AND passage_id IN {self._in(chunk)}",
                (agent_id, *chunk))), key=lambda r: r[0])
        return [_version(r) for r in rows]

    def deleted_version(self, agent_id: int, passage_id: int) -> PassageVersion | None:
        """The last version of a passage the agent deleted, if that is what became of it."""
        rows = self.db.query(_VERSION + "WHERE agent_id = ? AND passage_id = ? ORDER BY id DESC "
                             "LIMIT 1", (agent_id, passage_id))
        found = _version(rows[0]) if rows else None
        return found if found and found.change == "delete" else None

    def restore_passage_versions(self, agent_id: int, rows: list[dict[str, Any]],
                                 new_ids: dict[int, int]) -> None:
        """History versions of an import, as exported; `new_ids` maps the export's passage
        ids to the imported ones (a deleted passage's versions get a fresh id of their own)."""
        text = self.db.text
        with self.transaction():
            rev = self._bump(agent_id)
            for row in rows:
                pid = new_ids.get(row["passage_id"])
                if pid is None:
                    pid = new_ids[row["passage_id"]] = self._new_passage_id(agent_id)
                self.db.execute(
                    "INSERT INTO passage_history (id, agent_id, passage_id, text, tags, "
                    "created_at, superseded_at, change, reason, turn_id, rev) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (self.db.next_id("passage_history", agent_id), agent_id, pid,
                     text(row["text"]), self._dumps([text(t) for t in row["tags"]]),
                     text(row["created_at"]), text(row["superseded_at"]), row["change"],
                     text(row.get("reason") or ""), row.get("turn_id"), rev))

    def purge_passage_versions(self, agent_id: int, ids: list[int]) -> int:
        """Delete history versions for good; returns how many went."""
        with self.transaction():
            found = [r[0] for chunk in chunked(ids) for r in self.db.query(
                f"SELECT id FROM passage_history WHERE {self._keyed(chunk)}",
                (agent_id, *chunk))]
            if found:
                self._drop_passage_versions(agent_id, found)
        return len(found)


def _topic_words(text: str) -> set[str]:
    """A text's words without stop words, long ones cut to a 5-letter stem (allergic and
    allergies meet), a plural's s dropped; CJK as bigrams."""
    return {w[:5] if len(w) >= 7 and w.isalpha() else w.rstrip("s") or w
            for w in word_set(text) if w not in STOP_WORDS}
