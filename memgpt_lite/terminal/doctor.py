"""`memgpt-lite doctor`: check the data dir, the database, the API key and the connection,
and say what to do about anything wrong.

A damaged database file is named part by part (which tables or indexes hold the damage) with
the exact commands to recover it; the key and the connection are checked with a
`count_tokens` call, which costs nothing.
"""

from __future__ import annotations

import os
import shlex
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from memgpt_lite import __version__
from memgpt_lite.engine import config
from memgpt_lite.engine.files import dangling_link
from memgpt_lite.terminal.render import visible

Say = Callable[[str], None]


class _Report:
    """The doctor's lines: ok, warn and FAIL (counted), one per line, controls made visible."""

    def __init__(self, console: Console):
        self.console, self.problems, self.warnings = console, 0, 0
        self.no_key = False  # everything else may be fine, but chat cannot call a model
        self.said: set[str] = set()

    def _line(self, mark: str, text: str) -> None:
        self.console.print(visible(f"{mark:<5} {text}"), markup=False, highlight=False,
                           soft_wrap=True)

    def ok(self, text: str) -> None:
        self._line("ok", text)

    def warn(self, text: str) -> None:
        self.warnings += 1
        self._line("warn", text)

    def bad(self, text: str) -> None:
        if text in self.said:  # one problem met by two checks (the config file's timeout)
            return
        self.said.add(text)
        self.problems += 1
        self._line("FAIL", text)


def run_doctor(console: Console, *, repair: bool = False, online: bool = True) -> int:
    """Check the data dir, the database and the API; 1 when anything needs fixing."""
    report = _Report(console)
    report.ok(f"memgpt-lite {__version__} on Python {sys.version.split()[0]}")
    data_dir_usable = _doctor_data_dir(report)
    _doctor_config_file(report)
    try:
        server = config.database_url()
    except config.ConfigError:  # a bad database_url in the file: said just above
        server, data_dir_usable = None, False
    if server:  # the store is a server's; the data dir keeps the recordings
        _doctor_server(report, console, repair)
    elif data_dir_usable:
        _doctor_database(report, console, repair)
    _doctor_api(report, online)
    if report.problems:
        console.print(f"{report.problems} problem(s) found.", markup=False)
        return 1
    if report.no_key:
        console.print("Not ready to chat: no API key or server is set (everything else looks "
                      "fine; demo and replay work without one).", markup=False)
        return 1
    console.print(f"Nothing is broken; {report.warnings} warning(s) above." if report.warnings
                  else "Everything looks fine.", markup=False)
    return 0


def _doctor_config_file(report: _Report) -> None:
    """Each value of the config file its setting cannot take (it stops only the commands
    that read that setting, so a user may not have met it yet)."""
    from memgpt_lite.engine.config_file import load

    try:
        loaded = load()
    except config.ConfigError as exc:  # not TOML, or unreadable
        report.bad(str(exc))
        return
    for _value, sentence in loaded.bad.values():
        report.bad(sentence)


# --------------------------------------------------------------------------- data dir


def _doctor_data_dir(report: _Report) -> bool:
    """True when the database can be looked at (the data dir is a usable folder)."""
    root = config.data_dir()
    blocker = _file_in_the_way(root)
    if blocker is not None:
        report.bad(f"data dir {root} cannot be created: {blocker} is a file, not a folder; "
                   f"move it away or set MEMGPT_LITE_HOME to another folder")
        return False
    link = dangling_link(root)
    if link is not None:
        report.bad(f"data dir {root} cannot be used: {link} is a link to {os.readlink(link)}, "
                   "which does not exist; mount or create it, or set MEMGPT_LITE_HOME")
        return False
    if not root.exists():
        report.ok(f"data dir {root} does not exist yet; `memgpt-lite chat` creates it")
        return False
    if not os.access(root, os.W_OK | os.X_OK):
        report.bad(f"data dir {root} is not writable; fix its permissions (chmod u+rwx) "
                   f"or set MEMGPT_LITE_HOME")
        return False
    mode = root.stat().st_mode & 0o777
    if mode & 0o077:
        report.warn(f"data dir {root} is readable by others (mode {mode:o}); run chmod 700 {root}")
    else:
        report.ok(f"data dir {root} (mode {mode:o})")
    return True


def _file_in_the_way(root: Path) -> Path | None:
    """The data dir itself or the nearest existing parent, when it is not a folder."""
    path = root
    while not path.exists() and path.parent != path:
        path = path.parent
    return None if path.is_dir() else path


# --------------------------------------------------------------------------- database


