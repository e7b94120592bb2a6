"""Core memory blocks in the store: each agent's blocks, their edit history, and the blocks in
"user" scope that several agents share.

An agent's `blocks` row is its own block (scope "agent"), or, when `shared_id` is set, a
pointer to one `shared_blocks` row (scope "user"): one value for the whole data dir, which
every agent pointing at it sees in its next request and edits. Writers never lose each
other's edits: every read-modify-write of a block runs in one transaction that first locks
the agent (`_bump`) and the shared row (`_lock_shared`; SQLite's writers hold the whole
file's write lock instead), `set_block(expected=...)` refuses a write when the block
changed since the caller read it, and undoing a turn restores a block only if it still
holds what the turn wrote. Creating and dropping shared rows take one more lock, so a block
is never dropped while another agent joins it.

While a recording watches an agent (`watch`), every read of a block whose value was
written elsewhere (another agent sharing it, or another process serving this agent, such as
`memgpt-lite mcp`) is reported to it, so that replay can apply the same edit at the same
point (see recording.py).

A mixin of `sql.SQLStore`, over the database seam (see core.py).
"""

from __future__ import annotations

from typing import Any

from memgpt_lite.engine.records import Block, now_iso
from memgpt_lite.engine.store.base import AgentWatch, BlockChanged
from memgpt_lite.engine.store.core import StoreCore

AGENT, USER = "agent", "user"  # block scopes
_SELECT = ("SELECT b.label, coalesce(s.value, b.value), coalesce(s.char_limit, b.char_limit), "
           "s.id FROM blocks b LEFT JOIN shared_blocks s ON s.id = b.shared_id ")
