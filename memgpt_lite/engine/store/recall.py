"""Recall in the store: every message of every turn, the FIFO queue (the messages of the current
conversation in context), and `conversation_search` over the agent's own keyword index (the
backend's: see core.py), across all its conversations or within one.

Each message gets the next position (`seq`) in its agent's history: search ranks a message's
neighbours by it, and exports keep it. Each names its conversation (see conversations.py).

A mixin of `sql.SQLStore`, over the database seam (see core.py).
"""

from __future__ import annotations

from collections.abc import Collection

import json
import math
from datetime import date, timedelta

from memgpt_lite.engine import search
from memgpt_lite.engine.records import Message, SearchHit, SearchPage, now_iso
from memgpt_lite.engine.search import index_text, plain_text
from memgpt_lite.engine.shapes import LARGEST_INT
from memgpt_lite.engine.store.conversations import ConversationsMixin
from memgpt_lite.engine.store.core import chunked

_COLUMNS = ("id", "agent_id", "turn_id", "role", "content", "context_content", "index_text",
            "created_at", "in_context", "status", "conversation_id", "seq", "rev")
_MESSAGE = ("id, turn_id, role, content, context_content, created_at, in_context, status, "
            "conversation_id")


def _message(r: tuple) -> Message:
    return Message(r[2], json.loads(r[3]), r[1], r[0], r[5], bool(r[6]),
                   None if r[4] is None else json.loads(r[4]), r[7], r[8])


def date_filter(start_date: str | None, end_date: str | None) -> tuple[list[str], list[str]]:
    """Conditions on `m.created_at` for dates YYYY-MM-DD, both inclusive."""
    where, params = [], []
    if start_date:
        where.append("m.created_at >= ?")
        params.append(date.fromisoformat(start_date).isoformat())
    if end_date:
        where.append("m.created_at < ?")
        params.append((date.fromisoformat(end_date) + timedelta(days=1)).isoformat())
    return where, params


