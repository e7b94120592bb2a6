"""What `forget` matches: one rule a user can predict, used for every place it looks.

Three modes, all ignoring case:

* **phrase** (the default): the words as typed, in order, separated by any whitespace (a
  line break included); no stemming, no prefixes. A word matches whole words only: `Rex`
  does not match `Rexford`, `dog` does not match `dogs`. In scripts written without spaces
  between words (Chinese, Japanese, Korean, Thai…) there is no word edge to check, so a
  word written in them matches anywhere.
* **any**: any one of the words, each as in a phrase.
* **regex**: a Python regular expression, as given (`(?-i:…)` makes part of it care about
  case). Python's engine backtracks: a pattern such as `(a+)+$` can take longer than the
  universe's age on one long line. A matcher built from what the user typed gives up on a
  text after `REGEX_SECONDS` with one sentence (a `QueryError`); the preview runs first, so
  a pattern that would hang never starts changing anything. A forget being carried out
  (or finished by a later command) meets texts its preview never saw, written since by
  another process; it keeps the limit, and a text it gives up on is left as it is and
  named (`undecided`) rather than stopping the forget half done or hanging it.

Text is compared in one Unicode form (NFKC), the query's and the stored text's alike: an
accent written as one character (`é`) or as a letter and a combining accent (`e` + U+0301),
and the full-width letters of an East Asian keyboard (`Ｃａｆé`), are the same text. A
match found in the normal form is mapped back to the stored characters it came from, so
only those change.

A `[forgotten]` marker, the words of a fold or clip marker (see shrink.py) and the tag and
clip marker of an attached file (attachments.py) are never part of a match (a match running
over one keeps what lies either side): forgetting twice changes nothing the second time,
even `forget forgotten` or `forget --any the full`.
"""

from __future__ import annotations

import contextlib
import functools
import re
import signal
import threading
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from memgpt_lite.engine.attachments import structure_spans
from memgpt_lite.engine.shrink import marker_spans
from memgpt_lite.engine.text import clean_text, quoted

FORGOTTEN = "[forgotten]"
MODES = ("phrase", "any", "regex")
MAX_QUERY = 1_000
# How long a user's regex may search one text. Matching a sane pattern on the largest text
# stored (20,000 characters) takes well under a millisecond; this is for the pattern that
# would never return.
REGEX_SECONDS = 3.0

_NO_SPACES = ("\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u1100-\u11ff\u3040-\u30ff"
              "\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
              "\U00020000-\U0002ffff")
# A letter or digit of a script that separates words with spaces: where one is next to a
# match, the match is inside a longer word.
_SPACED = f"[^\\W_{_NO_SPACES}]"
_SPACED_CHAR = re.compile(_SPACED)
_MARKER = re.compile(re.escape(FORGOTTEN))


class QueryError(ValueError):
    """The query cannot be used; one sentence for the user."""


