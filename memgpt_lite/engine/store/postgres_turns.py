"""Turns in the Postgres store: a turn either happens whole or leaves nothing behind.

The Postgres twin of sqlite_turns.py, method for method (its docstring tells the whole
story: `begin_turn`, the journal of effects in `turn_effects`, `commit_turn` in one
transaction, `undo_turn`, `unfinished_turns` after a crash, `pop_turns`). A mixin of
`postgres.PostgresStore`.
"""

from __future__ import annotations

import json
from typing import Any

from memgpt_lite.engine.records import Message, PoppedTurns
from memgpt_lite.engine.store.sqlite_turns import INTERRUPTED, OPEN


class PgTurnsMixin:
    """The life of a turn: begin, journal, commit or undo; pop with its memory edits."""

    _q: Any
    _x: Any
    _many: Any
    _open_turns: dict[int, int]  # agent id → the turn now journalled

    # ---------------------------------------------------------------- a running turn

    def begin_turn(self, agent_id: int, user: Message,
                   replacing: list[int] | None = None) -> PoppedTurns:
        user.status, user.in_context, user.context_content = OPEN, False, None
        with self.transaction():
            popped = self.pop_turns(agent_id, replacing) if replacing else PoppedTurns()
            if user.id is None:
                self.add_message(agent_id, user)  # type: ignore[attr-defined]
            else:
                self.update_message(agent_id, user)  # type: ignore[attr-defined]
        self._open_turns[agent_id] = user.turn_id
        return popped

    def open_turn(self, agent_id: int) -> int | None:
        return self._open_turns.get(agent_id)

    def _journal(self, agent_id: int, kind: str, target: object, before: Any) -> None:
        turn = self._open_turns.get(agent_id)
        if turn is not None:
            self._x("INSERT INTO turn_effects (agent_id, turn_id, kind, target, before) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (agent_id, turn, kind, str(target), json.dumps(before)))

    def commit_turn(self, agent_id: int, user: Message, rest: list[Message]) -> None:
        """The whole turn enters the queue, and its journal goes, in one transaction."""
        with self.transaction():
            user.in_context, user.status = True, ""
            self.update_message(agent_id, user)  # type: ignore[attr-defined]
            for m in rest:
                m.in_context = True
            self.add_messages(agent_id, rest)  # type: ignore[attr-defined]
            self._x("DELETE FROM turn_effects WHERE agent_id = %s AND turn_id = %s",
                    (agent_id, user.turn_id))
        self._open_turns.pop(agent_id, None)

    def undo_turn(self, agent_id: int, turn_id: int) -> None:
        """Revert every journalled effect of the turn, newest first; the user's message
        stays in recall, marked interrupted. One transaction."""
        self._open_turns.pop(agent_id, None)  # the undo itself is not journalled
        with self.transaction():
            effects = self._q("SELECT kind, target, before FROM turn_effects WHERE "
                              "agent_id = %s AND turn_id = %s ORDER BY id DESC",
                              (agent_id, turn_id))
            for kind, target, before in effects:
                getattr(self, f"_undo_{kind}")(agent_id, target, json.loads(before))
            self._drop_block_history(agent_id, [turn_id])
            self._x("DELETE FROM turn_effects WHERE agent_id = %s AND turn_id = %s",
                    (agent_id, turn_id))
            self._x("UPDATE messages SET status = %s, rev = %s WHERE agent_id = %s AND "
                    "turn_id = %s AND status = %s",
                    (INTERRUPTED, self._bump(agent_id), agent_id, turn_id, OPEN))

    def unfinished_turns(self, agent_id: int) -> list[int]:
        """Turns left open (the process died mid-turn), oldest first; through the partial
        index of messages with a status, never a scan of the agent's history."""
        rows = self._q("SELECT turn_id FROM messages WHERE agent_id = %s AND status <> '' "
                       "AND status = %s UNION SELECT turn_id FROM turn_effects WHERE "
                       "agent_id = %s", (agent_id, OPEN, agent_id))
        running = self._open_turns.get(agent_id)
        return sorted(r[0] for r in rows if r[0] != running)

    def _undo_block(self, agent_id: int, label: str, before: dict | None) -> None:
        if before is None:  # the turn created the block
            self._x("DELETE FROM blocks WHERE agent_id = %s AND label = %s", (agent_id, label))
            return
        self._lock_shared(agent_id, label)  # type: ignore[attr-defined]
        block = self._block_now(agent_id, label)  # type: ignore[attr-defined]
        if block is None or ("after" in before and block.value != before["after"]):
            return  # another agent sharing the block changed it since: its edit stays
        self._write_block(agent_id, label, before["value"], before["limit"])  # type: ignore[attr-defined]

    def _undo_passage(self, agent_id: int, target: str, before: None) -> None:
        self.delete_passages(agent_id, [int(target)])  # type: ignore[attr-defined]

    def _undo_passage_update(self, agent_id: int, target: str, before: dict) -> None:
        self._set_passage_text(agent_id, int(target), before["text"], before["created_at"])  # type: ignore[attr-defined]
        self._drop_passage_versions(agent_id, [before["history_id"]])  # type: ignore[attr-defined]

    def _undo_passage_delete(self, agent_id: int, target: str, before: dict) -> None:
        self._reinsert_passage(agent_id, before["row"])  # type: ignore[attr-defined]
        self._drop_passage_versions(agent_id, [before["history_id"]])  # type: ignore[attr-defined]

    def _undo_context_content(self, agent_id: int, target: str, before: list | None) -> None:
        self.set_context_content(agent_id, int(target), before)  # type: ignore[attr-defined]

    def _undo_in_context(self, agent_id: int, target: str, before: dict[str, int]) -> None:
        rev = self._bump(agent_id)
        self._many("UPDATE messages SET in_context = %s, rev = %s "
                   "WHERE agent_id = %s AND id = %s",
                   [(bool(flag), rev, agent_id, int(i)) for i, flag in before.items()])

    def _undo_summary(self, agent_id: int, target: str, before: str) -> None:
        self.set_summary(agent_id, before)  # type: ignore[attr-defined]

    def _drop_block_history(self, agent_id: int, turn_ids: list[int],
                            labels: list[str] | None = None) -> None:
        rows = [r[0] for r in self._q(
            "SELECT id, label FROM block_history WHERE agent_id = %s AND turn_id = ANY(%s) "
            "ORDER BY turn_id, id", (agent_id, list(turn_ids)))
            if labels is None or r[1] in labels]
        self._x("DELETE FROM block_history WHERE agent_id = %s AND id = ANY(%s)",
                (agent_id, rows))
        self._tombstones(agent_id, "block_history", rows)

    # ---------------------------------------------------------------- finished turns

    def pop_turns(self, agent_id: int, turn_ids: list[int]) -> PoppedTurns:
        """Delete whole turns and revert their memory edits (blocks, passages updated or
        deleted), in one transaction (see sqlite_turns.py)."""
        popped = PoppedTurns(sorted(turn_ids))
        with self.transaction():
            for turn in sorted(turn_ids, reverse=True):
                self._revert_blocks(agent_id, turn, popped)
                self._revert_passages(agent_id, turn, popped)  # type: ignore[attr-defined]
                ids = [r[0] for r in self._q("SELECT id FROM passages WHERE agent_id = %s AND "
                                             "turn_id = %s ORDER BY id", (agent_id, turn))]
                self.delete_passages(agent_id, ids)  # type: ignore[attr-defined]
                popped.passages_deleted += ids
            self.delete_turns(agent_id, turn_ids)  # type: ignore[attr-defined]
        return popped

    def _revert_blocks(self, agent_id: int, turn: int, popped: PoppedTurns) -> None:
        edits: dict[str, tuple[str | None, str]] = {}  # label → (value before, value after)
        for label, old, new in self._q("SELECT label, old_value, new_value FROM block_history "
                                       "WHERE agent_id = %s AND turn_id = %s ORDER BY id",
                                       (agent_id, turn)):
            edits[label] = (edits[label][0] if label in edits else old, new)
        reverted = []
        for label, (before, after) in edits.items():
            block = self.get_block(agent_id, label)  # type: ignore[attr-defined]
            if block is None or block.value != after or before is None:
                popped.blocks_kept.append(label)
                continue
            self._undo_block(agent_id, label, {"value": before, "limit": block.limit})
            reverted.append(label)
            popped.blocks_reverted.append(label)
        self._drop_block_history(agent_id, [turn], reverted)
