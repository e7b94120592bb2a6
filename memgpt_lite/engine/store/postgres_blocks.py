"""Core memory blocks in the Postgres store: each agent's blocks, their edit history, and the
blocks in "user" scope that several agents share.

The Postgres twin of sqlite_blocks.py (its docstring tells the story: a `blocks` row is the
agent's own block, or a pointer to a `shared_blocks` row; `set_block(expected=...)` refuses a
write when the block changed since the caller read it; watches hear other agents' edits).
Where SQLite serialises writers with one write lock on the file, Postgres locks rows: a write
locks the agent's row (`_bump`) and, for a shared block, the shared row (`FOR UPDATE`) before
it reads the value it compares, so two agents editing one shared block take turns and the
second sees the first's edit. Creating and dropping shared rows take one transaction-level
advisory lock, so a block is never dropped while another agent joins it.

A mixin of `postgres.PostgresStore`.
"""

from __future__ import annotations

from typing import Any

from memgpt_lite.engine.records import Block, now_iso
from memgpt_lite.engine.store.base import AgentWatch
from memgpt_lite.engine.store.postgres_base import pg_text
from memgpt_lite.engine.store.sqlite_blocks import AGENT, USER, BlocksMixin, checked_write

_SELECT = ("SELECT b.label, coalesce(s.value, b.value), coalesce(s.char_limit, b.char_limit), "
           "s.id FROM blocks b LEFT JOIN shared_blocks s ON s.id = b.shared_id ")
_ORDER = " ORDER BY CASE b.label WHEN 'persona' THEN 0 WHEN 'human' THEN 1 ELSE 2 END, b.id"
_SHARING_LOCK = 0x6D656D677074_5348  # advisory lock key: shared rows created or dropped


def _text(v: Any) -> Any:
    return pg_text(v) if isinstance(v, str) else v


