"""What every domain of the store shares: the database seam, the keyword index, revisions and
tombstones, the journal of the open turn, and what a recording watches.

Each domain module (agents.py, blocks.py, recall.py, archive.py, turns.py, vectors.py,
forget.py, history.py) is a mixin of `StoreCore` and is written once, against `self.db`
(`store/database.py`) and `self.index` (`KeywordIndex` below); `sql.SQLStore` puts them
together and a backend (`sqlite/`, `postgres/`) gives it its database, index and the few
things that are its own (locks, migrations, wiping freed text, integrity checks).

Every write to an agent's rows bumps the agent's revision and stamps the rows it changed
(deleted rows leave a tombstone), so a recording can carry only what changed since a base
snapshot (`snapshot.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Protocol

from memgpt_lite.engine.store.base import AgentWatch
from memgpt_lite.engine.store.database import Database, dumps, marks


class KeywordIndex(Protocol):
    """A backend's full-text index of messages and passages, per agent, ranked by BM25 (both
    backends find and rank the same rows with the same scores: see store/terms.py).

    Writers tell it what changes: `insert_columns` gives the values a new row carries for the
    index (Postgres keeps them in the row; SQLite none), `inserted` follows new rows,
    `remove` comes before a row is deleted or its text changes, `add` after a text changed.
    `kind` is "messages" or "passages"; rows are (id, index_text)."""

    def create_agent(self, agent_id: int) -> None: ...
    def drop_agent(self, agent_id: int) -> None: ...
    def insert_columns(self, agent_id: int, texts: list[str],
                       ) -> tuple[tuple[str, ...], tuple[str, ...], list[tuple[Any, ...]]]:
        """(column names, their SQL value expressions, each text's values)."""
        ...

    def inserted(self, kind: str, agent_id: int, rows: list[tuple[int, str]],
                 values: list[tuple[Any, ...]]) -> None: ...
    def remove(self, kind: str, agent_id: int, rows: list[tuple[int, str]]) -> None: ...
    def add(self, kind: str, agent_id: int, rows: list[tuple[int, str]]) -> None: ...
    def scores(self, kind: str, agent_id: int, query: str, where: list[str],
               params: list[Any]) -> list[tuple[int, float, int]]:
        """(id, BM25 score, seq; 0 for passages) of the newest RANK_CAP rows of the agent
        matching any chosen term of `query` and every condition in `where` (on `m`, the
        table's alias)."""
        ...

    def optimize(self, agent_id: int) -> None:
        """Leave no index page holding a term of deleted text (after a forget)."""
        ...

    def problems(self, agent_id: int, name: str) -> list[str]: ...
    def rebuild(self, agent_id: int) -> None: ...


class StoreCore:
    """The shared state and helpers of every domain mixin (see the module docstring)."""

    db: Database
    index: KeywordIndex

    def __init__(self, db: Database, index: KeywordIndex):
        self.db, self.index = db, index
        self._open_turns: dict[int, int] = {}  # agent id → the turn now journalled
        self._watches: dict[int, AgentWatch] = {}  # see BlocksMixin.watch
        # What this process works in, per agent: the conversation (see conversations.py)
        # and the project root whose blocks it sees (see blocks.py).
        self._conversations: dict[int, int] = {}
        self._projects: dict[int, tuple[str, str, int]] = {}  # root, default value, limit
        # Decoded queue content by (agent id, message id), checked against the row's `rev`
        # (see RecallMixin.context_messages).
        self._decoded: dict[tuple[int, int], tuple[int, list, list | None]] = {}
        db.on_rollback(self._decoded.clear)  # it may hold content of an undone transaction

    @property
    def location(self) -> str:
        return self.db.location

    def transaction(self) -> Any:
        return self.db.transaction()

    def read_snapshot(self) -> Any:
        return self.db.read_snapshot()

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _dumps(value: Any) -> str:
        return dumps(value)

    # ---------------------------------------------------------------- revisions

    def _bump(self, agent_id: int) -> int:
        """The agent's next revision, for the rows a write changes (inside its transaction).
        On Postgres the UPDATE also locks the agent's row until the transaction ends, so
        writers of one agent take turns and ids counted per agent cannot collide."""
        self.db.execute("UPDATE agents SET rev = rev + 1 WHERE id = ?", (agent_id,))
        rows = self.db.query("SELECT rev FROM agents WHERE id = ?", (agent_id,))
        return rows[0][0] if rows else 0

    def revision(self, agent_id: int) -> int:
        rows = self.db.query("SELECT rev FROM agents WHERE id = ?", (agent_id,))
        return rows[0][0] if rows else 0

    def _tombstones(self, agent_id: int, kind: str, ids: list[int]) -> None:
        if ids:
            rev = self._bump(agent_id)
            self.db.executemany("INSERT INTO tombstones (agent_id, kind, row_id, rev) "
                                "VALUES (?, ?, ?, ?)", [(agent_id, kind, i, rev) for i in ids])

    def _keyed(self, ids: list[Any], alias: str = "", column: str = "id") -> str:
        """`agent_id = ? AND id IN (...)`: the agent's rows of `ids`, looked up by key. On
        SQLite an index on agent_id must not be used here: it would scan the agent's rows."""
        return (f"{self.db.unindexed(alias + 'agent_id')} = ? AND {alias}{column} IN "
                f"{self._in(ids)}")

    @staticmethod
    def _in(ids: list[Any]) -> str:
        """The placeholders of `IN (...)` for `ids`; `(NULL)`, which matches nothing, for
        none (Postgres refuses an empty list)."""
        return f"({marks(len(ids))})" if ids else "(NULL)"

    # ---------------------------------------------------------------- the open turn

    def open_turn(self, agent_id: int) -> int | None:
        return self._open_turns.get(agent_id)

    def _journal(self, agent_id: int, kind: str, target: object, before: Any) -> None:
        """Note how to undo a write of the agent's open turn (inside the write's own
        transaction); nothing when no turn is open (commands between turns). Undone by the
        `_undo_<kind>` method of the domain that made the write (see turns.py)."""
        turn = self._open_turns.get(agent_id)
        if turn is not None:
            self.db.execute("INSERT INTO turn_effects (agent_id, turn_id, kind, target, before) "
                            "VALUES (?, ?, ?, ?, ?)",
                            (agent_id, turn, kind, str(target), json.dumps(before)))


def chunked(ids: list[int], size: int = 500) -> Iterator[list[int]]:
    """`ids` in lists short enough for one statement's parameters."""
    for start in range(0, len(ids), size):
        yield ids[start:start + size]
