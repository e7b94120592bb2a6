"""Forgetting in the Postgres store: the same units as on SQLite, changed the same way.

What a forget changes is decided by store/scrub.py, place by place, for the live store and
for SQLite base snapshots alike. It runs here unchanged over `_ScrubConnection`, the slice of
a sqlite3 connection it uses (`?` parameters, `PRAGMA table_info`), and `_Writer`, which keeps
Postgres's search columns and totals (postgres_search.py) in step where SQLite's writer keeps
FTS5's. Two differences, both about cost, not about what is forgotten:

* SQLite pre-filters rows in SQL with a Python function (`forget_probe`); Postgres cannot
  call one, so every row of the agent that holds text is read and matched in Python (the
  same exact check that follows the probe on SQLite). A forget reads the agent's history.
* Postgres keeps a deleted or updated row's old version ("dead tuple") in the table's pages
  until VACUUM marks the space free, and even then the bytes stay until new rows overwrite
  them; the write-ahead log and any backup or replica keep them as long as those are kept.
  `wipe_freed` runs VACUUM on the tables a forget touches, which is what an application
  can do (VACUUM FULL would rewrite the tables, but locks them for every agent). The README's
  Postgres section says this to the user.

A mixin of `postgres.PostgresStore`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from memgpt_lite.engine.matching import Matcher
from memgpt_lite.engine.records import now_iso
from memgpt_lite.engine.store import scrub
from memgpt_lite.engine.store.sqlite_forget import FILES, STORE, ForgetIntent

_PRAGMA = re.compile(r"PRAGMA table_info\((\w+)\)")
_PROBE = re.compile(r"forget_probe\((\w+)\)")
# The tables a forget may change: VACUUMed after it (see the module docstring).
TOUCHED = ("messages", "passages", "passage_history", "blocks", "shared_blocks",
           "block_history", "agents", "vectors", "turn_effects")


class _ScrubConnection:
    """What scrub.py calls on a sqlite3 connection, on the store's Postgres connection."""

    def __init__(self, store: Any):
        self.store = store

    def create_function(self, *args: Any, **kwargs: Any) -> None:
        pass  # the probe becomes "has text" (see execute)

    def execute(self, sql: str, params: Any = ()) -> Any:
        pragma = _PRAGMA.fullmatch(sql.strip())
        if pragma:
            return self.store._x("SELECT ordinal_position, column_name FROM "
                                 "information_schema.columns WHERE table_schema = "
                                 "current_schema() AND table_name = %s ORDER BY 1",
                                 (pragma.group(1),))
        sql = _PROBE.sub(r"(\1 IS NOT NULL)", sql)
        return self.store._x(sql.replace("?", "%s"), tuple(params))

    def executemany(self, sql: str, rows: Any) -> None:
        self.store._many(sql.replace("?", "%s"), [tuple(r) for r in rows])


class _Writer(scrub.Writer):
    """scrub.Writer on Postgres: revisions and tombstones as there; instead of FTS5, the
    rows' search columns and the agent's totals follow each change."""

    def __init__(self, store: Any, agent_id: int):
        super().__init__(_ScrubConnection(store), agent_id, live=False)  # type: ignore[arg-type]
        self.live, self.store = True, store

    def delete(self, table: str, ids: list[int], fts_kind: str | None = None) -> None:
        if fts_kind and ids:
            gone = self.store._q(f"SELECT index_text, length, tsvector_to_array(terms) FROM "
                                 f"{table} WHERE agent_id = %s AND id = ANY(%s)",
                                 (self.agent_id, list(ids)))
            self.store._stats_add(self.agent_id, fts_kind, -sum(bool(r[0]) for r in gone),
                                  -sum(r[1] for r in gone), [r[2] for r in gone], sign=-1)
        super().delete(table, ids)

    def reindex(self, kind: str, row_id: int, old: str, new: str) -> None:
        if old == new:
            return
        length, terms = self.store._q(f"SELECT length, tsvector_to_array(terms) FROM {kind} "
                                      "WHERE agent_id = %s AND id = %s",
                                      (self.agent_id, row_id))[0]
        lexemes, counts, new_length = self.store._analyse(self.agent_id, [new])[0]
        self.store._x(f"UPDATE {kind} SET terms = array_to_tsvector(%s::text[]), "
                      "term_counts = %s, length = %s WHERE agent_id = %s AND id = %s",
                      (lexemes, counts, new_length, self.agent_id, row_id))
        self.store._stats_add(self.agent_id, kind, bool(new) - bool(old), new_length - length,
                              [terms], sign=-1)
        self.store._stats_add(self.agent_id, kind, 0, 0, [lexemes])

    def optimize(self) -> None:
        pass  # no segments to merge: see wipe_freed


class PgForgetMixin:
    """Forget intents, forgetting units, and VACUUM after a forget."""

    _q: Any
    _x: Any
    _decoded: dict
    _depth: int

    def add_forget_intent(self, agent_id: int, agent_uid: str, matcher: Matcher) -> int:
        return self._q("INSERT INTO forget_intents (agent_id, agent_uid, spec, stage, "
                       "created_at) VALUES (%s, %s, %s, %s, %s) RETURNING id",
                       (agent_id, agent_uid, json.dumps(matcher.spec()), STORE,
                        now_iso()))[0][0]

    def forget_intents(self) -> list[ForgetIntent]:
        """Forgets started and not finished, oldest first."""
        rows = self._q("SELECT id, agent_id, agent_uid, spec, stage, created_at "
                       "FROM forget_intents ORDER BY id")
        return [ForgetIntent(r[0], r[1], r[2], Matcher.from_spec(json.loads(r[3])), r[4], r[5])
                for r in rows]

    def drop_forget_intent(self, intent_id: int) -> None:
        self._x("DELETE FROM forget_intents WHERE id = %s", (intent_id,))

    def forget_units(self, agent_id: int, matcher: Matcher) -> list[scrub.Unit]:
        """What forgetting `matcher` would change in the agent's rows (see scrub.py)."""
        return scrub.find_units(_ScrubConnection(self), agent_id, matcher)  # type: ignore[arg-type]

    def apply_forget(self, agent_id: int, units: list[scrub.Unit], matcher: Matcher,
                     intent_id: int | None = None) -> None:
        """Change exactly `units`, in one transaction with the intent's next stage."""
        self._decoded.clear()
        with self.transaction():  # type: ignore[attr-defined]
            self._bump(agent_id)  # type: ignore[attr-defined]  # the agent's writers wait
            scrub.apply_units(_Writer(self, agent_id), units, matcher)
            if intent_id is not None:
                self._x("UPDATE forget_intents SET stage = %s WHERE id = %s", (FILES, intent_id))

    def wipe_freed(self) -> bool:
        """VACUUM the tables a forget or a deletion touches, so the old row versions' space
        is marked free (their bytes stay until overwritten: see the module docstring).
        False inside a transaction, where VACUUM cannot run."""
        if self._depth:
            return False
        for table in TOUCHED:
            self._x(f"VACUUM {table}")
        return True
