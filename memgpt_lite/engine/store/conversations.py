"""Conversations in the store: an agent has many (tasks), each with its own FIFO queue (the
messages of its turns still in context), running summary and pager state; core memory,
archival memory and recall stay the agent's.

A conversation's id is counted per agent from 1, on both backends (the user types it:
`chat --resume 2`). Every message names its conversation (`messages.conversation_id`).
Which conversation a process works in is chosen per agent (`use_conversation`,
`start_conversation`) and kept in memory, like the open turn: by default the agent's most
recent one (the last started or used), which is how `chat` resumes. Every other reader and
writer of the queue, the summary and the pager state (`context_messages`, `set_summary`,
`set_conversation_state`, new messages) works in that one.

Rows are stamped with the agent's revision like its other history, so a recording's delta
carries the conversations changed since its base.

A mixin of `sql.SQLStore`, over the database seam (see core.py).
"""

from __future__ import annotations

import json
from typing import Any

from memgpt_lite.engine.attachments import is_attachment
from memgpt_lite.engine.records import Conversation, now_iso
from memgpt_lite.engine.search import plain_text
from memgpt_lite.engine.shapes import in_range
from memgpt_lite.engine.store.base import StoreError
from memgpt_lite.engine.store.core import StoreCore
from memgpt_lite.engine.store.database import marks
from memgpt_lite.engine.text import shorten

_COLUMNS = "id, started_at, last_used_at, title, summary, state"
TITLE_CHARS = 60  # a conversation's name in listings: the first words of its first message
MAX_TITLE = 200


