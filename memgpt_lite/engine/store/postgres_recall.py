"""Recall in the Postgres store: every message of every turn, the FIFO queue (messages with
`in_context`), and `conversation_search` (postgres_search.py ranks as SQLite's FTS5 does).

The Postgres twin of sqlite_recall.py, method for method. A mixin of `postgres.PostgresStore`.
"""

from __future__ import annotations

from collections.abc import Collection

import json
import math
from typing import Any

from memgpt_lite.engine import search
from memgpt_lite.engine.records import Message, SearchHit, SearchPage, now_iso
from memgpt_lite.engine.search import index_text, plain_text
from memgpt_lite.engine.store.postgres_base import pg_text
from memgpt_lite.engine.store.sqlite_recall import _date_filter
from memgpt_lite.engine.text import clean_text

_INSERT = ("INSERT INTO messages (agent_id, id, turn_id, role, content, context_content, "
           "index_text, created_at, in_context, status, seq, rev, terms, term_counts, length) "
           "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
           "array_to_tsvector(%s::text[]), %s, %s)")
_MESSAGE = "id, turn_id, role, content, context_content, created_at, in_context, status"


def _message(r: tuple) -> Message:
    return Message(r[2], json.loads(r[3]), r[1], r[0], r[5], bool(r[6]),
                   None if r[4] is None else json.loads(r[4]), r[7])


