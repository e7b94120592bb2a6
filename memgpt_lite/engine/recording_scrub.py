"""Forgetting in recordings: only the matching text changes, each match becoming the
`[forgotten]` marker, JSON-aware (escaping cannot hide a match, and every line stays JSON).
A line without a match keeps its bytes, invalid ones included; a file without one is not
touched at all.

A scrubbed recording says so in its header, `forgotten`: `turns`, the user inputs (1-based)
whose lines changed, and `start`, whether what its replay starts from changed (the header's
snapshot delta or core memory, or the base snapshot file it names, which a forget rewrites).
Replay checks such a recording strictly up to the first turn a forget could have changed,
and from there says that the recording was scrubbed instead of reporting a divergence (see
replay.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memgpt_lite.engine.files import replace_file
from memgpt_lite.engine.matching import Matcher
from memgpt_lite.engine.search import index_text, normalise, plain_text
from memgpt_lite.engine.store import scrub
from memgpt_lite.engine.text import clean_text

# Values that are structure, names or numbers-as-text: never what someone said.
KEEP_KEYS = scrub.STRUCTURAL | {
    "v", "t", "type", "request_digest", "purpose", "model", "stop_reason", "error_kind",
    "agent", "agent_uid", "uid", "base", "created_at", "updated_at", "at", "readings",
    "version", "source", "prompt_digests", "forgotten", "label", "role", "status", "op",
    "method", "by", "level", "settings", "state", "tombstones", "tool", "answer", "scope",
    "started_at", "last_used_at"}
_JSON_ESCAPE = re.compile(r'\\(["\\/bfnrt])')


@dataclass
class RecordingScrub:
    """What a forget changed (or would change) in one recording."""

    path: Path
    lines: int = 0  # lines changed
    turns: set[int] = field(default_factory=set)  # user inputs (1-based) whose lines changed
    start: bool = False  # the state its replay starts from changed
    problem: str | None = None  # why it could not be read or written

    @property
    def changed(self) -> bool:
        return bool(self.lines or self.turns or self.start)


def scrub_recording(path: Path, matcher: Matcher, changed_bases: set[Path] | None = None, *,
                    apply: bool = True, at: str = "") -> RecordingScrub:
    """Scrub `matcher` from one recording (`apply=False`: only count). `changed_bases` are
    the base snapshots this forget rewrote: a recording starting from one is marked too."""
    result = RecordingScrub(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        result.problem = f"cannot read it ({exc.strerror or exc})"
        return result
    pieces = raw.split(b"\n")
    if _cannot_match(raw, matcher) and not (
            isinstance(head := _parse(pieces[0])[1], dict)
            and _base_changed(path, head, changed_bases)):
        return result  # the common case: nothing to decode line by line
    out, header_at, header, turn = [], None, None, 0
    for piece in pieces:
        line, value = _parse(piece)
        if isinstance(value, dict) and value.get("type") == "user":
            turn += 1
        new = _scrub_line(line, value, matcher)
        if header_at is None and isinstance(value, dict) and value.get("type") == "header":
            header_at, header = len(out), (new if new is not None else value)
            result.start |= new is not None or _base_changed(path, value, changed_bases)
        elif new is not None:
            result.turns.add(max(turn, 1))
        if new is not None:
            result.lines += 1
            piece = new if isinstance(new, bytes) else _encode(new)
        out.append(piece)
    if header is not None and (result.start or result.turns):
        out[header_at] = _encode(_mark(header, result, at))
    if apply and result.changed:
        _replace(path, b"\n".join(out), result)
    return result


def _cannot_match(raw: bytes, matcher: Matcher) -> bool:
    return not scrub.could_hold(scrub.probe_pattern(matcher),
                                raw.decode("utf-8", "surrogateescape"))


def _parse(piece: bytes) -> tuple[str, Any]:
    line = piece.decode("utf-8", "surrogateescape")  # bad bytes survive a rewrite
    if not line.strip():
        return line, None
    try:  # a byte-order mark (an editor's) before the header is no JSON
        return line, json.loads(line.removeprefix("\ufeff"))
    except ValueError:
        return line, ValueError


def _scrub_line(line: str, value: Any, matcher: Matcher) -> Any:
    """The line's new value (a dict, or bytes for a line that is not JSON), None when it
    holds no match."""
    if value is None:
        return None
    if value is ValueError:  # a last line cut short by a crash: replay skips it anyway
        new = matcher.replace(line)
        if matcher.hits(_JSON_ESCAPE.sub(lambda m: _unescape(m.group(1)), new)):
            new = ""  # a match hidden by JSON escapes: the broken line goes whole
        return None if new == line else new.encode("utf-8", "surrogateescape")
    scrubbed = _scrub_value(value, matcher)
    if scrubbed == value:
        return None
    if value.get("type") == "header" and isinstance(scrubbed.get("delta"), dict):
        _reindex(scrubbed["delta"], value["delta"])
    return scrubbed


def _unescape(char: str) -> str:
    return {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}.get(char, char)


def _scrub_value(value: Any, matcher: Matcher) -> Any:
    if isinstance(value, str):
        return matcher.replace(value)
    if isinstance(value, dict):
        return {k: v if k in KEEP_KEYS else _scrub_value(v, matcher) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_value(v, matcher) for v in value]
    return value


def _reindex(delta: dict[str, Any], before: dict[str, Any]) -> None:
    """Rows of a snapshot delta whose text changed get their derived columns anew (the
    search index text, the normalised passage text), as the store would compute them."""
    for new, old in zip(delta.get("messages") or [], before.get("messages") or []):
        if new != old and isinstance(new.get("content"), list):
            new["index_text"] = index_text(clean_text(plain_text(new.get("role", ""),
                                                                 new["content"])))
    for new, old in zip(delta.get("passages") or [], before.get("passages") or []):
        if new != old and isinstance(new.get("text"), str):
            new["norm"], new["index_text"] = normalise(new["text"]), index_text(new["text"])


def _base_changed(path: Path, header: dict[str, Any], changed: set[Path] | None) -> bool:
    base = header.get("base")
    return bool(changed and base and (path.parent / str(base)).resolve() in changed)


def _mark(header: dict[str, Any], result: RecordingScrub, at: str) -> dict[str, Any]:
    before = header.get("forgotten") if isinstance(header.get("forgotten"), dict) else {}
    turns = sorted(set(before.get("turns") or []) | result.turns)
    return {**header, "forgotten": {"start": bool(before.get("start")) or result.start,
                                    "turns": turns, "at": at or str(before.get("at") or "")}}


def stamp_uid(path: Path, uid: str) -> None:
    """Name agent `uid` in the header of a recording from before agent uids (which names
    its agent only by the name it had), the rest of the file kept byte for byte. OSError
    when it cannot be read or rewritten."""
    raw = path.read_bytes()
    first, newline, rest = raw.partition(b"\n")
    header = json.loads(first.decode("utf-8", "surrogateescape").removeprefix("\ufeff"))
    if isinstance(header, dict) and not header.get("agent_uid"):
        replace_file(path, _encode({**header, "agent_uid": uid}) + newline + rest)


def _encode(value: dict[str, Any]) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate from a JSON escape: write it escaped
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def _replace(path: Path, data: bytes, result: RecordingScrub) -> None:
    """Write whole to a temporary file beside it (0600), then rename over it."""
    try:
        replace_file(path, data)
    except OSError as exc:
        result.problem = f"cannot rewrite it ({exc.strerror or exc})"
