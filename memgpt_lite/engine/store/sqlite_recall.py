"""Recall in the SQLite store: every message of every turn, the FIFO queue (messages with
`in_context = 1`), and `conversation_search` over the agent's own full-text index.

A mixin of `sqlite.Store`: it uses the connection, transactions and revision helpers there.
"""

from __future__ import annotations

from collections.abc import Collection

import json
import math
import sqlite3
from datetime import date, timedelta
from typing import Any

from memgpt_lite.engine import search
from memgpt_lite.engine.records import Message, SearchHit, SearchPage, now_iso
from memgpt_lite.engine.search import index_text, plain_text
from memgpt_lite.engine.store import fts
from memgpt_lite.engine.text import clean_text

_INSERT = ("INSERT INTO messages (agent_id, turn_id, role, content, context_content, "
           "index_text, created_at, in_context, status, seq, rev) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


class RecallMixin:
    """Messages: stored whole, queued while in context, searchable forever."""

    _db: sqlite3.Connection
    _decoded: dict[int, tuple[list, list | None]]
    _data_version: int

    # ---------------------------------------------------------------- writing

    def _message_row(self, agent_id: int, msg: Message) -> tuple:
        if msg.created_at is None:
            msg.created_at = now_iso()
        text = clean_text(plain_text(msg.role, msg.content))
        return (agent_id, msg.turn_id, msg.role, self._dumps(msg.content),
                None if msg.context_content is None else self._dumps(msg.context_content),
                index_text(text), msg.created_at, int(msg.in_context), msg.status)

    def add_message(self, agent_id: int, msg: Message) -> int:
        self._insert_messages(agent_id, [msg])
        return msg.id  # type: ignore[return-value]

    def add_messages(self, agent_id: int, msgs: list[Message]) -> None:
        """Insert many messages in one transaction (ids are set on the objects)."""
        self._insert_messages(agent_id, msgs)

    def _insert_messages(self, agent_id: int, msgs: list[Message]) -> None:
        """Each message gets the next position in the agent's history."""
        if not msgs:
            return
        with self.transaction():
            rev = self._bump(agent_id)
            seq = self._q("SELECT coalesce(max(seq), 0) FROM messages WHERE agent_id = ?",
                          (agent_id,))[0][0]
            indexed = []
            for msg in msgs:  # executemany cannot return the ids we must hand back
                seq += 1
                row = self._message_row(agent_id, msg)
                msg.id = self._db.execute(_INSERT, (*row, seq, rev)).lastrowid
                indexed.append((msg.id, row[5]))
            fts.add(self._db, "messages", agent_id, indexed)

    def update_message(self, agent_id: int, msg: Message) -> None:
        row = self._message_row(agent_id, msg)
        self._decoded.pop(msg.id, None)  # type: ignore[arg-type]
        with self.transaction():
            old = self._q("SELECT index_text FROM messages WHERE id = ? AND agent_id = ?",
                          (msg.id, agent_id))
            if not old:
                return
            self._db.execute(
                "UPDATE messages SET content = ?, context_content = ?, index_text = ?, "
                "in_context = ?, status = ?, rev = ? WHERE id = ? AND agent_id = ?",
                (row[3], row[4], row[5], row[7], row[8], self._bump(agent_id), msg.id,
                 agent_id))
            if old[0][0] != row[5]:
                fts.remove(self._db, "messages", agent_id, [(msg.id, old[0][0])])
                fts.add(self._db, "messages", agent_id, [(msg.id, row[5])])

    def set_context_content(self, agent_id: int, message_id: int,
                            content: list[dict] | None) -> None:
        self._decoded.pop(message_id, None)
        with self.transaction():
            if self.open_turn(agent_id) is not None:  # type: ignore[attr-defined]
                old = self._q("SELECT context_content FROM messages WHERE id = ? AND "
                              "agent_id = ?", (message_id, agent_id))
                before = old[0][0] if old else None
                self._journal(agent_id, "context_content", message_id,  # type: ignore[attr-defined]
                              None if before is None else json.loads(before))
            self._db.execute(
                "UPDATE messages SET context_content = ?, rev = ? WHERE id = ? AND agent_id = ?",
                (None if content is None else self._dumps(content), self._bump(agent_id),
                 message_id, agent_id))

    def set_in_context(self, agent_id: int, turn_ids: list[int], in_context: bool) -> None:
        with self.transaction():
            if self.open_turn(agent_id) is not None:  # type: ignore[attr-defined]
                for t in turn_ids:
                    flags = {r[0]: r[1] for r in self._q(
                        "SELECT id, in_context FROM messages WHERE agent_id = ? AND "
                        "turn_id = ?", (agent_id, t))}
                    self._journal(agent_id, "in_context", t, flags)  # type: ignore[attr-defined]
            rev = self._bump(agent_id)
            self._db.executemany(
                "UPDATE messages SET in_context = ?, rev = ? WHERE agent_id = ? AND turn_id = ?",
                [(int(in_context), rev, agent_id, t) for t in turn_ids])

    def delete_turns(self, agent_id: int, turn_ids: list[int]) -> int:
        """Delete whole turns from the queue and recall; returns how many messages went."""
        self._decoded.clear()  # message ids can be reused after a delete
        with self.transaction():
            rows = [tuple(r) for t in turn_ids for r in self._q(
                "SELECT id, index_text FROM messages WHERE agent_id = ? AND turn_id = ?",
                (agent_id, t))]
            fts.remove(self._db, "messages", agent_id, rows)
            self._db.executemany("DELETE FROM messages WHERE id = ?", [(r[0],) for r in rows])
            self._tombstones(agent_id, "messages", [r[0] for r in rows])
        return len(rows)

    # ---------------------------------------------------------------- reading

    def _messages(self, where: str, params: tuple) -> list[Message]:
        rows = self._q("SELECT id, turn_id, role, content, context_content, created_at, "
                       f"in_context, status FROM messages WHERE {where} ORDER BY id", params)
        return [Message(r["role"], json.loads(r["content"]), r["turn_id"], r["id"],
                        r["created_at"], bool(r["in_context"]),
                        None if r["context_content"] is None else json.loads(r["context_content"]),
                        r["status"])
                for r in rows]

    def context_messages(self, agent_id: int) -> list[Message]:
        """The FIFO queue, oldest first. Read before every model call, so the content JSON of
        each message is decoded once and kept (content changes only through this object's
        update methods, which drop the entry, or through another connection, which
        PRAGMA data_version reveals). The returned lists are shared: replace, never mutate."""
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._decoded.clear()
            self._data_version = version
        rows = self._q("SELECT id, turn_id, role, created_at FROM messages "
                       "WHERE agent_id = ? AND in_context = 1 ORDER BY id", (agent_id,))
        self._decode([r["id"] for r in rows if r["id"] not in self._decoded])
        self._decoded = {r["id"]: self._decoded[r["id"]] for r in rows}  # only the queue's
        queue = []
        for r in rows:
            content, context = self._decoded[r["id"]]
            queue.append(Message(r["role"], content, r["turn_id"], r["id"], r["created_at"],
                                 True, context))
        return queue

    def _decode(self, ids: list[int]) -> None:
        for start in range(0, len(ids), 500):  # stay under SQLite's bound-parameter limit
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for r in self._q(f"SELECT id, content, context_content FROM messages "
                             f"WHERE id IN ({marks})", chunk):
                context = r["context_content"]
                self._decoded[r["id"]] = (json.loads(r["content"]),
                                          None if context is None else json.loads(context))

    def turn_messages(self, agent_id: int, turn_id: int) -> list[Message]:
        return self._messages("agent_id = ? AND turn_id = ?", (agent_id, turn_id))

    def all_messages(self, agent_id: int) -> list[Message]:
        """Every message of the agent, in order (exports)."""
        return self._messages("agent_id = ?", (agent_id,))

    def message_positions(self, agent_id: int) -> list[int]:
        """Each message's position in the agent's history, in message order (exports keep
        them, so neighbours stay neighbours after an import)."""
        return [r[0] for r in self._q("SELECT seq FROM messages WHERE agent_id = ? ORDER BY id",
                                      (agent_id,))]

    def set_message_positions(self, agent_id: int, positions: dict[int, int]) -> None:
        """Give messages (by id) the positions of an export they were imported from."""
        with self.transaction():
            self._db.executemany("UPDATE messages SET seq = ? WHERE id = ? AND agent_id = ?",
                                 [(seq, i, agent_id) for i, seq in positions.items()])

    def max_turn_id(self, agent_id: int) -> int:
        return self._q("SELECT coalesce(max(turn_id), 0) FROM messages WHERE agent_id = ?",
                       (agent_id,))[0][0]

    # ---------------------------------------------------------------- search

    def search_messages(self, agent_id: int, query: str, page: int = 1, per_page: int = 5,
                        start_date: str | None = None, end_date: str | None = None, *,
                        dense: dict[int, float] | None = None,
                        keyword_weight: float = search.KEYWORD_WEIGHT,
                        context: bool = True, leave_out: Collection[int] = (),
                        below: Collection[int] = ()) -> SearchPage:
        """Messages ranked by BM25 over any query term plus a share of their matching
        neighbours' (`search.with_neighbours`); with `dense` ({id: cosine} from the dense
        side, already date-filtered), fused with it (`search.fuse`). Ids in `leave_out` are
        never returned, ids in `below` rank after every other candidate (`search.place`).
        Each hit brings the reply that followed it as `context` (see `replies`). Dates are
        YYYY-MM-DD, inclusive."""
        page, per_page = max(1, int(page)), max(1, int(per_page))
        scores = self.keyword_scores(agent_id, query, start_date, end_date)
        if dense:
            scores = search.fuse(scores, dense, keyword_weight)
        scores = search.place(scores, leave_out, below)
        if not scores:
            return SearchPage([], page, 0, 0)
        ids = search.top_page(scores, page, per_page)
        # A reply that is a hit of its own on the page is shown there, not twice.
        reply_of = {i: r for i, r in self._reply_ids(agent_id, ids).items()
                    if r not in ids and r not in leave_out} if context else {}
        rows = self._message_hits([*ids, *set(reply_of.values()) - set(ids)], scores)
        by_id = {h.id: h for h in rows}
        hits = [by_id[i] for i in ids]
        for hit in hits:
            hit.context = [by_id[reply_of[hit.id]]] if hit.id in reply_of else []
        return SearchPage(hits, page, math.ceil(len(scores) / per_page), len(scores))

    def keyword_scores(self, agent_id: int, query: str, start_date: str | None = None,
                       end_date: str | None = None) -> dict[int, float]:
        """{message id: keyword score} of every candidate of the query (at most RANK_CAP)."""
        where, params = _date_filter(start_date, end_date)
        expr = self._match_expression("messages", agent_id, query)
        if expr is None:
            return {}
        name = fts.table("messages", agent_id)
        # The covering index: positions and dates without reading the (large) message rows.
        rows = self._candidates(name, f"f.rowid, -bm25({name}), m.seq",
                                "CROSS JOIN messages m INDEXED BY messages_search "
                                "ON m.id = f.rowid", where, [expr, *params])
        return search.with_neighbours(rows)

    def replies(self, agent_id: int, ids: list[int]) -> dict[int, list[SearchHit]]:
        """For each message id, the next message with text in the agent's history (its
        reply: the answer usually follows the question it was asked in), as a hit."""
        found = self._reply_ids(agent_id, ids)
        hits = {h.id: h for h in self._message_hits(list(set(found.values())), {})}
        return {i: [hits[r]] for i, r in found.items()}

    def _reply_ids(self, agent_id: int, ids: list[int]) -> dict[int, int]:
        if not ids:
            return {}
        rows = self._q(
            "SELECT m.id, (SELECT n.id FROM messages n WHERE n.agent_id = m.agent_id AND "
            "n.seq > m.seq AND n.index_text != '' ORDER BY n.seq LIMIT 1) FROM messages m "
            # +agent_id: look the few ids up by key, not by scanning the agent's rows
            f"WHERE +m.agent_id = ? AND m.id IN ({', '.join('?' * len(ids))})", [agent_id, *ids])
        return {r[0]: r[1] for r in rows if r[1] is not None}

    def _message_hits(self, ids: list[int], score: dict[int, float]) -> list[SearchHit]:
        if not ids:
            return []
        rows = {r["id"]: r for r in self._q(
            "SELECT id, role, turn_id, content, created_at, status FROM messages WHERE id IN "
            f"({', '.join('?' * len(ids))})", ids)}
        return [SearchHit(i, plain_text(rows[i]["role"], json.loads(rows[i]["content"])),
                          rows[i]["created_at"], role=rows[i]["role"],
                          turn_id=rows[i]["turn_id"], score=score.get(i, 0.0),
                          status=rows[i]["status"]) for i in ids]

    def _match_expression(self, kind: str, agent_id: int, query: str) -> str | None:
        """The MATCH expression for a query: its candidate terms (see
        `search.candidate_terms`) joined by OR; None when it has no searchable words."""
        name = fts.table(kind, agent_id)

        def doc_freq(term: str) -> int:  # counting stops past the cap
            return self._q(f"SELECT count(*) FROM (SELECT rowid FROM {name} WHERE {name} "
                           f"MATCH ? LIMIT {search.RANK_CAP + 1})", (term,))[0][0]

        terms = search.candidate_terms(search.match_terms(query), doc_freq)
        return " OR ".join(terms) or None

    def _candidates(self, name: str, select: str, join: str, where: list[str],
                    params: list[Any]) -> list[tuple]:
        """The agent's rows matching the MATCH parameter, newest first, at most RANK_CAP of
        them (FTS yields rowids in order, so this stops early). CROSS JOIN keeps FTS the
        outer loop. Plain tuples: up to RANK_CAP rows, sqlite3.Row is slower."""
        sql = (f"SELECT {select} FROM {name} f {join} WHERE {name} MATCH ? "
               f"{''.join(' AND ' + w for w in where)} "
               f"ORDER BY f.rowid DESC LIMIT {search.RANK_CAP}")
        cur = self._db.cursor()
        cur.row_factory = None
        try:
            return cur.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            raise self._error(exc) from exc


def _date_filter(start_date: str | None, end_date: str | None) -> tuple[list[str], list[str]]:
    where, params = [], []
    if start_date:
        where.append("m.created_at >= ?")
        params.append(date.fromisoformat(start_date).isoformat())
    if end_date:
        where.append("m.created_at < ?")
        params.append((date.fromisoformat(end_date) + timedelta(days=1)).isoformat())
    return where, params