class ConversationsMixin(StoreCore):
    """Conversations: started, chosen, listed, titled; the summary and pager state of each."""

    # ---------------------------------------------------------------- which one

    def current_conversation(self, agent_id: int) -> int:
        """The conversation this process works in for the agent: the one chosen, else the
        most recent (1 for an agent that has none written yet)."""
        chosen = self._conversations.get(agent_id)
        if chosen is None:
            # Times are stamped to the second, and a piped `/new` … `/resume 1` … uses two
            # conversations within one: of those, the one written last (the agent's revision
            # counts every write) is the one used last.
            rows = self.db.query("SELECT id FROM conversations WHERE agent_id = ? "
                                 "ORDER BY last_used_at DESC, rev DESC, id DESC LIMIT 1",
                                 (agent_id,))
            chosen = rows[0][0] if rows else 1
            self._conversations[agent_id] = chosen
        return chosen

    def start_conversation(self, agent_id: int, at: str | None = None) -> Conversation:
        """A new conversation of the agent (the next id), chosen from now on."""
        with self.transaction():
            rev = self._bump(agent_id)
            new = self.db.query("SELECT coalesce(max(id), 0) + 1 FROM conversations "
                                "WHERE agent_id = ?", (agent_id,))[0][0]
            self._insert_conversation(agent_id, new, at or now_iso(), rev)
        self._conversations[agent_id] = new
        return self.conversation(agent_id, new)  # type: ignore[return-value]

    def _insert_conversation(self, agent_id: int, conversation_id: int, at: str, rev: int,
                             **values: Any) -> None:
        row = {"agent_id": agent_id, "id": conversation_id, "started_at": at,
               "last_used_at": at, "rev": rev, **values}
        self.db.execute(f"INSERT INTO conversations ({', '.join(row)}) VALUES "
                        f"({marks(len(row))})", list(row.values()))

    def use_conversation(self, agent_id: int, conversation_id: int) -> Conversation:
        """Work in the agent's conversation `conversation_id` from now on (it becomes the most
        recent); StoreError naming the ones there are when it has no such conversation."""
        found = self.conversation(agent_id, conversation_id)
        if found is None:
            ids = [c.id for c in self.conversations(agent_id)]
            there = f"{ids[0]}–{ids[-1]}" if len(ids) > 1 else ", ".join(map(str, ids))
            raise StoreError(f"There is no conversation {conversation_id} of this agent "
                             f"(conversations: {there or 'none yet'}; `memgpt-lite "
                             "conversations` lists them).")
        self._conversations[agent_id] = conversation_id
        self._stamp_conversation(agent_id, "last_used_at", now_iso())
        return found

    # ---------------------------------------------------------------- reading

    def conversation(self, agent_id: int, conversation_id: int | None = None
                     ) -> Conversation | None:
        """One conversation of the agent (None: the current one), with its turn count and
        first words; None when there is no such conversation."""
        cid = self.current_conversation(agent_id) if conversation_id is None else conversation_id
        if not in_range(cid):  # beyond any id a row can hold, and a query would fail on it
            return None
        rows = self.db.query(f"SELECT {_COLUMNS} FROM conversations WHERE agent_id = ? "
                             "AND id = ?", (agent_id, cid))
        if not rows:
            return None
        turns = self.db.query("SELECT count(DISTINCT turn_id) FROM messages WHERE agent_id = ? "
                              "AND conversation_id = ?", (agent_id, cid))[0][0]
        return _conversation(rows[0], turns, self._first_words(agent_id, [cid]).get(cid, ""))

    def conversations(self, agent_id: int) -> list[Conversation]:
        """Every conversation of the agent, oldest first."""
        rows = self.db.query(f"SELECT {_COLUMNS} FROM conversations WHERE agent_id = ? "
                             "ORDER BY id", (agent_id,))
        turns = dict(self.db.query("SELECT conversation_id, count(DISTINCT turn_id) FROM "
                                   "messages WHERE agent_id = ? GROUP BY conversation_id",
                                   (agent_id,)))
        words = self._first_words(agent_id, [r[0] for r in rows])
        return [_conversation(r, turns.get(r[0], 0), words.get(r[0], "")) for r in rows]

    def _first_words(self, agent_id: int, ids: list[int]) -> dict[int, str]:
        """The opening words of each conversation's first message (its name until the user
        gives it a title): the first user message of its first turn, found by index."""
        first: dict[int, int] = {}
        for cid in ids:
            turn = self.db.query("SELECT min(turn_id) FROM messages WHERE agent_id = ? AND "
                                 "conversation_id = ?", (agent_id, cid))[0][0]
            if turn is not None:
                row = self.db.query("SELECT min(id) FROM messages WHERE agent_id = ? AND "
                                    "turn_id = ? AND role = ?", (agent_id, turn, "user"))
                if row[0][0] is not None:
                    first[cid] = row[0][0]
        if not first:
            return {}
        message_ids = list(first.values())
        texts = {r[0]: _opening(json.loads(r[1])) for r in self.db.query(
            f"SELECT id, content FROM messages WHERE {self._keyed(message_ids)}",
            (agent_id, *message_ids))}
        return {cid: shorten(" ".join(texts.get(mid, "").split()), TITLE_CHARS)
                for cid, mid in first.items()}

    def conversation_state(self, agent_id: int) -> dict:
        """The current conversation's state as stored (set_conversation_state); {} when it
        has none. One row read: the engine asks every turn, and `conversation` counts turns."""
        rows = self.db.query("SELECT state FROM conversations WHERE agent_id = ? AND id = ?",
                             (agent_id, self.current_conversation(agent_id)))
        return json.loads(rows[0][0] or "{}") if rows else {}

    def conversation_summary(self, agent_id: int) -> str:
        rows = self.db.query("SELECT summary FROM conversations WHERE agent_id = ? AND id = ?",
                             (agent_id, self.current_conversation(agent_id)))
        return rows[0][0] if rows else ""

    # ---------------------------------------------------------------- writing

    def set_summary(self, agent_id: int, summary: str) -> None:
        """The running summary of the current conversation."""
        with self.transaction():
            cid = self.current_conversation(agent_id)
            if self.open_turn(agent_id) is not None:
                self._journal(agent_id, "summary", cid, self.conversation_summary(agent_id))
            self._stamp_conversation(agent_id, "summary", self.db.text(summary), cid)

    def _undo_summary(self, agent_id: int, target: str, before: str) -> None:
        # A journal written before conversations existed names no conversation: the first.
        cid = int(target) if target else 1
        self._stamp_conversation(agent_id, "summary", self.db.text(before), cid)

    def set_conversation_state(self, agent_id: int, state: dict) -> None:
        """What the engine learned in the current conversation (the pager's alert state),
        stored as given."""
        self._stamp_conversation(agent_id, "state", self._dumps(state))

    def set_conversation_title(self, agent_id: int, conversation_id: int, title: str) -> None:
        """The title the user gave a conversation ("" gives it back its first words)."""
        title = " ".join(self.db.text(title).split())[:MAX_TITLE]
        if self.conversation(agent_id, conversation_id) is None:
            raise StoreError(f"There is no conversation {conversation_id} of this agent.")
        self._stamp_conversation(agent_id, "title", title, conversation_id)

    def restore_conversations(self, agent_id: int, rows: list[dict[str, Any]]) -> None:
        """An import's conversations, exactly as given (id, started_at, last_used_at and
        optional title, summary, state), in place of the agent's; the most recent becomes
        the current one."""
        text = self.db.text
        with self.transaction():
            rev = self._bump(agent_id)
            self.db.execute("DELETE FROM conversations WHERE agent_id = ?", (agent_id,))
            for row in rows:
                self._insert_conversation(
                    agent_id, int(row["id"]), text(row["started_at"]), rev,
                    last_used_at=text(row["last_used_at"]), title=text(row.get("title") or ""),
                    summary=text(row.get("summary") or ""),
                    state=self._dumps(row.get("state") or {}))
        self._conversations.pop(agent_id, None)

    def _stamp_conversation(self, agent_id: int, column: str, value: Any,
                            conversation_id: int | None = None) -> None:
        """Set one column of a conversation (the current one by default), stamped with a new
        revision; the row is made when an agent has none yet (a store written by hand)."""
        cid = self.current_conversation(agent_id) if conversation_id is None else conversation_id
        with self.transaction():
            rev = self._bump(agent_id)
            changed = self.db.execute(f"UPDATE conversations SET {column} = ?, rev = ? "
                                      "WHERE agent_id = ? AND id = ?",
                                      (value, rev, agent_id, cid))
            if not changed:
                self._insert_conversation(agent_id, cid, now_iso(), rev, **{column: value})


def _conversation(row: tuple, turns: int, first_words: str) -> Conversation:
    return Conversation(row[0], row[1], row[2], row[3], row[4], json.loads(row[5] or "{}"),
                        turns, first_words)


def _opening(content: list[dict] | str) -> str:
    """What the user wrote in a message, without the files attached to it (stored before
    the text, their tags would otherwise name the conversation)."""
    if isinstance(content, list):
        words = [b for b in content if isinstance(b, dict) and not is_attachment(b)]
        if plain_text("user", words).strip():
            return plain_text("user", words)
    return plain_text("user", content)
