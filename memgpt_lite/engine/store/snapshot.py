"""Snapshots of one agent, so a recording can start its replay where the live session began.

A recording must not copy the whole agent every session (with 100k messages that is tens of
megabytes and seconds per chat). Instead:

* a **base** is one agent's rows in a SQLite file of their own, written now and then beside
  the recordings (`choose_base`, `write_base`); its name holds the agent's revision;
* a **delta** is what changed since a base (every row stamped with a later revision, the
  ids deleted since, and the small always-current state: the agent row, its blocks, and the
  blocks of the project it works in), written into each recording's header
  (`changes_since`).

`materialise(base, delta, target)` rebuilds the agent in a fresh file for a replay: the base
copied, the delta applied on top. Row ids are the live ones, so the replayed agent's history
is the live agent's history, row for row. A delta grows with what happened since its base,
not with the agent; past `BASE_REFRESH_ROWS` changed rows a new base is written.

Whatever the live store (SQLite or Postgres), bases are SQLite files and a replay always
materialises into SQLite: the live store hands over its rows with SQLite's columns
(`Store.snapshot_rows`, through the table registry). A SQLite store copies them file to file
(`SQLiteStore.copy_agent`), faster.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memgpt_lite.engine.matching import Matcher
from memgpt_lite.engine.store import checks, scrub
from memgpt_lite.engine.store.base import Store
from memgpt_lite.engine.store.database import dumps
from memgpt_lite.engine.store.sqlite import fts
from memgpt_lite.engine.store.sqlite.database import SQLiteDatabase
from memgpt_lite.engine.store.sqlite.store import SQLiteStore
from memgpt_lite.engine.store.tables import (
    HISTORY_TABLES,
    JSON_COLUMNS,
    SNAPSHOT_TABLES,
)
from memgpt_lite.engine.store.tables import table as table_spec
from memgpt_lite.engine.text import clean_value

BASE_REFRESH_ROWS = 2_000  # a delta with more changed rows than this gets a new base instead
# Columns holding JSON (tables.py) are decoded in a delta, so that text inside them is plain
# JSON strings (which a forget can find and scrub) rather than JSON encoded inside a string.
__all__ = ["HISTORY_TABLES", "choose_base", "write_base", "changes_since", "materialise",
           "apply", "forget_in_base", "pending_rows"]
_COPY_CHUNK = 5_000  # rows per insert when a base is written from another backend


def choose_base(store: Store, agent_id: int, folder: Path) -> tuple[Path | None, int]:
    """The base a new recording of the agent should start from, and its revision: the newest
    base in `folder` while the changes since it stay small, else a new one written now (or
    none, revision -1, while the agent's whole history is small)."""
    rev = store.revision(agent_id)
    bases = sorted((r, p) for r, p in _bases(folder) if r <= rev)
    base, since = (bases[-1][1], bases[-1][0]) if bases else (None, -1)
    if pending_rows(store, agent_id, since) <= BASE_REFRESH_ROWS:
        return base, since
    return write_base(store, agent_id, folder)


def _bases(folder: Path) -> list[tuple[int, Path]]:
    found = []
    for path in folder.glob("rev-*.db") if folder.is_dir() else []:
        digits = path.stem[len("rev-"):]
        if digits.isdigit():
            found.append((int(digits), path))
    return found


def write_base(store: Store, agent_id: int, folder: Path) -> tuple[Path, int]:
    """Copy the agent's rows into a new SQLite file in `folder` (0600, written whole or not
    at all), named by the revision it holds; returns (path, revision)."""
    tmp = folder / f"base-{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    try:
        rev = _write_base(store, agent_id, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a base is written whole or not at all
        raise
    path = folder / f"rev-{rev:010d}.db"
    os.replace(tmp, path)
    return path, rev


def _write_base(store: Store, agent_id: int, tmp: Path) -> int:
    with SQLiteStore(tmp) as empty:  # the current schema, in a file of its own
        empty.db.execute("PRAGMA journal_mode = DELETE")
        if not isinstance(store, SQLiteStore):
            return _copy_rows(store, agent_id, empty)
    return store.copy_agent(agent_id, tmp)


def _copy_rows(store: Store, agent_id: int, base: SQLiteStore) -> int:
    """The agent's rows from any store into the empty SQLite `base`, read in one snapshot."""
    with store.read_snapshot(), base.transaction():
        rev = store.revision(agent_id)
        for table in SNAPSHOT_TABLES:
            rows = store.snapshot_rows(agent_id, table)
            while chunk := [row for _, row in zip(range(_COPY_CHUNK), rows)]:
                cols = list(chunk[0])
                base.db.executemany(
                    f"INSERT INTO {table} ({', '.join(cols)}) VALUES "
                    f"({', '.join('?' * len(cols))})", [[r[c] for c in cols] for r in chunk])
    return rev


def forget_in_base(path: Path, agent_id: int, matcher: Matcher, *, apply: bool = True,
                   ) -> list[scrub.Unit]:
    """Forget in a base file as in the live store (row ids are the live ones; see scrub.py),
    then rewrite the file so that no freed page still holds the text. Returns the units
    changed ([]: the file is left as it was). `apply=False` only looks."""
    db = SQLiteDatabase(path, raw=True, read_only=not apply)
    try:
        units = scrub.find_units(db, agent_id, matcher)
        if units and apply:
            db.execute("PRAGMA secure_delete = ON")
            with db.transaction():
                scrub.apply_units(scrub.Writer(db, agent_id), units, matcher)
            db.execute("VACUUM")
    finally:
        db.close()
    return units


def pending_rows(store: Store, agent_id: int, since: int) -> int:
    """How many history rows (and deletions) a delta since revision `since` would carry."""
    return store.count_changes(agent_id, since)


def changes_since(store: Store, agent_id: int, since: int) -> dict[str, Any]:
    """The delta of the agent since revision `since` (-1: everything)."""
    with store.read_snapshot():
        agent = _rows(store, agent_id, "agents")[0]
        delta: dict[str, Any] = {"since": since, "rev": agent["rev"], "agent": agent,
                                 "blocks": _block_rows(store, agent_id)}
        for table in HISTORY_TABLES:
            delta[table] = _rows(store, agent_id, table, since)
        delta["tombstones"] = [[kind, row_id] for kind, row_id in
                               store.tombstones_since(agent_id, since)]
        project = store.project_of(agent_id)
        delta["project"] = project
        delta["project_blocks"] = [{"label": b.label, "value": b.value, "char_limit": b.limit}
                                   for b in store.project_blocks(project)] if project else []
    return delta


def _block_rows(store: Store, agent_id: int) -> list[dict[str, Any]]:
    """The agent's blocks as it sees them: a user-scope block with the shared value, marked
    with its scope (a replay recreates it as a shared block, so requests render alike)."""
    rows = []
    for row in store.snapshot_rows(agent_id, "blocks"):
        shared = row.pop("shared_id", None)
        rows.append({**row, "scope": "agent" if shared is None else "user"})
    return rows


def _rows(store: Store, agent_id: int, table: str,
          since: int | None = None) -> list[dict[str, Any]]:
    rows = list(store.snapshot_rows(agent_id, table, since))
    for row in rows:
        for col in JSON_COLUMNS.get(table, ()):
            if row.get(col) is not None:
                row[col] = json.loads(row[col])
    return rows


def materialise(base: Path | None, delta: dict[str, Any], target: Path,
                open_store: Callable[[Path], SQLiteStore] = SQLiteStore) -> SQLiteStore:
    """A store at `target` holding the agent as it was: `base` (if any) plus `delta`."""
    if base is not None:
        shutil.copyfile(base, target)
    store = open_store(target)
    try:
        apply(store, delta)
    except BaseException:
        store.close()
        raise
    return store


def apply(store: SQLiteStore, delta: dict[str, Any]) -> None:
    """Apply a delta on top of what the store holds; ValueError (one phrase naming the
    field) when the delta is damaged, before or after it was applied (a queue that the API
    would refuse)."""
    found = checks.delta_problem(delta)
    if found:
        raise ValueError(found)
    agent_id = delta["agent"]["id"]
    with store.transaction():
        _upsert(store, "agents", delta["agent"])
        store.db.execute("DELETE FROM blocks WHERE agent_id = ?", (agent_id,))
        for row in delta["blocks"]:
            row = dict(row)
            shared = row.pop("scope", "agent") == "user"
            _upsert(store, "blocks", row)
            if shared:
                _share(store, agent_id, row)
        # Deletions first: SQLite reuses the highest id after a delete, so a row deleted
        # and a new row with the same id can both be in one delta; the row is the truth.
        for kind, row_id in delta.get("tombstones") or []:
            if kind in HISTORY_TABLES:
                store.db.execute(f"DELETE FROM {kind} WHERE id = ? AND agent_id = ?",
                                  (row_id, agent_id))
        for name in HISTORY_TABLES:
            for row in delta.get(name) or []:
                _upsert(store, name, row)
        if "conversations" not in delta:
            _before_conversations(store, agent_id, delta["agent"])
        for row in delta.get("project_blocks") or []:
            _upsert(store, "project_blocks", {"project": delta["project"], **row,
                                              "updated_at": delta["agent"]["created_at"]})
        fts.rebuild(store.db.connection, agent_id)
        for conversation in store.conversations(agent_id):
            found = checks.queue_problem(store.context_messages(agent_id, conversation.id))
            if found:
                raise ValueError(found)


def _before_conversations(store: SQLiteStore, agent_id: int, agent: dict[str, Any]) -> None:
    """A delta written before conversations: its agent row holds the summary and the pager
    state, which conversation 1 holds now (as migration 008 moved them)."""
    state = dict(agent.get("state") or {})
    pager = state.pop("pager", None)
    store.db.execute("UPDATE agents SET summary = '', state = ? WHERE id = ?",
                     (dumps(state), agent_id))
    store.db.execute("DELETE FROM conversations WHERE agent_id = ? AND id = 1", (agent_id,))
    store.db.execute("INSERT INTO conversations (agent_id, id, started_at, last_used_at, "
                     "summary, state) VALUES (?, 1, ?, ?, ?, ?)",
                     (agent_id, agent["created_at"], agent.get("last_used_at") or
                      agent["created_at"], clean_value(agent.get("summary") or ""),
                      dumps({"pager": pager} if pager is not None else {})))


def _share(store: SQLiteStore, agent_id: int, row: dict[str, Any]) -> None:
    """Make the block a user-scope one holding the delta's value."""
    store.share_block(agent_id, row["label"])
    store.apply_outside_edit(agent_id, row["label"], clean_value(row["value"]))


def _upsert(store: SQLiteStore, table: str, row: dict[str, Any]) -> None:
    values = dict(clean_value(row))  # a recording's JSON may hold lone surrogates
    key = table_spec(table).key
    for col in JSON_COLUMNS.get(table, ()):
        if values.get(col) is not None:
            values[col] = dumps(values[col])
    cols = list(values)
    updates = ", ".join(f"{c} = excluded.{c}" for c in cols if c not in key)
    store.db.execute(
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}", [values[c] for c in cols])

