"""Forgetting in the store: the intents that make a forget resumable, and the one transaction
that changes an agent's rows (store/scrub.py decides what changes, place by place). What the
backend's files keep of the old text afterwards is the backend's to wipe (`wipe_freed`:
SQLite zeroes freed pages and empties its WAL; Postgres VACUUMs, see docs/postgres.md).

A mixin of `sql.SQLStore`, over the database seam (see core.py).
"""

from __future__ import annotations

import json

from memgpt_lite.engine.matching import Matcher
from memgpt_lite.engine.records import now_iso
from memgpt_lite.engine.store import scrub
from memgpt_lite.engine.store.base import ForgetIntent
from memgpt_lite.engine.store.core import StoreCore

STORE, FILES = "store", "files"  # what is left to do: everything, or the files outside


__all__ = ["FILES", "STORE", "ForgetIntent", "ForgetMixin"]


class ForgetMixin(StoreCore):
    """Forget intents and forgetting units."""

    def add_forget_intent(self, agent_id: int, agent_uid: str, matcher: Matcher) -> int:
        return self.db.insert("INSERT INTO forget_intents (agent_id, agent_uid, spec, stage, "
                              "created_at) VALUES (?, ?, ?, ?, ?)",
                              (agent_id, agent_uid, json.dumps(matcher.spec()), STORE,
                               now_iso()))

    def forget_intents(self) -> list[ForgetIntent]:
        """Forgets started and not finished, oldest first."""
        rows = self.db.query("SELECT id, agent_id, agent_uid, spec, stage, created_at "
                             "FROM forget_intents ORDER BY id")
        return [_intent(*r) for r in rows]

    def drop_forget_intent(self, intent_id: int) -> None:
        self.db.execute("DELETE FROM forget_intents WHERE id = ?", (intent_id,))

    def forget_units(self, agent_id: int, matcher: Matcher) -> list[scrub.Unit]:
        """What forgetting `matcher` would change in the agent's rows (see scrub.py)."""
        return scrub.find_units(self.db, agent_id, matcher)

    def forget_mark(self) -> tuple[int, ...]:
        """A value that every write a forget could have to reach changes: each write to an
        agent's rows moves its revision, a project block's write its version (they belong
        to no agent). Taken before a preview, it tells the forget whether the store is
        still what the preview read."""
        ((revs, agents),) = self.db.query("SELECT coalesce(sum(rev), 0), count(*) FROM agents")
        ((blocks, versions),) = self.db.query(
            "SELECT count(*), coalesce(sum(version), 0) FROM project_blocks")
        return int(revs), int(agents), int(blocks), int(versions)

    def apply_forget(self, agent_id: int, units: list[scrub.Unit] | None, matcher: Matcher,
                     intent_id: int | None = None,
                     mark: tuple[int, ...] | None = None) -> list[scrub.Unit]:
        """Change `units`, in one transaction with the intent's next stage; returns what
        changed. The units are found anew inside it when none are given (a forget finished
        later) or when the store changed since `mark` was taken before the preview:
        `memgpt-lite mcp` writes without the agent's lock (memory_service.py), so a match
        it wrote while the preview waited for the user's answer is forgotten too."""
        with self.transaction():
            self._bump(agent_id)  # the agent's other writers wait (Postgres: its row lock)
            # The bump above moved this agent's revision by one; anything else is a write.
            expected = None if mark is None else (mark[0] + 1, *mark[1:])
            if units is None or self.forget_mark() != expected:
                units = self.forget_units(agent_id, matcher)
            scrub.apply_units(scrub.Writer(self.db, agent_id, self.index), units, matcher)
            if intent_id is not None:
                self.db.execute("UPDATE forget_intents SET stage = ? WHERE id = ?",
                                (FILES, intent_id))
        self._decoded.clear()  # ids can be given again after a delete; content changes
        return units


def _intent(intent_id: int, agent_id: int, uid: str, spec: str, stage: str,
            created_at: str) -> ForgetIntent:
    """An intent as stored. One whose query this version cannot build again (a pattern
    another Python or memgpt-lite version accepted, a damaged row) is read with the reason
    instead of its matcher: raising here stopped every command, before any could start."""
    try:
        matcher = Matcher.from_spec(json.loads(spec))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # QueryError included
        return ForgetIntent(intent_id, agent_id, uid, None, stage, created_at,
                            f"its query cannot be read back ({str(exc).rstrip('.')})")
    return ForgetIntent(intent_id, agent_id, uid, matcher, stage, created_at)
