"""Vectors in the SQLite store: one embedding per message or passage with text, in a side
table keyed by the row's id, stored as int8 with a per-row scale and the model that made it.

Vectors are derived data: any of them can be made again from the stored text, so they carry
no revision, are not part of base snapshots, recording deltas or exports (an import or a
replay has none; `memgpt-lite index` makes them), and a strict replay never needs them: a
recording carries what the dense side of each search returned (see `engine/dense.py`).
Triggers delete a row's vector when the row is deleted or its text changes, so a forget or
a /pop leaves no embedding of the text behind.

Search scans them exactly (numpy, see `search.dense_top`) from an in-memory copy per agent,
kind and model, refreshed incrementally: new vectors have higher ids, and every deletion
bumps a counter that makes the next search reload.

A mixin of `sqlite.Store`.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from memgpt_lite.engine import search
from memgpt_lite.engine.search import plain_text

KINDS = ("messages", "passages")


@dataclass
class _Loaded:
    """One agent's vectors of one kind and model, as arrays (see VectorMixin._index)."""

    ids: Any
    matrix: Any
    scales: Any
    times: Any  # datetime64[s] of each row, for date filters
    max_id: int
    deletions: int


class VectorMixin:
    """Embeddings of messages and passages: written by the indexer, scanned by search."""

    _db: sqlite3.Connection

    def _vector_cache(self) -> dict[tuple[int, str, str], _Loaded]:
        cache = self.__dict__.get("_vectors_loaded")
        if cache is None:
            cache = self.__dict__["_vectors_loaded"] = {}
        return cache

    # ---------------------------------------------------------------- writing

    def texts_to_embed(self, agent_id: int, kind: str, model: str, *, limit: int = 256,
                       after_id: int = 0) -> list[tuple[int, str]]:
        """(id, text) of rows with text but no vector of `model`, oldest first, id > after_id."""
        table = _table(kind)
        text = "m.role, m.content" if kind == "messages" else "'', m.text"
        rows = self._q(f"SELECT m.id, {text} FROM {table} m LEFT JOIN vectors v ON "
                       "v.kind = ? AND v.row_id = m.id AND v.model = ? WHERE m.agent_id = ? "
                       "AND m.index_text != '' AND v.id IS NULL AND m.id > ? ORDER BY m.id "
                       "LIMIT ?", (kind, model, agent_id, after_id, limit))
        if kind == "passages":
            return [(r[0], r[2]) for r in rows]
        return [(r[0], plain_text(r[1], json.loads(r[2]))) for r in rows]

    def put_vectors(self, agent_id: int, kind: str, model: str, ids: list[int],
                    rows: Any) -> int:
        """Store unit vectors for rows (replacing any of another model); rows deleted
        meanwhile are skipped. Returns how many were stored."""
        matrix, scales = search.quantize(rows)
        table = _table(kind)
        with self.transaction():  # type: ignore[attr-defined]
            live = {r[0] for r in self._q(
                f"SELECT id FROM {table} WHERE agent_id = ? AND id IN "
                f"({', '.join('?' * len(ids))})", [agent_id, *ids])} if ids else set()
            keep = [(i, j) for j, i in enumerate(ids) if i in live]
            self._db.executemany("DELETE FROM vectors WHERE kind = ? AND row_id = ?",
                                 [(kind, i) for i, _ in keep])
            self._db.executemany(
                "INSERT INTO vectors (agent_id, kind, row_id, model, vec, scale) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(agent_id, kind, i, model, matrix[j].tobytes(), float(scales[j]))  # type: ignore[index]
                 for i, j in keep])
        return len(keep)

    def delete_vectors(self, agent_id: int, *, except_model: str | None = None) -> int:
        """Delete the agent's vectors (those not of `except_model`); returns how many."""
        with self.transaction():  # type: ignore[attr-defined]
            cur = self._db.execute("DELETE FROM vectors WHERE agent_id = ? AND model != ?",
                                   (agent_id, except_model or ""))
        return cur.rowcount

    # ---------------------------------------------------------------- reading

    def vector_counts(self, agent_id: int, model: str | None) -> dict[str, dict[str, int]]:
        """Per kind: rows with text, how many have a vector of `model`, of another model."""
        out = {}
        for kind in KINDS:
            total = self._q(f"SELECT count(*) FROM {_table(kind)} WHERE agent_id = ? AND "
                            "index_text != ''", (agent_id,))[0][0]
            got = {r[0]: r[1] for r in self._q(
                "SELECT model = ?, count(*) FROM vectors WHERE agent_id = ? AND kind = ? "
                "GROUP BY model = ?", (model or "", agent_id, kind, model or ""))}
            out[kind] = {"rows": total, "current": got.get(1, 0), "other": got.get(0, 0),
                         "missing": total - got.get(1, 0)}
        return out

    def vector_models(self, agent_id: int) -> dict[str, int]:
        return {r[0]: r[1] for r in self._q(
            "SELECT model, count(*) FROM vectors WHERE agent_id = ? GROUP BY model", (agent_id,))}

    def vector_dim(self, agent_id: int, model: str) -> int | None:
        """The dimension of the agent's vectors of `model` (None: it has none)."""
        for kind in KINDS:  # one index seek each
            rows = self._q("SELECT length(vec) FROM vectors WHERE agent_id = ? AND kind = ? "
                           "AND model = ? LIMIT 1", (agent_id, kind, model))
            if rows:
                return rows[0][0]
        return None

    def dense_scores(self, agent_id: int, kind: str, model: str, query: Any, *,
                     limit: int = search.DENSE_CANDIDATES, start_date: str | None = None,
                     end_date: str | None = None) -> dict[int, float]:
        """{row id: cosine} of the `limit` rows most similar to the unit vector `query` among
        the agent's rows of `kind` having a vector of `model` (dates YYYY-MM-DD, inclusive)."""
        import numpy as np

        loaded = self._index(agent_id, kind, model)
        if loaded is None or not len(loaded.ids):
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

    def _index(self, agent_id: int, kind: str, model: str) -> _Loaded | None:
        """The in-memory copy of the agent's vectors, brought up to date."""
        key = (agent_id, kind, model)
        cache = self._vector_cache()
        deletions = self._q("SELECT coalesce(max(n), 0) FROM vector_deletions WHERE id = ?",
                            (agent_id,))[0][0]
        old = cache.get(key)
        if old is not None and old.deletions != deletions:
            old = None
        cache[key] = loaded = self._load(agent_id, kind, model, old, deletions)
        return loaded

    def _load(self, agent_id: int, kind: str, model: str, old: _Loaded | None,
              deletions: int) -> _Loaded:
        """`old` plus the vectors added since it was loaded, read in chunks: a million
        rows never exist as Python objects at once (their memory would stay with the
        process)."""
        import numpy as np

        after = old.max_id if old is not None else 0
        cur = self._db.cursor()
        cur.row_factory = None
        cur.execute(f"SELECT v.id, v.row_id, v.vec, v.scale, m.created_at FROM vectors v "
                    f"JOIN {_table(kind)} m ON m.id = v.row_id WHERE v.agent_id = ? AND "
                    "v.kind = ? AND v.model = ? AND v.id > ? ORDER BY v.id",
                    (agent_id, kind, model, after))
        parts = [old] if old is not None else []
        max_id = after
        while rows := cur.fetchmany(LOAD_CHUNK):
            dim = len(rows[0][2])
            parts.append(_Loaded(
                np.array([r[1] for r in rows], dtype=np.int64),
                np.frombuffer(b"".join(r[2] for r in rows), dtype=np.int8).reshape(-1, dim),
                np.array([r[3] for r in rows], dtype=np.float32),
                np.array([r[4].rstrip("Z") for r in rows], dtype="datetime64[s]"),
                rows[-1][0], deletions))
            max_id = rows[-1][0]
        if not parts:
            return _Loaded(np.zeros(0, np.int64), np.zeros((0, 0), np.int8),
                           np.zeros(0, np.float32), np.zeros(0, "datetime64[s]"), 0, deletions)
        if len(parts) == 1:
            return _Loaded(*(getattr(parts[0], f) for f in _ARRAYS), max_id, deletions)
        return _Loaded(*(np.concatenate([getattr(p, f) for p in parts]) for f in _ARRAYS),
                       max_id, deletions)


_ARRAYS = ("ids", "matrix", "scales", "times")
LOAD_CHUNK = 20_000  # rows read into Python objects at a time


def _table(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    return kind
