"""Small text helpers shared across the engine: storable text, one-line previews, and
stored text made inert inside the prompt's tagged sections."""

from __future__ import annotations

import os
import re
from typing import Any

# The tags that give the prompt its structure. Stored text (memory values, search hits, the
# summary, alert listings) must never open or close one, however spaced or cased.
STRUCTURE_TAGS = ("core_memory", "block", "system_alert", "conversation_summary",
                  "previous_summary", "removed_turns")
_TAG_BREAKER = re.compile(r"<(\s*/?\s*)(" + "|".join(STRUCTURE_TAGS) + r")\b", re.IGNORECASE)


def clean_text(text: str) -> str:
    """Text as the engine keeps it, the one rule at every boundary: whatever is not valid
    Unicode becomes U+FFFD. Lone surrogates are what Python makes of undecodable bytes
    (surrogateescape) and what a JSON escape can hold; no file, database or API takes them.
    A surrogate pair written as two code points is joined into the character it encodes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def path_text(path: str) -> str:
    """A file system path as text every database and file takes, told apart from every
    other path: bytes that are not UTF-8 (a surrogate in `path`, as Python decodes them)
    become `\\xNN` escapes. `clean_text` would make two such folders one (both U+FFFD)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return path


_REPR_ESCAPE = re.compile(r"\\\\|\\udc([89a-f][0-9a-f])")  # an escaped backslash, or a byte


def quoted(value: object, limit: int = 80) -> str:
    """`value` as Python's repr shows it (quotes, controls escaped), for naming a bad input
    in an error: at most `limit` characters with the closing quote kept (`'abc…'`), and a
    byte that is not UTF-8 as `\\xNN`, as `path_text` shows it, not as `\\udcNN`."""
    text = _REPR_ESCAPE.sub(lambda m: f"\\x{m.group(1)}" if m.group(1) else m.group(),
                            repr(value))
    if len(text) <= limit:
        return text
    close = text[-1] if text[-1] in "'\"" else ""
    return text[: limit - 1 - len(close)] + "…" + close


def clean_value(value: Any) -> Any:
    """`clean_text` applied to every string inside a JSON-like value (keys included);
    returns the value itself when nothing needed cleaning."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, (list, tuple)):
        items = [clean_value(v) for v in value]
        same = all(a is b for a, b in zip(items, value))
        return value if same else type(value)(items)
    if isinstance(value, dict):
        pairs = [(clean_value(k), clean_value(v)) for k, v in value.items()]
        same = all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items()))
        return value if same else dict(pairs)
    return value


def shorten(text: str, limit: int = 80) -> str:
    """One line of at most `limit` chars, with an ellipsis when cut (UI summaries, reports)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def changed_parts(old: str, new: str) -> tuple[str, str]:
    """What differs between two texts, each with the word around it and "…" where the
    common start or end was left out: ("…in Paris", "…in Lisbon") for a moved fact, so a
    summary line shows the change rather than the same first words twice."""
    old_flat, new_flat = " ".join(old.split()), " ".join(new.split())
    start = 0
    while start < min(len(old_flat), len(new_flat)) and old_flat[start] == new_flat[start]:
        start += 1
    start = old_flat.rfind(" ", 0, start) + 1  # back to the start of the word
    if start:  # and one word more, for context
        start = old_flat.rfind(" ", 0, start - 1) + 1
    end = 0
    most = min(len(old_flat), len(new_flat)) - start
    while end < most and old_flat[-1 - end] == new_flat[-1 - end]:
        end += 1
    cut = end - (old_flat[len(old_flat) - end:] + " ").find(" ") if end else 0
    cut = max(0, cut)

    def part(text: str) -> str:
        middle = text[start:len(text) - cut] if cut else text[start:]
        return ("…" if start else "") + middle.strip() + ("…" if cut else "")
    return part(old_flat), part(new_flat)


def neutralise_tags(text: str) -> str:
    """Stored text as inert data: a structure tag inside it loses its `<` (→ `&lt;`); any
    other markup, such as code, is left as it is."""
    return _TAG_BREAKER.sub(lambda m: "&lt;" + m.group(1) + m.group(2), text)