def _doctor_database(report: _Report, console: Console, repair: bool) -> None:
    from memgpt_lite.engine.store import StoreError, open_store

    path = config.db_path()
    if not path.exists():
        report.ok(f"database {path} does not exist yet")
        return
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        report.warn(f"database {path} is readable by others (mode {mode:o}); run chmod 600 {path}")
    damage = damaged_parts(path)
    if damage:
        _report_damage(report, path, damage)
        return
    try:
        with open_store(path) as store:
            problems = _check_store(store, report, console, repair)
            _gone_projects(store, report)
    except (StoreError, sqlite3.DatabaseError) as exc:
        report.bad(f"database {path}: {str(exc).strip().splitlines()[0]}")
        return
    _report_problems(report, problems)


def _gone_projects(store: Any, report: _Report) -> None:
    """Project blocks whose folder was moved, renamed or deleted: kept under the old path,
    which no chat there will name again (docs/tasks.md). Not on Postgres, whose projects
    may be on other machines."""
    from memgpt_lite.engine.project import root_exists

    for root in store.project_roots():
        if not root_exists(root):
            report.warn(f"project {root} has a project block but its folder is gone (moved or "
                        f"renamed?): memgpt-lite core --project {shlex.quote(root)} shows it")


def _doctor_server(report: _Report, console: Console, repair: bool) -> None:
    """The database named by --db / MEMGPT_LITE_DATABASE_URL (Postgres): reachable, its
    schema, and the consistency of every agent's search index."""
    from memgpt_lite.engine.store import StoreError, open_store

    try:
        with open_store() as store:
            problems = _check_store(store, report, console, repair)
    except StoreError as exc:
        report.bad(f"database: {str(exc).strip().splitlines()[0]}")
        return
    _report_problems(report, problems)


def _check_store(store: Any, report: _Report, console: Console, repair: bool) -> list[str]:
    report.ok(f"database {store.location}: schema version {store.schema_version()} "
              f"({len(store.applied_migrations())} migrations applied), "
              f"{len(store.list_agents())} agent(s)")
    problems = _index_problems(store, report, console, repair) + _request_problems(store)
    from memgpt_lite.terminal.embedding_commands import doctor_vectors

    doctor_vectors(store, report.ok, report.warn)
    return problems


def _request_problems(store: Any) -> list[str]:
    """Agents whose next request the API would refuse, whatever the user types (an import
    from an older version, a hand-edited database): found by the same rules the fake
    server applies. The fix is to export the agent and import it again."""
    from memgpt_lite.engine.store import checks

    out = []
    for row in store.list_agents():
        found = checks.next_request_problem(store.context_messages(row.id))
        if found:
            out.append(f"agent {row.name!r}: {found}; `memgpt-lite agents export "
                       f"{row.name} -o FILE`, then `agents delete` and `agents import FILE`, "
                       f"gives it a queue the API takes")
    return out


def _report_problems(report: _Report, problems: list[str]) -> None:
    for problem in problems:
        report.bad(f"database: {problem}")
    if not problems:
        report.ok("integrity check and search index consistency")