class PgRecallMixin:
    """Messages: stored whole, queued while in context, searchable forever."""

    _q: Any
    _x: Any
    _many: Any
    _decoded: dict[tuple[int, int], tuple[int, list, list | None]]

    # ---------------------------------------------------------------- writing

    def _message_row(self, agent_id: int, msg: Message) -> tuple:
        if msg.created_at is None:
            msg.created_at = now_iso()
        text = pg_text(clean_text(plain_text(msg.role, msg.content)))
        return (agent_id, msg.turn_id, msg.role, self._dumps(msg.content),
                None if msg.context_content is None else self._dumps(msg.context_content),
                index_text(text), msg.created_at, bool(msg.in_context), msg.status)

    def add_message(self, agent_id: int, msg: Message) -> int:
        self._insert_messages(agent_id, [msg])
        return msg.id  # type: ignore[return-value]

    def add_messages(self, agent_id: int, msgs: list[Message]) -> None:
        """Insert many messages in one transaction (ids are set on the objects)."""
        self._insert_messages(agent_id, msgs)

    def _insert_messages(self, agent_id: int, msgs: list[Message]) -> None:
        """Each message gets the next id and position in the agent's history."""
        if not msgs:
            return
        with self.transaction():
            rev = self._bump(agent_id)
            first = self._next_id("messages", agent_id)
            seq = self._q("SELECT coalesce(max(seq), 0) FROM messages WHERE agent_id = %s",
                          (agent_id,))[0][0]
            rows = [self._message_row(agent_id, m) for m in msgs]
            analysed = self._analyse(agent_id, [r[5] for r in rows])
            for i, msg in enumerate(msgs):
                msg.id = first + i
            self._many(_INSERT, [(row[0], first + i, *row[1:], seq + 1 + i, rev, *a)
                                 for i, (row, a) in enumerate(zip(rows, analysed))])
            self._stats_add(agent_id, "messages", sum(1 for r in rows if r[5]),
                            sum(a[2] for a in analysed), [a[0] for a in analysed])

    def update_message(self, agent_id: int, msg: Message) -> None:
        row = self._message_row(agent_id, msg)
        self._decoded.pop((agent_id, msg.id), None)  # type: ignore[arg-type]
        with self.transaction():
            old = self._q("SELECT index_text, length, tsvector_to_array(terms) FROM messages "
                          "WHERE agent_id = %s AND id = %s", (agent_id, msg.id))
            if not old:
                return
            rev = self._bump(agent_id)
            self._x("UPDATE messages SET content = %s, context_content = %s, in_context = %s, "
                    "status = %s, rev = %s WHERE agent_id = %s AND id = %s",
                    (row[3], row[4], row[7], row[8], rev, agent_id, msg.id))
            if old[0][0] != row[5]:
                terms, counts, length = self._analyse(agent_id, [row[5]])[0]
                self._x("UPDATE messages SET index_text = %s, terms = "
                        "array_to_tsvector(%s::text[]), term_counts = %s, length = %s "
                        "WHERE agent_id = %s AND id = %s",
                        (row[5], terms, counts, length, agent_id, msg.id))
                self._stats_add(agent_id, "messages", bool(row[5]) - bool(old[0][0]),
                                length - old[0][1], [old[0][2]], sign=-1)
                self._stats_add(agent_id, "messages", 0, 0, [terms])

    def set_context_content(self, agent_id: int, message_id: int,
                            content: list[dict] | None) -> None:
        self._decoded.pop((agent_id, message_id), None)
        with self.transaction():
            rev = self._bump(agent_id)
            if self.open_turn(agent_id) is not None:  # type: ignore[attr-defined]
                old = self._q("SELECT context_content FROM messages WHERE agent_id = %s AND "
                              "id = %s", (agent_id, message_id))
                before = old[0][0] if old else None
                self._journal(agent_id, "context_content", message_id,  # type: ignore[attr-defined]
                              None if before is None else json.loads(before))
            self._x("UPDATE messages SET context_content = %s, rev = %s WHERE agent_id = %s "
                    "AND id = %s", (None if content is None else self._dumps(content), rev,
                                    agent_id, message_id))

    def set_in_context(self, agent_id: int, turn_ids: list[int], in_context: bool) -> None:
        with self.transaction():
            rev = self._bump(agent_id)
            if self.open_turn(agent_id) is not None:  # type: ignore[attr-defined]
                for t in turn_ids:
                    flags = {r[0]: int(r[1]) for r in self._q(
                        "SELECT id, in_context FROM messages WHERE agent_id = %s AND "
                        "turn_id = %s", (agent_id, t))}
                    self._journal(agent_id, "in_context", t, flags)  # type: ignore[attr-defined]
            self._x("UPDATE messages SET in_context = %s, rev = %s WHERE agent_id = %s AND "
                    "turn_id = ANY(%s)", (bool(in_context), rev, agent_id, list(turn_ids)))

    def delete_turns(self, agent_id: int, turn_ids: list[int]) -> int:
        """Delete whole turns from the queue and recall; returns how many messages went."""
        with self.transaction():
            gone = self._q("DELETE FROM messages WHERE agent_id = %s AND turn_id = ANY(%s) "
                           "RETURNING id, index_text, length, tsvector_to_array(terms)",
                           (agent_id, list(turn_ids)))
            self._stats_add(agent_id, "messages", -sum(1 for r in gone if r[1]),
                            -sum(r[2] for r in gone), [r[3] for r in gone], sign=-1)
            self._tombstones(agent_id, "messages", sorted(r[0] for r in gone))
        self._decoded.clear()  # ids are given again after a delete
        return len(gone)

    # ---------------------------------------------------------------- reading

    def _messages(self, where: str, params: tuple) -> list[Message]:
        rows = self._q(f"SELECT {_MESSAGE} FROM messages WHERE {where} ORDER BY id", params)
        return [_message(r) for r in rows]

    def context_messages(self, agent_id: int) -> list[Message]:
        """The FIFO queue, oldest first. Read before every model call, so the content JSON of
        each message is decoded once and kept while the row's revision stays the one it was
        decoded at (every change stamps a new one, whichever process makes it). The
        returned lists are shared: replace, never mutate."""
        rows = self._q("SELECT id, turn_id, role, created_at, rev FROM messages "
                       "WHERE agent_id = %s AND in_context ORDER BY id", (agent_id,))
        stale = [r[0] for r in rows
                 if self._decoded.get((agent_id, r[0]), (None,))[0] != r[4]]
        for i, rev, content, context in self._q(
                "SELECT id, rev, content, context_content FROM messages WHERE agent_id = %s "
                "AND id = ANY(%s)", (agent_id, stale)) if stale else []:
            self._decoded[(agent_id, i)] = (rev, json.loads(content),
                                            None if context is None else json.loads(context))
        keep = {(agent_id, r[0]) for r in rows}
        self._decoded = {k: v for k, v in self._decoded.items() if k[0] != agent_id or k in keep}
        queue = []
        for r in rows:
            _, content, context = self._decoded[(agent_id, r[0])]
            queue.append(Message(r[2], content, r[1], r[0], r[3], True, context))
        return queue

    def turn_messages(self, agent_id: int, turn_id: int) -> list[Message]:
        return self._messages("agent_id = %s AND turn_id = %s", (agent_id, turn_id))

    def all_messages(self, agent_id: int) -> list[Message]:
        return self._messages("agent_id = %s", (agent_id,))

    def message_positions(self, agent_id: int) -> list[int]:
        return [r[0] for r in self._q("SELECT seq FROM messages WHERE agent_id = %s "
                                      "ORDER BY id", (agent_id,))]

    def set_message_positions(self, agent_id: int, positions: dict[int, int]) -> None:
        with self.transaction():
            self._many("UPDATE messages SET seq = %s WHERE agent_id = %s AND id = %s",
                       [(seq, agent_id, i) for i, seq in positions.items()])

    def max_turn_id(self, agent_id: int) -> int:
        return self._q("SELECT coalesce(max(turn_id), 0) FROM messages WHERE agent_id = %s",
                       (agent_id,))[0][0]

    # ---------------------------------------------------------------- search

    def search_messages(self, agent_id: int, query: str, page: int = 1, per_page: int = 5,
                        start_date: str | None = None, end_date: str | None = None, *,
                        dense: dict[int, float] | None = None,
                        keyword_weight: float = search.KEYWORD_WEIGHT,
                        context: bool = True, leave_out: Collection[int] = (),
                        below: Collection[int] = ()) -> SearchPage:
        """As the SQLite store's (see sqlite_recall.py): BM25 over any query term plus a
        share of matching neighbours', fused with `dense` when given; each hit brings the
        reply that followed it."""
        page, per_page = max(1, int(page)), max(1, int(per_page))
        scores = self.keyword_scores(agent_id, query, start_date, end_date)
        if dense:
            scores = search.fuse(scores, dense, keyword_weight)
        scores = search.place(scores, leave_out, below)
        if not scores:
            return SearchPage([], page, 0, 0)
        ids = search.top_page(scores, page, per_page)
        reply_of = {i: r for i, r in self._reply_ids(agent_id, ids).items()
                    if r not in ids and r not in leave_out} if context else {}
        rows = self._message_hits(agent_id, [*ids, *set(reply_of.values()) - set(ids)], scores)
        by_id = {h.id: h for h in rows}
        hits = [by_id[i] for i in ids]
        for hit in hits:
            hit.context = [by_id[reply_of[hit.id]]] if hit.id in reply_of else []
        return SearchPage(hits, page, math.ceil(len(scores) / per_page), len(scores))

    def keyword_scores(self, agent_id: int, query: str, start_date: str | None = None,
                       end_date: str | None = None) -> dict[int, float]:
        """{message id: keyword score} of every candidate of the query (at most RANK_CAP)."""
        where, params = _date_filter(start_date, end_date)
        rows = self._keyword_rows("messages", agent_id, query,  # type: ignore[attr-defined]
                                  [w.replace("?", "%s") for w in where], params)
        return search.with_neighbours(rows)

    def replies(self, agent_id: int, ids: list[int]) -> dict[int, list[SearchHit]]:
        """For each message id, the next message with text in the agent's history."""
        found = self._reply_ids(agent_id, ids)
        hits = {h.id: h for h in self._message_hits(agent_id, list(set(found.values())), {})}
        return {i: [hits[r]] for i, r in found.items()}

    def _reply_ids(self, agent_id: int, ids: list[int]) -> dict[int, int]:
        if not ids:
            return {}
        rows = self._q(
            "SELECT m.id, (SELECT n.id FROM messages n WHERE n.agent_id = m.agent_id AND "
            "n.seq > m.seq AND n.index_text <> '' ORDER BY n.seq LIMIT 1) FROM messages m "
            "WHERE m.agent_id = %s AND m.id = ANY(%s)", (agent_id, list(ids)))
        return {r[0]: r[1] for r in rows if r[1] is not None}

    def _message_hits(self, agent_id: int, ids: list[int],
                      score: dict[int, float]) -> list[SearchHit]:
        if not ids:
            return []
        rows = {r[0]: r for r in self._q(
            "SELECT id, role, turn_id, content, created_at, status FROM messages "
            "WHERE agent_id = %s AND id = ANY(%s)", (agent_id, list(ids)))}
        return [SearchHit(i, plain_text(rows[i][1], json.loads(rows[i][3])), rows[i][4],
                          role=rows[i][1], turn_id=rows[i][2], score=score.get(i, 0.0),
                          status=rows[i][5]) for i in ids]
