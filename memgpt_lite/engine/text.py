"""Small text helpers shared across the engine: storable text, one-line previews, and
stored text made inert inside the prompt's tagged sections."""

from __future__ import annotations

import re

# The tags that give the prompt its structure. Stored text (memory values, search hits, the
# summary, alert listings) must never open or close one, however spaced or cased.
STRUCTURE_TAGS = ("core_memory", "block", "system_alert", "conversation_summary",
                  "previous_summary", "removed_turns")
_TAG_BREAKER = re.compile(r"<(\s*/?\s*)(" + "|".join(STRUCTURE_TAGS) + r")\b", re.IGNORECASE)


def clean_text(text: str) -> str:
    """Replace lone surrogates (possible in JSON from a model), which SQLite cannot store,
    with '?'."""
    return text.encode("utf-8", "replace").decode("utf-8")


def shorten(text: str, limit: int = 80) -> str:
    """One line of at most `limit` chars, with an ellipsis when cut (UI summaries, reports)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def neutralise_tags(text: str) -> str:
    """Stored text as inert data: a structure tag inside it loses its `<` (→ `&lt;`); any
    other markup, such as code, is left as it is."""
    return _TAG_BREAKER.sub(lambda m: "&lt;" + m.group(1) + m.group(2), text)
