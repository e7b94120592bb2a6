"""Forgetting: find what matches a query, delete it from the store, and scrub its text from
the recordings and the input history. Library code: it never prints.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memgpt_lite.engine import config
from memgpt_lite.engine.turns import turn_ranges

HISTORY_FILE = "chat_history"  # the chat's readline history, in the data dir
FORGOTTEN = "[forgotten]"


@dataclass
class ForgetMatches:
    """What `forget QUERY` would delete: whole turns (so the queue stays valid) and passages."""

    query: str
    message_hits: list[Any] = field(default_factory=list)
    passage_hits: list[Any] = field(default_factory=list)
    version_hits: list[Any] = field(default_factory=list)  # superseded or deleted passages

    @property
    def turn_ids(self) -> list[int]:
        return sorted({h.turn_id for h in self.message_hits if h.turn_id is not None})

    @property
    def empty(self) -> bool:
        return not self.message_hits and not self.passage_hits and not self.version_hits


def _all_hits(search: Callable[..., Any], cap: int = 500) -> list[Any]:
    hits: list[Any] = []
    page = 1
    while len(hits) < cap:
        result = search(page=page, per_page=50)
        hits.extend(result.hits)
        if page >= result.pages or not result.hits:
            break
        page += 1
    return hits


def find_forget_matches(store: Any, agent_id: int, query: str) -> ForgetMatches:
    return ForgetMatches(
        query,
        _all_hits(lambda **kw: store.search_messages(agent_id, query, context=False, **kw)),
        _all_hits(lambda **kw: store.search_passages(agent_id, query, **kw)),
        store.find_passage_versions(agent_id, query))


def apply_forget(store: Any, row: Any, matches: ForgetMatches) -> str:
    """Delete the matched turns and passages, then scrub their text from the recordings."""
    secrets = turn_strings(store, row.id, matches.turn_ids)
    secrets += [h.text for h in matches.passage_hits]
    passage_ids = [h.id for h in matches.passage_hits]
    # A passage goes with its history (delete_passages purges it); old versions that match
    # go on their own.
    versions = matches.version_hits + store.passage_versions(row.id, passage_ids=passage_ids)
    secrets += [v.text for v in versions]
    with store.transaction():
        n_messages = store.delete_turns(row.id, matches.turn_ids) if matches.turn_ids else 0
        n_passages = store.delete_passages(row.id, passage_ids) if passage_ids else 0
        store.purge_passage_versions(row.id, [v.id for v in matches.version_hits])
    scrub_bases(row, matches.turn_ids, passage_ids, [v.id for v in versions])
    files = scrub_recordings(row, secrets)
    scrub_history_file(config.data_dir() / HISTORY_FILE, matches.query, secrets)
    old = f" (and {len(versions)} old passage version(s))" if versions else ""
    return (f"Deleted {n_messages} message(s) of turn(s) {turn_ranges(matches.turn_ids) or '-'} "
            f"and {n_passages} passage(s){old}; scrubbed {files} recording file(s) and the "
            f"input history.")


def history_entry_matches(entry: str, query: str, secrets: list[str]) -> bool:
    """Input-history lines to drop on forget: those holding the query or a deleted text, and
    the lines of a deleted multi-line message (the history file stores them one per line)."""
    if query.lower() in entry.lower():
        return True
    return any(s in entry or (len(entry.strip()) >= 12 and entry in s) for s in secrets)


def scrub_history_file(path: Path, query: str, secrets: list[str]) -> None:
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    kept = [line for line in lines if not history_entry_matches(line, query, secrets)]
    if kept != lines:
        _atomic_write(path, "\n".join(kept) + ("\n" if kept else ""))


def turn_strings(store: Any, agent_id: int, turn_ids: list[int]) -> list[str]:
    out: list[str] = []
    for turn_id in turn_ids:
        for msg in store.turn_messages(agent_id, turn_id):
            out.extend(_strings(msg.content))
    # Short strings ("human", a tool name) are structure, not content; leave them.
    return [s for s in out if len(s.strip()) >= 12]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in ("type", "id", "tool_use_id", "name", "signature"):
                yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _scrub(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, FORGOTTEN)
        return value
    if isinstance(value, dict):
        return {k: _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, secrets) for v in value]
    return value


def agent_recordings(row: Any) -> list[Path]:
    """The agent's recordings (see recording.belongs_to)."""
    from memgpt_lite.engine.recording import belongs_to

    root = config.recordings_dir()
    if not root.is_dir():
        return []
    return [path for path in sorted(root.rglob("*.jsonl")) if belongs_to(path, row)]


