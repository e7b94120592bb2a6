"""Turns in the SQLite store: a turn either happens whole or leaves nothing behind.

`begin_turn` stores the user's message (status "open"). From then until the turn ends, every
write the turn makes to the agent's memory (core memory blocks, passages, the queue's
in-context flags and folded content, the summary) is journalled in `turn_effects` with its
undo record, in the same transaction as the write itself (see `_journal`, called by those
writes). `commit_turn` puts the turn's messages in the queue and drops the journal;
`undo_turn` reverts every journalled effect, newest first, and keeps the user's message in
recall marked "interrupted". A turn cut off by a crash is still "open" in the file and is
undone by the next `Agent.open` (`unfinished_turns`).

Finished turns keep a lighter trace: block history rows, passages and passage history rows
name the turn that wrote them, so `pop_turns` can put core and archival memory back as they
were before those turns.

A mixin of `sqlite.Store`: it uses the connection, transactions and revision helpers there.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from memgpt_lite.engine.records import Message, PoppedTurns

OPEN, INTERRUPTED = "open", "interrupted"


class TurnsMixin:
    """The life of a turn: begin, journal, commit or undo; pop with its memory edits."""

    _db: sqlite3.Connection
    _open_turns: dict[int, int]  # agent id → the turn now journalled

    # ---------------------------------------------------------------- a running turn

    def begin_turn(self, agent_id: int, user: Message,
                   replacing: list[int] | None = None) -> PoppedTurns:
        """Store the user's message as the start of an open turn (or reopen it, when it
        has an id: a retry of a turn that did not finish), and journal from now on. The
        turns in `replacing` are popped (see `pop_turns`) in the same transaction, so that
        a retry never loses the message it sends again."""
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
        """Note how to undo a write of the agent's open turn (inside the write's own
        transaction); nothing when no turn is open (commands between turns)."""
        turn = self._open_turns.get(agent_id)
        if turn is not None:
            self._db.execute("INSERT INTO turn_effects (agent_id, turn_id, kind, target, before) "
                             "VALUES (?, ?, ?, ?, ?)",
                             (agent_id, turn, kind, str(target), json.dumps(before)))

    def commit_turn(self, agent_id: int, user: Message, rest: list[Message]) -> None:
        """The whole turn enters the queue, and its journal goes, in one transaction."""
        with self.transaction():
            user.in_context, user.status = True, ""
            self.update_message(agent_id, user)  # type: ignore[attr-defined]
            for m in rest:
                m.in_context = True
            self.add_messages(agent_id, rest)  # type: ignore[attr-defined]
            self._db.execute("DELETE FROM turn_effects WHERE agent_id = ? AND turn_id = ?",
                             (agent_id, user.turn_id))
        self._open_turns.pop(agent_id, None)

    def undo_turn(self, agent_id: int, turn_id: int) -> None:
        """Revert every journalled effect of the turn, newest first; the user's message
        stays in recall, marked interrupted. One transaction: if it cannot be written
        (a full disk), the turn stays open in the file and the next open undoes it."""
        self._open_turns.pop(agent_id, None)  # the undo itself is not journalled
        with self.transaction():
            effects = self._q("SELECT kind, target, before FROM turn_effects WHERE agent_id = ? "  # type: ignore[attr-defined]
                              "AND turn_id = ? ORDER BY id DESC", (agent_id, turn_id))
            for kind, target, before in effects:
                getattr(self, f"_undo_{kind}")(agent_id, target, json.loads(before))
            self._drop_block_history(agent_id, [turn_id])
            self._db.execute("DELETE FROM turn_effects WHERE agent_id = ? AND turn_id = ?",
                             (agent_id, turn_id))
            self._db.execute("UPDATE messages SET status = ?, rev = ? WHERE agent_id = ? AND "
                             f"turn_id = ? AND status = '{OPEN}'",
                             (INTERRUPTED, self._bump(agent_id), agent_id, turn_id))  # type: ignore[attr-defined]

    def unfinished_turns(self, agent_id: int) -> list[int]:
        """Turns left open in the file (the process died mid-turn), oldest first."""
        # Asked before every turn: through the small partial index of messages whose status
        # is set, never a scan of the agent's history (the index's own condition is repeated
        # so that SQLite may use it).
        rows = self._q("SELECT turn_id FROM messages INDEXED BY messages_status "  # type: ignore[attr-defined]
                       "WHERE agent_id = ? AND status != '' AND status = ? "
                       "UNION SELECT turn_id FROM turn_effects WHERE agent_id = ?",
                       (agent_id, OPEN, agent_id))
        running = self._open_turns.get(agent_id)
        return sorted(r[0] for r in rows if r[0] != running)

    def _undo_block(self, agent_id: int, label: str, before: dict | None) -> None:
        if before is None:  # the turn created the block
            self._db.execute("DELETE FROM blocks WHERE agent_id = ? AND label = ?",
                             (agent_id, label))
            return
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
        rev = self._bump(agent_id)  # type: ignore[attr-defined]
        self._db.executemany("UPDATE messages SET in_context = ?, rev = ? "
                             "WHERE agent_id = ? AND id = ?",
                             [(flag, rev, agent_id, int(i)) for i, flag in before.items()])

    def _undo_summary(self, agent_id: int, target: str, before: str) -> None:
        self.set_summary(agent_id, before)  # type: ignore[attr-defined]

    def _drop_block_history(self, agent_id: int, turn_ids: list[int],
                            labels: list[str] | None = None) -> None:
        """Delete the block history rows the turns wrote (of `labels` only, if given)."""
        rows = [r[0] for t in turn_ids for r in self._q(  # type: ignore[attr-defined]
            "SELECT id, label FROM block_history WHERE agent_id = ? AND turn_id = ?",
            (agent_id, t)) if labels is None or r[1] in labels]
        self._db.executemany("DELETE FROM block_history WHERE id = ?", [(i,) for i in rows])
        self._tombstones(agent_id, "block_history", rows)  # type: ignore[attr-defined]

    # ---------------------------------------------------------------- finished turns

    def pop_turns(self, agent_id: int, turn_ids: list[int]) -> PoppedTurns:
        """Delete whole turns from the queue and recall and revert their memory edits, all
        in one transaction: each block a turn edited goes back to its value before the turn
        when it still holds what the turn wrote (else it is left, and named in
        `blocks_kept`); each passage a turn updated or deleted is put back likewise (see
        `_revert_passages`); the passages the turns inserted are deleted."""
        popped = PoppedTurns(sorted(turn_ids))
        with self.transaction():
            for turn in sorted(turn_ids, reverse=True):
                self._revert_blocks(agent_id, turn, popped)
                self._revert_passages(agent_id, turn, popped)  # type: ignore[attr-defined]
                ids = [r[0] for r in self._q("SELECT id FROM passages WHERE agent_id = ? AND "  # type: ignore[attr-defined]
                                             "turn_id = ? ORDER BY id", (agent_id, turn))]
                self.delete_passages(agent_id, ids)  # type: ignore[attr-defined]
                popped.passages_deleted += ids
            self.delete_turns(agent_id, turn_ids)  # type: ignore[attr-defined]
        return popped

    def _revert_blocks(self, agent_id: int, turn: int, popped: PoppedTurns) -> None:
        edits: dict[str, tuple[str | None, str]] = {}  # label → (value before, value after)
        for label, old, new in self._q("SELECT label, old_value, new_value FROM block_history "  # type: ignore[attr-defined]
                                       "WHERE agent_id = ? AND turn_id = ? ORDER BY id",
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