class RecallMixin(ConversationsMixin):
    """Messages: stored whole, queued while in context, searchable forever."""

    # ---------------------------------------------------------------- writing

    def _message_row(self, agent_id: int, msg: Message) -> tuple:
        """(turn_id, role, content, context_content, index_text, created_at, in_context,
        status, conversation_id) as stored."""
        if msg.created_at is None:
            msg.created_at = now_iso()
        if msg.conversation_id is None:
            msg.conversation_id = self.current_conversation(agent_id)
        text = self.db.text(plain_text(msg.role, msg.content))
        return (msg.turn_id, msg.role, self._dumps(msg.content),
                None if msg.context_content is None else self._dumps(msg.context_content),
                index_text(text), msg.created_at, bool(msg.in_context), msg.status,
                msg.conversation_id)

    def add_message(self, agent_id: int, msg: Message) -> int:
        self._insert_messages(agent_id, [msg])
        return msg.id  # type: ignore[return-value]

    def add_messages(self, agent_id: int, msgs: list[Message]) -> None:
        """Insert messages in one transaction (their ids are set on the objects)."""
        self._insert_messages(agent_id, msgs)

    def _insert_messages(self, agent_id: int, msgs: list[Message]) -> None:
        """Each message at the next position of the agent's history."""
        if not msgs:
            return
        rows = [self._message_row(agent_id, m) for m in msgs]
        names, exprs, values = self.index.insert_columns(agent_id, [r[4] for r in rows])
        sql = (f"INSERT INTO messages ({', '.join((*_COLUMNS, *names))}) VALUES "
               f"({', '.join(('?',) * len(_COLUMNS) + exprs)})")
        with self.transaction():
            rev = self._bump(agent_id)
            seq = self.db.query("SELECT coalesce(max(seq), 0) FROM messages WHERE agent_id = ?",
                                (agent_id,))[0][0]
            watch = self._watches.get(agent_id)
            own = None if watch is None else self.db.query(
                "SELECT coalesce(max(id), 0) FROM messages WHERE agent_id = ?", (agent_id,))[0][0]
            first = self.db.next_id("messages", agent_id)
            ids = self.db.insert_rows(sql, [
                (None if first is None else first + i, agent_id, *row, seq + 1 + i, rev,
                 *values[i]) for i, row in enumerate(rows)])
            for msg, i in zip(msgs, ids):
                msg.id = i
            if watch is not None:
                watch.message_ids += ids
                watch.message_ids_jumped |= ids[0] != own + 1
            self.index.inserted("messages", agent_id, [(i, r[4]) for i, r in zip(ids, rows)],
                                values)

    def update_message(self, agent_id: int, msg: Message) -> None:
        row = self._message_row(agent_id, msg)
        self._decoded.pop((agent_id, msg.id), None)  # type: ignore[arg-type]
        with self.transaction():
            old = self.db.query("SELECT index_text FROM messages WHERE agent_id = ? AND id = ?",
                                (agent_id, msg.id))
            if not old:
                return
            rev = self._bump(agent_id)
            changed = old[0][0] != row[4]
            if changed:
                self.index.remove("messages", agent_id, [(int(msg.id), old[0][0])])  # type: ignore[arg-type]
            self.db.execute("UPDATE messages SET content = ?, context_content = ?, "
                            "index_text = ?, in_context = ?, status = ?, rev = ? "
                            "WHERE agent_id = ? AND id = ?",
                            (row[2], row[3], row[4], row[6], row[7], rev, agent_id, msg.id))
            if changed:
                self.index.add("messages", agent_id, [(int(msg.id), row[4])])  # type: ignore[arg-type]

    def set_context_content(self, agent_id: int, message_id: int,
                            content: list[dict] | None) -> None:
        self._decoded.pop((agent_id, message_id), None)
        with self.transaction():
            rev = self._bump(agent_id)
            if self.open_turn(agent_id) is not None:
                old = self.db.query("SELECT context_content FROM messages WHERE agent_id = ? "
                                    "AND id = ?", (agent_id, message_id))
                before = old[0][0] if old else None
                self._journal(agent_id, "context_content", message_id,
                              None if before is None else json.loads(before))
            self.db.execute("UPDATE messages SET context_content = ?, rev = ? WHERE agent_id = ? "
                            "AND id = ?", (None if content is None else self._dumps(content),
                                           rev, agent_id, message_id))

    def _undo_context_content(self, agent_id: int, target: str, before: list | None) -> None:
        self.set_context_content(agent_id, int(target), before)

    def set_in_context(self, agent_id: int, turn_ids: list[int], in_context: bool) -> None:
        with self.transaction():
            rev = self._bump(agent_id)
            if self.open_turn(agent_id) is not None:
                for t in turn_ids:
                    flags = {r[0]: int(r[1]) for r in self.db.query(
                        "SELECT id, in_context FROM messages WHERE agent_id = ? AND "
                        "turn_id = ?", (agent_id, t))}
                    self._journal(agent_id, "in_context", t, flags)
            self.db.executemany("UPDATE messages SET in_context = ?, rev = ? WHERE agent_id = ? "
                                "AND turn_id = ?",
                                [(bool(in_context), rev, agent_id, t) for t in turn_ids])

    def _undo_in_context(self, agent_id: int, target: str, before: dict[str, int]) -> None:
        rev = self._bump(agent_id)
        self.db.executemany("UPDATE messages SET in_context = ?, rev = ? "
                            "WHERE agent_id = ? AND id = ?",
                            [(bool(flag), rev, agent_id, int(i)) for i, flag in before.items()])

    def delete_turns(self, agent_id: int, turn_ids: list[int]) -> int:
        """Delete whole turns from the queue and recall; returns how many messages went."""
        with self.transaction():
            rows = [(r[0], r[1]) for ids in chunked(turn_ids) for r in self.db.query(
                f"SELECT id, index_text FROM messages WHERE agent_id = ? AND turn_id IN "
                f"{self._in(ids)} ORDER BY id", (agent_id, *ids))]
            self.index.remove("messages", agent_id, rows)
            for ids in chunked([r[0] for r in rows]):
                self.db.execute(f"DELETE FROM messages WHERE "
                                f"{self._keyed(ids)}", (agent_id, *ids))
            self._tombstones(agent_id, "messages", [r[0] for r in rows])
        self._decoded.clear()  # message ids can be given again after a delete
        return len(rows)

    # ---------------------------------------------------------------- reading

    def _messages(self, where: str, params: tuple) -> list[Message]:
        rows = self.db.query(f"SELECT {_MESSAGE} FROM messages WHERE {where} ORDER BY id", params)
        return [_message(r) for r in rows]

    def context_messages(self, agent_id: int, conversation: int | None = None
                         ) -> list[Message]:
        """The FIFO queue of the current conversation (or of `conversation`), oldest first.
        Read before every model call, so the content JSON of each message is decoded once
        and kept while the row's revision stays the one it was decoded at (every change
        stamps a new one, whichever process makes it). The returned lists are shared:
        replace, never mutate."""
        if conversation is None:
            conversation = self.current_conversation(agent_id)
        rows = self.db.query("SELECT id, turn_id, role, created_at, rev FROM messages "
                             "WHERE agent_id = ? AND conversation_id = ? AND in_context = ? "
                             "ORDER BY id", (agent_id, conversation, True))
        stale = [r[0] for r in rows
                 if self._decoded.get((agent_id, r[0]), (None,))[0] != r[4]]
        for ids in chunked(stale):
            for i, rev, content, context in self.db.query(
                    f"SELECT id, rev, content, context_content FROM messages WHERE "
                    f"{self._keyed(ids)}", (agent_id, *ids)):
                self._decoded[(agent_id, i)] = (rev, json.loads(content),
                                                None if context is None else json.loads(context))
        keep = {(agent_id, r[0]) for r in rows}
        self._decoded = {k: v for k, v in self._decoded.items() if k[0] != agent_id or k in keep}
        queue = []
        for r in rows:
            _, content, context = self._decoded[(agent_id, r[0])]
            queue.append(Message(r[2], content, r[1], r[0], r[3], True, context,
                                 conversation_id=conversation))
        return queue

    def turn_messages(self, agent_id: int, turn_id: int) -> list[Message]:
        return self._messages("agent_id = ? AND turn_id = ?", (agent_id, turn_id))

    def all_messages(self, agent_id: int) -> list[Message]:
        """Every message of the agent, in order (exports)."""
        return self._messages("agent_id = ?", (agent_id,))

    def message_positions(self, agent_id: int) -> list[int]:
        """Each message's position in the agent's history, in message order (exports keep
        them, so neighbours stay neighbours after an import)."""
        return [r[0] for r in self.db.query("SELECT seq FROM messages WHERE agent_id = ? "
                                            "ORDER BY id", (agent_id,))]

    def set_message_positions(self, agent_id: int, positions: dict[int, int]) -> None:
        """Give messages (by id) the positions of an export they were imported from."""
        with self.transaction():
            self.db.executemany("UPDATE messages SET seq = ? WHERE agent_id = ? AND id = ?",
                                [(seq, agent_id, i) for i, seq in positions.items()])

    def max_turn_id(self, agent_id: int, *, in_conversation: bool = False) -> int:
        """The agent's last turn id (ids are the agent's, across its conversations), or with
        `in_conversation` the last of the current conversation (0: none yet)."""
        if in_conversation:
            return self.db.query("SELECT coalesce(max(turn_id), 0) FROM messages WHERE "
                                 "agent_id = ? AND conversation_id = ?",
                                 (agent_id, self.current_conversation(agent_id)))[0][0]
        return self.db.query("SELECT coalesce(max(turn_id), 0) FROM messages WHERE agent_id = ?",
                             (agent_id,))[0][0]

    def last_turn_ids(self, agent_id: int, n: int) -> list[int]:
        """The current conversation's newest `n` finished turns, oldest first, whether in the
        queue or evicted from it (a failed turn's message is not a finished turn)."""
        # More than a database integer holds is all of them (`/pop 99999999999999999999`).
        rows = self.db.query("SELECT DISTINCT turn_id FROM messages WHERE agent_id = ? AND "
                             "conversation_id = ? AND status = '' ORDER BY turn_id DESC LIMIT ?",
                             (agent_id, self.current_conversation(agent_id),
                              min(n, LARGEST_INT)))
        return sorted(r[0] for r in rows)

    # ---------------------------------------------------------------- search

    def search_messages(self, agent_id: int, query: str, page: int = 1, per_page: int = 5,
                        start_date: str | None = None, end_date: str | None = None, *,
                        dense: dict[int, float] | None = None,
                        keyword_weight: float = search.KEYWORD_WEIGHT,
                        context: bool = True, leave_out: Collection[int] = (),
                        below: Collection[int] = (),
                        conversation: int | None = None,
                        reply_words: int = 1) -> SearchPage:
        """Messages of every conversation of the agent (or only of `conversation`) ranked by
        BM25 over any query term plus a share of their matching neighbours'
        (`search.with_neighbours`); with `dense` ({id: cosine} from the dense side, already
        date-filtered), fused with it (`search.fuse`). Ids in `leave_out` are never
        returned, ids in `below` rank after every other candidate (`search.place`). Each hit
        brings the reply that followed it as `context` (see `replies`; `reply_words`: of at
        least that many words) and names its conversation. Dates are YYYY-MM-DD, inclusive."""
        page, per_page = max(1, int(page)), max(1, int(per_page))
        scores = self.keyword_scores(agent_id, query, start_date, end_date, conversation)
        if dense and conversation is not None:
            dense = self._in_conversation(agent_id, dense, conversation)
        if dense:
            scores = search.fuse(scores, dense, keyword_weight)
        scores = search.place(scores, leave_out, below)
        if not scores:
            return SearchPage([], page, 0, 0)
        ids = search.top_page(scores, page, per_page)
        # A reply that is a hit of its own on the page is shown there, not twice.
        reply_of = {i: r for i, r in self._reply_ids(agent_id, ids, reply_words).items()
                    if r not in ids and r not in leave_out} if context else {}
        rows = self._message_hits(agent_id, [*ids, *set(reply_of.values()) - set(ids)], scores)
        by_id = {h.id: h for h in rows}
        hits = [by_id[i] for i in ids]
        for hit in hits:
            hit.context = [by_id[reply_of[hit.id]]] if hit.id in reply_of else []
        return SearchPage(hits, page, math.ceil(len(scores) / per_page), len(scores))

    def keyword_scores(self, agent_id: int, query: str, start_date: str | None = None,
                       end_date: str | None = None,
                       conversation: int | None = None) -> dict[int, float]:
        """{message id: keyword score} of every candidate of the query (at most RANK_CAP)."""
        where, params = date_filter(start_date, end_date)
        if conversation is not None:
            where.append("m.conversation_id = ?")
            params.append(conversation)
        return search.with_neighbours(self.index.scores("messages", agent_id, query, where,
                                                        params))

    def _in_conversation(self, agent_id: int, scores: dict[int, float],
                         conversation: int) -> dict[int, float]:
        """The scores of the messages of `conversation` only."""
        ids = list(scores)
        keep = {r[0] for chunk in chunked(ids) for r in self.db.query(
            f"SELECT id FROM messages WHERE {self._keyed(chunk)} AND conversation_id = ?",
            (agent_id, *chunk, conversation))}
        return {i: s for i, s in scores.items() if i in keep}

    def replies(self, agent_id: int, ids: list[int], reply_words: int = 1,
                ) -> dict[int, list[SearchHit]]:
        """For each message id, the next message with text in its conversation (its reply:
        the answer usually follows the question it was asked in), as a hit; with
        `reply_words`, the next one of at least that many words (an "OK." says nothing)."""
        found = self._reply_ids(agent_id, ids, reply_words)
        hits = {h.id: h for h in self._message_hits(agent_id, list(set(found.values())), {})}
        return {i: [hits[r]] for i, r in found.items()}

    def _reply_ids(self, agent_id: int, ids: list[int], reply_words: int = 1) -> dict[int, int]:
        if not ids:
            return {}
        # Words: the spaces of the trimmed indexed text, plus one (a CJK run is indexed as
        # its bigrams, so it counts about a word a character); trim and replace are on both
        # backends.
        words = ("" if reply_words <= 1 else " AND length(trim(n.index_text)) - length("
                 f"replace(trim(n.index_text), ' ', '')) >= {int(reply_words) - 1}")
        rows = self.db.query(
            "SELECT m.id, (SELECT n.id FROM messages n WHERE n.agent_id = m.agent_id AND "
            "n.seq > m.seq AND n.index_text != '' AND n.conversation_id = m.conversation_id "
            f"{words} ORDER BY n.seq LIMIT 1) FROM messages m "
            # look the few ids up by key, not by scanning the agent's rows
            f"WHERE {self._keyed(ids, 'm.')}",
            (agent_id, *ids))
        return {r[0]: r[1] for r in rows if r[1] is not None}

    def _message_hits(self, agent_id: int, ids: list[int],
                      score: dict[int, float]) -> list[SearchHit]:
        if not ids:
            return []
        rows = {r[0]: r for r in self.db.query(
            "SELECT id, role, turn_id, content, created_at, status, conversation_id FROM "
            f"messages WHERE {self._keyed(ids)}", (agent_id, *ids))}
        return [SearchHit(i, plain_text(rows[i][1], json.loads(rows[i][3])), rows[i][4],
                          role=rows[i][1], turn_id=rows[i][2], score=score.get(i, 0.0),
                          status=rows[i][5], conversation=rows[i][6]) for i in ids]
