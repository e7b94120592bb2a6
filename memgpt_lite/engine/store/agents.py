"""Agents in the store: one row each (name, model, settings, what the engine learned,
revision), created with their core memory blocks and a first conversation, and deleted with
everything of theirs (the schema cascades; a user-scope block goes only when no other agent
uses it). An AgentRow's `summary` is the running summary of the conversation the process
works in (see conversations.py; the agents table's own column is empty since migration 008).

A mixin of `sql.SQLStore`, over the database seam (see core.py).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from memgpt_lite.engine.records import now_iso
from memgpt_lite.engine.store.base import AgentExists, AgentRow, IntegrityProblem, StoreError
from memgpt_lite.engine.store.blocks import BlocksMixin
from memgpt_lite.engine.store.conversations import ConversationsMixin

_AGENT = "id, name, model, settings, summary, created_at, last_used_at, uid, state"


def _agent(row: tuple | None) -> AgentRow | None:
    if row is None:
        return None
    return AgentRow(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5], row[6],
                    row[7], json.loads(row[8] or "{}"))


class AgentsMixin(BlocksMixin, ConversationsMixin):
    """Agents: created, read, changed, renamed, deleted."""

    def create_agent(self, name: str, settings: dict,
                     blocks: dict[str, tuple[str, int]]) -> AgentRow:
        name = self.db.text(name)
        with self.transaction():
            if self.get_agent(name) is not None:
                raise AgentExists(f"An agent named {name!r} already exists.")
            try:
                agent_id = self.db.insert(
                    "INSERT INTO agents (name, model, settings, created_at, uid) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (name, self.db.text(str(settings.get("model", ""))), self._dumps(settings),
                     now_iso(), secrets.token_hex(8)))
            except IntegrityProblem:  # another process created it a moment ago
                raise AgentExists(f"An agent named {name!r} already exists.") from None
            # A new agent of a name another had before its rename takes the name back.
            self.db.execute("DELETE FROM agent_aliases WHERE name = ?", (name,))
            self.index.create_agent(agent_id)
            self._insert_conversation(agent_id, 1, now_iso(), self._bump(agent_id))
            for label, (value, limit) in blocks.items():
                self.set_block(agent_id, label, value, limit, source="init")
        return self.get_agent_by_id(agent_id)  # type: ignore[return-value]

    def create_agent_once(self, name: str, settings: dict,
                          blocks: dict[str, tuple[str, int]]) -> tuple[AgentRow, bool]:
        """The agent `name`, created as `create_agent` does unless it exists, and whether this
        call created it: a chat and an MCP server starting at once on a new name both open
        the one agent (the second one's create meets the first's row)."""
        try:
            return self.create_agent(name, settings, blocks), True
        except AgentExists:
            row = self.get_agent(name)
            if row is None:  # created and deleted again meanwhile: the name was taken
                raise
            return row, False

    def get_agent(self, name: str) -> AgentRow | None:
        rows = self.db.query(f"SELECT {_AGENT} FROM agents WHERE name = ?",
                             (self.db.text(name),))
        return self._with_summary(_agent(rows[0] if rows else None))

    def renamed_agent(self, name: str) -> AgentRow | None:
        """The agent that was named `name` before a rename (through any chain of renames),
        while no agent is named `name` now; else None."""
        rows = self.db.query("SELECT agent_id FROM agent_aliases WHERE name = ?",
                             (self.db.text(name),))
        if not rows or self.get_agent(name) is not None:
            return None
        return self.get_agent_by_id(rows[0][0])

    def get_agent_by_id(self, agent_id: int) -> AgentRow | None:
        rows = self.db.query(f"SELECT {_AGENT} FROM agents WHERE id = ?", (agent_id,))
        return self._with_summary(_agent(rows[0] if rows else None))

    def list_agents(self) -> list[AgentRow]:
        """By name, in code point order (as SQLite compares text)."""
        agents = [self._with_summary(_agent(r))
                  for r in self.db.query(f"SELECT {_AGENT} FROM agents")]
        return sorted(agents, key=lambda a: a.name)  # type: ignore[union-attr]

    def _with_summary(self, row: AgentRow | None) -> AgentRow | None:
        if row is not None:
            row.summary = self.conversation_summary(row.id) or row.summary
        return row

    def _require_agent(self, name: str) -> AgentRow:
        agent = self.get_agent(name)
        if agent is None:
            raise StoreError(f"There is no agent named {name!r}.")
        return agent

    def agent_stats(self, agent_id: int) -> dict:
        messages, turns = self.db.query("SELECT count(*), count(DISTINCT turn_id) FROM messages "
                                        "WHERE agent_id = ?", (agent_id,))[0]
        passages = self.db.query("SELECT count(*) FROM passages WHERE agent_id = ?",
                                 (agent_id,))[0][0]
        agent = self.get_agent_by_id(agent_id)
        return {"turns": turns, "messages": messages, "passages": passages,
                "last_used_at": agent.last_used_at if agent else None}

    def _update_agent(self, agent_id: int, column: str, value: Any) -> None:
        self.db.execute(f"UPDATE agents SET {column} = ? WHERE id = ?", (value, agent_id))

    def update_settings(self, agent_id: int, settings: dict) -> None:
        with self.transaction():
            self._update_agent(agent_id, "settings", self._dumps(settings))
            if "model" in settings:
                self._update_agent(agent_id, "model", self.db.text(str(settings["model"])))

    def set_state(self, agent_id: int, state: dict) -> None:
        """The agent's runtime state (what the engine learned and must keep across
        restarts), stored as given."""
        self._update_agent(agent_id, "state", self._dumps(state))

    def restore_agent(self, agent_id: int, *, summary: str, created_at: str,
                      last_used_at: str | None, state: dict | None = None) -> None:
        """An import's agent row; `summary` is its current conversation's (an export from
        before conversations: its one conversation's)."""
        with self.transaction():
            self.db.execute("UPDATE agents SET created_at = ?, last_used_at = ?, state = ? "
                            "WHERE id = ?", (created_at, last_used_at, self._dumps(state or {}),
                                             agent_id))
            if summary:
                self.set_summary(agent_id, summary)

    def touch(self, agent_id: int) -> None:
        """The agent and its current conversation were used now."""
        with self.transaction():
            now = now_iso()
            self._update_agent(agent_id, "last_used_at", now)
            self._stamp_conversation(agent_id, "last_used_at", now)

    def rename_agent(self, old: str, new: str) -> None:
        with self.transaction():
            agent = self._require_agent(old)
            if self.get_agent(new) is not None:
                raise StoreError(f"An agent named {new!r} already exists.")
            try:
                self._update_agent(agent.id, "name", self.db.text(new))
            except IntegrityProblem:  # another process took the name a moment ago (Postgres)
                raise AgentExists(f"An agent named {new!r} already exists.") from None
            # The old name is remembered (commands say where it went); the new one is a
            # real name now, no longer an alias (renaming back: B -> A drops A's alias).
            self.db.execute("DELETE FROM agent_aliases WHERE name IN (?, ?)",
                            (self.db.text(old), self.db.text(new)))
            self.db.execute("INSERT INTO agent_aliases (name, agent_id, renamed_at) "
                            "VALUES (?, ?, ?)", (agent.name, agent.id, now_iso()))

    def delete_agent(self, name: str) -> None:
        """Delete the agent and everything of it; a user-scope block goes only when no other
        agent uses it."""
        with self.transaction():
            agent = self._require_agent(name)
            self.index.drop_agent(agent.id)
            self.db.execute("DELETE FROM agents WHERE id = ?", (agent.id,))  # cascades
            self.drop_unused_shared_blocks()
        self._decoded.clear()  # message ids can be given again after a delete
        self._conversations.pop(agent.id, None)
        self._projects.pop(agent.id, None)