class PgBlocksMixin:
    """Blocks: read, written with history, shared, watched."""

    _q: Any
    _x: Any
    _many: Any
    _watches: dict[int, AgentWatch]

    # The watch is bookkeeping in this process, the same for both backends.
    watch = BlocksMixin.watch
    unwatch = BlocksMixin.unwatch
    _observed = BlocksMixin._observed
    _saw_own_write = BlocksMixin._saw_own_write

    # ---------------------------------------------------------------- reading

    def get_blocks(self, agent_id: int) -> list[Block]:
        rows = self._q(_SELECT + "WHERE b.agent_id = %s" + _ORDER, (agent_id,))
        return self._observed(agent_id, [_block(r) for r in rows])

    def get_block(self, agent_id: int, label: str) -> Block | None:
        found = self._block_now(agent_id, label)
        return self._observed(agent_id, [found])[0] if found else None

    def _block_now(self, agent_id: int, label: str) -> Block | None:
        """The block as stored, without telling a watch (the undo's own comparison)."""
        rows = self._q(_SELECT + "WHERE b.agent_id = %s AND b.label = %s",
                       (agent_id, pg_text(label)))
        return _block(rows[0]) if rows else None

    def block_history(self, agent_id: int, label: str | None = None) -> list[dict]:
        sql = ("SELECT label, old_value, new_value, source, created_at, turn_id "
               "FROM block_history WHERE agent_id = %s")
        params: list[Any] = [agent_id]
        if label is not None:
            sql += " AND label = %s"
            params.append(pg_text(label))
        names = ("label", "old_value", "new_value", "source", "created_at", "turn_id")
        return [dict(zip(names, r)) for r in self._q(sql + " ORDER BY id", params)]

    def shared_block_agents(self, label: str) -> list[str]:
        """The names of the agents sharing the user-scope block `label`, by name."""
        return [r[0] for r in self._q(
            "SELECT a.name FROM blocks b JOIN shared_blocks s ON s.id = b.shared_id "
            'JOIN agents a ON a.id = b.agent_id WHERE s.label = %s ORDER BY a.name COLLATE "C"',
            (pg_text(label),))]

    # ---------------------------------------------------------------- writing

    def set_block(self, agent_id: int, label: str, value: str, limit: int | None = None,
                  source: str = "tool", *, expected: str | None = None) -> Block:
        """As the SQLite store's (see sqlite_blocks.py): ValueError over the limit,
        BlockChanged when `expected` is given and the block no longer holds it."""
        label, value = pg_text(label), pg_text(value)
        with self.transaction():  # type: ignore[attr-defined]
            rev = self._bump(agent_id)  # type: ignore[attr-defined]
            self._lock_shared(agent_id, label)
            old = self.get_block(agent_id, label)
            expected = None if expected is None else pg_text(expected)
            limit = checked_write(label, old, value, limit, expected)
            at = now_iso()
            self._journal(agent_id, "block", label, None if old is None else  # type: ignore[attr-defined]
                          {"value": old.value, "limit": old.limit, "after": value})
            if old is None:
                self._x("INSERT INTO blocks (agent_id, id, label, value, char_limit, "
                        "updated_at) VALUES (%s, %s, %s, %s, %s, %s)",
                        (agent_id, self._next_id("blocks", agent_id), label, value, limit,  # type: ignore[attr-defined]
                         at))
                self._saw_own_write(agent_id, label, value)
            else:
                self._write_block(agent_id, label, value, limit)
            self._history(agent_id, label, old.value if old else None, value, source, at, rev,
                          self.open_turn(agent_id))  # type: ignore[attr-defined]
        return Block(label, value, limit, old.scope if old else AGENT)

    def _history(self, agent_id: int, label: str, old: str | None, new: str, source: str,
                 at: str, rev: int, turn_id: int | None) -> None:
        self._x("INSERT INTO block_history (agent_id, id, label, old_value, new_value, source, "
                "created_at, rev, turn_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (agent_id, self._next_id("block_history", agent_id), label, old, new,  # type: ignore[attr-defined]
                 pg_text(source), at, rev, turn_id))

    def _lock_shared(self, agent_id: int, label: str) -> None:
        """Lock the shared row the agent's block points at (if it does) until the
        transaction ends: writers of a shared block take turns."""
        self._x("SELECT 1 FROM shared_blocks WHERE id = (SELECT shared_id FROM blocks WHERE "
                "agent_id = %s AND label = %s) FOR UPDATE", (agent_id, pg_text(label)))

    def _write_block(self, agent_id: int, label: str, value: str, limit: int) -> None:
        """Store a block's new value where it lives: the shared row or the agent's own."""
        shared = self._shared_id(agent_id, label)
        if shared is None:
            self._x("UPDATE blocks SET value = %s, char_limit = %s, updated_at = %s "
                    "WHERE agent_id = %s AND label = %s",
                    (value, limit, now_iso(), agent_id, label))
        else:
            self._x("UPDATE shared_blocks SET value = %s, char_limit = %s, updated_at = %s, "
                    "version = version + 1 WHERE id = %s", (value, limit, now_iso(), shared))
        self._saw_own_write(agent_id, label, value)

    def _shared_id(self, agent_id: int, label: str) -> int | None:
        rows = self._q("SELECT shared_id FROM blocks WHERE agent_id = %s AND label = %s",
                       (agent_id, pg_text(label)))
        return rows[0][0] if rows else None

    def restore_blocks(self, agent_id: int, blocks: list[tuple[str, str, int]],
                       history: list[tuple[str, str | None, str, str, str, int | None]],
                       shared: tuple[str, ...] | list[str] = ()) -> list[str]:
        """As the SQLite store's: an import, not an edit; labels in `shared` join the
        user-scope block of that label; returns those that joined another value."""
        joined = []
        with self.transaction():  # type: ignore[attr-defined]
            rev = self._bump(agent_id)  # type: ignore[attr-defined]
            first = self._next_id("block_history", agent_id)  # type: ignore[attr-defined]
            self._many("INSERT INTO block_history (agent_id, id, label, old_value, new_value, "
                       "source, created_at, turn_id, rev) VALUES (%s, %s, %s, %s, %s, %s, %s, "
                       "%s, %s)", [(agent_id, first + i, *map(_text, h), rev)
                                   for i, h in enumerate(history)])
            for label, value, limit in blocks:
                self._x("INSERT INTO blocks (agent_id, id, label, value, char_limit, "
                        "updated_at) VALUES (%s, %s, %s, %s, %s, %s)",
                        (agent_id, self._next_id("blocks", agent_id), pg_text(label),  # type: ignore[attr-defined]
                         pg_text(value), limit, now_iso()))
                if label in shared and self.share_block(agent_id, label, source="import"):
                    joined.append(label)
        return joined

    # ---------------------------------------------------------------- scopes

    def share_block(self, agent_id: int, label: str, *, source: str = "share",
                    default: tuple[str, int] = ("", 5000)) -> bool:
        """As the SQLite store's: the agent's block `label` joins (or becomes) the
        user-scope block of that label; True when its value changed by joining."""
        label = pg_text(label)
        with self.transaction():  # type: ignore[attr-defined]
            rev = self._bump(agent_id)  # type: ignore[attr-defined]
            self._x("SELECT pg_advisory_xact_lock(%s)", (_SHARING_LOCK,))
            own = self._q("SELECT value, char_limit, shared_id FROM blocks "
                          "WHERE agent_id = %s AND label = %s", (agent_id, label))
            if own and own[0][2] is not None:
                return False
            value, limit = (own[0][0], own[0][1]) if own else (pg_text(default[0]), default[1])
            found = self._q("SELECT id, value FROM shared_blocks WHERE label = %s", (label,))
            shared_id, shared_value = found[0] if found else (self._q(
                "INSERT INTO shared_blocks (label, value, char_limit, updated_at) "
                "VALUES (%s, %s, %s, %s) RETURNING id", (label, value, limit, now_iso()))[0][0],
                value)
            if own:  # the own value is not kept on the row: the history has it
                self._x("UPDATE blocks SET shared_id = %s, value = '' WHERE agent_id = %s "
                        "AND label = %s", (shared_id, agent_id, label))
            else:
                self._x("INSERT INTO blocks (agent_id, id, label, value, char_limit, "
                        "updated_at, shared_id) VALUES (%s, %s, %s, '', %s, %s, %s)",
                        (agent_id, self._next_id("blocks", agent_id), label, limit,  # type: ignore[attr-defined]
                         now_iso(), shared_id))
            changed = bool(own) and value != shared_value
            if changed or not own:
                self._history(agent_id, label, value if own else None, shared_value, source,
                              now_iso(), rev, None)
        return changed

    def unshare_block(self, agent_id: int, label: str) -> bool:
        """As the SQLite store's: the agent gets its own copy; False when not shared."""
        with self.transaction():  # type: ignore[attr-defined]
            self._bump(agent_id)  # type: ignore[attr-defined]
            self._lock_shared(agent_id, label)
            block = self._block_now(agent_id, label)
            if block is None or block.scope != USER:
                return False
            self._x("UPDATE blocks SET shared_id = NULL, value = %s, char_limit = %s, "
                    "updated_at = %s WHERE agent_id = %s AND label = %s",
                    (block.value, block.limit, now_iso(), agent_id, pg_text(label)))
            self.drop_unused_shared_blocks()
        return True

    def drop_unused_shared_blocks(self) -> list[str]:
        """Delete the user-scope blocks no agent uses any more; returns their labels."""
        with self.transaction():  # type: ignore[attr-defined]
            self._x("SELECT pg_advisory_xact_lock(%s)", (_SHARING_LOCK,))
            return [r[0] for r in self._q(
                "DELETE FROM shared_blocks s WHERE NOT EXISTS (SELECT 1 FROM blocks b WHERE "
                "b.shared_id = s.id) RETURNING label")]

    def apply_outside_edit(self, agent_id: int, label: str, value: str) -> None:
        """Set a block to a value another agent wrote (a replay applying a recorded edit):
        no history and no journal, since this agent did not make it."""
        with self.transaction():  # type: ignore[attr-defined]
            self._bump(agent_id)  # type: ignore[attr-defined]
            block = self._block_now(agent_id, label)
            if block is not None:
                value = pg_text(value)
                self._write_block(agent_id, pg_text(label), value, max(block.limit, len(value)))


def _block(row: tuple) -> Block:
    return Block(row[0], row[1], row[2], AGENT if row[3] is None else USER)
