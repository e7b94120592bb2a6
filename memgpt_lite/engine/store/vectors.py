"""Vectors in the store: one embedding per message or passage with text, in a side table keyed
by the row's id, stored as int8 bytes with a per-row scale and the model that made it.

Vectors are derived data: any of them can be made again from the stored text, so they carry
no revision, are not part of base snapshots, recording deltas or exports (an import or a
replay has none; `memgpt-lite index` makes them), and a strict replay never needs them: a
recording carries what the dense side of each search returned (see `engine/dense.py`).
Triggers delete a row's vector when the row is deleted or its text changes, so a forget or
a /pop leaves no embedding of the text behind.

Search scans them exactly (numpy, see `search.dense_top`) from an in-memory copy per agent,
kind and model, refreshed incrementally: new vectors have higher ids, and every deletion
bumps a counter that makes the next search reload. The copy is read in chunks, so a million
vectors never exist as Python objects at once.

A mixin of `sql.SQLStore`, over the database seam (see core.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from memgpt_lite.engine import search
from memgpt_lite.engine.search import plain_text
from memgpt_lite.engine.store.core import StoreCore

KINDS = ("messages", "passages")
LOAD_CHUNK = 20_000  # rows read into Python objects at a time


@dataclass
class Loaded:
    """One agent's vectors of one kind and model, as arrays (see VectorsMixin._index)."""

    ids: Any
    matrix: Any
    scales: Any
    times: Any  # datetime64[s] of each row, for date filters
    max_id: int = 0
    deletions: int = 0

    @staticmethod
    def joined(parts: list[Loaded], max_id: int, deletions: int) -> Loaded:
        import numpy as np

        arrays = [f.name for f in fields(Loaded)][:4]
        if not parts:
            return Loaded(np.zeros(0, np.int64), np.zeros((0, 0), np.int8),
                          np.zeros(0, np.float32), np.zeros(0, "datetime64[s]"), 0, deletions)
        if len(parts) == 1:
            return Loaded(*(getattr(parts[0], a) for a in arrays), max_id, deletions)
        return Loaded(*(np.concatenate([getattr(p, a) for p in parts]) for a in arrays),
                      max_id, deletions)


_TEXT = {"messages": "m.role, m.content", "passages": "'', m.text"}  # what is embedded


def _texts(kind: str, rows: list[Any]) -> list[tuple[int, str]]:
    """(id, the text to embed) of rows selected as `m.id, _TEXT[kind]`."""
    if kind == "passages":
        return [(r[0], r[2]) for r in rows]
    return [(r[0], plain_text(r[1], json.loads(r[2]))) for r in rows]