@dataclass(frozen=True)
class Matcher:
    """A compiled forget query: `spans(text)` finds what it matches in a text."""

    query: str
    mode: str
    pattern: re.Pattern[str]
    bounded: bool = False  # a regex gives up on a text after REGEX_SECONDS (see above)
    # Give up on a text quietly (it counts as no match) and note it in `undecided`, instead
    # of raising QueryError: for a forget under way (see above).
    skip_slow: bool = False
    undecided: list[int] = field(default_factory=list, compare=False)  # their sizes
    _slow: set[int] = field(default_factory=set, compare=False, repr=False)
    # What a bounded search found in a text (by its hash) that matched, or took long: the
    # forget after a preview does what the preview found, however busy the machine is now.
    _memo: dict[int, list[tuple[int, int]]] = field(default_factory=dict, compare=False,
                                                    repr=False)

    @classmethod
    def build(cls, query: str, mode: str = "phrase", *, bounded: bool = True) -> Matcher:
        """`bounded`: a regex gives up on a text after REGEX_SECONDS (see above)."""
        if mode not in MODES:
            raise QueryError(f"Unknown match mode {mode!r} (modes: {', '.join(MODES)}).")
        # The one rule for text (text.py): bytes that are not UTF-8 (argv, a piped chat) were
        # stored as U+FFFD, so that is what the same bytes in a query must look for.
        query = clean_text(query)
        if not query.strip():
            raise QueryError("Say what to forget: the query is empty.")
        if len(query) > MAX_QUERY:
            raise QueryError(f"The query is {len(query):,} characters; at most {MAX_QUERY:,}.")
        return cls(query, mode, _compile(query, mode), bounded and mode == "regex")

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> Matcher:
        """The matcher of a forget written down, to finish it (see `carrying_out`)."""
        return cls.build(str(spec["query"]), str(spec.get("mode") or "phrase")).carrying_out()

    def carrying_out(self) -> Matcher:
        """This matcher for a forget under way: a text the pattern runs away on is left as
        it is and named in `undecided` (each forget its own list)."""
        return replace(self, skip_slow=True, undecided=[], _slow=set(), _memo=self._memo)

    def spec(self) -> dict[str, str]:
        return {"query": self.query, "mode": self.mode}

    def describe(self) -> str:
        """The query as the user should read it back, e.g. 'Paris trip' or any of 'a b'."""
        shown = {"phrase": "{!r}", "any": "any word of {!r}", "regex": "the pattern {!r}"}
        return shown[self.mode].format(self.query)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the query matches in `text` (non-empty, not overlapping, outside every
        [forgotten] marker and the words of fold and clip markers). A match that runs over
        a marker keeps its parts on either side that hold more than whitespace: a pattern
        such as `(?s).+` forgets the text around an earlier forget's marker too, and the
        markers themselves never match, so forgetting twice changes nothing."""
        if not text:
            return []
        markers = [m.span() for m in _MARKER.finditer(text)] if FORGOTTEN in text else []
        markers = sorted(markers + marker_spans(text) + structure_spans(text))
        out = []
        for start, end in self._matches(text):
            out += [(a, b) for a, b in _outside(start, end, markers) if text[a:b].strip()]
        return out

    def _matches(self, text: str) -> list[tuple[int, int]]:
        folded, origin = _folded(text)
        if origin is None:
            return self._find(folded, len(text))
        return _merged([_back(a, b, origin, len(text))
                        for a, b in self._find(folded, len(text))])

    def _find(self, text: str, size: int) -> list[tuple[int, int]]:
        if not self.bounded:
            return [m.span() for m in self.pattern.finditer(text)]
        key = hash(text)
        if key in self._memo:
            return list(self._memo[key])
        if key in self._slow:  # given up on already: each place reads a text again
            return []
        began = time.monotonic()
        try:
            with _time_limit(REGEX_SECONDS):
                spans = [m.span() for m in self.pattern.finditer(text)]
        except _TooSlow:
            if self.skip_slow:
                self._slow.add(key)
                self.undecided.append(size)  # its size only: never a copy of the text
                return []
            raise QueryError(
                f"The pattern {quoted(self.query)} took over {REGEX_SECONDS:g} s on one text of "
                f"{size:,} characters and was stopped: it backtracks without end (nested "
                f"repeats such as (a+)+ do); write it without them.") from None
        if spans or time.monotonic() - began > REGEX_SECONDS / 100:
            self._memo[key] = spans
        return spans

    def hits(self, text: str) -> bool:
        return bool(self.spans(text))

    def replace(self, text: str) -> str:
        """`text` with every match replaced by the [forgotten] marker."""
        spans = self.spans(text)
        if not spans:
            return text
        parts, last = [], 0
        for start, end in spans:
            parts += [text[last:start], FORGOTTEN]
            last = end
        return "".join(parts) + text[last:]

    def drop_lines(self, text: str) -> tuple[str, list[str]]:
        """`text` without the lines a match touches (a phrase may run over a line break,
        then both lines go); returns (what is left, the lines removed)."""
        spans = self.spans(text)
        if not spans:
            return text, []
        kept, removed = [], []
        for start, line in _lines(text):
            touched = any(a < start + len(line) and start < b for a, b in spans)
            (removed if touched else kept).append(line)
        left = "".join(kept)
        if left.endswith("\n") and not text.endswith("\n"):
            left = left[:-1]
        return left, [line.rstrip("\n") for line in removed]

    def drop_sentences(self, text: str) -> tuple[str, list[str]]:
        """`text` without the sentences a match touches (a line break also ends one): for
        prose such as the running summary, written as one paragraph, where a line would be
        the whole of it. Returns (what is left, the sentences removed)."""
        spans = self.spans(text)
        if not spans:
            return text, []
        kept, removed = [], []
        for start, end in _sentences(text):
            touched = any(a < end and start < b for a, b in spans)
            (removed if touched else kept).append(text[start:end])
        return "".join(kept).rstrip(), [" ".join(part.split()) for part in removed]

    def excerpt(self, text: str, width: int = 100) -> str:
        """One line of `text` around its first match (for previews)."""
        spans = self.spans(text)
        flat_start = spans[0][0] if spans else 0
        lead = max(0, flat_start - width // 3)
        piece = text[lead:lead + width * 2]
        flat = " ".join(piece.split())
        if len(flat) > width:
            flat = flat[: width - 1] + "…"
        return ("…" if lead else "") + flat


def fold(text: str) -> str:
    """`text` in the one Unicode form a forget compares (see the module docstring)."""
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text
    return unicodedata.normalize("NFKC", text)


def fold_trigger(query: str) -> frozenset[str]:
    """The stored characters that may fold into a match of `query` (a phrase's or any-word's
    words): a pre-filter, so that only texts holding one are folded before a search. They are
    the characters whose NFKC form holds one of the query's letters, in any case (a
    full-width letter, a ligature), and, when the query has letters beyond ASCII, the marks
    that join the letter before them (an accent written apart, a Hangul vowel)."""
    folded = fold(query)
    wanted = {x for ch in folded for form in (ch, ch.lower(), ch.upper(), ch.casefold())
              for x in form}
    chars = {c for c, form in _foldable().items()
             if any(x in wanted or x.lower() in wanted or x.upper() in wanted for x in form)}
    if not folded.isascii():
        chars |= _joining()
    return frozenset(chars)  # a set, not a regex class: far quicker to check a text with


@functools.cache
def _foldable() -> dict[str, str]:
    """Every character NFKC changes, with what it becomes (none beyond these planes)."""
    out = {}
    for cp in (*range(0x80, 0xD800), *range(0xE000, 0x20000), *range(0x2F800, 0x2FA20)):
        form = unicodedata.normalize("NFKC", chr(cp))
        if form != chr(cp):
            out[chr(cp)] = form
    return out


@functools.cache
def _joining() -> frozenset[str]:
    """Characters that may compose with the one before them: marks, and Hangul's vowels and
    final consonants written as jamo."""
    marks = {chr(cp) for cp in (*range(0x300, 0xD800), *range(0xE000, 0x20000))
             if unicodedata.combining(chr(cp)) or unicodedata.category(chr(cp))[0] == "M"}
    jamo = {chr(cp) for cp in (*range(0x1160, 0x1200), *range(0xD7B0, 0xD800))}
    return frozenset(marks | jamo)


# Where text may change in NFKC: a run of characters beyond ASCII, with the ASCII letter
# before it (`e` + a combining accent). ASCII itself never changes, nor joins what follows.
_BEYOND_ASCII = re.compile(r"[\x00-\x7f]?[^\x00-\x7f]+")


def _folded(text: str) -> tuple[str, list[tuple[int, int]] | None]:
    """`text` as `fold` gives it, and for each of its characters the span of `text` it came
    from (None when `text` is already in that form: the common case, and no copy is made).
    Each cluster (a character with the marks that combine with it) is normalised on its
    own, so every character of the result maps back to the stored characters it stands for;
    ASCII between the runs that change is copied as it is."""
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text, None
    pieces, origin, last = [], [], 0
    for run in _BEYOND_ASCII.finditer(text):
        pieces.append(text[last:run.start()])
        origin += [(i, i + 1) for i in range(last, run.start())]
        for start, end in _clusters(text, run.start(), run.end()):
            piece = unicodedata.normalize("NFKC", text[start:end])
            pieces.append(piece)
            origin += [(start, end)] * len(piece)
        last = run.end()
    pieces.append(text[last:])
    origin += [(i, i + 1) for i in range(last, len(text))]
    return "".join(pieces), origin


def _clusters(text: str, start: int, stop: int) -> Iterator[tuple[int, int]]:
    if unicodedata.is_normalized("NFKC", text[start:stop]):  # a run that stays as it is
        yield from ((i, i + 1) for i in range(start, stop))
        return
    for i in range(start + 1, stop):
        if not _joins(text[start:i], text[i]):
            yield start, i
            start = i
    yield start, stop


def _joins(before: str, char: str) -> bool:
    """Whether `char` changes in NFKC with the cluster `before` it (a combining accent, a
    Hangul vowel after its consonant), so that the two are normalised together."""
    if char.isascii() and before[-1].isascii():
        return False
    if unicodedata.combining(char):
        return True
    norm = unicodedata.normalize
    return norm("NFKC", before + char) != norm("NFKC", before) + norm("NFKC", char)


def _back(start: int, end: int, origin: list[tuple[int, int]], size: int) -> tuple[int, int]:
    """A span of the folded text as the span of the stored text it came from."""
    if start >= end:
        at = origin[start][0] if start < len(origin) else size
        return at, at
    return origin[start][0], origin[end - 1][1]


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Two matches inside one cluster (`ﬁ` is `fi`) are one span of the stored text."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def _outside(start: int, end: int, markers: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [start, end) outside the (sorted) marker spans."""
    parts = []
    for a, b in markers:
        if b <= start or a >= end:
            continue
        if a > start:
            parts.append((start, a))
        start = max(start, b)
    if end > start:
        parts.append((start, end))
    return parts


