"""Persistent memory behind one protocol (`base.Store`): SQLite by default (one file in the
data dir), Postgres for one agent on many machines. `open_store` picks the backend; nothing
of either backend is imported until a store is opened (Postgres needs psycopg, from the
`postgres` extra). How the package is built: docs/architecture.md ("The store").
"""

from __future__ import annotations

from pathlib import Path

from memgpt_lite.engine.store.base import (
    AgentRow,
    BlockChanged,
    IntegrityProblem,
    Store,
    StoreError,
)

__all__ = ["AgentRow", "BlockChanged", "IntegrityProblem", "Store", "StoreError", "open_store",
           "is_postgres_url"]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
POSTGRES_EXTRA = "pip install 'memgpt-lite[postgres]'"


def is_postgres_url(target: object) -> bool:
    return isinstance(target, str) and target.strip().lower().startswith(POSTGRES_SCHEMES)


def open_store(target: str | Path | None = None) -> Store:
    """The store at `target`: a postgresql:// URL, a SQLite file (a path, or sqlite:///path),
    or by default $MEMGPT_LITE_DATABASE_URL, else the data dir's SQLite file. A URL of
    another kind, or a Postgres URL without psycopg installed, is one sentence."""
    from memgpt_lite.engine import config  # config reads the environment; stores need not

    if target is None:
        target = config.database_url() or config.db_path()
    if isinstance(target, Path):
        return _sqlite(target)
    text = target.strip()
    if is_postgres_url(text):
        return _postgres(text)
    if text.lower().startswith("sqlite:///"):
        return _sqlite(Path(text[len("sqlite://"):]))
    if "://" in text:
        raise StoreError(f"{text.split('://')[0]}:// databases are not supported; use a "
                         "postgresql:// URL or a SQLite file.")
    return _sqlite(Path(text))


def _sqlite(path: Path) -> Store:
    from memgpt_lite.engine.store.sqlite.store import SQLiteStore

    return SQLiteStore(path)


def _postgres(url: str) -> Store:
    try:  # psycopg comes with the postgres extra; SQLite start-up never imports it
        from memgpt_lite.engine.store.postgres.store import PostgresStore
    except ImportError as exc:
        if "psycopg" not in str(exc):
            raise
        raise StoreError(f"A postgresql:// database needs psycopg: {POSTGRES_EXTRA}.") from None
    return PostgresStore(url)