def damaged_parts(path: Path) -> list[str]:
    """What SQLite's integrity check finds damaged in the file, by table or index name
    ([] when the file is sound; the file is opened read-only and never changed)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return []  # not openable at all: the Store says why in one sentence
    try:
        rows = [r[0] for r in db.execute("PRAGMA integrity_check(50)")]
        if rows == ["ok"]:
            return []
        return _name_damage(db, rows)
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc) or "encrypted" in str(exc):
            return []  # not our kind of file: the Store refuses it in one sentence
        return [f"the schema itself ({exc})"]
    finally:
        db.close()


def _name_damage(db: sqlite3.Connection, rows: list[str]) -> list[str]:
    import re

    try:
        pages = {int(page): f"{kind} {name}" for kind, name, page in db.execute(
            "SELECT type, name, rootpage FROM sqlite_master WHERE rootpage > 0")}
    except sqlite3.DatabaseError:
        pages = {}
    parts: list[str] = []
    for row in (line for r in rows for line in r.splitlines()):
        root = re.search(r"Tree (\d+) page", row)
        index = re.search(r"index (\w+)", row)
        page = re.search(r"page (\d+)", row, re.IGNORECASE)
        if row.startswith("***"):
            continue  # "*** in database main ***": a heading, not a finding
        if root:
            part = pages.get(int(root.group(1)), f"the tree rooted at page {root.group(1)}")
        elif index:
            part = f"index {index.group(1)}"
        elif page:
            part = pages.get(int(page.group(1)), f"page {page.group(1)}")
        else:
            part = row[:80]
        if part not in parts:
            parts.append(part)
    return parts


def recovery_commands(path: Path) -> list[str]:
    """Shell commands that copy what SQLite can still read into a new database file. The
    damaged file moves aside with its -wal and -shm files: a stale WAL beside a new file
    would be replayed into it."""
    name = path.name
    return [f"cd {path.parent}",
            f"mkdir damaged && mv {name}* damaged/",
            f"sqlite3 damaged/{name} .dump | sqlite3 {name} && chmod 600 {name}",
            "memgpt-lite doctor --repair"]


def _report_damage(report: _Report, path: Path, parts: list[str]) -> None:
    more = " and more" if len(parts) > 6 else ""
    steps = "\n".join(f"        {line}" for line in recovery_commands(path))
    report.bad(f"database {path} is damaged ({', '.join(parts[:6])}{more}); memgpt-lite will "
               f"not write to it. To recover what SQLite can still read, then rebuild the "
               f"search indexes:\n{steps}\n"
               f"      (where `.dump` stops early, sqlite3's `.recover` in its place salvages "
               f"more, if your sqlite3 has it). Or start a fresh data dir from your last export:"
               f" MEMGPT_LITE_HOME=NEW_DIR memgpt-lite agents import EXPORT.json")


def _index_problems(store: Any, report: _Report, console: Console, repair: bool) -> list[str]:
    """The store's problems; with --repair, first rebuild the search indexes (the file itself
    was found sound, so the stored text can be trusted)."""
    problems = store.integrity_problems()
    if not (repair and problems):
        return problems
    if not all("search index" in p for p in problems):
        report.warn("--repair rebuilds only the search indexes; not run, as the database has "
                    "other problems")
        return problems
    _rebuild(store, console)
    report.ok("rebuilt the search indexes from the stored messages and passages")
    return store.integrity_problems()


def _rebuild(store: Any, console: Console) -> None:
    from memgpt_lite.terminal.progress import progress

    with progress(console, "rebuilding search indexes", len(store.list_agents())) as step:
        store.rebuild_search_index(on_agent=lambda name: step(name))


# --------------------------------------------------------------------------- API


def _doctor_api(report: _Report, online: bool) -> None:
    key = os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
    base = os.environ.get("ANTHROPIC_BASE_URL")
    if base and config.base_url_problem(base):
        report.bad(str(config.base_url_problem(base)))
        return  # nothing can be reached through it
    if base:
        report.ok(f"ANTHROPIC_BASE_URL is {base}")
    if key:
        report.ok("an Anthropic API key is set")
    elif not base:
        report.warn("ANTHROPIC_API_KEY is not set: chat needs it (export ANTHROPIC_API_KEY=...), "
                    "or set ANTHROPIC_BASE_URL to an Anthropic-compatible server; demo and replay "
                    "work without it")
        report.no_key = online  # --offline skips the key and connection checks
        return
    if online:
        _doctor_connection(report)


def _doctor_connection(report: _Report) -> None:
    """One `count_tokens` call (free): it proves the server answers and takes the key."""
    from memgpt_lite.engine.errors import APIConnectionError, AuthError, ModelError
    from memgpt_lite.engine.model import AnthropicClient
    from memgpt_lite.engine.records import ModelRequest

    model = config.Settings().with_env().model
    request = ModelRequest(model=model, max_tokens=1, system=[], messages=[
        {"role": "user", "content": [{"type": "text", "text": "ping"}]}])
    timeout, source = _check_deadline(report)
    try:
        client = AnthropicClient(max_retries=0, timeout=timeout, timeout_source=source)
        client.count_tokens(request)
    except AuthError as exc:
        report.bad(f"the key: {exc.message}")
    except APIConnectionError as exc:
        report.bad(f"the connection: {exc.message}")
    except ModelError as exc:
        report.warn(f"reached {client.host}, but counting tokens failed: {exc.message}")
    else:
        report.ok(f"reached {client.host} and the key works (a count_tokens call, which costs "
                  f"nothing)")


CHECK_WAIT = 15.0  # seconds the connection check waits at most: doctor runs when things are wrong


def _check_deadline(report: _Report) -> tuple[float, str]:
    """How long the connection check waits, and what set that: the chat's own deadline
    (MEMGPT_LITE_TIMEOUT) when it is shorter, else doctor's limit. A setting the chat would
    refuse is a problem of its own; the check then waits doctor's limit."""
    try:
        chat = config.timeout_setting()
    except config.ConfigError as exc:
        report.bad(str(exc))
        chat = config.DEFAULT_TIMEOUT
    if chat <= CHECK_WAIT:
        return chat, "set by MEMGPT_LITE_TIMEOUT"
    return CHECK_WAIT, (f"doctor's own limit; a chat waits up to {chat:g} s, set by "
                        "MEMGPT_LITE_TIMEOUT or --timeout")