def agent_bases(row: Any) -> list[Path]:
    """The base snapshots beside the agent's recordings (see store/snapshot.py)."""
    folder = config.recordings_dir() / row.uid / "bases"
    return sorted(folder.glob("*.db")) if row.uid and folder.is_dir() else []


def scrub_bases(row: Any, turn_ids: list[int], passage_ids: list[int],
                version_ids: list[int] = ()) -> int:  # type: ignore[assignment]
    """Delete the forgotten turns, passages and passage versions from every base snapshot of
    the agent too (row ids are the live ones), then rewrite each file so no freed page keeps
    the text."""
    from memgpt_lite.engine.store import snapshot  # only needed when forgetting

    bases = agent_bases(row)
    for path in bases:
        snapshot.forget_in_base(path, row.id, turn_ids, passage_ids, list(version_ids))
    return len(bases)


def scrub_recordings(row: Any, secrets: list[str]) -> int:
    """Replace every occurrence of `secrets` inside the agent's recordings (JSON-aware, so
    escaping cannot hide a match). Returns the number of files changed."""
    # Longest first, so a secret that contains another is replaced whole.
    secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
    if not secrets:
        return 0
    changed = 0
    for path in agent_recordings(row):
        lines = path.read_text(encoding="utf-8").splitlines()
        out = [_scrub_line(line, secrets) for line in lines]
        if out != lines:
            _atomic_write(path, "\n".join(out) + "\n")
            changed += 1
    return changed


def _scrub_line(line: str, secrets: list[str]) -> str:
    """The line unchanged unless it holds a secret; then re-encoded compactly like the
    recorder writes it."""
    if not line.strip():
        return line
    try:
        value = json.loads(line)
    except ValueError:  # the last line of a session killed mid-write
        return _scrub_raw(line, secrets)
    scrubbed = _scrub(value, secrets)
    if scrubbed == value:
        return line
    return json.dumps(scrubbed, ensure_ascii=False, separators=(",", ":"))


def _scrub_raw(line: str, secrets: list[str]) -> str:
    """A line that is not JSON, scrubbed as text: each secret as written and as the recorder
    escapes it inside a JSON string (newlines, quotes)."""
    for secret in secrets:
        escaped = json.dumps(secret, ensure_ascii=False)[1:-1]
        line = line.replace(secret, FORGOTTEN).replace(escaped, FORGOTTEN)
    return line


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def delete_recordings(row: Any) -> list[Path]:
    """Delete every recording of the agent and its base snapshots; returns the recordings."""
    paths = agent_recordings(row)
    for path in paths:
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # the agent's folder goes once it is empty
            path.parent.rmdir()
    for base in agent_bases(row):
        base.unlink(missing_ok=True)
    folder = config.recordings_dir() / row.uid
    for empty in (folder / "bases", folder) if row.uid else ():
        with contextlib.suppress(OSError):
            empty.rmdir()
    return paths


def exported_secret(text: str) -> str | None:
    """The name of the env var whose API key appears in `text`, if any (defence in depth:
    keys are never stored, but a user might have pasted one into a message)."""
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        value = os.environ.get(var)
        if value and len(value) >= 8 and value in text:
            return var
    return None