class _TooSlow(Exception):
    pass


def _too_slow(signum: int, frame: Any) -> None:
    raise _TooSlow


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise _TooSlow in the block after `seconds`. Python's regex engine checks for signals
    while it backtracks, so an interval timer stops it; only the main thread gets signals,
    so elsewhere (and without SIGALRM) the block runs unbounded."""
    if threading.current_thread() is not threading.main_thread() \
            or not hasattr(signal, "setitimer"):
        yield
        return
    previous = signal.signal(signal.SIGALRM, _too_slow)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# A sentence ends at . ! ? before a space or the end, at 。！？ (no space follows them), or
# at a line break; its trailing spaces go with it.
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)\s*|[。！？]+\s*|\n\s*")


def _sentences(text: str) -> Iterator[tuple[int, int]]:
    start = 0
    for end in _SENTENCE_END.finditer(text):
        if end.end() > start:
            yield start, end.end()
            start = end.end()
    if start < len(text):
        yield start, len(text)


def _lines(text: str) -> Iterator[tuple[int, str]]:
    pos = 0
    for line in text.splitlines(keepends=True):
        yield pos, line
        pos += len(line)


def _compile(query: str, mode: str) -> re.Pattern[str]:
    if mode == "regex":
        try:
            return re.compile(fold(query), re.IGNORECASE)  # text is compared folded
        except re.error as exc:
            raise QueryError(f"{query!r} is not a valid regular expression ({exc}).") from None
    words = fold(query).split()
    if mode == "phrase":
        return re.compile(_edged(r"\s+".join(map(re.escape, words)), words[0], words[-1]),
                          re.IGNORECASE)
    alternatives = sorted(set(words), key=len, reverse=True)
    return re.compile("|".join(_edged(re.escape(w), w, w) for w in alternatives), re.IGNORECASE)


def _edged(body: str, first: str, last: str) -> str:
    """`body` that matches only at word edges, where the query starts or ends with a letter
    or digit of a script that has them."""
    before = f"(?<!{_SPACED})" if _SPACED_CHAR.match(first[0]) else ""
    after = f"(?!{_SPACED})" if _SPACED_CHAR.match(last[-1]) else ""
    return f"{before}(?:{body}){after}"
