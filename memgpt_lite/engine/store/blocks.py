"""Core memory blocks in the store: each agent's blocks, their edit history, and the blocks in
"user" scope that several agents share (the "project" scope is project_blocks.py's).

An agent's `blocks` row is its own block (scope "agent"), or, when `shared_id` is set, a
pointer to one `shared_blocks` row (scope "user"): one value for the whole data dir, which
every agent pointing at it sees in its next request and edits. After its own blocks an agent
sees the blocks of the project it works in. Every write is kept in `block_history`, with
where it went (`scope`, `project`): `block_versions` lists a block's versions from it, and
joining a shared block never loses either value (`share_block`'s `keep`).

Writers never lose each other's edits: every read-modify-write of a block runs in one
transaction that first locks the agent (`_bump`) and the shared row (`_lock_shared`;
SQLite's writers hold the whole file's write lock instead), `set_block(expected=...)`
refuses a write when the block changed since the caller read it, and undoing a turn
restores a block only if it still holds what the turn wrote. Creating and dropping shared rows take one more lock, so a block
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
from memgpt_lite.engine.store.project_blocks import PROJECT, ProjectBlocksMixin

AGENT, USER = "agent", "user"  # block scopes (and PROJECT)
KEEPS = ("shared", "mine", "both")  # which value a shared block keeps when an agent joins
_SELECT = ("SELECT b.label, coalesce(s.value, b.value), coalesce(s.char_limit, b.char_limit), "
           "s.id FROM blocks b LEFT JOIN shared_blocks s ON s.id = b.shared_id ")
_ORDER = " ORDER BY CASE b.label WHEN 'persona' THEN 0 WHEN 'human' THEN 1 ELSE 2 END, b.id"
_HISTORY = ("INSERT INTO block_history (agent_id, id, label, old_value, new_value, source, "
            "created_at, rev, turn_id, scope, project) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
_VERSION = ("SELECT h.created_at, a.name, h.source, h.turn_id, h.new_value, h.old_value, "
            "h.scope, h.project FROM block_history h JOIN agents a ON a.id = h.agent_id ")
SHARING_LOCK = 0x6D656D677074_5348  # shared rows created or dropped (Postgres advisory lock)


def _block(row: tuple) -> Block:
    return Block(row[0], row[1], row[2], AGENT if row[3] is None else USER)


class BlocksMixin(ProjectBlocksMixin):
    """Blocks: read, written with history, shared, watched."""

    # ---------------------------------------------------------------- reading

    def get_blocks(self, agent_id: int) -> list[Block]:
        rows = self.db.query(_SELECT + "WHERE b.agent_id = ?" + _ORDER, (agent_id,))
        own = [_block(r) for r in rows]
        return self._observed(agent_id, own + self._project_view(agent_id,
                                                                 {b.label for b in own}))

    def get_block(self, agent_id: int, label: str) -> Block | None:
        found = self._block_now(agent_id, label)
        return self._observed(agent_id, [found])[0] if found else None

    def _block_now(self, agent_id: int, label: str) -> Block | None:
        """The block as stored, without telling a watch (the undo's own comparison)."""
        rows = self.db.query(_SELECT + "WHERE b.agent_id = ? AND b.label = ?",
                             (agent_id, self.db.text(label)))
        return _block(rows[0]) if rows else self._project_block(agent_id, self.db.text(label))

    def shared_block(self, label: str) -> Block | None:
        """The data dir's user-scope block `label`, if there is one."""
        rows = self.db.query("SELECT label, value, char_limit FROM shared_blocks WHERE label = ?",
                             (self.db.text(label),))
        return Block(rows[0][0], rows[0][1], rows[0][2], USER) if rows else None

    def block_history(self, agent_id: int, label: str | None = None) -> list[dict]:
        """The agent's own history rows (what exports carry), oldest first."""
        sql = ("SELECT label, old_value, new_value, source, created_at, turn_id, scope, project "
               "FROM block_history WHERE agent_id = ?")
        params: list[Any] = [agent_id]
        if label is not None:
            sql += " AND label = ?"
            params.append(self.db.text(label))
        names = ("label", "old_value", "new_value", "source", "created_at", "turn_id", "scope",
                 "project")
        return [dict(zip(names, r)) for r in self.db.query(sql + " ORDER BY id", params)]

    def block_versions(self, agent_id: int, label: str) -> list[dict]:
        """Every version of the block the agent sees as `label`, oldest first, numbered from
        1: who wrote it (agent, source, turn), when, and its value. A user-scope block's are
        every agent's writes to it and this agent's own before it joined; a project block's
        every agent's writes in that project."""
        block = self._block_now(agent_id, label)
        label = self.db.text(label)
        if block is not None and block.scope == PROJECT:
            where, params = "WHERE h.project = ? AND h.label = ?", [block.project, label]
        elif block is not None and block.scope == USER:
            where = "WHERE h.label = ? AND (h.scope = ? OR (h.agent_id = ? AND h.scope = ?))"
            params = [label, USER, agent_id, AGENT]
        else:
            where = "WHERE h.agent_id = ? AND h.label = ? AND h.scope = ?"
            params = [agent_id, label, AGENT]
        rows = self.db.query(_VERSION + where + " ORDER BY h.created_at, h.agent_id, h.id",
                             params)
        names = ("created_at", "agent", "source", "turn_id", "value", "old_value", "scope",
                 "project")
        return [{"version": n, **dict(zip(names, r))} for n, r in enumerate(rows, 1)]

    def shared_block_agents(self, label: str) -> list[str]:
        """The names of the agents sharing the user-scope block `label`, by name."""
        return sorted(r[0] for r in self.db.query(
            "SELECT a.name FROM blocks b JOIN shared_blocks s ON s.id = b.shared_id "
            "JOIN agents a ON a.id = b.agent_id WHERE s.label = ?", (self.db.text(label),)))

    # ---------------------------------------------------------------- writing

    def set_block(self, agent_id: int, label: str, value: str, limit: int | None = None,
                  source: str = "tool", *, expected: str | None = None) -> Block:
        """Create or change a block and record the change (a user-scope or project block
        changes for every agent that sees it). Raises ValueError when the value is over the
        limit (callers check first and explain) and BlockChanged when `expected` is given and
        the block no longer holds it."""
        label, value = self.db.text(label), self.db.text(value)
        with self.transaction():
            rev = self._bump(agent_id)
            self._lock_shared(agent_id, label)
            project = None if self._has_own(agent_id, label) else \
                self._project_block(agent_id, label)
            if project is not None:
                self._hold_project_row(project)
            old = self.get_block(agent_id, label)
            limit = checked_write(label, old, value, limit,
                                  None if expected is None else self.db.text(expected))
            self._journal(agent_id, "block", label, None if old is None else
                          {"value": old.value, "limit": old.limit, "after": value,
                           **({"project": old.project} if old.scope == PROJECT else {})})
            if old is None:
                self.db.execute("INSERT INTO blocks (agent_id, id, label, value, char_limit, "
                                "updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                                (agent_id, self.db.next_id("blocks", agent_id), label, value,
                                 limit, now_iso()))
                self._saw_own_write(agent_id, label, value)
            else:
                self._write_block(agent_id, old, value, limit)
            self._history(agent_id, label, old.value if old else None, value, source, rev,
                          self.open_turn(agent_id), old)
        return Block(label, value, limit, old.scope if old else AGENT,
                     old.project if old else "")

    def _history(self, agent_id: int, label: str, old: str | None, new: str, source: str,
                 rev: int, turn_id: int | None, block: Block | None = None) -> None:
        """A history row of a write to `block` (None: the agent's own, new block)."""
        scope = block.scope if block is not None else AGENT
        project = block.project if block is not None and scope == PROJECT else None
        self.db.execute(_HISTORY, (agent_id, self.db.next_id("block_history", agent_id), label,
                                   old, new, self.db.text(source), now_iso(), rev, turn_id,
                                   scope, project))

    def _lock_shared(self, agent_id: int, label: str) -> None:
        """Lock the shared row the agent's block points at (if it does) until the
        transaction ends: writers of a shared block take turns."""
        self.db.query("SELECT 1 FROM shared_blocks WHERE id = (SELECT shared_id FROM blocks "
                      f"WHERE agent_id = ? AND label = ?){self.db.for_update()}",
                      (agent_id, label))

    def _write_block(self, agent_id: int, block: Block, value: str, limit: int) -> None:
        """Store a block's new value where it lives: the agent's own row, the shared row it
        points at, or its project's row."""
        label = block.label
        if block.scope == PROJECT:
            self._write_project(block.project, label, value, limit)
            self._saw_own_write(agent_id, label, value)
            return
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

    def _has_own(self, agent_id: int, label: str) -> bool:
        """Whether the agent has a `blocks` row of the label (its own, or user scope)."""
        return bool(self.db.query("SELECT 1 FROM blocks WHERE agent_id = ? AND label = ?",
                                  (agent_id, label)))

    def _undo_block(self, agent_id: int, label: str, before: dict | None) -> None:
        """Undo a turn's write of a block (see turns.py): only while it still holds what the
        turn wrote (another agent sharing it may have changed it since: its edit stays)."""
        if before is None:  # the turn created the block
            self.db.execute("DELETE FROM blocks WHERE agent_id = ? AND label = ?",
                            (agent_id, label))
            return
        if before.get("project"):  # wherever the agent works now, the turn wrote there
            self._undo_project(before["project"], label, before)
            return
        self._lock_shared(agent_id, label)
        block = self._block_now(agent_id, label)
        if block is None or block.scope == PROJECT or (
                "after" in before and block.value != before["after"]):
            return
        self._write_block(agent_id, block, before["value"], before["limit"])

    def _undo_project(self, project: str, label: str, before: dict) -> bool:
        now = self._project_value(project, label)
        if now is None or ("after" in before and now[0] != before["after"]):
            return False
        self._write_project(project, label, before["value"], before.get("limit", now[1]))
        return True

    def restore_blocks(self, agent_id: int, blocks: list[tuple[str, str, int]],
                       history: list[tuple[Any, ...]],
                       shared: tuple[str, ...] | list[str] = ()) -> list[str]:
        """Blocks (label, value, limit) and their history rows (label, old, new, source,
        created_at, turn id[, scope, project]) exactly as given, without new history: an
        import, not an edit.
        Labels in `shared` join this data dir's user-scope block of that label (created from
        the given value when there is none); returns those that joined a block holding
        another value (the given value is then kept in the block's history)."""
        text = self.db.text
        joined = []
        with self.transaction():
            rev = self._bump(agent_id)
            for label, old, new, source, created_at, turn_id, *where in history:
                scope = where[0] if where else AGENT
                project = where[1] if len(where) > 1 else None
                self.db.execute(
                    "INSERT INTO block_history (agent_id, id, label, old_value, new_value, "
                    "source, created_at, turn_id, rev, scope, project) VALUES (?, ?, ?, ?, ?, "
                    "?, ?, ?, ?, ?, ?)",
                    (agent_id, self.db.next_id("block_history", agent_id), text(label),
                     None if old is None else text(old), text(new), text(source),
                     text(created_at), turn_id, rev, text(scope or AGENT),
                     None if project is None else text(project)))
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
                    default: tuple[str, int] = ("", 5000), keep: str = "shared",
                    expected: str | None = None) -> bool:
        """Put the agent's block `label` in user scope. When the data dir has no shared block
        of that label yet, it becomes one holding the agent's value (else `default`). When it
        has one, `keep` says what the shared block holds from now on: "shared" (its value;
        the agent's own stays in the agent's block history, where `block_versions` finds
        it), "mine" (the agent's; the shared value stays in the history) or "both" (the
        shared value, then the agent's on a line of its own; ValueError over the limit).
        `expected`: the shared value the caller chose on (BlockChanged when it holds another
        by now). Returns True when the value the agent sees changed by joining."""
        if keep not in KEEPS:
            raise ValueError(f"keep must be one of {', '.join(KEEPS)}, got {keep!r}")
        label = self.db.text(label)
        with self.transaction():
            rev = self._bump(agent_id)
            self.db.lock(SHARING_LOCK)
            own = self.db.query("SELECT value, char_limit, shared_id FROM blocks "
                                "WHERE agent_id = ? AND label = ?", (agent_id, label))
            if own and own[0][2] is not None:
                return False
            value, limit = own[0][:2] if own else (self.db.text(default[0]), default[1])
            found = self.db.query(f"SELECT id, value, char_limit FROM shared_blocks WHERE "
                                  f"label = ?{self.db.for_update()}", (label,))
            if found and expected is not None and found[0][1] != self.db.text(expected):
                raise BlockChanged(f"The shared block {label!r} was changed by another agent "
                                   "meanwhile; nothing was shared.")
            if found:
                shared_id = found[0][0]
                self._join_shared(agent_id, shared_id, label, found[0][1], found[0][2],
                                  value if own else None, keep, source, rev)
            else:
                shared_id = self.db.insert("INSERT INTO shared_blocks (label, value, char_limit, "
                                           "updated_at) VALUES (?, ?, ?, ?)",
                                           (label, value, limit, now_iso()))
                if not own:  # else its own history already holds the value it starts with
                    self._history(agent_id, label, None, value, source, rev, None,
                                  Block(label, value, limit, USER))
            self._point_at(agent_id, label, shared_id, bool(own), limit)
        now = self.shared_block(label)
        return bool(own) and now is not None and now.value != value

    def _join_shared(self, agent_id: int, shared_id: int, label: str, shared: str, limit: int,
                     own: str | None, keep: str, source: str, rev: int) -> None:
        """Write what joining leaves in the shared row, and the history of the change."""
        new = shared
        if own is not None and own != shared and keep != "shared":
            new = own if keep == "mine" else f"{shared}\n{own}" if shared.strip() else own
        if len(new) > limit:
            raise ValueError(f"both values of {label!r} together are {len(new):,} chars, "
                             f"over its limit of {limit:,}")
        if new != shared:  # the others see another value: a version of the shared block
            self.db.execute("UPDATE shared_blocks SET value = ?, updated_at = ?, version = "
                            "version + 1 WHERE id = ?", (new, now_iso(), shared_id))
            self._history(agent_id, label, shared, new, source, rev, None,
                          Block(label, new, limit, USER))
        if own is None or own != new:  # what this agent saw before stays in its history
            self._history(agent_id, label, own, new, source, rev, None)

    def _point_at(self, agent_id: int, label: str, shared_id: int, own: bool,
                  limit: int) -> None:
        if own:  # the own value is not kept on the row: the history has it
            self.db.execute("UPDATE blocks SET shared_id = ?, value = '' WHERE agent_id = ? "
                            "AND label = ?", (shared_id, agent_id, label))
        else:
            self.db.execute("INSERT INTO blocks (agent_id, id, label, value, char_limit, "
                            "updated_at, shared_id) VALUES (?, ?, ?, '', ?, ?, ?)",
                            (agent_id, self.db.next_id("blocks", agent_id), label, limit,
                             now_iso(), shared_id))

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
                self._write_block(agent_id, block, value, max(block.limit, len(value)))

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
