"""Turns in the store: a turn either happens whole or leaves nothing behind.

`begin_turn` stores the user's message (status "open"). From then until the turn ends, every
write the turn makes to the agent's memory (core memory blocks, passages, the queue's
in-context flags and folded content, the summary) is journalled in `turn_effects` with its
undo record, in the same transaction as the write itself (`StoreCore._journal`, called by
those writes). `commit_turn` puts the turn's messages in the queue and drops the journal;
`undo_turn` reverts every journalled effect, newest first (each by the `_undo_<kind>` method
of the domain that wrote it), and keeps the user's message in recall marked "interrupted".
A turn cut off by a crash is still "open" in the database and is undone by the next
`Agent.open` (`unfinished_turns`).

Finished turns keep a lighter trace: block history rows, passages and passage history rows
name the turn that wrote them, so `pop_turns` can put core and archival memory back as they
were before those turns.

A mixin of `sql.SQLStore`: it spans the other domains, so it is built on all of them.
"""

from __future__ import annotations

import json

from memgpt_lite.engine.records import Message, PoppedTurns
from memgpt_lite.engine.store.agents import AgentsMixin
from memgpt_lite.engine.store.archive import ArchiveMixin
from memgpt_lite.engine.store.core import chunked
from memgpt_lite.engine.store.recall import RecallMixin

OPEN, INTERRUPTED = "open", "interrupted"


class TurnsMixin(AgentsMixin, RecallMixin, ArchiveMixin):
    """The life of a turn: begin, journal, commit or undo; pop with its memory edits."""

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
                self.add_message(agent_id, user)
            else:
                self.update_message(agent_id, user)
        self._open_turns[agent_id] = user.turn_id
        return popped

    def commit_turn(self, agent_id: int, user: Message, rest: list[Message]) -> None:
        """The whole turn enters the queue, and its journal goes, in one transaction."""
        with self.transaction():
            user.in_context, user.status = True, ""
            self.update_message(agent_id, user)
            for m in rest:
                m.in_context = True
            self.add_messages(agent_id, rest)
            self.db.execute("DELETE FROM turn_effects WHERE agent_id = ? AND turn_id = ?",
                            (agent_id, user.turn_id))
        self._open_turns.pop(agent_id, None)

    def undo_turn(self, agent_id: int, turn_id: int) -> None:
        """Revert every journalled effect of the turn, newest first; the user's message
        stays in recall, marked interrupted. One transaction: if it cannot be written
        (a full disk), the turn stays open in the database and the next open undoes it."""
        self._open_turns.pop(agent_id, None)  # the undo itself is not journalled
        with self.transaction():
            effects = self.db.query("SELECT kind, target, before FROM turn_effects WHERE "
                                    "agent_id = ? AND turn_id = ? ORDER BY id DESC",
                                    (agent_id, turn_id))
            for kind, target, before in effects:
                getattr(self, f"_undo_{kind}")(agent_id, target, json.loads(before))
            self._drop_block_history(agent_id, [turn_id])
            self.db.execute("DELETE FROM turn_effects WHERE agent_id = ? AND turn_id = ?",
                            (agent_id, turn_id))
            self.db.execute("UPDATE messages SET status = ?, rev = ? WHERE agent_id = ? AND "
                            "turn_id = ? AND status = ?",
                            (INTERRUPTED, self._bump(agent_id), agent_id, turn_id, OPEN))

    def unfinished_turns(self, agent_id: int) -> list[int]:
        """Turns left open in the database (the process died mid-turn), oldest first."""
        # Asked before every turn: through the small partial index of messages whose status
        # is set, never a scan of the agent's history (the index's own condition is repeated
        # so that SQLite may use it).
        rows = self.db.query(f"SELECT turn_id FROM messages{self.db.indexed_by('messages_status')}"
                             " WHERE agent_id = ? AND status != '' AND status = ? "
                             "UNION SELECT turn_id FROM turn_effects WHERE agent_id = ?",
                             (agent_id, OPEN, agent_id))
        running = self._open_turns.get(agent_id)
        return sorted(r[0] for r in rows if r[0] != running)

    def _drop_block_history(self, agent_id: int, turn_ids: list[int],
                            labels: list[str] | None = None) -> None:
        """Delete the block history rows the turns wrote (of `labels` only, if given)."""
        rows = [r[0] for chunk in chunked(turn_ids) for r in self.db.query(
            f"SELECT id, label FROM block_history WHERE agent_id = ? AND turn_id IN "
            f"{self._in(chunk)} ORDER BY turn_id, id", (agent_id, *chunk))
            if labels is None or r[1] in labels]
        for chunk in chunked(rows):
            self.db.execute(f"DELETE FROM block_history WHERE "
                            f"{self._keyed(chunk)}", (agent_id, *chunk))
        self._tombstones(agent_id, "block_history", rows)

    # ---------------------------------------------------------------- finished turns

    def pop_turns(self, agent_id: int, turn_ids: list[int]) -> PoppedTurns:
        """Delete whole turns from the queue and recall and revert their memory edits, all
        in one transaction: each block a turn edited goes back to its value before the turn
        when it still holds what the turn wrote (else it is left, and named in
        `blocks_kept`); each passage a turn updated or deleted is put back likewise (see
        `_revert_passages`); the passages the turns inserted are deleted."""
        popped = PoppedTurns(sorted(turn_ids))
        with self.transaction():
            popped.summarised = self._out_of_queue(agent_id, popped.turn_ids)
            for turn in sorted(turn_ids, reverse=True):
                self._revert_blocks(agent_id, turn, popped)
                self._revert_passages(agent_id, turn, popped)
                ids = [r[0] for r in self.db.query("SELECT id FROM passages WHERE agent_id = ? "
                                                   "AND turn_id = ? ORDER BY id",
                                                   (agent_id, turn))]
                self.delete_passages(agent_id, ids)
                popped.passages_deleted += ids
            self.delete_turns(agent_id, turn_ids)
        return popped

    def _out_of_queue(self, agent_id: int, turn_ids: list[int]) -> list[int]:
        # A turn leaves the queue whole (evicted or flushed), so one message tells.
        rows = [r for chunk in chunked(turn_ids) for r in self.db.query(
            f"SELECT DISTINCT turn_id, in_context FROM messages WHERE agent_id = ? AND "
            f"turn_id IN {self._in(chunk)}", (agent_id, *chunk))]
        return sorted({t for t, in_context in rows if not in_context})

    def _revert_blocks(self, agent_id: int, turn: int, popped: PoppedTurns) -> None:
        # (label, project) → (value before, value after): a project block is put back in the
        # project the turn wrote it in, wherever the agent works now.
        edits: dict[tuple[str, str | None], tuple[str | None, str]] = {}
        for label, old, new, project in self.db.query(
                "SELECT label, old_value, new_value, project FROM block_history WHERE "
                "agent_id = ? AND turn_id = ? ORDER BY id", (agent_id, turn)):
            key = (label, project)
            edits[key] = (edits[key][0] if key in edits else old, new)
        reverted = []
        for (label, project), (before, after) in edits.items():
            if project is not None:
                done = before is not None and self._undo_project(
                    project, label, {"value": before, "after": after})
            else:
                block = self.get_block(agent_id, label)
                done = not (block is None or block.scope == "project" or block.value != after
                            or before is None)
                if done:
                    self._undo_block(agent_id, label, {"value": before, "limit": block.limit})
            if not done:
                popped.blocks_kept.append(label)
                continue
            reverted.append(label)
            popped.blocks_reverted.append(label)
        self._drop_block_history(agent_id, [turn], reverted)