def _table(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    return kind


class VectorsMixin(StoreCore):
    """Embeddings of messages and passages: written by the indexer, scanned by search."""

    def _vector_cache(self) -> dict[tuple[int, str, str, int], Loaded]:
        return self.__dict__.setdefault("_vectors_loaded", {})

    # ---------------------------------------------------------------- writing

    def texts_to_embed(self, agent_id: int, kind: str, model: str, *, limit: int = 256,
                       after_id: int = 0) -> list[tuple[int, str]]:
        """(id, text) of rows with text but no vector of `model`, oldest first, id > after_id."""
        rows = self.db.query(f"SELECT m.id, {_TEXT[kind]} FROM {_table(kind)} m LEFT JOIN "
                             "vectors v ON v.agent_id = m.agent_id AND v.kind = ? AND "
                             "v.row_id = m.id AND v.model = ? WHERE m.agent_id = ? AND "
                             "m.index_text != '' AND v.id IS NULL AND m.id > ? ORDER BY m.id "
                             "LIMIT ?", (kind, model, agent_id, after_id, limit))
        return _texts(kind, rows)

    def last_row_id(self, agent_id: int, kind: str) -> int:
        """The highest id of the agent's rows of `kind` (0: none); the background indexer
        embeds what comes after it."""
        return self.db.query(f"SELECT coalesce(max(id), 0) FROM {_table(kind)} "
                             "WHERE agent_id = ?", (agent_id,))[0][0]

    def put_vectors(self, agent_id: int, kind: str, model: str, ids: list[int],
                    rows: Any, texts: list[str] | None = None) -> int:
        """Store unit vectors for rows (replacing any of another model); rows deleted
        meanwhile are skipped, and with `texts` (what was embedded, as `texts_to_embed` gave
        it) so are rows whose text changed meanwhile: a forget that redacts a message in
        the queue must not get back a vector of what it removed. Returns how many were
        stored."""
        matrix, scales = search.quantize(rows)
        with self.transaction():
            # Two writers may embed the same new rows (a chat's indexer and `memgpt-lite
            # index`, or two index runs): on Postgres each would delete nothing and insert a
            # vector for the same row, and the second insert breaks the unique key. The
            # agent's row lock makes them take turns (SQLite's write lock already does).
            self.db.query(f"SELECT id FROM agents WHERE id = ?{self.db.for_update()}",
                          (agent_id,))
            live = dict(_texts(kind, self.db.query(
                f"SELECT m.id, {_TEXT[kind]} FROM {_table(kind)} m WHERE "
                f"{self._keyed(ids, 'm.')}", (agent_id, *ids))))
            keep = [(i, j) for j, i in enumerate(ids)
                    if i in live and (texts is None or live[i] == texts[j])]
            gone = [i for i, _ in keep]
            self.db.execute(f"DELETE FROM vectors WHERE kind = ? AND "
                            f"{self._keyed(gone, column='row_id')}", (kind, agent_id, *gone))
            self.db.executemany(
                "INSERT INTO vectors (agent_id, kind, row_id, model, vec, scale) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(agent_id, kind, i, model, matrix[j].tobytes(), float(scales[j]))  # type: ignore[index]
                 for i, j in keep])
        return len(keep)

    def delete_vectors(self, agent_id: int, *, except_model: str | None = None,
                       except_dim: int | None = None) -> int:
        """Delete the agent's vectors (those not of `except_model`, and with `except_dim`
        those of another dimension too); returns how many."""
        sql, params = "DELETE FROM vectors WHERE agent_id = ? AND (model != ?", [agent_id,
                                                                              except_model or ""]
        if except_dim is not None:
            sql, params = sql + " OR length(vec) != ?", params + [except_dim]
        with self.transaction():
            return self.db.execute(sql + ")", tuple(params))

    # ---------------------------------------------------------------- reading

    def vector_counts(self, agent_id: int, model: str | None) -> dict[str, dict[str, int]]:
        """Per kind: rows with text, how many have a vector of `model`, of another model."""
        out = {}
        for kind in KINDS:
            total = self.db.query(f"SELECT count(*) FROM {_table(kind)} WHERE agent_id = ? AND "
                                  "index_text != ''", (agent_id,))[0][0]
            got = {bool(r[0]): r[1] for r in self.db.query(
                "SELECT model = ?, count(*) FROM vectors WHERE agent_id = ? AND kind = ? "
                "GROUP BY 1", (model or "", agent_id, kind))}
            out[kind] = {"rows": total, "current": got.get(True, 0),
                         "other": got.get(False, 0), "missing": total - got.get(True, 0)}
        return out

    def vector_models(self, agent_id: int) -> dict[str, int]:
        return {r[0]: r[1] for r in self.db.query(
            "SELECT model, count(*) FROM vectors WHERE agent_id = ? GROUP BY model",
            (agent_id,))}

    def vector_dim(self, agent_id: int, model: str) -> int | None:
        """The dimension of the agent's vectors of `model` (None: it has none)."""
        for kind in KINDS:  # one index seek each
            rows = self.db.query("SELECT length(vec) FROM vectors WHERE agent_id = ? AND "
                                 "kind = ? AND model = ? LIMIT 1", (agent_id, kind, model))
            if rows:
                return rows[0][0]
        return None

    def dense_scores(self, agent_id: int, kind: str, model: str, query: Any, *,
                     limit: int = search.DENSE_CANDIDATES, start_date: str | None = None,
                     end_date: str | None = None) -> dict[int, float]:
        """{row id: cosine} of the `limit` rows most similar to the unit vector `query` among
        the agent's rows of `kind` having a vector of `model` (dates YYYY-MM-DD, inclusive)."""
        import numpy as np

        loaded = self._index(agent_id, kind, model, len(query))
        if not len(loaded.ids):
            return {}
        mask = None
        if start_date or end_date:
            mask = np.ones(len(loaded.ids), dtype=bool)
            if start_date:
                mask &= loaded.times >= np.datetime64(start_date)
            if end_date:
                mask &= loaded.times < np.datetime64(end_date) + np.timedelta64(1, "D")
        top = search.dense_top(loaded.matrix, loaded.scales, query, limit, mask)
        return {int(loaded.ids[i]): score for i, score in top}

    def _index(self, agent_id: int, kind: str, model: str, dim: int) -> Loaded:
        """The in-memory copy of the agent's vectors of `dim` dimensions, brought up to date.
        Only those: an endpoint serves whatever model it has loaded under the name it is
        given, so one name may hold vectors of two sizes until `memgpt-lite index` runs."""
        key = (agent_id, kind, model, dim)
        cache = self._vector_cache()
        deletions = self.db.query("SELECT coalesce(max(n), 0) FROM vector_deletions WHERE id = ?",
                                  (agent_id,))[0][0]
        old = cache.get(key)
        if old is not None and old.deletions != deletions:
            old = None
        cache[key] = loaded = self._load(agent_id, kind, model, dim, old, deletions)
        return loaded

    def _load(self, agent_id: int, kind: str, model: str, dim: int, old: Loaded | None,
              deletions: int) -> Loaded:
        """`old` plus the vectors added since it was loaded, read in chunks."""
        import numpy as np

        after = old.max_id if old is not None else 0
        parts = [old] if old is not None else []
        max_id = after
        for rows in self.db.stream(
                f"SELECT v.id, v.row_id, v.vec, v.scale, m.created_at FROM vectors v "
                f"JOIN {_table(kind)} m ON m.agent_id = v.agent_id AND m.id = v.row_id "
                "WHERE v.agent_id = ? AND v.kind = ? AND v.model = ? AND v.id > ? "
                "AND length(v.vec) = ? ORDER BY v.id", (agent_id, kind, model, after, dim),
                LOAD_CHUNK):
            parts.append(Loaded(
                np.array([r[1] for r in rows], dtype=np.int64),
                np.frombuffer(b"".join(r[2] for r in rows),
                              dtype=np.int8).reshape(-1, dim),
                np.array([r[3] for r in rows], dtype=np.float32),
                np.array([r[4].rstrip("Z") for r in rows], dtype="datetime64[s]")))
            max_id = rows[-1][0]
        return Loaded.joined(parts, max_id, deletions)
