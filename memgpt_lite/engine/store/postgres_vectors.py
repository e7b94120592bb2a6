"""Vectors in the Postgres store: one embedding per message or passage with text, int8 bytes
(`bytea`) with a per-row scale and the model that made it, keyed by the row.

The Postgres twin of sqlite_vectors.py (its docstring: derived data, never in snapshots or
exports; triggers drop a row's vector with the row or its text). The scan stays in Python
(numpy, `search.dense_top`) over an in-memory copy per agent, kind and model, refreshed
incrementally; vectors are read through a server-side cursor in chunks, so a million of
them never exist as Python objects at once. A mixin of `postgres.PostgresStore`.
"""

from __future__ import annotations

import json
from typing import Any

from memgpt_lite.engine import search
from memgpt_lite.engine.search import plain_text
from memgpt_lite.engine.store.sqlite_vectors import _ARRAYS, KINDS, LOAD_CHUNK, _Loaded, _table


class PgVectorMixin:
    """Embeddings of messages and passages: written by the indexer, scanned by search."""

    _q: Any
    _x: Any
    _many: Any
    _conn: Any

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
                       "v.agent_id = m.agent_id AND v.kind = %s AND v.row_id = m.id AND "
                       "v.model = %s WHERE m.agent_id = %s AND m.index_text <> '' AND v.id IS "
                       "NULL AND m.id > %s ORDER BY m.id LIMIT %s",
                       (kind, model, agent_id, after_id, limit))
        if kind == "passages":
            return [(r[0], r[2]) for r in rows]
        return [(r[0], plain_text(r[1], json.loads(r[2]))) for r in rows]

    def last_row_id(self, agent_id: int, kind: str) -> int:
        return self._q(f"SELECT coalesce(max(id), 0) FROM {_table(kind)} WHERE agent_id = %s",
                       (agent_id,))[0][0]

    def put_vectors(self, agent_id: int, kind: str, model: str, ids: list[int],
                    rows: Any) -> int:
        """Store unit vectors for rows (replacing any of another model); rows deleted
        meanwhile are skipped. Returns how many were stored."""
        matrix, scales = search.quantize(rows)
        table = _table(kind)
        with self.transaction():  # type: ignore[attr-defined]
            live = {r[0] for r in self._q(
                f"SELECT id FROM {table} WHERE agent_id = %s AND id = ANY(%s)",
                (agent_id, list(ids)))} if ids else set()
            keep = [(i, j) for j, i in enumerate(ids) if i in live]
            self._x("DELETE FROM vectors WHERE agent_id = %s AND kind = %s AND row_id = ANY(%s)",
                    (agent_id, kind, [i for i, _ in keep]))
            self._many("INSERT INTO vectors (agent_id, kind, row_id, model, vec, scale) "
                       "VALUES (%s, %s, %s, %s, %s, %s)",
                       [(agent_id, kind, i, model, matrix[j].tobytes(), float(scales[j]))  # type: ignore[index]
                        for i, j in keep])
        return len(keep)

    def delete_vectors(self, agent_id: int, *, except_model: str | None = None) -> int:
        with self.transaction():  # type: ignore[attr-defined]
            cur = self._x("DELETE FROM vectors WHERE agent_id = %s AND model <> %s",
                          (agent_id, except_model or ""))
        return cur.rowcount

    # ---------------------------------------------------------------- reading

    def vector_counts(self, agent_id: int, model: str | None) -> dict[str, dict[str, int]]:
        out = {}
        for kind in KINDS:
            total = self._q(f"SELECT count(*) FROM {_table(kind)} WHERE agent_id = %s AND "
                            "index_text <> ''", (agent_id,))[0][0]
            got = {bool(r[0]): r[1] for r in self._q(
                "SELECT model = %s, count(*) FROM vectors WHERE agent_id = %s AND kind = %s "
                "GROUP BY 1", (model or "", agent_id, kind))}
            out[kind] = {"rows": total, "current": got.get(True, 0),
                         "other": got.get(False, 0), "missing": total - got.get(True, 0)}
        return out

    def vector_models(self, agent_id: int) -> dict[str, int]:
        return {r[0]: r[1] for r in self._q(
            "SELECT model, count(*) FROM vectors WHERE agent_id = %s GROUP BY model",
            (agent_id,))}

    def vector_dim(self, agent_id: int, model: str) -> int | None:
        for kind in KINDS:
            rows = self._q("SELECT octet_length(vec) FROM vectors WHERE agent_id = %s AND "
                           "kind = %s AND model = %s LIMIT 1", (agent_id, kind, model))
            if rows:
                return rows[0][0]
        return None

    def dense_scores(self, agent_id: int, kind: str, model: str, query: Any, *,
                     limit: int = search.DENSE_CANDIDATES, start_date: str | None = None,
                     end_date: str | None = None) -> dict[int, float]:
        """As the SQLite store's: the `limit` rows most similar to the unit vector `query`."""
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
        key = (agent_id, kind, model)
        cache = self._vector_cache()
        deletions = self._q("SELECT coalesce(max(n), 0) FROM vector_deletions WHERE id = %s",
                            (agent_id,))[0][0]
        old = cache.get(key)
        if old is not None and old.deletions != deletions:
            old = None
        cache[key] = loaded = self._load(agent_id, kind, model, old, deletions)
        return loaded

    def _load(self, agent_id: int, kind: str, model: str, old: _Loaded | None,
              deletions: int) -> _Loaded:
        import numpy as np

        after = old.max_id if old is not None else 0
        parts = [old] if old is not None else []
        max_id = after
        with self.transaction():  # type: ignore[attr-defined]
            cur = self._conn.cursor(name="memgpt_lite_vectors")  # server-side: in chunks
            cur.execute(f"SELECT v.id, v.row_id, v.vec, v.scale, m.created_at FROM vectors v "
                        f"JOIN {_table(kind)} m ON m.agent_id = v.agent_id AND m.id = v.row_id "
                        "WHERE v.agent_id = %s AND v.kind = %s AND v.model = %s AND v.id > %s "
                        "ORDER BY v.id", (agent_id, kind, model, after))
            while rows := cur.fetchmany(LOAD_CHUNK):
                dim = len(rows[0][2])
                parts.append(_Loaded(
                    np.array([r[1] for r in rows], dtype=np.int64),
                    np.frombuffer(b"".join(r[2] for r in rows), dtype=np.int8).reshape(-1, dim),
                    np.array([r[3] for r in rows], dtype=np.float32),
                    np.array([r[4].rstrip("Z") for r in rows], dtype="datetime64[s]"),
                    rows[-1][0], deletions))
                max_id = rows[-1][0]
            cur.close()
        if not parts:
            return _Loaded(np.zeros(0, np.int64), np.zeros((0, 0), np.int8),
                           np.zeros(0, np.float32), np.zeros(0, "datetime64[s]"), 0, deletions)
        if len(parts) == 1:
            return _Loaded(*(getattr(parts[0], f) for f in _ARRAYS), max_id, deletions)
        return _Loaded(*(np.concatenate([getattr(p, f) for p in parts]) for f in _ARRAYS),
                       max_id, deletions)
