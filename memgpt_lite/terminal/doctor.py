"""`memgpt-lite doctor`: check the data dir, the database and the API settings, and say
what to do about anything wrong."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

from memgpt_lite import __version__
from memgpt_lite.engine import config


def run_doctor(console: Console, *, repair: bool = False) -> int:
    """Check the data dir, the database and the API settings; say what to do about problems."""
    problems: list[str] = []

    def ok(line: str) -> None:
        console.print(f"ok    {line}", markup=False, highlight=False)

    def warn(line: str) -> None:
        console.print(f"warn  {line}", markup=False, highlight=False)

    def bad(line: str) -> None:
        problems.append(line)
        console.print(f"FAIL  {line}", markup=False, highlight=False)

    ok(f"memgpt-lite {__version__} on Python {sys.version.split()[0]}")
    _doctor_data_dir(ok, warn, bad)
    _doctor_database(ok, warn, bad, repair)
    _doctor_api(ok, warn)
    if problems:
        console.print(f"{len(problems)} problem(s) found.", markup=False)
        return 1
    console.print("Everything looks fine.", markup=False)
    return 0


def _doctor_data_dir(ok: Callable, warn: Callable, bad: Callable) -> None:
    root = config.data_dir()
    if not root.exists():
        ok(f"data dir {root} does not exist yet; `memgpt-lite chat` creates it")
        return
    if not root.is_dir():
        bad(f"data dir {root} is not a directory; move that file away or set MEMGPT_LITE_HOME")
        return
    if not os.access(root, os.W_OK | os.X_OK):
        bad(f"data dir {root} is not writable; fix its permissions (chmod u+rwx) "
            f"or set MEMGPT_LITE_HOME")
        return
    mode = root.stat().st_mode & 0o777
    if mode & 0o077:
        warn(f"data dir {root} is readable by others (mode {mode:o}); run chmod 700 {root}")
    else:
        ok(f"data dir {root} (mode {mode:o})")


def _doctor_database(ok: Callable, warn: Callable, bad: Callable, repair: bool) -> None:
    from memgpt_lite.engine.store import Store, StoreError

    path = config.db_path()
    if not path.exists():
        ok(f"database {path} does not exist yet")
        return
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        warn(f"database {path} is readable by others (mode {mode:o}); run chmod 600 {path}")
    try:
        with Store(path) as store:
            ok(f"database {path}: schema version {store.schema_version()} "
               f"({len(store.applied_migrations())} migrations applied), "
               f"{len(store.list_agents())} agent(s)")
            problems = _integrity_problems(store, ok, warn, repair)
            from memgpt_lite.terminal.embedding_commands import doctor_vectors

            doctor_vectors(store, ok, warn)
    except StoreError as exc:
        bad(f"database {path}: {exc}")
        return
    for problem in problems:
        advice = "" if "doctor --repair" in problem else (
            " — restore a backup, or export your agents (`memgpt-lite agents export`) and "
            "import them into a fresh data dir")
        bad(f"database: {problem}{advice}")
    if not problems:
        ok("integrity check and search index consistency")


def _integrity_problems(store: Any, ok: Callable, warn: Callable, repair: bool) -> list[str]:
    """The store's problems; with --repair, first rebuild the search indexes when they are
    the only problem (the rebuild re-reads the stored text, which a damaged file cannot
    vouch for)."""
    problems = store.integrity_problems()
    if not (repair and problems):
        return problems
    if not all("search index" in p for p in problems):
        warn("--repair rebuilds only the search indexes; not run, as the database has other "
             "problems")
        return problems
    store.rebuild_search_index()
    ok("rebuilt the search indexes from the stored messages and passages")
    return store.integrity_problems()


def _doctor_api(ok: Callable, warn: Callable) -> None:
    key = os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
    base = os.environ.get("ANTHROPIC_BASE_URL")
    if base:
        ok(f"ANTHROPIC_BASE_URL is {base}")
    if key:
        ok("an Anthropic API key is set")
    elif not base:
        warn("ANTHROPIC_API_KEY is not set: chat needs it (export ANTHROPIC_API_KEY=...), "
             "or set ANTHROPIC_BASE_URL to an Anthropic-compatible server; demo and replay "
             "work without it")
