"""Forgetting in the SQLite store: the intents that make a forget resumable, the one
transaction that changes an agent's rows (see scrub.py for what changes), and leaving no
copy of the old text in the file.

The store runs with `PRAGMA secure_delete` (see sqlite.py), so whatever SQLite frees is
zeroed as it is freed. After a forget, the agent's search index is merged into one segment
(the pages of the old ones are freed, hence zeroed) and the write-ahead log is checkpointed
and truncated, so neither the database file nor its WAL holds the text. A file from before
secure_delete was on is rewritten whole (VACUUM) at its first forget.

A mixin of `sqlite.Store`: it uses the connection and transactions there.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from memgpt_lite.engine.matching import Matcher
from memgpt_lite.engine.records import now_iso
from memgpt_lite.engine.store import scrub

STORE, FILES = "store", "files"  # what is left to do: everything, or the files outside


@dataclass
class ForgetIntent:
    """A forget written down before it started (see the module docstring)."""

    id: int
    agent_id: int
    agent_uid: str
    matcher: Matcher
    stage: str
    created_at: str


class ForgetMixin:
    """Forget intents, forgetting units, and wiping what the file freed."""

    _db: sqlite3.Connection
    _decoded: dict[int, Any]

    def add_forget_intent(self, agent_id: int, agent_uid: str, matcher: Matcher) -> int:
        with self.transaction():  # type: ignore[attr-defined]
            cur = self._db.execute(
                "INSERT INTO forget_intents (agent_id, agent_uid, spec, stage, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (agent_id, agent_uid, json.dumps(matcher.spec()), STORE, now_iso()))
        return cur.lastrowid  # type: ignore[return-value]

    def forget_intents(self) -> list[ForgetIntent]:
        """Forgets started and not finished, oldest first."""
        rows = self._q("SELECT id, agent_id, agent_uid, spec, stage, created_at "  # type: ignore[attr-defined]
                       "FROM forget_intents ORDER BY id")
        return [ForgetIntent(r[0], r[1], r[2], Matcher.from_spec(json.loads(r[3])), r[4], r[5])
                for r in rows]

    def drop_forget_intent(self, intent_id: int) -> None:
        with self.transaction():  # type: ignore[attr-defined]
            self._db.execute("DELETE FROM forget_intents WHERE id = ?", (intent_id,))

    def forget_units(self, agent_id: int, matcher: Matcher) -> list[scrub.Unit]:
        """What forgetting `matcher` would change in the agent's rows (see scrub.py)."""
        return scrub.find_units(self._db, agent_id, matcher)

    def apply_forget(self, agent_id: int, units: list[scrub.Unit], matcher: Matcher,
                     intent_id: int | None = None) -> None:
        """Change exactly `units`, in one transaction with the intent's next stage."""
        self._decoded.clear()  # ids can be reused after a delete; content changes
        with self.transaction():  # type: ignore[attr-defined]
            scrub.apply_units(scrub.Writer(self._db, agent_id, live=True), units, matcher)
            if intent_id is not None:
                self._db.execute("UPDATE forget_intents SET stage = ? WHERE id = ?",
                                 (FILES, intent_id))

    def wipe_freed(self) -> bool:
        """Leave no freed copy of old text in the file or its WAL: rewrite the file once if
        it predates secure_delete, then checkpoint and truncate the WAL. False when another
        process kept the WAL from being emptied (its old pages go at the next checkpoint)."""
        flagged = self._q("SELECT 1 FROM store_flags WHERE name = 'vacuum_on_forget'")  # type: ignore[attr-defined]
        if flagged:
            self._db.execute("VACUUM")
            with self.transaction():  # type: ignore[attr-defined]
                self._db.execute("DELETE FROM store_flags WHERE name = 'vacuum_on_forget'")
        busy, _, _ = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return not busy
