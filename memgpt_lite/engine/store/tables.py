"""Every table of the store, and who reaches it: one registry that snapshots, recordings,
exports, forget and the schema checks read, so that a table cannot be forgotten by one of
them without a test noticing (tests/engine/store/test_tables.py compares it with both
backends' real schemas, and with forget's places).

A table's `columns` are SQLite's, in SQLite's order: base snapshots are SQLite files and
recording deltas carry SQLite's columns, whatever the live backend. Adding a table is the
checklist in docs/architecture.md ("Adding a table"): a migration per backend, an entry
here, and the places that must reach it.
"""

from __future__ import annotations

from dataclasses import dataclass

BOTH, SQLITE, POSTGRES = ("sqlite", "postgres"), ("sqlite",), ("postgres",)
_PG_INDEX = ("terms", "term_counts", "length")  # a row's keyword index, on Postgres


@dataclass(frozen=True)
class Table:
    """One table. `owner` says whose rows it holds: "agent" (an `agent_id` column), "self"
    (the agents table: a row is an agent), "data" (shared by the data dir's agents) or
    "store" (the store's own bookkeeping)."""

    name: str
    columns: tuple[str, ...]
    owner: str
    snapshot: bool = False  # in base snapshots and recording deltas (store/snapshot.py)
    history: bool = False  # rows are stamped with `rev`: a delta carries those changed since
    export: bool = False  # in `agents export` (store/transfer.py)
    forget: tuple[str, ...] = ()  # the forget places (store/scrub.py) that reach its text
    json_columns: tuple[str, ...] = ()  # JSON stored as text: decoded in a delta
    bool_columns: tuple[str, ...] = ()  # 0/1 in SQLite (a snapshot's values), boolean elsewhere
    backends: tuple[str, ...] = BOTH
    postgres_columns: tuple[str, ...] = ()  # kept beside SQLite's there (never in snapshots)
    why: str = ""  # why it is outside snapshots, exports or forget, when it is
    key: tuple[str, ...] = ("id",)  # what names one row (a delta's upsert: a unique key)


TABLES: tuple[Table, ...] = (
    # `summary` is empty since conversations hold the summary (migration 008); forget still
    # reaches it in base snapshots written before.
    Table("agents", ("id", "name", "model", "settings", "summary", "created_at",
                     "last_used_at", "uid", "rev", "state"), "self", snapshot=True,
          export=True, forget=("summary",), json_columns=("settings", "state")),
    Table("blocks", ("id", "agent_id", "label", "value", "char_limit", "updated_at",
                     "shared_id"), "agent", snapshot=True, export=True,
          forget=("core memory",)),
    Table("shared_blocks", ("id", "label", "value", "char_limit", "updated_at", "version"),
          "data", forget=("core memory",),
          why="a user-scope block's value; snapshots and exports carry it as the agent's block "
              "with scope 'user'"),
    Table("block_history", ("id", "agent_id", "label", "old_value", "new_value", "source",
                            "created_at", "rev", "turn_id", "scope", "project"), "agent",
          snapshot=True, history=True, export=True, forget=("block history",)),
    Table("messages", ("id", "agent_id", "turn_id", "role", "content", "context_content",
                       "index_text", "created_at", "in_context", "seq", "rev", "status",
                       "conversation_id"),
          "agent", snapshot=True, history=True, export=True, forget=("messages",),
          json_columns=("content", "context_content"), bool_columns=("in_context",),
          postgres_columns=_PG_INDEX),
    Table("passages", ("id", "agent_id", "text", "tags", "norm", "index_text", "created_at",
                       "rev", "turn_id"), "agent", snapshot=True, history=True, export=True,
          forget=("passages",), json_columns=("tags",), postgres_columns=_PG_INDEX),
    Table("passage_history", ("id", "agent_id", "passage_id", "text", "tags", "created_at",
                              "superseded_at", "change", "reason", "turn_id",
                              "origin_turn_id", "rev"), "agent", snapshot=True, history=True,
          export=True, forget=("passage history",), json_columns=("tags",)),
    Table("conversations", ("agent_id", "id", "started_at", "last_used_at", "title", "summary",
                            "state", "rev"), "agent", snapshot=True, history=True, export=True,
          forget=("summary", "conversation titles"), json_columns=("state",),
          key=("agent_id", "id")),
    Table("project_blocks", ("id", "project", "label", "value", "char_limit", "updated_at",
                             "version"), "data", forget=("project memory",),
          key=("project", "label"),
          why="a project's block, seen by every agent working there: a recording's delta "
              "carries the session's project blocks, an export leaves them to the project"),
    Table("agent_aliases", ("name", "agent_id", "renamed_at"), "agent", key=("name",),
          why="the names an agent had before a rename, this data dir's own: an import names "
              "its agent afresh, and an old name is no memory to forget"),
    Table("tombstones", ("agent_id", "kind", "row_id", "rev"), "agent",
          why="which rows went since a revision: deltas carry them as a list of their own"),
    Table("turn_effects", ("id", "agent_id", "turn_id", "kind", "target", "before"), "agent",
          why="the undo journal of a running turn, empty between turns; forget first undoes "
              "a turn a dead process left open"),
    Table("vectors", ("id", "agent_id", "kind", "row_id", "model", "vec", "scale"), "agent",
          why="derived from the stored text and deleted with it (triggers); made again by "
              "`memgpt-lite index`"),
    Table("vector_deletions", ("id", "n"), "store",
          why="a cache key for in-memory copies of vectors, no agent data"),
    Table("forget_intents", ("id", "agent_id", "agent_uid", "spec", "stage", "created_at"),
          "store", why="a forget written down before it starts, dropped when it is done"),
    Table("schema_migrations", ("name", "applied_at"), "store", why="the migration ledger",
          postgres_columns=("position",)),
    Table("store_flags", ("name",), "store", backends=SQLITE,
          why="one-off jobs of the file (a VACUUM at the first forget of an old file)"),
    Table("search_stats", ("agent_id", "kind", "rows", "tokens"), "agent", backends=POSTGRES,
          why="Postgres's keyword index totals, derived from the stored text"),
    Table("term_docs", ("agent_id", "kind", "lexeme", "docs"), "agent", backends=POSTGRES,
          why="Postgres's keyword index counts, derived from the stored text"),
)

BY_NAME = {t.name: t for t in TABLES}
SNAPSHOT_TABLES = tuple(t.name for t in TABLES if t.snapshot)
HISTORY_TABLES = tuple(t.name for t in TABLES if t.history)
JSON_COLUMNS = {t.name: t.json_columns for t in TABLES if t.json_columns}


def table(name: str) -> Table:
    found = BY_NAME.get(name)
    if found is None:
        raise ValueError(f"not a table of the store: {name!r}")
    return found
