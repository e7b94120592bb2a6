"""Persistent memory behind one protocol (`base.Store`): SQLite by default (one file in the
data dir), Postgres for one agent on many machines. `open_store` picks the backend; nothing
of either backend is imported until a store is opened (Postgres needs psycopg, from the
`postgres` extra). How the package is built: docs/architecture.md ("The store").
"""

from __future__ import annotations

from pathlib import Path

from memgpt_lite.engine.setting_rules import POSTGRES_SCHEMES, database_problem
from memgpt_lite.engine.store.base import (
    AgentRow,
    BlockChanged,
    IntegrityProblem,
    Store,
    StoreError,
)
from memgpt_lite.engine.text import quoted

__all__ = ["AgentRow", "BlockChanged", "IntegrityProblem", "Store", "StoreError", "open_store",
           "is_postgres_url"]

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
    problem = database_problem(text)
    path = sqlite_path(text)
    if problem or path is None:
        raise StoreError(problem or f"{quoted(text, 60)} is not a database.")
    return _sqlite(path)


def sqlite_path(target: str) -> Path | None:
    """The SQLite file `target` names (a path, ~ expanded, or sqlite:///PATH); None for a
    URL of another kind. A URL's path is percent-decoded (sqlite:///a%20b is "/a b"), as
    any URL's is; a plain path is taken as written."""
    text = target.strip()
    if text.lower().startswith("sqlite:///"):
        from urllib.parse import unquote

        return Path(unquote(text[len("sqlite://"):])).expanduser()
    return None if "://" in text else Path(text).expanduser()


def target_problem(target: str) -> str | None:
    """Why open_store cannot open `target` (one sentence), or None; a Postgres server is not
    reached here. What `config set database_url` checks before it writes."""
    problem = database_problem(target)
    path = sqlite_path(target)
    if problem or path is None:
        return problem
    from memgpt_lite.engine.store.sqlite.database import file_problem
    from memgpt_lite.engine.store.sqlite.store import file_schema_problem

    return file_problem(path) or (file_schema_problem(path) if path.is_file() else None)


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
