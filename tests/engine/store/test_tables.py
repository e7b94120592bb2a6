"""The table registry (store/tables.py) is the truth about every table: each backend's real
schema holds exactly its tables with SQLite's columns, and forget's places and the registry
name each other."""

from __future__ import annotations

from memgpt_lite.engine.store import open_store, scrub
from memgpt_lite.engine.store.tables import BY_NAME, JSON_COLUMNS, SNAPSHOT_TABLES, TABLES


def _schema(store) -> dict[str, tuple[str, ...]]:
    """Each table of the live schema and its columns, in order (FTS5's own tables and the
    per-agent views over them are the index, not tables of ours)."""
    if type(store).__name__ == "SQLiteStore":
        names = [r[0] for r in store.db.query("SELECT name FROM sqlite_master WHERE type = "
                                              "'table' AND name NOT LIKE 'fts\\_%' ESCAPE '\\'")]
        return {n: tuple(r[1] for r in store.db.query(f"PRAGMA table_info({n})")) for n in names}
    rows = store.db.query("SELECT table_name, column_name FROM information_schema.columns "
                          "WHERE table_schema = current_schema() ORDER BY table_name, "
                          "ordinal_position")
    out: dict[str, tuple[str, ...]] = {}
    for table, column in rows:
        out[table] = (*out.get(table, ()), column)
    return out


def test_every_table_of_each_backend_is_in_the_registry(store_target):
    with open_store(store_target) as store:
        store.create_agent("a", {}, {"human": ("x", 100)})
        schema = _schema(store)
        backend = "sqlite" if type(store).__name__ == "SQLiteStore" else "postgres"
    expected = {t.name for t in TABLES if backend in t.backends}
    assert set(schema) == expected
    for name, columns in schema.items():
        registered = BY_NAME[name].columns
        if backend == "sqlite":
            assert columns == registered, name
        else:  # SQLite's columns (in the order of Postgres's migrations) and its own
            assert set(columns) == {*registered, *BY_NAME[name].postgres_columns}, name


def test_forget_places_and_the_registry_name_each_other():
    places = {p.name: p for p in scrub.PLACES}
    for table in TABLES:
        for name in table.forget:
            assert name in places, f"{table.name}: no forget place {name!r}"
            assert table.name in places[name].tables, f"{name} does not name {table.name}"
    for place in scrub.PLACES:
        for name in place.tables:
            assert place.name in BY_NAME[name].forget, f"{name} does not name {place.name}"


def test_a_table_outside_snapshots_exports_or_forget_says_why():
    for table in TABLES:
        if not (table.snapshot and table.export and table.forget):
            assert table.why, f"{table.name} must say why it is left out"


def test_snapshot_tables_are_the_agents_and_json_columns_exist():
    assert SNAPSHOT_TABLES[:2] == ("agents", "blocks")
    for name, columns in JSON_COLUMNS.items():
        assert set(columns) <= set(BY_NAME[name].columns)
