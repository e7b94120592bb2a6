"""The SQLite store: agents, core memory blocks (+ history), every message, archival passages.

One file per data directory. WAL so a reader never blocks the writer, a busy timeout so two
processes wait instead of failing, foreign keys so deleting an agent deletes its memory.
Schema changes are named, append-only migrations recorded in a ledger table.

Search is FTS5 with BM25. Queries are never passed to MATCH raw: they are tokenised here and
rebuilt as an OR of quoted terms, so no input can raise an FTS syntax error. unicode61 does
not segment Chinese/Japanese/Korean, so CJK runs are indexed as overlapping character bigrams
generated in Python (see `index_text`); trigrams would miss two-character words like 部署.

Raw questions ("When did Caroline go to the support group?") are matched beyond their exact
words: question-framing stop words are dropped, irregular verbs bring their other forms
(go → went), long words also match by a 5-letter prefix (allergies → allergic), and a message
gains a little from matching neighbours. `python -m memgpt_lite.lab.retrieval_eval` measures it.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import re
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from memgpt_lite.engine.records import Block, Message, SearchHit, SearchPage

EXPORT_FORMAT = "memgpt-lite-agent"
EXPORT_VERSION = 1
SQLITE_HEADER = b"SQLite format 3\x00"
RANK_CAP = 1000  # BM25 is computed for at most this many candidate rows per search
# A message also scores this share of its matching neighbours' BM25: an answer is often
# a reply whose question holds the query's words ("How's Pepper?" / "She had surgery").
NEIGHBOUR_WEIGHT = 0.15
MAX_QUERY_TERMS = 32  # long pasted queries would make the OR match most of the table


class StoreError(Exception):
    """The data file cannot be used; the message is one clear sentence for the user."""


# What a damaged agent export raises while it is imported.
_DAMAGED_EXPORT = (KeyError, TypeError, ValueError, AttributeError, sqlite3.IntegrityError)


@dataclass
class AgentRow:
    id: int
    name: str
    model: str
    settings: dict
    summary: str
    created_at: str
    last_used_at: str | None


def utc_iso(moment: datetime) -> str:
    """'YYYY-MM-DDTHH:MM:SSZ', the one time format of stored rows (a naive time is UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_iso() -> str:
    return utc_iso(datetime.now(timezone.utc))


# --------------------------------------------------------------------------- text for search

_CJK = ("\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff"
        "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff")
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(f"[^\\W_{_CJK}]+|[{_CJK}]+")  # same word boundaries as unicode61

# Words that carry no topic; dropping them keeps "what did I say about my dog" about "dog"
# and keeps an OR query from matching most of the table.
STOP_WORDS = frozenset("""
a about above after again against all am an and any are aren as at be because been before
being below between both but by can could couldn did didn do does doesn doing don down during
each few for from further had hadn has hasn have haven having he her here hers herself him
himself his how i if in into is isn it its itself just ll let me might more most must my
myself no nor not now of off on once only or other our ours ourselves out over own re s same
shall she should so some such t than that the their theirs them themselves then there these
they this those through to too under until up very ve was wasn we were weren what when where
which while who whom why will with won would wouldn you your yours yourself yourselves d m
tell told say said remember recall mention mentioned ever anything something thing things
kind kinds type types sort sorts likely unlikely probably possibly recently currently usually
often exactly specifically particular considered consider also yet still really
""".split())
# The last lines are how questions are framed ("what kind of", "is X likely to", "recently")
# rather than what they are about; stored sentences rarely use these words for the answer.

# Questions ask in the base form ("when did she go", "what did he see") while stories are
# told in the past ("I went", "we saw"); porter stems only regular forms, so the common
# irregular verbs get their other forms added to the query. A general grammar table, not
# synonyms: base, past and past participle of each verb; verbs whose forms are also common
# nouns (bear/born, ring/rang, lie/lay, wind/wound, light/lit) are left out.
IRREGULAR_VERBS = """
arise arose arisen|awake awoke awoken|become became|begin began begun|bend bent|bleed bled
blow blew blown|break broke broken|breed bred|bring brought|build built|burn burnt
buy bought|catch caught|choose chose chosen|come came|creep crept|deal dealt|dig dug
draw drew drawn|dream dreamt|drink drank drunk|drive drove driven|eat ate eaten
fall fell fallen|feed fed|feel felt|fight fought|find found|flee fled|fly flew flown
forget forgot forgotten|forgive forgave forgiven|freeze froze frozen|get got gotten
give gave given|go went gone|grow grew grown|hang hung|hear heard|hide hid hidden|hold held
keep kept|kneel knelt|know knew known|lead led|leap leapt|learn learnt|leave left|lend lent
lose lost|make made|mean meant|meet met|pay paid|prove proven|ride rode ridden|run ran
seek sought|sell sold|send sent|sew sewn|shake shook shaken|shine shone|shoot shot
show shown|shrink shrank shrunk|sing sang sung|sit sat|sleep slept|slide slid
speak spoke spoken|spend spent|spin spun|stand stood|steal stole stolen|swear swore sworn
sweep swept|swim swam swum|swing swung|take took taken|teach taught|tear tore torn
think thought|throw threw thrown|understand understood|wake woke woken|wear wore worn
weep wept|win won|write wrote written|see saw seen
"""
_VERB_FORMS: dict[str, tuple[str, ...]] = {
    form: tuple(group.split()) for group in IRREGULAR_VERBS.replace("\n", " ").split("|")
    for form in group.split()}
PREFIX_CHARS = 5  # long words also match by their first 5 letters ("truncation stemming"):
PREFIX_MIN_WORD = 7  # allergies/allergic, medicine/medication, where porter's stems differ


def _cjk_bigrams(run: str) -> list[str]:
    return [run[i:i + 2] for i in range(len(run) - 1)]


def index_text(text: str) -> str:
    """The text as indexed: CJK runs become their bigrams plus the last character, so every
    character starts some token (a one-character query is then a prefix query)."""
    if not _CJK_RUN.search(text):
        return text
    return _CJK_RUN.sub(lambda m: " " + " ".join(_cjk_bigrams(m.group()) + [m.group()[-1]]) + " ",
                        text)


def clean_text(text: str) -> str:
    """Replace lone surrogates (possible in JSON from a model), which SQLite cannot store,
    with '?'."""
    return text.encode("utf-8", "replace").decode("utf-8")


def query_terms(query: str) -> list[str]:
    """Search terms for a natural-language query: lowercased words without stop words (all
    words if only stop words), CJK runs as bigrams ('*'-suffixed single characters)."""
    words, seen = [], set()
    for tok in _WORD.findall(clean_text(query).lower()):
        if _CJK_RUN.fullmatch(tok):
            grams = _cjk_bigrams(tok) if len(tok) > 1 else [tok + "*"]
        else:
            grams = [tok]
        for g in grams:
            if g not in seen:
                seen.add(g)
                words.append(g)
    content = [w for w in words if w not in STOP_WORDS]
    return (content or words)[:MAX_QUERY_TERMS]


def match_terms(query: str) -> list[str]:
    """The query's terms as FTS5 strings: each double-quoted (so operators and punctuation
    are just text); one-character CJK terms as prefix queries. English words also bring
    their irregular verb forms and, when long, their first letters as a prefix query."""
    parts: list[str] = []
    for term in query_terms(query):
        if term.endswith("*"):
            parts.append(_quote(term[:-1]) + "*")
            continue
        parts.append(_quote(term))
        parts += [_quote(f) for f in _VERB_FORMS.get(term, ()) if f != term]
        if len(term) >= PREFIX_MIN_WORD and term.isalpha() and not _CJK_RUN.search(term):
            parts.append(_quote(term[:PREFIX_CHARS]) + "*")
    return list(dict.fromkeys(parts))[:2 * MAX_QUERY_TERMS]


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def match_expression(query: str) -> str | None:
    """An FTS5 MATCH string for any of the query's terms; None when it has no searchable words."""
    return " OR ".join(match_terms(query)) or None


def word_set(text: str) -> set[str]:
    return set(_WORD.findall(index_text(text.lower())))


def normalise(text: str) -> str:
    return " ".join(text.lower().split())


def plain_text(role: str, content: list[dict] | str) -> str:
    """What conversation_search indexes: only the text blocks of user/assistant messages.
    Tool inputs and results are left out so earlier search results are not found again."""
    if isinstance(content, str):
        return content
    if role not in ("user", "assistant"):
        return ""
    return "\n".join(str(b.get("text", "")) for b in content
                     if isinstance(b, dict) and b.get("type") == "text")


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep them losslessly as \u escapes
        text = json.dumps(value, ensure_ascii=True)
    return text


# --------------------------------------------------------------------------- migrations


def _run(db: sqlite3.Connection, script: str) -> None:
    # Not executescript(): it commits first, which would split a migration from its ledger row.
    stmt = ""
    for line in script.splitlines(keepends=True):
        stmt += line
        if sqlite3.complete_statement(stmt):
            db.execute(stmt)
            stmt = ""
    if stmt.strip():
        raise ValueError(f"incomplete SQL statement in migration: {stmt.strip()[:60]}")


def _m001_initial(db: sqlite3.Connection) -> None:
    _run(db, """
    CREATE TABLE agents (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        model TEXT NOT NULL DEFAULT '',
        settings TEXT NOT NULL DEFAULT '{}',
        summary TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL,
        last_used_at TEXT
    );
    CREATE TABLE blocks (
        id INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        label TEXT NOT NULL,
        value TEXT NOT NULL,
        char_limit INTEGER NOT NULL,
        updated_at TEXT NOT NULL,
        UNIQUE (agent_id, label)
    );
    CREATE TABLE block_history (
        id INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        label TEXT NOT NULL,
        old_value TEXT,
        new_value TEXT NOT NULL,
        source TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX block_history_agent ON block_history(agent_id, label);
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        turn_id INTEGER NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        context_content TEXT,
        index_text TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL,
        in_context INTEGER NOT NULL DEFAULT 1
    );
    CREATE INDEX messages_context ON messages(agent_id, in_context);
    CREATE INDEX messages_turn ON messages(agent_id, turn_id);
    CREATE TABLE passages (
        id INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
        text TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '[]',
        norm TEXT NOT NULL,
        index_text TEXT NOT NULL DEFAULT '',
        created_at TEXT NOT NULL
    );
    CREATE INDEX passages_agent ON passages(agent_id, norm);
    """)


def _m002_fts(db: sqlite3.Connection) -> None:
    # External-content FTS5 tables kept in sync by triggers; empty texts (tool-only messages)
    # are not indexed at all so they do not skew BM25's average document length.
    for table in ("messages", "passages"):
        _run(db, f"""
        CREATE VIRTUAL TABLE {table}_fts USING fts5(
            index_text, content='{table}', content_rowid='id', tokenize='porter unicode61');
        CREATE TRIGGER {table}_fts_ai AFTER INSERT ON {table} WHEN new.index_text != '' BEGIN
            INSERT INTO {table}_fts(rowid, index_text) VALUES (new.id, new.index_text);
        END;
        CREATE TRIGGER {table}_fts_ad AFTER DELETE ON {table} WHEN old.index_text != '' BEGIN
            INSERT INTO {table}_fts({table}_fts, rowid, index_text)
                VALUES ('delete', old.id, old.index_text);
        END;
        CREATE TRIGGER {table}_fts_au AFTER UPDATE OF index_text ON {table} BEGIN
            INSERT INTO {table}_fts({table}_fts, rowid, index_text)
                SELECT 'delete', old.id, old.index_text WHERE old.index_text != '';
            INSERT INTO {table}_fts(rowid, index_text)
                SELECT new.id, new.index_text WHERE new.index_text != '';
        END;
        INSERT INTO {table}_fts(rowid, index_text)
            SELECT id, index_text FROM {table} WHERE index_text != '';
        """)


# Append-only: never edit or reorder an entry that has shipped; add a new one.
MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("001_initial", _m001_initial),
    ("002_fts_search", _m002_fts),
]


