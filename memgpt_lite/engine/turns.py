"""Atomic turns: grouping stored messages into turns, and how a turn is named and sized
in alerts, summaries and listings."""

from __future__ import annotations

from memgpt_lite.engine.attachments import is_attachment
from memgpt_lite.engine.records import Message, Turn
from memgpt_lite.engine.text import neutralise_tags
from memgpt_lite.engine.tokens import RULE, counted_chars


def group_turns(messages: list[Message]) -> list[Turn]:
    turns: list[Turn] = []
    for m in messages:
        if not turns or turns[-1].id != m.turn_id:
            turns.append(Turn(m.turn_id, []))
        turns[-1].messages.append(m)
    return turns


# Characters per word the opening words of a turn may take (from counting rule 2): CJK, a
# base64 blob or minified code has no spaces, so its first "word" was the whole message, and
# an alert listing forty such turns held them all.
WORD_CHARS = 8


def first_words(turn: Turn, n: int = 12, rule: int = RULE) -> str:
    """The opening words of a turn, as inert data (they go into alerts and summaries): the
    user's own words, not those of a file attached to them; at most `n` * WORD_CHARS
    characters of them, unless `rule` is 1 (a replay of a recording made before that)."""
    for m in turn.messages:
        for b in m.content:
            if b.get("type") == "text" and b.get("text", "").strip() and not is_attachment(b):
                words = b["text"].split()
                text, more = " ".join(words[:n]), len(words) > n
                if rule != 1 and len(text) > n * WORD_CHARS:
                    text, more = text[:n * WORD_CHARS].rstrip(), True
                return neutralise_tags(text + (" …" if more else ""))
    return "(no text)"


def turn_chars(turn: Turn, rule: int = RULE) -> int:
    """What a turn adds to the request JSON, weighed by counting rule `rule` (what the
    counter estimates from)."""
    return counted_chars([m.to_api() for m in turn.messages], rule=rule) - 1


def turn_ranges(ids: list[int]) -> str:
    """[3,4,5,9] → '3–5, 9'"""
    spans: list[list[int]] = []
    for i in sorted(set(ids)):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)
