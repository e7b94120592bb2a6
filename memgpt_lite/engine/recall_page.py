"""How `conversation_search` shows a page of message hits to the model (docs/search.md).

The model pays for every token of a tool result, so layout 2 spends them on
distinct evidence: each day is written once as a heading over its hits (in rank order of the
day's best hit), a hit's line carries only its role, identical texts on a page are shown
once with their other days, and a message longer than `HIT_CHARS` shows a window around its
best-matching sentences, with a marker saying how to read it whole (`turn:N`). The reply
that followed a hit is shown under it, cut at `REPLY_CHARS` (from layout 5 only where a hit
would be windowed, so a reply cut short no longer spends tokens on text the model cannot use).

With `conversations` (the model contract from conversations on, prompts.CONTRACT) each hit
names the agent's conversation it is from: layouts 2 and 3 head each day by conversation
("2025-03-01 · conv 2"), layout 1 starts each line with "[conv 2]"; layout 4 names only a
conversation that is not the current one (the page's first line names that one), as layout 5
does.

Layout 3 lays pages out as layout 2 does; what differs is the order of the first pages'
hits (recall_head.py). Layout 4 orders them as layout 3 does, names fewer
conversations, and passes over a reply of one or two words ("OK.") for the next message
(`REPLY_WORDS`); layout 5 (the default) is layout 4 with longer replies (`REPLY_CHARS`).
Layout 1 is the layout before 2 (every line dated to the minute, the reply labelled, long
texts cut at the end). A replay selects
its recording's layout, so it stays exact.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from memgpt_lite.engine.records import SearchHit
from memgpt_lite.engine.search import PREFIX_CHARS, query_terms
from memgpt_lite.engine.text import neutralise_tags

LAYOUT = 5  # the current layout; recordings name theirs (see recording.py)
HIT_CHARS = 500  # longer hits are cut (layout 1) or windowed (layout 2)
CONTEXT_CHARS = 300  # layout 1: the reply under a hit
# The reply under a hit, cut at this many characters, by layout (from 2). A reply cut short
# is tokens spent on text the model cannot use whole; from layout 5 a reply is cut only
# where a hit would be windowed (HIT_CHARS), so a LoCoMo reply is always shown whole.
REPLY_CHARS = {2: 300, 3: 300, 4: 300, 5: HIT_CHARS}
# Layout 2 shows the reply under a hit only when the hit asks something: the answer to a
# question follows it, while a statement's reply is mostly a reaction ("Wow, congrats!").
REPLIES_UNDER = "questions"  # or "all"
# Hits per page, by layout. Ten one-line hits are ~700 tokens (the engine's count), so two
# pages fill the 1,000-2,000 tokens a model reads of a search (docs/search.md).
PER_PAGE = {1: 5, 2: 10, 3: 10, 4: 10, 5: 10}
# From layout 4 a day heading names its conversation only when that is not the current one
# (the page's first line says which one is current): one conversation's pages name none.
NAME_CURRENT = {4: False, 5: False}
# From layout 4 the reply under a hit is the next message of at least this many words: an
# "OK." says nothing, and in a piped conversation the answer comes after it.
REPLY_WORDS = {4: 3, 5: 3}
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+")
TURN_QUERY = re.compile(r"\s*turn:(\d{1,15})\s*")  # "turn:57": that turn's messages whole


def one_line(text: str, limit: int | None = None) -> str:
    """The text on one line, inert (no tags), cut at `limit` with a count of the rest."""
    text = neutralise_tags(" ".join(text.split()))
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + f" …[+{len(text) - limit} chars]"


def page_lines(hits: list[SearchHit], query: str, layout: int = LAYOUT,
               conversations: bool = False, current: int | None = None) -> list[str]:
    """The lines of one page of message hits, in the given layout; with `conversations`,
    each names its conversation (from layout 4, only one that is not `current`)."""
    if layout == 1:
        return [line for h in hits for line in _layout1(h, conversations)]
    every = NAME_CURRENT.get(layout, True)

    def named(hit: SearchHit) -> bool:
        return conversations and (every or (hit.conversation or 1) != current)

    return _layout2(hits, query, named, REPLY_CHARS[layout])


def _conv(hit: SearchHit) -> str:
    return f"conv {hit.conversation or 1}"


def _layout1(hit: SearchHit, conversations: bool = False) -> list[str]:
    where = f"[{_conv(hit)}] " if conversations else ""
    lines = [f"- {where}{_minute(hit)} {hit.role}{_status(hit)}: "
             f"{one_line(hit.text, HIT_CHARS)}"]
    lines += [f"  ↳ reply {_minute(r)} {r.role}: {one_line(r.text, CONTEXT_CHARS)}"
              for r in hit.context]
    return lines


def _layout2(hits: list[SearchHit], query: str, named: Callable[[SearchHit], bool],
             reply_chars: int) -> list[str]:
    days: dict[str, list[SearchHit]] = {}  # heading (the day, and the conversation) -> hits
    seen: dict[str, list[str]] = {}  # shown text -> the other days it was also said on
    for hit in hits:
        key = " ".join(hit.text.lower().split())
        if key in seen:
            seen[key].append(hit.created_at[:10])
            continue
        seen[key] = []
        heading = hit.created_at[:10] + (f" · {_conv(hit)}" if named(hit) else "")
        days.setdefault(heading, []).append(hit)
    lines: list[str] = []
    for heading, group in days.items():
        lines.append(heading)
        day = heading[:10]
        for hit in group:
            also = sorted(set(seen[" ".join(hit.text.lower().split())]) - {day})
            more = f" (also said {', '.join(also)})" if also else ""
            lines.append(f"- {hit.role}{_status(hit)}: {window(hit, query, HIT_CHARS)}{more}")
            if reply_chars > 0 and (REPLIES_UNDER == "all" or _asks(hit.text)):
                lines += [f"  ↳ {r.role}: {one_line(r.text, reply_chars)}" for r in hit.context]
    return lines


def _asks(text: str) -> bool:
    return "?" in text or "？" in text


def window(hit: SearchHit, query: str, limit: int = HIT_CHARS) -> str:
    """The hit's text on one line; past `limit` characters, the sentences around the one
    that matches the query best, with '…' where text is left out and how to read it all."""
    text = one_line(hit.text)
    if len(text) <= limit:
        return text
    sentences = _SENTENCE.split(text)
    terms = [t.rstrip("*") for t in query_terms(query)]
    scores = [_matches(s, terms) for s in sentences]
    best = max(range(len(sentences)), key=lambda i: (scores[i], -i))
    where = f" [{len(text):,} chars in all; turn:{hit.turn_id} shows it whole]"
    if len(sentences[best]) > limit:  # one long "sentence" (a file, a log): around its match
        return _inside(sentences, best, terms, limit) + where
    start, end, size = best, best + 1, len(sentences[best])
    while True:  # grow towards the better-matching side while it fits
        options = [i for i in (start - 1, end) if 0 <= i < len(sentences)
                   and size + 1 + len(sentences[i]) <= limit]
        if not options:
            break
        pick = max(options, key=lambda i: (scores[i], i == start - 1))
        size += 1 + len(sentences[pick])
        start, end = (pick, end) if pick == start - 1 else (start, end + 1)
    shown = " ".join(sentences[start:end])
    cut = len(shown) > limit or end < len(sentences)
    return ("… " if start else "") + shown[:limit] + (" …" if cut else "") + where


def _inside(sentences: list[str], best: int, terms: list[str], limit: int) -> str:
    """`limit` characters of sentence `best` from a little before its first query term, for
    a text without sentence ends (an attached file), whose match may lie far past its start."""
    sentence = sentences[best]
    low = sentence.lower()
    found = [at for at in (low.find(t[:PREFIX_CHARS]) for t in terms if t) if at >= 0]
    start = max(0, min(min(found, default=0) - limit // 3, len(sentence) - limit))
    before = "… " if start or best else ""
    after = " …" if start + limit < len(sentence) or best < len(sentences) - 1 else ""
    return before + sentence[start:start + limit] + after


def _matches(sentence: str, terms: list[str]) -> int:
    """Query terms the sentence holds (a long word by its first letters, as search does)."""
    low = sentence.lower()
    return sum(1 for t in terms if t[:PREFIX_CHARS] in low)


def _minute(hit: SearchHit) -> str:
    return hit.created_at.replace("T", " ").rstrip("Z")[:16]


def _status(hit: SearchHit) -> str:
    return " (interrupted, never answered)" if hit.status == "interrupted" else ""