# --------------------------------------------------------------------------- the store


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
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")  # safe with WAL; fsync per checkpoint
            self._migrate()
        except StoreError:
            self._db.close()
            raise
        except sqlite3.Error as exc:
            self._db.close()
            raise _sqlite_error(self.path, exc) from None

    @classmethod
    def open_default(cls) -> Store:
        from memgpt_lite.engine import config

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

    def count_messages(self, agent_id: int) -> int:
        return self._q("SELECT count(*) FROM messages WHERE agent_id = ?", (agent_id,))[0][0]

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
        if table == "messages" and NEIGHBOUR_WEIGHT:
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
        """Messages: the same candidates as `_search`, ranked by their own BM25 plus
        NEIGHBOUR_WEIGHT times that of the adjacent messages (id ± 1) that are candidates
        too, i.e. match the query in the same agent's history. Only matching rows are
        returned, so totals and pages are unchanged."""
        cur = self._db.cursor()
        cur.row_factory = None  # plain tuples: up to RANK_CAP rows, sqlite3.Row is slower
        try:
            own = dict(cur.execute(
                _candidates_sql("messages", where, "f.rowid, -bm25(messages_fts)"),
                [expr, *params]).fetchall())
        except sqlite3.OperationalError as exc:
            raise _sqlite_error(self.path, exc) from exc
        combined = {i: sc + NEIGHBOUR_WEIGHT * (own.get(i - 1, 0.0) + own.get(i + 1, 0.0))
                    for i, sc in own.items()}
        top = heapq.nsmallest(page * per_page, combined, key=lambda i: (-combined[i], -i))
        ids = top[(page - 1) * per_page:]
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
        """Which terms select candidates: the rarest ones, while together they match at most
        RANK_CAP rows (always at least the rarest). Rows matching only very common words are
        left out when rarer words match, as Lucene's cutoff-frequency queries do; in a small
        store every term is used, i.e. a plain OR of all terms."""
        terms = match_terms(query)
        if len(terms) <= 1:
            return terms[0] if terms else None
        df = {t: self._q(f"SELECT count(*) FROM (SELECT rowid FROM {table}_fts WHERE "
                         f"{table}_fts MATCH ? LIMIT {RANK_CAP + 1})", (t,))[0][0]
              for t in terms}  # counting stops past the cap: only "small or not" matters
        chosen, total = [], 0
        for term in sorted(terms, key=lambda t: df[t]):
            if df[term] == 0:
                continue
            if chosen and total + df[term] > RANK_CAP:
                break
            chosen.append(term)
            total += df[term]
        return " OR ".join(chosen or terms)

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

    def list_passages(self, agent_id: int, limit: int = 50, offset: int = 0) -> list[SearchHit]:
        rows = self._q("SELECT id, text, tags, created_at FROM passages WHERE agent_id = ? "
                       "ORDER BY id LIMIT ? OFFSET ?", (agent_id, limit, offset))
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

    def export_agent(self, name: str) -> dict:
        agent = self._require_agent(name)
        rows = self._q("SELECT label, value, char_limit FROM blocks WHERE agent_id = ? "
                       "ORDER BY id", (agent.id,))
        messages = self._messages("agent_id = ?", (agent.id,))
        passages = self._q("SELECT text, tags, created_at FROM passages WHERE agent_id = ? "
                           "ORDER BY id", (agent.id,))
        return {
            "format": EXPORT_FORMAT, "version": EXPORT_VERSION, "exported_at": now_iso(),
            "agent": {"name": agent.name, "model": agent.model, "settings": agent.settings,
                      "summary": agent.summary, "created_at": agent.created_at,
                      "last_used_at": agent.last_used_at},
            "blocks": [{"label": r[0], "value": r[1], "limit": r[2]} for r in rows],
            "block_history": self.block_history(agent.id),
            "messages": [{"turn_id": m.turn_id, "role": m.role, "content": m.content,
                          "context_content": m.context_content, "created_at": m.created_at,
                          "in_context": m.in_context} for m in messages],
            "passages": [{"text": r[0], "tags": json.loads(r[1]), "created_at": r[2]}
                         for r in passages],
        }

    def import_agent(self, doc: dict, name: str | None = None) -> AgentRow:
        if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
            raise StoreError("The file is not a memgpt-lite agent export.")
        if doc.get("version") != EXPORT_VERSION:
            raise StoreError(f"The export has version {doc.get('version')!r}; this memgpt-lite "
                             f"reads version {EXPORT_VERSION}.")
        try:
            return self._import(doc, name)
        except _DAMAGED_EXPORT as exc:  # IntegrityError: a null or duplicate the schema refuses
            raise StoreError(f"The agent export is damaged ({exc!r}); "
                             "nothing was imported.") from None

    def _import(self, doc: dict, name: str | None) -> AgentRow:
        meta = doc["agent"]
        with self.transaction():
            agent = self.create_agent(name or meta["name"], dict(meta["settings"]), {})
            self._db.execute("UPDATE agents SET summary = ?, created_at = ?, last_used_at = ? "
                             "WHERE id = ?", (meta.get("summary", ""), meta["created_at"],
                                              meta.get("last_used_at"), agent.id))
            self._db.executemany(
                "INSERT INTO blocks (agent_id, label, value, char_limit, updated_at) "
                "VALUES (?, ?, ?, ?, ?)", [(agent.id, b["label"], b["value"], int(b["limit"]),
                                            now_iso()) for b in doc["blocks"]])
            self._db.executemany(
                "INSERT INTO block_history (agent_id, label, old_value, new_value, source, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                [(agent.id, h["label"], h["old_value"], h["new_value"], h["source"],
                  h["created_at"]) for h in doc.get("block_history", [])])
            self.add_messages(agent.id, [
                Message(m["role"], m["content"], int(m["turn_id"]), None, m["created_at"],
                        bool(m["in_context"]), m.get("context_content"))
                for m in doc["messages"]])
            for p in doc["passages"]:
                self.add_passage(agent.id, p["text"], list(p["tags"]), p["created_at"])
        return self.get_agent_by_id(agent.id)  # type: ignore[return-value]


def _candidates_sql(table: str, where: list[str], select: str) -> str:
    """The agent's rows matching the MATCH parameter, newest first, at most RANK_CAP of them
    (FTS yields rowids in order, so this stops early). CROSS JOIN keeps FTS the outer loop;
    otherwise the planner may walk all the agent's rows and re-run MATCH for each."""
    return (f"SELECT {select} FROM {table}_fts f CROSS JOIN {table} m ON m.id = f.rowid "
            f"WHERE {table}_fts MATCH ? AND {' AND '.join(where)} "
            f"ORDER BY f.rowid DESC LIMIT {RANK_CAP}")


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