_ORDER = " ORDER BY CASE b.label WHEN 'persona' THEN 0 WHEN 'human' THEN 1 ELSE 2 END, b.id"
_HISTORY = ("INSERT INTO block_history (agent_id, id, label, old_value, new_value, source, "
            "created_at, rev, turn_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
SHARING_LOCK = 0x6D656D677074_5348  # shared rows created or dropped (Postgres advisory lock)


def _block(row: tuple) -> Block:
    return Block(row[0], row[1], row[2], AGENT if row[3] is None else USER)


class BlocksMixin(StoreCore):
    """Blocks: read, written with history, shared, watched."""

    # ---------------------------------------------------------------- reading

    def get_blocks(self, agent_id: int) -> list[Block]:
        rows = self.db.query(_SELECT + "WHERE b.agent_id = ?" + _ORDER, (agent_id,))
        return self._observed(agent_id, [_block(r) for r in rows])

    def get_block(self, agent_id: int, label: str) -> Block | None:
        found = self._block_now(agent_id, label)
        return self._observed(agent_id, [found])[0] if found else None

    def _block_now(self, agent_id: int, label: str) -> Block | None:
        """The block as stored, without telling a watch (the undo's own comparison)."""
        rows = self.db.query(_SELECT + "WHERE b.agent_id = ? AND b.label = ?",
                             (agent_id, self.db.text(label)))
        return _block(rows[0]) if rows else None

    def block_history(self, agent_id: int, label: str | None = None) -> list[dict]:
        sql = ("SELECT label, old_value, new_value, source, created_at, turn_id "
               "FROM block_history WHERE agent_id = ?")
        params: list[Any] = [agent_id]
        if label is not None:
            sql += " AND label = ?"
            params.append(self.db.text(label))
        names = ("label", "old_value", "new_value", "source", "created_at", "turn_id")
        return [dict(zip(names, r)) for r in self.db.query(sql + " ORDER BY id", params)]

    def shared_block_agents(self, label: str) -> list[str]:
        """The names of the agents sharing the user-scope block `label`, by name."""
        return sorted(r[0] for r in self.db.query(
            "SELECT a.name FROM blocks b JOIN shared_blocks s ON s.id = b.shared_id "
            "JOIN agents a ON a.id = b.agent_id WHERE s.label = ?", (self.db.text(label),)))

    # ---------------------------------------------------------------- writing

    def set_block(self, agent_id: int, label: str, value: str, limit: int | None = None,
                  source: str = "tool", *, expected: str | None = None) -> Block:
        """Create or change a block and record the change (a user-scope block changes for
        every agent sharing it). Raises ValueError when the value is over the limit (callers
        check first and explain) and BlockChanged when `expected` is given and the block no
        longer holds it."""
        label, value = self.db.text(label), self.db.text(value)
        with self.transaction():
            rev = self._bump(agent_id)
            self._lock_shared(agent_id, label)
            old = self.get_block(agent_id, label)
            limit = checked_write(label, old, value, limit,
                                  None if expected is None else self.db.text(expected))
            self._journal(agent_id, "block", label, None if old is None else
                          {"value": old.value, "limit": old.limit, "after": value})
            if old is None:
                self.db.execute("INSERT INTO blocks (agent_id, id, label, value, char_limit, "
                                "updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                                (agent_id, self.db.next_id("blocks", agent_id), label, value,
                                 limit, now_iso()))
                self._saw_own_write(agent_id, label, value)
            else:
                self._write_block(agent_id, label, value, limit)
            self._history(agent_id, label, old.value if old else None, value, source, rev,
                          self.open_turn(agent_id))
        return Block(label, value, limit, old.scope if old else AGENT)

    def _history(self, agent_id: int, label: str, old: str | None, new: str, source: str,
                 rev: int, turn_id: int | None) -> None:
        self.db.execute(_HISTORY, (agent_id, self.db.next_id("block_history", agent_id), label,
                                   old, new, self.db.text(source), now_iso(), rev, turn_id))

    def _lock_shared(self, agent_id: int, label: str) -> None:
        """Lock the shared row the agent's block points at (if it does) until the
        transaction ends: writers of a shared block take turns."""
        self.db.query("SELECT 1 FROM shared_blocks WHERE id = (SELECT shared_id FROM blocks "
                      f"WHERE agent_id = ? AND label = ?){self.db.for_update()}",
                      (agent_id, label))

    def _write_block(self, agent_id: int, label: str, value: str, limit: int) -> None:
        """Store a block's new value where it lives: the shared row or the agent's own."""
        shared = self._shared_id(agent_id, label)
        if shared is None:
            self.db.execute("UPDATE blocks SET value = ?, char_limit = ?, updated_at = ? "
                            "WHERE agent_id = ? AND label = ?",
                            (value, limit, now_iso(), agent_id, label))
        else:
            self.db.execute("UPDATE shared_blocks SET value = ?, char_limit = ?, "
                            "updated_at = ?, version = version + 1 WHERE id = ?",
                            (value, limit, now_iso(), shared))
        self._saw_own_write(agent_id, label, value)

    def _saw_own_write(self, agent_id: int, label: str, value: str) -> None:
        """A write through this store is the watched agent's own: not news from elsewhere."""
        watch = self._watches.get(agent_id)
        if watch is not None:
            watch.seen[label] = value

    def _shared_id(self, agent_id: int, label: str) -> int | None:
        rows = self.db.query("SELECT shared_id FROM blocks WHERE agent_id = ? AND label = ?",
                             (agent_id, label))
        return rows[0][0] if rows else None

    def _undo_block(self, agent_id: int, label: str, before: dict | None) -> None:
        """Undo a turn's write of a block (see turns.py)."""
        if before is None:  # the turn created the block
            self.db.execute("DELETE FROM blocks WHERE agent_id = ? AND label = ?",
                            (agent_id, label))
            return
        self._lock_shared(agent_id, label)
        block = self._block_now(agent_id, label)
        if block is None or ("after" in before and block.value != before["after"]):
            return  # another agent sharing the block changed it since: its edit stays
        self._write_block(agent_id, label, before["value"], before["limit"])

    def restore_blocks(self, agent_id: int, blocks: list[tuple[str, str, int]],
                       history: list[tuple[str, str | None, str, str, str, int | None]],
                       shared: tuple[str, ...] | list[str] = ()) -> list[str]:
        """Blocks (label, value, limit) and their history rows (label, old, new, source,
        created_at, turn id) exactly as given, without new history: an import, not an edit.
        Labels in `shared` join this data dir's user-scope block of that label (created from
        the given value when there is none); returns those that joined a block holding
        another value (the given value is then kept in the block's history)."""
        text = self.db.text
        joined = []
        with self.transaction():
            rev = self._bump(agent_id)
            for label, old, new, source, created_at, turn_id in history:
                self.db.execute(
                    "INSERT INTO block_history (agent_id, id, label, old_value, new_value, "
                    "source, created_at, turn_id, rev) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (agent_id, self.db.next_id("block_history", agent_id), text(label),
                     None if old is None else text(old), text(new), text(source),
                     text(created_at), turn_id, rev))
            for label, value, limit in blocks:
                self.db.execute("INSERT INTO blocks (agent_id, id, label, value, char_limit, "
                                "updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                                (agent_id, self.db.next_id("blocks", agent_id), text(label),
                                 text(value), limit, now_iso()))
                if label in shared and self.share_block(agent_id, text(label), source="import"):
                    joined.append(label)
        return joined

    # ---------------------------------------------------------------- scopes

    def share_block(self, agent_id: int, label: str, *, source: str = "share",
                    default: tuple[str, int] = ("", 5000)) -> bool:
        """Put the agent's block `label` in user scope: it joins the data dir's shared block
        of that label, or becomes it when there is none yet (from its own value, else from
        `default`). Returns True when the agent's value changed by joining (its own value
        is then kept in its block history)."""
        label = self.db.text(label)
        with self.transaction():
            rev = self._bump(agent_id)
            self.db.lock(SHARING_LOCK)
            own = self.db.query("SELECT value, char_limit, shared_id FROM blocks "
                                "WHERE agent_id = ? AND label = ?", (agent_id, label))
            if own and own[0][2] is not None:
                return False
            value, limit = own[0][:2] if own else (self.db.text(default[0]), default[1])
            found = self.db.query("SELECT id, value FROM shared_blocks WHERE label = ?",
                                  (label,))
            shared_id, shared_value = found[0] if found else (self.db.insert(
                "INSERT INTO shared_blocks (label, value, char_limit, updated_at) "
                "VALUES (?, ?, ?, ?)", (label, value, limit, now_iso())), value)
            if own:  # the own value is not kept on the row: the history has it
                self.db.execute("UPDATE blocks SET shared_id = ?, value = '' WHERE agent_id = ? "
                                "AND label = ?", (shared_id, agent_id, label))
            else:
                self.db.execute("INSERT INTO blocks (agent_id, id, label, value, char_limit, "
                                "updated_at, shared_id) VALUES (?, ?, ?, '', ?, ?, ?)",
                                (agent_id, self.db.next_id("blocks", agent_id), label, limit,
                                 now_iso(), shared_id))
            changed = bool(own) and value != shared_value
            if changed or not own:
                self._history(agent_id, label, value if own else None, shared_value, source,
                              rev, None)
        return changed

    def unshare_block(self, agent_id: int, label: str) -> bool:
        """Give the agent its own copy of the user-scope block `label` (the others keep the
        shared one; it is deleted when nobody uses it any more). False when it was not
        shared."""
        label = self.db.text(label)
        with self.transaction():
            self._bump(agent_id)
            self._lock_shared(agent_id, label)
            block = self._block_now(agent_id, label)
            if block is None or block.scope != USER:
                return False
            self.db.execute("UPDATE blocks SET shared_id = NULL, value = ?, char_limit = ?, "
                            "updated_at = ? WHERE agent_id = ? AND label = ?",
                            (block.value, block.limit, now_iso(), agent_id, label))
            self.drop_unused_shared_blocks()
        return True

    def drop_unused_shared_blocks(self) -> list[str]:
        """Delete the user-scope blocks no agent uses any more (after a delete or unshare);
        returns their labels."""
        with self.transaction():
            self.db.lock(SHARING_LOCK)
            rows = self.db.query("SELECT id, label FROM shared_blocks s WHERE NOT EXISTS "
                                 "(SELECT 1 FROM blocks b WHERE b.shared_id = s.id)")
            self.db.executemany("DELETE FROM shared_blocks WHERE id = ?", [(r[0],) for r in rows])
        return [r[1] for r in rows]

    def apply_outside_edit(self, agent_id: int, label: str, value: str) -> None:
        """Set a block to a value another agent wrote (a replay applying a recorded edit):
        no history and no journal, since this agent did not make it."""
        label, value = self.db.text(label), self.db.text(value)
        with self.transaction():
            block = self._block_now(agent_id, label)
            if block is not None:
                self._write_block(agent_id, label, value, max(block.limit, len(value)))

    # ---------------------------------------------------------------- watching

    def watch(self, agent_id: int, watch: AgentWatch) -> None:
        """Report reads of the agent's shared blocks that show another agent's edit, and the
        ids of its new passages, to `watch` (one watch per agent; a new one replaces it)."""
        self._watches[agent_id] = watch

    def unwatch(self, agent_id: int, watch: AgentWatch) -> None:
        if self._watches.get(agent_id) is watch:
            del self._watches[agent_id]

    def _observed(self, agent_id: int, blocks: list[Block]) -> list[Block]:
        """Tell the watch of every block read with a value written elsewhere: by another
        agent sharing it, or by another process serving this agent (an MCP client)."""
        watch = self._watches.get(agent_id)
        for block in blocks if watch is not None else ():
            if watch.seen.get(block.label) != block.value:
                watch.seen[block.label] = block.value
                watch.changed(block.label, block.value)
        return blocks


def checked_write(label: str, old: Block | None, value: str, limit: int | None,
                  expected: str | None) -> int:
    """The limit a block write keeps (the given one, else the block's, else 5000), after
    refusing it: BlockChanged when `expected` is given and the block no longer holds it,
    ValueError when the value is over the limit."""
    if expected is not None and old is not None and old.value != expected:
        raise BlockChanged(f"Block {label!r} was changed by another agent while you "
                           "edited it (it is shared); your text was not saved.")
    limit = limit if limit is not None else (old.limit if old else 5000)
    if len(value) > limit:
        raise ValueError(f"block {label!r} would be {len(value)} chars, over its limit of "
                         f"{limit}")
    return limit
