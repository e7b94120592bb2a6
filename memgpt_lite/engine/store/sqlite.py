"""The SQLite store: agents, core memory blocks (+ history), every message, archival passages.

One file per data directory. WAL so a reader never blocks the writer, a busy timeout so two
processes wait instead of failing, foreign keys so deleting an agent deletes its memory.
Schema changes are the named, append-only migrations of `migrations.py`, recorded in a
ledger table. Search runs FTS5 with BM25 on the queries that `search.py` builds.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from memgpt_lite.engine import search
from memgpt_lite.engine.records import Block, Message, SearchHit, SearchPage, now_iso
from memgpt_lite.engine.search import index_text, normalise, plain_text, word_set
from memgpt_lite.engine.store.base import AgentRow, StoreError
from memgpt_lite.engine.store.migrations import MIGRATIONS
from memgpt_lite.engine.text import clean_text

SQLITE_HEADER = b"SQLite format 3\x00"


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep them losslessly as \u escapes
        text = json.dumps(value, ensure_ascii=True)
    return text




def _sqlite_error(path: Path, exc: sqlite3.Error) -> StoreError:
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        msg = f"The database {path} is locked by another process; close it and try again."
    elif "readonly" in text or "read-only" in text:
        msg = f"The database {path} is read-only; check its permissions."
    elif "unable to open" in text and not os.access(path.parent, os.W_OK):
        # WAL mode needs to create files beside the database, so a read-only folder
        # fails at open time with SQLite's generic message.
        msg = (f"The data dir {path.parent} is read-only; make it writable or point "
               f"MEMGPT_LITE_HOME at another folder.")
    elif "full" in text:
        msg = f"The disk holding {path} is full; free some space and try again."
    elif "not a database" in text or "malformed" in text:
        msg = f"{path} is not a readable memgpt-lite database; it was left untouched."
    else:
        msg = f"The database {path} failed: {exc}."
    return StoreError(msg)


class Store:
    """All persistent memory in one SQLite file. Every read and write takes an agent id and
    touches only that agent's rows. Methods commit on their own unless called inside
    `transaction()`, whose nested uses join the outermost one. Not safe for concurrent use
    from several threads; other processes are fine (WAL + busy timeout)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self._depth = 0
        # Decoded content of queue messages by id, so building each request does not parse
        # the whole queue's JSON again (see context_messages).
        self._decoded: dict[int, tuple[list, list | None]] = {}
        self._data_version = -1
        _prepare_file(self.path)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise _sqlite_error(self.path, exc) from None
        self._db.row_factory = sqlite3.Row
        try:
            # Before the first read: a second process creating the same new file holds
            # its lock for a moment, and without a timeout the read fails at once.
            self._db.execute("PRAGMA busy_timeout = 5000")
            self._check_schema()  # read-only: a foreign or newer file is never touched
            self._db.execute("PRAGMA foreign_keys = ON")
            self._enable_wal()
            self._db.execute("PRAGMA synchronous = NORMAL")  # safe with WAL; fsync per checkpoint
            self._migrate()
        except StoreError:
            self._db.close()
            raise
        except sqlite3.Error as exc:
            self._db.close()
            raise _sqlite_error(self.path, exc) from None

    def _enable_wal(self) -> None:
        """Switch a new file to WAL. Two processes creating the same file can both be
        switching it at once; SQLite then refuses one at once (to avoid a deadlock) instead of
        waiting, so try again for as long as the busy timeout would have waited."""
        deadline = time.monotonic() + 5
        while True:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @classmethod
    def open_default(cls) -> Store:
        from memgpt_lite.engine import config  # config reads the environment; stores need not

        return cls(config.db_path())

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- transactions, schema

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE (take the write lock up front, so busy_timeout applies); nested
        calls join the outer transaction. Rolls back on any exception."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise _sqlite_error(self.path, exc) from None
        self._depth = 1
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException as exc:
            self._decoded.clear()  # it may hold content read inside the undone transaction
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise _sqlite_error(self.path, exc) from exc
            raise
        finally:
            self._depth = 0

    def _check_schema(self) -> None:
        tables = {r[0] for r in self._db.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        if not tables:
            return
        if "schema_migrations" not in tables:
            raise StoreError(f"{self.path} is a SQLite database from another program, not "
                             "memgpt-lite; it was left untouched.")
        known = {name for name, _ in MIGRATIONS}
        unknown = [n for n in self.applied_migrations() if n not in known]
        if unknown:
            raise StoreError(f"{self.path} was written by a newer memgpt-lite (unknown schema "
                             f"migration {unknown[0]!r}); upgrade memgpt-lite to open it.")

    def _migrate(self) -> None:
        self._db.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                         "name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        for name, apply in MIGRATIONS:
            with self.transaction():
                done = self._db.execute(
                    "SELECT 1 FROM schema_migrations WHERE name = ?", (name,)).fetchone()
                if done:
                    continue
                apply(self._db)
                self._db.execute("INSERT INTO schema_migrations VALUES (?, ?)",
                                 (name, now_iso()))

    def applied_migrations(self) -> list[str]:
        return [r[0] for r in self._db.execute(
            "SELECT name FROM schema_migrations ORDER BY rowid")]

    def schema_version(self) -> int:
        return len(self.applied_migrations())

    def _q(self, sql: str, params: tuple | list = ()) -> list[sqlite3.Row]:
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            raise _sqlite_error(self.path, exc) from exc

    # ---------------------------------------------------------------- agents

    def create_agent(self, name: str, settings: dict,
                     blocks: dict[str, tuple[str, int]]) -> AgentRow:
        with self.transaction():
            if self.get_agent(name) is not None:
                raise StoreError(f"An agent named {name!r} already exists.")
            cur = self._db.execute(
                "INSERT INTO agents (name, model, settings, created_at) VALUES (?, ?, ?, ?)",
                (name, str(settings.get("model", "")), _dumps(settings), now_iso()))
            for label, (value, limit) in blocks.items():
                self.set_block(cur.lastrowid, label, value, limit, source="init")
        return self.get_agent_by_id(cur.lastrowid)  # type: ignore[return-value]

    def _agent(self, row: sqlite3.Row | None) -> AgentRow | None:
        if row is None:
            return None
        return AgentRow(row["id"], row["name"], row["model"], json.loads(row["settings"]),
                        row["summary"], row["created_at"], row["last_used_at"])

    def get_agent(self, name: str) -> AgentRow | None:
        rows = self._q("SELECT * FROM agents WHERE name = ?", (name,))
        return self._agent(rows[0] if rows else None)

    def get_agent_by_id(self, agent_id: int) -> AgentRow | None:
        rows = self._q("SELECT * FROM agents WHERE id = ?", (agent_id,))
        return self._agent(rows[0] if rows else None)

    def list_agents(self) -> list[AgentRow]:
        rows = self._q("SELECT * FROM agents ORDER BY name")
        return [self._agent(r) for r in rows]  # type: ignore[misc]

    def _require_agent(self, name: str) -> AgentRow:
        agent = self.get_agent(name)
        if agent is None:
            raise StoreError(f"There is no agent named {name!r}.")
        return agent

    def agent_stats(self, agent_id: int) -> dict:
        m = self._q("SELECT count(*), count(DISTINCT turn_id) FROM messages WHERE agent_id = ?",
                    (agent_id,))[0]
        agent = self.get_agent_by_id(agent_id)
        return {"turns": m[1], "messages": m[0], "passages": self.count_passages(agent_id),
                "last_used_at": agent.last_used_at if agent else None}

    def _update_agent(self, agent_id: int, column: str, value: Any) -> None:
        with self.transaction():
            self._db.execute(f"UPDATE agents SET {column} = ? WHERE id = ?", (value, agent_id))

    def update_settings(self, agent_id: int, settings: dict) -> None:
        with self.transaction():
            self._update_agent(agent_id, "settings", _dumps(settings))
            if "model" in settings:
                self._update_agent(agent_id, "model", str(settings["model"]))

    def set_summary(self, agent_id: int, summary: str) -> None:
        self._update_agent(agent_id, "summary", clean_text(summary))

    def restore_agent(self, agent_id: int, *, summary: str, created_at: str,
                      last_used_at: str | None) -> None:
        with self.transaction():
            self._db.execute("UPDATE agents SET summary = ?, created_at = ?, last_used_at = ? "
                             "WHERE id = ?", (summary, created_at, last_used_at, agent_id))

    def touch(self, agent_id: int) -> None:
        self._update_agent(agent_id, "last_used_at", now_iso())

    def rename_agent(self, old: str, new: str) -> None:
        with self.transaction():
            agent = self._require_agent(old)
            if self.get_agent(new) is not None:
                raise StoreError(f"An agent named {new!r} already exists.")
            self._update_agent(agent.id, "name", new)

    def delete_agent(self, name: str) -> None:
        self._decoded.clear()  # message ids can be reused after a delete
        with self.transaction():
            agent = self._require_agent(name)
            self._db.execute("DELETE FROM agents WHERE id = ?", (agent.id,))  # cascades

    # ---------------------------------------------------------------- core memory blocks

    def get_blocks(self, agent_id: int) -> list[Block]:
        rows = self._q(
            "SELECT label, value, char_limit FROM blocks WHERE agent_id = ? ORDER BY "
            "CASE label WHEN 'persona' THEN 0 WHEN 'human' THEN 1 ELSE 2 END, id", (agent_id,))
        return [Block(r[0], r[1], r[2]) for r in rows]

    def get_block(self, agent_id: int, label: str) -> Block | None:
        rows = self._q("SELECT label, value, char_limit FROM blocks "
                       "WHERE agent_id = ? AND label = ?", (agent_id, label))
        return Block(rows[0][0], rows[0][1], rows[0][2]) if rows else None

    def set_block(self, agent_id: int, label: str, value: str, limit: int | None = None,
                  source: str = "tool") -> Block:
        """Create or change a block and record the change. Raises ValueError when the value
        is over the limit: callers (tools, /core edit) check first and explain."""
        value = clean_text(value)
        with self.transaction():
            old = self.get_block(agent_id, label)
            limit = limit if limit is not None else (old.limit if old else 5000)
            if len(value) > limit:
                raise ValueError(f"block {label!r} would be {len(value)} chars, over its "
                                 f"limit of {limit}")
            at = now_iso()
            self._db.execute(
                "INSERT INTO blocks (agent_id, label, value, char_limit, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (agent_id, label) DO UPDATE SET "
                "value = excluded.value, char_limit = excluded.char_limit, "
                "updated_at = excluded.updated_at", (agent_id, label, value, limit, at))
            self._db.execute(
                "INSERT INTO block_history (agent_id, label, old_value, new_value, source, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (agent_id, label, old.value if old else None, value, source, at))
        return Block(label, value, limit)

    def restore_blocks(self, agent_id: int, blocks: list[tuple[str, str, int]],
                       history: list[tuple[str, str | None, str, str, str]]) -> None:
        """Blocks (label, value, limit) and their history rows (label, old, new, source,
        created_at) exactly as given, without new history: an import, not an edit."""
        with self.transaction():
            self._db.executemany(
                "INSERT INTO blocks (agent_id, label, value, char_limit, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                [(agent_id, label, value, limit, now_iso()) for label, value, limit in blocks])
            self._db.executemany(
                "INSERT INTO block_history (agent_id, label, old_value, new_value, source, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?)", [(agent_id, *h) for h in history])

    def block_history(self, agent_id: int, label: str | None = None) -> list[dict]:
        sql = ("SELECT label, old_value, new_value, source, created_at FROM block_history "
               "WHERE agent_id = ?")
        params: list[Any] = [agent_id]
        if label is not None:
            sql += " AND label = ?"
            params.append(label)
        return [dict(r) for r in self._q(sql + " ORDER BY id", params)]

    # ---------------------------------------------------------------- messages (recall)

    def _message_row(self, agent_id: int, msg: Message) -> tuple:
        if msg.created_at is None:
            msg.created_at = now_iso()
        text = clean_text(plain_text(msg.role, msg.content))
        return (agent_id, msg.turn_id, msg.role, _dumps(msg.content),
                None if msg.context_content is None else _dumps(msg.context_content),
                index_text(text), msg.created_at, int(msg.in_context))

    _INSERT_MESSAGE = ("INSERT INTO messages (agent_id, turn_id, role, content, context_content,"
                       " index_text, created_at, in_context) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")

    def add_message(self, agent_id: int, msg: Message) -> int:
        with self.transaction():
            cur = self._db.execute(self._INSERT_MESSAGE, self._message_row(agent_id, msg))
        msg.id = cur.lastrowid
        return msg.id  # type: ignore[return-value]

    def add_messages(self, agent_id: int, msgs: list[Message]) -> None:
        """Insert many messages in one transaction (ids are set on the objects)."""
        with self.transaction():
            for msg in msgs:  # executemany cannot return the ids we must hand back
                msg.id = self._db.execute(self._INSERT_MESSAGE,
                                          self._message_row(agent_id, msg)).lastrowid

    def update_message(self, agent_id: int, msg: Message) -> None:
        row = self._message_row(agent_id, msg)
        self._decoded.pop(msg.id, None)  # type: ignore[arg-type]
        with self.transaction():
            self._db.execute(
                "UPDATE messages SET content = ?, context_content = ?, index_text = ?, "
                "in_context = ? WHERE id = ? AND agent_id = ?",
                (row[3], row[4], row[5], row[7], msg.id, agent_id))

    def set_context_content(self, agent_id: int, message_id: int,
                            content: list[dict] | None) -> None:
        self._decoded.pop(message_id, None)
        with self.transaction():
            self._db.execute(
                "UPDATE messages SET context_content = ? WHERE id = ? AND agent_id = ?",
                (None if content is None else _dumps(content), message_id, agent_id))

    def _messages(self, where: str, params: tuple) -> list[Message]:
        rows = self._q("SELECT id, turn_id, role, content, context_content, created_at, "
                       f"in_context FROM messages WHERE {where} ORDER BY id", params)
        return [Message(r["role"], json.loads(r["content"]), r["turn_id"], r["id"],
                        r["created_at"], bool(r["in_context"]),
                        None if r["context_content"] is None else json.loads(r["context_content"]))
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

    def set_in_context(self, agent_id: int, turn_ids: list[int], in_context: bool) -> None:
        with self.transaction():
            self._db.executemany(
                "UPDATE messages SET in_context = ? WHERE agent_id = ? AND turn_id = ?",
                [(int(in_context), agent_id, t) for t in turn_ids])

    def max_turn_id(self, agent_id: int) -> int:
        return self._q("SELECT coalesce(max(turn_id), 0) FROM messages WHERE agent_id = ?",
                       (agent_id,))[0][0]

    def delete_turns(self, agent_id: int, turn_ids: list[int]) -> int:
        self._decoded.clear()  # message ids can be reused after a delete
        with self.transaction():
            return sum(self._db.execute(
                "DELETE FROM messages WHERE agent_id = ? AND turn_id = ?", (agent_id, t)).rowcount
                for t in turn_ids)

    def all_messages(self, agent_id: int) -> list[Message]:
        """Every message of the agent, in order (exports and snapshots)."""
        return self._messages("agent_id = ?", (agent_id,))

    def search_messages(self, agent_id: int, query: str, page: int = 1, per_page: int = 5,
                        start_date: str | None = None, end_date: str | None = None) -> SearchPage:
        """Messages ranked by BM25 over any query term. Dates are YYYY-MM-DD, inclusive."""
        where, params = ["m.agent_id = ?"], [agent_id]
        if start_date:
            where.append("m.created_at >= ?")
            params.append(date.fromisoformat(start_date).isoformat())
        if end_date:
            where.append("m.created_at < ?")
            params.append((date.fromisoformat(end_date) + timedelta(days=1)).isoformat())
        return self._search("messages", query, where, params, page, per_page, self._message_hit)

    def _message_hit(self, row: sqlite3.Row) -> SearchHit:
        text = plain_text(row["role"], json.loads(row["content"]))
        return SearchHit(row["id"], text, row["created_at"], role=row["role"],
                         turn_id=row["turn_id"], score=-row["rank"])

    def _search(self, table: str, query: str, where: list[str], params: list, page: int,
                per_page: int, to_hit: Callable[[sqlite3.Row], SearchHit]) -> SearchPage:
        page, per_page = max(1, int(page)), max(1, int(per_page))
        expr = self._candidate_expression(table, query)
        if expr is None:
            return SearchPage([], page, 0, 0)
        if table == "messages" and search.NEIGHBOUR_WEIGHT:
            return self._search_with_neighbours(expr, where, params, page, per_page, to_hit)
        cols = ("m.id, m.role, m.turn_id, m.content, m.created_at" if table == "messages"
                else "m.id, m.text, m.tags, m.created_at")
        scored = _candidates_sql(table, where, f"f.rowid AS id, bm25({table}_fts) AS score")
        # Outer query: BM25 over the candidates only, since BM25 costs ~2 µs a row.
        sql = (f"SELECT {cols}, c.score AS rank, count(*) OVER () AS total FROM ({scored}"
               f") c CROSS JOIN {table} m ON m.id = c.id ORDER BY c.score, m.id DESC "
               "LIMIT ? OFFSET ?")
        rows = self._q(sql, [expr, *params, per_page, (page - 1) * per_page])
        if rows:
            total = rows[0]["total"]
        else:  # a page past the end still reports the total
            total = self._q(f"SELECT count(*) FROM ({_candidates_sql(table, where, 'f.rowid')})",
                            [expr, *params])[0][0]
        return SearchPage([to_hit(r) for r in rows], page, math.ceil(total / per_page), total)

    def _search_with_neighbours(self, expr: str, where: list[str], params: list, page: int,
                                per_page: int, to_hit: Callable[[sqlite3.Row], SearchHit]
                                ) -> SearchPage:
        """Messages: the same candidates as `_search`, ranked with their neighbours
        (`search.with_neighbours`). Only matching rows are returned, so totals and pages are
        unchanged."""
        cur = self._db.cursor()
        cur.row_factory = None  # plain tuples: up to RANK_CAP rows, sqlite3.Row is slower
        try:
            own = dict(cur.execute(
                _candidates_sql("messages", where, "f.rowid, -bm25(messages_fts)"),
                [expr, *params]).fetchall())
        except sqlite3.OperationalError as exc:
            raise _sqlite_error(self.path, exc) from exc
        combined = search.with_neighbours(own)
        ids = search.top_page(combined, page, per_page)
        rows = {r["id"]: r for r in self._q(
            "SELECT id, role, turn_id, content, created_at, 0 AS rank FROM messages WHERE id IN "
            f"({', '.join('?' * len(ids))})", ids)} if ids else {}
        hits = []
        for i in ids:
            hit = to_hit(rows[i])
            hit.score = combined[i]
            hits.append(hit)
        return SearchPage(hits, page, math.ceil(len(own) / per_page), len(own))

    def _candidate_expression(self, table: str, query: str) -> str | None:
        """The MATCH expression for a query: its candidate terms (see
        `search.candidate_terms`) joined by OR; None when it has no searchable words."""
        def doc_freq(term: str) -> int:  # counting stops past the cap
            return self._q(f"SELECT count(*) FROM (SELECT rowid FROM {table}_fts WHERE "
                           f"{table}_fts MATCH ? LIMIT {search.RANK_CAP + 1})", (term,))[0][0]

        terms = search.candidate_terms(search.match_terms(query), doc_freq)
        return " OR ".join(terms) or None

    # ---------------------------------------------------------------- archival passages

    def add_passage(self, agent_id: int, text: str, tags: list[str] | None = None,
                    created_at: str | None = None) -> int:
        text = clean_text(text)
        tags = [clean_text(t) for t in (tags or [])]
        with self.transaction():
            cur = self._db.execute(
                "INSERT INTO passages (agent_id, text, tags, norm, index_text, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (agent_id, text, _dumps(tags), normalise(text), index_text(text),
                 created_at or now_iso()))
        return cur.lastrowid  # type: ignore[return-value]

    def _passage_hit(self, row: sqlite3.Row) -> SearchHit:
        rank = row["rank"] if "rank" in row.keys() else 0.0
        return SearchHit(row["id"], row["text"], row["created_at"], tags=json.loads(row["tags"]),
                         score=-rank)

    def search_passages(self, agent_id: int, query: str, page: int = 1, per_page: int = 5,
                        tags: list[str] | None = None) -> SearchPage:
        """Passages ranked by BM25 over any query term; with tags, only passages having any."""
        where, params = ["m.agent_id = ?"], [agent_id]
        if tags:
            where.append("EXISTS (SELECT 1 FROM json_each(m.tags) WHERE json_each.value IN "
                         f"({', '.join('?' * len(tags))}))")
            params.extend(tags)
        return self._search("passages", query, where, params, page, per_page, self._passage_hit)

    def near_duplicate(self, agent_id: int, text: str, threshold: float = 0.9) -> SearchHit | None:
        """A stored passage equal to `text` after normalising case and whitespace, or whose
        word set overlaps it with Jaccard >= threshold (checked among the BM25 candidates)."""
        text = clean_text(text)
        rows = self._q("SELECT id, text, tags, created_at FROM passages "
                       "WHERE agent_id = ? AND norm = ? LIMIT 1", (agent_id, normalise(text)))
        if rows:
            return self._passage_hit(rows[0])
        words = word_set(text)
        if not words:
            return None
        for hit in self.search_passages(agent_id, text, per_page=20).hits:
            other = word_set(hit.text)
            if len(words & other) / len(words | other) >= threshold:
                return hit
        return None

    def list_passages(self, agent_id: int, limit: int | None = 50,
                      offset: int = 0) -> list[SearchHit]:
        """Passages oldest first; limit None: all of them."""
        rows = self._q("SELECT id, text, tags, created_at FROM passages WHERE agent_id = ? "
                       "ORDER BY id LIMIT ? OFFSET ?",
                       (agent_id, -1 if limit is None else limit, offset))
        return [self._passage_hit(r) for r in rows]

    def count_passages(self, agent_id: int) -> int:
        return self._q("SELECT count(*) FROM passages WHERE agent_id = ?", (agent_id,))[0][0]

    def delete_passages(self, agent_id: int, ids: list[int]) -> int:
        with self.transaction():
            return sum(self._db.execute(
                "DELETE FROM passages WHERE agent_id = ? AND id = ?", (agent_id, i)).rowcount
                for i in ids)

    # ---------------------------------------------------------------- maintenance

    def integrity_problems(self) -> list[str]:
        """[] when the file and both search indexes are consistent."""
        problems = [r[0] for r in self._q("PRAGMA integrity_check") if r[0] != "ok"]
        for table in ("messages", "passages"):
            problems += self._index_problems(table)
        return problems

    def _index_problems(self, table: str) -> list[str]:
        """FTS5's full check (structure, and every indexed row against the table). Rows
        without text are deliberately not indexed, so for the check they are indexed as empty
        documents inside a savepoint that is always rolled back."""
        hint = "run `memgpt-lite doctor --repair` to rebuild it"
        self._db.execute("SAVEPOINT index_check")
        try:
            self._db.execute(f"INSERT INTO {table}_fts(rowid, index_text) "
                             f"SELECT id, '' FROM {table} WHERE index_text = ''")
            self._db.execute(f"INSERT INTO {table}_fts({table}_fts, rank) "
                             f"VALUES ('integrity-check', 1)")
        except sqlite3.DatabaseError as exc:
            return [f"search index {table}_fts is out of step with {table} ({exc}); {hint}"]
        finally:
            self._db.execute("ROLLBACK TO index_check")
            self._db.execute("RELEASE index_check")
        return []

    def rebuild_search_index(self) -> None:
        # Not FTS5's 'rebuild': it would index every row, and rows without text stay out.
        with self.transaction():
            for table in ("messages", "passages"):
                self._db.execute(f"INSERT INTO {table}_fts({table}_fts) VALUES ('delete-all')")
                self._db.execute(f"INSERT INTO {table}_fts(rowid, index_text) SELECT id, "
                                 f"index_text FROM {table} WHERE index_text != ''")


def _candidates_sql(table: str, where: list[str], select: str) -> str:
    """The agent's rows matching the MATCH parameter, newest first, at most RANK_CAP of them
    (FTS yields rowids in order, so this stops early). CROSS JOIN keeps FTS the outer loop;
    otherwise the planner may walk all the agent's rows and re-run MATCH for each."""
    return (f"SELECT {select} FROM {table}_fts f CROSS JOIN {table} m ON m.id = f.rowid "
            f"WHERE {table}_fts MATCH ? AND {' AND '.join(where)} "
            f"ORDER BY f.rowid DESC LIMIT {search.RANK_CAP}")


def _prepare_file(path: Path) -> None:
    """Create the data dir (0700) and the db file (0600) if missing; refuse a file that is
    not SQLite before SQLite touches it."""
    if not path.parent.exists():
        # exist_ok: two processes opening a new data dir at once both get here.
        path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        os.chmod(path.parent, 0o700)
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a memgpt-lite database.")
    if path.exists():
        try:
            with open(path, "rb") as f:
                header = f.read(len(SQLITE_HEADER))
        except OSError as exc:
            raise StoreError(f"{path} cannot be read ({exc.strerror}).") from None
        if header and header != SQLITE_HEADER:
            raise StoreError(f"{path} is not a SQLite database; it was left untouched. "
                             "Move it away or point MEMGPT_LITE_HOME elsewhere.")
        return
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        os.chmod(path, 0o600)
    except OSError as exc:
        raise StoreError(f"Cannot create the database {path} ({exc.strerror}).") from None
