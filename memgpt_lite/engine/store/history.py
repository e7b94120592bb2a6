"""An agent's rows as snapshots carry them: what `store/snapshot.py` copies into a base and
writes into each recording's delta, read through the table registry (`tables.py`) with
SQLite's columns and values, whatever the backend.

A mixin of `sql.SQLStore`, over the database seam (see core.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from memgpt_lite.engine.store.core import StoreCore
from memgpt_lite.engine.store.tables import HISTORY_TABLES, SNAPSHOT_TABLES, table

_BLOCKS = ("SELECT b.id, b.agent_id, b.label, coalesce(s.value, b.value), "
           "coalesce(s.char_limit, b.char_limit), b.updated_at, b.shared_id "
           "FROM blocks b LEFT JOIN shared_blocks s ON s.id = b.shared_id "
           "WHERE b.agent_id = ? ORDER BY b.id")


class HistoryMixin(StoreCore):
    """Snapshot rows, tombstones and the count of changes since a revision."""

    def snapshot_rows(self, agent_id: int, name: str,
                      since: int | None = None) -> Iterator[dict[str, Any]]:
        """The agent's rows of one of SNAPSHOT_TABLES (history tables: stamped after
        revision `since`, if given) with SQLite's columns and values, ordered by id. Blocks
        as the agent sees them: a user-scope block with the shared value."""
        if name not in SNAPSHOT_TABLES:
            raise ValueError(f"not a snapshot table: {name!r}")
        spec = table(name)
        if name == "blocks":
            sql, params = _BLOCKS, [agent_id]
        else:
            where = "id = ?" if spec.owner == "self" else "agent_id = ?"
            params = [agent_id]
            if since is not None and spec.history:
                where += " AND rev > ?"
                params.append(since)
            sql = f"SELECT {', '.join(spec.columns)} FROM {name} WHERE {where} ORDER BY id"
        for row in self.db.query(sql, params):
            values = dict(zip(spec.columns, row))
            for col in spec.bool_columns:
                values[col] = int(values[col])
            yield values

    def tombstones_since(self, agent_id: int, since: int) -> list[tuple[str, int]]:
        return [(r[0], r[1]) for r in self.db.query(
            "SELECT kind, row_id FROM tombstones WHERE agent_id = ? AND rev > ? ORDER BY rev",
            (agent_id, since))]

    def count_changes(self, agent_id: int, since: int) -> int:
        """History rows and deletions stamped after revision `since`."""
        return sum(self.db.query(f"SELECT count(*) FROM {t} WHERE agent_id = ? AND rev > ?",
                                 (agent_id, since))[0][0]
                   for t in (*HISTORY_TABLES, "tombstones"))
